"""Products and sums rounded as a C kernel rounds them, whatever XLA's compiler does.

XLA's CPU backend always allows LLVM to contract a multiplication and an addition into one fused
multiply-add (one rounding), and at its default optimization level LLVM does so (where the
product has a single use); at ``--xla_backend_optimization_level=0`` it does not. A pixel
coordinate ``(g + 1) * L - 1`` is therefore rounded once or twice depending on the flags and on
what else reads the product, and where it lies within an ulp of a half-pixel, nearest sampling
reads a different pixel; a box extent ``y2 * s - y1 * s`` that should be 3 becomes 3.0000002
and adaptive sampling takes one more sample per bin. These functions fix the rounding:

- ``separate(a, n, c)`` rounds the product ``a * n`` and then the sum (as C compiled without
  FMA computes it: onnx.reference, onnxruntime, ATen's scalar kernels), ``fused(a, n, c)``
  rounds ``a * n + c`` once (as ATen's vectorized kernels compute it); ``n`` a positive integer.
  Both cut ``a`` into pieces by masking bits of its significand (no arithmetic a compiler could
  contract), each short enough that its product with ``n`` is exact, so any contraction of
  those products changes nothing; the sums use only additions (TwoSum, and rounding to odd:
  Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
  rounding to odd", IEEE Trans. Computers 57(4), 2008).
- ``rounded(p)`` keeps any product ``p`` a rounded value that an addition cannot contract with
  (a select that LLVM does not see through; an optimization barrier does not do it, as XLA
  removes barriers before fusing).

Tests compile each at XLA's levels 0 and 3 (tests/test_exact.py)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# (unsigned integer of the same width, significand bits including the implicit one)
_LAYOUT = {np.dtype(np.float32): (jnp.uint32, 24), np.dtype(np.float64): (jnp.uint64, 53)}


def _pieces(dtype: Any, n: int) -> int:
  """How many pieces ``a`` must be cut into for each piece's product with ``n`` to be exact
  (``p - bits(n)`` significand bits each); a large number where no cut works."""
  layout = _LAYOUT.get(np.dtype(dtype))
  if layout is None or n <= 0:
    return 1 << 30
  p = layout[1]
  width = p - int(n).bit_length()
  return -(-p // width) if width > 0 else 1 << 30


def exact_limit(dtype: Any, pieces: int = 2) -> int:
  """The largest ``n`` that ``fused`` (``pieces=2``; 4095 in float32, 2**26 - 1 in float64) or
  ``separate`` (``pieces=3``; 65535 and 2**35 - 1) computes exactly; 0 for other dtypes."""
  layout = _LAYOUT.get(np.dtype(dtype))
  if layout is None:
    return 0
  p = layout[1]
  return 2 ** (p - -(-p // pieces)) - 1


def _split_product(a: jax.Array, n: int, k: int) -> list[jax.Array]:
  """``k`` values, each rounded exactly, whose sum is ``a * n`` exactly, largest first: the
  products with ``n`` of ``a`` cut by masking its significand into ``k`` pieces of
  ``ceil(p / k)`` bits."""
  utype, p = _LAYOUT[np.dtype(a.dtype)]
  width = np.dtype(utype).itemsize * 8
  bits = jax.lax.bitcast_convert_type(a, utype)
  step = -(-p // k)
  out, above = [], jnp.zeros_like(a)
  for i in range(1, k):
    low_bits = p - i * step  # bits of the significand below the first i pieces
    mask = np.array(((1 << width) - 1) ^ ((1 << low_bits) - 1), utype)
    top = jax.lax.bitcast_convert_type(bits & mask, a.dtype)
    out.append((top - above) * n)
    above = top
  out.append((a - above) * n)
  return out


def two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(s, e): ``s = a + b`` rounded and ``e`` its exact error (Knuth; additions only). Neither
  operand may be a constant XLA can see: it folds ``(x + c) - c`` into ``x`` (see ``fused``)."""
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)


def _sum_to_odd(a: jax.Array, b: jax.Array) -> jax.Array:
  """``a + b`` rounded to odd: the exact sum where it is representable, else whichever of its
  two neighbours has an odd last significand bit."""
  s, e = two_sum(a, b)
  utype = _LAYOUT[np.dtype(s.dtype)][0]
  bits = jax.lax.bitcast_convert_type(s, utype)
  even = (bits & np.array(1, utype)) == 0
  # the odd neighbour is the one on e's side of s: a step away from zero where e has s's sign
  # (in sign-magnitude bits, + 1 for either sign), else a step towards it (- 1)
  up = (e > 0) == (s > 0)
  step = jnp.where(up, np.array(1, utype), np.array(np.iinfo(utype).max, utype))  # +1 or -1
  return jax.lax.bitcast_convert_type(jnp.where((e != 0) & even, bits + step, bits), s.dtype)


def _sum3(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """``a + b + c`` rounded once to nearest (Boldo and Melquiond's algorithm)."""
  uh, ul = two_sum(b, c)
  th, tl = two_sum(a, uh)
  return th + _sum_to_odd(tl, ul)


def _finite_or(value: jax.Array, fallback: jax.Array) -> jax.Array:
  """``value`` where the plain expression ``fallback`` is finite, else ``fallback`` (NaN, or
  an infinity: a split product that overflows would make TwoSum's NaN)."""
  return jnp.where(jnp.isfinite(fallback), value, fallback)


def rounded(p: jax.Array) -> jax.Array:
  """``p``, a product, as a value an addition cannot contract with it: a select that keeps
  every value (NaN stays NaN) but that LLVM does not see through, so ``rounded(a * b) + c``
  rounds the product and then the sum as C compiled without FMA does. For factors that are not
  small integers (``separate`` needs ``n`` exact in pieces); tests compile it at XLA's levels
  0 and 3."""
  return jnp.where(jnp.isnan(p), jnp.asarray(jnp.nan, p.dtype), p)


def separate(a: jax.Array, n: int, c: float) -> jax.Array:
  """``round(round(a * n) + c)``: the product rounded, then the sum, for a positive integer
  ``n`` up to ``exact_limit(a.dtype, 3)`` (ValueError otherwise); ``a`` float32 or float64."""
  k = _pieces(a.dtype, n)
  if k > 3:
    raise ValueError(f"separate: n = {n} is outside (0, {exact_limit(a.dtype, 3)}] for {a.dtype}")
  parts = _split_product(a, n, k)
  product = parts[0] + parts[1] if k == 2 else _sum3(*parts)
  return _finite_or(product + c, a * n + c)


def fused(a: jax.Array, n: int, c: float) -> jax.Array:
  """``round(a * n + c)``: rounded once, as a fused multiply-add gives it, for a positive
  integer ``n`` up to ``exact_limit(a.dtype)`` (ValueError otherwise); ``a`` float32 or
  float64."""
  if _pieces(a.dtype, n) > 2:
    raise ValueError(f"fused: n = {n} is outside (0, {exact_limit(a.dtype)}] for {a.dtype}")
  hi, lo = _split_product(a, n, 2)
  # c behind a barrier: XLA folds (x + c) - c into x where it sees the constant c, which would
  # undo TwoSum
  opaque = jnp.broadcast_to(jax.lax.optimization_barrier(jnp.asarray(c, a.dtype)), a.shape)
  return _finite_or(_sum3(opaque, hi, lo), a * n + c)
