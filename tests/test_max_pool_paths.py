"""max_pool's shape-chosen code paths, each hit by a shape of its class and checked against
independent oracles (onnx.reference, torch autograd, torch's indices):

* the two-pass maximum (``_max_values``): no Indices, no differentiation, the last pooled axis
  strided and the other pooled axes with many taps; its NaN fallback; integer inputs;
* the maximum one axis at a time (``_max_values``): stride-1 windows of many taps; the same;
* the backward pass as a scatter-add (the per-plane gather tangent ``_gather_taps``): on the
  CPU, wherever windows overlap; with ties, under vmap, in forward mode.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops
from jaxops import _max_pool as _max_pool_module

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def _model(x, kernel, outputs, **kw):
  attrs = {"kernel_shape": list(kernel)}
  for name in ("strides", "pads", "dilations"):
    if kw.get(name) is not None:
      attrs[name] = list(kw[name])
  if kw.get("auto_pad"):
    attrs["auto_pad"] = kw["auto_pad"]
  if kw.get("ceil_mode"):
    attrs["ceil_mode"] = 1
  node = helper.make_node("MaxPool", ["x"], outputs, **attrs)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", _ELEM[x.dtype], list(x.shape))],
      [helper.make_tensor_value_info("y", _ELEM[x.dtype], None)] +
      [helper.make_tensor_value_info("i", TensorProto.INT64, None)] * (len(outputs) - 1))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _reference(x, kernel, **kw):
  """onnx.reference MaxPool-22 (the Y output alone)."""
  return ReferenceEvaluator(_model(x, kernel, ["y"], **kw)).run(None, {"x": x})[0]


def _onnxruntime(x, kernel, **kw):
  """onnxruntime's MaxPool-12 with Indices (whose NaN rule is onnx.reference's), the Y output."""
  model = _model(x, kernel, ["y", "i"], **kw)
  model.opset_import[0].version = 12
  return ort.InferenceSession(model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _plan(shape, kernel, **kw):
  return _max_pool_module._plan(tuple(shape), kernel, kw.get("strides"), kw.get("pads"),
                                kw.get("dilations"), kw.get("auto_pad", "NOTSET"),
                                kw.get("ceil_mode", False))


# (input shape, kernel, options): all take the two-pass path.
TWO_PASS = [
    ((2, 3, 9, 8, 11), (3, 3, 3), dict(strides=(2, 2, 2), pads=(1, 1, 1, 1, 1, 1))),
    ((1, 2, 10, 7, 12), (3, 2, 3), dict(strides=(2, 1, 2), pads=(1, 0, 1, 1, 1, 2),
                                        ceil_mode=True)),
    ((1, 2, 9, 9, 13), (3, 3, 3), dict(strides=(1, 2, 3), dilations=(2, 1, 2))),
    ((2, 1, 8, 9, 10), (2, 3, 3), dict(strides=(2, 2, 2), auto_pad="SAME_UPPER")),
    # onnx.reference splits SAME_LOWER's padding the other way (docs/DEVIATIONS.md): the spec's
    # split is in _SAME_LOWER_PADS
    ((2, 1, 8, 9, 10), (3, 3, 2), dict(strides=(3, 2, 2), auto_pad="SAME_LOWER")),
    ((2, 3, 20, 17), (7, 3), dict(strides=(2, 2), pads=(3, 1, 3, 1))),
    ((1, 2, 19, 15), (6, 3), dict(strides=(1, 2), pads=(2, 1, 3, 1), ceil_mode=True)),
]


# (input shape, kernel, options): all pooled one axis at a time.
PER_AXIS = [
    ((2, 3, 9, 8, 11), (3, 3, 3), dict(pads=(1, 1, 1, 1, 1, 1))),
    ((1, 2, 7, 9, 6), (3, 2, 3), dict(pads=(1, 0, 2, 2, 1, 1), ceil_mode=True, dilations=(2, 1, 1))),
    ((2, 3, 13, 12), (5, 5), dict(pads=(2, 2, 2, 2))),
    ((1, 2, 11, 10), (4, 4), dict(auto_pad="SAME_UPPER")),
    ((1, 2, 4, 10, 11), (1, 5, 4), dict(pads=(0, 1, 3, 0, 3, 0))),
    ((1, 2, 6, 5, 7), (3, 3, 3), dict(auto_pad="VALID", dilations=(1, 2, 2))),
]


# SAME_LOWER above: out = ceil(n / s) = (3, 5, 5); total padding (out - 1) * s + k - n = (1, 2, 0),
# the odd element first: begins (1, 1, 0), ends (0, 1, 0).
_SAME_LOWER_PADS = dict(strides=(3, 2, 2), pads=(1, 1, 0, 0, 1, 0))


def _oracle(x, kernel, kw):
  if kw.get("auto_pad") == "SAME_LOWER":
    return _reference(x, kernel, **_SAME_LOWER_PADS)
  if len(kernel) == 3 and kw.get("pads") and not kw.get("strides"):
    # onnx.reference 1.23 indexes past the input on 3-D stride-1 windows with pads
    return _onnxruntime(x, kernel, **kw)
  return _reference(x, kernel, **kw)


def test_the_two_pass_shapes_take_the_two_pass_path():
  for shape, kernel, kw in TWO_PASS:
    assert _max_pool_module._two_pass(_plan(shape, kernel, **kw)), (shape, kernel, kw)
  # and the single-pass class: a last axis with stride 1, or few taps on the other axes
  assert not _max_pool_module._two_pass(_plan((1, 1, 9, 9, 9), (3, 3, 3), strides=(2, 2, 1)))
  assert not _max_pool_module._two_pass(_plan((1, 1, 9, 9), (3, 3), strides=(2, 2)))


def test_the_per_axis_shapes_take_the_per_axis_path():
  for shape, kernel, kw in PER_AXIS:
    plan = _plan(shape, kernel, **kw)
    assert _max_pool_module._passes(plan) == tuple(
        (i,) for i, k in enumerate(kernel) if k > 1), (shape, kernel, kw)
  # and not: a stride, too few taps, or a large plane for a 5x5 window
  for shape, kernel, kw in [((1, 1, 9, 9, 9), (3, 3, 3), dict(strides=(1, 1, 2))),
                            ((1, 1, 9, 9), (3, 3), {}), ((1, 1, 9, 9, 9), (2, 2, 2), {}),
                            ((1, 1, 9, 9, 9), (1, 1, 5), {}), ((1, 1, 80, 80), (5, 5), {})]:
    assert not _max_pool_module._per_axis(_plan(shape, kernel, **kw)), (shape, kernel, kw)


class TestTwoPass(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_values_match_the_reference(self):
    rng = np.random.default_rng(130)
    for n, (shape, kernel, kw) in enumerate(TWO_PASS + PER_AXIS):
      x = rng.standard_normal(shape).astype(np.float32)
      if n in (0, len(TWO_PASS)):  # infinities of both signs, and a window of -inf only
        x.flat[rng.choice(x.size, 40, replace=False)] = np.inf
        x.flat[rng.choice(x.size, 40, replace=False)] = -np.inf
        x[0, 0, :3, :3, :3] = -np.inf
      fn = self.variant(lambda v, k=kernel, kw=kw: jaxops.max_pool(v, k, **kw))
      np.testing.assert_array_equal(np.asarray(fn(x)), _oracle(x, kernel, kw),
                                    err_msg=f"{shape} {kernel} {kw}")


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint8])
@pytest.mark.parametrize("case", [TWO_PASS[0], PER_AXIS[1], PER_AXIS[5]])
def test_two_pass_dtypes_match_the_reference(dtype, case):
  rng = np.random.default_rng(131)
  shape, kernel, kw = case
  if np.issubdtype(dtype, np.integer):  # the whole range, with many ties
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
  else:
    x = rng.standard_normal(shape).astype(dtype)
  y = jaxops.max_pool(x, kernel, **kw)
  assert y.dtype == dtype
  np.testing.assert_array_equal(np.asarray(y), _reference(x, kernel, **kw))


def test_two_pass_nan_rule_by_hand():
  # One 3x3x3 window over the whole input (kernel 3, stride 2, no pads; output 1x1x1).
  # The rule: the first element starts, a later one wins only if strictly greater, so a NaN
  # counts only as the first element.
  kernel, kw = (3, 3, 3), dict(strides=(2, 2, 2))
  assert _max_pool_module._two_pass(_plan((1, 1, 3, 3, 3), kernel, **kw))
  x = np.zeros((1, 1, 3, 3, 3), np.float32)
  x[0, 0, 0, 0, 1] = np.nan  # a later NaN, skipped: 0, then 5 at the last tap wins
  x[0, 0, 2, 2, 2] = 5.0
  np.testing.assert_array_equal(np.asarray(jaxops.max_pool(x, kernel, **kw)).ravel(), [5.0])
  x[0, 0, 0, 0, 0] = np.nan  # now the first element: it stays
  assert np.isnan(np.asarray(jaxops.max_pool(x, kernel, **kw))).all()


def test_per_axis_nan_rule_by_hand():
  # One 3x3x3 window over the whole input (kernel 3, stride 1, no pads; output 1x1x1)
  kernel = (3, 3, 3)
  assert len(_max_pool_module._passes(_plan((1, 1, 3, 3, 3), kernel))) == 3
  x = np.zeros((1, 1, 3, 3, 3), np.float32)
  x[0, 0, 1, 0, 0] = np.nan  # a later NaN, skipped: 0, then 5 wins
  x[0, 0, 0, 2, 1] = 5.0
  np.testing.assert_array_equal(np.asarray(jaxops.max_pool(x, kernel)).ravel(), [5.0])
  x[0, 0, 0, 0, 0] = np.nan  # now the first element: it stays
  assert np.isnan(np.asarray(jaxops.max_pool(x, kernel))).all()


@pytest.mark.slow
def test_two_pass_nan_rule_matches_the_reference():
  rng = np.random.default_rng(132)
  # onnx.reference's stride-1 windows drop NaN (docs/DEVIATIONS.md): there the oracle is
  # onnxruntime's MaxPool with Indices, whose rule is the reference's strided one
  cases = ([(c, _reference) for c in TWO_PASS[:3] + TWO_PASS[5:6]] +
           [(c, _onnxruntime) for c in PER_AXIS[:4]])
  for (shape, kernel, kw), oracle in cases:
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.04] = np.nan
    want = oracle(x, kernel, **kw)
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(np.asarray(jaxops.max_pool(x, kernel, **kw)), want,
                                  err_msg=f"{shape} {kernel} {kw}")
    # under vmap the fallback's condition is per element of the batch
    stacked = np.stack([x, np.nan_to_num(x, nan=0.5)])
    got = jax.vmap(lambda v, k=kernel, kw=kw: jaxops.max_pool(v, k, **kw))(stacked)
    for g, v in zip(np.asarray(got), stacked):
      np.testing.assert_array_equal(g, oracle(v, kernel, **kw))


# --- the backward pass as a scatter-add -----------------------------------------------------------

# (input shape, kernel, stride, padding, dilation, ceil_mode): overlapping windows.
OVERLAPPING = [
    ((2, 3, 17), (3,), (2,), (1,), (1,), False),
    ((2, 3, 13, 11), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 12, 9), (3, 2), (1, 1), (1, 0), (1, 2), True),
    ((2, 2, 10, 11), (3, 3), (2, 3), (1, 0), (2, 1), True),
    ((1, 2, 7, 8, 9), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), False),
]


def _torch_grad(x, w, kernel, stride, pad, dil, ceil):
  fn = getattr(torch.nn.functional, f"max_pool{len(kernel)}d")
  xt = torch.from_numpy(x).requires_grad_()
  (fn(xt, kernel, stride, pad, dil, ceil_mode=ceil) * torch.from_numpy(w)).sum().backward()
  return xt.grad.numpy()


def _pool(kernel, stride, pad, dil, ceil):
  return lambda v: jaxops.max_pool(v, kernel, strides=stride, pads=pad + pad, dilations=dil,
                                   ceil_mode=ceil)


def test_overlapping_windows_take_the_scatter_backward():
  shape, kernel, stride, pad, dil, ceil = OVERLAPPING[1]
  f = _pool(kernel, stride, pad, dil, ceil)
  hlo = jax.jit(jax.grad(lambda v: jnp.sum(f(v)))).lower(
      jnp.zeros(shape, jnp.float32)).compile().as_text()
  assert "scatter(" in hlo and "select-and-scatter" not in hlo


@pytest.mark.slow
def test_scatter_backward_with_ties_matches_torch():
  rng = np.random.default_rng(133)
  for shape, kernel, stride, pad, dil, ceil in OVERLAPPING:
    # few distinct values: many ties, and the first maximum in window order gets the gradient
    x = rng.integers(0, 3, shape).astype(np.float64)
    f = _pool(kernel, stride, pad, dil, ceil)
    w = np.cos(np.arange(math.prod(f(x).shape))).reshape(f(x).shape)
    g = jax.jit(jax.grad(lambda v, f=f, w=w: jnp.sum(f(v) * w)))(x)
    np.testing.assert_array_equal(np.asarray(g), _torch_grad(x, w, kernel, stride, pad, dil,
                                                             ceil),
                                  err_msg=f"{shape} {kernel} {stride} {pad} {dil} {ceil}")


def test_scatter_backward_under_vmap_matches_torch():
  rng = np.random.default_rng(134)
  shape, kernel, stride, pad, dil, ceil = OVERLAPPING[1]
  f = _pool(kernel, stride, pad, dil, ceil)
  xs = rng.integers(0, 4, (3,) + shape).astype(np.float32)
  w = rng.standard_normal(f(xs[0]).shape).astype(np.float32)
  gs = jax.vmap(jax.grad(lambda v: jnp.sum(f(v) * w)))(xs)
  for g, x in zip(np.asarray(gs), xs):
    np.testing.assert_array_equal(g, _torch_grad(x, w, kernel, stride, pad, dil, ceil))


def test_forward_mode_reads_the_tangent_at_torchs_indices():
  rng = np.random.default_rng(135)
  for shape, kernel, stride, pad, dil, ceil in OVERLAPPING[1:3]:
    x = rng.integers(0, 3, shape).astype(np.float64)
    t = rng.standard_normal(shape)
    _, ty = jax.jvp(_pool(kernel, stride, pad, dil, ceil), (x,), (t,))
    fn = getattr(torch.nn.functional, f"max_pool{len(kernel)}d")
    _, idx = fn(torch.from_numpy(x), kernel, stride, pad, dil, ceil_mode=ceil,
                return_indices=True)
    # torch's indices are flat within each (n, c) plane
    planes = t.reshape(shape[:2] + (-1,))
    want = np.take_along_axis(planes, idx.numpy().reshape(shape[:2] + (-1,)), axis=-1)
    np.testing.assert_array_equal(np.asarray(ty), want.reshape(idx.shape))
