"""The device work of resize along one axis: a K-tap gather and weighted sum, fast transpose.

``apply_taps(x, axis, idx, weights)`` computes, along ``axis``::

  y[..., j, ...] = sum_k weights[j, k] * x[..., idx[j, k], ...]

``idx`` (integers, shape (out, K)) is static NumPy. ``weights`` (shape (out, K)) is static NumPy
(float64 tables computed from the spec) or, on resize's traced-roi path, a traced array.

Why a primitive: the map is linear in ``x`` (and in ``weights``). Autodiff of a plain gather
transposes it into a scatter-add, which is several times slower than the forward on CPU. Here the
map is a JAX primitive whose transpose is the same kind of gather over the *inverse* table (for
each input index, the output indices and weights that read it, padded to the largest count). The
inverse of the inverse is the original map, so forward mode, reverse mode, any order of either,
``jit`` and ``vmap`` all keep working with gathers only:

- ``_taps_p(x; axis, table)``: static weights, linear in ``x``; its transpose is ``_taps_p`` with
  ``table.transpose()``.
- ``_dyn_taps_p(x, w; axis, table)``: traced weights, bilinear in ``(x, w)``; the transpose with
  respect to ``x`` is ``_dyn_taps_p`` over the inverse table with weights gathered from ``w``, and
  the transpose with respect to ``w`` is a gather of ``x`` times the cotangent, summed.

Tables are interned by content (``_table``), so their inverses are built once per static
configuration and repeated traces reuse them (equal tables are equal primitive parameters).

Device plan (CPU-tuned, measured against onnxruntime / torch / jax.image): each pass is one
fused loop of K gathers (one ``take`` per tap column, all-zero columns skipped) and a weighted
sum. Between passes that both read more than one tap, the result is materialised behind a fusion
barrier (a join along the minor dimension, see ``_materialized``); without it XLA fuses the passes
and recomputes K1*K2 taps per element. ``apply_separable`` orders the passes (shrinking first,
the minor axis, where gathers cannot vectorise, on the smallest array) and drops the barrier
after the last pass. A pass along the minor axis whose table repeats with a short period
(integer and rational upsampling, nearest and linear: ``_Phases``) is computed without gathers,
as weighted sums of strided slices interleaved by a stack and a reshape (``_phase_sum``): 15-45%
faster than the gather on the resize benchmarks (``python -m benchmarks.run``).

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
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxops._checks import type_error, value_error

_OP = "resize"
_HALF = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


# ----------------------------------------------------------------------------------------------
# Static tables, interned by content.


class _Table:
  """A static tap table: ``idx`` (out, K) into an axis of length ``n_in``; ``w`` static or None.

  ``w is None`` marks a table for traced weights; then ``pos`` (out, K) gives, for each tap, the
  flat position of its weight in the weight array of the map this table was inverted from (or
  ``arange`` for an original table), with ``pos == size`` meaning "padding, weight 0".
  Instances are interned by ``_table``: equal content gives the same object, so they hash fast
  and serve as static primitive parameters.
  """

  def __init__(self, idx: np.ndarray, w: np.ndarray | None, n_in: int, key: tuple) -> None:
    self.idx = idx
    self.w = w
    self.n_in = n_in
    self.n_out, self.k = idx.shape
    self._key = key
    self._hash = hash(key)
    self._transpose: _Table | None = None
    self._pos_t: np.ndarray | None = None
    self.copy = w is not None and self.k == 1 and bool(np.all(w == 1.0))
    # Tap columns that are not all zero (what the device plan reads per output).
    # Tap columns that are not all zero: the ones the device plan reads.
    self.live = np.ones(self.k, bool) if w is None else np.any(w != 0, axis=0)
    self.live_taps = int(np.count_nonzero(self.live))
    self._phases: _Phases | None | bool = False  # False: not computed yet

  def phases(self) -> _Phases | None:
    """The periodic (phase) form of this table, or None (see ``_Phases``); built once."""
    if self._phases is False:
      self._phases = _find_phases(self)
    return self._phases  # type: ignore[return-value]

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other: object) -> bool:
    return self is other or (isinstance(other, _Table) and self._key == other._key)

  def __repr__(self) -> str:
    kind = "static" if self.w is not None else "traced"
    return f"_Table({self.n_in}->{self.n_out}, K={self.k}, {kind} weights)"

  def transpose(self) -> _Table:
    """The table of the transposed map (n_out -> n_in), built once."""
    if self._transpose is None:
      self._transpose = _inverse(self)
    return self._transpose

  def weight_positions(self) -> np.ndarray:
    """For the transposed table: flat positions into this table's (out*K,) weights (+1 pad)."""
    self.transpose()
    return self._pos_t  # type: ignore[return-value]


@functools.lru_cache(maxsize=512)
def _intern(key: tuple) -> _Table:
  n_in, shape, idx_bytes, w_bytes = key
  idx = np.frombuffer(idx_bytes, dtype=np.int64).reshape(shape)
  w = None if w_bytes is None else np.frombuffer(w_bytes, dtype=np.float64).reshape(shape)
  return _Table(idx, w, n_in, key)


def _table(idx: np.ndarray, w: np.ndarray | None, n_in: int) -> _Table:
  idx = np.ascontiguousarray(idx, dtype=np.int64)
  wb = None if w is None else np.ascontiguousarray(w, dtype=np.float64).tobytes()
  return _intern((int(n_in), idx.shape, idx.tobytes(), wb))


def _inverse(t: _Table) -> _Table:
  """For each input index i, the (output index, weight) pairs that read it, padded."""
  out, k = t.n_out, t.k
  flat_i = t.idx.reshape(-1)
  flat_j = np.repeat(np.arange(out, dtype=np.int64), k)
  flat_f = np.arange(out * k, dtype=np.int64)
  if t.w is not None:
    # Static weights: merge repeated (i, j) pairs and drop zero weights.
    key = flat_i * out + flat_j
    uniq, inv = np.unique(key, return_inverse=True)
    wsum = np.zeros(uniq.size)
    np.add.at(wsum, inv, t.w.reshape(-1))
    keep = wsum != 0.0
    flat_i, flat_j, wvals = uniq[keep] // out, uniq[keep] % out, wsum[keep]
    flat_f = np.zeros(flat_i.size, dtype=np.int64)
  order = np.lexsort((flat_j, flat_i))
  si, sj, sf = flat_i[order], flat_j[order], flat_f[order]
  counts = np.bincount(si, minlength=t.n_in)
  m = max(int(counts.max()) if counts.size else 0, 1)
  starts = np.cumsum(counts) - counts
  slot = np.arange(si.size) - starts[si]
  idx_t = np.zeros((t.n_in, m), dtype=np.int64)
  idx_t[si, slot] = sj
  # Pad with the nearest real index so padded taps stay local (cheap to read).
  filled = np.zeros((t.n_in, m), dtype=bool)
  filled[si, slot] = True
  first = np.where(counts > 0, idx_t[:, 0], 0)
  idx_t = np.where(filled, idx_t, first[:, None])
  if t.w is not None:
    w_t = np.zeros((t.n_in, m))
    w_t[si, slot] = wvals[order]
    return _table(idx_t, w_t, out)
  pos = np.full((t.n_in, m), out * k, dtype=np.int64)
  pos[si, slot] = sf
  tt = _table(idx_t, None, out)
  t._pos_t = pos
  return tt


class _Phases(NamedTuple):
  """A static table that repeats with a period: output ``a*q + p`` reads ``b*q + off[p, k]``.

  ``a / b`` is ``n_out / n_in`` in lowest terms. For every block ``q`` of ``a`` outputs except
  those in ``fix``, and every live tap column ``k``: ``idx[a*q + p, k]`` equals
  ``b*q + off[p, k]`` clamped to ``[0, n_in)``, and ``w[a*q + p, k]`` equals ``w_p[p, k]``
  (exactly, or within a few float64 units of rounding for rational periods, whose weights are
  computed per output: far below the float32 and float64 rounding of the sums). The blocks in
  ``fix`` (a few, at the edges) are computed from the table itself.
  """

  a: int
  b: int
  off: np.ndarray     # (a, K) integer offsets
  w_p: np.ndarray     # (a, K) weights of each phase
  live: np.ndarray    # (K,) bool: tap columns that are not all zero (the ones read)
  fix: tuple[int, ...]


# The phase form is used for tables with at most this many phases, this many live taps, at least
# this many blocks, and at most this many blocks that break the pattern.
_MAX_PHASES = 8
_MAX_PHASE_TAPS = 2
_MIN_BLOCKS = 8
_MAX_FIX = 4
_PHASE_WEIGHT_ULPS = 16


def _find_phases(t: _Table) -> _Phases | None:
  """The periodic form of a static table (integer and rational upsampling), or None."""
  if t.w is None or t.n_in < 2 or t.n_out < 2:
    return None
  g = math.gcd(t.n_out, t.n_in)
  a, b = t.n_out // g, t.n_in // g
  blocks = t.n_out // a
  live = t.live
  if a > _MAX_PHASES or blocks < _MIN_BLOCKS or not 1 <= int(live.sum()) <= _MAX_PHASE_TAPS:
    return None
  mid = blocks // 2
  off = t.idx[a * mid:a * mid + a] - b * mid
  w_p = t.w[a * mid:a * mid + a]
  q = np.arange(blocks)[:, None, None]
  want = np.clip(b * q + off[None], 0, t.n_in - 1)
  idx = t.idx.reshape(blocks, a, t.k)
  w = t.w.reshape(blocks, a, t.k)
  # Weights of a rational period are computed per output in float64 and may differ from block
  # to block in the last bits; up to _PHASE_WEIGHT_ULPS units of rounding they count as equal.
  tol = _PHASE_WEIGHT_ULPS * np.finfo(np.float64).eps * np.maximum(np.abs(w_p), 1.0)
  same = (idx == want) & (np.abs(w - w_p[None]) <= tol[None])
  ok = np.all(same | ~live, axis=(1, 2))
  fix = tuple(int(i) for i in np.flatnonzero(~ok))
  if len(fix) > _MAX_FIX:
    return None
  return _Phases(a, b, off, w_p, live, fix)


def _strided_taps(x: jax.Array, o: int, b: int, count: int) -> jax.Array:
  """``x[..., clip(b*q + o, 0, n - 1)]`` for ``q < count``: strided slices and edge repeats."""
  n = x.shape[-1]
  src = b * np.arange(count) + o
  n_lo = int(np.count_nonzero(src < 0))
  n_hi = int(np.count_nonzero(src > n - 1))
  parts = []
  if n_lo:
    parts.append(jnp.broadcast_to(x[..., :1], x.shape[:-1] + (n_lo,)))
  if count - n_lo - n_hi > 0:
    start = b * n_lo + o
    parts.append(lax.slice_in_dim(x, start, b * (count - n_hi - 1) + o + 1, b, axis=x.ndim - 1))
  if n_hi:
    parts.append(jnp.broadcast_to(x[..., -1:], x.shape[:-1] + (n_hi,)))
  return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=x.ndim - 1)


def _phase_sum(x: jax.Array, t: _Table, ph: _Phases, barrier: bool) -> jax.Array:
  """``_gather_sum`` along the minor axis of a periodic table, without gathers.

  A gather along the minor (contiguous) axis reads one index per output and does not vectorise;
  here each phase ``p`` is a weighted sum of strided slices (contiguous for ``b == 1``), and the
  phases are interleaved by a stack and a reshape, all in one fused loop. The taps, weights and
  their order are those of ``_gather_sum`` (the same live columns, zero weights of a live column
  multiplied as there), so the sums are the same; the few blocks in ``ph.fix`` are overwritten
  with ``_gather_sum`` of their rows.
  """
  assert t.w is not None  # phases exist only for static weights
  blocks = t.n_out // ph.a
  cols = [int(c) for c in np.flatnonzero(ph.live)]
  phases = []
  for p in range(ph.a):
    terms = []
    for c in cols:
      taps = _strided_taps(x, int(ph.off[p, c]), ph.b, blocks)
      wv = ph.w_p[p, c]
      terms.append(taps if wv == 1.0 else taps * np.asarray(wv, x.dtype))
    phases.append(functools.reduce(lambda u, v: u + v, terms))
  minor = x.ndim - 1
  y = jnp.stack(phases, axis=-1).reshape(x.shape[:-1] + (t.n_out,))
  for q in ph.fix:
    rows = np.arange(ph.a * q, ph.a * q + ph.a)
    part = _gather_sum(x, minor, t.idx[rows], t.w[rows])
    y = lax.dynamic_update_slice_in_dim(y, part, ph.a * q, axis=minor)
  return lax.optimization_barrier(y) if barrier else y


# ----------------------------------------------------------------------------------------------
# Device plans (what the lowering emits).


def _compute_dtype(dtype: np.dtype) -> np.dtype:
  return np.dtype(np.float32) if dtype in _HALF else dtype


def _move(x: jax.Array, src: int, dst: int) -> jax.Array:
  return x if src == dst else jnp.moveaxis(x, src, dst)


def _gather_sum(x: jax.Array, axis: int, idx: np.ndarray, w: Any) -> jax.Array:
  """sum_k w[:, k] * take(x, idx[:, k], axis): one fused loop, one take per tap column.

  ``w`` is a NumPy array (static; zero columns are skipped per output via the weights) or a
  traced (out, K) array. The result has x's dtype (x is already the compute dtype).
  """
  out, k = idx.shape
  bshape = (1,) * axis + (out,) + (1,) * (x.ndim - axis - 1)
  y = None
  for c in range(k):
    if isinstance(w, np.ndarray):
      col = w[:, c]
      if not np.any(col):
        continue
      taps = jnp.take(x, jnp.asarray(idx[:, c]), axis=axis, mode="clip")
      if np.all(col == 1.0):
        term = taps
      else:
        term = taps * jnp.asarray(col, x.dtype).reshape(bshape)
    else:
      taps = jnp.take(x, jnp.asarray(idx[:, c]), axis=axis, mode="clip")
      term = taps * w[:, c].astype(x.dtype).reshape(bshape)
    y = term if y is None else y + term
  if y is None:
    shape = list(x.shape)
    shape[axis] = out
    y = jnp.zeros(shape, x.dtype)
  return y


# Below this many output bytes a pass is left to XLA's fusion as it likes.
_BARRIER_BYTES = 1 << 20


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
  size = x.size // max(x.shape[axis], 1) * out * np.dtype(x.dtype).itemsize
  if not barrier or x.ndim < 2 or n_minor < 16 or out < 2 or size < _BARRIER_BYTES:
    return _gather_sum(x, axis, idx, w)
  if axis == minor:
    h = out // 2
    return jnp.concatenate(
        [_gather_sum(x, axis, idx[:h], w[:h]), _gather_sum(x, axis, idx[h:], w[h:])], axis=minor)
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


def _static_impl(x: jax.Array, *, axis: int, table: _Table,
                 barrier: tuple[bool, bool]) -> jax.Array:
  """The device computation of ``_taps_p`` (used for lowering and eager impl)."""
  dtype = x.dtype
  xc = x if table.copy else x.astype(_compute_dtype(dtype))
  ph = table.phases() if axis == x.ndim - 1 else None
  if ph is not None:
    y = _phase_sum(xc, table, ph, barrier[0])
  else:
    y = _materialized(xc, axis, table.idx, table.w, barrier[0])
  return y.astype(dtype)


def _dyn_impl(x: jax.Array, w: jax.Array, *, axis: int, table: _Table,
              barrier: tuple[bool, bool]) -> jax.Array:
  dtype = x.dtype
  xc = x.astype(_compute_dtype(dtype))
  return _materialized(xc, axis, table.idx, w, barrier[0]).astype(dtype)


# ----------------------------------------------------------------------------------------------
# The static-weight primitive: linear in x.

_taps_p = Primitive("jaxops_resize_taps")


def _out_aval(x: Any, axis: int, table: _Table) -> jax.core.ShapedArray:
  shape = list(x.shape)
  shape[axis] = table.n_out
  return jax.core.ShapedArray(tuple(shape), x.dtype)


_taps_p.def_abstract_eval(lambda x, *, axis, table, barrier: _out_aval(x, axis, table))


@functools.partial(jax.jit, static_argnames=("axis", "table", "barrier"))
def _taps_jit(x: jax.Array, *, axis: int, table: _Table, barrier: tuple[bool, bool]) -> jax.Array:
  return _taps_p.bind(x, axis=axis, table=table, barrier=barrier)


_taps_p.def_impl(_taps_jit)
mlir.register_lowering(_taps_p, mlir.lower_fun(_static_impl, multiple_results=False))


def _taps_transpose(ct: jax.Array, x: Any, *, axis: int, table: _Table,
                    barrier: tuple[bool, bool]) -> list[jax.Array]:
  del x
  return [_taps_p.bind(ct, axis=axis, table=table.transpose(), barrier=barrier[::-1])]


ad.deflinear2(_taps_p, _taps_transpose)


def _taps_jvp(primals: tuple, tangents: tuple, *, axis: int, table: _Table,
              barrier: tuple[bool, bool]) -> tuple[jax.Array, Any]:
  """Linear JVP; under differentiation the primal result is materialised (unless a pure copy).

  The backward pass reads the forward result (e.g. the ``2 * y`` of a squared loss), so keeping
  it behind a fusion barrier stops XLA from recomputing it inside the first transposed pass.
  """
  (x,), (t,) = primals, tangents
  keep = table.live_taps > 1 or barrier[0]  # pure copies are as cheap to recompute as to read
  y = _taps_p.bind(x, axis=axis, table=table, barrier=(keep, barrier[1]))
  if type(t) is ad.Zero:
    return y, ad.Zero(t.aval.update(shape=y.shape))
  return y, _taps_p.bind(ad.instantiate_zeros(t), axis=axis, table=table, barrier=barrier)


ad.primitive_jvps[_taps_p] = _taps_jvp


def _taps_batch(args: tuple, dims: tuple, *, axis: int, table: _Table,
                barrier: tuple[bool, bool]) -> tuple[jax.Array, int]:
  (x,), (bd,) = args, dims
  new_axis = axis + 1 if bd <= axis else axis
  return _taps_p.bind(x, axis=new_axis, table=table, barrier=barrier), bd


batching.primitive_batchers[_taps_p] = _taps_batch


# ----------------------------------------------------------------------------------------------
# The traced-weight primitive: bilinear in (x, w).

_dyn_taps_p = Primitive("jaxops_resize_taps_traced")
_dyn_taps_p.def_abstract_eval(lambda x, w, *, axis, table, barrier: _out_aval(x, axis, table))


@functools.partial(jax.jit, static_argnames=("axis", "table", "barrier"))
def _dyn_jit(x: jax.Array, w: jax.Array, *, axis: int, table: _Table,
             barrier: tuple[bool, bool]) -> jax.Array:
  return _dyn_taps_p.bind(x, w, axis=axis, table=table, barrier=barrier)


_dyn_taps_p.def_impl(_dyn_jit)
mlir.register_lowering(_dyn_taps_p, mlir.lower_fun(_dyn_impl, multiple_results=False))


def _inverse_weights(w: jax.Array, table: _Table) -> jax.Array:
  """The transposed table's weights, gathered from the traced (out, K) weights."""
  pos = table.weight_positions()
  flat = jnp.concatenate([w.reshape(-1), jnp.zeros((1,), w.dtype)])
  return jnp.take(flat, jnp.asarray(pos.reshape(-1)), mode="clip").reshape(pos.shape)


def _dyn_transpose_x(ct: jax.Array, x: Any, w: jax.Array, *, axis: int, table: _Table,
                     barrier: tuple[bool, bool]) -> jax.Array:
  del x
  return _dyn_taps_p.bind(ct, _inverse_weights(w, table), axis=axis, table=table.transpose(),
                          barrier=barrier[::-1])


def _dyn_transpose_w(ct: jax.Array, x: jax.Array, w: Any, *, axis: int, table: _Table,
                     barrier: tuple[bool, bool]) -> jax.Array:
  """d/dw: sum over all other axes of ct[..., j, ...] * x[..., idx[j, k], ...]."""
  del barrier
  cdt = _compute_dtype(ct.dtype)
  ctc = _move(ct.astype(cdt), axis, 0).reshape(table.n_out, -1)
  xc = _move(x.astype(cdt), axis, 0).reshape(x.shape[axis], -1)
  cols = [jnp.sum(jnp.take(xc, jnp.asarray(table.idx[:, c]), axis=0, mode="clip") * ctc, axis=1)
          for c in range(table.k)]
  return jnp.stack(cols, axis=1).astype(w.aval.dtype)


ad.defbilinear(_dyn_taps_p, _dyn_transpose_x, _dyn_transpose_w)


def _dyn_batch(args: tuple, dims: tuple, *, axis: int, table: _Table,
               barrier: tuple[bool, bool]) -> tuple[jax.Array, int]:
  x, w = args
  bx, bw = dims
  if bw is None:
    new_axis = axis + 1 if bx <= axis else axis
    return _dyn_taps_p.bind(x, w, axis=new_axis, table=table, barrier=barrier), bx
  # Different weights per example (e.g. a batch of roi boxes): a plain gather-and-sum.
  w = _move(w, bw, 0)
  size = w.shape[0]
  if bx is None:
    x = jnp.broadcast_to(x, (size,) + x.shape)
  else:
    x = _move(x, bx, 0)
  dtype = x.dtype
  xc = x.astype(_compute_dtype(dtype))
  nd = xc.ndim
  bshape = (size,) + (1,) * axis + (table.n_out,) + (1,) * (nd - axis - 2)
  terms = [jnp.take(xc, jnp.asarray(table.idx[:, c]), axis=axis + 1, mode="clip")
           * w[:, :, c].astype(xc.dtype).reshape(bshape) for c in range(table.k)]
  y = functools.reduce(lambda a, b: a + b, terms)
  return y.astype(dtype), 0


batching.primitive_batchers[_dyn_taps_p] = _dyn_batch


# ----------------------------------------------------------------------------------------------
# Public entry point (private to jaxops).


def apply_taps(x: jax.Array, axis: int, idx: np.ndarray, weights: Any, *,
               barrier: tuple[bool, bool] | None = None) -> jax.Array:
  """Resample ``x`` along ``axis`` with static tap indices and static or traced weights.

  Computes ``y[..., j, ...] = sum_k weights[j, k] * x[..., idx[j, k], ...]``. Differentiable in
  ``x`` (and in traced ``weights``) to any order in forward and reverse mode, with gathers in
  both directions; works under ``jit`` and ``vmap``.

  Args:
    x: the input array.
    axis: the axis to resample, in ``[-x.ndim, x.ndim)``.
    idx: static integer taps, shape ``(out, K)``, each in ``[0, x.shape[axis])``.
    weights: shape ``(out, K)``: static (NumPy / Python values; float64 tables are rounded to the
      compute dtype) or a traced JAX array.
    barrier: (forward, backward): whether this pass's result (and its transpose's result) is
      materialised behind a fusion barrier (see ``_materialized``). The default puts one where
      the table has more than one live tap (pure copies fuse for free). ``apply_separable``
      drops it after the last pass of a chain.

  Returns:
    An array like ``x`` with ``out`` elements along ``axis``, of ``x``'s dtype. float16 and
    bfloat16 compute in float32; non-floating ``x`` is allowed only for pure copies (K == 1,
    all weights 1), which are exact.

  Raises:
    ValueError: if ``axis``, ``idx`` or ``weights`` have the wrong shape or out-of-range values.
    TypeError: if ``idx`` is traced or not integer, or ``x`` is not floating and the taps are
      not pure copies.

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
  traced = isinstance(weights, jax.core.Tracer)
  wshape = tuple(weights.shape) if traced else np.shape(weights)
  if wshape != idx_np.shape:
    raise value_error(_OP, "weights", weights, f"an array of shape {idx_np.shape} (like idx)")
  if idx_np.shape[1] == 0:
    raise value_error(_OP, "idx", idx, "a table with at least one tap (K >= 1)")
  if traced:
    table = _table(idx_np, None, n_in)
    if barrier is None:
      barrier = (table.k > 1, table.transpose().k > 1)
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise type_error(_OP, "x", x, "a floating array when the weights are traced")
    if not jnp.issubdtype(weights.dtype, jnp.floating):
      raise type_error(_OP, "weights", weights, "a floating array")
    return _dyn_taps_p.bind(x, weights, axis=axis, table=table, barrier=barrier)
  w_np = np.asarray(weights, dtype=np.float64)
  table = _table(idx_np, w_np, n_in)
  if barrier is None:
    barrier = (table.live_taps > 1, table.transpose().live_taps > 1)
  if not jnp.issubdtype(x.dtype, jnp.floating) and not table.copy:
    raise type_error(
        _OP, "x", x, "a floating array unless the taps are pure copies (K == 1, weights 1); "
        "cast integer inputs to a float type before linear/cubic taps")
  return _taps_p.bind(x, axis=axis, table=table, barrier=barrier)


def _pass_cost(shape: tuple[int, ...], axis: int, idx: np.ndarray, weights: Any) -> float:
  """A rough CPU cost model of one pass: output elements times live taps, minor axis dearer."""
  out = int(np.prod(shape)) // max(shape[axis], 1) * idx.shape[0]
  if isinstance(weights, jax.core.Tracer):
    k = idx.shape[1]
  else:
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
  if isinstance(w, jax.core.Tracer):
    return idx.shape[1], 2
  w = np.asarray(w, dtype=np.float64)
  k = int(np.count_nonzero(np.any(w != 0, axis=0)))
  n = max(int(idx.max()) + 1 if idx.size else 1, n_in)
  return k, _table(idx, w, n).transpose().live_taps


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
  order = pass_order(x.shape, [(a, np.asarray(idx), w) for a, (_, idx, w) in zip(axes, passes)])
  for n, i in enumerate(order):
    axis, idx, w = passes[i]
    # A barrier after a pass pays one copy to save the next pass from recomputing this one's
    # taps for each of its own taps: worth it when both have more than one live tap.
    k_this, kt_this = _live(x.shape[axis], idx, w)
    fwd = n < len(order) - 1 and k_this > 1 and _live(0, *passes[order[n + 1]][1:])[0] > 1
    bwd = n > 0 and kt_this > 1 and _live(-1, *passes[order[n - 1]][1:])[1] > 1
    x = apply_taps(x, axis, idx, w, barrier=(bool(fwd), bool(bwd)))
  return x
