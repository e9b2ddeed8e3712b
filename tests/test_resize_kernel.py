"""Tests of the resize device kernel (jaxops._resize_kernel) and its tables (jaxops._taps_table).

The oracle is an independent dense NumPy formulation: the tap table becomes an (out, in) matrix
(np.add.at over the taps) applied with np.tensordot in float64; its transpose is the matrix
transpose. Gradients are checked numerically with jax.test_util.check_grads. No expected value
is derived from jaxops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxops import _resize_kernel, _taps_table
from jaxops._resize_kernel import _grad_plan, apply_separable, apply_taps, pass_order

# Per-dtype tolerance (relative to the largest |weight| * |x| sum), in one place.
TOL = {np.float16: 2e-3, jnp.bfloat16: 1.6e-2, np.float32: 2e-6, np.float64: 1e-12}


def _dense(idx: np.ndarray, w: np.ndarray, n_in: int) -> np.ndarray:
  m = np.zeros((idx.shape[0], n_in))
  rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
  np.add.at(m, (rows, idx.reshape(-1)), np.asarray(w, np.float64).reshape(-1))
  return m


def _oracle(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
  m = _dense(idx, w, x.shape[axis])
  y = np.tensordot(m, np.asarray(x, np.float64), axes=([1], [axis]))
  return np.moveaxis(y, 0, axis)


def _table(rng: np.random.Generator, n_in: int, n_out: int, k: int) -> tuple:
  idx = rng.integers(0, n_in, size=(n_out, k))
  w = rng.standard_normal((n_out, k))
  return idx, w


def _resize_table(n_in: int, n_out: int) -> tuple:
  """A linear half_pixel table written from the ONNX formula (clamped taps)."""
  x = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
  f = np.floor(x)
  i0 = f.astype(np.int64)
  i1 = np.minimum(i0 + 1, n_in - 1)
  return np.stack([i0, i1], 1), np.stack([1 - (x - f), x - f], 1)


# ----------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("seed", range(6))
def test_random_tables_match_dense_oracle(seed):
  rng = np.random.default_rng(seed)
  rank = int(rng.integers(1, 5))
  shape = tuple(int(s) for s in rng.integers(1, 7, size=rank))
  axis = int(rng.integers(0, rank))
  idx, w = _table(rng, shape[axis], int(rng.integers(1, 9)), int(rng.integers(1, 5)))
  x = rng.standard_normal(shape)
  y = apply_taps(jnp.asarray(x), axis, idx, w)
  assert y.dtype == jnp.float64 and y.shape == _oracle(x, axis, idx, w).shape
  np.testing.assert_allclose(np.asarray(y), _oracle(x, axis, idx, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
@pytest.mark.parametrize("n_out", [257, 301])
def test_large_arrays_take_the_barrier_path(axis, n_out):
  # Passes joined behind the concatenation barrier, and without it; odd and even lengths.
  rng = np.random.default_rng(7)
  x = rng.standard_normal((3, 40, 260)).astype(np.float32)
  if axis == 0:
    x = rng.standard_normal((200, 4, 400)).astype(np.float32)
  idx, w = _table(rng, x.shape[axis], n_out, 3)
  want = _oracle(x, axis % 3, idx, w)
  for barrier in [(True, True), (False, False)]:
    y = jax.jit(lambda x, b=barrier: apply_taps(x, axis, idx, w, barrier=b))(x)
    np.testing.assert_allclose(np.asarray(y), want, rtol=2e-5, atol=2e-5)


def test_resize_like_tables_and_separable_order():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 3, 64, 48)).astype(np.float32)
  ih, wh = _resize_table(64, 128)
  iw, ww = _resize_table(48, 17)
  want = _oracle(_oracle(x, 2, ih, wh), 3, iw, ww)
  y = jax.jit(lambda x: apply_separable(x, [(2, ih, wh), (-1, iw, ww)]))(x)
  np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
  # Upsampling: the minor axis runs first, on the smaller array.
  ih2, wh2 = _resize_table(256, 512)
  passes = [(2, ih2, wh2), (3, ih2, wh2)]
  assert pass_order((8, 3, 256, 256), passes) == [1, 0]


def _periodic_table(rng: np.random.Generator, n_in: int, a: int, b: int, k: int) -> tuple:
  """A random table of the phase form: output a*q + p reads clip(b*q + off[p, k])."""
  blocks = n_in // b
  off = rng.integers(-2, b + 2, size=(a, k))
  w_p = rng.standard_normal((a, k))
  q = np.arange(blocks)[:, None, None]
  idx = np.clip(b * q + off[None], 0, n_in - 1).reshape(blocks * a, k)
  w = np.broadcast_to(w_p, (blocks, a, k)).reshape(blocks * a, k).copy()
  return idx, w


@pytest.mark.parametrize("a,b,k", [(2, 1, 1), (2, 1, 2), (3, 1, 2), (7, 4, 2), (1, 4, 2),
                                   (5, 3, 1)])
@pytest.mark.parametrize("fix", [(), (0,), (0, -1)])
def test_periodic_tables_take_the_phase_path(a, b, k, fix):
  # Tables that repeat with a period along the minor axis are summed from strided slices
  # (_phase_sum); blocks that break the period (here: edited edge blocks) come from the table.
  rng = np.random.default_rng(a * 100 + b * 10 + k + len(fix))
  n_in = 12 * b
  idx, w = _periodic_table(rng, n_in, a, b, k)
  for q in fix:
    rows = slice(a * q, a * q + a) if q >= 0 else slice(len(idx) - a, len(idx))
    idx[rows] = rng.integers(0, n_in, size=(a, k))
    w[rows] = rng.standard_normal((a, k))
  ph = _taps_table.table(idx, w, n_in).phases()
  assert ph is not None and (ph.a, ph.b) == (a, b) and len(ph.fix) == len(fix)
  # The transpose (a gather over the inverse table) is still the transposed matrix, with the
  # phase plan and with gathers (under differentiation or always).
  _check_minor_pass(rng, idx, w, n_in, ["phases", "gathers", "gathers under grad"])


def _check_minor_pass(rng: np.random.Generator, idx: np.ndarray, w: np.ndarray, n_in: int,
                      plans: list[str]) -> None:
  """A minor-axis pass of ``idx`` and ``w`` on a random (3, 2, n_in) input, with and without
  barriers, and its VJP under each of ``plans``, against the dense matrix and its transpose."""
  x = rng.standard_normal((3, 2, n_in))
  want = _oracle(x, 2, idx, w)
  for barrier in [(True, True), (False, False)]:
    y = jax.jit(lambda x, bar=barrier: apply_taps(x, -1, idx, w, barrier=bar))(x)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-12, atol=1e-12)
  ct = rng.standard_normal(want.shape)
  for plan in plans:
    y, vjp = jax.vjp(lambda x, p=plan: apply_taps(x, -1, idx, w, plan=p), x)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(vjp(ct)[0]),
                               _oracle(ct, 2, *_transposed(idx, w, n_in)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("a,b", [(7, 20), (5, 9), (4, 11)])
def test_periodic_tables_of_long_strides_take_the_gathers(a, b):
  # Downsampling by a/b with more than 3 phases and a stride past 8 (640 -> 224 is 7/20):
  # periodic, but computed with gathers, which measured faster there.
  rng = np.random.default_rng(a * 100 + b)
  n_in = 10 * b
  idx, w = _periodic_table(rng, n_in, a, b, 2)
  t = _taps_table.table(idx, w, n_in)
  assert (t.phases().a, t.phases().b) == (a, b)
  assert _resize_kernel.phase_plan(t, True, "phases") is None
  # 256 -> 224 (7/8) keeps the phases
  assert _resize_kernel.phase_plan(_periodic_table_of(rng, 7, 8), True, "phases") is not None
  _check_minor_pass(rng, idx, w, n_in, ["phases"])


@pytest.mark.parametrize("seed", range(4))
def test_transposed_table_is_the_dense_transpose(seed):
  # Tables with repeated taps in a row (merged), weights that cancel or are 0 (dropped),
  # unsorted and sorted indices; the transposed table's live taps asked before and after it
  # is built.
  rng = np.random.default_rng(seed)
  for _ in range(150):
    n_in, n_out, k = (int(v) for v in rng.integers(1, 30, 3) // [1, 1, 5] + [0, 0, 1])
    idx = rng.integers(0, n_in, (n_out, k))
    if rng.random() < 0.5:
      idx = np.sort(idx, axis=None).reshape(n_out, k)
    w = rng.choice([0.0, 0.25, -0.25, 0.5, 1.0, 1.5], (n_out, k))
    t = _taps_table.table(idx, w, n_in)
    t._transpose = None  # (interned: another case may have built it)
    dense = _dense(idx, w, n_in)
    live = t.transpose_live_taps()
    tt = t.transpose()
    np.testing.assert_array_equal(_dense(tt.idx, tt.w, n_out), dense.T)
    assert live == tt.live_taps == t.transpose_live_taps() == np.max(np.sum(dense != 0, 0))


def _periodic_table_of(rng: np.random.Generator, a: int, b: int) -> _taps_table.Table:
  idx, w = _periodic_table(rng, 10 * b, a, b, 2)
  return _taps_table.table(idx, w, 10 * b)


def _taps_oracle(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
  """sum_k w[:, k] * x[idx[:, k]] along ``axis`` in float64, tap by tap (0 * inf = nan only at
  a live tap, as the spec's formula reads)."""
  x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
  with np.errstate(invalid="ignore"):
    y = sum(x[..., idx[:, k]] * w[:, k] for k in range(idx.shape[1]))
  return np.moveaxis(y, -1, axis)


@pytest.mark.parametrize("sizes", [((96, 160), (84, 56)), ((64, 64), (32, 40)),
                                   ((48, 200), (96, 70))])
def test_chained_linear_passes_keep_non_finite_values_local(sizes):
  # Two linear passes (two live taps each) run as one fused loop, with no barrier between
  # them, up or down (four reads per output): the values are the passes' in their order, and
  # inf and NaN reach only the outputs that read them.
  (h, w_in), (ho, wo) = sizes
  rng = np.random.default_rng(h + wo)
  x = rng.standard_normal((2, 3, h, w_in))
  x[0, 1, h // 3, w_in // 2] = np.inf
  x[1, 2, h // 2, w_in // 5] = -np.inf
  x[1, 0, 5, 7] = np.nan
  ih, wh = _resize_table(h, ho)
  iw, ww = _resize_table(w_in, wo)
  passes = [(2, ih, wh), (3, iw, ww)]
  want = x
  for i in pass_order(x.shape, passes):
    want = _taps_oracle(want, *passes[i])
  y = np.asarray(jax.jit(lambda v: apply_separable(v, passes))(x))
  np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
  np.testing.assert_array_equal(np.isposinf(y), np.isposinf(want))
  np.testing.assert_array_equal(np.isneginf(y), np.isneginf(want))
  assert 0 < np.count_nonzero(~np.isfinite(want)) < 40
  fin = np.isfinite(want)
  np.testing.assert_allclose(y[fin], want[fin], rtol=1e-12, atol=1e-12)
  y32 = np.asarray(jax.jit(lambda v: apply_separable(v, passes))(x.astype(np.float32)))
  np.testing.assert_allclose(y32[fin], want[fin], rtol=2e-6, atol=2e-6)


def test_gradient_of_a_chain_past_the_mmap_threshold():
  # Linear 2x on 8x3x256x256 float32 is the size where the chain's gradient computes its minor
  # pass with gathers ("gathers under grad": 24 MiB of temporaries instead of 36); its gradient
  # is the transposed dense matrices applied to the cotangent.
  rng = np.random.default_rng(11)
  x = rng.standard_normal((8, 3, 256, 256)).astype(np.float32)
  idx, w = _resize_table(256, 512)
  passes = [(2, idx, w), (3, idx, w)]
  assert _grad_plan(x.shape, x.dtype, passes, [1, 0]) == "gathers under grad"
  assert _grad_plan((2, 3, 256, 256), x.dtype, passes, [1, 0]) == "phases"
  y, vjp = jax.vjp(jax.jit(lambda a: apply_separable(a, passes)), x)
  want = _oracle(_oracle(x, 3, idx, w), 2, idx, w)
  np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
  ct = rng.standard_normal(want.shape)
  back = _oracle(_oracle(ct, 2, *_transposed(idx, w, 256)), 3, *_transposed(idx, w, 256))
  np.testing.assert_allclose(np.asarray(vjp(ct.astype(np.float32))[0]), back, rtol=1e-4,
                             atol=1e-4)


@pytest.mark.parametrize("o,b,count", [(-2, 1, 9), (0, 2, 6), (3, 1, 6), (-3, 2, 5), (7, 1, 3),
                                       (-9, 1, 3), (-2, 3, 4)])
def test_strided_taps_clamp_at_both_edges(o, b, count):
  # x[..., clip(b*q + o, 0, n - 1)] by NumPy indexing: edge repeats on one side, both sides,
  # or on every tap (an input shorter than the taps' reach).
  x = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
  want = x[:, np.clip(b * np.arange(count) + o, 0, 6)]
  got = jax.jit(lambda v: _resize_kernel._strided_taps(v, o, b, count))(x)
  np.testing.assert_array_equal(np.asarray(got), want)


def _transposed(idx: np.ndarray, w: np.ndarray, n_in: int) -> tuple:
  m = _dense(idx, w, n_in).T                    # (n_in, n_out)
  cols = np.tile(np.arange(m.shape[1]), (m.shape[0], 1))
  return cols, m


def test_phase_path_cases_and_fallbacks():
  # 2x linear (half_pixel, clamped edges), nearest copies and 98/56 take the phase form, and so
  # does align_corners 2x, whose taps repeat but whose weights change from block to block (a
  # weight per block); cubic (4 taps) and short axes do not.
  ih, wh = _resize_table(256, 512)
  assert _taps_table.table(ih, wh, 256).phases() is not None
  i7, w7 = _resize_table(56, 98)
  assert _taps_table.table(i7, w7, 56).phases() is not None
  near = np.repeat(np.arange(64), 2)[:, None]
  assert _taps_table.table(near, np.ones((128, 1)), 64).phases() is not None
  pos = np.arange(512) * 255 / 511
  i0 = np.minimum(np.floor(pos).astype(np.int64), 254)
  ac_idx, ac_w = np.stack([i0, i0 + 1], 1), np.stack([1 - (pos - i0), pos - i0], 1)
  ph = _taps_table.table(ac_idx, ac_w, 256).phases()
  assert ph is not None and ph.w_q is not None and (ph.a, ph.b) == (2, 1)
  assert _taps_table.table(ih, wh, 256).phases().w_q is None  # constant weights stay scalars
  xa = np.random.default_rng(1).standard_normal((3, 2, 256))
  ya = jax.jit(lambda v: apply_taps(v, -1, ac_idx, ac_w))(xa)
  np.testing.assert_allclose(np.asarray(ya), _oracle(xa, 2, ac_idx, ac_w), rtol=1e-12,
                             atol=1e-12)
  rng = np.random.default_rng(0)
  ic, wc = _periodic_table(rng, 64, 2, 1, 4)
  assert _taps_table.table(ic, wc, 64).phases() is None
  i4, w4 = _resize_table(4, 8)
  assert _taps_table.table(i4, w4, 4).phases() is None
  # The phase path computes the same values as the dense oracle on a resize-like 2-D chain.
  x = rng.standard_normal((2, 3, 40, 56)).astype(np.float32)
  ih2, wh2 = _resize_table(40, 80)
  y = jax.jit(lambda x: apply_separable(x, [(2, ih2, wh2), (3, i7, w7)]))(x)
  np.testing.assert_allclose(np.asarray(y), _oracle(_oracle(x, 2, ih2, wh2), 3, i7, w7),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.bool_, jnp.bfloat16])
def test_phase_path_copies_are_exact_for_any_dtype(dtype):
  # Nearest 3x upsampling with clamped edges along the minor axis: a pure copy, exact.
  n = 20
  src = np.clip(np.floor((np.arange(3 * n) + 0.5) / 3 - 0.2).astype(np.int64), 0, n - 1)
  idx, w = src[:, None], np.ones((3 * n, 1))
  assert _taps_table.table(idx, w, n).phases() is not None
  x = (np.arange(2 * 5 * n).reshape(2, 5, n) % 11).astype(dtype)
  y = jax.jit(lambda x: apply_taps(x, 2, idx, w))(jnp.asarray(x))
  assert y.dtype == jnp.dtype(dtype)
  np.testing.assert_array_equal(np.asarray(y), x[..., src])


def test_phase_path_keeps_zero_weight_semantics():
  # A live tap column is multiplied even where one phase's weight is 0 (0 * inf = nan), as the
  # gather path and the reference do; an all-zero column is never read.
  n = 16
  idx = np.stack([np.repeat(np.arange(n), 2), np.minimum(np.repeat(np.arange(n), 2) + 1, n - 1),
                  np.zeros(2 * n, np.int64)], 1)
  w = np.stack([np.tile([1.0, 0.5], n), np.tile([0.0, 0.5], n), np.zeros(2 * n)], 1)
  assert _taps_table.table(idx, w, n).phases() is not None
  x = np.arange(n, dtype=np.float64)
  x[5] = np.inf
  x[0] = np.nan  # read only through the all-zero column for outputs > 1
  y = np.asarray(jax.jit(lambda x: apply_taps(x, 0, idx, w))(x))
  with np.errstate(invalid="ignore"):
    want = x[idx[:, 0]] * w[:, 0] + x[idx[:, 1]] * w[:, 1]  # the live columns only
  np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
  assert np.isnan(y[8])  # 1.0 * x[4] + 0.0 * inf


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16, np.float32, np.float64])
def test_dtypes(dtype):
  rng = np.random.default_rng(11)
  x = rng.standard_normal((3, 9, 5))
  idx, w = _resize_table(9, 20)
  xd = jnp.asarray(x, dtype)
  y = apply_taps(xd, 1, idx, w)
  assert y.dtype == jnp.dtype(dtype)
  # Half types compute in float32 and round once: compare with the oracle on the rounded input.
  want = _oracle(np.asarray(xd.astype(jnp.float64)), 1, idx, w)
  np.testing.assert_allclose(np.asarray(y.astype(jnp.float64)), want, rtol=TOL[dtype],
                             atol=TOL[dtype] * 4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.bool_])
def test_pure_copies_are_exact_for_any_dtype(dtype):
  x = (np.arange(24).reshape(4, 6) % 7).astype(dtype)
  idx = np.array([[5], [0], [0], [3], [2]])
  y = apply_taps(jnp.asarray(x), 1, idx, np.ones((5, 1)))
  assert y.dtype == jnp.dtype(dtype)
  np.testing.assert_array_equal(np.asarray(y), x[:, idx[:, 0]])


def test_zero_weight_columns_and_repeated_taps():
  x = np.arange(5.0)
  idx = np.array([[0, 0, 4], [2, 2, 2], [4, 3, 4]])
  w = np.array([[0.25, 0.5, 0.0], [1.0, -1.0, 0.0], [0.5, 0.25, 0.0]])
  np.testing.assert_allclose(np.asarray(apply_taps(jnp.asarray(x), 0, idx, w)),
                             [0.0 * 0.75, 0.0, 4 * 0.5 + 3 * 0.25])


# ----------------------------------------------------------------------------------------------
# Transforms: grad, jit, vmap, no retrace


def test_vjp_is_the_transposed_matrix():
  rng = np.random.default_rng(5)
  x = rng.standard_normal((4, 7, 3))
  idx, w = _table(rng, 7, 11, 4)
  ct = rng.standard_normal((4, 11, 3))
  _, vjp = jax.vjp(lambda x: apply_taps(x, 1, idx, w), jnp.asarray(x))
  want = np.moveaxis(np.tensordot(_dense(idx, w, 7).T, ct, axes=([1], [1])), 0, 1)
  np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(ct))[0]), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_tables_with_many_tap_columns_take_the_loop(axis):
  # Past _UNROLLED_TAPS live columns a pass loops over them (an unrolled fusion of 2048 gathers
  # took seconds to compile, and XLA aborted on 1024x1024 -> 1x1 antialiased); values, vjp
  # (through the inverse table, whose columns are many when the forward's are few) and
  # gradients against the dense oracle.
  rng = np.random.default_rng(30 + axis)
  shape = [3, 4, 5]
  shape[axis] = 150
  x = rng.standard_normal(shape)
  idx, w = _table(rng, 150, 3, _resize_kernel._UNROLLED_TAPS + 40)
  w[:, 7] = 0.0  # an all-zero column is skipped, as in the unrolled pass
  y = apply_taps(jnp.asarray(x), axis, idx, w)
  np.testing.assert_allclose(np.asarray(y), _oracle(x, axis, idx, w), rtol=1e-12, atol=1e-12)
  ct = rng.standard_normal(y.shape)
  _, vjp = jax.vjp(lambda v: apply_taps(v, axis, idx, w), jnp.asarray(x))
  want = np.moveaxis(np.tensordot(_dense(idx, w, 150).T, np.moveaxis(ct, axis, 0), axes=1), 0,
                     axis)
  np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(ct))[0]), want, rtol=1e-12, atol=1e-12)
  check_grads(lambda v: apply_taps(v, axis, idx, w), (x,), order=2, modes=["fwd", "rev"])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_check_grads_static_weights(axis):
  rng = np.random.default_rng(axis)
  x = rng.standard_normal((4, 5, 6))
  idx, w = _table(rng, x.shape[axis], 7, 3)
  check_grads(lambda x: apply_taps(x, axis, idx, w), (x,), order=2, modes=["fwd", "rev"])


def test_check_grads_separable_chain():
  rng = np.random.default_rng(8)
  x = rng.standard_normal((2, 6, 5))
  i1, w1 = _resize_table(6, 9)
  i2, w2 = _resize_table(5, 3)
  f = jax.jit(lambda x: apply_separable(x, [(1, i1, w1), (2, i2, w2)]))
  check_grads(f, (x,), order=2, modes=["fwd", "rev"])
  g = jax.grad(lambda x: jnp.sum(f(x) ** 2))(jnp.asarray(x))
  m1, m2 = _dense(i1, w1, 6), _dense(i2, w2, 5)
  y = np.einsum("ji,bik,lk->bjl", m1, x, m2)
  np.testing.assert_allclose(np.asarray(g), np.einsum("ji,bjl,lk->bik", m1, 2 * y, m2),
                             rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes", [((48, 64), (24, 56)), ((40, 60), (30, 25)),
                                   ((96, 64), (40, 24))])
def test_gradient_of_linear_downsampling_recomputed_or_kept(sizes):
  # Two linear downsampling passes whose minor-axis pass takes the phases recompute their
  # results inside the backward pass (keep=False: 56/64 is 7/8, 24/64 3/8); with gathers there
  # (25/60 is 5/12) they are kept. Either way the gradient is the transposed matrices', to
  # second order.
  (h, w_in), (ho, wo) = sizes
  rng = np.random.default_rng(h * w_in)
  x = rng.standard_normal((2, 3, h, w_in))
  i1, w1 = _resize_table(h, ho)
  i2, w2 = _resize_table(w_in, wo)
  passes = [(2, i1, w1), (3, i2, w2)]
  normal = [(a, np.asarray(i), w) for a, i, w in passes]
  phases = _resize_kernel.phase_plan(_taps_table.table(i2, w2, w_in), True, "phases")
  assert (phases is None) == (wo == 25)
  assert _resize_kernel._keeps(x.shape, normal, "phases") == (phases is None)
  assert not _resize_kernel._keeps(x.shape, normal[:1], "phases")
  f = jax.jit(lambda x: apply_separable(x, passes))
  check_grads(f, (x,), order=2, modes=["fwd", "rev"])
  g = jax.grad(lambda x: jnp.sum(f(x) ** 2))(jnp.asarray(x))
  m1, m2 = _dense(i1, w1, h), _dense(i2, w2, w_in)
  y = np.einsum("ji,ncik,lk->ncjl", m1, x, m2)
  np.testing.assert_allclose(np.asarray(g), np.einsum("ji,ncjl,lk->ncik", m1, 2 * y, m2),
                             rtol=1e-12, atol=1e-12)


def test_vmap_over_x():
  rng = np.random.default_rng(4)
  xs = rng.standard_normal((3, 6, 6))
  idx, w = _table(rng, 6, 8, 2)
  y = jax.vmap(lambda x: apply_taps(x, 1, idx, w), in_axes=2, out_axes=0)(xs)
  for i in range(6):
    np.testing.assert_allclose(np.asarray(y[i]), _oracle(xs[:, :, i], 1, idx, w), rtol=1e-12)
  check_grads(jax.jit(jax.vmap(lambda x: apply_taps(x, 1, idx, w))), (xs,), order=2,
              modes=["fwd", "rev"])


def test_no_retrace_and_tables_interned():
  traces = []
  idx, w = _resize_table(10, 23)

  @jax.jit
  def f(x):
    traces.append(1)
    # Fresh NumPy copies on every trace: equal content must give the same static table.
    return apply_taps(x, 0, idx.copy(), w.copy())

  x = jnp.ones((10, 3))
  f(x)
  f(x + 1)
  g = jax.jit(jax.grad(lambda x: jnp.sum(f(x) ** 2)))
  g(x)
  g(x + 1)
  assert len(traces) == 1  # g reuses f's traced jaxpr; repeated calls never retrace
  assert _taps_table.table(idx, w, 10) is _taps_table.table(idx.copy(), w.copy(), 10)
  t = _taps_table.table(idx, w, 10)
  assert t.transpose() is t.transpose()  # built once per table


def test_eager_calls_reuse_the_compiled_kernel():
  idx, w = _resize_table(6, 4)
  x = jnp.arange(12.0).reshape(6, 2)
  a = apply_taps(x, 0, idx, w)
  b = apply_taps(x, 0, idx.copy(), w.copy())
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_allclose(np.asarray(a), _oracle(np.asarray(x), 0, idx, w), rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Errors


def test_errors_name_the_argument():
  x = jnp.zeros((4, 5))
  idx, w = np.zeros((3, 2), int), np.zeros((3, 2))
  with pytest.raises(ValueError, match=r"resize: argument `axis` must be an integer in \[-2, 2\)"):
    apply_taps(x, 2, idx, w)
  with pytest.raises(ValueError, match=r"argument `idx` must be indices in \[0, 4\)"):
    apply_taps(x, 0, idx + 4, w)
  with pytest.raises(ValueError, match=r"argument `weights` must be an array of shape \(3, 2\)"):
    apply_taps(x, 0, idx, np.zeros((3, 1)))
  with pytest.raises(TypeError, match=r"argument `idx` must be a 2-D integer table"):
    apply_taps(x, 0, idx.astype(float), w)
  with pytest.raises(TypeError, match=r"argument `idx` must be a static NumPy integer table"):
    jax.jit(lambda i: apply_taps(x, 0, i, w))(idx)
  with pytest.raises(TypeError, match=r"argument `weights` must be a static NumPy table"):
    jax.jit(lambda v: apply_taps(x, 0, idx, v))(w)
  with pytest.raises(TypeError, match=r"argument `x` must be a floating array unless the taps"):
    apply_taps(jnp.zeros((4, 5), jnp.int32), 0, idx, w + 0.5)
  with pytest.raises(ValueError, match=r"argument `passes` must be passes on distinct axes"):
    apply_separable(x, [(0, idx, w), (-2, idx, w)])
  with pytest.raises(ValueError, match=r"argument `plan` must be one of \('phases', 'gathers'"):
    apply_taps(x, 0, idx, w, plan="fused")


def test_empty_outputs_and_inputs():
  x = jnp.ones((3, 4))
  none = (np.zeros((0, 2), int), np.zeros((0, 2)))
  assert apply_taps(x, 1, *none).shape == (3, 0)
  np.testing.assert_array_equal(np.asarray(jax.grad(lambda x: apply_taps(x, 1, *none).sum())(x)),
                                np.zeros((3, 4)))
  assert apply_taps(jnp.ones((0, 4)), 1, np.zeros((3, 2), int), np.ones((3, 2))).shape == (0, 3)
