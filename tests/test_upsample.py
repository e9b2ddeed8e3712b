"""Upsample-9/10 and Resize-18 through jaxops.onnx.Backend on seeded random configurations.

Oracles: onnxruntime (every configuration it runs; for the deprecated Upsample-10, which it
refuses, its Resize-10) and onnx.reference (where it runs the op: Upsample-9 nearest with integer
scales, and Resize-18). Scales are chosen so that every source coordinate is exact in
float32 (onnxruntime computes coordinates in float32, the spec and jaxops in float64), so the
comparisons are exact for nearest and within float32 rounding for linear/cubic.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from jaxops import _dtypes
from jaxops.onnx import Backend

# Scales whose products with the lengths used here are integers and whose coordinates
# (x / scale, (x + 0.5) / scale - 0.5) are exact binary fractions.
UP = (1.0, 2.0, 3.0, 4.0, 1.5, 2.5)


def _graph_model(op: str, opset: int, x: np.ndarray, inputs: list[str], inits: list,
                 **attrs) -> onnx.ModelProto:
  elem = _dtypes.of_dtype(x.dtype).enum
  graph = helper.make_graph(
      [helper.make_node(op, inputs, ["Y"], **attrs)], "g",
      [helper.make_tensor_value_info("X", elem, list(x.shape))],
      [helper.make_tensor_value_info("Y", elem, [None] * x.ndim)], initializer=inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
  opts = ort.SessionOptions()
  opts.intra_op_num_threads = 1
  opts.log_severity_level = 3
  sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
  return sess.run(None, {"X": x})[0]


def _close(got: np.ndarray, want: np.ndarray, mode: str) -> None:
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
  if mode == "nearest" or got.dtype == np.uint8:
    np.testing.assert_array_equal(got, want)
  else:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _upsample_config(seed: int) -> tuple[np.ndarray, list[float], str]:
  rng = np.random.default_rng(seed)
  mode = ("nearest", "linear")[seed % 2]
  h, w = (int(v) for v in rng.integers(1, 7, size=2))
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3)), 2 * h, 2 * w]  # even: 1.5, 2.5 ok
  scales = [1.0, 1.0, float(rng.choice(UP)), float(rng.choice(UP))]
  if mode == "nearest" and rng.random() < 0.5:
    x = rng.integers(0, 256, size=shape).astype(np.uint8)
  else:
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
  return x, scales, mode


@pytest.mark.slow
@pytest.mark.parametrize("version", [9, 10])
def test_upsample_against_onnxruntime_and_reference(version):
  # Upsample-10 is deprecated: onnx's checker and onnxruntime refuse the op, so it runs through
  # Backend.run_node (no checker), against onnxruntime's Resize-10, which replaced it with the
  # same semantics. onnx.reference runs Upsample-9 only for nearest with integer scales.
  by_ref = 0
  for seed in range(24):
    x, scales, mode = _upsample_config(100 * version + seed)
    inits = [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)]
    if version == 9:
      model = _graph_model("Upsample", 9, x, ["X", "scales"], inits, mode=mode)
      got = Backend.run_model(model, [x])[0]
      _close(got, _ort(model, x), mode)
      if mode == "nearest" and all(s == int(s) for s in scales):
        _close(got, ReferenceEvaluator(model).run(None, {"X": x})[0], mode)
        by_ref += 1
    else:
      node = helper.make_node("Upsample", ["X", "scales"], ["Y"], mode=mode)
      got = Backend.run_node(node, [x, np.array(scales, np.float32)], opset_version=10)[0]
      resize10 = _graph_model("Resize", 10, x, ["X", "scales"], inits, mode=mode)
      _close(got, _ort(resize10, x), mode)
  assert version == 10 or by_ref >= 3, by_ref


def _resize18_config(seed: int) -> tuple[onnx.ModelProto, np.ndarray, str, bool]:
  """A Resize-18 model on a 4-D input resizing the two spatial axes (what onnxruntime runs for
  every mode), with sizes or scales, axes given or not, antialias and keep_aspect_ratio_policy.
  Returns the model, the input, the mode and whether onnx.reference is a fair oracle."""
  rng = np.random.default_rng(18_000 + seed)
  mode = ("nearest", "linear", "cubic")[seed % 3]
  h, w = (int(v) for v in rng.integers(2, 7, size=2))
  x = (rng.standard_normal([1, int(rng.integers(1, 3)), 2 * h, 2 * w]) * 10).astype(np.float32)
  coords = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
  attrs: dict = {"mode": mode, "coordinate_transformation_mode": str(rng.choice(coords))}
  if mode == "nearest":
    attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"]))
  if mode == "cubic":
    attrs["cubic_coeff_a"] = float(rng.choice([-0.75, -0.5]))
    attrs["exclude_outside"] = int(rng.random() < 0.5)
  with_axes = bool(rng.random() < 0.5)
  if with_axes:
    attrs["axes"] = [2, 3]
  spatial = [float(rng.choice(UP)), float(rng.choice(UP))]
  if mode != "nearest" and rng.random() < 0.3:  # downsampling with antialias
    attrs["antialias"] = 1
    spatial = [0.5, 0.5]
  use_sizes = bool(rng.random() < 0.5)
  inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
  if use_sizes:
    sizes = [int(s * n) for s, n in zip(spatial, x.shape[2:])]
    if rng.random() < 0.5:
      attrs["keep_aspect_ratio_policy"] = str(rng.choice(["not_larger", "not_smaller"]))
      sizes = [sizes[0], sizes[1] + 1]  # the policy picks one of the two ratios
    if not with_axes:
      sizes = list(x.shape[:2]) + sizes
    inits.append(helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes))
    ins = ["X", "roi", "", "sizes"]
  else:
    scales = spatial if with_axes else [1.0, 1.0] + spatial
    inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)], scales))
    ins = ["X", "roi", "scales"]
  model = _graph_model("Resize", 18, x, ins, inits, **attrs)
  # A keep_aspect_ratio_policy without axes also scales the batch and channel axes (not what
  # onnxruntime's 4-D kernels run); with align_corners it is DEVIATIONS Resize 3.
  policy = "keep_aspect_ratio_policy" in attrs
  runs_ort = not (policy and not with_axes)
  fair_ref = not (policy and attrs["coordinate_transformation_mode"] == "align_corners")
  return model, x, mode, runs_ort, fair_ref


@pytest.mark.slow
def test_resize18_against_onnxruntime_and_reference():
  ran_ort = ran_ref = 0
  for seed in range(36):
    model, x, mode, runs_ort, fair_ref = _resize18_config(seed)
    got = Backend.run_model(model, [x])[0]
    if runs_ort:
      _close(got, _ort(model, x), mode)
      ran_ort += 1
    if fair_ref:
      _close(got, ReferenceEvaluator(model).run(None, {"X": x})[0], mode)
      ran_ref += 1
  assert ran_ort >= 24 and ran_ref >= 24, (ran_ort, ran_ref)
