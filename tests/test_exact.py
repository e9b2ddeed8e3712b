"""jaxops._exact against exact rational arithmetic (fractions) and NumPy's unfused float
arithmetic, with each program compiled at XLA's default backend optimization level (3, where LLVM
contracts a multiplication and an addition into a fused multiply-add) and at level 0 (where it
does not, as the suite's conftest sets): the results must not depend on it."""

from __future__ import annotations

from fractions import Fraction

import jax
import numpy as np
import pytest

from _ulps import compiled, with_neighbours
from jaxops import _exact

LEVELS = (0, 3)


def _nearest(value: Fraction, dtype) -> np.floating:
  """``value`` rounded to nearest ``dtype``, ties to even (from the neighbours of a float64
  approximation, compared exactly)."""
  bits = np.uint32 if dtype == np.float32 else np.uint64
  c = dtype(float(value))
  cands = (c, np.nextafter(c, dtype(np.inf)), np.nextafter(c, dtype(-np.inf)))
  return min(cands, key=lambda v: (abs(Fraction(float(v)) - value),
                                   int(np.array(v, dtype).view(bits)) & 1))


def _values(dtype, n: int, rng: np.random.Generator) -> np.ndarray:
  """Points where ``a * n - 1`` is an odd integer (a half-pixel of ``(a * n - 1) / 2``) in
  exact arithmetic, their neighbours up to 3 ulps away, and random values of many
  magnitudes (every half-pixel of up to 100 pixels, else 400 of them)."""
  k = np.arange(-2 * n - 2, 2 * n + 3) if n <= 100 else rng.integers(-2 * n - 2, 2 * n + 3, 400)
  ties = ((2 * k + 2) / n).astype(dtype)
  far = (rng.standard_normal(300) * 10.0 ** rng.integers(-30, 25, 300)).astype(dtype)
  return np.concatenate([with_neighbours(ties, 3), rng.uniform(-3, 3, 300).astype(dtype), far,
                         np.array([0, -0.0, 1, -1], dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_is_the_product_and_sum_rounded_once(dtype):
  rng = np.random.default_rng(5401)
  limit = _exact.exact_limit(dtype)
  for n in (1, 3, 7, 31, 100, limit, int(rng.integers(2, limit))):
    a = _values(dtype, n, rng)
    want = np.array([_nearest(Fraction(float(v)) * n - 1, dtype) for v in a], dtype)
    for level in LEVELS:
      got = np.asarray(compiled(lambda v: _exact.fused(v, n, -1.0), a, level=level)(a))
      np.testing.assert_array_equal(got, want, err_msg=f"n={n} level={level}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_separate_is_the_product_rounded_then_the_sum(dtype):
  rng = np.random.default_rng(5402)
  two, three = _exact.exact_limit(dtype), _exact.exact_limit(dtype, 3)
  for n in (1, 3, 7, 31, 100, two, two + 1, 54321, three):  # past two: a in three pieces
    a = _values(dtype, n, rng)
    with np.errstate(over="ignore"):
      want = a * dtype(n) + dtype(-1)  # NumPy rounds each operation
    for level in LEVELS:
      got = np.asarray(compiled(lambda v: _exact.separate(v, n, -1.0), a, level=level)(a))
      np.testing.assert_array_equal(got, want, err_msg=f"n={n} level={level}")


def test_the_two_roundings_differ_where_grid_sample_needs_them_to():
  # float64 -1/3 on three pixels: (g + 1) * 3 - 1 is 1 + 2**-52 rounded once, 1 rounded twice
  a = np.array([1 - 0.3333333333333333])
  for level in LEVELS:
    once = compiled(lambda v: _exact.fused(v, 3, -1.0), a, level=level)(a)
    twice = compiled(lambda v: _exact.separate(v, 3, -1.0), a, level=level)(a)
    assert (float(once[0]), float(twice[0])) == (1 + 2 ** -52, 1.0)


def test_non_finite_and_overflowing_values_follow_the_plain_expression():
  a = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38], np.float32)
  for f in (_exact.fused, _exact.separate):
    got = np.asarray(jax.jit(lambda v: f(v, 7, -1.0))(a))
    with np.errstate(over="ignore", invalid="ignore"):
      want = a * np.float32(7) - np.float32(1)
    np.testing.assert_array_equal(got, want)


def test_lengths_that_cannot_be_split_exactly_are_refused():
  assert (_exact.exact_limit(np.float32), _exact.exact_limit(np.float32, 3)) == (4095, 65535)
  assert (_exact.exact_limit(np.float64), _exact.exact_limit(np.float64, 3)) == (
      2 ** 26 - 1, 2 ** 35 - 1)
  assert _exact.exact_limit(np.float16) == 0
  with pytest.raises(ValueError, match="outside"):
    _exact.fused(jax.numpy.zeros(3, np.float32), 4096, -1.0)
  with pytest.raises(ValueError, match="outside"):
    _exact.separate(jax.numpy.zeros(3, np.float32), 65536, -1.0)


def test_float32_roundings_agree_past_the_exact_limits():
  """Where ``fused`` and ``separate`` stop (float32 axes past 4095 and 65535 pixels),
  grid_sample leaves the coordinate to XLA, which may round either way. That is safe only if
  the two roundings read the same pixel there: checked at every half-pixel, and 3 ulps either
  side, of 40 axis lengths from 4096 to 131071 (float64 holds the product exactly, so its
  rounding to float32 is the once-rounded value)."""
  rng = np.random.default_rng(5405)
  lengths = np.concatenate([[4096, 4097, 65535, 65536, 65537, 131071],
                            rng.integers(4098, 131071, 34)])
  for n in lengths:
    k = np.arange(-3, 2 * n + 3)
    a = with_neighbours(((k + 1) / n - 1).astype(np.float32), 3) + np.float32(1)
    twice = (a * np.float32(n)).astype(np.float32) - np.float32(1)
    once = (a.astype(np.float64) * int(n) - 1).astype(np.float32)
    np.testing.assert_array_equal(np.rint(twice / 2), np.rint(once / 2), err_msg=f"n={n}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rounded_product_is_rounded_before_the_sum(dtype):
  """``rounded(a * b) + c`` is NumPy's unfused ``a * b + c`` at both levels; the unprotected
  expression is not at level 3 for these values (which is why ``rounded`` exists)."""
  rng = np.random.default_rng(5407)
  a = np.concatenate([(np.arange(1, 400) * 0.5), rng.uniform(-50, 50, 400)]).astype(dtype)
  b, c = dtype(np.float32(0.1)), dtype(-0.5)
  want = a * b + c
  for level in LEVELS:
    got = compiled(lambda v: _exact.rounded(v * b) + c, a, level=level)(a)
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"level={level}")
  fused = np.asarray(compiled(lambda v: v * b + c, a, level=3)(a))
  assert (fused != want).any()
  nan = np.array([np.nan, np.inf, -np.inf], dtype)
  np.testing.assert_array_equal(np.asarray(_exact.rounded(nan * b)), nan * b)
