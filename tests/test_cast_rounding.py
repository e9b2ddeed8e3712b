"""Casts into the narrow float types round once, from the exact input (DEVIATIONS Cast #7).

The oracle is exact rational rounding written here with ``fractions.Fraction``: every finite
value of the target type is enumerated from its bit patterns, the nearest one is chosen (ties to
the even bit pattern, i.e. the even mantissa), and the spec's out-of-range rules are applied.
ml_dtypes' ``astype`` is no oracle for float64 inputs: it rounds float64 through float32 first,
so that 1.0625 + 2**-40 becomes 1.0 in FLOAT8E4M3FN instead of 1.125.

The inputs sit a relative 2**-40 (float64) or 2**-18 (float32) above and below every midpoint
between neighbours of the target type, and on the midpoints themselves: exactly the values where
a double rounding (through float32, or through a wider narrow type) goes wrong.
"""

from __future__ import annotations

import bisect
import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxops

# Target type -> (name, what a rounded [x] > max becomes without saturate, has a negative zero).
_TYPES = {
    ml_dtypes.float8_e4m3fn: ("FLOAT8E4M3FN", "nan", True),
    ml_dtypes.float8_e4m3fnuz: ("FLOAT8E4M3FNUZ", "nan", False),
    ml_dtypes.float8_e5m2: ("FLOAT8E5M2", "inf", True),
    ml_dtypes.float8_e5m2fnuz: ("FLOAT8E5M2FNUZ", "nan", False),
    ml_dtypes.float4_e2m1fn: ("FLOAT4E2M1", None, True),  # always saturates (DEVIATIONS #5)
}
# Relative distance of the near-midpoint inputs: exact in each source type (the targets' values
# have at most 4 significant bits).
_EPS = {np.float64: 2.0**-40, np.float32: 2.0**-18}


@functools.cache
def _positive_grid(dtype) -> tuple[list[Fraction], list[int]]:
  """The type's finite values >= 0 in increasing order, with their bit patterns, then one more:
  the value the next bit pattern would have if the exponent range went on (for rounding past
  the largest finite value). Bit patterns of the non-negative values increase with the value."""
  bits = 4 if dtype == ml_dtypes.float4_e2m1fn else 8
  patterns = np.arange(1 << (bits - 1), dtype=np.uint8)  # sign bit clear
  values = patterns.view(dtype).astype(np.float64)  # exact: few bits
  finite = np.isfinite(values)
  grid = [Fraction(float(v)) for v in values[finite]]
  pats = [int(p) for p in patterns[finite]]
  assert grid == sorted(grid) and len(set(grid)) == len(grid)
  step = grid[-1] - grid[-2]  # the largest value's binade spacing (same binade: few-bit types)
  return grid + [grid[-1] + step], pats + [pats[-1] + 1]


def _round_exact(x: Fraction, dtype, saturate: bool) -> float:
  """ONNX Cast-24 of the exact value ``x`` into ``dtype``, as a float (NaN, +-Inf, +-0 kept)."""
  name, overflow, signed_zero = _TYPES[dtype]
  grid, pats = _positive_grid(dtype)
  fmax = grid[-2]
  sign = -1.0 if x < 0 else 1.0
  a = abs(x)
  if saturate or overflow is None:
    a = min(a, fmax)  # Cast-24 saturate table: [x] > FLT_MAX -> FLT_MAX; float4 always
  # Nearest grid value; on a tie the even bit pattern (even mantissa) wins. The candidates are
  # the two grid values around a (a <= fmax + half a step, so both exist).
  hi = bisect.bisect_left(grid, a)
  near = [k for k in (hi - 1, hi) if 0 <= k < len(grid)]
  r = grid[min(near, key=lambda k: (abs(grid[k] - a), pats[k] & 1))]
  if r > fmax:  # only without saturate: [x] > FLT_MAX
    return float("nan") if overflow == "nan" else sign * float("inf")
  if r == 0 and not signed_zero:
    return 0.0  # the FNUZ types have no -0
  return sign * float(r)


def _near_midpoints(dtype, src) -> np.ndarray:
  """Midpoints of neighbouring values of ``dtype`` (the extra value past max included), each
  nudged a relative ``_EPS[src]`` down and up, and the midpoints themselves; both signs."""
  grid, _ = _positive_grid(dtype)
  eps = Fraction(_EPS[src])
  mids = [(a + b) / 2 for a, b in zip(grid, grid[1:])]
  xs = [m * f for m in mids for f in (1 - eps, 1, 1 + eps)]
  xs = [float(v) for v in xs]
  out = np.array(xs + [-v for v in xs], src)
  assert all(Fraction(float(v)) == Fraction(w) for v, w in zip(out, xs + [-v for v in xs]))
  return out


def _same(got, want_values, dtype):
  got = np.asarray(got)
  assert got.dtype == np.dtype(dtype)
  g = got.astype(np.float64)
  w = np.asarray(want_values, np.float64)
  ok = (np.isnan(g) & np.isnan(w)) | ((g == w) & (np.signbit(g) == np.signbit(w)))
  assert ok.all(), f"{(~ok).sum()} mismatches, e.g. got {g[~ok][:6]} want {w[~ok][:6]}"


def test_the_oracle_on_hand_derived_cases():
  # FLOAT8E4M3FN near 1 has spacing 2**-3: 1.0, 1.125 (mantissa 001, odd); midpoint 1.0625.
  assert _round_exact(Fraction(1.0625) + Fraction(2.0**-40), ml_dtypes.float8_e4m3fn, True) == 1.125
  assert _round_exact(Fraction(1.0625), ml_dtypes.float8_e4m3fn, True) == 1.0  # tie: even 000
  # FLOAT8E5M2 near 1: spacing 2**-2; 1.125 + eps -> 1.25. FLOAT4E2M1: 1, 1.5; 1.25 + eps -> 1.5.
  assert _round_exact(Fraction(1.125) + Fraction(2.0**-40), ml_dtypes.float8_e5m2, True) == 1.25
  assert _round_exact(Fraction(1.25) + Fraction(2.0**-40), ml_dtypes.float4_e2m1fn, True) == 1.5
  # Past max without saturate: E4M3FN 448 (110) and the would-be 480 (111) tie at 464 -> 448;
  # above 464 -> NaN. E5M2: 57344 (11) and 65536 (00) tie at 61440 -> Inf.
  assert _round_exact(Fraction(464), ml_dtypes.float8_e4m3fn, False) == 448
  assert np.isnan(_round_exact(Fraction(464) + 1, ml_dtypes.float8_e4m3fn, False))
  assert _round_exact(Fraction(-61440), ml_dtypes.float8_e5m2, False) == -np.inf
  assert _round_exact(Fraction(-61440), ml_dtypes.float8_e5m2, True) == -57344
  # Below half the smallest subnormal: +-0; FNUZ has no -0.
  # E5M2FNUZ (bias 16): smallest subnormal 2**(1 - 16 - 2) = 2**-17; E5M2 (bias 15): 2**-16.
  assert _round_exact(-Fraction(2.0**-19), ml_dtypes.float8_e5m2fnuz, True) == 0.0
  assert _round_exact(-Fraction(2.0**-17), ml_dtypes.float8_e5m2fnuz, True) == -(2.0**-17)
  assert np.signbit(_round_exact(-Fraction(2.0**-18), ml_dtypes.float8_e5m2, True))


@pytest.mark.parametrize("src", [np.float64, np.float32], ids=["float64", "float32"])
def test_halfway_plus_and_minus_epsilon_round_once(src):
  # x64 is on for the suite (tests/conftest.py); without it float64 inputs would reach jaxops
  # as float32 already rounded, and this test would not test the float64 path.
  assert jnp.asarray(np.zeros(1, src)).dtype == np.dtype(src)
  cases = [(dtype, saturate) for dtype in _TYPES for saturate in (True, False)
           if saturate or _TYPES[dtype][1] is not None]
  xs = {dtype: _near_midpoints(dtype, src) for dtype in _TYPES}
  got = jax.jit(lambda *a: [jaxops.cast(v, np.dtype(d), saturate=s)
                            for v, (d, s) in zip(a, cases)])(*[xs[d] for d, _ in cases])
  for (dtype, saturate), g in zip(cases, got):
    want = [_round_exact(Fraction(float(v)), dtype, saturate) for v in xs[dtype]]
    _same(g, want, dtype)


# --- FLOAT8E8M0 ---------------------------------------------------------------------------------


def _e8m0_exact(x: Fraction, mode: str, saturate: bool) -> float:
  """Cast-24 into FLOAT8E8M0 of the exact ``x``: x = m * 2**e with m in [1, 2); ``up`` gives
  2**(e+1) when m > 1, ``down`` 2**e, ``nearest`` 2**(e+1) when m >= 1.5 (ties up). Range is
  judged on x: x > 2**127 -> 2**127 (saturate) or NaN; x < 2**-127 (0 and negative x
  included) -> 2**-127 (saturate) or NaN."""
  top, bottom = Fraction(2) ** 127, Fraction(2) ** -127
  if x > top:
    return 2.0**127 if saturate else float("nan")
  if x < bottom:
    return 2.0**-127 if saturate else float("nan")
  e = 0
  while Fraction(2) ** e > x:
    e -= 1
  while Fraction(2) ** (e + 1) <= x:
    e += 1
  m = x / Fraction(2) ** e
  up = {"up": m > 1, "down": False, "nearest": m >= Fraction(3, 2)}[mode]
  return float(Fraction(2) ** (e + up))


def test_e8m0_round_modes_read_float64_exactly():
  # Just above and below 2**e (the `up`/`down` boundary) and 1.5 * 2**e (the `nearest` one),
  # a relative 2**-40 away: a float32 intermediate would erase the difference.
  es = np.arange(-126, 127, 7)
  base = np.concatenate([np.exp2(es), 1.5 * np.exp2(es)])
  xs = np.concatenate([base * (1 - 2.0**-40), base, base * (1 + 2.0**-40),
                       [2.0**127 * (1 + 2.0**-40), 2.0**-127 * (1 - 2.0**-40)]])
  cases = [(m, s) for m in ("up", "down", "nearest") for s in (True, False)]
  got = jax.jit(lambda v: [jaxops.cast(v, "FLOAT8E8M0", round_mode=m, saturate=s)
                           for m, s in cases])(xs)
  for (mode, saturate), g in zip(cases, got):
    want = [_e8m0_exact(Fraction(float(v)), mode, saturate) for v in xs]
    _same(g, want, ml_dtypes.float8_e8m0fnu)
