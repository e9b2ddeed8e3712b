"""average_pool() and global_average_pool(): ONNX AveragePool / GlobalAveragePool in JAX.

Everything that depends only on static arguments (output lengths and the padding each window
sees, from the window plan in _window.py shared by every pool; the divisor of every output
position, here) is computed once at trace time in NumPy, exactly as the ONNX specification
writes it. The device work is a sum per window and a division by the static
divisor. An average window is a product of per-axis windows, so the sum is separable (and so is
the divisor): one pass per pooled axis, either shifted slices of a (length / stride, stride)
reshape or a 1-D ``lax.reduce_window`` (both sums of the zero-padded input, linear, and
transposed by JAX into passes of the same kind for the gradient). Unstrided windows of up to
25 taps over several axes are summed in one pass instead, a shifted slice per tap, with the
per-axis passes as their derivative (``window_sums``).

Every opset version of AveragePool maps onto these keywords (the versions differ only in which
attributes exist), so no private keyword is needed; see jaxops/onnx/_registry.py.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxops._checks import ConfigCache, cache_key, floating_input, global_pool_input, static_bool
from jaxops._window import WindowAxis, window_plan

_DTYPES = tuple(np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
_OP = "jaxops.average_pool"


@dataclasses.dataclass(frozen=True)
class _AveragePlan:
  """The static plan of an average pool: the window plan of each pooled axis and, per axis, the
  divisor of each output position along it (the divisor is their outer product)."""

  axes: tuple[WindowAxis, ...]
  counts: tuple[tuple[int, ...], ...]


@functools.lru_cache(maxsize=512)  # eager calls reuse the divisor tables of a configuration
def _counts(a: WindowAxis, count_include_pad: bool, axis: int) -> tuple[int, ...]:
  """The divisor of each output position along one axis, as the spec text defines it."""
  lo_bound = -a.pad_begin if count_include_pad else 0
  hi_bound = a.size + a.pad_end if count_include_pad else a.size
  first, last = a.inside(lo_bound, hi_bound)
  count = last - first
  if not count_include_pad and np.any(count == 0):
    j = int(np.argmin(count))
    raise ValueError(
        f"{_OP}: with count_include_pad=False, output position {j} along spatial axis {axis} "
        f"has a window (kernel_shape {a.kernel}, dilation {a.dilation}, pads {a.pad_begin}, "
        f"{a.pad_end}) that covers no input element, so its average is undefined; use smaller "
        f"pads or dilations")
  return tuple(int(c) for c in count)


def _plan(shape: tuple[int, ...], kernel_shape: Any, strides: Any, pads: Any, dilations: Any,
          auto_pad: Any, ceil_mode: bool, count_include_pad: bool) -> _AveragePlan:
  ceil_mode = static_bool(_OP, "ceil_mode", ceil_mode)
  count_include_pad = static_bool(_OP, "count_include_pad", count_include_pad)
  axes = window_plan(_OP, shape, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
  counts = tuple(_counts(a, count_include_pad, i) for i, a in enumerate(axes))
  return _AveragePlan(axes, counts)


# Eager calls with a configuration seen before skip the argument checks and the plan building.
_PLANS = ConfigCache(_plan)


def average_pool(x: jax.typing.ArrayLike, kernel_shape: Sequence[int], *,
                 strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, auto_pad: str = "NOTSET",
                 ceil_mode: bool = False, count_include_pad: bool = False) -> jax.Array:
  """ONNX AveragePool (opset 22): the mean over each sliding window of the trailing axes.

  The last ``len(kernel_shape)`` axes of ``x`` are pooled (in ONNX's layout, ``x`` is
  ``(N, C, D1, ..., Dn)``); any leading axes are carried through. For each pooled axis with input
  length ``n``, kernel ``k``, stride ``s``, dilation ``d``, pads ``pb``/``pe`` and window extent
  ``e = d * (k - 1) + 1``, the output length is::

    out = floor((n + pb + pe - e) / s) + 1            # ceil_mode=False
    out = ceil((n + pb + pe - e) / s) + 1             # ceil_mode=True, less one if the last
                                                      # window would start at or after n + pb
    out = floor((n - e) / s) + 1                      # auto_pad="VALID" (pads are 0)
    out = ceil(n / s)                                 # auto_pad="SAME_UPPER"/"SAME_LOWER"

  With SAME the total padding is ``(out - 1) * s + e - n`` (never negative), split with the odd
  element at the end (SAME_UPPER) or at the beginning (SAME_LOWER).

  Divisor rule: window ``o`` reads positions ``o * s - pb + j * d`` for ``j < k``. Its sum is
  divided by the number of those positions that lie in the input (``count_include_pad=False``)
  or in the explicitly padded input ``[-pb, n + pe)`` (``count_include_pad=True``). The extra
  positions that ``ceil_mode`` adds past ``n + pe`` are never counted. Over several axes the
  divisor is the product of the per-axis counts.

  Args:
    x: input array, float16, bfloat16, float32 or float64.
    kernel_shape: window size along each pooled axis.
    strides: step along each pooled axis; default 1.
    pads: ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` zero padding, each smaller than the
      kernel along its axis; default 0. Not allowed (unless all zero) with ``auto_pad`` other
      than "NOTSET".
    dilations: spacing of the window's taps along each pooled axis; default 1.
    auto_pad: "NOTSET" (use ``pads``; the empty string means the same), "SAME_UPPER",
      "SAME_LOWER" or "VALID".
    ceil_mode: round the output length up instead of down (no effect with auto_pad: the spec's
      SAME and VALID lengths are the same either way).
    count_include_pad: count the padding positions in the divisor.

  ``kernel_shape``, ``strides``, ``pads`` and ``dilations`` decide the output shape, so they must
  be concrete (Python or NumPy values), also under ``jax.jit``.

  Returns:
    The pooled array, of the same dtype as ``x`` (float16 and bfloat16 are summed and divided in
    float32, then rounded once).

  Raises:
    TypeError: ``x`` is not one of the four floating dtypes; a shape argument is traced or not a
      sequence of integers.
    ValueError: wrong lengths; kernel_shape, strides or dilations below 1; negative pads, pads at
      least the kernel, pads with auto_pad; a negative output length (a window that overhangs
      the padded input by the stride or more; by less, the length is 0 and the output empty);
      a window that covers only padding when ``count_include_pad`` is False; an unknown
      ``auto_pad``.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
    >>> jaxops.average_pool(x, (2, 2), strides=(2, 2))
    Array([[[[ 2.5,  4.5],
             [10.5, 12.5]]]], dtype=float32)
    >>> jaxops.average_pool(jnp.array([[[1.0, 2.0, 3.0]]]), (2,), pads=(1, 1))
    Array([[[1. , 1.5, 2.5, 3. ]]], dtype=float32)
    >>> jaxops.average_pool(jnp.array([[[1.0, 2.0, 3.0]]]), (2,), pads=(1, 1),
    ...                     count_include_pad=True)
    Array([[[0.5, 1.5, 2.5, 1.5]]], dtype=float32)
  """
  x = floating_input(_OP, x, _DTYPES)
  shape = tuple(x.shape)
  static = (shape, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad)
  plan = _PLANS(cache_key(*static), *static)
  return _average_pool(x, plan)


@functools.partial(jax.jit, static_argnums=1)
def _average_pool(x: jax.Array, plan: _AveragePlan) -> jax.Array:
  dtype = x.dtype
  if dtype in (jnp.float16, jnp.bfloat16):
    x = x.astype(jnp.float32)
  lead = x.ndim - len(plan.axes)
  x = window_sums(x, plan.axes)
  y = x / _divisor(plan.counts, lead, x.dtype)
  return y.astype(dtype)


def window_sums(x: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """The sum of the zero-padded ``x`` over each window of the trailing ``len(axes)`` axes.

  Linear in ``x`` (JAX transposes it into passes of the same kind). Shared with lp_pool.
  Unstrided windows over two or more axes with few taps (``_stencil``) are summed in one pass
  over every tap (``_stencil_sums``); everything else, and every derivative, one axis at a time
  (``_axis_sums``).
  """
  if _stencil(axes):
    return _stencil_sums(x, axes)
  return _axis_sums(x, axes)


# Taps per window up to which an unstrided pool over several axes sums every tap in one pass.
# Measured on the CPU (float32, 8x64x56x56): 3x3 dilated 2 and 5x5 about 1.7-2x faster than
# the per-axis passes, whose intermediate is a full-size array; a 3x3x3 window (27 taps) level.
_STENCIL_TAPS = 25


def _stencil(axes: tuple[WindowAxis, ...]) -> bool:
  pooled = [a for a in axes if a.k > 1]
  return (len(pooled) >= 2 and all(a.s == 1 for a in axes)
          and math.prod(a.k for a in axes) <= _STENCIL_TAPS)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _stencil_sums(x: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """Unstrided window sums as one padded copy and a shifted slice per tap, which XLA fuses into
  one pass (each output reads its taps from the cache) instead of a full-size intermediate per
  axis. Its derivative is ``_axis_sums``: the transpose of the slices (a pad per tap) would
  not fuse, while the per-axis passes transpose into passes of the same kind."""
  lead = x.ndim - len(axes)
  xp = lax.pad(x, np.zeros((), x.dtype), [(0, 0, 0)] * lead + [(a.lo, a.hi, 0) for a in axes])
  terms = []
  for taps in itertools.product(*[range(a.k) for a in axes]):
    start = [0] * lead + [j * a.d for j, a in zip(taps, axes)]
    limit = list(x.shape[:lead]) + [j * a.d + a.out for j, a in zip(taps, axes)]
    terms.append(lax.slice(xp, start, limit))
  return functools.reduce(operator.add, terms)


@_stencil_sums.defjvp
def _stencil_sums_jvp(axes: tuple[WindowAxis, ...], primals: tuple[jax.Array],
                      tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
  (x,), (t,) = primals, tangents
  return _stencil_sums(x, axes), _axis_sums(t, axes)


def _axis_sums(x: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """``window_sums`` one pooled axis at a time."""
  lead = x.ndim - len(axes)
  # Innermost axis first. Per axis, the faster of two ways to sum the windows (measured on CPU):
  # shifted slices of a (length / stride, stride) reshape where the windows tile the axis or the
  # axis is the innermost strided one (and the stride divides the length), else a 1-D
  # reduce_window.
  for i in reversed(range(len(axes))):
    a = axes[i]
    if a.kernel == 1 and a.stride == 1 and a.pad_begin == 0 and a.pad_end_read == 0:
      continue
    if x.shape[lead + i] == 1:
      x = _one_element_sums(x, lead + i, a)
      continue
    tiled_or_inner = ((a.kernel == a.stride and a.dilation == 1)
                      or (i == len(axes) - 1 and a.stride > 1))
    if tiled_or_inner and x.shape[lead + i] % a.stride == 0:
      x = _taps_sum(x, lead + i, a)
    else:
      x = _window_sum(x, lead + i, a)
  return x


def _one_element_sums(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """Window sums along an axis of length 1: the element where one of a window's taps reads it,
  else 0 (a window of padding only; a where, not a product, so that inf gives 0 there too).
  XLA's CPU compiler miscompiles the transpose of a dilated reduce_window over such an axis
  (the gradient at a window of padding only was 1, not 0); this transposes into a sum."""
  first, last = a.inside(0, 1)
  hits = last > first
  shape = [1] * x.ndim
  shape[axis] = a.out
  return jnp.where(hits.reshape(shape), x, np.zeros((), x.dtype))


def _pad_axis(x: jax.Array, axis: int, lo: int, hi: int) -> jax.Array:
  """Zero padding (negative: cutting) of ``x`` along ``axis``."""
  if lo == 0 and hi == 0:
    return x
  config = [(0, 0, 0)] * x.ndim
  config[axis] = (lo, hi, 0)
  return lax.pad(x, np.zeros((), x.dtype), config)


def _taps_sum(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """Window sums along ``axis`` as ``k`` shifted slices of ``x`` viewed as (length / s, s).

  Tap ``j`` of window ``o`` reads input position ``o * s + m`` with ``m = j * d - lo``; with
  ``m = q * s + r`` that is row ``o + q``, column ``r`` of the reshaped axis. Rows outside the
  input are zeros: a pad of the output-sized slice, which XLA fuses into the sum. The caller
  ensures ``s`` divides the length (the reshape is then free).

  Where the windows tile the axis (``k == s``, no dilation) the sums go through ``_tiled_sum``,
  whose derivative is the same map written so that its transpose is one broadcast.
  """
  if a.k == a.s and a.d == 1 and a.s > 1:
    return _tiled_sum(x, axis, a)
  return _slices_sum(x, axis, a)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _tiled_sum(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """Sums of the non-overlapping windows along ``axis``: the slices as the value (fastest
  forward), and the reshape-sum of ``_blocks_sum`` as the derivative."""
  return _slices_sum(x, axis, a)


@_tiled_sum.defjvp
def _tiled_sum_jvp(axis: int, a: WindowAxis, primals: tuple[jax.Array],
                   tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
  # The tangent map is linear, and reverse mode transposes it: a reshape-sum transposes into a
  # broadcast of each window's cotangent to its s inputs and a pad or cut, which XLA fuses with
  # the cotangent's producer into one pass (the slices transpose into one pad per tap, then an
  # add). Forward mode evaluates the reshape-sum itself: the same sums.
  (x,), (t,) = primals, tangents
  return _tiled_sum(x, axis, a), _blocks_sum(t, axis, a)


def _blocks_sum(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """Sums of the tiling windows along ``axis``: pad (or cut) to ``out * s``, view as (out, s),
  sum the s."""
  x = _pad_axis(x, axis, a.lo, a.hi)
  x = x.reshape(x.shape[:axis] + (a.out, a.s) + x.shape[axis + 1:])
  return jnp.sum(x, axis=axis + 1)


def _slices_sum(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """``_taps_sum``'s shifted slices, for any window plan."""
  s = a.s
  rows = x.shape[axis] // s
  if s > 1:
    x = x.reshape(x.shape[:axis] + (rows, s) + x.shape[axis + 1:])
  terms = []
  for j in range(a.k):
    q, r = divmod(j * a.d - a.lo, s)
    if q >= rows or q + a.out <= 0:
      continue  # this tap reads only padding in every window
    col = lax.index_in_dim(x, r, axis=axis + 1, keepdims=False) if s > 1 else x
    terms.append(_pad_axis(col, axis, -q, a.out - rows + q))
  if not terms:
    shape = list(x.shape[:axis]) + [a.out] + list(x.shape[axis + (2 if s > 1 else 1):])
    return jnp.zeros(shape, x.dtype)
  return functools.reduce(operator.add, terms)


def _window_sum(x: jax.Array, axis: int, a: WindowAxis) -> jax.Array:
  """Window sums along ``axis`` with one 1-D reduce_window (zero padding, dilation)."""
  hi = a.pad_end_read
  x = _pad_axis(x, axis, 0, min(hi, 0))  # cut the tail no window reads
  window, strides, dil = [1] * x.ndim, [1] * x.ndim, [1] * x.ndim
  window[axis], strides[axis], dil[axis] = a.kernel, a.stride, a.dilation
  padding = [(0, 0)] * x.ndim
  padding[axis] = (a.pad_begin, max(hi, 0))
  return lax.reduce_window(x, np.zeros((), x.dtype), lax.add, tuple(window), tuple(strides),
                           tuple(padding), window_dilation=tuple(dil))


def _divisor(counts: tuple[tuple[int, ...], ...], lead: int, dtype: Any) -> Any:
  """The static divisor: a scalar where it is uniform, else the outer product of the counts:
  a table of the output plane, or past _DIVISOR_TABLE_MAX positions the product of one row
  per axis on the device (the same values: ``dtype`` is float32 or float64, which hold each
  count exactly, so either way the exact product is rounded once). A table of 4096 x 4096
  took 0.4 s to build at trace time (a peak of 360 MB against 163), and is embedded in the
  program."""
  if all(len(set(c)) == 1 for c in counts):
    return np.asarray(math.prod(c[0] for c in counts), dtype)
  nd = len(counts)
  if math.prod(len(c) for c in counts) > _DIVISOR_TABLE_MAX and len(counts) <= 2:
    # (two factors: one rounding; a third would round the product of the first two)
    return functools.reduce(operator.mul, [
        jnp.asarray(np.asarray(c, dtype)).reshape((1,) * (lead + d) + (-1,) + (1,) * (nd - d - 1))
        for d, c in enumerate(counts)])
  div = np.ones((), np.float64)
  for c in counts:
    div = np.multiply.outer(div, np.asarray(c, np.float64))
  return jnp.asarray(div.reshape((1,) * lead + div.shape), dtype)


# Output planes up to this many positions divide by a table (see _divisor).
_DIVISOR_TABLE_MAX = 1 << 18


def global_average_pool(x: jax.typing.ArrayLike) -> jax.Array:
  """ONNX GlobalAveragePool: the mean over every axis after the first two.

  ``x`` is ``(N, C, D1, ..., Dn)``; the result is ``(N, C, 1, ..., 1)``: AveragePool with the
  kernel equal to the spatial shape (no padding, so the divisor is ``D1 * ... * Dn``).

  Args:
    x: input array with at least two axes, float16, bfloat16, float32 or float64.

  Returns:
    The means, of the same dtype as ``x`` (float16 and bfloat16 are summed in float32).

  Raises:
    TypeError: ``x`` is not one of the four floating dtypes.
    ValueError: ``x`` has fewer than two axes.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> jaxops.global_average_pool(jnp.arange(8.0).reshape(1, 2, 2, 2))
    Array([[[[1.5]],
    <BLANKLINE>
            [[5.5]]]], dtype=float32)
  """
  op = "jaxops.global_average_pool"
  x = global_pool_input(op, x, _DTYPES)
  return _global_average_pool(x)


@jax.jit
def _global_average_pool(x: jax.Array) -> jax.Array:
  return _mean_after(x, 2)


def _mean_after(x: jax.Array, lead: int) -> jax.Array:
  """The mean over every axis after the first ``lead`` (2: GlobalAveragePool; also
  ``jaxops.torch``'s adaptive average to size 1, torch's mean, through ``mean_after``). The
  leading axes are kept apart (merged, a channel-sharded input would need an all-gather)."""
  dtype = x.dtype
  if dtype in (jnp.float16, jnp.bfloat16):
    x = x.astype(jnp.float32)
  size = math.prod(x.shape[lead:])
  sums = _row_sums(x.reshape(x.shape[:lead] + (size,)))
  y = sums / np.asarray(size, x.dtype)  # divided by the static count, as the spec writes it
  return y.reshape(x.shape[:lead] + (1,) * (x.ndim - lead)).astype(dtype)


mean_after = jax.jit(_mean_after, static_argnames="lead")


# Longest rows that _row_sums sums as a matrix-vector product: past it (a tie at 144 values on
# 8x512 rows), XLA's reduction is as fast or faster, and the product's float32 sum runs along
# the row, off by 4e-3 relative on a row of 2**22 values near 1000 (the reduction: 4e-8).
_DOT_ROW_MAX = 128


@jax.custom_jvp
def _row_sums(x: jax.Array) -> jax.Array:
  """Sums over the last axis. Short rows (the 7 x 7 planes of a classifier head) as a
  matrix-vector product with ones, the fastest row sum on CPU there (measured against jnp.mean
  and a reshape-sum: 0.040 ms against 0.073 on 8x512x49; a tie at 144 values); longer ones by
  XLA's reduction, which keeps float32 sums accurate (3.7e-8 relative to float64 on two rows of
  2**22 values near 1000, torch's mean 2.4e-8, where the product was off by 3.9e-3)."""
  if x.shape[-1] > _DOT_ROW_MAX:
    return jnp.sum(x, axis=-1)
  return x @ jnp.ones(x.shape[-1:], x.dtype)


@_row_sums.defjvp
def _row_sums_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]
                  ) -> tuple[jax.Array, jax.Array]:
  # The tangent is a plain sum, whose transpose in reverse mode is one broadcast of the
  # cotangent, fused with its producer (the product's transpose is an outer product with ones).
  (x,), (t,) = primals, tangents
  return _row_sums(x), jnp.sum(t, axis=-1)
