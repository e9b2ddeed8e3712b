"""Pins the README's feature-matrix claims about the installed comparators (onnxruntime, jax.image).

Each claim in the README's "measured" columns has a check here, so a version bump that changes
one fails this file instead of leaving the README wrong. Oracles: onnxruntime itself (what it
runs or rejects) and onnx.reference (what jax.image's output equals).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxops

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((1, 1, 9, 7)).astype(np.float32)
X5 = RNG.standard_normal((1, 1, 4, 6, 6)).astype(np.float32)


def _ort(nodes, inputs: dict[str, np.ndarray], out_type: int, opset: int) -> np.ndarray:
  """Runs a graph in onnxruntime (CPU); raises whatever onnxruntime raises."""
  ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
         for n, a in inputs.items()]
  outs = [helper.make_tensor_value_info(nodes[-1].output[0], out_type, None)]
  model = helper.make_model(helper.make_graph(nodes, "g", ins, outs),
                            opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 11
  options = ort.SessionOptions()
  options.log_severity_level = 4          # the failures below are expected; keep stderr quiet
  sess = ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"])
  return sess.run(None, inputs)[0]


def _resize_node(**attrs):
  return helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], **attrs)


ROI4 = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8], np.float32)
SIZES4 = np.array([1, 1, 5, 11], np.int64)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ctm", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                 "align_corners", "asymmetric", "tf_crop_and_resize"])
def test_ort_resize19_runs_every_mode_and_coordinate_mode(mode, ctm):
  y = _ort([_resize_node(mode=mode, coordinate_transformation_mode=ctm)],
           {"x": X4, "roi": ROI4, "sizes": SIZES4}, TensorProto.FLOAT, 19)
  assert y.shape == (1, 1, 5, 11)


def test_ort_rejects_antialias_with_nearest_as_jaxops_does():
  with pytest.raises(Exception, match="anti-aliasing"):
    _ort([_resize_node(mode="nearest", antialias=1)], {"x": X4, "roi": ROI4, "sizes": SIZES4},
         TensorProto.FLOAT, 19)
  with pytest.raises(ValueError, match="antialias"):
    jaxops.resize(X4, sizes=(5, 11), axes=(2, 3), mode="nearest", antialias=True)


def test_ort_cubic_is_2d_or_4d_only_jaxops_any_rank():
  sizes = np.array([1, 1, 8, 12, 12], np.int64)
  roi = np.zeros(0, np.float32)
  with pytest.raises(Exception, match="Cubic"):
    _ort([_resize_node(mode="cubic")], {"x": X5, "roi": roi, "sizes": sizes},
         TensorProto.FLOAT, 19)
  assert jaxops.resize(X5, sizes=(8, 12, 12), axes=(2, 3, 4), mode="cubic").shape == (1, 1, 8,
                                                                                         12, 12)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_ort_does_not_resize_the_batch_axis_jaxops_any_axis(mode):
  sizes = np.array([2, 1, 9, 7], np.int64)
  with pytest.raises(Exception, match=mode.capitalize()):
    _ort([_resize_node(mode=mode)], {"x": X4, "roi": np.zeros(0, np.float32), "sizes": sizes},
         TensorProto.FLOAT, 19)
  assert jaxops.resize(X4, sizes=(2,), axes=(0,), mode=mode).shape == (2, 1, 9, 7)


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "nearest_mode": m} for m in ("round_prefer_floor", "round_prefer_ceil",
                                                     "floor", "ceil")] + [
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    {"mode": "linear", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]},
    {"mode": "linear", "keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]}],
    ids=str)
def test_ort_runs_the_other_resize_attributes(attrs):
  sizes = SIZES4[2:] if "axes" in attrs else SIZES4
  y = _ort([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)],
           {"x": X4, "sizes": sizes}, TensorProto.FLOAT, 19)
  assert y.ndim == 4


@pytest.mark.parametrize("attrs", [{}, {"ceil_mode": 1}, {"count_include_pad": 1, "pads": [1] * 4},
                                   {"dilations": [2, 2]}, {"auto_pad": "SAME_LOWER"}], ids=str)
def test_ort_runs_every_average_pool_attribute(attrs):
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          **attrs)
  assert _ort([node], {"x": X4}, TensorProto.FLOAT, 22).ndim == 4
  node3 = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3, 3])
  assert _ort([node3], {"x": X5}, TensorProto.FLOAT, 22).shape == (1, 1, 2, 4, 4)


def _cast_roundtrip(to: int, opset: int) -> np.ndarray:
  nodes = [helper.make_node("Cast", ["x"], ["t"], to=to),
           helper.make_node("Cast", ["t"], ["y"], to=TensorProto.FLOAT)]
  return _ort(nodes, {"x": np.array([1.5, 500.0, 3.3], np.float32)}, TensorProto.FLOAT, opset)


@pytest.mark.parametrize("to", ["FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
                                "BFLOAT16"])
def test_ort_casts_float8_and_bfloat16(to):
  assert _cast_roundtrip(getattr(TensorProto, to), 19).shape == (3,)


def test_ort_cast_coverage_of_newer_types():
  # int4/uint4 from Cast-21, float8e8m0 from Cast-24, int2/uint2 from Cast-25 ...
  assert _cast_roundtrip(TensorProto.INT4, 21).shape == (3,)
  assert _cast_roundtrip(TensorProto.FLOAT8E8M0, 24).shape == (3,)
  assert _cast_roundtrip(TensorProto.INT2, 25).shape == (3,)
  # ... but no float4e2m1 kernel (NOT_IMPLEMENTED at Cast-23/24/25), which jaxops has.
  with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
    _cast_roundtrip(TensorProto.FLOAT4E2M1, 23)
  y = jaxops.cast(np.array([1.3, 100.0], np.float32), "FLOAT4E2M1")
  assert np.asarray(y.astype(np.float32)).tolist() == [1.5, 6.0]   # spec: nearest even, sat 6


def _onnx_ref(mode: str, sizes, **attrs) -> np.ndarray:
  node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, **attrs)
  return ReferenceEvaluator(node).run(None, {"x": X4, "sizes": np.array(sizes, np.int64)})[0]


@pytest.mark.parametrize("sizes", [(1, 1, 17, 13), (1, 1, 4, 3)])
def test_jax_image_equals_onnx_half_pixel_subset(sizes):
  # jax.image.resize covers ONNX Resize's half_pixel mode with fixed choices:
  # nearest = round_prefer_floor; linear (antialias=False); cubic = Keys a=-0.5 with
  # exclude_outside=1 (also with antialias when downsampling).
  def jimg(method, antialias=False):
    return np.asarray(jax.image.resize(X4, sizes, method, antialias=antialias))

  np.testing.assert_array_equal(jimg("nearest"), _onnx_ref("nearest", sizes))
  np.testing.assert_allclose(jimg("linear"), _onnx_ref("linear", sizes), atol=1e-5)
  np.testing.assert_allclose(jimg("cubic"), _onnx_ref("cubic", sizes, cubic_coeff_a=-0.5,
                                                      exclude_outside=1), atol=1e-5)
  np.testing.assert_allclose(jimg("cubic", True),
                             _onnx_ref("cubic", sizes, cubic_coeff_a=-0.5, exclude_outside=1,
                                       antialias=int(sizes[2] < 9)), atol=1e-5)


def test_jax_image_linear_antialias_is_not_onnx_antialias():
  sizes = (1, 1, 4, 3)
  ours = np.asarray(jax.image.resize(X4, sizes, "linear", antialias=True))
  assert np.max(np.abs(ours - _onnx_ref("linear", sizes, antialias=1))) > 1e-3


def _pool_node(op, outputs=("y",), **attrs):
  return helper.make_node(op, ["x"], list(outputs), **attrs)


@pytest.mark.parametrize("attrs", [{"storage_order": 1}, {"ceil_mode": 1}, {"dilations": [2, 2]},
                                   {"pads": [1, 1, 1, 1]}], ids=str)
def test_ort_runs_max_pool_with_indices_and_every_attribute(attrs):
  nodes = [_pool_node("MaxPool", ("y", "i"), kernel_shape=[2, 2], strides=[2, 2], **attrs)]
  ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X4.shape))]
  outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
          helper.make_tensor_value_info("i", TensorProto.INT64, None)]
  model = helper.make_model(helper.make_graph(nodes, "g", ins, outs),
                            opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 11
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  y, i = sess.run(None, {"x": X4})
  assert i.dtype == np.int64 and i.shape == y.shape
  jy, ji = jaxops.max_pool(X4, (2, 2), strides=(2, 2), return_indices=True,
                           **{k: v for k, v in attrs.items()})
  assert jy.shape == y.shape


@pytest.mark.parametrize("op, opset, runs", [("LpPool", 1, False), ("LpPool", 2, True), ("LpPool", 11, True),
                                             ("LpPool", 18, True), ("LpPool", 22, True),
                                             ("GlobalLpPool", 1, False),
                                             ("GlobalLpPool", 2, True),
                                             ("GlobalLpPool", 22, False)])
def test_ort_lp_pool_versions(op, opset, runs):
  attrs = {"kernel_shape": [2, 2]} if op == "LpPool" else {}
  if opset == 1:
    attrs["p"] = 2.0
  node = _pool_node(op, **attrs)
  if runs:
    assert _ort([node], {"x": X4}, TensorProto.FLOAT, opset).ndim == 4
  else:
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
      _ort([node], {"x": X4}, TensorProto.FLOAT, opset)
  # jaxops runs every version
  from jaxops.onnx import _registry
  assert _registry.ADAPTERS[(op, opset)].fn([X4], dict(attrs))[0].ndim == 4
