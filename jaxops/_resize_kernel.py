"""The device work of resize along one axis: a K-tap gather and weighted sum, fast transpose.

``apply_taps(x, axis, idx, weights)`` computes, along ``axis``::

  y[..., j, ...] = sum_k weights[j, k] * x[..., idx[j, k], ...]

``idx`` (integers, shape (out, K)) and ``weights`` (shape (out, K)) are static NumPy tables (resize
computes them in float64 from the spec); the NumPy algebra of such tables (interning, inverse,
periodic form) lives in ``jaxops._taps_table``. resize's static-table path
(``jaxops._resize._static_passes``) calls ``apply_separable``; its traced-roi path, whose weights
are traced, is a plain ``jnp.take`` and weighted sum in ``jaxops._resize`` and does not use this
module.

Why a primitive: the map is linear in ``x``. Autodiff of a plain gather transposes it into a
scatter-add, which is several times slower than the forward on CPU. Here the map is a JAX
primitive, ``_taps_p(x; axis, table)``, whose transpose is ``_taps_p`` over the *inverse* table
(``table.transpose()``: for each input index, the output indices and weights that read it, padded
to the largest count). The inverse of the inverse is the original map, so forward mode, reverse
mode, any order of either, ``jit`` and ``vmap`` all keep working with gathers only.

Tables are interned by content (``jaxops._taps_table.table``), so their inverses are built once
per static configuration and repeated traces reuse them (equal tables are equal primitive
parameters).

Device plan (CPU-tuned, measured against onnxruntime / torch / jax.image): each pass is one
fused loop of K gathers (one ``take`` per tap column, all-zero columns skipped) and a weighted
sum; past ``_UNROLLED_TAPS`` live columns, a loop over the columns instead. Between passes that
both read more than one tap, one of them more than two, the result is materialised behind a
fusion barrier (a join along the minor dimension, see ``_materialized``); without it XLA fuses the
passes and recomputes K1*K2 taps per element. Two linear passes (two taps each) fuse: four reads
per output, as a direct bilinear interpolation makes. ``apply_separable`` orders the passes
(shrinking first, the minor axis, where gathers cannot vectorise, on the smallest array) and
drops the barrier after the last pass. A pass along the minor axis whose table repeats with a
short period (integer and rational upsampling, nearest and linear: ``Phases``; also
align_corners upsampling, whose taps repeat with weights that change from block to block) is
computed without gathers, as weighted sums of strided slices interleaved by a stack and a
reshape (``_phase_sum``; ``phase_plan`` says where), which the resize benchmarks
(``python -m benchmarks.run``) measure faster than the gather (align_corners 2x on
8x3x256x256: 4.0 ms against 9.5, glibc's heap kept). Under differentiation a two-pass linear
upsampling whose gradient would otherwise keep more than glibc's mmap threshold of temporaries
computes that pass with gathers instead (``_grad_plan``).

Gathers index one axis at a time with per-axis indices (each below that axis' length); no flat
index into the whole array is formed, so arrays past 2**31 elements index correctly.

Dtypes: float32 and float64 compute in their own type; float16 and bfloat16 compute in float32 and
round once at the end. Other dtypes (integers, bool) are allowed only for pure copies (K == 1 and
every weight exactly 1, i.e. nearest), which are exact gathers; for linear/cubic the caller casts
to a floating type first and rounds afterwards.

NaN/Inf note: a tap column whose static weights are all exactly 0 is not read, so an Inf or NaN
reached only through such taps does not reach the output (a dense weighted sum would give NaN
from ``0 * inf``). Zero weights in a column that is otherwise live are multiplied as usual.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxops import _taps_table
from jaxops._checks import along_axis, compute_dtype, type_error, value_error
from jaxops._taps_table import Phases, Table

_OP = "jaxops.resize"


# ----------------------------------------------------------------------------------------------
# The phase plan: periodic tables along the minor axis.


def _strided_taps(x: jax.Array, o: int, b: int, count: int) -> jax.Array:
  """``x[..., clip(b*q + o, 0, n - 1)]`` for ``q < count``: strided slices and edge repeats.

  The repeats are selected over a zero-padded slice (a pad, an iota compare and a select), not
  concatenated to it: XLA's CPU fusion never fuses a concatenation along the minor axis, so a
  concatenation would materialise every clamped tap as an array of its own (linear 2x up on
  8x3x256x256: two 6 MiB copies; 4.7 ms against 8.3 with the select, same process).
  """
  n = x.shape[-1]
  src = b * np.arange(count) + o
  n_lo = int(np.count_nonzero(src < 0))
  n_hi = int(np.count_nonzero(src > n - 1))
  minor = x.ndim - 1
  if count - n_lo - n_hi <= 0:  # every tap clamped (an input shorter than the taps' reach)
    return jnp.concatenate([jnp.broadcast_to(x[..., :1], x.shape[:-1] + (n_lo,)),
                            jnp.broadcast_to(x[..., -1:], x.shape[:-1] + (count - n_lo,))],
                           axis=minor)
  y = lax.slice_in_dim(x, b * n_lo + o, b * (count - n_hi - 1) + o + 1, b, axis=minor)
  if n_lo or n_hi:
    y = lax.pad(y, np.zeros((), x.dtype), [(0, 0, 0)] * minor + [(n_lo, n_hi, 0)])
    q = lax.broadcasted_iota(np.int32, y.shape, minor)
    if n_lo:
      y = jnp.where(q < n_lo, x[..., :1], y)
    if n_hi:
      y = jnp.where(q >= count - n_hi, x[..., -1:], y)
  return y


def _clamps(t: Table, ph: Phases) -> bool:
  """Whether a live tap of the phase plan reaches past either end of the input (its strided
  slices then repeat an edge element, ``_strided_taps``)."""
  off = ph.off[:, ph.live]
  return bool(off.size) and (int(off.min()) < 0
                             or ph.b * (t.n_out // ph.a - 1) + int(off.max()) > t.n_in - 1)


def _phase_sum(x: jax.Array, t: Table, ph: Phases, barrier: bool) -> jax.Array:
  """``_gather_sum`` along the minor axis of a periodic table, without gathers.

  A gather along the minor (contiguous) axis reads one index per output and does not vectorise;
  here each phase ``p`` is a weighted sum of strided slices (contiguous for ``b == 1``), and the
  phases are interleaved by a stack and a reshape, all in one fused loop. The taps, weights and
  their order are those of ``_gather_sum`` (the same live columns, zero weights of a live column
  multiplied as there), so the sums are the same; the few blocks in ``ph.fix`` are overwritten
  with ``_gather_sum`` of their rows.
  """
  blocks = t.n_out // ph.a
  cols = [int(c) for c in np.flatnonzero(ph.live)]
  phases = []
  for p in range(ph.a):
    terms = []
    for c in cols:
      taps = _strided_taps(x, int(ph.off[p, c]), ph.b, blocks)
      if ph.w_q is not None:  # a weight per block, along the minor axis
        terms.append(taps * along_axis(jnp.asarray(ph.w_q[:, p, c], x.dtype), x.ndim - 1,
                                       x.ndim))
        continue
      wv = ph.w_p[p, c]
      terms.append(taps if wv == 1.0 else taps * np.asarray(wv, x.dtype))
    phase = functools.reduce(lambda u, v: u + v, terms)
    if ph.fix:
      # Block q of phase p is row a*q + p: its own taps, selected in the same fused loop (a
      # compare with an iota and a select of a broadcast column), not a second pass over y.
      q_at = lax.broadcasted_iota(np.int32, phase.shape, phase.ndim - 1)
      for q in ph.fix:
        row = ph.a * q + p
        part = _gather_sum(x, x.ndim - 1, t.idx[row:row + 1], t.w[row:row + 1])
        phase = jnp.where(q_at == q, part, phase)
    phases.append(phase)
  y = jnp.stack(phases, axis=-1).reshape(x.shape[:-1] + (t.n_out,))
  return lax.optimization_barrier(y) if barrier else y


# A weighted pass along the minor axis whose period has more phases than the first number and a
# stride longer than the second is computed with gathers, not phases (``phase_plan``).
_PHASES_STRIDED = (3, 8)


# ----------------------------------------------------------------------------------------------
# Device plans (what the lowering emits).


def _gather_sum(x: jax.Array, axis: int, idx: np.ndarray, w: Any) -> jax.Array:
  """sum_k w[:, k] * take(x, idx[:, k], axis): one fused loop, one take per tap column.

  ``w`` is a static NumPy array; all-zero columns are skipped. The result has x's dtype (x is
  already the compute dtype).
  """
  out, k = idx.shape
  live = [c for c in range(k) if np.any(w[:, c])]
  if len(live) > _UNROLLED_TAPS:
    return _gather_sum_loop(x, axis, idx[:, live], w[:, live])
  y = None
  for c in live:
    col = w[:, c]
    taps = jnp.take(x, jnp.asarray(idx[:, c]), axis=axis, mode="clip")
    if np.all(col == 1.0):
      term = taps
    else:
      term = taps * along_axis(jnp.asarray(col, x.dtype), axis, x.ndim)
    y = term if y is None else y + term
  if y is None:
    shape = list(x.shape)
    shape[axis] = out
    y = jnp.zeros(shape, x.dtype)
  return y


# Most tap columns a pass unrolls into one fusion; past it (antialiased downsampling by a large
# factor, the transpose of upsampling by one) a loop takes one column per step, so that the
# program's size, its compile time and XLA's memory while compiling stay bounded (1024 -> 1
# antialiased took 8 s to compile unrolled, and 1024x1024 -> 1x1 aborted in XLA).
_UNROLLED_TAPS = 64


def _gather_sum_loop(x: jax.Array, axis: int, idx: np.ndarray, w: np.ndarray) -> jax.Array:
  """``_gather_sum`` over the live columns of ``idx`` and ``w`` (none all zero), one column per
  step of a ``fori_loop``; the terms are added in the same order."""
  idx_d, w_d = jnp.asarray(idx.T), jnp.asarray(w.T, x.dtype)  # (K, out): a column is a row

  def term(c: Any) -> jax.Array:
    taps = jnp.take(x, idx_d[c], axis=axis, mode="clip")
    return taps * along_axis(w_d[c], axis, x.ndim)

  return lax.fori_loop(1, idx.shape[1], lambda c, y: y + term(c), term(0))


# Below this many elements along the minor dimension a pass is left to XLA's fusion as it likes.
# Small arrays are no exception to the barrier's gain: until 2026-11-25 passes of less than 1 MiB
# of output or fewer than 16 minor elements went without, and recomputed K1*K2 taps (in one
# process, interleaved: the gradient of bicubic 64 -> 128 on 8x3 planes 0.41 ms against 2.6, of
# bilinear antialiased 128 -> 40 0.24 against 2.7, of bicubic 12 -> 7 on 8x64 planes 0.12
# against 0.47; forward and gradient bit-identical on 25 cases; docs/PERFORMANCE.md).
_BARRIER_MIN_MINOR = 2


def joined_halves(part: Callable[[slice], jax.Array], out: int, axis: int) -> jax.Array:
  """``part(rows)`` for the first and the second half of ``out`` output positions, joined along
  ``axis``: along the minor dimension, a fusion barrier XLA's CPU fusion never crosses (see
  ``_materialized``)."""
  h = out // 2
  return jnp.concatenate([part(slice(0, h)), part(slice(h, out))], axis=axis)


def _materialized(x: jax.Array, axis: int, idx: np.ndarray, w: Any, barrier: bool) -> jax.Array:
  """``_gather_sum``, computed as two parts joined along the minor dimension when ``barrier``.

  XLA's CPU fusion otherwise fuses consecutive passes (and the backward with the forward) into
  one loop that recomputes every tap of the previous pass for every tap of the next one (K1*K2
  reads per element, along transposed index maps): several times slower than materialising each
  pass. XLA never fuses a concatenation along the minor dimension (it emits a copy loop), so
  producing the result as such a concatenation is a reliable fusion barrier:

  - a pass along the minor axis computes its first and second half of outputs and joins them;
  - a pass along another axis computes its first and second half of outputs, joins them along
    the minor dimension, and reshapes/transposes the rows back into place (index arithmetic in
    the consumer). Halves rather than even/odd rows: even and odd rows of a periodic table share
    tap columns, which XLA would CSE into shared, separately materialised gathers.

  Neither slices its input, so XLA cannot fold a slice of the previous pass's concatenation back
  into that pass. The last pass of a chain does not need the barrier (``barrier=False``).
  """
  out = idx.shape[0]
  minor = x.ndim - 1
  n_minor = out if axis == minor else x.shape[minor]
  if not barrier or x.ndim < 2 or n_minor < _BARRIER_MIN_MINOR or out < 2:
    return _gather_sum(x, axis, idx, w)
  if axis == minor:
    return joined_halves(lambda r: _gather_sum(x, axis, idx[r], w[r]), out, minor)
  half = (out + 1) // 2
  rows_b = np.concatenate([np.arange(half, out), [out - 1] * (2 * half - out)]).astype(np.int64)
  parts = [_gather_sum(x, axis, idx[:half], w[:half]),
           _gather_sum(x, axis, idx[rows_b], w[rows_b])]
  y = jnp.concatenate(parts, axis=minor)                       # (..., half, ..., 2 * n_minor)
  shape = list(x.shape)
  shape[axis] = half
  y = y.reshape(tuple(shape[:minor]) + (2, n_minor))           # split the joined minor dim
  y = jnp.moveaxis(y, minor, axis)                             # (..., 2, half, ..., n_minor)
  shape = list(x.shape)
  shape[axis] = 2 * half
  y = y.reshape(shape)
  return lax.slice_in_dim(y, 0, out, axis=axis) if out % 2 else y


# How a pass along the minor axis is computed: "phases" uses the phase plan where the table is
# periodic (``_phase_sum``); "gathers" never does (one loop of gathers, which XLA fuses into the
# pass's consumer, where the phases' interleave is always materialised); "gathers under grad" is
# "phases" until differentiated, when the pass, its tangent and its transpose become "gathers".
_PLANS = ("phases", "gathers", "gathers under grad")


def phase_plan(table: Table, minor: bool, plan: str) -> Phases | None:
  """The phases with which a pass computes ``table`` (``_phase_sum``), or None for gathers: only
  along the minor axis, under ``plan`` "phases" or "gathers under grad", where the table is
  periodic and its phases measured faster than its gathers."""
  ph = table.phases() if minor and plan != "gathers" else None
  if ph is None:
    return None
  if table.copy and ((ph.a > 1 and ph.b > 1) or ph.fix or _clamps(table, ph)):
    # A nearest pass at a ratio a/b with both above 1 (x1.5, x1.25, x0.75) would interleave a
    # strided slices of stride b, and one whose taps reach past an edge (half_pixel with
    # nearest_mode floor or ceil) would select the repeated edge in the same loop; their
    # gathers run 1.5-4 times faster (on 8x3x256x256, nearest x1.5: 1.8 ms against 5.3,
    # PyTorch 2.6; see the README). Tables that weigh their taps keep the phases (linear x1.5:
    # 4.3 ms against 9.2 with gathers).
    return None
  if ph.a > _PHASES_STRIDED[0] and ph.b > _PHASES_STRIDED[1]:
    # Downsampling by a ratio a/b of many phases and a long stride (7/15, 7/20): each phase's
    # strided slices and their interleave cost more than the gathers (on 8x3x224 rows,
    # 640 -> 224 0.45 ms against 0.68, 1024 -> 448 0.9 against 1.4; 256 -> 224, 7/8, 0.41
    # against 0.43-0.52 the other way; docs/PERFORMANCE.md).
    return None
  return ph


def _static_impl(x: jax.Array, *, axis: int, table: Table, barrier: tuple[bool, bool],
                 plan: str, keep: bool) -> jax.Array:
  """The device computation of ``_taps_p`` (used for lowering and eager impl)."""
  del keep  # (read by the JVP)
  dtype = x.dtype
  xc = x if table.copy else x.astype(compute_dtype(dtype))
  ph = phase_plan(table, axis == x.ndim - 1, plan)
  if ph is not None:
    y = _phase_sum(xc, table, ph, barrier[0])
  else:
    y = _materialized(xc, axis, table.idx, table.w, barrier[0])
  return y.astype(dtype)


# ----------------------------------------------------------------------------------------------
# The static-weight primitive: linear in x.

_taps_p = Primitive("jaxops_resize_taps")


def _out_aval(x: Any, axis: int, table: Table) -> jax.core.ShapedArray:
  shape = list(x.shape)
  shape[axis] = table.n_out
  # (keeps the varying mesh axes of shard_map, too)
  return x.update(shape=tuple(shape), weak_type=False)


_taps_p.def_abstract_eval(lambda x, *, axis, table, barrier, plan, keep: _out_aval(x, axis,
                                                                                    table))


# The eager impl compiles the device computation itself (not a jit of the primitive, which
# recursed without end under jax_disable_jit).
_taps_p.def_impl(jax.jit(_static_impl,
                         static_argnames=("axis", "table", "barrier", "plan", "keep")))
mlir.register_lowering(_taps_p, mlir.lower_fun(_static_impl, multiple_results=False))


def _taps_transpose(ct: jax.Array, x: Any, *, axis: int, table: Table,
                    barrier: tuple[bool, bool], plan: str, keep: bool) -> list[jax.Array]:
  del x
  return [_taps_p.bind(ct, axis=axis, table=table.transpose(), barrier=barrier[::-1], plan=plan,
                       keep=keep)]


ad.deflinear2(_taps_p, _taps_transpose)


def _taps_jvp(primals: tuple, tangents: tuple, *, axis: int, table: Table,
              barrier: tuple[bool, bool], plan: str, keep: bool) -> tuple[jax.Array, Any]:
  """Linear JVP; under differentiation the primal result is materialised (unless a pure copy,
  a small upsampling pass or ``keep`` is False, see below).

  The backward pass reads the forward result (e.g. the ``2 * y`` of a squared loss), so keeping
  it behind a fusion barrier stops XLA from recomputing it inside the first transposed pass.
  """
  (x,), (t,) = primals, tangents
  if table.live_taps <= 2 and table.n_out >= table.n_in:
    # An upsampling pass of at most two live taps (nearest, linear) is cheap to recompute where
    # it is read: left to XLA's fusion, neither its result nor its transpose's is materialised
    # behind a barrier. Each barrier keeps one more output-sized block alive per call, and on
    # glibc's default allocator a call's temporaries past its mmap threshold are mapped and
    # faulted in afresh on every call (benchmarks/RESULTS.md counts both).
    barrier, kept = (False, False), False
  else:
    # pure copies are as cheap to recompute as to read; ``keep=False``: see ``apply_separable``
    kept = keep and (table.live_taps > 1 or barrier[0])
  if plan == "gathers under grad":
    plan = "gathers"
  y = _taps_p.bind(x, axis=axis, table=table, barrier=(kept, barrier[1]), plan=plan, keep=keep)
  if type(t) is ad.Zero:
    return y, ad.Zero(t.aval.update(shape=y.shape))
  return y, _taps_p.bind(ad.instantiate_zeros(t), axis=axis, table=table, barrier=barrier,
                         plan=plan, keep=keep)


ad.primitive_jvps[_taps_p] = _taps_jvp


def _taps_batch(args: tuple, dims: tuple, *, axis: int, table: Table,
                barrier: tuple[bool, bool], plan: str, keep: bool) -> tuple[jax.Array, int]:
  (x,), (bd,) = args, dims
  new_axis = axis + 1 if bd <= axis else axis
  return _taps_p.bind(x, axis=new_axis, table=table, barrier=barrier, plan=plan, keep=keep), bd


batching.primitive_batchers[_taps_p] = _taps_batch


# ----------------------------------------------------------------------------------------------
# Public entry point (private to jaxops).


def apply_taps(x: jax.Array, axis: int, idx: np.ndarray, weights: Any, *,
               barrier: tuple[bool, bool] | None = None, plan: str = "phases",
               keep: bool = True) -> jax.Array:
  """Resample ``x`` along ``axis`` with static tap indices and static weights.

  Computes ``y[..., j, ...] = sum_k weights[j, k] * x[..., idx[j, k], ...]``. Differentiable in
  ``x`` to any order in forward and reverse mode, with gathers in both directions; works under
  ``jit`` and ``vmap``.

  Args:
    x: the input array.
    axis: the axis to resample, in ``[-x.ndim, x.ndim)``.
    idx: static integer taps, shape ``(out, K)``, each in ``[0, x.shape[axis])``.
    weights: static weights of shape ``(out, K)`` (NumPy / Python values; float64 tables are
      rounded to the compute dtype).
    barrier: (forward, backward): whether this pass's result (and its transpose's result) is
      materialised behind a fusion barrier (see ``_materialized``). The default puts one where
      the table has more than one live tap (pure copies fuse for free). ``apply_separable``
      drops it after the last pass of a chain.
    plan: "phases" (a periodic table along the minor axis is computed as strided slices
      interleaved, ``_phase_sum``), "gathers" (never) or "gathers under grad" (phases until
      differentiated).
    keep: whether under differentiation the result may be materialised behind a fusion barrier
      for the backward pass to read (where it has more than one live tap and is not a small
      upsampling); False recomputes it where it is read.

  Returns:
    An array like ``x`` with ``out`` elements along ``axis``, of ``x``'s dtype. float16 and
    bfloat16 compute in float32; non-floating ``x`` is allowed only for pure copies (K == 1,
    all weights 1), which are exact.

  Raises:
    ValueError: if ``axis``, ``idx`` or ``weights`` have the wrong shape or out-of-range values.
    TypeError: if ``idx`` or ``weights`` is traced, ``idx`` is not integer, or ``x`` is not
      floating and the taps are not pure copies.

  Examples:
    >>> import numpy as np, jax.numpy as jnp
    >>> from jaxops._resize_kernel import apply_taps
    >>> idx = np.array([[0, 1], [1, 2]])
    >>> w = np.array([[0.5, 0.5], [0.25, 0.75]])
    >>> apply_taps(jnp.array([0.0, 4.0, 8.0]), 0, idx, w)
    Array([2., 7.], dtype=float32)
  """
  x = jnp.asarray(x)
  if not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < max(x.ndim, 1):
    raise value_error(_OP, "axis", axis, f"an integer in [-{x.ndim}, {x.ndim})")
  axis = int(axis) % x.ndim
  if isinstance(idx, jax.core.Tracer):
    raise type_error(_OP, "idx", idx, "a static NumPy integer table (it decides the gather)")
  idx_np = np.asarray(idx)
  if idx_np.ndim != 2 or not np.issubdtype(idx_np.dtype, np.integer):
    raise type_error(_OP, "idx", idx, "a 2-D integer table of shape (out, K)")
  n_in = x.shape[axis]
  if idx_np.size and (idx_np.min() < 0 or idx_np.max() >= n_in):
    raise value_error(_OP, "idx", idx, f"indices in [0, {n_in}) (the length of axis {axis})")
  if isinstance(weights, jax.core.Tracer):
    raise type_error(_OP, "weights", weights, "a static NumPy table (traced weights: use a "
                     "jnp.take and weighted sum, as resize's traced-roi path does)")
  if np.shape(weights) != idx_np.shape:
    raise value_error(_OP, "weights", weights, f"an array of shape {idx_np.shape} (like idx)")
  if idx_np.shape[1] == 0:
    raise value_error(_OP, "idx", idx, "a table with at least one tap (K >= 1)")
  w_np = np.asarray(weights, dtype=np.float64)
  table = _taps_table.table(idx_np, w_np, n_in)
  if barrier is None:
    barrier = (table.live_taps > 1, table.transpose_live_taps() > 1)
  if plan not in _PLANS:
    raise value_error(_OP, "plan", plan, f"one of {_PLANS}")
  if not jnp.issubdtype(x.dtype, jnp.floating) and not table.copy:
    raise type_error(
        _OP, "x", x, "a floating array unless the taps are pure copies (K == 1, weights 1); "
        "cast integer inputs to a float type before linear/cubic taps")
  return _taps_p.bind(x, axis=axis, table=table, barrier=barrier, plan=plan, keep=bool(keep))


def _pass_cost(shape: tuple[int, ...], axis: int, idx: np.ndarray, weights: Any) -> float:
  """A rough CPU cost model of one pass: output elements times live taps, minor axis dearer."""
  out = int(np.prod(shape)) // max(shape[axis], 1) * idx.shape[0]
  k = max(int(np.count_nonzero(np.any(np.asarray(weights) != 0, axis=0))), 1)
  return out * (k + 1) * (3.0 if axis == len(shape) - 1 else 1.0)


def pass_order(shape: tuple[int, ...], passes: Sequence[tuple[int, np.ndarray, Any]]) -> list[int]:
  """The order (indices into ``passes``) in which to apply separable passes on ``shape``.

  Separable passes commute mathematically (the results differ only by float rounding). The
  cheapest order shrinks early, enlarges late, and runs the minor (last) axis, where a gather
  cannot vectorise, on the smallest array. Tries every order (at most a handful of axes).
  """
  best: tuple[float, tuple[int, ...]] | None = None
  for perm in itertools.permutations(range(len(passes))):
    cur = list(shape)
    cost = 0.0
    for i in perm:
      axis, idx, w = passes[i]
      cost += _pass_cost(tuple(cur), axis % len(cur), idx, w)
      cur[axis % len(cur)] = idx.shape[0]
    if best is None or cost < best[0]:
      best = (cost, perm)
  return list(best[1]) if best else []


def _live(n_in: int, idx: Any, w: Any) -> tuple[int, int]:
  """Live taps of a pass and of its transpose (an upper bound where ``n_in`` is unknown)."""
  idx = np.asarray(idx)
  t = _taps_table.table(idx, w, max(int(idx.max()) + 1 if idx.size else 1, n_in))
  return t.live_taps, t.transpose_live_taps()


def _cheap_upsampling(n_in: int, idx: Any, live: int) -> bool:
  """Whether a pass of ``live`` live taps, reading ``n_in`` inputs by ``idx``, upsamples with
  at most two live taps."""
  return live <= 2 and np.shape(idx)[0] >= n_in


# glibc's largest dynamic mmap threshold (64-bit): a block this large or larger is mapped afresh
# and faulted in page by page on every call, under the allocator a Python process starts with.
_MMAP_MAX = 32 << 20


def _grad_plan(shape: tuple[int, ...], dtype: Any, passes: Sequence[tuple[int, Any, Any]],
               order: Sequence[int]) -> str:
  """The ``plan`` of a two-pass chain of linear upsamplings: "gathers under grad" where the
  gradient's temporaries would otherwise cross ``_MMAP_MAX``, else "phases".

  Differentiated, the chain keeps the result's cotangent (the output's size) and, with the
  phase plan, the first pass's interleaved result beside it; with gathers XLA fuses the first
  pass into the cotangent's producer, and only the cotangent stays. Where that brings a call's
  temporaries under glibc's mmap threshold, it saves mapping and faulting them in on every
  call: linear 2x on 8x3x256x256 float32, 36 MiB of temporaries against 24, 18.7 ms against
  38.0 (9265 page faults per call against 96, same process, interleaved); with glibc's heap
  kept (no mmap, no trim) 18.2 ms against 17.8. Elsewhere the phase plan stays: fused gathers
  along the minor axis do not vectorise (linear 56 -> 98 on 4x64x56x56, 8.2 ms against 6.3;
  trilinear 2x, five times slower).
  """
  if len(order) != 2 or not jnp.issubdtype(dtype, jnp.floating):
    return "phases"
  cur = list(shape)
  sizes = []
  for i in order:
    axis, idx, w = passes[i]
    live = _live(cur[axis], idx, w)[0]
    if live != 2 or not _cheap_upsampling(cur[axis], idx, live):
      return "phases"
    cur[axis] = np.shape(idx)[0]
    sizes.append(math.prod(cur) * np.dtype(compute_dtype(dtype)).itemsize)
  mid, out = sizes
  return "gathers under grad" if out < _MMAP_MAX <= out + mid else "phases"


def apply_separable(x: jax.Array, passes: Sequence[tuple[int, np.ndarray, Any]]) -> jax.Array:
  """Apply several ``apply_taps`` passes (distinct axes) in the cheapest order.

  Args:
    x: the input array.
    passes: ``(axis, idx, weights)`` triples as ``apply_taps`` takes them, on distinct axes.

  Returns:
    The resampled array (``x``'s dtype), equal to applying the passes in any order up to
    floating-point rounding.

  Raises:
    ValueError: if two passes name the same axis, or as ``apply_taps`` raises.

  Examples:
    >>> import numpy as np, jax.numpy as jnp
    >>> from jaxops._resize_kernel import apply_separable
    >>> idx, w = np.array([[0, 1]]), np.array([[0.5, 0.5]])
    >>> apply_separable(jnp.array([[0.0, 2.0], [4.0, 6.0]]), [(0, idx, w), (1, idx, w)])
    Array([[3.]], dtype=float32)
  """
  x = jnp.asarray(x)
  axes = [int(a) % max(x.ndim, 1) if isinstance(a, (int, np.integer)) else a
          for a, _, _ in passes]
  if len(set(axes)) != len(axes):
    raise value_error(_OP, "passes", axes, "passes on distinct axes")
  normal = [(a, np.asarray(idx), w) for a, (_, idx, w) in zip(axes, passes)]
  order = pass_order(x.shape, normal)
  plan = _grad_plan(x.shape, x.dtype, normal, order)
  keep = _keeps(x.shape, normal, plan)
  for n, i in enumerate(order):
    axis, idx, w = passes[i]
    # A barrier after a pass pays one copy to save the next pass from recomputing this one's
    # taps for each of its own taps: worth it when both have more than one live tap, unless
    # both have at most two (linear). Those fuse into one loop of at most four reads per
    # output, as a direct bilinear interpolation reads: upsampling, where the copy would write
    # a block larger than the input (trilinear 2x on 2x4x32x64x64: 22 ms against 49,
    # temporaries 8 MiB against 32, the size at which glibc maps a call's block afresh), and
    # downsampling, where the fused loop reads fewer elements than the two passes write and
    # read (on 8x3 planes: 448 -> 224 0.29-0.47 ms against 1.06-1.72, 512 -> 384 2.8-3.5
    # against 4.1-7.1; docs/PERFORMANCE.md).
    k_this, kt_this = _live(x.shape[axis], idx, w)
    fwd = False
    if n < len(order) - 1:
      k_next = _live(0, *passes[order[n + 1]][1:])[0]
      fwd = k_this > 1 and k_next > 1 and max(k_this, k_next) > 2
    bwd = n > 0 and kt_this > 1 and _live(-1, *passes[order[n - 1]][1:])[1] > 1
    x = apply_taps(x, axis, idx, w, barrier=(bool(fwd), bool(bwd)), plan=plan, keep=keep)
  return x


def _keeps(shape: tuple[int, ...], passes: Sequence[tuple[int, np.ndarray, Any]],
           plan: str) -> bool:
  """The ``keep`` of a chain's passes: False (each result recomputed where the backward pass
  reads it) for one or two passes of at most two live taps each (linear), where a pass along
  the minor axis, if any, takes the phases under differentiation. There, the forward passes
  fuse into the loops of the backward pass that read them (the gradient of sum(y ** 2), in one
  process, two runs: 8x3x448x448 -> 224x224 0.45-0.54 of the time with the results kept,
  8x3x256x256 -> 128x128 0.60-0.81, 8x3x512x512 -> 384x384 0.83-0.84, 8x3x256x256 -> 224x256
  0.32-0.45; 256 -> 224 and 300 -> 200 0.95-1.10, noise); with gathers along the minor axis,
  recomputing them inside the transposed gathers is slower (256 -> 100 1.8 ms against 1.4,
  480x640 -> 224 8.7-9.2 against 3.5-4.2), and so is a chain of three passes (2x4x32x64x64 ->
  16x32x32 1.38, -> 24x48x48 1.20; docs/PERFORMANCE.md)."""
  if len(passes) > 2:
    return True
  grad_plan = "gathers" if plan == "gathers under grad" else plan
  for axis, idx, w in passes:
    table = _taps_table.table(idx, np.asarray(w, np.float64), shape[axis])
    if table.live_taps > 2 or (axis == len(shape) - 1
                               and phase_plan(table, True, grad_plan) is None):
      return True
  return False
