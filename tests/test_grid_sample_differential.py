"""grid_sample and affine_grid on seeded random configurations against torch, onnx.reference and
onnxruntime.

Each combination (mode, padding, align_corners, shapes) is drawn at random and run on three random
inputs and grids (grids reach far outside [-1, 1]), compiled once (the sweeps' time is XLA's
compiles): 300 configurations per oracle. Where onnx.reference departs from the spec (docs/DEVIATIONS.md,
GridSample: cubic with border padding, reflection on a length-1 axis with align_corners) the
configuration is compared with torch and onnxruntime only.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops

pytestmark = pytest.mark.slow

_TORCH_MODE = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


def _model(op, opset, inputs, out=TensorProto.FLOAT, **attrs):
  node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
  ins = [helper.make_tensor_value_info(n, t, None) for n, t in inputs]
  graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", out, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 10
  return model


def _session(model):
  options = ort.SessionOptions()
  options.log_severity_level = 4
  return ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"])


def _ort(model, feeds):
  return _session(model).run(None, feeds)[0]


def _combos(n, seed):
  rng = np.random.default_rng(seed)
  out = []
  for t in range(n):
    r = 3 if t % 4 == 3 else 2
    mode = ("nearest", "linear", "cubic")[t % 3] if r == 2 else ("nearest", "linear")[t % 2]
    pad = ("zeros", "border", "reflection")[(t // 3) % 3]
    ac = bool((t // 9) % 2)
    spatial = tuple(int(v) for v in rng.integers(1, 6 if r == 2 else 4, r))
    out_sp = tuple(int(v) for v in rng.integers(1, 4, r))
    out.append((mode, pad, ac, spatial, out_sp))
  return out


def _inputs(rng, spatial, out_sp, batch=3):
  x = rng.standard_normal((batch, 2) + spatial).astype(np.float32)
  reach = rng.choice([1.1, 2.5, 6.0], size=(batch,) + (1,) * (len(out_sp) + 1))
  g = (rng.uniform(-1, 1, (batch,) + out_sp + (len(spatial),)) * reach).astype(np.float32)
  return x, g


def test_against_torch_float64_300_configurations():
  rng = np.random.default_rng(10)
  count = 0
  for mode, pad, ac, spatial, out_sp in _combos(60, 0):
    for _ in range(5):
      x, g = _inputs(rng, spatial, out_sp)
      x, g = x.astype(np.float64), g.astype(np.float64)
      want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g),
                                             mode=_TORCH_MODE[mode], padding_mode=pad,
                                             align_corners=ac).numpy()
      got = np.asarray(jaxops.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac))
      np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12,
                                 err_msg=str((mode, pad, ac, spatial)))
      count += 1
  assert count >= 300


def _reference_departs(mode, pad, ac, spatial):
  return ((mode == "cubic" and pad == "border")
          or (pad == "reflection" and ac and min(spatial) == 1))


def test_against_onnx_reference_and_onnxruntime_300_configurations():
  rng = np.random.default_rng(11)
  count = 0
  for mode, pad, ac, spatial, out_sp in _combos(60, 1):
    model = _model("GridSample", 20, [("x", TensorProto.FLOAT), ("g", TensorProto.FLOAT)],
                   mode=mode, padding_mode=pad, align_corners=int(ac))
    reference = ReferenceEvaluator(model)
    for _ in range(5):
      x, g = _inputs(rng, spatial, out_sp, batch=1)
      got = np.asarray(jaxops.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac))
      np.testing.assert_allclose(got, _ort(model, {"x": x, "g": g}), rtol=1e-4, atol=1e-5,
                                 err_msg=str((mode, pad, ac, spatial)))
      if not _reference_departs(mode, pad, ac, spatial):
        want = reference.run(None, {"x": x, "g": g})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                   err_msg=str((mode, pad, ac, spatial)))
      count += 1
  assert count >= 300


def test_affine_grid_300_configurations():
  """300 configurations, half float32 and half float64 (a static combination of size,
  align_corners and type, compiled once, with three random thetas), each against torch
  (float64: 1e-12; float32: 1e-5), onnxruntime (which runs AffineGrid-20 in both types) and
  onnx.reference (whose float64 result is computed in float32: 1e-5); more drawn against torch
  alone (a length-1 axis with align_corners, below)."""
  rng = np.random.default_rng(12)
  count = t = 0
  while count < 300:
    t += 1
    r = 2 + t % 2
    size = (3, 2) + tuple(int(v) for v in rng.integers(1, 7, r))
    ac = bool((t // 2) % 2)
    dtype, onnx_type, tol = ((np.float64, TensorProto.DOUBLE, 1e-12) if (t // 4) % 2 else
                             (np.float32, TensorProto.FLOAT, 1e-5))
    model = _model("AffineGrid", 20, [("t", onnx_type), ("s", TensorProto.INT64)],
                   out=onnx_type, align_corners=int(ac))
    session = _session(model)
    reference = ReferenceEvaluator(model)
    for _ in range(3):
      theta = rng.standard_normal((3, r, r + 1)).astype(dtype)
      with warnings.catch_warnings():  # torch notes its unit-size behaviour (the one jaxops has)
        warnings.filterwarnings("ignore", message="Since version 1.3.0, affine_grid")
        want = torch.nn.functional.affine_grid(torch.tensor(theta), size,
                                               align_corners=ac).numpy()
      got = np.asarray(jaxops.affine_grid(theta, size, align_corners=ac))
      assert got.dtype == dtype
      np.testing.assert_allclose(got, want, rtol=tol, atol=tol / 10)
      feeds = {"t": theta, "s": np.array(size, np.int64)}
      if not (ac and min(size[2:]) == 1):
        # a length-1 axis with align_corners: the reference divides by L - 1 = 0 and
        # onnxruntime places the pixel at 1 (test_affine_grid.py pins both)
        np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(got, reference.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
        count += 1
