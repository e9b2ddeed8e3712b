"""Resize models that onnxruntime and onnx.reference run, run by jaxops the same way.

Oracles: onnxruntime and onnx.reference on the same one-node models (through
jaxops.onnx.Backend), and values derived by hand from the spec formulas (derivations in the
comments). The cases where jaxops keeps to the spec text against one of them are pinned here
and listed in docs/DEVIATIONS.md (Resize).
"""

from __future__ import annotations

from fractions import Fraction

import chex
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops
from jaxops.onnx import Backend


def _model(opset: int, shape: list[int], inputs: list[str], inits: list, dtype: int = 1,
           **attrs) -> onnx.ModelProto:
  graph = helper.make_graph(
      [helper.make_node("Resize", inputs, ["Y"], **attrs)], "g",
      [helper.make_tensor_value_info("X", dtype, shape)],
      [helper.make_tensor_value_info("Y", dtype, [None] * len(shape))], initializer=inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
  opts = ort.SessionOptions()
  opts.intra_op_num_threads = 1
  opts.log_severity_level = 3
  sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
  return sess.run(None, {"X": x})[0]


# --- tf_crop_and_resize without roi: the full box ----------------------------------------------


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_tf_crop_and_resize_without_roi_is_the_full_box(opset, mode):
  # Resize-13+: roi omitted (""), as onnxruntime runs it (the full box). Resize-11, whose roi
  # input is required, with an empty roi tensor (onnxruntime rejects that; jaxops reads it as
  # omitted). onnx.reference raises "roi cannot be None" for both: it is run with the explicit
  # full box [0, 0, 0, 0, 1, 1, 1, 1] instead.
  shape = [1, 2, 4, 5]
  x = np.random.default_rng(opset).standard_normal(shape).astype(np.float32)
  scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 1.5, 0.6])
  attrs = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
               extrapolation_value=-9.0)
  if opset == 11:
    empty = helper.make_tensor("roi", TensorProto.FLOAT, [0], [])
    model = _model(opset, shape, ["X", "roi", "scales"], [empty, scales], **attrs)
  else:
    model = _model(opset, shape, ["X", "", "scales"], [scales], **attrs)
  got = Backend.run_model(model, [x])[0]
  box = helper.make_tensor("roi", TensorProto.FLOAT, [8], [0, 0, 0, 0, 1, 1, 1, 1])
  full = _model(opset, shape, ["X", "roi", "scales"], [box, scales], **attrs)
  ref = ReferenceEvaluator(full).run(None, {"X": x})[0]
  chex.assert_trees_all_close(got, ref, rtol=1e-5, atol=1e-5)
  chex.assert_trees_all_close(got, _ort(model if opset > 11 else full, x), rtol=1e-5, atol=1e-5)
  assert not np.any(got == -9.0)


def test_tf_crop_and_resize_without_roi_python_api():
  # Full box on length 4 -> 3: x_original = y * (4 - 1) / (3 - 1) = 0, 1.5, 3.
  x = np.array([0.0, 10.0, 20.0, 30.0])
  got = jaxops.resize(x, sizes=[3], mode="linear",
                      coordinate_transformation_mode="tf_crop_and_resize")
  chex.assert_trees_all_close(np.asarray(got), np.array([0.0, 15.0, 30.0]))


# --- Resize-11 tf_half_pixel_for_nn: axes with scale 1 are unchanged ---------------------------


@pytest.mark.parametrize("nearest_mode", ["ceil", "round_prefer_ceil", "floor",
                                          "round_prefer_floor"])
def test_tf_half_pixel_for_nn_keeps_axes_with_scale_1(nearest_mode):
  # The formula (x + 0.5) / 1 with ceil would read element x + 1 of the batch and channel axes
  # (the next channel's pixels); onnxruntime and TensorFlow leave those axes alone. Rows: scale
  # 0.5, x_original = (y + 0.5) * 2 = 1, 3, 5 -> pixels 1, 3, 5 in every nearest_mode.
  shape = [2, 3, 6, 4]
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 1])
  roi = helper.make_tensor("roi", TensorProto.FLOAT, [0], [])
  model = _model(11, shape, ["X", "roi", "scales"], [roi, scales], mode="nearest",
                 coordinate_transformation_mode="tf_half_pixel_for_nn",
                 nearest_mode=nearest_mode)
  got = Backend.run_model(model, [x])[0]
  np.testing.assert_array_equal(got, _ort(model, x))
  np.testing.assert_array_equal(got, x[:, :, [1, 3, 5], :])


def test_tf_half_pixel_for_nn_python_api_rank_3():
  # The shape: (1, 2, 4), scales (1, 1, 0.5), ceil: last axis x_original = 1, 3.
  x = np.arange(8.0).reshape(1, 2, 4)
  got = jaxops.resize(x, scales=[1, 1, 0.5], nearest_mode="ceil",
                      coordinate_transformation_mode="tf_half_pixel_for_nn")
  np.testing.assert_array_equal(np.asarray(got), x[:, :, [1, 3]])


# --- half_pixel_symmetric with keep_aspect_ratio_policy ------------------------------------------


def _spec_hps_coords(n_in: int, scale: Fraction) -> list[Fraction]:
  """half_pixel_symmetric from the Resize-19 text, exact: output_width = scale * n_in (the
  target length, fractional), output_width_int = round_int(output_width) (the output length)."""
  width = scale * n_in
  width_int = int(width + Fraction(1, 2))
  offset = Fraction(n_in, 2) * (1 - Fraction(width_int) / width)
  return [offset + (y + Fraction(1, 2)) / scale - Fraction(1, 2) for y in range(width_int)]


def _linear_exact(x: np.ndarray, coords: list[Fraction]) -> np.ndarray:
  """Linear interpolation along the last axis at exact coordinates, edge pixels repeated."""
  n = x.shape[-1]
  cols = []
  for c in coords:
    i0 = int(np.floor(float(c)))
    f = float(c - i0)
    cols.append(x[..., min(max(i0, 0), n - 1)] * (1 - f) + x[..., min(max(i0 + 1, 0), n - 1)] * f)
  return np.stack(cols, axis=-1)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_half_pixel_symmetric_reads_output_width_as_the_fractional_target(policy):
  # (6, 9) to sizes (13, 8): not_larger: scale min(13/6, 8/9) = 8/9, lengths round(16/3) = 5 and
  # 8; not_smaller: scale 13/6, lengths 13 and round(19.5) = 20. The Resize-19 text defines
  # output_width as "the target length ... which can be a fractional number when it is
  # calculated out of a scale factor" and output_width_int as the integer output length, so the
  # adjustment is output_width_int / (scale * length): 20 / 19.5 on the last axis here (the
  # other reading, output_width = the output length, would make the offset 0).
  rng = np.random.default_rng(0)
  x = rng.standard_normal((6, 9))
  ratios = [Fraction(13, 6), Fraction(8, 9)]
  scale = min(ratios) if policy == "not_larger" else max(ratios)
  want = _linear_exact(x, _spec_hps_coords(9, scale))
  want = np.swapaxes(_linear_exact(np.swapaxes(want, 0, 1), _spec_hps_coords(6, scale)), 0, 1)
  kw = dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric",
            keep_aspect_ratio_policy=policy)
  got = np.asarray(jaxops.resize(x, sizes=[13, 8], **kw))
  chex.assert_trees_all_close(got, want, rtol=1e-12, atol=1e-12)
  node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], **kw)
  ref = ReferenceEvaluator(node).run(None, {"X": x, "sizes": np.array([13, 8])})[0]
  # The reference reads output_width so too; it is compared where no coordinate is an exact
  # integer (there its tap window may slip: test_deviation_half_pixel_symmetric_keep_aspect_window).
  cols = [j for j, c in enumerate(_spec_hps_coords(9, scale)) if c.denominator != 1]
  rows = [i for i, c in enumerate(_spec_hps_coords(6, scale)) if c.denominator != 1]
  chex.assert_trees_all_close(ref[np.ix_(rows, cols)], want[np.ix_(rows, cols)], rtol=1e-12,
                              atol=1e-12)


def test_deviation_half_pixel_symmetric_keep_aspect_window():
  # The case: cubic a = -0.5, (1, 1, 6, 9) to sizes (1, 1, 13, 8), not_smaller, no axes:
  # scale 13/6, output (2, 2, 13, 20). Last axis, output 16: x_original = 9/2 * (1 - 20/19.5) +
  # 16.5 * 6/13 - 1/2 = -3/26 + 99/13 - 1/2 = 7 exactly: the cubic weights at distance 0, 1, 2
  # are 1, 0, 0, so the output is pixel 7 of the row-resized array. The reference computes
  # 7.000000000000001, then places its window from x + 2 rounded to 9.0 and reads pixel 6
  # (DEVIATIONS Resize 4).
  x = np.random.default_rng(0).standard_normal((1, 1, 6, 9)).astype(np.float32)
  kw = dict(mode="cubic", cubic_coeff_a=-0.5, coordinate_transformation_mode="half_pixel_symmetric",
            keep_aspect_ratio_policy="not_smaller")
  sizes = np.array([1, 1, 13, 8])
  got = np.asarray(jaxops.resize(x, sizes=sizes, **kw))
  assert got.shape == (2, 2, 13, 20)
  node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], **kw)
  ref = ReferenceEvaluator(node).run(None, {"X": x, "sizes": sizes})[0]
  # The row pass alone (the reference, axes [2]: no coordinate near an integer there).
  rows_node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], axes=[2], **kw)
  rows = ReferenceEvaluator(rows_node).run(None, {"X": x, "sizes": np.array([13])})[0]
  # Batch and channel: length 1 -> 2, every tap clamps to the one element: copies.
  np.testing.assert_allclose(got[1, 1, :, 16], rows[0, 0, :, 7], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ref[0, 0, :, 16], rows[0, 0, :, 6], rtol=1e-5, atol=1e-6)
  others = [j for j in range(20) if j != 16]
  np.testing.assert_allclose(got[..., others], ref[..., others], rtol=1e-5, atol=1e-5)


def test_antialiased_downsampling_by_a_large_factor_matches_onnxruntime():
  # 1024x1024 -> 1x1 antialiased reads every pixel of each axis (2048-tap columns): a loop over
  # the tap columns (XLA aborted compiling them unrolled)
  x = np.random.default_rng(7).random((1, 2, 1024, 1024)).astype(np.float32)
  for mode in ("linear", "cubic"):
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 2, 1, 1])
    model = _model(18, [1, 2, 1024, 1024], ["X", "", "", "sizes"], [sizes], mode=mode,
                   antialias=1)
    np.testing.assert_allclose(np.asarray(jaxops.resize(x, sizes=(1, 2, 1, 1), mode=mode,
                                                        antialias=True)),
                               _ort(model, x), rtol=2e-6, atol=2e-6)


# --- a non-finite extrapolation_value ------------------------------------------------------------


def test_deviation_non_finite_extrapolation_value():
  """docs/DEVIATIONS.md, Resize 14: the spec's extrapolation_value is any float, "used as the
  corresponding output value" outside the crop; NaN (a common mark of the area outside a crop)
  and inf were a ValueError (found by a sweep). NaN and inf as onnxruntime gives them;
  onnx.reference saturates inf to the largest float32 (and has NaN at one point). Unused
  outside tf_crop_and_resize; no retrace for a NaN that is another object each call."""
  roi = helper.make_tensor("roi", TensorProto.FLOAT, [8], [0, 0, -0.5, -0.5, 1, 1, 1, 1])
  sizes = helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 1, 3, 3])
  x = np.arange(24, dtype=np.float32).reshape(1, 1, 4, 6)
  for value in (float("nan"), float("inf"), -float("inf")):
    model = _model(19, [1, 1, 4, 6], ["X", "roi", "", "sizes"], [roi, sizes], mode="linear",
                   coordinate_transformation_mode="tf_crop_and_resize",
                   extrapolation_value=value)
    ours = np.asarray(Backend.prepare(model).run([x])[0])
    theirs = _ort(model, x)
    np.testing.assert_array_equal(ours, theirs)
    assert (np.isnan(ours) if np.isnan(value) else np.isinf(ours)).sum() == 5
    with np.errstate(invalid="ignore"):  # the reference multiplies its fill by 0 inside the crop
      ref = ReferenceEvaluator(model).run(None, {"X": x})[0]
    outside = ~np.isfinite(ours)
    np.testing.assert_array_equal(ours[~outside], ref[~outside])
    if not np.isnan(value):  # the reference: the largest float32 (NaN where it took 0 * inf)
      big = ref[outside] == np.copysign(np.finfo(np.float32).max, value)
      assert big.sum() >= 3 and np.all(big | np.isnan(ref[outside]))
  model = _model(19, [1, 1, 4, 6], ["X", "", "", "sizes"], [sizes], mode="linear",
                 extrapolation_value=float("nan"))
  np.testing.assert_allclose(np.asarray(Backend.prepare(model).run([x])[0]), _ort(model, x),
                             rtol=1e-6)
  from jaxops import _resize
  kw = dict(sizes=[3, 3], roi=[-0.5, -0.5, 1, 1], axes=[2, 3], mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize")
  seen = None
  for _ in range(3):
    y = jaxops.resize(x, extrapolation_value=float("nan"), **kw)  # a new NaN object each time
    assert np.isnan(np.asarray(y)).sum() == 5
    assert seen in (None, _resize._resize_jit._cache_size())  # compiled once
    seen = _resize._resize_jit._cache_size()
  u8 = jaxops.resize(x.astype(np.uint8), extrapolation_value=float("nan"), **kw)
  assert (np.asarray(u8) == 0).sum() == 5  # NaN into an integer output: 0, as Cast gives it


def test_deviation_onnxruntime_resize_10_two_axes_unchanged():
  """docs/DEVIATIONS.md, Resize (the onnxruntime note, c): Resize-10 linear on a 2-D input with
  scales [1.11, 1] comes back unchanged from onnxruntime 1.32; the spec (asymmetric: output row
  i reads input row i / 1.11, floor(5 * 1.11) = 5 rows) gives the rows derived here."""
  x = np.arange(10, dtype=np.float32).reshape(5, 2)
  scales = helper.make_tensor("scales", TensorProto.FLOAT, [2], [1.11, 1])
  model = _model(10, [5, 2], ["X", "scales"], [scales], mode="linear")
  ours = np.asarray(Backend.prepare(model).run([x])[0])
  pos = np.arange(5) / np.float32(1.11)
  low = np.floor(pos).astype(int)
  want = x[low] + (pos - low)[:, None] * (x[np.minimum(low + 1, 4)] - x[low])
  np.testing.assert_allclose(ours, want, rtol=1e-6)
  np.testing.assert_array_equal(_ort(model, x), x)  # onnxruntime: unchanged


# --- departures found by a random fuzz (2026-12-07): docs/DEVIATIONS.md, Resize 15 and the -----
# --- onnxruntime paragraph (e)-(g) ----------------------------------------------------------


def _resize_model(x: np.ndarray, sizes: list[int], elem: int, roi: list[float] | None = None,
                  **attrs) -> onnx.ModelProto:
  """``_model`` of Resize-19 to ``sizes``, with ``roi`` where given."""
  inits = [helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes)]
  if roi is not None:
    inits.append(helper.make_tensor("roi", TensorProto.FLOAT, [len(roi)], roi))
  return _model(19, list(x.shape), ["X", "roi" if roi is not None else "", "", "sizes"], inits,
                dtype=elem, **attrs)


def test_deviation_int64_nearest_copies_past_2_to_the_53():
  """Nearest copies pixels: int64 values past 2**53 come out exactly. onnx.reference
  interpolates in float64 and rounds them (2**53 + 1 -> 2**53); onnxruntime has no int64
  Resize kernel."""
  x = np.array([[2**53 + 1, -(2**62) - 3]], np.int64)
  model = _resize_model(x, [1, 4], TensorProto.INT64, mode="nearest")
  got = Backend.run_model(model, [x])[0]
  np.testing.assert_array_equal(got, np.repeat(x, 2, axis=1))
  ref = ReferenceEvaluator(model).run(None, {"X": x})[0]
  assert ref[0, 0] == 2**53 and ref[0, 2] == -(2**62)


def test_deviation_nan_and_inf_pixels_through_zero_weights():
  """The spec does not say where a NaN or infinite pixel reaches. jaxops: nearest copies pixels
  (only the outputs that read the pixel); linear and cubic take each output's weighted sum over
  its taps, so a NaN or inf tap of weight 0 gives NaN, except in a tap column that no output
  weights (not read). Here align_corners 6 -> 3 reads coordinate 5 with taps 4 and 5, weights 0
  and 1: NaN. onnxruntime reads pixel 5 alone there (6), and onnx.reference's two-tap nearest
  spreads a NaN to its zero-weight neighbours."""
  x = np.array([[[[1, 2, 3, 4, np.nan, 6]]]], np.float32)
  model = _resize_model(x, [1, 1, 1, 3], TensorProto.FLOAT, mode="linear",
                        coordinate_transformation_mode="align_corners")
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0].ravel(), [1, 3.5, np.nan])
  np.testing.assert_array_equal(_ort(model, x).ravel(), [1, 3.5, 6])
  x = np.array([[[[1, 2, np.nan, 4]]]], np.float32)
  model = _resize_model(x, [1, 1, 1, 7], TensorProto.FLOAT, mode="nearest",
                        coordinate_transformation_mode="align_corners")
  want = [1, 1, 2, 2, np.nan, np.nan, 4]  # round_prefer_floor of 0, .5, 1, ..., 3
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0].ravel(), want)
  np.testing.assert_array_equal(_ort(model, x).ravel(), want)
  assert np.isnan(ReferenceEvaluator(model).run(None, {"X": x})[0].ravel()[3])


def test_deviation_onnxruntime_roi_half_pixel_symmetric_and_integer_outputs():
  """onnxruntime 1.32 against the spec (jaxops and onnx.reference agree): (e) it ignores the
  roi of an axis whose length is unchanged; (f) it drops half_pixel_symmetric's offset with
  antialias; (g) integer outputs of linear and cubic clamp negative int8 results to 0 with
  antialias, and a negative extrapolation_value wraps into uint8 (255) where the spec's values
  saturate (0)."""
  x = np.array([[0.0, 10.0, 20.0, 30.0], [40.0, 50.0, 60.0, 70.0]], np.float32)
  model = _resize_model(x, [3, 4], TensorProto.FLOAT, roi=[0.0, 0.5, 1.0, 1.0], mode="linear",
                        coordinate_transformation_mode="tf_crop_and_resize")
  # the width axis' roi [0.5, 1] over 3 pixels: x = 1.5 + i * 0.5 -> 15, 20, 25, 30
  for y in (Backend.run_model(model, [x])[0], ReferenceEvaluator(model).run(None, {"X": x})[0]):
    np.testing.assert_allclose(y[0], [15, 20, 25, 30], rtol=1e-6)
  np.testing.assert_allclose(_ort(model, x)[0], [0, 10, 20, 30], rtol=1e-6)

  x = (np.arange(9, dtype=np.float32) * 10).reshape(3, 3)
  scales = helper.make_tensor("scales", TensorProto.FLOAT, [2], [1.25, 2.0])
  model = _model(19, [3, 3], ["X", "", "scales"], [scales], mode="linear", antialias=1,
                 coordinate_transformation_mode="half_pixel_symmetric")
  for y in (Backend.run_model(model, [x])[0], ReferenceEvaluator(model).run(None, {"X": x})[0]):
    np.testing.assert_allclose(y[:, 0], [6, 30, 54], rtol=1e-5)
  np.testing.assert_allclose(_ort(model, x)[:, 0], [0, 30, 60], rtol=1e-5)

  x = np.array([[[[-100, -50, 0, 50, 100]]]], np.int8)
  model = _resize_model(x, [1, 1, 1, 7], TensorProto.INT8, mode="linear", antialias=1)
  want = ReferenceEvaluator(model).run(None, {"X": x})[0]
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0], want)
  assert want.ravel()[0] == -100 and _ort(model, x).ravel()[0] == 0
  x = np.array([10, 20, 30, 40], np.uint8)
  model = _resize_model(x, [3], TensorProto.UINT8, roi=[-1.0, -0.5], mode="nearest",
                        coordinate_transformation_mode="tf_crop_and_resize",
                        extrapolation_value=-1.0)
  want = ReferenceEvaluator(model).run(None, {"X": x})[0]
  np.testing.assert_array_equal(Backend.run_model(model, [x])[0], want)
  assert (want == 0).all() and (_ort(model, x) == 255).all()


def test_deviation_onnxruntime_refuses_sizes_of_zero():
  """`sizes` with a 0 gives an empty axis (the spec's output shape is `sizes`; onnx.reference
  and ONNX's shape inference agree). onnxruntime refuses it ("Scale value should be greater
  than 0"; found by a graph fuzz). docs/DEVIATIONS.md, Resize's onnxruntime item (h)."""
  x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
  model = _resize_model(x, [1, 2, 0, 3], TensorProto.FLOAT, mode="linear")
  got = Backend.run_model(model, [x])[0]
  assert got.shape == (1, 2, 0, 3) and got.dtype == np.float32
  assert ReferenceEvaluator(model).run(None, {"X": x})[0].shape == (1, 2, 0, 3)
  with pytest.raises(Exception, match="greater than 0"):
    _ort(model, x)
