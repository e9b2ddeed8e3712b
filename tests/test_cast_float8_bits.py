"""Saturating casts to float8e4m3fn (built from the bits on the device) against ml_dtypes.

Oracle: ONNX Cast's saturate rule (|x| past the largest finite value, +-inf included, becomes
+-448; NaN stays NaN) followed by round-to-nearest-even, i.e. ml_dtypes' ``astype`` of the
input clipped to [-448, 448]. Compared bit for bit, NaN signs and -0 included.
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import jaxops

E4M3FN = ml_dtypes.float8_e4m3fn


def _want(x: np.ndarray) -> np.ndarray:
  with np.errstate(invalid="ignore"):
    return np.clip(x.astype(np.float32), -448.0, 448.0).astype(E4M3FN).view(np.uint8)


def _float32_patterns() -> np.ndarray:
  # Every upper half of the float32 bits (sign, exponent, the mantissa bits that decide the
  # float8 rounding, ties included), each with lower halves around the rounding points.
  hi = np.arange(1 << 16, dtype=np.uint32) << 16
  lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
  lows = np.concatenate([lows, np.random.default_rng(0).integers(0, 1 << 16, 4, np.uint32)])
  return (hi[:, None] | lows[None, :]).ravel().view(np.float32)


@pytest.mark.parametrize("jit", [False, True])
def test_float32_bit_patterns(jit):
  x = _float32_patterns()
  f = (lambda a: jaxops.cast(a, "FLOAT8E4M3FN"))
  got = np.asarray(jax.jit(f)(x) if jit else f(x)).view(np.uint8)
  want = _want(x)
  bad = np.nonzero(got != want)[0]
  assert bad.size == 0, [(hex(int(x.view(np.uint32)[i])), hex(got[i]), hex(want[i]))
                         for i in bad[:5]]


@pytest.mark.parametrize("src", [np.float16, ml_dtypes.bfloat16])
def test_every_half_precision_value(src):
  x = np.arange(1 << 16, dtype=np.uint16).view(src)  # every bit pattern, NaNs and infs included
  got = np.asarray(jaxops.cast(x, np.dtype(E4M3FN))).view(np.uint8)
  np.testing.assert_array_equal(got, _want(x))


def test_cast_like_and_rounding_points_by_hand():
  # Hand-derived from the float8e4m3fn layout (bias 7, 3 mantissa bits, no infinities):
  # 448 = 1.75 * 2**8 is 0x7E; 464 lies half way to the next (non-finite) step and saturates;
  # 1 + 2**-4 is a tie between 1 (0x38) and 1.125 (0x39): even -> 0x38; 1.1875 ties up to
  # 1.25 (0x3A); 2**-9 is the smallest subnormal (0x01); 2**-10 ties to 0; 3 * 2**-10 ties to
  # 2**-8 (0x02); 0.015 rounds up to 2**-6 (0x08), the smallest normal.
  x = np.array([448.0, 464.0, 1.0625, 1.1875, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 0.015, -0.0,
                -np.inf], np.float32)
  want = [0x7E, 0x7E, 0x38, 0x3A, 0x01, 0x00, 0x02, 0x08, 0x80, 0xFE]
  got = jaxops.cast_like(x, np.zeros(1, E4M3FN))
  np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want)
