"""max_pool(), max_unpool(), global_max_pool(): ONNX MaxPool (with Indices), MaxUnpool and
GlobalMaxPool in JAX.

The windows come from the static plan in _window.py (output lengths, padding, ceil_mode,
auto_pad, dilations). The device work of max_pool is one pass over the window's taps, and the
input is never padded: along each axis the windows fall into runs that read the same taps inside
the input (the windows that read only input, and a few at the ends that reach into the
padding), and within a run tap ``j`` of every window is one strided slice of the input. The runs
are computed apart and concatenated, so the whole forward pass is slices, comparisons, selects
and concatenations (no reduce_window, no padded copy of the input). It keeps, per output
position, the maximum and the number of the tap that holds it; the ONNX Indices output is
computed from that tap number with static arithmetic. Without Indices and without
differentiation the maximum alone may be taken in passes (see ``_passes``): stride-1 windows of
many taps one axis at a time, and where the last pooled axis is strided and the other axes have
many taps, those axes first and the last in a second pass.

Which tap wins, exactly (the rule of onnx.reference and of onnxruntime's MaxPool with Indices):
the window's taps are scanned in window order (row-major over the kernel); the first tap that
lies in the input is the initial maximum, and a later tap replaces it only if it compares
strictly greater. So ties go to the first maximum, padding is never selected, and NaN is kept
only where it is the window's first element in the input (a later NaN never compares greater).
``jaxops.torch``'s max pools take PyTorch's rule instead (``_MaxPlan.torch_nan``): a NaN tap is
taken too, so a window holding a NaN gives NaN at its last NaN; windows without NaN come out
the same under both.

Gradients: a custom JVP sends the tangent of the selected element to each output, so the
gradient goes to the element that Indices names, as in PyTorch, and the backward pass is never
XLA's select-and-scatter. Where windows overlap, on the CPU, the tangent is a gather within each
(N, C) plane and the backward pass one scatter-add of the cotangent; elsewhere (windows that do
not overlap, other platforms) it is a select per tap of strided slices, which JAX transposes
into pads and selects.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching
from jax.interpreters import mlir

from jaxops._checks import (ConfigCache, all_true, any_true, as_array, batch_first, cache_key,
                            check_output_size, concrete, concrete_shape, dense_tangent,
                            explicit_spec, floating_input, global_pool_input, index_array,
                            int_tuple, no_tangent, replicated, reshape_lead, static_bool,
                            value_error)
from jaxops._fused_sum import partitioned
from jaxops._window import WindowAxis, window_plan

_FLOATS = tuple(np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
_DTYPES = _FLOATS + (np.dtype(np.int8), np.dtype(np.uint8))
_OP = "jaxops.max_pool"


@dataclasses.dataclass(frozen=True)
class _MaxPlan:
  """The static plan of a max pool.

  ``axes``: the window plan of each pooled axis. ``runs``: per axis, its windows as runs of
  consecutive windows that read the same taps inside the input, ``(begin, end, taps)``: one run
  for the windows that read only input, and short runs at the ends for windows that reach into
  the padding. Within a run, each tap is one strided slice of the unpadded input.
  ``torch_nan``: PyTorch's rule for NaN (``jaxops.torch``): a tap that is NaN is taken too, so
  a window holding a NaN gives NaN, at its last NaN in window order; otherwise ONNX's (a NaN
  wins only as the window's first element inside the input). Windows without NaN give the same
  maximum and tap under both. ``nan_in_scan``: PyTorch's rule as a NaN test in the scan of
  every tap (``_scan``), not behind the conditional of ``_torch_nan_windows``.
  """

  axes: tuple[WindowAxis, ...]
  runs: tuple[tuple[tuple[int, int, tuple[int, ...]], ...], ...]
  torch_nan: bool = False
  nan_in_scan: bool = False


def _runs(a: WindowAxis, op: str, axis: int) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
  first, last = a.inside(0, a.size)
  if np.any(last == first):
    o = int(np.argmax(last == first))
    raise ValueError(
        f"{op}: output position {o} along spatial axis {axis} has a window (kernel_shape "
        f"{a.kernel}, dilation {a.dilation}, pads {a.pad_begin}, {a.pad_end}) that covers no "
        f"input element, so its maximum is undefined; use smaller pads or dilations")
  # a run ends where the first or the last tap inside the input changes
  ends = np.flatnonzero((np.diff(first) != 0) | (np.diff(last) != 0)) + 1
  bounds = [0, *(int(e) for e in ends), a.out_len] if a.out_len else []
  return tuple((b, e, tuple(range(int(first[b]), int(last[b]))))
               for b, e in zip(bounds[:-1], bounds[1:]))


def _plan(shape: tuple[int, ...], kernel_shape: Any, strides: Any, pads: Any, dilations: Any,
          auto_pad: Any, ceil_mode: Any, torch_nan: bool = False, op: str = _OP) -> _MaxPlan:
  axes = window_plan(op, shape, kernel_shape, strides, pads, dilations, auto_pad,
                     static_bool(op, "ceil_mode", ceil_mode))
  return _MaxPlan(axes, tuple(_runs(a, op, i) for i, a in enumerate(axes)), torch_nan)


_PLANS = ConfigCache(_plan)


def max_pool(x: jax.typing.ArrayLike, kernel_shape: Sequence[int], *,
             strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
             dilations: Sequence[int] | None = None, auto_pad: str = "NOTSET",
             ceil_mode: bool = False, storage_order: int = 0,
             return_indices: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
  """ONNX MaxPool (opset 22): the maximum over each sliding window of the trailing axes.

  The last ``len(kernel_shape)`` axes of ``x`` are pooled (ONNX's layout is ``(N, C, D1, ...,
  Dn)``); any leading axes are carried through. Output lengths, padding, ``ceil_mode`` (a window
  that would start in the right padding is dropped), ``auto_pad`` and ``dilations`` are as in
  :func:`jaxops.average_pool`. Padding is never selected.

  Which element is the maximum: the window's taps are scanned in window order (row-major over
  the kernel); the first tap inside the input is the initial maximum and a later tap replaces
  it only if it is strictly greater. So ties go to the first maximum in window order, and a NaN
  is the result only where it is the window's first element inside the input (a later NaN never
  compares greater): the rule of onnx.reference and of onnxruntime's MaxPool with Indices.

  Indices (``return_indices=True``, ONNX's second output) are flat positions in ``x``: with
  ``storage_order=0`` the row-major index over the whole array; with ``storage_order=1`` the
  leading axes row-major and the pooled axes column-major, i.e. ``lead * P + d1 + D1 * (d2 +
  D2 * ...)`` with ``P = D1 * ... * Dn`` (ONNX's formula).

  The gradient of the maximum goes to the element that Indices names (PyTorch's rule).
  Without Indices, a window whose maximum is zero and that holds zeros of both signs may give
  either sign (the values are equal).

  Args:
    x: input array: float16, bfloat16, float32, float64, int8 or uint8 (integers stay integer).
    kernel_shape: window size along each pooled axis.
    strides: step along each pooled axis; default 1.
    pads: ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``, each smaller than the kernel along
      its axis; default 0. Not allowed (unless all zero) with ``auto_pad`` other than "NOTSET".
    dilations: spacing of the window's taps along each pooled axis; default 1.
    auto_pad: "NOTSET" (or ""), "SAME_UPPER", "SAME_LOWER" or "VALID".
    ceil_mode: round the output length up instead of down.
    storage_order: 0 (row-major) or 1 (column-major over the pooled axes) for the indices.
    return_indices: also return the indices.

  ``kernel_shape``, ``strides``, ``pads`` and ``dilations`` decide the output shape, so they must
  be concrete (Python or NumPy values), also under ``jax.jit``.

  Returns:
    The pooled array, of the dtype of ``x``; with ``return_indices`` a pair (pooled, indices),
    the indices int64 (int32 when JAX's 64-bit mode is off; then ``x`` must have fewer than
    2**31 elements).

  Raises:
    TypeError: ``x`` has another dtype; a shape argument is traced or not integers; an option
      has the wrong type.
    ValueError: as :func:`jaxops.average_pool` for the window arguments; a window that covers
      only padding; ``storage_order`` not 0 or 1; indices that int32 cannot hold.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> x = jnp.array([[[[1.0, 5.0, 2.0], [4.0, 3.0, 6.0], [0.0, 8.0, 7.0]]]])
    >>> jaxops.max_pool(x, (2, 2))
    Array([[[[5., 6.],
             [8., 8.]]]], dtype=float32)
    >>> y, i = jaxops.max_pool(x, (2, 2), strides=(2, 2), ceil_mode=True, return_indices=True)
    >>> y
    Array([[[[5., 6.],
             [8., 7.]]]], dtype=float32)
    >>> i
    Array([[[[1, 5],
             [7, 8]]]], dtype=int32)
  """
  return _max_pool_of(_input(_OP, x), kernel_shape, strides=strides, pads=pads,
                      dilations=dilations, auto_pad=auto_pad, ceil_mode=ceil_mode,
                      storage_order=storage_order, return_indices=return_indices)


# The integer types jaxops.torch's max_pool takes beyond ONNX's int8 / uint8 (torch's max_pool2d
# and 3d take every integer type): the comparisons and the padding (never selected) are the
# same for any integer type.
INTEGERS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64))


def _max_pool_of(x: jax.Array, kernel_shape: Sequence[int], *, strides: Any, pads: Any,
                 dilations: Any, auto_pad: Any, ceil_mode: Any, storage_order: Any,
                 return_indices: Any, pytorch: bool = False) -> Any:
  """max_pool of an ``x`` whose dtype its caller has checked. ``pytorch`` (for
  ``jaxops.torch``): PyTorch's NaN rule (``_MaxPlan.torch_nan``) and indices within each plane
  of the pooled axes, not ONNX's flat ones (the caller checks their range)."""
  shape = tuple(x.shape)
  static = (shape, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, pytorch)
  plan = _PLANS(cache_key(*static), *static)
  order = _storage_order(_OP, storage_order)  # checked even where no indices are returned
  indices = static_bool(_OP, "return_indices", return_indices)
  if any(a.out_len == 0 for a in plan.axes):  # a window longer than the padded input: none
    y = jnp.zeros(shape[:len(shape) - len(plan.axes)] + tuple(a.out_len for a in plan.axes),
                  x.dtype)
    return (y, jnp.zeros(y.shape, _index_dtype())) if indices else y
  if not indices:
    return _max_pool(x, plan)
  if not pytorch:
    _check_index_range(_OP, shape)
  return _max_pool_with_indices(x, plan, order, pytorch)


def _input(op: str, x: Any) -> jax.Array:
  return floating_input(op, x, _DTYPES)


def _storage_order(op: str, value: Any) -> int:
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or \
      int(value) not in (0, 1):
    raise value_error(op, "storage_order", value, "0 (row-major) or 1 (column-major)")
  return int(value)


def _index_dtype() -> np.dtype:
  return np.dtype(jax.dtypes.canonicalize_dtype(np.int64))


def _check_index_range(op: str, shape: tuple[int, ...], *, what: str = "an input") -> None:
  concrete_shape(op, "x", shape)  # (indices of a symbolic shape: their type is unknown)
  dtype = _index_dtype()
  if math.prod(shape) > np.iinfo(dtype).max:
    raise ValueError(f"{op}: {what} of shape {tuple(shape)} has more elements than "
                     f"{dtype.name} indices can address; enable jax_enable_x64 for int64 "
                     f"indices")


def _tap_dtype(axes: tuple[WindowAxis, ...]) -> np.dtype:
  n = math.prod(a.kernel for a in axes)
  return np.dtype(np.int8 if n <= 127 else np.int16 if n <= 32767 else np.int32)


def _taps(axes: tuple[WindowAxis, ...]) -> list[tuple[int, ...]]:
  return list(itertools.product(*[range(a.kernel) for a in axes]))


_Taps = list[tuple[tuple[int, ...], jax.Array]]


def _over_runs(x: Any, plan: _MaxPlan, pooled: tuple[int, ...],
               body: Callable[[Any], tuple[jax.Array, ...]]) -> tuple[jax.Array, ...]:
  """Windows along the pooled axes ``pooled`` (indices into ``plan.axes``; the other axes are
  kept whole), without padding the input.

  For each combination of runs (one per axis in ``pooled``), ``body`` receives the taps that
  those windows read inside the input, in window order, as ``(tap, strided slice of x)``
  pairs, and returns arrays of the run's shape; they are concatenated back along each axis. So
  padding is never read, and a window's first tap inside the input is the first one ``body``
  sees. ``x`` may be a tuple of arrays of one shape: each tap then gives the tuple of their
  slices.
  """
  xs = x if isinstance(x, tuple) else (x,)
  shape = xs[0].shape
  lead = len(shape) - len(plan.axes)

  def piece(chosen: list[tuple[int, int, tuple[int, ...]]]) -> tuple[jax.Array, ...]:
    taps: list[tuple[tuple[int, ...], Any]] = []
    for tap in itertools.product(*[read for _, _, read in chosen]):
      start, limit, step = [0] * len(shape), list(shape), [1] * len(shape)
      for i, (begin, end, _), j in zip(pooled, chosen, tap):
        a = plan.axes[i]
        s = begin * a.stride - a.pad_begin + j * a.dilation
        start[lead + i], limit[lead + i], step[lead + i] = s, s + (end - begin - 1) * a.stride + 1, \
            a.stride
      cut = tuple(lax.slice(v, start, limit, step) for v in xs)
      taps.append((tap, cut if isinstance(x, tuple) else cut[0]))
    return body(taps)

  def join(k: int, chosen: list[tuple[int, int, tuple[int, ...]]]) -> tuple[jax.Array, ...]:
    if k == len(pooled):
      return piece(chosen)
    parts = [join(k + 1, chosen + [run]) for run in plan.runs[pooled[k]]]
    if len(parts) == 1:
      return parts[0]
    return tuple(lax.concatenate(list(p), lead + pooled[k]) for p in zip(*parts))

  return join(0, [])


# Most taps per window that one unrolled scan compares (a slice and a select each); past it,
# _argmax_by_axis: one unrolled scan per pooled axis (a 32x32 window with indices took 7 s to
# compile as one scan, 64x64 did not finish in 100 s), and where one axis alone has more taps,
# _argmax_reduce_window: one XLA reduce_window, whose program does not grow with the window but
# whose variadic reduction runs slowly on the CPU (a 32 x 32 window on 8x256x256: 0.83 s).
_UNROLLED_TAPS = 256


def _many_taps(axes: tuple[WindowAxis, ...]) -> bool:
  return (math.prod(a.kernel for a in axes) > _UNROLLED_TAPS
          and math.prod(a.size for a in axes) <= np.iinfo(np.int32).max)


# Most strided slices that one unrolled pass over several axes reads (``_over_runs``: for every
# combination of runs, one per axis, each tap that its windows read inside the input; each
# slice then costs a comparison and a select or two). Padding multiplies them: a stride-1 axis
# padded by p has 2p + 1 runs, so 13x13 windows padded by 6 read 16129 slices (51 s to compile)
# and 5x5x5 windows padded by 2 read 6859 (121 s with indices), where their 169 and 125 taps
# pass _UNROLLED_TAPS. Past it, windows are pooled one axis at a time (``_argmax_by_axis``,
# per-axis passes in ``_max_values``), whose program grows with the sum of the axes' reads.
_UNROLLED_READS = 1024


def _reads(plan: _MaxPlan, pooled: tuple[int, ...]) -> int:
  """The strided slices that one ``_over_runs`` pass over the axes ``pooled`` reads."""
  return math.prod(sum(len(read) for _, _, read in plan.runs[i]) for i in pooled)


def _argmax_path(plan: _MaxPlan) -> str:
  """How ``_argmax`` takes the windows: ``"one"`` unrolled pass over every axis;
  ``"by_axis"``, one unrolled pass per axis (``_argmax_by_axis``), where the one pass would
  compare more than _UNROLLED_TAPS taps or read more than _UNROLLED_READS slices; or
  ``"reduce_window"`` (``_argmax_reduce_window``), where a single axis is too long for that."""
  axes = plan.axes
  if not (_many_taps(axes) or _reads(plan, tuple(range(len(axes)))) > _UNROLLED_READS):
    return "one"
  if len(axes) > 1 and all(a.kernel <= _UNROLLED_TAPS and _reads(plan, (i,)) <= _UNROLLED_READS
                           for i, a in enumerate(axes)):
    return "by_axis"
  # (positions in a plane of more than 2**31 elements do not fit reduce_window's int32 pairs)
  return "reduce_window" if math.prod(a.size for a in axes) <= np.iinfo(np.int32).max else "one"


def _argmax(x: jax.Array, plan: _MaxPlan) -> tuple[jax.Array, jax.Array]:
  """(maximum, number of the winning tap in window order) of every window: the first tap
  inside the input starts, a later one wins only if strictly greater (or, with
  ``plan.torch_nan``, NaN)."""
  path = _argmax_path(plan)
  if path == "by_axis":
    return _argmax_by_axis(x, plan)
  if path == "reduce_window":
    return _argmax_reduce_window(x, plan)
  torch_nan = plan.torch_nan and jnp.issubdtype(x.dtype, jnp.floating)
  if torch_nan and plan.nan_in_scan:
    return _scan(x, plan, nan_wins=True)
  best, arg = _scan(x, plan, nan_wins=False)
  if torch_nan:  # ONNX's scan, and PyTorch's only if x may hold a NaN
    best, arg = _torch_nan_windows_p.bind(best, arg, x, plan=plan)
  return best, arg


def _scan(x: jax.Array, plan: _MaxPlan, nan_wins: bool) -> tuple[jax.Array, jax.Array]:
  """``_argmax`` as one unrolled scan over every tap of the window; a NaN tap is taken too
  where ``nan_wins`` (PyTorch's rule)."""
  kernel = tuple(a.kernel for a in plan.axes)
  tdtype = _tap_dtype(plan.axes)

  def scan(taps: _Taps) -> tuple[jax.Array, jax.Array]:
    (tap, best), rest = taps[0], taps[1:]
    arg = jnp.full(best.shape, int(np.ravel_multi_index(tap, kernel)), tdtype)
    for tap, v in rest:
      take = (v > best) | jnp.isnan(v) if nan_wins else v > best
      best = jnp.where(take, v, best)
      arg = jnp.where(take, np.array(np.ravel_multi_index(tap, kernel), tdtype), arg)
    return best, arg

  best, arg = _over_runs(x, plan, tuple(range(len(plan.axes))), scan)
  return best, arg


def _torch_nan_windows(*args: jax.Array, plan: _MaxPlan,
                       partitioned: bool = False) -> tuple[jax.Array, ...]:
  """``args``: ONNX's scan's results (the maxima, or the maxima and the tap numbers), then
  ``x``. Those, or PyTorch's (``_scan`` with ``nan_wins``) where ``x`` may hold a NaN
  (``_may_hold_nan``): the two differ only in the windows holding one. A conditional, so that
  the common case pays one contiguous, vectorised sum over ``x`` instead of a NaN test per tap
  of every window: on the CPU, with the test in the scan the ResNet stem's indices (3x3 s2 p1
  on 8x64x112x112) took 1.5-1.7 times as long as with ONNX's rule and a 3x3x3 s2 p1 pool's 3.7
  times, with the conditional 1.09 and 1.06; the stem's maxima alone, in ``make bench``'s
  setting, 1.43-1.56 and 1.07-1.27 (docs/PERFORMANCE.md). Compiled for several devices, where
  the predicate would need an all-reduce, PyTorch's scan unconditionally."""
  *onnx, x = args
  pytorch_scan = lambda: _scan(x, plan, nan_wins=True)[:len(onnx)]  # noqa: E731
  if partitioned:
    return pytorch_scan()
  return lax.cond(_may_hold_nan(x, len(plan.axes)), pytorch_scan, lambda: tuple(onnx))


def _may_hold_nan(x: jax.Array, nd: int) -> jax.Array:
  """True if ``x`` holds a NaN, and also if a plane of its trailing ``nd`` axes sums to NaN
  without one (+inf and -inf, or sums past the largest float of both signs): a NaN among the
  planes' sums. A sum is read faster than a NaN test of every element (0.65 ms against 1.40 over
  8x64x112x112 float32); a plane that comes out NaN without holding one costs time, not
  exactness."""
  sums = jnp.sum(x.astype(jnp.promote_types(x.dtype, jnp.float32)),
                 axis=tuple(range(x.ndim - nd, x.ndim)))
  return any_true(jnp.isnan(sums))


_torch_nan_windows_p = Primitive("jaxops_max_pool_torch_nan_windows")
_torch_nan_windows_p.multiple_results = True
_torch_nan_windows_p.def_impl(jax.jit(_torch_nan_windows, static_argnames=("plan",)))
_torch_nan_windows_p.def_abstract_eval(lambda *args, **_: args[:-1])
mlir.register_lowering(_torch_nan_windows_p, lambda ctx, *args, **kw: mlir.lower_fun(
    functools.partial(_torch_nan_windows, **kw, partitioned=partitioned(ctx)),
    multiple_results=True)(ctx, *args))
# (the pooled axes are the trailing ones: a batch axis goes first, and the conditional stays one)
batching.primitive_batchers[_torch_nan_windows_p] = lambda args, dims, **kw: (
    _torch_nan_windows_p.bind(*batch_first(args, dims), **kw), (0,) * (len(args) - 1))


def _argmax_by_axis(x: jax.Array, plan: _MaxPlan) -> tuple[jax.Array, jax.Array]:
  """``_argmax`` for windows of many taps, one pooled axis at a time (the last first): a scan
  over that axis' taps carries the maximum and the winning taps of the axes already pooled.

  Each pass keeps, per line, its first largest element that is not NaN (a NaN loses to any
  number; the line is NaN only if all of it is), so the passes together give the window's
  first largest non-NaN element in window order (the earliest outer tap holding the maximum,
  and within it the earliest inner one), as ``_argmax_reduce_window``'s pairs do; then, as
  there, the windows whose first element inside the input is NaN take it (``_argmax``'s
  rule). Each pass unrolls one axis' taps (k per axis instead of k**r per window: a 64 x 64
  window with indices took 8-13 s as a reduce_window on 512 x 512). With ``plan.torch_nan``
  each pass takes a NaN as it comes (its line's last NaN, else its first largest element), so
  the passes together give the last NaN of the last line holding one, which is the window's
  last NaN in window order.
  """
  nd = len(plan.axes)
  kernel = tuple(a.kernel for a in plan.axes)
  tdtype = _tap_dtype(plan.axes)
  floating = jnp.issubdtype(x.dtype, jnp.floating)

  def scan(taps: list[tuple[tuple[int, ...], tuple[jax.Array, ...]]]) -> tuple[jax.Array, ...]:
    (tap, (best, *carried)), rest = taps[0], taps[1:]
    arg = jnp.full(best.shape, tap[0], tdtype)
    for tap, (v, *others) in rest:
      take = v > best
      if floating:
        take = take | (jnp.isnan(v) if plan.torch_nan else jnp.isnan(best) & ~jnp.isnan(v))
      best = jnp.where(take, v, best)
      carried = [jnp.where(take, o, c) for o, c in zip(others, carried)]
      arg = jnp.where(take, np.array(tap[0], tdtype), arg)
    return (best, arg, *carried)

  arrays: tuple[jax.Array, ...] = (x,)
  for i in reversed(range(nd)):
    arrays = _over_runs(arrays, plan, (i,), scan)
  best, *args = arrays  # the taps along axes 0, 1, ..., nd - 1
  number = functools.reduce(operator.add, [
      a * tdtype.type(math.prod(kernel[i + 1:])) for i, a in enumerate(args)]).astype(tdtype)
  if floating and not plan.torch_nan:
    return _first_nan_stays(x, plan, best, number)
  return best, number


def _argmax_reduce_window(x: jax.Array, plan: _MaxPlan) -> tuple[jax.Array, jax.Array]:
  """``_argmax`` for windows of many taps, as one reduce_window over (value, position) pairs.

  The pairs' order is total, so the reduction may run in any order: the larger value wins,
  a NaN loses to any number, and of equal values (or two NaNs) the smaller flat position in
  the plane wins, which within a window is the first tap in window order. That gives each
  window's largest non-NaN element, first on ties. ``_argmax``'s rule differs where the
  window's first tap inside the input is NaN (nothing is greater than it, so it stays): those
  windows take that tap, read with one strided slice per run. With ``plan.torch_nan`` a NaN
  beats any number and of two NaNs the larger position wins: the window's last NaN.
  """
  axes, nd = plan.axes, len(plan.axes)
  lead = x.ndim - nd
  spatial = tuple(x.shape[lead:])
  pads = []
  for i, a in enumerate(axes):  # trailing elements that no window reads are cut, not padded
    if a.pad_end_read < 0:
      x = lax.slice_in_dim(x, 0, a.size + a.pad_end_read, axis=lead + i)
    pads.append((a.pad_begin, max(a.pad_end_read, 0)))
  floating = jnp.issubdtype(x.dtype, jnp.floating)
  pos = jnp.broadcast_to(
      lax.slice(jnp.arange(math.prod(spatial), dtype=np.int32).reshape(spatial),
                [0] * nd, list(x.shape[lead:])), x.shape)

  def pick(a: tuple[jax.Array, jax.Array], b: tuple[jax.Array, jax.Array]
           ) -> tuple[jax.Array, jax.Array]:
    (va, pa), (vb, pb) = a, b
    tie = va == vb
    take = vb > va
    if floating and plan.torch_nan:
      na, nb = jnp.isnan(va), jnp.isnan(vb)
      take = jnp.where(na | nb, nb & (~na | (pb > pa)), take | (tie & (pb < pa)))
      return jnp.where(take, vb, va), jnp.where(take, pb, pa)
    if floating:
      na, nb = jnp.isnan(va), jnp.isnan(vb)
      take = take | (na & ~nb)
      tie = tie | (na & nb)
    take = take | (tie & (pb < pa))
    return jnp.where(take, vb, va), jnp.where(take, pb, pa)

  low = np.array(-np.inf if floating and plan.torch_nan
                 else np.nan if floating else np.iinfo(x.dtype).min, x.dtype)
  best, p = lax.reduce_window(
      (x, pos), (low, np.array(np.iinfo(np.int32).max, np.int32)), pick,
      (1,) * lead + tuple(a.kernel for a in axes), (1,) * lead + tuple(a.stride for a in axes),
      [(0, 0)] * lead + pads, window_dilation=(1,) * lead + tuple(a.dilation for a in axes))
  tdtype = _tap_dtype(axes)
  arg = jnp.zeros(best.shape, tdtype)
  unit, inner = 1, 1
  for i in reversed(range(nd)):
    a = axes[i]
    p_i = (p // np.int32(unit)) % np.int32(a.size)  # the position along axis i
    start = lax.broadcasted_iota(np.int32, best.shape, lead + i) * a.stride - a.pad_begin
    arg = arg + ((p_i - start) // np.int32(a.dilation)).astype(tdtype) * tdtype.type(inner)
    unit, inner = unit * a.size, inner * a.kernel
  if not floating or plan.torch_nan:
    return best, arg
  return _first_nan_stays(x, plan, best, arg)


def _first_nan_stays(x: jax.Array, plan: _MaxPlan, best: jax.Array, arg: jax.Array
                     ) -> tuple[jax.Array, jax.Array]:
  """(``best``, ``arg``), each window's largest non-NaN element and its tap, where the window's
  first element inside the input is not NaN; that element and its tap where it is (nothing is
  greater than it in ``_argmax``'s scan, so it stays)."""
  tdtype = _tap_dtype(plan.axes)
  first_plan = dataclasses.replace(plan, runs=tuple(tuple((b, e, read[:1]) for b, e, read in r)
                                                    for r in plan.runs))
  kernel = tuple(a.kernel for a in plan.axes)
  nd = len(plan.axes)
  first, first_arg = _over_runs(
      x, first_plan, tuple(range(nd)),
      lambda taps: (taps[0][1], jnp.full(taps[0][1].shape,
                                         int(np.ravel_multi_index(taps[0][0], kernel)), tdtype)))
  stay = jnp.isnan(first)
  return jnp.where(stay, first, best), jnp.where(stay, first_arg, arg)


# Fewest taps over the pooled axes but the last that make the two-pass maximum
# (``_max_values``) pay for its intermediate.
_TWO_PASS_TAPS = 6

# Stride-1 windows pooled one axis at a time (``_max_values``): those of at least
# _PER_AXIS_TAPS taps, and those of at least _PER_AXIS_SMALL_TAPS taps over planes of at most
# _PER_AXIS_SMALL_PLANE positions. On the CPU, 3x3x3 windows took 0.26-0.76 of the one pass'
# time, 5x5 windows 0.45-0.68 on planes of 40 x 40 to 56 x 56 but 1.08-1.50 on 128 x 128 and
# 256 x 256 (the one pass reads each plane's neighbouring rows from the cache), 3x3 windows
# 0.83-1.38 and 2x2x2 windows twice as long (docs/PERFORMANCE.md).
_PER_AXIS_TAPS = 27
_PER_AXIS_SMALL_TAPS = 16
_PER_AXIS_SMALL_PLANE = 64 * 64


def _per_axis(plan: _MaxPlan) -> bool:
  taps = math.prod(a.kernel for a in plan.axes)
  plane = math.prod(a.size for a in plan.axes)
  return (all(a.stride == 1 for a in plan.axes) and sum(a.kernel > 1 for a in plan.axes) > 1
          and (taps >= _PER_AXIS_TAPS
               or (taps >= _PER_AXIS_SMALL_TAPS and plane <= _PER_AXIS_SMALL_PLANE)))


def _two_pass(plan: _MaxPlan) -> bool:
  *outer, last = plan.axes
  return (bool(outer) and last.stride > 1 and last.kernel > 1 and
          _TWO_PASS_TAPS <= math.prod(a.kernel for a in outer) and not _many_taps(plan.axes))


def _passes(plan: _MaxPlan) -> tuple[tuple[int, ...], ...]:
  """The pooled axes (indices into ``plan.axes``) of each pass of ``_max_values``, in order.

  One pass over every axis, except: stride-1 windows of many taps (``_per_axis``) and windows
  whose one pass would read more than ``_UNROLLED_READS`` slices, one pass per axis whose
  kernel is longer than 1 (a maximum over the window's box is the maximum over each of its
  axes in turn, the padding excluded on each); a strided last axis after other axes of many
  taps, two passes (``_two_pass``).
  """
  nd = len(plan.axes)
  every = tuple(range(nd))
  path = _argmax_path(plan)
  if _many_taps(plan.axes) or path == "reduce_window":
    return (every,)
  if _per_axis(plan) or path == "by_axis":
    return tuple((i,) for i, a in enumerate(plan.axes) if a.kernel > 1)
  if _two_pass(plan):
    return (every[:-1], (nd - 1,))
  return (every,)


def _max_values(x: jax.Array, plan: _MaxPlan) -> jax.Array:
  """The maxima alone (no tap numbers), by the rule of ``_argmax``.

  In several passes where ``_passes`` says so, each taking the maximum over some of the pooled
  axes of the previous pass' result (padding never read): a strided slice along the last
  (contiguous) axis does not vectorise, the others do, so where the last axis is strided and
  the other axes have many taps, the first pass pools the other axes for every position of the
  last axis and the second the last axis; stride-1 windows of many taps are pooled one axis at
  a time, a sum of the kernel's lengths of comparisons per output instead of their product.
  The passes let a NaN win, so a window holding a NaN comes out NaN (PyTorch's rule, kept with
  ``plan.torch_nan``); under ONNX's, only if there is one anywhere are those windows computed
  again by ``_argmax``'s rule (a NaN counts only as the window's first element inside the
  input). Ties do not change the value (a zero's sign aside:
  with zeros of both signs, the passes' order may return the other one).
  """
  passes = _passes(plan)
  if len(passes) == 1:
    if plan.torch_nan and jnp.issubdtype(x.dtype, jnp.floating) and _argmax_path(plan) == "one":
      return _torch_nan_windows_p.bind(_scan(x, plan, nan_wins=False)[0], x, plan=plan)[0]
    return _argmax(x, plan)[0]
  floating = jnp.issubdtype(x.dtype, jnp.floating)

  def any_nan_max(taps: _Taps) -> tuple[jax.Array]:
    best = taps[0][1]
    for _, v in taps[1:]:
      take = (v > best) | jnp.isnan(v) if floating else v > best
      best = jnp.where(take, v, best)
    return (best,)

  y = x
  for k, pooled in enumerate(passes):
    # (a barrier between passes: fused back together, they would be the one pass again)
    (y,) = _over_runs(lax.optimization_barrier(y) if k else y, plan, pooled, any_nan_max)
  if not floating or plan.torch_nan:
    return y
  return _nan_windows_p.bind(y, x, plan=plan)


def _nan_windows(y: jax.Array, x: jax.Array, *, plan: _MaxPlan,
                 partitioned: bool = False) -> jax.Array:
  """``y`` (the two-pass maxima, NaN where a window holds one) with those windows computed
  again by ``_argmax``'s rule, only if there is one: a conditional. A primitive, so that its
  lowering knows whether the program is compiled for several devices, where the conditional's
  predicate (a NaN anywhere) would need an all-reduce: there, every window by ``_argmax``'s
  rule where ``y`` is NaN, unconditionally."""
  if partitioned:
    return jnp.where(jnp.isnan(y), _argmax(x, plan)[0], y)
  # (isnan inside the branch: outside it, XLA computes the second pass again for it)
  return lax.cond(any_true(jnp.isnan(y)),
                  lambda: jnp.where(jnp.isnan(y), _argmax(x, plan)[0], y), lambda: y)


def _fix_primitive(name: str, fn: Callable[..., jax.Array], param: str) -> Primitive:
  """A primitive computing ``fn(y, x, *, <param>, partitioned)``, a result of ``y``'s type that
  fixes some of ``y`` from ``x`` behind a conditional: its lowering passes whether the program
  is compiled for several devices (where the conditional's predicate would need an
  all-reduce), and its batching rule moves a batch axis first (the pooled axes, or rows, are
  the trailing ones), so that the conditional stays one under vmap. ``param`` is static."""
  prim = Primitive(name)
  prim.def_impl(jax.jit(fn, static_argnames=(param,)))
  prim.def_abstract_eval(lambda y, x, **kw: y)
  mlir.register_lowering(prim, lambda ctx, y, x, **kw: mlir.lower_fun(
      functools.partial(fn, **kw, partitioned=partitioned(ctx)), multiple_results=False)(
          ctx, y, x))
  batching.primitive_batchers[prim] = lambda args, dims, **kw: (
      prim.bind(*batch_first(args, dims), **kw), 0)
  return prim


_nan_windows_p = _fix_primitive("jaxops_max_pool_nan_windows", _nan_windows, "plan")


def _select_taps(t: jax.Array, arg: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """The element of ``t`` at each window's tap ``arg``: linear in ``t``.

  Written so that its transpose (the backward pass of max_pool) is cheap: each pooled axis of
  the zero-padded ``t`` is viewed as ``(rows, stride)`` and split into its ``stride`` phases;
  tap ``j`` (padded position ``o * s + j * d = (o + q) * s + r``) reads rows ``o + q`` of phase
  ``r``, a unit-stride slice. Transposed, every tap becomes a pad of an output-sized array into
  its phase, and the phases are concatenated back into place: no scatter, no strided writes.
  """
  nd = len(axes)
  lead = t.ndim - nd
  rows = [max(-(-(a.pad_begin + a.size) // a.stride),
              a.out_len + (a.extent - 1) // a.stride) for a in axes]
  config = [(0, 0, 0)] * lead + [(a.pad_begin, r * a.stride - a.pad_begin - a.size, 0)
                                 for a, r in zip(axes, rows)]
  tp = lax.pad(t, np.zeros((), t.dtype), config)
  tp = reshape_lead(tp, t.shape[:lead] + sum(((r, a.stride) for a, r in zip(axes, rows)), ()),
                    lead)
  phases: dict[tuple[int, ...], jax.Array] = {(): tp}
  for i, a in enumerate(axes):
    split: dict[tuple[int, ...], jax.Array] = {}
    where = lead + i + 1  # the stride axis of pooled axis i, once axes before it are split
    for key, piece in phases.items():
      parts = jnp.split(piece, a.stride, axis=where) if a.stride > 1 else [piece]
      for r, part in enumerate(parts):
        split[key + (r,)] = lax.squeeze(part, (where,))
    phases = split
  zero = np.zeros((), t.dtype)
  terms = []
  for n, tap in enumerate(_taps(axes)):
    qr = [divmod(j * a.dilation, a.stride) for j, a in zip(tap, axes)]
    piece = phases[tuple(r for _, r in qr)]
    start = [0] * lead + [q for q, _ in qr]
    limit = list(piece.shape[:lead]) + [q + a.out_len for (q, _), a in zip(qr, axes)]
    terms.append(jnp.where(arg == n, lax.slice(piece, start, limit), zero))
  return functools.reduce(operator.add, terms)


def _gather_taps(t: jax.Array, arg: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """``_select_taps`` as a gather within each plane of the leading axes.

  Its transpose (the backward pass) is one scatter-add of the cotangent into each plane: one
  write per output element, where ``_select_taps`` writes the whole input once per tap. Within
  a plane, so that batch- or channel-sharded inputs need no collectives.

  XLA's CPU code spells the indices of a gather batched over the leading axes out, one
  coordinate per axis, in the indices' type: int16 where every coordinate fits (the ResNet
  stem's backward, 3x3 s2 p1 on 8x64x112x112, keeps 17 MiB of temporaries instead of 26).
  """
  lead = t.ndim - len(axes)
  dims = t.shape[:lead] + (math.prod(t.shape[lead:]),)
  # (a symbolic batch size, under jax.export, may be any length: int32)
  small = all(isinstance(d, int) for d in dims) and max(dims, default=1) <= np.iinfo(np.int16).max
  index = _plane_index(arg, axes, t.shape[lead:], 0, np.dtype(np.int16 if small else np.int32))
  # (explicit lengths: -1 is ambiguous in an empty batch)
  flat = reshape_lead(t, t.shape[:lead] + (math.prod(t.shape[lead:]),), lead)
  taken = jnp.take_along_axis(
      flat, reshape_lead(index, index.shape[:lead] + (math.prod(index.shape[lead:]),), lead),
      axis=-1, mode="promise_in_bounds")
  return reshape_lead(taken, arg.shape, lead)


def _tangent(t: jax.Array, arg: jax.Array, axes: tuple[WindowAxis, ...]) -> jax.Array:
  """The tangent of the maxima: ``t`` at each window's winning tap ``arg``.

  Where windows overlap, XLA's CPU code for ``_select_taps``' transpose (a write of the whole
  input per tap, interleaved by phase) is the slow part of the backward pass, and a scatter-add
  is faster; on other platforms, and where windows do not overlap, ``_select_taps``.
  """
  plane = math.prod(a.size for a in axes)
  if _many_taps(axes):  # _select_taps writes one term per tap
    return _gather_taps(t, arg, axes)
  if all(a.stride >= a.extent for a in axes) or plane > np.iinfo(np.int32).max:
    return _select_taps(t, arg, axes)
  return lax.platform_dependent(t, arg, cpu=functools.partial(_gather_taps, axes=axes),
                                default=functools.partial(_select_taps, axes=axes))


@functools.partial(jax.jit, static_argnums=0)
def _jvp(plan: _MaxPlan, x: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  # The primal through the custom rule again, so that higher derivatives also take it (not
  # JAX's derivative of every tap's comparison and select). With PyTorch's NaN rule, windows
  # that do not overlap test for NaN in the scan: the backward pass then fuses with it, where
  # the conditional of ``_torch_nan_windows`` would take materialised maxima and tap numbers
  # (2x2 s2 on 8x128x56x56: 1.16 of ONNX's rule's time against 1.71, docs/PERFORMANCE.md).
  if plan.torch_nan and all(a.stride >= a.extent for a in plan.axes):
    plan = dataclasses.replace(plan, nan_in_scan=True)
  y, arg = _values_and_taps(x, plan)
  # Rematerialised, so that the backward pass keeps only the tap numbers (one small integer per
  # output), not one mask or index per tap.
  ty = jax.checkpoint(_tangent, static_argnums=(2,))(t, lax.stop_gradient(arg), plan.axes)
  return y, arg, ty


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _values_and_taps(x: jax.Array, plan: _MaxPlan) -> tuple[jax.Array, jax.Array]:
  return _argmax(x, plan)


def _values_and_taps_jvp(plan: _MaxPlan, primals: tuple[Any, ...],
                         tangents: tuple[Any, ...]) -> tuple[Any, Any]:
  y, arg, ty = _jvp(plan, primals[0], dense_tangent(tangents[0]))
  return (y, arg), (ty, no_tangent(arg))


_values_and_taps.defjvp(_values_and_taps_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _values(x: jax.Array, plan: _MaxPlan) -> jax.Array:
  """The maxima of a floating input: ``_max_values`` when not differentiated."""
  return _max_values(x, plan)


@_values.defjvp
def _values_jvp(plan: _MaxPlan, primals: tuple[Any, ...],
                tangents: tuple[Any, ...]) -> tuple[Any, Any]:
  y, _, ty = _jvp(plan, primals[0], tangents[0])
  return y, ty


@functools.partial(jax.jit, static_argnums=1)
def _max_pool(x: jax.Array, plan: _MaxPlan) -> jax.Array:
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return _max_values(x, plan)
  return _values(x, plan)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _max_pool_with_indices(x: jax.Array, plan: _MaxPlan, storage_order: int,
                           in_plane: bool = False) -> tuple[jax.Array, jax.Array]:
  """(maxima, indices): ONNX's flat indices, or with ``in_plane`` each one's position within
  its plane of the pooled axes (PyTorch's)."""
  if jnp.issubdtype(x.dtype, jnp.floating):
    y, arg = _values_and_taps(x, plan)
  else:
    y, arg = _argmax(x, plan)
  arg = lax.stop_gradient(arg)
  if in_plane:
    return y, _plane_index(arg, plan.axes, tuple(x.shape[x.ndim - len(plan.axes):]),
                           storage_order, _index_dtype())
  return y, _indices(arg, plan.axes, tuple(x.shape), storage_order)


def _plane_index(arg: jax.Array, axes: tuple[WindowAxis, ...], spatial: tuple[int, ...],
                 storage_order: int, dtype: np.dtype) -> jax.Array:
  """The flat position within its plane (the pooled axes) of each window's winning tap."""
  nd = len(axes)
  lead = arg.ndim - nd
  if storage_order == 0:
    step = [math.prod(spatial[i + 1:]) for i in range(nd)]
  else:
    step = [math.prod(spatial[:i]) for i in range(nd)]
  # The window start of each output position, plus the offset of its winning tap. The starts
  # are a sum of one row per axis: a table of the output plane (read faster than the sum is
  # computed: the ResNet stem's indices took 2.0-2.3 ms against 2.4-3.0), but added on the
  # device for planes past _BASE_TABLE_MAX (the table is built at trace time and embedded in
  # the program: 8192 x 8192 took 0.4 s to trace, a 1024 x 1024 export held 1 MB).
  rows = [(np.arange(a.out_len, dtype=np.int64) * a.stride - a.pad_begin) * st
          for a, st in zip(axes, step)]
  offsets: np.ndarray = np.zeros((), np.int64)
  for a, st in zip(axes, step):
    offsets = np.add.outer(offsets, np.arange(a.kernel) * a.dilation * st)
  offsets = offsets.reshape(-1)
  info = np.iinfo(dtype)
  # every row, every partial sum of them and the offsets within the dtype: bounded by the sums
  # of the rows' minima and maxima, each taken with 0
  low = sum(int(r.min(initial=0)) for r in rows)
  high = sum(int(r.max(initial=0)) for r in rows)
  if min(low, offsets.min()) < info.min or max(high, offsets.max()) > info.max:
    dtype = np.dtype(np.int32)  # a table past a small dtype (large dilations or padding)
  if len(offsets) <= 32:
    off = jnp.zeros(arg.shape, dtype)
    for n, value in enumerate(offsets):
      if value:
        off = jnp.where(arg == n, np.array(value, dtype), off)
  else:
    off = jnp.asarray(offsets.astype(dtype))[arg.astype(np.int32)]
  if math.prod(r.size for r in rows) <= _BASE_TABLE_MAX:
    table: np.ndarray = functools.reduce(np.add.outer, rows, np.zeros((), np.int64))
    return off + jnp.asarray(table.astype(dtype).reshape((1,) * lead + table.shape))
  return off + functools.reduce(operator.add, [
      jnp.asarray(r.astype(dtype)).reshape((1,) * (lead + d) + (-1,) + (1,) * (nd - d - 1))
      for d, r in enumerate(rows)])


# Output planes up to this many positions take their window starts from a table (see above).
_BASE_TABLE_MAX = 1 << 18


def _indices(arg: jax.Array, axes: tuple[WindowAxis, ...], shape: tuple[int, ...],
             storage_order: int) -> jax.Array:
  """ONNX's flat index of each window's winning tap ``arg``."""
  dtype = _index_dtype()
  lead = len(shape) - len(axes)
  idx = _plane_index(arg, axes, shape[lead:], storage_order, dtype)
  if lead:
    plane = math.prod(shape[lead:])
    planes = np.arange(math.prod(shape[:lead]), dtype=np.int64).reshape(shape[:lead]) * plane
    idx = idx + lax.broadcast_in_dim(jnp.asarray(planes.astype(dtype)), arg.shape,
                                     tuple(range(lead)))
  return idx


# --- global_max_pool ----------------------------------------------------------------------------


def global_max_pool(x: jax.typing.ArrayLike) -> jax.Array:
  """ONNX GlobalMaxPool: the maximum over every axis after the first two.

  ``x`` is ``(N, C, D1, ..., Dn)``; the result is ``(N, C, 1, ..., 1)``. NaN propagates: a plane
  that holds a NaN has the maximum NaN (jnp.max's rule, and onnx.reference's). The result is
  the plane's first maximum in row-major order (its first NaN if it holds one), that element's
  own bits: of tied zeros, the first one's sign, as PyTorch's max pooling gives. The gradient
  goes to that element, as :func:`max_pool`'s goes to the element its indices name.

  Args:
    x: input array with at least two axes, float16, bfloat16, float32 or float64.

  Returns:
    The maxima, of the same dtype as ``x``.

  Raises:
    TypeError: ``x`` is not one of the four floating dtypes.
    ValueError: ``x`` has fewer than two axes, or a spatial axis of length 0 (in a non-empty
      batch of planes).

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> jaxops.global_max_pool(jnp.arange(8.0).reshape(1, 2, 2, 2))
    Array([[[[3.]],
    <BLANKLINE>
            [[7.]]]], dtype=float32)
  """
  op = "jaxops.global_max_pool"
  x = global_pool_input(op, x, _FLOATS)
  if x.size == 0 and math.prod(x.shape[:2]) > 0:
    raise ValueError(f"{op}: argument `x` must have spatial axes of length at least 1 (a "
                     f"maximum over no elements is undefined); got shape {tuple(x.shape)}")
  return _global_max_pool(x)


@jax.jit
def _global_max_pool(x: jax.Array) -> jax.Array:
  out = x.shape[:2] + (1,) * (x.ndim - 2)
  if x.size == 0:  # no planes (an empty plane is refused before)
    return jnp.zeros(out, x.dtype)
  return _first_maximum(x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),))).reshape(out)


# GlobalMaxPool compares each plane's elements in blocks of this many adjacent ones, then the
# blocks' winners in blocks again, until one is left.
_ROUND = 8


# Rows of at most this many elements carry every element's position through the rounds; longer
# ones find the winner's position after them, level by level from the top (docs/PERFORMANCE.md,
# "GlobalMaxPool: XLA's maximum where it is exact").
_CARRIED = 7 * _ROUND


def _rounds(flat: jax.Array, last_nan: bool = False) -> tuple[jax.Array, jax.Array]:
  """The first maximum of each row of ``flat`` (..., L) as (..., 1), and its int32 position
  (XLA drops the positions where only the maximum is used): a knockout in rounds, each over
  blocks of ``_ROUND`` adjacent elements, so that every winner stands for a contiguous run and
  the earlier run wins a tie. A later element takes the lead only if it is greater, or NaN where
  the lead is not: so the winner is the row's first NaN if it holds one, else its first maximum
  (of tied zeros, the first one's sign), its own bits. With ``last_nan``, a later NaN takes the
  lead from a NaN too (PyTorch's scan, ``val > max || isnan(val)``: its last NaN). Each round is
  one elementwise loop that XLA's CPU backend vectorises; ``jnp.argmax`` is a variadic reduction
  that it runs element by element, 1.6 to 9 times slower here (docs/PERFORMANCE.md,
  "GlobalMaxPool"). bfloat16 rows are knocked out as their bit patterns, compared as values:
  XLA's CPU backend computes bfloat16 in float32, and its select of a bfloat16 NaN gave the
  canonical NaN. (Selecting bit patterns in every dtype kept the loops from vectorising: 1.2-2.8
  times slower in float32.)

  Rows of more than ``_CARRIED`` elements run the rounds on the values alone (carrying
  positions split each round into a loop per comparison, 3-4 times slower on 56 x 56 planes)
  and then find the position from the top level down: in the winning block of each level, the
  first element with the winner's bits is the one the knockout took (an earlier one with the
  same bits would have kept the lead), or with ``last_nan`` and a NaN winner the last such
  element (no NaN follows it in its block)."""
  dtype = flat.dtype
  word = np.dtype(np.uint16) if dtype == jnp.bfloat16 else dtype
  value = functools.partial(lax.bitcast_convert_type, new_dtype=dtype)
  fill = np.array(-np.inf, dtype).view(word)  # never greater, never NaN: never takes the lead
  bits = lax.bitcast_convert_type(flat, word)
  pos: Any = _positions(flat) if flat.shape[-1] <= _CARRIED else None
  levels = []
  while bits.shape[-1] > 1:
    blocks = _blocks(bits, fill)
    if pos is None:
      levels.append(blocks)
    else:
      pos = _blocks(pos, 0)
    lead = blocks[..., 0]
    where: Any = None if pos is None else pos[..., 0]
    for j in range(1, blocks.shape[-1]):
      a, b = value(lead), value(blocks[..., j])
      take = (b > a) | jnp.isnan(b)
      if not last_nan:
        take = take & ~jnp.isnan(a)
      lead = jnp.where(take, blocks[..., j], lead)
      if pos is not None:
        where = jnp.where(take, pos[..., j], where)
    bits, pos = lead, where
  best = value(bits)
  if pos is not None:
    return best, pos
  unsigned = np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")
  winner = lax.bitcast_convert_type(bits, unsigned)
  at = jnp.zeros(best.shape, np.int32)  # the winner's block at each level
  for blocks in reversed(levels):
    k = blocks.shape[-1]
    block = (blocks[..., 0, :] if blocks.shape[-2] == 1 else
             jnp.take_along_axis(blocks, at[..., None], axis=-2)[..., 0, :])
    same = lax.bitcast_convert_type(block, unsigned) == winner
    lane = lax.broadcasted_iota(np.int32, same.shape, same.ndim - 1)
    offset = jnp.min(jnp.where(same, lane, k), axis=-1, keepdims=True)
    if last_nan:
      offset = jnp.where(jnp.isnan(best), jnp.max(jnp.where(same, lane, -1), axis=-1,
                                                   keepdims=True), offset)
    at = at * k + offset
  return best, at


def _blocks(row: jax.Array, fill: Any) -> jax.Array:
  """(..., n) -> (..., ceil(n / k), k), blocks of k = min(_ROUND, n), the last one filled."""
  n = row.shape[-1]
  k = min(_ROUND, n)
  tail = -n % k
  if tail:
    row = jnp.concatenate([row, jnp.full(row.shape[:-1] + (tail,), fill, row.dtype)], axis=-1)
  return row.reshape(row.shape[:-1] + ((n + tail) // k, k))


def _positions(flat: jax.Array) -> jax.Array:
  return lax.broadcasted_iota(np.int32, flat.shape, flat.ndim - 1)


@jax.custom_jvp
def _first_maximum(flat: jax.Array) -> jax.Array:
  """(..., L) -> (..., 1): each row's first maximum (``_rounds``' value, by ``_maximum``)."""
  return _maximum(flat)


def _maximum(flat: jax.Array, last_nan: bool = False) -> jax.Array:
  """``_rounds(flat, last_nan)[0]``, by XLA's maximum reduction where that is the same.

  A maximum that is neither NaN nor zero has one bit pattern, so it is the knockout's element;
  XLA's reduction, which its CPU backend vectorises, is several times faster than the rounds
  (56 x 56 planes: 0.26 ms against 1.4). Rows holding a NaN (XLA's reduction need not
  propagate it, and the rounds pick one NaN's bits) or whose maximum is a zero (of either sign)
  take the rounds, behind a conditional on whether there is any (``_exact_maxima``)."""
  return _exact_maxima_p.bind(jnp.max(flat, axis=-1, keepdims=True), flat, last_nan=last_nan)


def _exact_maxima(m: jax.Array, flat: jax.Array, *, last_nan: bool,
                  partitioned: bool = False) -> jax.Array:
  """``m`` (XLA's maxima of the rows of ``flat``) with the rows it may get wrong computed by
  ``_rounds``, only if there is one: a conditional. A primitive, so that its lowering knows
  whether the program is compiled for several devices, where the predicate would need an
  all-reduce: there, those rows by the rounds unconditionally (``_nan_windows``' plan)."""
  # a NaN anywhere in a row makes its sum NaN (as do infinities of both signs: the rounds then)
  exact = jnp.isnan(jnp.sum(flat, axis=-1, keepdims=True)) | (m == 0)

  def fix() -> jax.Array:
    if m.dtype != jnp.bfloat16:
      return jnp.where(exact, _rounds(flat, last_nan)[0], m)
    # as bit patterns: a bfloat16 select gives the canonical NaN (``_rounds``)
    bits = functools.partial(lax.bitcast_convert_type, new_dtype=np.uint16)
    return lax.bitcast_convert_type(
        jnp.where(exact, bits(_rounds(flat, last_nan)[0]), bits(m)), m.dtype)

  return fix() if partitioned else lax.cond(any_true(exact), fix, lambda: m)


_exact_maxima_p = _fix_primitive("jaxops_global_max_pool_exact_maxima", _exact_maxima,
                                 "last_nan")


@_first_maximum.defjvp
def _first_maximum_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> Any:
  """The tangent at the winning element: the gradient goes to the plane's first maximum (its
  first NaN), as max_pool's goes to the element its indices name."""
  (flat,), (t,) = primals, tangents
  best, where = _rounds(flat)
  # the rounds' own maximum (not _maximum's again: XLA would compute both), through _winner,
  # so that higher derivatives take the winner's tangent again
  return _winner(flat, lax.stop_gradient(best), where), jnp.take_along_axis(t, where, axis=-1)


@jax.custom_jvp
def _winner(flat: jax.Array, best: jax.Array, where: jax.Array) -> jax.Array:
  """``best``, the element of each row of ``flat`` at ``where`` (``_rounds``' results), whose
  tangent is the tangent of ``flat`` there."""
  return best


@_winner.defjvp
def _winner_jvp(primals: tuple[jax.Array, ...], tangents: tuple[Any, ...]) -> Any:
  (flat, best, where), (t, _, _) = primals, tangents
  return (_winner(flat, best, where),
          jnp.take_along_axis(t, where, axis=-1))


# --- max_unpool ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Unpool:
  """The windows to unpool into: the full output shape, the pooled rank, and the pooling's
  windows (kernel, stride, leading padding per axis). Shared by ``max_unpool`` and
  ``jaxops.torch.max_unpool{1,2,3}d``."""

  out: tuple[int, ...]
  nd: int
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  pad: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _UnpoolPlan:
  default: tuple[int, ...]   # the output shape the attributes give
  out: tuple[int, ...]       # the output shape (output_shape, or the default)
  # The pooling's windows into the default output. Where every index lies in its own window
  # the unpool needs no scatter (``_unpool_windows``): a select into the windows, or where they
  # overlap a pull of each position's candidates (``_unpool_pull``).
  cfg: _Unpool


def _unpool_plan(x_shape: tuple[int, ...], i_shape: tuple[int, ...], kernel_shape: Any,
                 strides: Any, pads: Any, output_shape: Any) -> _UnpoolPlan:
  op = "jaxops.max_unpool"
  kernel = int_tuple(op, "kernel_shape", kernel_shape)
  nd = len(kernel)
  if nd == 0 or any(k < 1 for k in kernel):
    raise value_error(op, "kernel_shape", kernel_shape, "a non-empty sequence of integers >= 1")
  if len(x_shape) < nd:
    raise ValueError(f"{op}: argument `x` must have at least {nd} axes for a {nd}-D "
                     f"kernel_shape {kernel}; got shape {x_shape}")
  if tuple(i_shape) != tuple(x_shape):
    raise ValueError(f"{op}: argument `indices` must have the shape of `x` {x_shape}; got "
                     f"shape {i_shape}")
  strides_ = (1,) * nd if strides is None else int_tuple(op, "strides", strides, length=nd,
                                                         minimum=1)
  pads_ = (0,) * 2 * nd if pads is None else int_tuple(op, "pads", pads, length=2 * nd,
                                                       minimum=0)
  lead = x_shape[:len(x_shape) - nd]
  spatial = [(n - 1) * s - (pb + pe) + k
             for n, s, k, pb, pe in zip(x_shape[len(x_shape) - nd:], strides_, kernel,
                                        pads_[:nd], pads_[nd:])]
  if any(v < 1 for v in spatial):
    raise ValueError(f"{op}: kernel_shape {kernel}, strides {strides_} and pads {pads_} give "
                     f"the output spatial shape {tuple(spatial)} for `x` of shape {x_shape}; "
                     f"every length must be >= 1")
  default = tuple(lead) + tuple(spatial)
  cfg = _Unpool(default, nd, kernel, strides_, pads_[:nd])
  if output_shape is None:
    return _UnpoolPlan(default, default, cfg)
  out = int_tuple(op, "output_shape", concrete(op, "output_shape", output_shape).reshape(-1))
  if len(out) == nd and len(x_shape) != nd:
    out = tuple(lead) + out  # only the pooled axes given
  if len(out) != len(x_shape) or tuple(out[:len(lead)]) != tuple(lead) or any(
      o < d for o, d in zip(out, default)):
    raise value_error(op, "output_shape", output_shape,
                      f"the shape {default} that the attributes give, or one as long with the "
                      f"same leading axes {tuple(lead)} and pooled axes at least as long")
  return _UnpoolPlan(default, tuple(out), cfg)


_UNPOOL_PLANS = ConfigCache(_unpool_plan)


def max_unpool(x: jax.typing.ArrayLike, indices: jax.typing.ArrayLike,
               kernel_shape: Sequence[int], *, strides: Sequence[int] | None = None,
               pads: Sequence[int] | None = None,
               output_shape: Sequence[int] | None = None) -> jax.Array:
  """ONNX MaxUnpool (opset 22): puts each element of ``x`` at the flat position ``indices``
  names, zeros elsewhere (the partial inverse of :func:`max_pool` with ``return_indices``).

  The pooled axes are the trailing ``len(kernel_shape)`` axes. The default output length of each
  is ``(n - 1) * stride + kernel - pad_begin - pad_end``; the leading axes are kept. ``indices``
  are flat row-major positions in that default-shaped output (as max_pool returns them with
  ``storage_order=0``). With ``output_shape`` larger than the default, the result is the default
  one followed by zeros at the end of each pooled axis (the rule of ONNX's node test case and of
  onnx.reference; onnxruntime and PyTorch instead read the indices in the larger shape, see
  docs/DEVIATIONS.md).

  Where two elements name the same position, the later one (in row-major order of ``x``) is
  kept, as the spec's reference loop writes them; indices outside the output are dropped. The
  result is linear in ``x``, and its gradient with respect to ``x`` gathers the cotangent at
  the kept positions.

  Args:
    x: values, float16, bfloat16, float32 or float64.
    indices: integer array of the shape of ``x``.
    kernel_shape: window size along each pooled axis.
    strides: step along each pooled axis; default 1.
    pads: ``[x1_begin, ..., x1_end, ...]`` of the pooling that made ``x``; default 0.
    output_shape: the full output shape (or only its pooled axes); default as above.

  ``kernel_shape``, ``strides``, ``pads`` and ``output_shape`` decide the output shape, so they
  must be concrete.

  Returns:
    The unpooled array, of the dtype of ``x``.

  Raises:
    TypeError: ``x`` is not floating or ``indices`` not integer; a shape argument is traced.
    ValueError: mismatched shapes; a non-positive output length; an ``output_shape`` smaller
      than the default one or with other leading axes.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> x = jnp.array([[[[1.0, 5.0], [8.0, 7.0]]]])
    >>> i = jnp.array([[[[1, 7], [13, 15]]]])
    >>> jaxops.max_unpool(x, i, (2, 2), strides=(2, 2))
    Array([[[[0., 1., 0., 0.],
             [0., 0., 0., 5.],
             [0., 0., 0., 0.],
             [0., 8., 0., 7.]]]], dtype=float32)
  """
  op = "jaxops.max_unpool"
  x = floating_input(op, x, _FLOATS)
  indices = index_array(indices, op, "indices")
  if not jnp.issubdtype(indices.dtype, jnp.integer):
    raise TypeError(f"{op}: argument `indices` must have an integer dtype; got dtype "
                    f"{indices.dtype}")
  if indices.dtype.itemsize < 4:  # the planes' flat offsets would wrap in int8 / int16
    indices = indices.astype(_index_dtype())
  static = (tuple(x.shape), tuple(indices.shape), kernel_shape, strides, pads, output_shape)
  plan = _UNPOOL_PLANS(cache_key(*static), *static)
  check_output_size(op, plan.out, x.dtype)  # (XLA aborts the process on 2**62 elements)
  _check_index_range(op, plan.default, what="an output")  # (the indices' flat positions)
  return unpool_replicated(_max_unpool, x, indices, plan.cfg.nd, plan)


def unpool_replicated(f: Callable[..., jax.Array], x: jax.Array, indices: jax.Array, nd: int,
                      *static: Any) -> jax.Array:
  """``f(x, indices, *static)`` (an unpool of the last ``nd`` axes). On a mesh with explicit
  axes (``explicit_spec``), computed on replicated inputs and resharded as ``x``'s leading
  axes: the indices may name any position of the output (an all-gather, as under automatic
  sharding; README, Sharding). Shared with ``jaxops.torch.max_unpool{1,2,3}d``."""
  spec = explicit_spec(x)
  if spec is None and explicit_spec(indices) is None:
    return f(x, indices, *static)
  y = f(replicated(x), replicated(indices), *static)
  lead = (spec or (None,) * x.ndim)[:x.ndim - nd]
  return jax.sharding.reshard(y, jax.P(*lead, *(None,) * nd))


@functools.partial(jax.jit, static_argnums=2)
def _max_unpool(x: jax.Array, indices: jax.Array, plan: _UnpoolPlan) -> jax.Array:
  y = (_unpool_select(x, indices, plan) if unpool_windowed(plan.cfg) else
       _unpool_scatter(x, indices, plan))
  if plan.out != plan.default:
    y = lax.pad(y, np.zeros((), y.dtype), [(0, o - d, 0) for o, d in zip(plan.out, plan.default)])
  return y


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _unpool_select(x: jax.Array, indices: jax.Array, plan: _UnpoolPlan) -> jax.Array:
  """The unpool: indices that max_pool made lie in their own windows, and then no scatter is
  needed. The check is on the values, so any other indices still get the scatter's result. The
  values are computed inside the branch (computed outside, they would be copied out of it)."""
  ok = _unpool_windows(x, indices, plan)[1]
  return lax.cond(ok, lambda a, i: _unpool_windows(a, i, plan)[0],
                  lambda a, i: _unpool_scatter(a, i, plan), x, indices)


@_unpool_select.defjvp
def _unpool_select_jvp(plan: _UnpoolPlan, primals: tuple[Any, ...],
                       tangents: tuple[Any, ...]) -> tuple[Any, Any]:
  # The same linear map on the tangent, as a scatter-add: its transpose (the backward pass) is a
  # gather, where a reverse pass through the cond of values runs several times slower.
  x, indices = primals
  ok = _unpool_windows(x, indices, plan)[1]
  size = math.prod(plan.default)
  # Where every index lies in its own window, the kept elements are those in range whose
  # position no later element of an overlapping window names (``_unpool_kept``; all in range
  # where the windows do not overlap); the general rule (last writer wins) only otherwise.
  cfg = plan.cfg

  def local_target(i: jax.Array) -> jax.Array:
    kept = (i >= 0) & (i < size)
    if _unpool_overlaps(cfg):
      kept = kept & _unpool_kept(_unpool_plane_local(i, plan), cfg)
    return jnp.where(kept, i, size).astype(_index_dtype()).reshape(-1)

  target = (lax.cond(ok, local_target, lambda i: _unpool_targets(i, plan), indices)
            if unpool_keeps_by_compares(cfg) else _unpool_targets(indices, plan))
  return _unpool_select(x, indices, plan), scatter_add(tangents[0], target, plan.default)


@functools.lru_cache(maxsize=256)
def _unpool_blocks(cfg: _Unpool, n: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """Static tables over the blocks ``(n1, s1, n2, s2, ...)`` (input position, position in its
  stride-long block per axis): the per-plane index that block position holds once the
  padding is taken off, and whether it is a tap of the element's window inside the output."""
  size = cfg.out[len(cfg.out) - cfg.nd:]
  index: np.ndarray = np.zeros((), np.int64)
  valid: np.ndarray = np.ones((), bool)
  for d in range(cfg.nd):
    o = np.arange(n[d])[:, None] * cfg.stride[d] - cfg.pad[d]
    j = np.arange(cfg.stride[d])[None, :]
    index = np.add.outer(index, (o + j) * math.prod(size[d + 1:]))
    valid = np.multiply.outer(valid, (j < cfg.kernel[d]) & (o + j >= 0) & (o + j < size[d]))
  index.setflags(write=False)
  valid.setflags(write=False)
  return index, valid


def _unpool_hits(indices: jax.Array, cfg: _Unpool, n: tuple[int, ...]) -> jax.Array:
  """Per block position: does the element's index name it (and is it a tap of its window)."""
  lead = indices.ndim - cfg.nd
  index, valid = _unpool_blocks(cfg, n)
  dtype = _index_dtype()
  shape = indices.shape[:lead] + sum(((m, 1) for m in n), ())
  # A valid block position holds an index >= 0; -1 on the others, masked out.
  table = jnp.asarray(np.where(valid, index, -1).astype(dtype).reshape((1,) * lead +
                                                                       index.shape))
  return (reshape_lead(indices.astype(dtype), shape, lead) == table) & (table >= 0)


@functools.lru_cache(maxsize=256)
def _unpool_taps(cfg: _Unpool, n: tuple[int, ...]
                 ) -> tuple[np.ndarray, Mapping[tuple[int, ...], tuple[int, np.ndarray | None]]]:
  """Static tables over the input positions ``(n1, ..., nr)``: the per-plane index of each
  element's window origin (its first tap, before the padding is taken off; negative or past the
  output where the window starts in the padding), and per kernel tap (its position in the
  window, in row-major order) its index offset from the origin and where that tap lies inside
  the output (None: everywhere), read-only."""
  size = cfg.out[len(cfg.out) - cfg.nd:]
  mult = [math.prod(size[d + 1:]) for d in range(cfg.nd)]
  origin: np.ndarray = np.zeros((), np.int64)
  for d in range(cfg.nd):
    origin = np.add.outer(origin, (np.arange(n[d]) * cfg.stride[d] - cfg.pad[d]) * mult[d])
  taps = {}
  for tap in itertools.product(*[range(k) for k in cfg.kernel]):
    inside: np.ndarray = np.ones((), bool)
    for d in range(cfg.nd):
      pos = np.arange(n[d]) * cfg.stride[d] - cfg.pad[d] + tap[d]
      inside = np.multiply.outer(inside, (pos >= 0) & (pos < size[d]))
    mask = None if inside.all() else inside
    if mask is not None:
      mask.setflags(write=False)
    taps[tap] = (sum(j * m for j, m in zip(tap, mult)), mask)
  origin.setflags(write=False)
  return origin, types.MappingProxyType(taps)


def _unpool_rel(indices: jax.Array, cfg: _Unpool, n: tuple[int, ...]) -> jax.Array:
  """Per element: its per-plane index less its window's origin (``_unpool_taps``)."""
  lead = indices.ndim - cfg.nd
  origin = _unpool_taps(cfg, n)[0]
  dtype = _index_dtype()
  return indices.astype(dtype) - jnp.asarray(origin.astype(dtype).reshape((1,) * lead +
                                                                          origin.shape))


def _unpool_in_window(indices: jax.Array, cfg: _Unpool, n: tuple[int, ...]) -> jax.Array:
  """Per element: does its per-plane index name a tap of its own window inside the output
  (``_unpool_hits`` summed over the block, as elementwise compares with static offsets)."""
  lead = indices.ndim - cfg.nd
  rel = _unpool_rel(indices, cfg, n)
  hits = []
  for off, mask in _unpool_taps(cfg, n)[1].values():  # every kernel has a tap
    h = rel == np.asarray(off, rel.dtype)
    if mask is not None:
      h = h & jnp.asarray(mask.reshape((1,) * lead + mask.shape))
    hits.append(h)
  return functools.reduce(operator.or_, hits)


def _unpool_overlaps(cfg: _Unpool) -> bool:
  """Whether two windows can share a position (a kernel longer than its stride)."""
  return any(k > s for k, s in zip(cfg.kernel, cfg.stride))


# Overlapping windows take the pull (``_unpool_pull``) where each output position has at most
# this many candidate writers (3x3 stride 1, 5x5 stride 2, 3x3x3 stride 2), the scatter beyond.
_PULL_CANDIDATES = 9


def unpool_windowed(cfg: _Unpool) -> bool:
  """Whether the unpool takes its windows' path (a check that every index lies in its own
  window, then ``_unpool_local``) rather than the scatter alone: always where the windows do
  not overlap; where they do, with at most ``_PULL_CANDIDATES`` writers per position, and in
  3-D only where no pooled output length needs the pull's crop (3x3x3 stride 2 pads 1, without
  the checks, to 2x16x31x31x31: the pull 1.4-2.1 ms against the scatter's 1.3; to 32x32x32 0.6;
  in 1-D and 2-D the pull with its crop took 0.3-0.65 of the scatter's time). Shared with
  ``jaxops.torch.max_unpool{1,2,3}d``."""
  if not _unpool_overlaps(cfg):
    return True
  lead = len(cfg.out) - cfg.nd
  return (math.prod(-(-k // s) for k, s in zip(cfg.kernel, cfg.stride)) <= _PULL_CANDIDATES and
          (cfg.nd <= 2 or all(m % s == 0 for m, s in zip(cfg.out[lead:], cfg.stride))))


@functools.lru_cache(maxsize=256)
def _unpool_later(kernel: tuple[int, ...], stride: tuple[int, ...]
                  ) -> tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...]:
  """Per tap of the window: the shifts ``delta`` (in input elements) of the later elements
  (row-major) whose windows hold the same position, at tap ``tap - delta * stride``."""
  out = []
  for tap in itertools.product(*[range(k) for k in kernel]):
    shifts = tuple(d for d in itertools.product(*[range(-((k - 1 - t) // s), t // s + 1)
                                                  for k, t, s in zip(kernel, tap, stride)])
                   if d > (0,) * len(kernel))
    out.append((tap, shifts))
  return tuple(out)


def unpool_keeps_by_compares(cfg: _Unpool) -> bool:
  """Whether the derivative finds the kept elements of overlapping windows by
  ``_unpool_kept``'s shifted compares (at most two per tap: 3x3 stride 2 has 8 for its 9 taps,
  3x3x3 stride 2 49 for 27) rather than by the general last-writer scatter (3x3 stride 1 has
  36: its backward pass took 15-20 ms that way against 8-10, on 8x64x56x56). Shared with
  ``jaxops.torch.max_unpool{1,2,3}d``."""
  later = _unpool_later(cfg.kernel, cfg.stride)
  return sum(len(d) for _, d in later) <= 2 * len(later)


def _unpool_local(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """Indices that each lie in their own window (per plane). Where the windows do not overlap,
  every input element owns a block of ``stride`` positions per axis, so the output is one
  select into those blocks, then a pad (or crop) by the padding and the output size; where
  they overlap, ``_unpool_pull``. Its callers (``max_unpool``'s and
  ``jaxops.torch.max_unpool{1,2,3}d``'s windows) define the derivative: a scatter-add whose
  transpose is one gather."""
  if _unpool_overlaps(cfg):
    return _unpool_pull(x, indices, cfg)
  nd = cfg.nd
  lead = x.ndim - nd
  n = x.shape[lead:]
  size = cfg.out[len(cfg.out) - nd:]
  if _unpool_tiles(cfg):
    y = _unpool_tile_blocks(x, indices, cfg)
  else:
    blocks = x.shape[:lead] + sum(((m, 1) for m in n), ())
    y = jnp.where(_unpool_hits(indices, cfg, n), reshape_lead(x, blocks, lead),
                  np.zeros((), x.dtype))
  y = reshape_lead(y, x.shape[:lead] + tuple(m * st for m, st in zip(n, cfg.stride)), lead)
  config = [(0, 0, 0)] * lead + [(-p, o - (m * st - p), 0)
                                 for p, o, m, st in zip(cfg.pad, size, n, cfg.stride)]
  return lax.pad(y, np.zeros((), x.dtype), config)


# Windows of this many taps, tiling the output (``_unpool_tiles``).
_TILE_TAPS = range(3, 10)


def _unpool_tiles(cfg: _Unpool) -> bool:
  """Whether ``_unpool_local`` takes ``_unpool_tile_blocks``: windows that tile the output with
  no padding (kernel == stride) and 3 to 9 taps. Measured on the CPU against the blocked
  select, interleaved in one process (docs/PERFORMANCE.md): 2x2 to 8x128x56x56 0.72-0.81 of
  its time, 3x3 to 8x64x57x57 0.45-0.46, 2x2x2 to 2x16x32x32x32 0.78-0.93, (1, 2, 2)
  0.89-0.96, 1-D 3 0.80-0.86; with padding (3x3 pads 1: 1.6-2.0), a stride past the kernel
  (2x2 stride 3: 1.13), 16 taps (4x4: 1.13-1.19) or 1-D 2 (1.05-1.11), the blocked select
  stays."""
  return (not any(cfg.pad) and cfg.kernel == cfg.stride and
          math.prod(cfg.kernel) in _TILE_TAPS)


def _unpool_tile_blocks(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """``_unpool_local``'s blocks (lead..., n1, k1, ..., nd, kd) where the windows tile the output
  (``_unpool_tiles``): per tap, a select over the input's shape (the element where its index
  names that tap, else 0), the taps stacked into place (one loop fusion whose innermost reads
  are the input's rows, where the blocked select compares broadcast indices with a static
  table of every block position). Without the taps' masks of ``_unpool_in_window``: the select
  runs only where every index names a tap inside the output (``_unpool_windows``' check), and
  with torch's shorter output_size the pad crops the taps past its end."""
  nd = cfg.nd
  lead = x.ndim - nd
  n = x.shape[lead:]
  rel = _unpool_rel(indices, cfg, n)
  taps = _unpool_taps(cfg, n)[1]
  zero = np.zeros((), x.dtype)

  def stacked(prefix: tuple[int, ...]) -> jax.Array:
    # the blocks of the taps whose positions start with ``prefix``
    d = len(prefix)
    if d == nd:
      return jnp.where(rel == np.asarray(taps[prefix][0], rel.dtype), x, zero)
    return jnp.stack([stacked(prefix + (j,)) for j in range(cfg.kernel[d])], axis=lead + d + 1)

  return stacked(())


def _unpool_plane_local(indices: jax.Array, plan: _UnpoolPlan) -> jax.Array:
  """Flat indices as per-plane ones; another plane's position falls outside [0, plane)."""
  nd = plan.cfg.nd
  lead = indices.ndim - nd
  plane = math.prod(plan.default[lead:])
  base = (jnp.arange(math.prod(indices.shape[:lead]), dtype=indices.dtype) * plane).reshape(
      indices.shape[:lead] + (1,) * nd)
  return indices - base


def _unpool_windows(x: jax.Array, indices: jax.Array,
                    plan: _UnpoolPlan) -> tuple[jax.Array, jax.Array]:
  """(the unpool into the pooling's windows, whether it is exact): each element written
  where its index names a position of its own window, and the check that every index does so
  or lies outside the output (dropped)."""
  cfg = plan.cfg
  lead = x.ndim - cfg.nd
  local = _unpool_plane_local(indices, plan)
  size = math.prod(plan.default)
  dropped = (indices < 0) | (indices >= size)
  placed = _unpool_in_window(local, cfg, x.shape[lead:])
  return _unpool_local(x, local, cfg), all_true(placed | dropped)


def _unpool_candidates(cfg: _Unpool, phase: tuple[int, ...]
                       ) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
  """For the output positions ``o = q * stride + phase`` (per axis): the shift ``b`` such that
  the windows of the input elements ``q + b - j`` cover them, for each ``j`` of the list (per
  axis ``0 <= j <= (kernel - 1 - r) // stride`` with ``r = (phase + pad) % stride``), with the
  tap of that window the position is; earliest writer (row-major) first."""
  shift, per, rs = [], [], []
  for k, s, p, ph in zip(cfg.kernel, cfg.stride, cfg.pad, phase):
    b, r = divmod(ph + p, s)
    shift.append(b)
    rs.append(r)
    per.append(range((k - 1 - r) // s + 1) if r < k else range(0))
  out = [(js, tuple(r + j * s for r, j, s in zip(rs, js, cfg.stride)))
         for js in sorted(itertools.product(*per), reverse=True)]
  return tuple(shift), out


def _unpool_pull(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """``_unpool_local`` for overlapping windows: each output position, by phase (its position
  modulo the stride per axis), takes the latest of the input elements whose windows cover it
  and whose index names it (static shifted slices of the input compared with static tap
  offsets, no scatter), and the phases are stacked into place: one loop fusion beside the
  padded copies of the input and its offsets. The later element wins, as the reference loop's
  assignment order has it."""
  nd = cfg.nd
  lead = x.ndim - nd
  n = x.shape[lead:]
  size = cfg.out[len(cfg.out) - nd:]
  rel = _unpool_rel(indices, cfg, n)
  taps = _unpool_taps(cfg, n)[1]
  q = [-(-m // s) for m, s in zip(size, cfg.stride)]
  before = [(k - 1) // s for k, s in zip(cfg.kernel, cfg.stride)]
  after = [max(0, (s - 1 + p) // s + m - v) for s, p, m, v in zip(cfg.stride, cfg.pad, q, n)]
  config = [(0, 0, 0)] * lead + [(b, a, 0) for b, a in zip(before, after)]
  xp = lax.pad(x, np.zeros((), x.dtype), config)
  # -1 is no tap's offset: the padding never matches
  rp = lax.pad(rel, np.array(-1, rel.dtype), config)
  zero = np.zeros((), x.dtype)

  def phase(ph: tuple[int, ...]) -> jax.Array:
    shift, cands = _unpool_candidates(cfg, ph)
    y = None
    for js, tap in cands:
      starts = [0] * lead + [b0 + b - j for b0, b, j in zip(before, shift, js)]
      limits = list(x.shape[:lead]) + [st + m for st, m in zip(starts[lead:], q)]
      hit = lax.slice(rp, starts, limits) == np.asarray(taps[tap][0], rel.dtype)
      y = jnp.where(hit, lax.slice(xp, starts, limits), zero if y is None else y)
    return jnp.zeros(x.shape[:lead] + tuple(q), x.dtype) if y is None else y

  def stacked(prefix: tuple[int, ...]) -> jax.Array:
    d = len(prefix)
    if d == nd:
      return phase(prefix)
    return jnp.stack([stacked(prefix + (r,)) for r in range(cfg.stride[d])], axis=lead + d + 1)

  y = reshape_lead(stacked(()), x.shape[:lead] + tuple(m * s for m, s in zip(q, cfg.stride)),
                   lead)
  if y.shape[lead:] == tuple(size):
    return y
  # Cropped inside the loop fusion, whose index arithmetic per element then takes about as long
  # as the pull (8x64x56x56 to 111x111 against 112x112, docs/PERFORMANCE.md); cropped after
  # the conditional, as a copy, both 26 MB arrays were faulted in on every call.
  return y[(Ellipsis,) + tuple(slice(0, v) for v in size)]


def _unpool_kept(indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """Per element whose per-plane index lies in its own window: whether it is the last writer of
  its position, i.e. no later element (row-major) whose window covers that position names it
  too. Those elements lie within ``(kernel - 1) // stride`` along each axis, so this is shifted
  compares with static tap offsets, as ``_unpool_pull`` makes them."""
  nd = cfg.nd
  lead = indices.ndim - nd
  n = indices.shape[lead:]
  rel = _unpool_rel(indices, cfg, n)
  taps = _unpool_taps(cfg, n)[1]
  reach = [(k - 1) // s for k, s in zip(cfg.kernel, cfg.stride)]
  rp = lax.pad(rel, np.array(-1, rel.dtype), [(0, 0, 0)] * lead + [(r, r, 0) for r in reach])
  kept = []
  for tap, shifts in _unpool_later(cfg.kernel, cfg.stride):
    off, mask = taps[tap]
    hit = rel == np.asarray(off, rel.dtype)
    if mask is not None:
      hit = hit & jnp.asarray(mask.reshape((1,) * lead + mask.shape))
    for delta in shifts:
      later = tuple(t - d * s for t, d, s in zip(tap, delta, cfg.stride))
      starts = [0] * lead + [r + d for r, d in zip(reach, delta)]
      shifted = lax.slice(rp, starts, list(indices.shape[:lead]) +
                          [st + m for st, m in zip(starts[lead:], n)])
      hit = hit & (shifted != np.asarray(taps[later][0], rel.dtype))
    kept.append(hit)
  return functools.reduce(operator.or_, kept)


def _unpool_targets(indices: jax.Array, plan: _UnpoolPlan) -> jax.Array:
  """Each element's flat output position, or ``size`` (past the output, so that the scatter
  drops it) where it is dropped: out of range, or overwritten by a later element naming the
  same position (the reference loop's assignment order). No two kept elements share a
  position."""
  flat_i, size = _in_range(indices, plan)
  return jnp.where(_last_writers(flat_i, size)[1], flat_i, size)


def _in_range(indices: jax.Array, plan: _UnpoolPlan) -> tuple[jax.Array, int]:
  """The flat indices, ``size`` (the spare slot past the output) where out of range; and
  ``size``."""
  size = math.prod(plan.default)
  flat_i = indices.reshape(-1)
  flat_i = jnp.where((flat_i >= 0) & (flat_i < size), flat_i, size)  # out of range: dropped
  return flat_i.astype(_index_dtype()), size


def _last_writers(flat: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
  """For flat positions in ``[0, size]`` (``size``: a spare slot), written in order: per
  position, the number of its last writer (-1: none); per element, whether it is that last
  writer. Shared with ``jaxops.torch.max_unpool{1,2,3}d``."""
  order = jnp.arange(flat.shape[0], dtype=flat.dtype)
  last = jnp.full((size + 1,), -1, flat.dtype).at[flat].max(order, mode="promise_in_bounds")
  return last, last[flat] == order


def _take_last(x: jax.Array, last: jax.Array) -> jax.Array:
  """Per position, the element ``last`` names (its last writer's value, exactly: a zero keeps
  its sign) or +0 where ``last`` is -1: one gather, fused with the select, that writes the
  output directly, where a scatter of the values into zeros would allocate a second
  output-sized buffer. Linear in ``x``; its transpose is a scatter-add. Shared with
  ``jaxops.torch.max_unpool{1,2,3}d``."""
  flat = x.reshape(-1)
  taken = flat.at[jnp.maximum(last, 0)].get(mode="promise_in_bounds")
  return jnp.where(last >= 0, taken, np.zeros((), x.dtype))


def _unpool_scatter(x: jax.Array, indices: jax.Array, plan: _UnpoolPlan) -> jax.Array:
  """Each output position takes its last writer's value (zero where none writes): linear in
  x."""
  flat_i, size = _in_range(indices, plan)
  last = _last_writers(flat_i, size)[0]
  return _take_last(x, last[:size]).reshape(plan.default)


def scatter_add(t: jax.Array, target: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """``t`` added at the flat positions ``target`` of an output of ``shape`` (positions no two
  share, or its size, past the output: dropped): ``_unpool_scatter``'s values but the sign of
  zeros, and its transpose is a gather. Also ``jaxops.torch.max_unpool{1,2,3}d``'s tangent."""
  y = jnp.zeros((math.prod(shape),), t.dtype).at[target].add(t.reshape(-1), mode="drop")
  return y.reshape(shape)
