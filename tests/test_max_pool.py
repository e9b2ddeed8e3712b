"""max_pool / max_unpool / global_max_pool / lp_pool / global_lp_pool: hand-derived values,
dtypes, errors, gradients, jit/vmap/no-retrace, the version adapters, and the pinned deviations
of docs/DEVIATIONS.md (MaxPool, MaxUnpool, LpPool)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import onnx.defs
import onnxruntime as ort
import pytest
import torch
from jax.test_util import check_grads
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops
from jaxops import _max_pool as _max_pool_module
from jaxops.onnx import Backend, _registry, run_node


def row(*v, dtype=np.float64):
  return np.array(v, dtype).reshape(1, 1, -1)


# --- hand-derived values ------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, want, want_idx", [
    # windows (3,1) (1,4) (4,1) (1,5): maxima 3 4 4 5 at 0 2 2 4
    (dict(kernel_shape=(2,)), row(3, 4, 4, 5), [0, 2, 2, 4]),
    # stride 2, pads 1, 1: (p,3) (1,4) (1,5)... windows (p,3) (1,4) (1,5) -> taps -1..0, 1..2, 3..4
    (dict(kernel_shape=(2,), strides=(2,), pads=(1, 1)), row(3, 4, 5), [0, 2, 4]),
    # ties: windows (1,4,1) (4,1,5): the first maximum
    (dict(kernel_shape=(3,), strides=(2,)), row(4, 5), [2, 4]),
    # dilation 2: taps o, o + 2: (3,4) (1,1) (4,5)
    (dict(kernel_shape=(2,), dilations=(2,)), row(4, 1, 5), [2, 1, 4]),
    # ceil_mode, k 2 s 2 over 5: (3,1) (4,1) (5) -> 3 windows, the last one element
    (dict(kernel_shape=(2,), strides=(2,), ceil_mode=True), row(3, 4, 5), [0, 2, 4]),
    # SAME_LOWER, k 2 s 2: out 3, total pad 1 at the start: (p,3) (1,4) (1,5)
    (dict(kernel_shape=(2,), strides=(2,), auto_pad="SAME_LOWER"), row(3, 4, 5), [0, 2, 4]),
    # auto_pad "" is NOTSET
    (dict(kernel_shape=(2,), strides=(2,), pads=(1, 1), auto_pad=""), row(3, 4, 5), [0, 2, 4]),
])
def test_1d_hand_values(kwargs, want, want_idx):
  x = row(3, 1, 4, 1, 5)
  k = kwargs.pop("kernel_shape")
  y, idx = jaxops.max_pool(x, k, return_indices=True, **kwargs)
  np.testing.assert_array_equal(np.asarray(y), want)
  np.testing.assert_array_equal(np.asarray(idx).ravel(), want_idx)
  np.testing.assert_array_equal(np.asarray(jaxops.max_pool(x, k, **kwargs)), want)


def test_indices_storage_order_and_planes():
  # 2 planes of 2x3; k 2x2 stride 1: windows at columns 0 and 1. Plane 0 = [[0,5,1],[2,3,4]]:
  # maxima 5 at (0,1) twice: row-major 1, column-major 0 + 1 * 2 = 2; plane 1 adds 6.
  x = np.array([[[[0, 5, 1], [2, 3, 4]], [[9, 0, 0], [0, 0, 8]]]], np.float32)
  _, idx = jaxops.max_pool(x, (2, 2), return_indices=True)
  np.testing.assert_array_equal(np.asarray(idx), [[[[1, 1]], [[6, 11]]]])
  # column-major: plane 1's 9 at (0,0) -> 6 + 0, 8 at (1,2) -> 6 + 1 + 2 * 2 = 11.
  _, idx = jaxops.max_pool(x, (2, 2), storage_order=1, return_indices=True)
  np.testing.assert_array_equal(np.asarray(idx), [[[[2, 2]], [[6, 11]]]])


def test_nan_rule_of_the_reference_and_onnxruntime():
  # The first in-input tap starts; later taps win only if strictly greater: NaN sticks only as
  # the window's first element. Windows of k 2 s 1 over [nan, 1, nan, 2]:
  # (nan, 1) -> nan at 0; (1, nan) -> 1 at 1; (nan, 2) -> nan at 2.
  x = row(np.nan, 1, np.nan, 2, dtype=np.float32)
  y, idx = jaxops.max_pool(x, (2,), return_indices=True)
  np.testing.assert_array_equal(np.asarray(y), row(np.nan, 1, np.nan, dtype=np.float32))
  np.testing.assert_array_equal(np.asarray(idx).ravel(), [0, 1, 2])
  # onnxruntime's MaxPool with Indices agrees.
  node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2])
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3]),
       helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 3])]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 10
  got = ort.InferenceSession(model.SerializeToString(),
                             providers=["CPUExecutionProvider"]).run(None, {"x": x})
  np.testing.assert_array_equal(got[0], np.asarray(y))
  np.testing.assert_array_equal(got[1], np.asarray(idx))
  # a padded window whose first in-input element is NaN: pads 1, k 3 s 3 -> taps -1, 0, 1.
  y = jaxops.max_pool(row(np.nan, 5, dtype=np.float32), (3,), strides=(3,), pads=(1, 1))
  assert np.isnan(np.asarray(y)).all()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, jnp.bfloat16, np.float32,
                                   np.float64])
def test_dtypes_stay(dtype):
  info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
  vals = [info.min, info.max, 0, 7] if info is not None else [-3.5, 2.25, 0.0, 7.0]
  x = jnp.asarray(np.array(vals, np.float64).reshape(1, 1, 4)).astype(dtype)
  # k 2 s 1 pads 1: (p,a) (a,b) (b,c) (c,d) (d,p) -> a, max(a,b), max(b,c), max(c,d), d
  y = jaxops.max_pool(x, (2,), pads=(1, 1))
  assert y.dtype == x.dtype
  v = np.asarray(x.astype(np.float64)).ravel()
  want = [v[0], max(v[0], v[1]), max(v[1], v[2]), max(v[2], v[3]), v[3]]
  np.testing.assert_array_equal(np.asarray(y.astype(np.float64)).ravel(), want)


def test_global_max_pool_values():
  x = np.arange(24.0).reshape(2, 3, 4)
  np.testing.assert_array_equal(np.asarray(jaxops.global_max_pool(x)),
                                (np.arange(6.0) * 4 + 3).reshape(2, 3, 1))
  assert jaxops.global_max_pool(np.ones((2, 3, 2, 2, 2))).shape == (2, 3, 1, 1, 1)


def test_global_max_pool_gradient_goes_to_the_first_maximum_as_in_torch():
  # ties in the plane: jnp.max would share the gradient among them; max pooling gives it to the
  # first (torch's max_pool over the whole plane, and jaxops.max_pool's indices)
  x = np.array([[[[1.0, 3.0], [3.0, 0.0]], [[2.0, 2.0], [2.0, 2.0]]]])
  w = np.array([1.0, 2.0]).reshape(1, 2, 1, 1)
  got = jax.grad(lambda v: jnp.sum(jaxops.global_max_pool(v) * w))(x)
  xt = torch.tensor(x, requires_grad=True)
  (torch.nn.functional.max_pool2d(xt, (2, 2)) * torch.tensor(w)).sum().backward()
  np.testing.assert_array_equal(np.asarray(got), xt.grad.numpy())
  assert np.count_nonzero(np.asarray(got)) == 2


@pytest.mark.parametrize("length", [1, 2, 7, 8, 9, 17, 56, 57, 63, 64, 65, 4099])
def test_global_max_pool_is_the_first_maximum_bit_for_bit(length):
  """Planes of every length the knockout rounds cut differently (a last block short of 8, one
  round or several; up to 56 elements the positions ride along the rounds, above they are
  found after them level by level), full of ties, zeros of both signs, infinities and NaN with
  payloads: the value is the plane's element that NumPy's argmax names (the first maximum, the
  first NaN), its own bits, in every floating dtype, also under vmap and for the planes that
  XLA's maximum reduction gives alone (neither NaN nor a zero maximum); the gradient is 1 there
  and 0 elsewhere. Planes without NaN against PyTorch as well: max_pool1d over the plane, its
  value's bits and its autograd (PyTorch's NaN rule differs: docs/DEVIATIONS.md, MaxPool)."""
  rng = np.random.default_rng(length)
  pool = np.array([0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan])
  planes = 48
  cases = []
  for dtype, bits in ((np.float16, np.uint16), (jnp.bfloat16, np.uint16),
                      (np.float32, np.uint32), (np.float64, np.uint64)):
    x = rng.choice(pool, (2, planes // 2, length))
    x[:, ::3] = np.where(np.isnan(x[:, ::3]), -np.inf, x[:, ::3])  # a third without NaN
    x[:, 1::6] = -rng.choice([0.0, -0.0, -1.0], (2, len(range(1, planes // 2, 6)), length))
    x = x.astype(dtype)
    raw = x.view(bits).copy()
    raw[np.isnan(x.astype(np.float32))] |= bits(3)  # NaNs of other payloads
    x = raw.view(dtype)
    flat = x.reshape(planes, length)
    first = np.argmax(flat.astype(np.float64), axis=1)  # NumPy: the first NaN, or first maximum
    want = flat[np.arange(planes), first]
    plain = ~np.isnan(want.astype(np.float64)) & (want != 0)
    assert plain.sum() >= 8
    cases.append((dtype, bits, x, flat, first, want, plain))

  def run(inputs):
    # every dtype's four calls in one program (one compile per length, not sixteen)
    return [(jaxops.global_max_pool(x),
             # batched: the conditional that fixes NaN and zero maxima stays one under vmap
             jax.vmap(jaxops.global_max_pool)(x4),
             # the planes that need no fix, alone: the conditional's other branch
             jaxops.global_max_pool(alone),
             jax.grad(lambda v: jnp.sum(jaxops.global_max_pool(v)))(x))
            for x, x4, alone in inputs]

  # (the added axis made here: XLA's CPU backend computes a bfloat16 broadcast in float32,
  # which gives the canonical NaN before global_max_pool sees the input)
  outs = jax.jit(run)([(c[2], c[2][:, :, None, :], c[3][c[6]][None]) for c in cases])
  for (dtype, bits, x, flat, first, want, plain), out in zip(cases, outs):
    got, mapped, alone, g = (np.asarray(o) for o in out)
    got = got.reshape(planes)
    np.testing.assert_array_equal(got.view(bits), want.view(bits), err_msg=str(dtype))
    np.testing.assert_array_equal(mapped.reshape(planes).view(bits), want.view(bits))
    np.testing.assert_array_equal(alone.reshape(-1).view(bits), want[plain].view(bits))
    onehot = np.zeros((planes, length), dtype)
    onehot[np.arange(planes), first] = 1
    np.testing.assert_array_equal(g.reshape(planes, length), onehot, err_msg=str(dtype))
  finite = ~np.isnan(flat).any(axis=1)
  xt = torch.tensor(flat[finite][:, None, :], requires_grad=True)
  tv = torch.nn.functional.max_pool1d(xt, length)
  tv.sum().backward()
  np.testing.assert_array_equal(got[finite].view(bits), tv.detach().numpy().reshape(-1).view(bits))
  np.testing.assert_array_equal(g.reshape(planes, length)[finite], xt.grad.numpy()[:, 0])


def test_global_max_pool_refuses_an_empty_plane():
  with pytest.raises(ValueError, match=r"global_max_pool: argument `x`.*got shape \(1, 2, 0\)"):
    jaxops.global_max_pool(np.zeros((1, 2, 0), np.float32))
  assert jaxops.global_max_pool(np.zeros((0, 2, 3), np.float32)).shape == (0, 2, 1)


def test_lp_pool_hand_values():
  x = row(3, -4, 0, 1, 2)
  # p 2, k 2 s 2, ceil: (3,-4) -> 5, (0,1) -> 1, (2) -> 2
  np.testing.assert_allclose(np.asarray(jaxops.lp_pool(x, (2,), strides=(2,), ceil_mode=True)),
                             row(5, 1, 2), rtol=1e-15)
  # p 3, k 2, pads 1 (zeros): |3|, (27 + 64) ** (1/3), 4, 1, (1 + 8) ** (1/3), 2
  got = jaxops.lp_pool(x, (2,), p=3, pads=(1, 1))
  np.testing.assert_allclose(np.asarray(got),
                             row(3, 91 ** (1 / 3), 4, 1, 9 ** (1 / 3), 2), rtol=1e-14)
  # p 1: sums of |x|, dilation 2: taps o, o + 2: (3,0) (-4,1) (0,2)
  np.testing.assert_allclose(np.asarray(jaxops.lp_pool(x, (2,), p=1, dilations=(2,))),
                             row(3, 5, 2), rtol=1e-15)
  np.testing.assert_allclose(np.asarray(jaxops.global_lp_pool(x, p=2)),
                             np.sqrt([[[30.0]]]), rtol=1e-15)


def test_lp_pool_half_types_compute_in_float32():
  # 300 ** 2 = 90000 overflows float16 (max 65504); in float32 the root is 300 * sqrt(2).
  x = jnp.full((1, 1, 2), 300.0, jnp.float16)
  for y in (jaxops.lp_pool(x, (2,)), jaxops.global_lp_pool(x)):
    assert y.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(y.astype(np.float64)).ravel(), [300 * np.sqrt(2)],
                               rtol=1e-3)


def test_max_unpool_values():
  # indices of max_pool over a 4x4 plane (k 2 s 2): the partial inverse puts each max back.
  x = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]]], np.float64)
  y, idx = jaxops.max_pool(x, (2, 2), strides=(2, 2), return_indices=True)
  back = jaxops.max_unpool(y, idx, (2, 2), strides=(2, 2))
  want = np.zeros((1, 1, 4, 4))
  want[..., 1::2, 1::2] = x[..., 1::2, 1::2]
  np.testing.assert_array_equal(np.asarray(back), want)
  # output_shape larger: the default 4x4 result, then zeros at the end (the ONNX node case).
  big = jaxops.max_unpool(y, idx, (2, 2), strides=(2, 2), output_shape=(1, 1, 5, 5))
  np.testing.assert_array_equal(np.asarray(big), np.pad(want, ((0, 0), (0, 0), (0, 1), (0, 1))))
  # repeats: the later element wins; out of range: dropped.
  got = jaxops.max_unpool(row(1.0, 2.0, 3.0), np.array([[[0, 0, 9]]]), (2,))
  np.testing.assert_array_equal(np.asarray(got), row(2.0, 0.0, 0.0, 0.0))



def _unpool_loop(x: np.ndarray, idx: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
  """The spec's reference loop: each element in row-major order written at its flat index
  (a later one overwrites), indices outside the output skipped."""
  y = np.zeros(int(np.prod(out_shape)), x.dtype)
  for v, i in zip(x.ravel(), idx.ravel()):
    if 0 <= i < y.size:
      y[i] = v
  return y.reshape(out_shape)


@pytest.mark.parametrize("kernel, strides, pads", [
    ((2, 2), (2, 2), (0, 0, 0, 0)), ((2, 3), (3, 3), (1, 0, 0, 2)), ((3,), (4,), (1, 1))])
def test_max_unpool_window_indices_and_any_other_indices(kernel, strides, pads):
  """Non-overlapping windows take a path without a scatter when every index lies in its own
  window (or outside the output); any other index must give the scatter's result. Oracle: the
  spec's loop in NumPy."""
  rng = np.random.default_rng(11)
  nd = len(kernel)
  out_shape = (2, 3) + tuple((4 - 1) * s - pb - pe + k for s, k, pb, pe in zip(
      strides, kernel, pads[:nd], pads[nd:]))  # the default output of a 4-long pooled axis
  src = rng.standard_normal(out_shape)
  y, idx = jaxops.max_pool(src, kernel, strides=strides, pads=pads, return_indices=True)
  y, idx = np.asarray(y), np.asarray(idx)
  assert y.shape[2:] == (4,) * nd
  size = int(np.prod(out_shape))
  dropped = idx.copy()
  dropped.flat[[0, 5]] = [-1, size]  # outside the output: skipped, the window path still holds
  moved = idx.copy()
  moved.flat[3] = idx.flat[7]  # another window's position: a repeat, the later writer wins
  f = jax.jit(lambda v, i: jaxops.max_unpool(v, i, kernel, strides=strides, pads=pads))
  plan = _max_pool_module._unpool_plan(y.shape, y.shape, kernel, strides, pads, None)
  for ind, windowed in ((idx, True), (dropped, True), (moved, False)):
    np.testing.assert_array_equal(np.asarray(f(y, ind)), _unpool_loop(y, ind, out_shape))
    fast, ok = _max_pool_module._unpool_windows(jnp.asarray(y), jnp.asarray(ind), plan)
    assert bool(ok) == windowed  # which path ran
    if windowed:
      np.testing.assert_array_equal(np.asarray(fast), _unpool_loop(y, ind, out_shape))
    check_grads(lambda v, i=ind: f(v, i), (y,), order=1, modes=("rev",))


def _own_window_flat(rng: np.random.Generator, lead: tuple[int, ...], n: tuple[int, ...],
                     kernel: tuple, strides: tuple, begin: tuple, out: tuple) -> np.ndarray:
  """Flat indices (over the whole output, as max_pool returns them) that each name a random
  position of the element's own window inside the output."""
  nd = len(n)
  idx = np.zeros(lead + n, np.int64)
  plane = int(np.prod(out))
  for pos in np.ndindex(*(lead + n)):
    flat = 0
    for d in range(nd):
      o = pos[len(lead) + d] * strides[d] - begin[d]
      taps = [o + t for t in range(kernel[d]) if 0 <= o + t < out[d]]
      flat = flat * out[d] + int(rng.choice(taps))
    idx[pos] = int(np.ravel_multi_index(pos[:len(lead)], lead)) * plane + flat
  return idx


@pytest.mark.parametrize("kernel, strides, pads, n, pulled", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (3, 4), True),    # output 5x7: the pull's crop
    ((3, 3), (2, 2), (1, 1, 0, 0), (3, 4), True),    # output 6x8: no crop
    ((3, 3), (1, 1), (1, 1, 1, 1), (3, 4), True),    # 9 writers per position, targets by scatter
    ((3,), (1,), (1, 1), (7,), True),
    ((4, 2), (2, 1), (1, 0, 2, 0), (3, 3), True),
    ((3, 3, 3), (2, 2, 2), (1, 1, 1, 0, 0, 0), (2, 2, 3), True),   # output 4x4x6
    ((3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), (2, 2, 3), False),  # 3x3x5: the scatter
    ((5, 5), (1, 1), (2, 2, 2, 2), (3, 3), False),   # 25 writers per position: the scatter
])
def test_max_unpool_overlapping_windows(kernel, strides, pads, n, pulled):
  """Overlapping windows (kernel longer than stride) whose indices each lie in their own
  window take a pull of each position's candidate writers instead of the scatter: positions
  that several windows share keep the later element; indices outside the output are dropped;
  one index elsewhere sends the call to the scatter. Values, the JVP and the VJP (the
  cotangent at each kept element's position, zero at the overwritten ones) against the spec's
  loop in NumPy, float64, exactly."""
  rng = np.random.default_rng(sum(kernel) + 10 * sum(n))
  nd = len(kernel)
  lead = (2, 3)
  out_shape = lead + tuple((m - 1) * s - pb - pe + k for m, s, k, pb, pe in zip(
      n, strides, kernel, pads[:nd], pads[nd:]))
  size = int(np.prod(out_shape))
  x = rng.standard_normal(lead + n)
  own = _own_window_flat(rng, lead, n, kernel, strides, pads[:nd], out_shape[2:])
  dropped = own.copy()
  dropped.flat[[1, 4]] = [-2, size + 3]
  moved = own.copy()
  moved.flat[0] = own.flat[-1]  # another plane's position: only the scatter has it
  plan = _max_pool_module._unpool_plan(x.shape, x.shape, kernel, strides, pads, None)
  assert _max_pool_module.unpool_windowed(plan.cfg) == pulled
  f = jax.jit(lambda v, i: jaxops.max_unpool(v, i, kernel, strides=strides, pads=pads))
  repeats = 0
  for ind, windowed in ((own, True), (dropped, True), (moved, False)):
    want = _unpool_loop(x, ind, out_shape)
    # the kept elements: each position's last writer
    last = np.full(size, -1)
    for e, i in enumerate(ind.ravel()):
      if 0 <= i < size:
        last[i] = e
    repeats += int(np.sum(last >= 0)) < int(np.sum((ind >= 0) & (ind < size)))
    y, vjp = jax.vjp(lambda v, i=ind: f(v, i), jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(y), want)
    cot = rng.standard_normal(out_shape)
    want_g = np.zeros(x.size)
    want_g[last[last >= 0]] = cot.ravel()[last >= 0]
    np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(cot))[0]).ravel(), want_g)
    t = rng.standard_normal(x.shape)
    tangent = jax.jvp(lambda v, i=ind: f(v, i), (jnp.asarray(x),), (jnp.asarray(t),))[1]
    np.testing.assert_array_equal(np.asarray(tangent), _unpool_loop(t, ind, out_shape))
    fast, ok = _max_pool_module._unpool_windows(jnp.asarray(x), jnp.asarray(ind), plan)
    assert bool(ok) == windowed  # which path ran (where pulled)
    if windowed:
      np.testing.assert_array_equal(np.asarray(fast), want)
  assert repeats  # windows that share a position, and an element overwritten


def test_max_unpool_64_bit_numpy_indices_without_64_bit_types():
  """With JAX's 64-bit types off, int64 NumPy indices past int32 wrapped when JAX took them:
  2**32 + 5 wrote at position 5. They lie outside the output and are dropped (the spec's loop)."""
  rng = np.random.default_rng(3)
  y = rng.standard_normal((2, 1, 2, 2)).astype(np.float32)
  idx = np.array([0, 5, 10, 15], np.int64).reshape(1, 1, 2, 2) + np.array([0, 16]).reshape(
      2, 1, 1, 1)
  for bad in (2 ** 32 + 5, -(2 ** 32) + 5):
    ind = idx.copy()
    ind[0, 0, 0, 0] = bad
    for dtype in (np.int64, np.uint64) if bad > 0 else (np.int64,):
      with jax.enable_x64(False):
        got = jaxops.max_unpool(y, ind.astype(dtype), (2, 2), strides=(2, 2))
      np.testing.assert_array_equal(np.asarray(got), _unpool_loop(y, ind, (2, 1, 4, 4)))


@pytest.mark.parametrize("kernel, strides", [((3, 3), (2, 2)), ((2, 2), (2, 2))])
def test_max_unpool_scatter_keeps_the_sign_of_zero(kernel, strides):
  """The scatter path (overlapping windows, or indices outside their windows) takes each
  position's last writer's value exactly: a -0.0 that is kept stays -0.0, positions nobody
  writes are +0.0, and an overwritten -0.0 leaves no trace. Oracle: the spec's loop in NumPy."""
  x = np.array([[[[-0.0, 1.0], [-0.0, 2.0]]]], np.float32)
  out_shape = (1, 1) + tuple(1 * s + k for s, k in zip(strides, kernel))
  # element 0 (-0.0) is overwritten by element 3; element 2 (-0.0) is kept
  ind = np.array([[[[4, 7], [9, 4]]]], np.int64)
  want = _unpool_loop(x, ind, out_shape)
  got = np.asarray(jax.jit(lambda v, i: jaxops.max_unpool(v, i, kernel, strides=strides))(x, ind))
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
  assert np.signbit(want).sum() == 1


# --- errors -------------------------------------------------------------------------------------


X = np.zeros((1, 1, 4, 4), np.float32)


@pytest.mark.parametrize("fn, kwargs, exc, match", [
    ("max_pool", dict(kernel_shape=(6, 6)), ValueError, r"^jaxops.max_pool: the window along"),
    ("max_pool", dict(kernel_shape=(2, 2), strides=(0, 1)), ValueError,
     r"^jaxops.max_pool: argument `strides` must be integers >= 1"),
    ("max_pool", dict(kernel_shape=(2, 2), pads=(2, 0, 0, 0)), ValueError,
     r"jaxops.max_pool: argument `pads` must be smaller than the kernel"),
    ("max_pool", dict(kernel_shape=(2, 2), auto_pad="SAME"), ValueError,
     r"jaxops.max_pool: argument `auto_pad` must be one of 'NOTSET'"),
    ("max_pool", dict(kernel_shape=(2, 2), storage_order=2, return_indices=True), ValueError,
     r"jaxops.max_pool: argument `storage_order` must be 0"),
    ("max_pool", dict(kernel_shape=(2, 2), storage_order=5), ValueError,
     r"jaxops.max_pool: argument `storage_order` must be 0"),
    ("max_pool", dict(kernel_shape=(2, 2), ceil_mode="yes"), TypeError,
     r"jaxops.max_pool: argument `ceil_mode` must be a bool"),
    ("max_pool", dict(kernel_shape=(2, 1), dilations=(5, 1), pads=(1, 0, 1, 0)), ValueError,
     r"jaxops.max_pool: output position 0 along spatial axis 0 .* covers no input element"),
    ("lp_pool", dict(kernel_shape=(2, 2), p=0), ValueError,
     r"jaxops.lp_pool: argument `p` must be a positive integer"),
    ("lp_pool", dict(kernel_shape=(2, 2), p=2.5), TypeError,
     r"jaxops.lp_pool: argument `p` must be a positive integer"),
    ("lp_pool", dict(kernel_shape=(2, 2, 2, 2, 2)), ValueError,
     r"jaxops.lp_pool: argument `x` must have at least 5 axes"),
])
def test_errors(fn, kwargs, exc, match):
  k = kwargs.pop("kernel_shape")
  with pytest.raises(exc, match=match):
    getattr(jaxops, fn)(X, k, **kwargs)


def test_error_types_and_unpool_shapes():
  with pytest.raises(TypeError, match=r"jaxops.max_pool: argument `x` must have dtype in"):
    jaxops.max_pool(np.zeros((1, 1, 4), np.int32), (2,))
  with pytest.raises(TypeError, match=r"jaxops.lp_pool: argument `x` must have dtype in"):
    jaxops.lp_pool(np.zeros((1, 1, 4), np.int8), (2,))
  with pytest.raises(ValueError, match=r"jaxops.global_max_pool: argument `x` must have at "):
    jaxops.global_max_pool(np.zeros((4,), np.float32))
  with pytest.raises(TypeError, match=r"jaxops.max_unpool: argument `indices` must have an "):
    jaxops.max_unpool(row(1.0), row(0.0), (2,))
  with pytest.raises(ValueError, match=r"jaxops.max_unpool: argument `indices` must have the "):
    jaxops.max_unpool(row(1.0, 2.0), np.zeros((1, 1, 1), np.int64), (2,))
  with pytest.raises(ValueError, match=r"jaxops.max_unpool: argument `output_shape` must be"):
    jaxops.max_unpool(row(1.0), np.zeros((1, 1, 1), np.int64), (2,), output_shape=(1, 1, 1))
  f = jax.jit(lambda x, k: jaxops.max_pool(x, k))
  with pytest.raises(TypeError, match=r"`kernel_shape` decides the output shape"):
    f(X, jnp.array([2, 2]))


# --- gradients, jit, vmap, retracing ------------------------------------------------------------


def test_gradient_goes_to_the_indexed_element_as_in_torch():
  # ties everywhere (integers in -2..2): the gradient goes to the first maximum, as Indices say.
  x = np.round(np.random.default_rng(0).standard_normal((2, 3, 7, 6)) * 1.2)
  kw = dict(strides=(2, 1), pads=(1, 1, 1, 1), dilations=(1, 2), ceil_mode=True)
  y, idx = jaxops.max_pool(x, (3, 2), return_indices=True, **kw)
  w = np.cos(np.arange(y.size)).reshape(y.shape)
  g = jax.grad(lambda v: jnp.sum(jaxops.max_pool(v, (3, 2), **kw) * w))(x)
  want = np.zeros(x.size)
  np.add.at(want, np.asarray(idx).ravel(), w.ravel())
  np.testing.assert_array_equal(np.asarray(g), want.reshape(x.shape))
  xt = torch.from_numpy(x).requires_grad_()
  ty = torch.nn.functional.max_pool2d(xt, (3, 2), (2, 1), (1, 1), (1, 2), ceil_mode=True)
  (ty * torch.from_numpy(w)).sum().backward()
  np.testing.assert_array_equal(np.asarray(g), xt.grad.numpy())


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_check_grads_without_ties(nd):
  rng = np.random.default_rng(nd)
  shape = (1, 2) + (5,) * nd
  x = rng.permutation(np.prod(shape)).reshape(shape) / 7.0  # distinct: no ties
  k, s, p = (3,) * nd, (2,) * nd, (1,) * (2 * nd)
  # order 2 in 1-D and 2-D; 3-D runs the same rules over one more axis, at order 1 (its order-2
  # check compiles for half a minute)
  order = 2 if nd < 3 else 1
  check_grads(lambda v: jaxops.max_pool(v, k, strides=s, pads=p), (x,), order=order,
              modes=("fwd", "rev"))
  check_grads(lambda v: jaxops.lp_pool(v, k, p=3, strides=s, pads=p), (x + 0.1,), order=order,
              modes=("fwd", "rev"), rtol=1e-4)
  check_grads(lambda v: jaxops.global_lp_pool(v, p=2), (x + 0.1,), order=order,
              modes=("fwd", "rev"))


def test_lp_pool_nan_propagates():
  """A window holding a NaN gives NaN (it gave 0 for p >= 2: the zero-window rule read
  `sum > 0`). Oracles: onnxruntime (LpPool-18, GlobalLpPool-2) and torch. (onnx.reference's
  LpPool drops the NaN with p = 1: [2, 4, 5] here.)"""
  x = np.array([[[1.0, np.nan, 2.0, 3.0]]], np.float32)
  for p in (1, 2, 3):
    model = _node_model("LpPool", 18, dict(kernel_shape=[2], p=p), [1, 1, 4])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isnan(want[0, 0, :2]).all()
    np.testing.assert_allclose(np.asarray(jaxops.lp_pool(x, (2,), p=p)), want, rtol=1e-6)
    t = torch.nn.functional.lp_pool1d(torch.tensor(x), p, 2, stride=1).numpy()
    np.testing.assert_allclose(np.asarray(jaxops.lp_pool(x, (2,), p=p)), t, rtol=1e-6)
    model = _node_model("GlobalLpPool", 2, dict(p=p), [1, 1, 4])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isnan(want).all()
    assert np.isnan(np.asarray(jaxops.global_lp_pool(x, p=p))).all()
  lp1 = _registry.lookup("LpPool", "", 1).fn  # a float p below 1
  assert np.isnan(np.asarray(lp1([x], {"kernel_shape": [2], "p": 0.5})[0])[0, 0, :2]).all()


def test_lp_pool_gradient_of_a_zero_window_is_zero():
  x = np.array([[[0.0, 0.0, 3.0, 4.0]]])
  for p in (1, 2, 3):
    g = jax.grad(lambda v: jnp.sum(jaxops.lp_pool(v, (2,), p=p, strides=(2,))))(x)
    # window (0, 0): zero by definition; window (3, 4): d/dx (3^p + 4^p)^(1/p)
    norm = (3.0 ** p + 4.0 ** p) ** (1 / p)
    want = [0, 0, (3 / norm) ** (p - 1), (4 / norm) ** (p - 1)]
    np.testing.assert_allclose(np.asarray(g).ravel(), want, rtol=1e-14)
  g = jax.grad(lambda v: jnp.sum(jaxops.global_lp_pool(v)))(np.zeros((1, 2, 3)))
  np.testing.assert_array_equal(np.asarray(g), np.zeros((1, 2, 3)))
  # LpPool-1 / GlobalLpPool-1 take a float p; below 1, |x| ** p has an infinite slope at 0
  lp1 = _registry.lookup("LpPool", "", 1).fn
  g = jax.grad(lambda v: jnp.sum(lp1([v], {"kernel_shape": [2], "strides": [2], "p": 0.5})[0]))(x)
  norm = (3.0 ** 0.5 + 4.0 ** 0.5) ** 2
  np.testing.assert_allclose(np.asarray(g).ravel(),
                             [0, 0, (3 / norm) ** -0.5, (4 / norm) ** -0.5], rtol=1e-14)
  glp1 = _registry.lookup("GlobalLpPool", "", 1).fn
  g = jax.grad(lambda v: jnp.sum(glp1([v], {"p": 0.5})[0]))(np.zeros((1, 2, 3)))
  np.testing.assert_array_equal(np.asarray(g), np.zeros((1, 2, 3)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_max_unpool_narrow_index_dtypes(dtype):
  # 129 planes of 1 -> 2: with the planes' flat offsets in int8 the last plane's wrapped to 0,
  # and its element named plane 0's position landed in its own plane
  c = 129
  x = np.arange(1, c + 1, dtype=np.float32).reshape(1, c, 1)
  i = np.full((1, c, 1), 120, np.int64)  # outside every plane but 60: dropped
  i[0, 60, 0] = 121
  i[0, 128, 0] = 1  # plane 0's second position: not in its own window
  node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2], strides=[2])
  want = ReferenceEvaluator(node).run(None, {"x": x, "i": i})[0]
  got = jaxops.max_unpool(x, i.astype(dtype), (2,), strides=(2,))
  np.testing.assert_array_equal(np.asarray(got), want)
  assert want[0, 0, 1] == 129 and want[0, 60, 1] == 61


def test_max_unpool_is_linear_in_x():
  rng = np.random.default_rng(4)
  x = rng.standard_normal((2, 3, 3, 3))
  _, idx = jaxops.max_pool(rng.standard_normal((2, 3, 6, 6)), (2, 2), strides=(2, 2),
                           return_indices=True)
  f = lambda v: jaxops.max_unpool(v, idx, (2, 2), strides=(2, 2))  # noqa: E731
  check_grads(f, (x,), order=2, modes=("fwd", "rev"))
  a, b = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
  np.testing.assert_allclose(np.asarray(f(2 * a - b)), 2 * np.asarray(f(a)) - np.asarray(f(b)),
                             rtol=1e-14)


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit], ids=["eager", "jit"])
def test_jit_and_vmap(wrap):
  x = np.random.default_rng(5).standard_normal((4, 1, 2, 7, 6))
  kw = dict(strides=(2, 2), pads=(1, 1, 1, 1))
  for fn in (lambda v: jaxops.max_pool(v, (3, 3), **kw),
             lambda v: jaxops.max_pool(v, (3, 3), return_indices=True, **kw)[1],
             lambda v: jaxops.lp_pool(v, (3, 3), p=3, **kw),
             jaxops.global_max_pool):
    want = np.stack([np.asarray(fn(v)) for v in x])  # each element on its own
    chex.assert_trees_all_close(wrap(jax.vmap(fn))(x), want)


def test_no_retrace_on_repeated_call(monkeypatch):
  from jaxops import _lp_pool, _max_pool

  monkeypatch.setattr(_max_pool, "_argmax", chex.assert_max_traces(_max_pool._argmax, n=2))
  monkeypatch.setattr(_lp_pool, "_power", chex.assert_max_traces(_lp_pool._power, n=1))
  rng = np.random.default_rng(6)
  shape = (1, 1, 13, 11)  # a shape no other test uses, so the first call traces
  try:
    for _ in range(3):
      jaxops.max_pool(rng.standard_normal(shape), (3, 3), strides=(2, 1))
      jaxops.max_pool(rng.standard_normal(shape), [3, 3], strides=[2, 1], return_indices=True)
      jaxops.lp_pool(rng.standard_normal(shape), (3, 3), strides=(2, 1))
  finally:
    chex.clear_trace_counter()


# --- the ONNX adapters --------------------------------------------------------------------------


_SCHEMA_TYPES = {"tensor(float16)": np.float16, "tensor(bfloat16)": jnp.bfloat16,
                 "tensor(float)": np.float32, "tensor(double)": np.float64,
                 "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}
_VERSIONS = ([("MaxPool", v) for v in (1, 8, 10, 11, 12, 22)]
             + [("LpPool", v) for v in (1, 2, 11, 18, 22)]
             + [("GlobalMaxPool", v) for v in (1, 22)]
             + [("GlobalLpPool", v) for v in (1, 2, 22)])


@pytest.mark.parametrize("op, version", _VERSIONS)
def test_adapter_input_types_follow_the_schema(op, version):
  (constraint,) = [c for c in onnx.defs.get_schema(op, version, "").type_constraints
                   if c.type_param_str == "T"]
  allowed = {_SCHEMA_TYPES[t] for t in constraint.allowed_type_strs}
  adapter = _registry.ADAPTERS[(op, version)]
  attrs = {"kernel_shape": [2, 2], "strides": [2, 2]} if "Global" not in op else {}
  x64 = np.arange(16.0).reshape(1, 1, 4, 4)
  for dtype in _SCHEMA_TYPES.values():
    x = jnp.asarray(x64).astype(dtype)
    if dtype in allowed:
      y = adapter.fn([x], dict(attrs))[0]
      assert y.dtype == x.dtype
    else:
      with pytest.raises(TypeError, match=rf"^jaxops.onnx: node '' \({op}-{version}\): input 0 "
                         rf"\(`X`\) has element type"):
        _registry.check_node("", adapter, [x], dict(attrs))


@pytest.mark.parametrize("op, version, attr", [
    ("MaxPool", 1, "storage_order"), ("MaxPool", 8, "ceil_mode"), ("MaxPool", 8, "dilations"),
    ("LpPool", 11, "ceil_mode"), ("LpPool", 2, "dilations"), ("MaxUnpool", 9, "dilations")])
def test_adapter_rejects_later_attributes(op, version, attr):
  # The backend checks each version's attribute set against its schema when it prepares a node.
  inputs = [np.asarray(row(1, 2, 3, dtype=np.float32))] + (
      [np.zeros((1, 1, 3), np.int64)] if op == "MaxUnpool" else [])
  names = ["x", "i"][:len(inputs)]
  node = helper.make_node(op, names, ["y"], kernel_shape=[2], **{attr: 1})
  with pytest.raises(ValueError, match=rf"\({op}-{version}\): has no attribute `{attr}`"):
    run_node(node, inputs, opset_version=version)


def test_adapter_rank_rule():
  node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])
  with pytest.raises(ValueError, match=r"\(MaxPool-22\): input 0 \(`X`\) has rank 4 .* it must "
                     r"have rank 5"):
    run_node(node, [np.asarray(X)], opset_version=22)


def test_lp_pool_1_takes_a_float_p():
  # LpPool-1's p is a float attribute: p = 1.5 over windows (1, 8) of [1, 8]: (1 + 8^1.5)^(2/3)
  y = _registry.ADAPTERS[("LpPool", 1)].fn([row(1.0, 8.0)], {"kernel_shape": [2], "p": 1.5})[0]
  np.testing.assert_allclose(np.asarray(y).ravel(), [(1 + 8 ** 1.5) ** (1 / 1.5)], rtol=1e-14)
  with pytest.raises(TypeError, match=r"LpPool-2: argument `p` must be a positive integer"):
    _registry.ADAPTERS[("LpPool", 2)].fn([row(1.0, 8.0)], {"kernel_shape": [2], "p": 1.5})


def _node_model(op, version, attrs, x_shape, outputs=1, elem=TensorProto.FLOAT):
  node = helper.make_node(op, ["x"], ["y", "i"][:outputs], **attrs)
  dims = [f"d{i}" for i in range(len(x_shape))]
  outs = [helper.make_tensor_value_info("y", elem, dims),
          helper.make_tensor_value_info("i", TensorProto.INT64, dims)][:outputs]
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", elem, x_shape)], outs),
      opset_imports=[helper.make_opsetid("", version)])
  model.ir_version = 10
  return model


@pytest.mark.parametrize("op", ["MaxPool", "LpPool"])
def test_empty_auto_pad_through_the_backend(op):
  model = _node_model(op, 22, dict(kernel_shape=[2], strides=[2], pads=[1, 1], auto_pad=""),
                      [1, 1, 5])
  x = row(3, -1, 4, 1, 5, dtype=np.float32)
  got = Backend.run_model(model, [x])[0]
  # windows (p,3) (-1,4) (1,5): max 3 4 5; L2 3, sqrt(17), sqrt(26)
  want = row(3, 4, 5) if op == "MaxPool" else row(3, np.sqrt(17), np.sqrt(26))
  np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
  np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-6)


# --- pinned deviations (docs/DEVIATIONS.md) -----------------------------------------------------


def test_deviation_max_pool_ceil_mode_window_in_padding():
  """ceil_mode never makes a window that starts in the right padding (onnx/onnx#4958,
  onnxruntime#15446 gave such windows -FLT_MAX): n 4, k 2, s 2, pads 0, 1 ->
  ceil((4 + 1 - 2) / 2) + 1 = 3, and window 2 starts at 4 >= n + pb = 4: dropped."""
  x = row(1, 2, 3, 4, dtype=np.float32)
  y = jaxops.max_pool(x, (2,), strides=(2,), pads=(0, 1), ceil_mode=True)
  np.testing.assert_array_equal(np.asarray(y), row(2, 4, dtype=np.float32))
  model = _node_model("MaxPool", 22, dict(kernel_shape=[2], strides=[2], pads=[0, 1],
                                          ceil_mode=1), [1, 1, 4])
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  assert sess.run(None, {"x": x})[0].shape == (1, 1, 2)  # today's onnxruntime agrees


def test_deviation_max_pool_reference_same_lower():
  """SAME_LOWER: ceil(n / s) windows with the odd padding first; onnx.reference gives
  floor(n / s) windows. n 5, k 2, s 2: out 3, total pad 1 at the start: (p,3) (1,4) (1,5)."""
  model = _node_model("MaxPool", 22, dict(kernel_shape=[2], strides=[2], auto_pad="SAME_LOWER"),
                      [1, 1, 5])
  x = row(3, 1, 4, 1, 5, dtype=np.float32)
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0], row(3, 4, 5, dtype=np.float32))
  assert ReferenceEvaluator(model).run(None, {"x": x})[0].shape == (1, 1, 2)


def test_deviation_max_pool_reference_unstrided_path():
  """onnx.reference's stride-1, dilation-1 MaxPool ignores the pads of a 1-D input."""
  model = _node_model("MaxPool", 22, dict(kernel_shape=[2], pads=[1, 1]), [1, 1, 3])
  x = row(3, 1, 4, dtype=np.float32)
  # windows (p,3) (3,1) (1,4) (4,p)
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0],
                                row(3, 3, 4, 4, dtype=np.float32))
  with pytest.raises(Exception):
    got = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, row(3, 3, 4, 4, dtype=np.float32))
  # 2-D, explicit pads on one axis: the reference reads pads [1, 0, 1, 0] as if on the other
  # (shape (2, 1, 6, 3)); the spec's (n + pads - k) / s + 1 gives (2, 1, 7, 2), as onnxruntime
  # (found by a dtype fuzz)
  x2 = np.random.default_rng(0).standard_normal((2, 1, 6, 4)).astype(np.float32)
  model2 = _node_model("MaxPool", 22, dict(kernel_shape=[2, 3], pads=[1, 0, 1, 0]), x2.shape)
  want = ort.InferenceSession(model2.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x2})[0]
  assert want.shape == (2, 1, 7, 2)
  np.testing.assert_array_equal(Backend.run_model(model2, [x2])[0], want)
  assert ReferenceEvaluator(model2).run(None, {"x": x2})[0].shape == (2, 1, 6, 3)


def test_deviation_max_pool_auto_pad():
  """MaxPool under auto_pad as AveragePool 2, 4 and 5: the dilated extent in SAME's pad, a SAME
  pad never negative, ceil_mode without effect. Hand-derived windows; onnxruntime differs.
  (a) n 6, k 2, d 3 (extent 4), s 2, SAME_UPPER: 3 windows, total pad (3 - 1) * 2 + 4 - 6 = 2,
      1 at each end: taps (p,2) (1,4) (3,p) -> max 2, 4, 3. onnxruntime pads for the undilated
      kernel.
  (b) n 5, k 1, s 3, SAME_UPPER: the pad formula gives (2 - 1) * 3 + 1 - 5 = -1, so 0: windows at
      0 and 3 -> 9, 7. (c) the same with ceil_mode=1: unchanged (the SAME length is ceil(n / s))."""
  x = row(0, 1, 2, 3, 4, 0, dtype=np.float32)  # values at 0..5; padding never wins
  x[0, 0, 5] = -1.0
  cases = [
      (dict(kernel_shape=[2], dilations=[3], strides=[2], auto_pad="SAME_UPPER"), x, row(
          2, 4, 3, dtype=np.float32)),
      (dict(kernel_shape=[1], strides=[3], auto_pad="SAME_UPPER"),
       row(9, 8, 6, 7, 5, dtype=np.float32), row(9, 7, dtype=np.float32)),
      (dict(kernel_shape=[1], strides=[3], auto_pad="SAME_UPPER", ceil_mode=1),
       row(9, 8, 6, 7, 5, dtype=np.float32), row(9, 7, dtype=np.float32)),
  ]
  ort_differs = 0
  for attrs, xi, want in cases:
    model = _node_model("MaxPool", 22, attrs, list(xi.shape))
    np.testing.assert_array_equal(Backend.run_model(model, [xi])[0], want)
    try:
      sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
      got = sess.run(None, {"x": xi})[0]
      ort_differs += got.shape != want.shape or not np.array_equal(got, want)
    except Exception:  # refused ("padding values must be non-negative" and the like)
      ort_differs += 1
  assert ort_differs == len(cases)  # (a) 2 windows [3, 2]; (b), (c) refused (negative pad)


def test_deviation_max_pool_storage_order_3d():
  """storage_order=1 (onnx/onnx#1370, #2290): column-major over the pooled axes, the spec's
  'column major' for any rank: index h + H * (w + W * d); onnxruntime agrees."""
  x = np.zeros((1, 1, 2, 2, 2), np.float32)
  x[0, 0, 1, 0, 1] = 1  # h 1, w 0, d 1 -> 1 + 2 * (0 + 2 * 1) = 5 (row-major: 4 + 0 + 1 = 5)
  x[0, 0, 1, 1, 0] = 0.5
  model = _node_model("MaxPool", 22, dict(kernel_shape=[2, 2, 2], storage_order=1),
                      [1, 1, 2, 2, 2], outputs=2)
  got = Backend.run_model(model, [x])[1]
  np.testing.assert_array_equal(got.ravel(), [5])
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  np.testing.assert_array_equal(sess.run(None, {"x": x})[1], got)
  x = np.zeros((1, 1, 2, 2, 2), np.float32)
  x[0, 0, 0, 1, 1] = 1  # h 0, w 1, d 1 -> 0 + 2 * (1 + 2 * 1) = 6; row-major 0 + 2 + 1 = 3
  np.testing.assert_array_equal(Backend.run_model(model, [x])[1].ravel(), [6])
  np.testing.assert_array_equal(sess.run(None, {"x": x})[1].ravel(), [6])


def test_deviation_max_unpool_output_shape():
  """output_shape larger than the default: jaxops (with onnx.reference and ONNX's node case)
  reads the indices in the default shape and appends zeros; onnxruntime reads them in the given
  shape. x 1x1x1x1 at index 3 of the default 2x2 (k 2 s 2), output_shape 1x1x3x3."""
  node = helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2],
                          strides=[2, 2])
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 1]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 1, 1]),
                    helper.make_tensor_value_info("s", TensorProto.INT64, [4])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 10
  feeds = {"x": np.ones((1, 1, 1, 1), np.float32), "i": np.array([[[[3]]]], np.int64),
           "s": np.array([1, 1, 3, 3], np.int64)}
  want = np.zeros((1, 1, 3, 3), np.float32)
  want[0, 0, 1, 1] = 1  # default (1, 1), then zeros appended
  np.testing.assert_array_equal(Backend.run_model(model, list(feeds.values()))[0], want)
  np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, feeds)[0], want)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  assert sess.run(None, feeds)[0][0, 0, 1, 0] == 1  # flat 3 of 3x3


def test_deviation_lp_pool_reference_ceil_mode():
  """A ceil_mode window that reaches past the padded input is the Lp norm of what it covers;
  onnx.reference averages the covered |x| ** p and scales by the whole kernel size."""
  model = _node_model("LpPool", 22, dict(kernel_shape=[2], strides=[2], ceil_mode=1, p=1),
                      [1, 1, 3])
  x = row(3, 4, 5, dtype=np.float32)
  # ceil((3 - 2) / 2) + 1 = 2 windows: (3, 4) -> 7 and (5) -> 5; the reference: 2 * 5 = 10
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0], row(7, 5, dtype=np.float32))
  np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, {"x": x})[0],
                                row(7, 10, dtype=np.float32))


def test_deviation_global_max_pool_reference_axes():
  """GlobalMaxPool reduces every axis after the first two; onnx.reference reduces axes
  (nd, nd + 1), right only for 4-D inputs."""
  node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1])]),
      opset_imports=[helper.make_opsetid("", 22)])
  x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0], [[[2], [5]]])
  assert ReferenceEvaluator(model).run(None, {"x": x})[0].shape != (1, 2, 1)


def test_deviation_global_max_pool_nan():
  """A plane holding NaN has the maximum NaN, as onnx.reference (np.max) and PyTorch's amax
  give; onnxruntime's GlobalMaxPool drops NaN. The spec text says only "max pooling across the
  values in the same channel". The gradient goes to the plane's first NaN."""
  x = np.array([[[[1, np.nan], [3, 2]], [[4, 0], [-1, 2]]]], np.float32)
  model = helper.make_model(helper.make_graph(
      [helper.make_node("GlobalMaxPool", ["x"], ["y"])], "g",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 10
  got = Backend.run_model(model, [x])[0]
  np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
  np.testing.assert_array_equal(got.reshape(-1), [np.nan, 4])
  ort_y = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  np.testing.assert_array_equal(ort_y.reshape(-1), [3, 4])  # NaN dropped
  np.testing.assert_array_equal(
      torch.amax(torch.tensor(x), dim=(2, 3)).numpy().reshape(-1), [np.nan, 4])
  g = jax.grad(lambda v: jnp.sum(jaxops.global_max_pool(v)))(x)
  np.testing.assert_array_equal(np.asarray(g).reshape(2, 4), [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("op, extra", [("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
                                       ("AveragePool", {"count_include_pad": 1}),
                                       ("LpPool", {"p": 2})])
@pytest.mark.parametrize("shape, attrs", [
    ([1, 2, 3], dict(kernel_shape=[3], strides=[3], dilations=[2])),    # one window: 0 and 2
    ([2, 1, 1, 7], dict(kernel_shape=[2, 2], strides=[2, 3])),           # kernel 2 on one row
    ([1, 2, 2, 4], dict(kernel_shape=[2, 3], strides=[2, 3], dilations=[1, 2])),
])
def test_ceil_mode_window_longer_than_the_padded_input(op, extra, shape, attrs):
  """With ceil_mode the spec's output length keeps one window longer than the padded input;
  onnx.reference and onnxruntime compute it over the elements it covers, and so does jaxops
  (it raised before; found by a random sweep against torch). onnx.reference is an oracle for
  MaxPool only here: it splits an extension of 2 or more over both ends for AveragePool
  (docs/DEVIATIONS.md, AveragePool 1) and scales LpPool's window by the whole kernel (LpPool
  1)."""
  attrs = dict(attrs, ceil_mode=1, **extra)
  if op == "AveragePool" and "dilations" in attrs:  # the same span, undilated
    attrs["kernel_shape"] = [d * (k - 1) + 1 for k, d in zip(attrs["kernel_shape"],
                                                             attrs.pop("dilations"))]
  model = _node_model(op, 22, attrs, shape)
  x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
  got = Backend.run_model(model, [x])[0]
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  want = sess.run(None, {"x": x})[0]
  assert want.size and got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  if op == "MaxPool":
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-6,
                               atol=1e-7)


def test_long_axes_with_large_kernels_match_torch():
  # The per-window plans are O(windows) on the host: average_pool's divisors and max_pool's
  # runs once built (windows x kernel) tap tables (1e6 x 1000: 8 GB and 25 s).
  rng = np.random.default_rng(11)
  x = rng.standard_normal((1, 2, 200_000)).astype(np.float32)
  xt = torch.tensor(x)
  for k, s, p, ceil in ((1000, 1, 0, False), (999, 7, 400, True), (3, 1, 1, False)):
    want = torch.nn.functional.avg_pool1d(xt, k, s, p, ceil_mode=ceil, count_include_pad=False)
    got = jaxops.average_pool(x, (k,), strides=(s,), pads=(p, p), ceil_mode=ceil)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=2e-5, atol=2e-6)
    want = torch.nn.functional.avg_pool1d(xt, k, s, p, ceil_mode=ceil, count_include_pad=True)
    got = jaxops.average_pool(x, (k,), strides=(s,), pads=(p, p), ceil_mode=ceil,
                              count_include_pad=True)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=2e-5, atol=2e-6)
  for k, s, p, d in ((3, 1, 1, 1), (5, 2, 2, 1000), (2, 1, 0, 50_000)):
    want, wi = torch.nn.functional.max_pool1d(xt, k, s, p, dilation=d, return_indices=True)
    got, gi = jaxops.max_pool(x, (k,), strides=(s,), pads=(p, p), dilations=(d,),
                              return_indices=True)
    np.testing.assert_array_equal(np.asarray(got), want.numpy())
    plane = (np.arange(2) * x.shape[-1])[None, :, None]  # torch's indices are per plane
    np.testing.assert_array_equal(np.asarray(gi), wi.numpy() + plane)


def _ort_max_pool(x, **attrs):
  node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
       helper.make_tensor_value_info("i", TensorProto.INT64, None)]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 10
  return ort.InferenceSession(model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("storage_order", [0, 1])
def test_windows_of_many_taps_match_onnxruntime(storage_order):
  # Past _UNROLLED_TAPS taps a window is pooled one axis at a time (an unrolled scan of 64x64
  # taps did not compile in 100 s; a reduce_window over (value, position) pairs, kept for axes
  # of more than _UNROLLED_TAPS taps, ran in seconds): the NaN rule (a NaN stays only as the
  # window's first element inside the input), ties to the first, padding never selected.
  rng = np.random.default_rng(21)
  x = rng.integers(-3, 4, size=(2, 3, 40, 37)).astype(np.float32)
  x[rng.random(x.shape) < 0.2] = np.nan
  x[0, 0, :6, :6] = np.nan  # windows whose first element inside the input is NaN
  x[1, 2] = -np.inf
  for attrs in (dict(kernel_shape=[20, 20], strides=[10, 9], pads=[4, 5, 3, 2]),
                dict(kernel_shape=[9, 33], strides=[5, 1], dilations=[2, 1], ceil_mode=1),
                dict(kernel_shape=[40, 37])):
    want_y, want_i = _ort_max_pool(x, storage_order=storage_order, **attrs)
    y, i = jaxops.max_pool(x, attrs["kernel_shape"], strides=attrs.get("strides"),
                           pads=attrs.get("pads"), dilations=attrs.get("dilations"),
                           ceil_mode=bool(attrs.get("ceil_mode", 0)),
                           storage_order=storage_order, return_indices=True)
    np.testing.assert_array_equal(np.asarray(y), want_y)
    np.testing.assert_array_equal(np.asarray(i), want_i)
    np.testing.assert_array_equal(np.asarray(jaxops.max_pool(
        x, attrs["kernel_shape"], strides=attrs.get("strides"), pads=attrs.get("pads"),
        dilations=attrs.get("dilations"), ceil_mode=bool(attrs.get("ceil_mode", 0)))), want_y)


def test_3d_windows_of_many_taps_match_onnxruntime():
  # 7 x 7 x 7 = 343 taps: one pooled axis at a time (_argmax_by_axis), with NaN, ties, -inf,
  # padding and dilation, against onnxruntime's values and indices; and no slower than a small
  # window's program would suggest (the reduce_window it replaced took seconds on such inputs)
  rng = np.random.default_rng(24)
  x = rng.integers(-2, 3, size=(1, 2, 11, 12, 10)).astype(np.float32)
  x[rng.random(x.shape) < 0.1] = np.nan
  x[0, 1, :3, :3, :3] = np.nan
  for attrs in (dict(kernel_shape=[7, 7, 7], strides=[2, 3, 2], pads=[3, 2, 1, 3, 3, 2]),
                dict(kernel_shape=[7, 3, 17], strides=[1, 2, 1], dilations=[1, 2, 1],
                     pads=[0, 1, 4, 2, 0, 4], ceil_mode=1)):
    want_y, want_i = _ort_max_pool(x, **attrs)
    y, i = jaxops.max_pool(x, attrs["kernel_shape"], strides=attrs["strides"],
                           pads=attrs["pads"], dilations=attrs.get("dilations"),
                           ceil_mode=bool(attrs.get("ceil_mode", 0)), return_indices=True)
    np.testing.assert_array_equal(np.asarray(y), want_y)
    np.testing.assert_array_equal(np.asarray(i), want_i)


def _slices(fn, *args):
  return jax.jit(fn).lower(*args).as_text().count("stablehlo.slice")


def test_padded_stride_one_windows_compile_small_and_match_onnxruntime():
  # Padding multiplies the slices of one unrolled pass: each stride-1 axis padded by p has
  # 2p + 1 runs of windows, so 5x5x5 windows padded by 2 read 6859 slices (a program of 34460
  # lines, 121 s to compile with indices) and 13x13 windows padded by 6 read 16129 (51 s), with
  # taps (125, 169) under _UNROLLED_TAPS. Past _UNROLLED_READS they are pooled one axis at a
  # time. Values, indices (both storage orders) and values alone against onnxruntime, with NaN,
  # ties and -inf; and the programs' slices counted (no timing).
  rng = np.random.default_rng(25)
  cases = (((1, 2, 12, 11, 10), dict(kernel_shape=[5, 5, 5], strides=[1, 1, 1], pads=[2] * 6)),
           ((2, 2, 30, 27), dict(kernel_shape=[13, 13], strides=[1, 1], pads=[6] * 4)),
           ((1, 3, 20, 21), dict(kernel_shape=[9, 7], strides=[1, 1], pads=[4, 3, 4, 3])))
  for shape, attrs in cases:
    x = rng.integers(-2, 3, size=shape).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    x.reshape(-1)[:7] = -np.inf
    kw = dict(strides=attrs["strides"], pads=attrs["pads"])
    for order in (0, 1):
      want_y, want_i = _ort_max_pool(x, storage_order=order, **attrs)
      y, i = jaxops.max_pool(x, attrs["kernel_shape"], storage_order=order,
                             return_indices=True, **kw)
      np.testing.assert_array_equal(np.asarray(y), want_y)
      np.testing.assert_array_equal(np.asarray(i), want_i)
    np.testing.assert_array_equal(np.asarray(jaxops.max_pool(x, attrs["kernel_shape"], **kw)),
                                  want_y)
    k = attrs["kernel_shape"]
    with_indices = _slices(lambda a: jaxops.max_pool(a, k, return_indices=True, **kw), x)
    values = _slices(lambda a: jaxops.max_pool(a, k, **kw), x)
    grad = _slices(jax.grad(lambda a: jnp.sum(jaxops.max_pool(a, k, **kw))), x)
    assert max(with_indices, values, grad) < 1500, (shape, with_indices, values, grad)


def test_windows_of_many_taps_gradient_and_adaptive_max_match_torch():
  rng = np.random.default_rng(22)
  x = rng.standard_normal((2, 3, 40, 40))
  xt = torch.tensor(x, requires_grad=True)
  (torch.nn.functional.max_pool2d(xt, 20, 10, 5) ** 2).sum().backward()
  g = jax.grad(lambda v: jnp.sum(jaxops.max_pool(v, (20, 20), strides=(10, 10),
                                                 pads=(5, 5, 5, 5)) ** 2))(x)
  np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
  # jaxops.torch's adaptive max: windows longer than _AMAX_UNROLLED_TAPS along an axis are one
  # variadic reduce (torch's rule: the last NaN, else the first maximum)
  import jaxops.torch as F
  a = rng.integers(-2, 3, size=(2, 3, 300, 130)).astype(np.float64)
  a[0, 0][rng.random(a.shape[2:]) < 0.001] = np.nan  # other planes: ties among 2s
  for out in ((1, 1), (2, 1), (3, 2)):
    wy, wi = torch.nn.functional.adaptive_max_pool2d(torch.tensor(a), out, return_indices=True)
    y, i = F.adaptive_max_pool2d(a, out, return_indices=True)
    np.testing.assert_array_equal(np.asarray(y), wy.numpy())
    np.testing.assert_array_equal(np.asarray(i), wi.numpy())


def test_long_adaptive_max_windows_second_order_and_empty_batches():
  # The adaptive max of windows longer than _AMAX_UNROLLED_TAPS is a variadic reduce, which
  # JAX cannot differentiate: the custom rule takes its primal through itself, so a Hessian
  # works, equal to torch's. And max_pool's gradient on an empty batch (a -1 reshape there).
  import jaxops.torch as F
  x = np.random.default_rng(23).standard_normal((1, 2, 70))
  for out in (1, 3, 35):  # (35: windows of 2 that tile the axis, a select per tap)
    hess = jax.hessian(lambda z: jnp.sum(F.adaptive_max_pool1d(z, out) ** 3))(x)
    want = torch.autograd.functional.hessian(
        lambda z: (torch.nn.functional.adaptive_max_pool1d(z, out) ** 3).sum(), torch.tensor(x))
    np.testing.assert_allclose(np.asarray(hess), want.numpy(), rtol=1e-12, atol=1e-12)
  for k in ((3, 3), (20, 20)):
    g = jax.grad(lambda v: jnp.sum(jaxops.max_pool(v, k, strides=(2, 2)) ** 2))(
        jnp.zeros((0, 2, 20, 20)))
    assert g.shape == (0, 2, 20, 20)


def test_results_are_not_weakly_typed():
  # a weakly typed input (a broadcast Python float) gives a strongly typed result, as the
  # even paths do: adding a float16 keeps the result's type
  import jaxops.torch as F
  w = jnp.broadcast_to(2.0, (1, 1, 6, 4))
  assert w.weak_type
  for y in (F.adaptive_avg_pool2d(w, (4, 3)), F.adaptive_avg_pool2d(w, (3, 2)),
            jaxops.resize(w, scales=(1, 1, 2, 2), mode="linear")):
    assert not y.weak_type and (y + jnp.float16(1)).dtype == w.dtype


def _unpool_node_model(version, s_rank):
  node = helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2],
                          strides=[2, 2])
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 2, 2]),
                    # symbolic lengths: onnx's shape inference would refuse fixed wrong ones
                    helper.make_tensor_value_info("s", TensorProto.INT64,
                                                  [f"d{k}" for k in range(s_rank)])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])]),
      opset_imports=[helper.make_opsetid("", version)])
  model.ir_version = 10
  return node, model


@pytest.mark.parametrize("shape", [[4, 4], [1, 1, 1, 4, 4], [[1, 1], [4, 4]], []])
@pytest.mark.parametrize("version", [9, 11, 22])
def test_onnx_max_unpool_output_shape_must_name_every_axis(shape, version):
  """The node's `output_shape` is the output's whole shape, a 1-D tensor of one length per axis
  of X: onnxruntime refuses the pooled axes alone, a longer or 2-D tensor and an empty one, and
  so does the front end (jaxops.max_unpool itself takes the pooled axes alone as a shorthand)."""
  x = np.array([[[[1, 2], [3, 4]]]], np.float32)
  i = np.array([[[[5, 7], [13, 15]]]], np.int64)
  s = np.array(shape, np.int64)
  node, model = _unpool_node_model(version, s.ndim)
  with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error types)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": x, "i": i, "s": s})
  with pytest.raises(ValueError, match=rf"MaxUnpool-{version}: input `output_shape` must be a "
                     r"1-D tensor of 4 elements .*; got a tensor of shape \("):
    Backend.run_node(node, [x, i, s], opset_version=version)
  # a model: the same error, or onnx's shape inference refusing a 2-D tensor first
  with pytest.raises(ValueError, match=r"MaxUnpool.*output_shape.*(1-D tensor|rank 1)"):
    Backend.run_model(model, [x, i, s])
  # the whole shape is accepted, and gives onnxruntime's result
  full = np.array([1, 1, 4, 4], np.int64)
  node, model = _unpool_node_model(version, 1)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  np.testing.assert_array_equal(Backend.run_node(node, [x, i, full], opset_version=version)[0],
                                sess.run(None, {"x": x, "i": i, "s": full})[0])


@pytest.mark.parametrize("op, version", [("LpPool", 22), ("GlobalLpPool", 2)])
def test_deviation_lp_pool_p_below_one_is_refused(op, version):
  """DEVIATIONS LpPool 7: p = 0 and p = -1 are refused (no Lp norm has them); onnxruntime (and
  onnx.reference, which has no GlobalLpPool) compute (sum |x| ** -1) ** -1 for p = -1."""
  attrs = dict(kernel_shape=[2], strides=[2]) if op == "LpPool" else {}
  x = row(1.0, 4.0, dtype=np.float32)
  for p in (0, -1):
    model = _node_model(op, version, dict(attrs, p=p), [1, 1, 2])
    with pytest.raises(ValueError, match=r"`p` must be a positive integer; got " + str(p)):
      Backend.run_model(model, [x])
  model = _node_model(op, version, dict(attrs, p=-1), [1, 1, 2])
  want = row(0.8, dtype=np.float32)  # 1 / (1 / 1 + 1 / 4)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6)
  if op == "LpPool":
    np.testing.assert_allclose(ReferenceEvaluator(model).run(None, {"x": x})[0], want,
                               rtol=1e-6)


# --- oracle departures found by a random fuzz (2026-12-07): docs/DEVIATIONS.md, AveragePool 9,
# --- MaxPool 8, LpPool 8 and 9 --------------------------------------------------------------


def _oracles(model, x):
  session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return ReferenceEvaluator(model).run(None, {"x": x}), session.run(None, {"x": x})


@pytest.mark.parametrize("op, version, attrs", [
    ("AveragePool", 7, dict(kernel_shape=[2], strides=[2])),
    ("AveragePool", 22, dict(kernel_shape=[2], strides=[2])),
    ("LpPool", 22, dict(kernel_shape=[2], strides=[2], p=2))])
def test_deviation_reference_drops_nan_from_average_and_lp_windows(op, version, attrs):
  """A window holding a NaN averages (or takes the norm) to NaN, as onnxruntime and torch give
  it; onnx.reference marks the padding with NaN and filters every NaN out of the window, so
  that [1, NaN] gives 1 (AveragePool) or sqrt(2)."""
  x = np.array([[[1.0, np.nan, 3.0, 5.0]]], np.float32)
  model = _node_model(op, version, attrs, [1, 1, 4])
  got = Backend.run_model(model, [x])[0].ravel()
  (ref,), (ours,) = _oracles(model, x)
  torch_fn = (torch.nn.functional.avg_pool1d(torch.tensor(x), 2, 2) if op == "AveragePool"
              else torch.nn.functional.lp_pool1d(torch.tensor(x), 2.0, 2, 2))
  for want in (ours.ravel(), torch_fn.numpy().ravel()):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  assert np.isnan(got[0]) and ref.ravel()[0] == (1.0 if op == "AveragePool" else np.float32(
      np.sqrt(2)))


@pytest.mark.parametrize("op, outputs", [("MaxPool", 1), ("MaxPool", 2), ("GlobalMaxPool", 1)])
def test_deviation_onnxruntime_float32_max_of_minus_infinities(op, outputs):
  """A window (or plane) of -inf only has the maximum -inf, as onnx.reference and torch give;
  onnxruntime's float32 MaxPool without the Indices output and its GlobalMaxPool give -FLT_MAX
  (with Indices, and in float64, -inf)."""
  x = np.array([[[-np.inf, -np.inf, 1.0, -np.inf]]], np.float32)
  attrs = dict(kernel_shape=[2], strides=[2]) if op == "MaxPool" else {}
  model = _node_model(op, 22, attrs, [1, 1, 4], outputs=outputs)
  got = Backend.run_model(model, [x])[0].ravel()
  (ref, *_), (ours, *_) = _oracles(model, x)
  want = [-np.inf, 1.0] if op == "MaxPool" else [1.0]
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(ref.ravel(), want)
  if op == "GlobalMaxPool":  # a plane of -inf only
    x = np.full((1, 1, 3), -np.inf, np.float32)
    model = _node_model(op, 22, {}, [1, 1, 3])
    (ref,), (ours,) = _oracles(model, x)
    np.testing.assert_array_equal(Backend.run_model(model, [x])[0].ravel(), [-np.inf])
    np.testing.assert_array_equal(ref.ravel(), [-np.inf])
  expected_ort = -np.inf if outputs == 2 else np.finfo(np.float32).min
  assert ours.ravel()[0] == expected_ort


def test_deviation_reference_lp_pool_low_precision():
  """LpPool in float16 sums |x| ** p in float32 and rounds once (as onnxruntime): [300, 400]
  with p = 2 is 500, where onnx.reference's float16 squares overflow to inf. LpPool-1's float
  p in float64: (0.5 ** 3 + 0.25 ** 3 + 8) ** (1 / 3) exactly, where the reference takes 1 / p
  in float32 (2e-8 off)."""
  x = np.array([[[300.0, 400.0]]], np.float16)
  model = _node_model("LpPool", 22, dict(kernel_shape=[2], p=2), [1, 1, 2],
                      elem=TensorProto.FLOAT16)
  got = Backend.run_model(model, [x])[0].ravel()
  with np.errstate(over="ignore"):
    (ref,), (ours,) = _oracles(model, x)
  np.testing.assert_array_equal(got, [500.0])
  np.testing.assert_array_equal(ours.ravel(), [500.0])
  assert np.isinf(ref.ravel()[0])
  x = np.array([[[0.5, 0.25, 2.0]]])
  model = _node_model("LpPool", 1, dict(kernel_shape=[3], p=3.0), [1, 1, 3],
                      elem=TensorProto.DOUBLE)
  exact = (0.5 ** 3 + 0.25 ** 3 + 8) ** (1 / 3)
  got = Backend.run_model(model, [x])[0].item()
  ref = ReferenceEvaluator(model).run(None, {"x": x})[0].item()
  assert abs(got - exact) <= 2e-16 * exact and abs(ref - exact) > 1e-9


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_deviation_pads_as_large_as_the_kernel_are_refused(op):
  """The spec lets pads take any value >= 0; a pad as large as the kernel makes windows of
  padding only (no maximum, no average over counted elements). jaxops refuses it with a
  ValueError naming `pads`, as onnxruntime refuses it."""
  x = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
  model = _node_model(op, 22, dict(kernel_shape=[2], pads=[2, 0]), [1, 1, 4])
  with pytest.raises(ValueError, match=r"`pads` must be smaller than the kernel"):
    Backend.run_model(model, [x])
  with pytest.raises(Exception, match=r"(?i)pad"):
    ort.InferenceSession(model.SerializeToString(),
                         providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_window_overhanging_the_padded_input_by_less_than_a_stride_gives_an_empty_axis(op):
  """The spec's length floor((n + pads - extent) / stride) + 1 is 0 where the window overhangs
  the padded input by less than the stride: an empty axis, as onnxruntime (stride 1),
  onnx.reference (AveragePool, LpPool, strided MaxPool) and ONNX's shape inference give it
  (jaxops raised before; found by a fuzz). A negative length stays an error. onnxruntime
  truncates the division toward zero, so with stride 2 an overhang of 1 gives it one window
  (docs/DEVIATIONS.md, AveragePool 12)."""
  x = np.random.default_rng(5).standard_normal((1, 2, 4, 5)).astype(np.float32)
  fn = {"MaxPool": jaxops.max_pool, "AveragePool": jaxops.average_pool,
        "LpPool": jaxops.lp_pool}[op]
  model = _node_model(op, 22, dict(kernel_shape=[5, 2]), x.shape)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  want = sess.run(None, {"x": x})[0]
  assert want.shape == (1, 2, 0, 4)
  got = Backend.run_model(model, [x])[0]
  assert got.shape == want.shape and got.dtype == want.dtype
  assert fn(x, (5, 2)).shape == want.shape
  assert jax.jit(lambda v: fn(v, (5, 2)))(x).shape == want.shape
  grad = jax.grad(lambda v: jnp.sum(fn(v, (5, 2))))(x)
  assert grad.shape == x.shape and not np.any(np.asarray(grad))
  if op == "MaxPool":
    y, i = jaxops.max_pool(x, (5, 2), return_indices=True)
    assert y.shape == i.shape == want.shape and jnp.issubdtype(i.dtype, jnp.integer)
  # stride 2, overhang 1: the spec and onnx.reference 0 windows, onnxruntime 1
  strided = _node_model(op, 22, dict(kernel_shape=[5, 2], strides=[2, 2]), x.shape)
  ref = ReferenceEvaluator(strided).run(None, {"x": x})[0]
  theirs = ort.InferenceSession(strided.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  assert ref.shape == Backend.run_model(strided, [x])[0].shape == (1, 2, 0, 2)
  assert theirs.shape == (1, 2, 1, 2)
  with pytest.raises(ValueError, match=r"spans 6 elements .* output length is -1, negative"):
    fn(x, (6, 2))
