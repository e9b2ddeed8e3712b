"""roi_align on seeded random configurations against onnx.reference and onnxruntime.

Oracles: onnx.reference (RoiAlign-22 and -10), onnxruntime (RoiAlign-10 and -16; it has no
RoiAlign-22 kernel), through the ONNX front end for mode="max" (which takes the largest weighted
corner value, as both oracles do) and through jaxops.roi_align for mode="avg". jaxops.roi_align's
own max (the largest interpolated sample, the spec's reading) is checked against onnx.reference's
*average* of one sample per sub-bin: with output (h * g, w * g) and sampling_ratio 1 each sub-bin
holds exactly one of the g x g samples of the coarse bin, at the same position.
"""

from __future__ import annotations

import jax
import numpy as np
import onnxruntime as ort
import pytest
from jax.test_util import check_grads
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops
from jaxops import _roi_align
from jaxops.onnx import Backend

pytestmark = pytest.mark.slow


def _node(opset, **attrs):
  if opset == 10:
    attrs.pop("coordinate_transformation_mode", None)
  return helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], **attrs)


def _reference(x, rois, bi, **attrs):
  return ReferenceEvaluator(_node(22, **attrs)).run(None, {"x": x, "r": rois, "b": bi})[0]


def _ort(opset, x, rois, bi, **attrs):
  node = _node(opset, **attrs)
  ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("b", TensorProto.INT64, None)]
  graph = helper.make_graph([node], "g", ins,
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 10
  options = ort.SessionOptions()
  options.log_severity_level = 4
  sess = ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"])
  return sess.run(None, {"x": x, "r": rois, "b": bi})[0]


def _configs(n, seed, draws=1):
  """``n`` configurations: n / draws static combinations (mode, coordinates, sampling,
  scale, output and map sizes), each with ``draws`` random maps and boxes (compiled once:
  the sweeps' time is XLA's compiles, about 0.4 s per combination)."""
  rng = np.random.default_rng(seed)
  out = []
  for t in range(n // draws):
    h, w = (int(v) for v in rng.integers(1, 10, 2))
    scale = float(rng.choice([1.0, 0.5, 0.25, 2.0]))
    attrs = dict(mode="avg" if t % 3 else "max",
                 coordinate_transformation_mode=("half_pixel", "output_half_pixel")[(t // 3) % 2],
                 sampling_ratio=int(rng.choice([0, 0, 1, 2, 3])),
                 spatial_scale=scale, output_height=int(rng.integers(1, 4)),
                 output_width=int(rng.integers(1, 4)))
    for d in range(draws):
      num = 3
      xs = rng.uniform(-3, (w + 3) / scale, (num, 2))
      ys = rng.uniform(-3, (h + 3) / scale, (num, 2))
      if (t * draws + d) % 5 == 0:  # zero-size boxes (onnxruntime#6921)
        xs[:, 1] = xs[:, 0]
      rois = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], 1).astype(np.float32)
      x = rng.standard_normal((2, 2, h, w)).astype(np.float32)
      bi = rng.integers(0, 2, num).astype(np.int64)
      out.append((x, rois, bi, dict(attrs)))
  return out


def _jaxops(x, rois, bi, attrs, opset=22):
  if attrs["mode"] == "max":
    # what the ONNX front end runs (the oracles' max of weighted corners; the front end itself
    # is checked in test_traced_adaptive_count_is_exact_under_jit), compiled once per combination
    del opset
    cfg = _roi_align._config("max", attrs["output_height"], attrs["output_width"],
                             attrs["sampling_ratio"], attrs["spatial_scale"],
                             attrs["coordinate_transformation_mode"], None, True)
    return np.asarray(_roi_align._roi_align_checked(x, rois, bi, cfg))
  return np.asarray(jaxops.roi_align(x, rois, bi, **attrs))


def test_against_reference_and_onnxruntime_300_configurations():
  """300 configurations (30 static combinations, ten random maps and box sets each, two with
  zero-size boxes), each compared with onnx.reference (RoiAlign-22) and onnxruntime
  (RoiAlign-16, and RoiAlign-10 for a quarter of the combinations, with output_half_pixel:
  version 10's coordinates), from one jaxops result each. (Its time is XLA's compiles, one per
  combination: 60 combinations of five took 43 s of the suite on an Intel Xeon.)"""
  for i, (x, rois, bi, attrs) in enumerate(_configs(300, 0, draws=10)):
    opset = 16
    if (i // 10) % 4 == 0:  # RoiAlign-10: output_half_pixel, no attribute
      attrs["coordinate_transformation_mode"] = "output_half_pixel"
      opset = 10
    got = _jaxops(x, rois, bi, attrs, opset)
    np.testing.assert_allclose(got, _reference(x, rois, bi, **attrs), rtol=2e-5, atol=2e-5,
                               err_msg=str(attrs))
    np.testing.assert_allclose(got, _ort(opset, x, rois, bi, **attrs), rtol=2e-5, atol=2e-5,
                               err_msg=f"{opset} {attrs}")


def test_spec_max_against_reference_sub_bins():
  for x, rois, bi, attrs in _configs(60, 2, draws=5):
    attrs["mode"] = "max"
    got = np.asarray(jaxops.roi_align(x, rois, bi, **attrs))
    oh, ow = attrs["output_height"], attrs["output_width"]
    sub = dict(attrs, mode="avg", sampling_ratio=1)
    half = attrs["coordinate_transformation_mode"] == "half_pixel"
    for r in range(len(rois)):
      # the coarse bin's sample counts, as the spec (and the reference) compute them
      off = 0.5 if half else 0.0
      s = np.float32(attrs["spatial_scale"])
      size_w = (rois[r, 2] * s - off) - (rois[r, 0] * s - off)
      size_h = (rois[r, 3] * s - off) - (rois[r, 1] * s - off)
      if not half:
        size_w, size_h = max(size_w, 1.0), max(size_h, 1.0)
      gh = attrs["sampling_ratio"] or int(np.ceil(size_h / oh))
      gw = attrs["sampling_ratio"] or int(np.ceil(size_w / ow))
      if gh == 0 or gw == 0:  # no samples: 0
        np.testing.assert_array_equal(got[r], 0.0)
        continue
      fine = _reference(x, rois[r:r + 1], bi[r:r + 1],
                        **dict(sub, output_height=oh * gh, output_width=ow * gw))
      want = fine.reshape(1, x.shape[1], oh, gh, ow, gw).max(axis=(3, 5))
      np.testing.assert_allclose(got[r:r + 1], want, rtol=2e-5, atol=2e-5, err_msg=str(attrs))


def test_traced_adaptive_count_is_exact_under_jit():
  f = jax.jit(lambda x, r, b: jaxops.roi_align(x, r, b, output_height=2, output_width=3))
  g = jax.jit(lambda x, r, b: jaxops.roi_align(x, r, b, mode="max", output_height=2,
                                               output_width=3))
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 2, 6, 7)).astype(np.float32)
  for scale in (1.0, 3.0, 20.0):  # boxes up to many times the map: counts far above H / 2
    xs = rng.uniform(-2, 8, (5, 2)) * scale
    ys = rng.uniform(-2, 7, (5, 2)) * scale
    rois = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], 1).astype(np.float32)
    bi = np.array([0, 1, 0, 1, 1], np.int64)
    attrs = dict(output_height=2, output_width=3)
    np.testing.assert_allclose(np.asarray(f(x, rois, bi)), _reference(x, rois, bi, **attrs),
                               rtol=2e-5, atol=2e-5)
    corner = np.asarray(Backend.run_node(_node(22, mode="max", **attrs), [x, rois, bi])[0])
    np.testing.assert_allclose(corner, _reference(x, rois, bi, mode="max", **attrs), rtol=2e-5,
                               atol=2e-5)
    assert np.asarray(g(x, rois, bi)).shape == (5, 2, 2, 3)


def _large_boxes(rng, num, h, w, scale, reach):
  """``num`` boxes of every size class the tap plan's ladder sorts by: small, map-sized and up to
  ``reach`` times the map (adaptive counts above the ladder's top rung), some outside the map,
  some of zero width."""
  size = rng.uniform(0.02, 1.0, (num, 2)) ** 2 * reach * np.array([w, h]) / scale
  start = rng.uniform(-0.3, 1.0, (num, 2)) * np.array([w, h]) / scale - size / 4
  rois = np.concatenate([start, start + size], axis=1)
  rois[::17, 2] = rois[::17, 0]  # zero width (onnxruntime#6921)
  return rois.astype(np.float32)


def _large_call(seed):
  """A call above _MIN_ELEMENTS whose rois make three chunks: (rng, (h, w, c, num), x, bi)."""
  rng = np.random.default_rng(seed)
  h, w, c, num = 9, 11, 64, 400
  assert num * 7 * 7 * c >= _roi_align._MIN_ELEMENTS
  assert num > 2 * (_roi_align._CHUNK_BYTES // (7 * 7 * c * 4))
  x = rng.standard_normal((2, c, h, w)).astype(np.float32)
  return rng, (h, w, c, num), x, rng.integers(0, 2, num).astype(np.int64)


def test_ladder_rungs_of_many_samples_against_onnxruntime():
  """Boxes whose bins need 7 to 24 samples per axis (a feature map of stride 4 with boxes up to
  two thirds of the image: FPN's finest level) take the ladder's rungs of 12 and 24 samples, x
  taps in groups, instead of the general plan's dense contraction over the whole image (8.5 s
  against onnxruntime's 0.9 on 512 such boxes over 2x256x200x272: docs/PERFORMANCE.md,
  "RoiAlign's ladder for large boxes"). Against onnxruntime, float32, with the boxes' count
  classes checked to reach both rungs."""
  rng = np.random.default_rng(23)
  h = w = 176
  c, num = 8, 200
  assert num * 7 * 7 * c >= _roi_align._MIN_ELEMENTS
  assert {12, 24} <= set(_roi_align._RUNGS)
  x = rng.standard_normal((2, c, h, w)).astype(np.float32)
  lo, hi = np.repeat([[7 * 6.5, 7 * 12], [7 * 12.5, 7 * 24]], num // 2, axis=0).T
  side = rng.uniform(lo[:, None], hi[:, None], (num, 2))
  start = rng.uniform(0, 1, (num, 2)) * (np.array([w, h]) - side)
  rois = np.concatenate([start, start + side], axis=1).astype(np.float32)
  need = np.ceil(side.max(axis=1) / 7)
  assert (need > 12).sum() > 50 and ((need > 6) & (need <= 12)).sum() > 50
  bi = rng.integers(0, 2, num).astype(np.int64)
  attrs = dict(mode="avg", output_height=7, output_width=7, sampling_ratio=0,
               spatial_scale=1.0, coordinate_transformation_mode="half_pixel")
  np.testing.assert_allclose(np.asarray(jaxops.roi_align(x, rois, bi, **attrs)),
                             _ort(16, x, rois, bi, **attrs), rtol=2e-5, atol=2e-5)


def test_tap_plan_chunks_against_onnxruntime():
  # Calls above _MIN_ELEMENTS take the tap plan: chunks of rois in a loop (here three, the last
  # one padded), and for adaptive counts the rois sorted into the ladder's rungs and the general
  # plan for the largest boxes. onnxruntime is the oracle (RoiAlign-16, and -10 for
  # output_half_pixel).
  rng, (h, w, c, num), x, bi = _large_call(4)
  cases = [(16, dict(sampling_ratio=0, spatial_scale=0.5)),
           (10, dict(sampling_ratio=0, spatial_scale=1.0,
                     coordinate_transformation_mode="output_half_pixel")),
           (16, dict(sampling_ratio=1, spatial_scale=0.25)),
           (16, dict(sampling_ratio=2, spatial_scale=0.5)),
           (16, dict(sampling_ratio=4, spatial_scale=2.0)),
           (16, dict(sampling_ratio=5, spatial_scale=0.5))]  # beyond _MAX_TAPS: general plan
  for opset, attrs in cases:
    attrs = dict(dict(mode="avg", output_height=7, output_width=7,
                      coordinate_transformation_mode="half_pixel"), **attrs)
    rois = _large_boxes(rng, num, h, w, attrs["spatial_scale"], reach=8)
    want = _ort(opset, x, rois, bi, **attrs)
    np.testing.assert_allclose(np.asarray(jaxops.roi_align(x, rois, bi, **attrs)), want,
                               rtol=2e-5, atol=2e-5, err_msg=f"{opset} {attrs}")
  # max_sampling_ratio: the ladder without merged rows; exact while no count exceeds the cap
  attrs = dict(output_height=5, output_width=3, spatial_scale=1.0)
  rois = _large_boxes(rng, num, h, w, 1.0, reach=0.8)  # counts up to 3
  got = jaxops.roi_align(x, rois, bi, max_sampling_ratio=3, **attrs)
  np.testing.assert_allclose(np.asarray(got), _ort(16, x, rois, bi, **attrs), rtol=2e-5,
                             atol=2e-5)
  # vmap over roi sets: the ladder's rung becomes per-set data (every rung computed, one kept)
  attrs = dict(output_height=7, output_width=7, spatial_scale=0.5)
  sets = np.stack([_large_boxes(rng, num, h, w, 0.5, reach=8) for _ in range(2)])
  got = jax.vmap(lambda r: jaxops.roi_align(x, r, bi, **attrs))(sets)
  for i in range(2):
    np.testing.assert_allclose(np.asarray(got[i]), _ort(16, x, sets[i], bi, **attrs), rtol=2e-5,
                               atol=2e-5)
  # a NaN box (pooled as a box at 0, its bins NaN) leaves the other boxes their own values
  rois = _large_boxes(rng, num, h, w, 0.5, reach=8)
  bad = np.zeros(num, bool)
  bad[[5, 77, 300]] = True
  rois[bad, 1] = np.nan
  got = np.asarray(jaxops.roi_align(x, rois, bi, **attrs))
  np.testing.assert_allclose(got[~bad], _ort(16, x, rois[~bad], bi[~bad], **attrs), rtol=2e-5,
                             atol=2e-5)


def test_max_sample_loop_against_onnxruntime_and_sub_bins():
  # mode="max" calls above _MIN_ELEMENTS take the sample loop (chunks of rois, one fused loop per
  # sample, adaptive counts looping to each chunk's largest count). The ONNX front end's max of
  # weighted corners against onnxruntime on every roi; jaxops.roi_align's own max (the largest
  # interpolated sample) against onnx.reference's sub-bin averages on some of them.
  rng, (h, w, c, num), x, bi = _large_call(6)
  for opset, attrs in [(16, dict(sampling_ratio=2, spatial_scale=0.5)),
                       (16, dict(sampling_ratio=0, spatial_scale=0.5)),
                       (10, dict(sampling_ratio=0, spatial_scale=1.0,
                                 coordinate_transformation_mode="output_half_pixel")),
                       (16, dict(sampling_ratio=3, spatial_scale=2.0))]:
    attrs = dict(dict(mode="max", output_height=7, output_width=7,
                      coordinate_transformation_mode="half_pixel"), **attrs)
    rois = _large_boxes(rng, num, h, w, attrs["spatial_scale"], reach=3)
    node = _node(opset, **attrs)
    got = np.asarray(Backend.run_node(node, [x, rois, bi], opset_version=opset)[0])
    np.testing.assert_allclose(got, _ort(opset, x, rois, bi, **attrs), rtol=2e-5, atol=2e-5,
                               err_msg=f"{opset} {attrs}")
    spec = np.asarray(jax.jit(lambda a, r, b, kw=attrs: jaxops.roi_align(a, r, b, **kw))(
        x, rois, bi))
    half = attrs["coordinate_transformation_mode"] == "half_pixel"
    off = 0.5 if half else 0.0
    for r in range(0, num, 23):
      s = np.float32(attrs["spatial_scale"])
      size = (rois[r, 2:] * s - off) - (rois[r, :2] * s - off)  # (w, h)
      if not half:
        size = np.maximum(size, 1.0)
      gw, gh = (attrs["sampling_ratio"] or int(np.ceil(v / 7)) for v in size)
      if gh == 0 or gw == 0:
        np.testing.assert_array_equal(spec[r], 0.0)
        continue
      sub = dict(attrs, mode="avg", sampling_ratio=1, output_height=7 * gh, output_width=7 * gw)
      fine = _reference(x, rois[r:r + 1], bi[r:r + 1], **sub)
      want = fine.reshape(c, 7, gh, 7, gw).max(axis=(2, 4))
      np.testing.assert_allclose(spec[r], want, rtol=2e-5, atol=2e-5, err_msg=f"{r} {attrs}")


def test_max_derivative_on_chunks_against_central_differences(monkeypatch):
  """mode="max" calls above _MIN_ELEMENTS: with 1 or 2 samples per axis the derivative is a loop
  over the samples masked to the outputs each won, on chunks of rois (_at_winners_by_taps; more
  samples keep the derivative at the winners, tested in test_roi_align.py). The spec's max and
  the front end's corner max, in float64 against central differences (reverse mode: the vjp
  is the JVP rules linearised and transposed, so it checks the rules' tangents too), on nine
  chunks (small chunks: three of the usual size would take half a million outputs, among
  which some pair of samples nearly ties, where central differences cross the switch of
  winner). Steps of 1e-8: with 1e-6 a pair of samples 3e-7 apart (another seed's draw)
  switched winner inside the step."""
  monkeypatch.setattr(_roi_align, "_CHUNK_BYTES", 1 << 16)
  rng = np.random.default_rng(0)
  with jax.enable_x64():
    x = rng.standard_normal((2, 16, 6, 7))
    start = rng.uniform(0, 2.5, (90, 2))
    rois = np.concatenate([start, start + rng.uniform(2, 4, (90, 2))], 1)
    b = rng.integers(0, 2, 90)
    assert len(rois) * 7 * 7 * 16 >= _roi_align._MIN_ELEMENTS
    assert len(rois) > 8 * (_roi_align._CHUNK_BYTES // (7 * 7 * 16 * 8))
    for sampling_ratio in (1, 2):
      for corner_max in (False, True):
        cfg = _roi_align._config("max", 7, 7, sampling_ratio, 1.0, "half_pixel", None,
                                 corner_max)
        f = lambda v, r, c=cfg: _roi_align._roi_align_checked(v, r, b, c)  # noqa: E731
        check_grads(f, (x, rois), order=1, modes=("rev",), eps=1e-8)


def test_deviation_roialign_10_reference_shifts_by_half_a_pixel():
  """docs/DEVIATIONS.md, RoiAlign 6: version 10 shifts no coordinate (version 16's
  output_half_pixel, "the backward-compatible behavior"), as onnxruntime runs it; onnx.reference
  runs it with half_pixel."""
  import onnx

  from jaxops.onnx import Backend

  x = np.random.default_rng(0).standard_normal((1, 1, 5, 5)).astype(np.float32)
  rois, b = np.array([[0.5, 0.7, 3.2, 3.9]], np.float32), np.array([0], np.int64)
  attrs = dict(mode="avg", output_height=2, output_width=2, sampling_ratio=2)
  # RoiAlign-10 as a model (the Backend checks it, with shapes; onnx.reference runs its opset)
  node = helper.make_node("RoiAlign", ["X", "rois", "b"], ["Y"], **attrs)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info(n, t, v.shape) for n, t, v in
                    (("X", TensorProto.FLOAT, x), ("rois", TensorProto.FLOAT, rois),
                     ("b", TensorProto.INT64, b))],
      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, 2, 2])])
  v10: onnx.ModelProto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
  ours = np.asarray(Backend.run_model(v10, [x, rois, b])[0])
  np.testing.assert_allclose(ours, _ort(10, x, rois, b, **attrs), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(ours, _reference(
      x, rois, b, coordinate_transformation_mode="output_half_pixel", **attrs), rtol=1e-6,
                             atol=1e-6)
  reference = ReferenceEvaluator(v10).run(None, {"X": x, "rois": rois, "b": b})[0]
  np.testing.assert_allclose(reference, _reference(
      x, rois, b, coordinate_transformation_mode="half_pixel", **attrs))
  assert np.max(np.abs(reference - ours)) > 0.1
