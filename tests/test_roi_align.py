"""roi_align: hand-derived values, zero-size boxes, max mode (spec vs the ONNX front end), errors,
version rules of the adapters, gradients against central differences in float64, vmap/jit."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from onnx import helper
from onnx.reference import ReferenceEvaluator

import jaxops
from _ulps import compiled
from jaxops import _roi_align
from jaxops.onnx import Backend

X = np.arange(16.0).reshape(1, 1, 4, 4)  # value 4 * row + col: bilinear samples are exact


class TestValues(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_linear_map_gives_the_mean_sample_position(self):
    # X is linear in (row, col), so each bin's average is X at the mean sample position.
    # Box [0, 0, 4, 4] half_pixel: start -0.5, size 4, bins of 2, adaptive g = ceil(4 / 2) = 2,
    # samples at -0.5 + (i + 0.5) = 0, 1 (bin 0) and 2, 3 (bin 1): means 0.5 and 2.5. A sample
    # at -0.5 would clamp to 0; none here. Values: 4 * 0.5 + 0.5 = 2.5, 4.5, 10.5, 12.5.
    f = self.variant(lambda x, r, b: jaxops.roi_align(x, r, b, output_height=2, output_width=2))
    y = f(X, np.array([[0.0, 0.0, 4.0, 4.0]]), np.array([0]))
    np.testing.assert_allclose(np.asarray(y).ravel(), [2.5, 4.5, 10.5, 12.5], rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_spec_max_is_the_largest_interpolated_sample(self):
    # output_half_pixel, box [0, 0, 2, 2], one bin, sampling_ratio 2: samples at 0.5 and 1.5 on
    # both axes; the largest is X(1.5, 1.5) = 4 * 1.5 + 1.5 = 7.5.
    f = self.variant(lambda x, r, b: jaxops.roi_align(
        x, r, b, mode="max", sampling_ratio=2, coordinate_transformation_mode="output_half_pixel"))
    y = f(X, np.array([[0.0, 0.0, 2.0, 2.0]]), np.array([0]))
    np.testing.assert_allclose(np.asarray(y).ravel(), [7.5], rtol=1e-12)


@pytest.mark.parametrize("mode, sampling_ratio", [("max", 0), ("max", 2), ("avg", 0), ("avg", 1)])
def test_no_boxes(mode, sampling_ratio):
  import onnxruntime as ort

  x = np.ones((1, 2, 4, 5), np.float32)
  r, b = np.zeros((0, 4), np.float32), np.zeros((0,), np.int64)
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, output_height=2,
                          output_width=3, sampling_ratio=sampling_ratio)
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", 1, [1, 2, 4, 5]),
                    helper.make_tensor_value_info("r", 1, [0, 4]),
                    helper.make_tensor_value_info("b", 7, [0])],
      [helper.make_tensor_value_info("y", 1, None)]), opset_imports=[helper.make_opsetid("", 16)])
  model.ir_version = 8
  want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
      None, {"x": x, "r": r, "b": b})[0]
  assert want.shape == (0, 2, 2, 3)
  kw = dict(mode=mode, output_height=2, output_width=3, sampling_ratio=sampling_ratio)
  for got in (jaxops.roi_align(x, r, b, **kw),
              jax.jit(lambda a, q: jaxops.roi_align(a, q, b, **kw))(x, r),
              Backend.run_node(node, [x, r, b], opset_version=16)[0]):
    assert got.shape == want.shape and got.dtype == want.dtype
  gx, gr = jax.grad(lambda a, q: jnp.sum(jaxops.roi_align(a, q, b, **kw)), argnums=(0, 1))(x, r)
  np.testing.assert_array_equal(np.asarray(gx), np.zeros_like(x))
  assert gr.shape == (0, 4)


def test_zero_size_boxes():
  # half_pixel, adaptive: size 0 gives g = 0 samples; the bin is 0 (onnxruntime, reference).
  rois = np.array([[1.0, 1.0, 1.0, 3.0]])
  for mode in ("avg", "max"):
    y = jaxops.roi_align(X, rois, np.array([0]), mode=mode)
    np.testing.assert_array_equal(np.asarray(y), 0.0)
  # sampling_ratio 2: every sample of a zero-width box sits on x = 1 - 0.5 = 0.5; rows at
  # start 0.5 + (i + 0.5) * 1 = 1.0, 2.0 (bin of 2 rows): mean row 1.5: 4 * 1.5 + 0.5 = 6.5.
  y = jaxops.roi_align(X, rois, np.array([0]), sampling_ratio=2)
  np.testing.assert_allclose(np.asarray(y).ravel(), [6.5], rtol=1e-12)
  # output_half_pixel makes the box at least 1 x 1: x from 1 to 2, one sample at 1.5.
  y = jaxops.roi_align(X, rois, np.array([0]), coordinate_transformation_mode="output_half_pixel")
  # rows 1..3 with g = 2: samples 1.5, 2.5; mean 2.0: 4 * 2 + 1.5 = 9.5
  np.testing.assert_allclose(np.asarray(y).ravel(), [9.5], rtol=1e-12)


def test_deviation_non_finite_boxes():
  """DEVIATIONS RoiAlign 4: onnxruntime refuses non-finite boxes; under jit they cannot raise. A
  NaN or inf coordinate gives NaN bins (avg; max with a fixed sampling_ratio) or 0 (max with
  adaptive sampling: no sample counted); the finite box beside them is onnxruntime's value."""
  x = np.arange(16.0).reshape(1, 1, 4, 4)
  rois = np.array([[np.nan, 0.0, 2.0, 2.0], [0.0, 0.0, np.inf, 2.0], [0.0, 0.0, 2.0, 2.0]])
  b = np.zeros(3, np.int64)
  for mode, sr, bad in (("avg", 0, np.nan), ("avg", 2, np.nan), ("max", 2, np.nan),
                        ("max", 0, 0.0)):
    with pytest.raises(Exception, match="must be finite"):
      _oracles(x, rois, mode=mode, sampling_ratio=sr)
    want = _oracles(x, rois[2:], mode=mode, sampling_ratio=sr)[0].ravel()
    for got in (jaxops.roi_align(x, rois, b, mode=mode, sampling_ratio=sr),
                jax.jit(lambda r, mode=mode, sr=sr: jaxops.roi_align(
                    x, r, b, mode=mode, sampling_ratio=sr))(rois)):
      got = np.asarray(got).ravel()
      np.testing.assert_array_equal(got[:2], [bad, bad])
      np.testing.assert_allclose(got[2:], want, rtol=1e-12)


def test_deviation_adaptive_sampling_of_huge_float32_boxes():
  """DEVIATIONS RoiAlign 5: a float32 box 2e7 pixels wide on a 4-pixel row. Under jit the
  adaptive count of samples that can fall on the map is bounded (length + 3); float32 spaces
  the samples 1-2 pixels apart, more of them round onto the map, and some are dropped: 6e-7
  against the exact 7.5e-7 (onnxruntime's float32: 8e-7). In float64 jaxops is onnxruntime's
  value."""
  x = np.arange(1.0, 5.0).reshape(1, 1, 1, 4)
  b = np.array([0])
  rois = np.array([[-1e7, 0.0, 1e7, 1.0]])
  want64 = _oracles(x, rois, reference=False)[0].ravel()  # (the reference loops 2e7 samples)
  np.testing.assert_allclose(np.asarray(jaxops.roi_align(x, rois, b)).ravel(), want64,
                             rtol=1e-12)
  np.testing.assert_allclose(want64, [7.5e-7], rtol=1e-9)
  got32 = float(np.asarray(jaxops.roi_align(x.astype(np.float32), rois.astype(np.float32),
                                            b)).ravel()[0])
  assert 0.7 * 7.5e-7 < got32 < 7.5e-7  # some samples dropped, none invented


def test_max_sampling_ratio_caps_the_count():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 2, 8, 8))
  rois = np.array([[0.5, 0.5, 3.0, 3.5], [1.0, 0.0, 7.0, 7.5]])
  b = np.array([0, 0])
  # counts ceil(size / 2) <= 4 here: capping at 4 changes nothing ...
  np.testing.assert_allclose(
      np.asarray(jaxops.roi_align(x, rois, b, output_height=2, output_width=2,
                                  max_sampling_ratio=4)),
      np.asarray(jaxops.roi_align(x, rois, b, output_height=2, output_width=2)), rtol=1e-12)
  # ... capping at 1 equals sampling_ratio 1.
  for mode in ("avg", "max"):
    np.testing.assert_allclose(
        np.asarray(jaxops.roi_align(x, rois, b, mode=mode, output_height=2, output_width=2,
                                    max_sampling_ratio=1)),
        np.asarray(jaxops.roi_align(x, rois, b, mode=mode, output_height=2, output_width=2,
                                    sampling_ratio=1)), rtol=1e-12)


def _oracles(x, rois, reference=True, **attrs):
  """onnxruntime (RoiAlign-16) and onnx.reference (unless not ``reference``: None) on one
  image's boxes."""
  import onnxruntime as ort
  from onnx import TensorProto
  dt = TensorProto.DOUBLE if x.dtype == np.float64 else TensorProto.FLOAT
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], **attrs)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", dt, x.shape),
                    helper.make_tensor_value_info("r", dt, rois.shape),
                    helper.make_tensor_value_info("b", TensorProto.INT64, [len(rois)])],
      [helper.make_tensor_value_info("y", dt, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
  model.ir_version = 8
  feeds = {"x": x, "r": rois, "b": np.zeros(len(rois), np.int64)}
  return (ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0],
          _reference_run(model, feeds) if reference else None)


def _reference_run(model, feeds):
  """onnx.reference's RoiAlign in Python floats: a weight of 0 on an infinite pixel gives NaN
  as the spec's sum does, and NumPy warns of it (an error under the suite's filters)."""
  with np.errstate(invalid="ignore", over="ignore"):
    return ReferenceEvaluator(model).run(None, feeds)[0]


def test_non_finite_pixels_reach_only_the_bins_that_read_them():
  """The dense plan (adaptive counts on small calls; the boxes' derivatives) multiplied every
  pixel of every image by a weight, mostly 0: an inf or NaN anywhere in the batch made every
  box's bins NaN (found by a random sweep). Against onnxruntime and onnx.reference image by
  image, boxes inside the map (a sample outside it reads pixel (0, 0) with weight 0 there:
  DEVIATIONS RoiAlign 7)."""
  rng = np.random.default_rng(31)
  non_finite = 0
  for _ in range(12):
    h, w = (int(v) for v in rng.integers(4, 10, 2))
    x = rng.standard_normal((2, 2, h, w))
    for _ in range(int(rng.integers(1, 4))):
      x[tuple(int(rng.integers(0, d)) for d in x.shape)] = rng.choice([np.inf, -np.inf, np.nan])
    lo = rng.uniform(0, [w - 1, h - 1], size=(5, 2))
    rois = np.concatenate([lo, lo + rng.uniform(0, 1, (5, 2)) * ([w - 1, h - 1] - lo)], 1)
    b = rng.integers(0, 2, 5)
    kw = dict(mode="avg", output_height=2, output_width=3, sampling_ratio=0)
    got = np.asarray(jaxops.roi_align(x, rois, b, **kw))
    for img in (0, 1):
      if not (b == img).any():
        continue
      want, ref = _oracles(x[img:img + 1], rois[b == img], **kw)
      np.testing.assert_array_equal(ref, want)
      np.testing.assert_allclose(got[b == img], want, rtol=1e-12, atol=1e-12)
      non_finite += int((~np.isfinite(want)).sum())
  assert non_finite > 0  # some bins do read the non-finite pixels


@pytest.mark.parametrize("plan", ["tap plan", "tap plan, rungs of 12 and 24", "gathers"])
def test_non_finite_pixels_reach_only_the_bins_that_read_them_on_every_plan(plan):
  """The same rule on the plans of larger calls with adaptive counts. The tap plan (calls of
  _MIN_ELEMENTS outputs or more) reads, per bin, a static number of rows and columns: the merged
  rows past the bin's last sample and the samples past its count g, with weight 0, so an inf
  pixel there made the bin NaN (2056 of 78400 bins, where onnxruntime's were finite). The
  general plan's gathers (outputs of one bin, several images: cheaper than the dense
  contraction) read every sample the static bound allows, likewise. Against onnxruntime, image
  by image, float32; boxes inside the map and no non-finite pixel (0, 0) (DEVIATIONS
  RoiAlign 7)."""
  from jaxops import _roi_align
  rng = np.random.default_rng(47)
  if plan == "tap plan":
    shape, num, kw = (1, 4, 40, 40), 400, dict(output_height=7, output_width=7)
  elif plan == "gathers":
    shape, num, kw = (8, 3, 12, 14), 24, dict(output_height=1, output_width=1)
  else:  # boxes whose counts are 7 to 13 per axis
    shape, num, kw = (1, 2, 100, 100), 700, dict(output_height=7, output_width=7)
  assert (num * kw["output_height"] * kw["output_width"] * shape[1]
          >= _roi_align._MIN_ELEMENTS) == (plan != "gathers")
  x = rng.standard_normal(shape).astype(np.float32)
  h, w = shape[2:]
  for value in (np.inf, -np.inf, np.nan, np.inf, -np.inf, np.inf):
    x[int(rng.integers(0, shape[0])), :, int(rng.integers(1, h)), int(rng.integers(1, w))] = value
  if plan.startswith("tap plan,"):
    side = rng.uniform(7 * 6.5, 7 * 13, (num, 1))
    lo = rng.uniform(0, 1, (num, 2)) * (np.array([w, h]) - side)
    rois = np.concatenate([lo, lo + side], 1)
  else:
    lo = rng.uniform(0, [w / 2, h / 2], (num, 2))
    rois = np.concatenate([lo, lo + rng.uniform(1, [w / 2 - 1, h / 2 - 1], (num, 2))], 1)
  rois = rois.astype(np.float32)
  b = rng.integers(0, shape[0], num)
  # and one where the first box reads it whatever the seed: the pixel nearest its centre
  cx, cy = np.floor((rois[0, :2] + rois[0, 2:]) / 2 + 0.5).astype(int)
  x[b[0], :, cy, cx] = np.inf
  kw = dict(kw, mode="avg", sampling_ratio=0)
  got = np.asarray(jaxops.roi_align(x, rois, b, **kw))
  non_finite = 0
  for img in range(shape[0]):
    if not (b == img).any():
      continue
    want, _ = _oracles(x[img:img + 1], rois[b == img], reference=False, **kw)
    np.testing.assert_array_equal(np.isnan(got[b == img]), np.isnan(want))
    np.testing.assert_allclose(got[b == img], want, rtol=2e-6, atol=2e-6)
    non_finite += int((~np.isfinite(want)).sum())
  assert 0 < non_finite < got.size // 2  # some bins read them, most do not


def _central_differences(f, x, step=1e-6):
  """d f / d x by central differences, one element of ``x`` at a time (float64)."""
  flat = x.ravel()
  out = np.zeros_like(flat)
  for i in range(flat.size):
    e = np.zeros_like(flat)
    e[i] = step
    hi, lo = (float(f((flat + v).reshape(x.shape))) for v in (e, -e))
    out[i] = (hi - lo) / (2 * step)
  return out.reshape(x.shape)


def test_max_mode_box_gradient_with_an_unread_inf():
  """Masked samples read 0, not their clipped rows: a row holding an inf that no counted sample
  reads gave the boxes' gradient 0 * inf = NaN (found by a random sweep). Central
  differences of the forward, which is finite, in float64."""
  x = np.zeros((1, 1, 8, 8))
  x[0, 0, :4, :4] = np.arange(16.0).reshape(4, 4)
  x[0, 0, 7, 7] = np.inf
  rois = np.array([[0.3, 0.4, 2.6, 2.2]])
  b = np.zeros(1, np.int64)
  f = lambda r: jnp.sum(jaxops.roi_align(x, r, b, mode="max", output_height=2,  # noqa: E731
                                         output_width=2, sampling_ratio=0))
  g = np.asarray(jax.grad(f)(rois))
  np.testing.assert_allclose(g, _central_differences(f, rois), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["count", "edge_low", "edge_high"])
def test_divisions_are_rounded_once_as_the_reference_divides(case):
  # XLA rewrites x / 7 into x * (1 / 7): ceil(21 / 7) came out as 4 samples per bin (float32),
  # and samples lying exactly on the map's edge (y = -1: -3.5 + 7.5 / 3; x = W: 35 / 7) landed
  # one rounding outside it and read nothing. Found by a fuzz against both oracles.
  if case == "count":  # width 21 over 7 bins: 3 samples per bin, not 4
    x = (np.arange(30, dtype=np.float32) ** 2).reshape(1, 1, 1, 30)
    rois = np.array([[0.0, 0.0, 21.0, 1.0]], np.float32)
    attrs = dict(output_height=1, output_width=7, sampling_ratio=0,
                 coordinate_transformation_mode="output_half_pixel")
  elif case == "edge_low":  # y samples -1, 4, 9 on a 1 x 1 map: the first reads it
    x = np.ones((1, 1, 1, 1))
    rois = np.array([[0.0, -3.0, 1.0, 12.0]])
    attrs = dict(output_height=1, output_width=1, sampling_ratio=3)
  else:  # the last bin's last x sample is 35 / 7 = 5 = W
    x = np.ones((1, 1, 1, 5), np.float32)
    rois = np.array([[0.0, 0.0, 6.0, 1.0]], np.float32)
    attrs = dict(output_height=1, output_width=7, sampling_ratio=3,
                 coordinate_transformation_mode="output_half_pixel")
  got = np.asarray(jax.jit(lambda a, r: jaxops.roi_align(a, r, np.zeros(len(r), np.int64),
                                                         **attrs))(x, rois))
  want_ort, want_ref = _oracles(x, rois, **attrs)
  tol = 1e-6 if x.dtype == np.float32 else 1e-12
  np.testing.assert_allclose(got, want_ort, rtol=tol, atol=tol)
  np.testing.assert_allclose(got, want_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_are_rounded_before_the_differences_at_every_xla_level(dtype):
  """onnxruntime (and torchvision) round ``y * spatial_scale`` before subtracting the offset,
  and ``ph * bin_size`` before adding the start. XLA's CPU compiler contracts such pairs into one
  fused multiply-add at its default optimization level (not at level 0, as the suite's conftest
  sets), and a box from y = 6 to 36 at spatial_scale 0.1 in float32 then spans 3.0000002 rather
  than 3: four samples per bin where onnxruntime takes three. Each program here is compiled at
  levels 0 and 3; boxes on a half-pixel lattice with non-dyadic scales (before: 127 of 48,000
  such boxes differed at level 3, found by a probe of this shape)."""
  rng = np.random.default_rng(5406)
  x = rng.standard_normal((1, 2, 24, 24)).astype(dtype)
  tol = 1e-5 if dtype == np.float32 else 1e-10
  for scale, ctm, pooled in ((0.1, "half_pixel", 1), (0.3, "output_half_pixel", 1),
                             (1 / 7, "output_half_pixel", 2)):
    scale = float(np.float32(scale))  # an ONNX attribute is a float32
    b = rng.choice(np.arange(80) * 0.5, (400, 4))
    rois = np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])], 1)
    rois = np.concatenate([rois, [[9.5, 6.0, 32.5, 36.0]]]).astype(dtype)
    attrs = dict(output_height=pooled, output_width=pooled, sampling_ratio=0,
                 spatial_scale=scale, coordinate_transformation_mode=ctm)
    want = _oracles(x, rois, reference=False, **attrs)[0]
    f = lambda a, r, attrs=attrs: jaxops.roi_align(  # noqa: E731
        a, r, np.zeros(len(r), np.int64), **attrs)
    for level in (0, 3):
      got = compiled(f, x, rois, level=level)(x, rois)
      np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol,
                                 err_msg=f"scale={scale} {ctm} level={level}")


def test_errors():
  r, b = np.zeros((1, 4)), np.zeros((1,), np.int64)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `mode`.*'avg'"):
    jaxops.roi_align(X, r, b, mode="mean")
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `coordinate_transformation"):
    jaxops.roi_align(X, r, b, coordinate_transformation_mode="align_corners")
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `output_height`.*>= 1"):
    jaxops.roi_align(X, r, b, output_height=0)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `sampling_ratio`.*>= 0"):
    jaxops.roi_align(X, r, b, sampling_ratio=-1)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `max_sampling_ratio`"):
    jaxops.roi_align(X, r, b, max_sampling_ratio=0)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `rois`.*\(num_rois, 4\)"):
    jaxops.roi_align(X, np.zeros((1, 5)), b)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `batch_indices`"):
    jaxops.roi_align(X, r, np.zeros((2,), np.int64))
  with pytest.raises(TypeError, match=r"jaxops.roi_align: argument `batch_indices`.*integer"):
    jaxops.roi_align(X, r, np.zeros((1,)))
  with pytest.raises(TypeError, match=r"jaxops.roi_align: argument `x`"):
    jaxops.roi_align(X.astype(np.int32), r, b)
  with pytest.raises(ValueError, match=r"jaxops.roi_align: argument `x`.*rank 4"):
    jaxops.roi_align(X[0], r, b)
  with pytest.raises(TypeError, match=r"jaxops.roi_align: argument `spatial_scale`"):
    jaxops.roi_align(X, r, b, spatial_scale="2")


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, np.float32, np.float64])
def test_dtypes_follow_x(dtype):
  rois = np.array([[0.3, 0.2, 3.1, 2.9]])
  y = jaxops.roi_align(X.astype(dtype), rois.astype(dtype), np.array([0]), output_height=2,
                       output_width=2, sampling_ratio=2)
  assert y.dtype == np.dtype(dtype)
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2,
                          sampling_ratio=2)
  want = ReferenceEvaluator(node).run(None, {"x": X, "r": rois, "b": np.array([0])})[0]
  tol = {np.float64: 1e-12, np.float32: 1e-5}.get(dtype, 2e-2)
  np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=tol, atol=tol * 10)


def test_deviation_batch_indices_outside_the_batch_are_clipped():
  """DEVIATIONS RoiAlign 3: indices outside [0, N) are clipped into range (onnxruntime raises;
  under jit they may be traced). An int64 NumPy index past int32 with JAX's 64-bit types off is
  clipped as its own value (JAX would have wrapped 2**32 + 0 to image 0)."""
  x = np.stack([X, X + 100.0]).reshape(2, 1, *X.shape[-2:])
  rois = np.array([[0.3, 0.2, 3.1, 2.9]] * 3)
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2,
                          sampling_ratio=2)
  ref = ReferenceEvaluator(node)
  want = ref.run(None, {"x": x, "r": rois, "b": np.array([0, 1, 1], np.int64)})[0]
  for x64 in (True, False):
    with jax.enable_x64(x64):
      got = jaxops.roi_align(x.astype(np.float32), rois.astype(np.float32),
                             np.array([-3, 7, 2 ** 32], np.int64), output_height=2,
                             output_width=2, sampling_ratio=2)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


# --- the ONNX adapters ----------------------------------------------------------------------


def _run(version, **attrs):
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], **attrs)
  rois = np.array([[0.0, 0.0, 2.0, 2.0]], np.float32)
  return Backend.run_node(node, [X.astype(np.float32), rois, np.array([0], np.int64)],
                          opset_version=version)[0]


def test_onnx_versions():
  # RoiAlign-10 behaves as output_half_pixel and has no attribute for it.
  np.testing.assert_array_equal(_run(10), _run(16, coordinate_transformation_mode=
                                               "output_half_pixel"))
  assert not np.array_equal(_run(16), _run(10))  # 16's default is half_pixel
  with pytest.raises(ValueError, match=r"\(RoiAlign-10\): has no attribute "
                                       "`coordinate_transformation_mode`"):
    _run(10, coordinate_transformation_mode="half_pixel")
  with pytest.raises(TypeError, match=r"\(RoiAlign-16\): input 0 \(`X`\) has element type BFLOAT16"):
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"])
    Backend.run_node(node, [X.astype(jnp.bfloat16), np.zeros((1, 4), jnp.bfloat16),
                            np.array([0], np.int64)], opset_version=16)


def test_deviation_max_mode_front_end_follows_the_node_case_core_follows_the_spec():
  # Box [0, 0, 2, 2], output_half_pixel, sampling_ratio 2: samples at 0.5 and 1.5 per axis.
  # Spec (jaxops.roi_align): the largest bilinear sample, X(1.5, 1.5) = 7.5. The ONNX front end,
  # as ONNX's node case test_roialign_mode_max, onnx.reference and onnxruntime: the largest
  # weighted corner of each sample; at (1.5, 1.5) the corners (1, 1), (1, 2), (2, 1), (2, 2)
  # hold 5, 6, 9, 10, each with weight 0.25: 2.5; other samples give less.
  spec = jaxops.roi_align(X, np.array([[0.0, 0.0, 2.0, 2.0]]), np.array([0]), mode="max",
                          sampling_ratio=2, coordinate_transformation_mode="output_half_pixel")
  np.testing.assert_allclose(np.asarray(spec).ravel(), [7.5], rtol=1e-12)
  front = _run(22, mode="max", sampling_ratio=2,
               coordinate_transformation_mode="output_half_pixel")
  np.testing.assert_allclose(front.ravel(), [2.5], rtol=1e-6)


# --- gradients, vmap, retrace ---------------------------------------------------------------


@pytest.mark.parametrize("sampling_ratio", [2, 0])
def test_gradients_against_central_differences_float64(sampling_ratio):
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 2, 5, 6))
  # boxes whose samples avoid integer coordinates and whose adaptive counts are not at a jump
  rois = np.array([[0.7, 0.6, 4.3, 3.9], [1.2, 0.3, 3.4, 4.2]])
  b = np.array([1, 0])
  for mode in ("avg", "max"):
    f = lambda v, r, m=mode: jaxops.roi_align(  # noqa: E731
        v, r, b, mode=m, output_height=2, output_width=2, sampling_ratio=sampling_ratio)
    check_grads(f, (x, rois), order=1, modes=("fwd", "rev"), eps=1e-6)
  # avg is linear in x: order 2 in x
  check_grads(lambda v: jaxops.roi_align(v, rois, b, output_height=2, output_width=2,
                                         sampling_ratio=sampling_ratio), (x,), order=2,
              modes=("fwd", "rev"))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_box_leaves_the_other_boxes_gradients_alone(bad):
  """A box with a NaN or inf coordinate has NaN weights; with the loss reading only the finite
  box beside it, 0 * NaN in the backward made the map's gradient NaN, on every image for the
  adaptive average (its dense plan sums over every box and image; found by a gradient sweep).
  The gradient is now that of the finite box alone, against central differences (float64)."""
  x = np.arange(50.0).reshape(2, 1, 5, 5) / 10
  rois = np.array([[bad, 0.9, 3.6, 3.4], [1.2, 0.9, 3.6, 3.4]])
  b = np.array([0, 1])
  for mode, sr in (("avg", 0), ("avg", 2), ("max", 0), ("max", 2)):
    f = lambda v, m=mode, s=sr: jnp.sum(jaxops.roi_align(  # noqa: E731
        v, rois, b, mode=m, sampling_ratio=s, output_height=2, output_width=2)[1] ** 2)
    g = np.asarray(jax.grad(f)(x))
    np.testing.assert_allclose(g, _central_differences(f, x), atol=1e-6, err_msg=mode)
    assert np.all(g[0] == 0)
    gr = np.asarray(jax.grad(lambda r, m=mode, s=sr: jnp.sum(jaxops.roi_align(
        x, r, b, mode=m, sampling_ratio=s, output_height=2, output_width=2)[1]))(rois))
    assert np.all(np.isfinite(gr[1])) and np.all(gr[0] == 0)


def test_box_whose_extent_overflows_is_a_non_finite_box():
  """A finite float32 box from x = -3e38 to 3e38: its width overflows float32, and its NaN
  weights made, in the backward, the map's gradient NaN where the other boxes read it (found by
  an audit). It is now pooled as a non-finite box (DEVIATIONS RoiAlign 4): its bins NaN (0 for
  the adaptive max), and the gradient in x that of the other boxes alone, against central
  differences (float64) of a loss on those boxes only."""
  x = np.random.default_rng(3).standard_normal((1, 2, 5, 6))
  good = np.array([[0.6, 1.2, 4.4, 3.9], [1.3, 0.2, 5.1, 4.6]])
  rois = np.concatenate([[[-3e38, 1.0, 3e38, 3.0]], good]).astype(np.float32)
  w = np.random.default_rng(4).standard_normal((2, 2, 2, 2))
  for mode, sr in (("avg", 0), ("avg", 2), ("max", 0), ("max", 2)):
    kw = dict(mode=mode, sampling_ratio=sr, output_height=2, output_width=2)
    out = np.asarray(jaxops.roi_align(x.astype(np.float32), rois, np.zeros(3, np.int64), **kw))
    np.testing.assert_array_equal(out[0], 0.0 if (mode, sr) == ("max", 0) else np.nan)
    g = jax.grad(lambda v, r: jnp.sum(jaxops.roi_align(  # noqa: E731
        v, r, np.zeros(3, np.int64), **kw)[1:] * w), argnums=(0, 1))(x.astype(np.float32), rois)
    want = _central_differences(lambda v: jnp.sum(jaxops.roi_align(  # noqa: E731
        v, good, np.zeros(2, np.int64), **kw) * w), x)
    np.testing.assert_allclose(np.asarray(g[0]), want, atol=1e-5, err_msg=f"{mode} {sr}")
    assert np.all(np.asarray(g[1])[0] == 0) and np.all(np.isfinite(np.asarray(g[1])))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_gradient_in_x_ignores_the_values_of_non_finite_pixels(bad):
  """roi_align is linear in x: its gradient in x is the same whatever x holds. With a
  non-finite pixel the dense plan's masking gave the bins that read it no gradient at all (a
  finite, wrong gradient; found by a sweep). Against central differences of the finite map."""
  x = np.arange(24.0).reshape(1, 2, 3, 4) / 10
  rois = np.array([[0.3, 0.2, 2.7, 1.6], [0.1, 0.4, 3.2, 2.9]])
  b = np.zeros(2, np.int64)
  w = np.random.default_rng(4).standard_normal((2, 2, 2, 2))
  for sr in (0, 2):
    f = lambda v, s=sr: jnp.sum(jaxops.roi_align(  # noqa: E731
        v, rois, b, output_height=2, output_width=2, sampling_ratio=s) * w)
    want = _central_differences(f, x)
    x_bad = x.copy()
    x_bad[0, 1, 0, 0] = bad
    np.testing.assert_allclose(np.asarray(jax.grad(f)(x_bad)), want, atol=1e-6)
    assert not np.all(np.isfinite(np.asarray(f(x_bad))))  # the value does read it


def test_max_mode_gradient_goes_to_the_first_of_tied_samples():
  """Every sample of the bin reads the same value (a constant map): the gradient goes to the
  first sample's four pixels, with its bilinear weights (hand-derived: the box spans [0, 3] in
  pixel coordinates, the 2 x 2 samples of its one bin lie at 0.75 and 2.25), as max_pool gives
  it to the first maximum; jnp.max would have split it over the four samples."""
  x = np.ones((1, 1, 5, 5))
  rois = np.array([[0.5, 0.5, 3.5, 3.5]])
  g = jax.grad(lambda v: jnp.sum(jaxops.roi_align(v, rois, np.zeros(1, np.int64), mode="max",
                                                  sampling_ratio=2)))(x)
  want = np.zeros((5, 5))
  want[:2, :2] = np.outer([0.25, 0.75], [0.25, 0.75])
  np.testing.assert_array_equal(np.asarray(g)[0, 0], want)


def test_max_mode_adaptive_gradient_costs_the_output_not_the_static_bound():
  """The derivative of mode="max" reads the winning sample of each output again, where it
  evaluated every sample of the static bound (H + 2 per axis with adaptive counts): the
  gradient in x and the boxes on a 32 x 32 map, 128 boxes and 64 channels asked for 26 GiB of
  temporaries. Its values against central differences on a smaller map (float64)."""
  rng = np.random.default_rng(11)
  x = rng.standard_normal((2, 64, 32, 32)).astype(np.float32)
  start = rng.uniform(0, 18, (128, 2))
  rois = np.concatenate([start, start + rng.uniform(2, 12, (128, 2))], 1).astype(np.float32)
  b = rng.integers(0, 2, 128)
  loss = lambda v, r: jnp.sum(jaxops.roi_align(v, r, b, mode="max", output_height=7,  # noqa: E731
                                               output_width=7) ** 2)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, rois).compile()
  assert compiled.memory_analysis().temp_size_in_bytes < 256 * 2 ** 20
  x = rng.standard_normal((1, 2, 24, 20))
  rois = np.array([[1.3, 2.2, 17.6, 21.1], [0.4, 0.9, 6.3, 5.2]])
  b = np.zeros(2, np.int64)
  for corner_max in (False, True):  # the spec's max, and the ONNX front end's (weighted corners)
    cfg = _roi_align._config("max", 3, 2, 0, 1.0, "half_pixel", None, corner_max)
    f = lambda v, r, c=cfg: _roi_align._roi_align_checked(v, r, b, c)  # noqa: E731
    check_grads(f, (x, rois), order=1, modes=("rev",), eps=1e-6)  # fwd: see the tap plan test


@pytest.mark.slow
def test_tap_plan_gradients_against_central_differences_float64():
  # Large enough for the tap plan (_roi_align._MIN_ELEMENTS), in several chunks: the fixed ratio
  # differentiates the chunked tap loop; with adaptive counts the boxes, sorted by the samples
  # they need, fill chunks of every rung of the ladder this map has (1, 2, up to 4, up to 6, up
  # to 12: 14 rows and columns per bin, its x taps in two groups; the map is 36 wide, where a
  # box spanning it needs 6 samples a bin, so that the ladder goes on to 12) and of the general
  # plan (more than 12), each chunk differentiated by its own branch.
  rng = np.random.default_rng(5)
  c, num = 64, 450
  assert num * 7 * 7 * c >= _roi_align._MIN_ELEMENTS
  cfg = _roi_align._config("avg", 7, 7, 0, 1.0, "half_pixel", None, False)
  ladder = _roi_align._ladder(cfg, 12, 36)
  assert ladder == [1, 2, 4, 6, 12] and _roi_align._X_GROUP < 14
  chunk = _roi_align._CHUNK_BYTES // (7 * 7 * c * 8)
  x = rng.standard_normal((2, c, 12, 36))
  # box sides (in pixels) whose adaptive counts ceil(side / 7) are 1, 2, 3-4, 5-6, 7-12 and
  # 13-15 (sides up to 105), 75 boxes each, both sides of a box in the same class
  lo, hi = np.repeat([[0.5, 7], [7.5, 14], [14.5, 28], [28.5, 42], [42.5, 84], [84.5, 105]], 75,
                     axis=0).T
  size = rng.uniform(lo[:, None], hi[:, None], (num, 2))
  # the chunks as _chunked cuts the sorted boxes, and the rung each takes (inf: general plan)
  need = np.sort(np.ceil(size.max(axis=1) / 7))
  steps = -(-num // chunk)
  per = -(-num // steps)
  rungs = {min([k for k in ladder if k >= need[i:i + per].max()], default=np.inf)
           for i in range(0, num, per)}
  assert rungs == {1, 2, 4, 6, 12, np.inf}
  start = rng.uniform(-4, 8, (num, 2))
  rois = np.concatenate([start, start + size], axis=1)
  b = rng.integers(0, 2, num)
  # Reverse mode: the vjp (the JVP rules linearised, then transposed) against central
  # differences, which checks the rules' tangents and their transposes at once; forward mode
  # compiles every chunk's branch once more (test_gradients_against_central_differences_float64
  # runs both modes on the small plan).
  for sampling_ratio in (2, 0):
    f = lambda v, r, s=sampling_ratio: jaxops.roi_align(  # noqa: E731
        v, r, b, output_height=7, output_width=7, sampling_ratio=s)
    check_grads(f, (x, rois), order=1, modes=("rev",), eps=1e-6)


def test_ladder_ends_at_the_first_rung_that_serves_the_boxes_inside_the_map():
  """Each rung of the adaptive ladder is compiled (forward, non-finite fix, both tangents), so a
  map keeps the rungs up to the first one that serves a box spanning the whole map,
  ceil(length / pooled) samples a bin plus one; bins of boxes far past the map's edges take the
  general plan (their values: test_roi_align_differential's sweeps, whose boxes reach past the
  ladder's top rung). The benchmark's map, FPN's finest level, a small map, a capped count."""
  cfg = _roi_align._config("avg", 7, 7, 0, 1.0, "half_pixel", None, False)
  assert _roi_align._ladder(cfg, 50, 68) == [1, 2, 4, 6, 12]  # 10 + 1 samples: rung 12
  assert _roi_align._ladder(cfg, 200, 272) == [1, 2, 4, 6, 12, 24]  # 39 + 1: every rung
  assert _roi_align._ladder(cfg, 12, 10) == [1, 2, 4]
  assert _roi_align._ladder(cfg, 42, 42) == [1, 2, 4, 6, 12]  # 6 + 1: rung 6 is not enough
  assert _roi_align._ladder(cfg, 35, 35) == [1, 2, 4, 6]
  capped = _roi_align._config("avg", 7, 7, 0, 1.0, "half_pixel", 3, False)
  assert _roi_align._ladder(capped, 200, 272) == [1, 2]  # below the cap's bound of 4 samples


def test_avg_adaptive_gradient_costs_chunks_not_every_box_at_once():
  """The adaptive average's derivative was the general plan's over every box at once (a dense
  contraction whose temporaries grow with boxes x images x rows x channels: 3 GB for the
  benchmark's 512 boxes on 2x256x50x68); each chunk of boxes is now differentiated by the tap
  loop of its own rung. Values: test_tap_plan_gradients_against_central_differences_float64."""
  rng = np.random.default_rng(11)
  x = rng.standard_normal((2, 64, 32, 32)).astype(np.float32)
  start = rng.uniform(0, 18, (128, 2))
  rois = np.concatenate([start, start + rng.uniform(2, 12, (128, 2))], 1).astype(np.float32)
  b = rng.integers(0, 2, 128)
  loss = lambda v, r: jnp.sum(jaxops.roi_align(v, r, b, output_height=7,  # noqa: E731
                                               output_width=7) ** 2)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, rois).compile()
  assert compiled.memory_analysis().temp_size_in_bytes < 64 * 2 ** 20


@pytest.mark.parametrize("mode, sampling_ratio", [("avg", 0), ("avg", 2), ("max", 0)])
def test_gradients_of_vmap_over_maps_equal_the_loop(mode, sampling_ratio):
  """jax.grad in the boxes (and the maps) of a vmap over maps, or over maps and box sets: the
  adaptive average's dense plan has a conditional on non-finite pixels, whose predicate vmap
  batches; JAX then passed the rule's tangents through stop_gradient, which reverse mode
  cannot transpose (found by a fuzzer). Against the gradients of a Python loop."""
  rng = np.random.default_rng(6)
  xs = rng.uniform(-1, 1, (3, 1, 2, 6, 7))
  sets = np.array([[[0.5, 0.7, 4.2, 5.1], [1.3, 0.2, 5.6, 3.9]]]).repeat(3, 0)
  sets = sets + rng.uniform(0, 0.3, sets.shape)
  b = np.zeros(2, np.int32)
  kw = dict(mode=mode, sampling_ratio=sampling_ratio, output_height=2, output_width=3)
  one = lambda v, r: jnp.sum(jnp.sin(jaxops.roi_align(v, r, b, **kw)))  # noqa: E731
  loop = [jax.grad(one, argnums=(0, 1))(xs[i], sets[i]) for i in range(3)]
  loop_x = np.stack([g[0] for g in loop])
  loop_r = np.stack([g[1] for g in loop])
  both = jax.grad(lambda v, r: jnp.sum(jax.vmap(one)(v, r)), argnums=(0, 1))(xs, sets)
  np.testing.assert_allclose(both[0], loop_x, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(both[1], loop_r, rtol=1e-10, atol=1e-12)
  shared = jax.grad(lambda v, r: jnp.sum(jax.vmap(one, in_axes=(0, None))(v, r)),
                    argnums=(0, 1))(xs, sets[0])
  want = [jax.grad(one, argnums=(0, 1))(xs[i], sets[0]) for i in range(3)]
  np.testing.assert_allclose(shared[0], np.stack([g[0] for g in want]), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(shared[1], sum(g[1] for g in want), rtol=1e-10, atol=1e-12)


def test_vmap_over_roi_sets_and_no_retrace():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((2, 2, 6, 6))
  sets = rng.uniform(0, 5, (4, 3, 4))
  sets[..., 2:] = sets[..., :2] + rng.uniform(0.5, 3, (4, 3, 2))
  b = np.array([0, 1, 1])
  f = lambda r: jaxops.roi_align(x, r, b, output_height=2, output_width=2)  # noqa: E731
  got = jax.vmap(f)(sets)
  node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2)
  for i in range(4):
    want = ReferenceEvaluator(node).run(None, {"x": x, "r": sets[i], "b": b})[0]
    np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-10, atol=1e-12)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def g(v, r):
    return jaxops.roi_align(v, r, b, output_height=2, output_width=2)

  for i in range(3):
    g(x + i, sets[i])
