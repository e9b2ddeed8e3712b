"""jaxops.resize: hand-derived values from the spec formulas, dtypes, errors, tracing, vmap,
torch's F.interpolate as an oracle, and the pinned deviations of docs/DEVIATIONS.md."""

from __future__ import annotations

import warnings
from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxops
from jaxops import _resize
from tests.test_resize_rounding import _exact_1d

X4 = np.array([0.0, 10.0, 20.0, 30.0])


def _r(x, **kw):
  return np.asarray(jaxops.resize(x, **kw))


# --- hand-derived values (1-D, x = [0, 10, 20, 30]) ---------------------------------------------


class HandDerivedValuesTest(chex.TestCase):
  """Values derived by hand from the spec formulas (1-D, x = [0, 10, 20, 30]), eagerly and under
  jit (chex.variants)."""

  def _r(self, x, **kw):
    return np.asarray(self.variant(lambda v: jaxops.resize(v, **kw))(x))

  @chex.variants(with_jit=True, without_jit=True)
  def test_half_pixel_linear(self):
    # x_original = (y + 0.5) / 2 - 0.5 = -0.25, 0.25, ..., 3.25; outside taps repeat the edge.
    np.testing.assert_allclose(self._r(X4, scales=[2.0], mode="linear"),
                               [0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30])

  @chex.variants(with_jit=True, without_jit=True)
  def test_align_corners_linear(self):
    # x_original = y * (4 - 1) / (7 - 1) = y / 2
    np.testing.assert_allclose(
        self._r(X4, sizes=[7], mode="linear", coordinate_transformation_mode="align_corners"),
        [0, 5, 10, 15, 20, 25, 30])

  @chex.variants(with_jit=True, without_jit=True)
  def test_align_corners_uses_the_fractional_target_length_of_scales(self):
    # scales 0.6 on length 4: output_width 2.4 (float32 0.6 * 4), 2 outputs; x_original =
    # y * 3 / (2.4 - 1): this is ONNX's test_resize_downsample_scales_linear_align_corners.
    width = float(np.float32(0.6)) * 4
    got = self._r(X4, scales=[0.6], mode="linear", coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(got, [0, 10 * 3 / (width - 1)], rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_asymmetric_nearest_modes(self):
    # x_original = y / 2: integers and exact halves.
    for nearest_mode, expected in [("floor", [0, 0, 10, 10, 20, 20, 30, 30]),
                                   ("round_prefer_floor", [0, 0, 10, 10, 20, 20, 30, 30]),
                                   ("round_prefer_ceil", [0, 10, 10, 20, 20, 30, 30, 30]),
                                   ("ceil", [0, 10, 10, 20, 20, 30, 30, 30])]:
      got = self._r(X4, scales=[2.0], coordinate_transformation_mode="asymmetric",
               nearest_mode=nearest_mode)
      np.testing.assert_array_equal(got, expected)

  @chex.variants(with_jit=True, without_jit=True)
  def test_tf_crop_and_resize_and_extrapolation(self):
    # x_original = 0.25 * 3 + y * 0.5 * 3 / 2 = 0.75, 1.5, 2.25
    np.testing.assert_allclose(
        self._r(X4, sizes=[3], roi=[0.25, 0.75], mode="linear",
           coordinate_transformation_mode="tf_crop_and_resize"), [7.5, 15, 22.5])
    # x_original = -1.5 + y * 1.5 = -1.5 (outside: extrapolation_value), 0, 1.5
    np.testing.assert_allclose(
        self._r(X4, sizes=[3], roi=[-0.5, 0.5], mode="linear", extrapolation_value=-1.0,
           coordinate_transformation_mode="tf_crop_and_resize"), [-1, 0, 15])

  @chex.variants(with_jit=True, without_jit=True)
  def test_half_pixel_symmetric(self):
    # scale = float32(0.6); output_width = 2.4..., 2 outputs; offset = 2 * (1 - 2 / width)
    s = float(np.float32(0.6))
    width = s * 4
    xo = 2 * (1 - 2 / width) + (np.arange(2) + 0.5) / s - 0.5
    np.testing.assert_allclose(
        self._r(X4, scales=[0.6], mode="linear",
           coordinate_transformation_mode="half_pixel_symmetric"), 10 * xo, rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_tf_half_pixel_for_nn(self):
    # Resize-11: x_original = (y + 0.5) / 2 = 0.25, 0.75, ..., 3.75 -> rounded half down
    np.testing.assert_array_equal(
        self._r(X4, scales=[2.0], coordinate_transformation_mode="tf_half_pixel_for_nn"),
        [0, 10, 10, 20, 20, 30, 30, 30])

  @chex.variants(with_jit=True, without_jit=True)
  def test_cubic_keys_weights(self):
    # asymmetric, scale 2: x_original = 0.5 at y = 1: taps -1, 0, 1, 2 (edge-clamped) with Keys
    # weights at distances 1.5, 0.5, 0.5, 1.5: a/8 and (a+2)/8 - (a+3)/4 + 1.
    for a in (-0.75, -0.5):
      far, near = a / 8, (a + 2) / 8 - (a + 3) / 4 + 1
      got = self._r(X4, scales=[2.0], mode="cubic", cubic_coeff_a=a,
               coordinate_transformation_mode="asymmetric")
      np.testing.assert_allclose(got[1], far * 0 + near * 0 + near * 10 + far * 20, rtol=1e-12)
      np.testing.assert_allclose(got[::2], X4, rtol=1e-12, atol=1e-12)  # integer coordinates
      got = self._r(X4, scales=[2.0], mode="cubic", cubic_coeff_a=a, exclude_outside=True,
               coordinate_transformation_mode="asymmetric")  # tap -1 dropped, renormalised
      np.testing.assert_allclose(got[1], (near * 10 + far * 20) / (2 * near + far), rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_antialias_linear_downsampling(self):
    # scale 0.5: x_original = 0.5, 2.5; the triangle is stretched by 2 -> 4 taps at distances
    # 1.5, 0.5, 0.5, 1.5 with weights (1 - d / 2) / 2 = 1/8, 3/8, 3/8, 1/8.
    np.testing.assert_allclose(self._r(X4, scales=[0.5], mode="linear", antialias=True),
                               [6.25, 23.75])
    np.testing.assert_allclose(
        self._r(X4, scales=[0.5], mode="linear", antialias=True, exclude_outside=True),
        [(3 / 8 * 10 + 1 / 8 * 20) / (7 / 8), 23.75 * 8 / 7 - 30 / 7])

  @chex.variants(with_jit=True, without_jit=True)
  def test_keep_aspect_ratio_policy(self):
    x = np.arange(8.0).reshape(2, 4)
    assert self._r(x, sizes=[4, 4], keep_aspect_ratio_policy="not_larger").shape == (2, 4)
    assert self._r(x, sizes=[4, 4], keep_aspect_ratio_policy="not_smaller").shape == (4, 8)
    # round_int rounds halves up: scale 5/4 on length 2 gives 2.5 -> 3
    assert self._r(x, sizes=[5, 5], keep_aspect_ratio_policy="not_larger").shape == (3, 5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_output_length_from_float32_scale(self):
    # float32(0.7) * 10 = 6.99999988 -> 6 (ONNX shape inference and the reference; onnxruntime's
    # float32 product rounds to 7).
    assert self._r(np.zeros(10), scales=[0.7]).shape == (6,)
    assert self._r(np.zeros(10), scales=[0.6]).shape == (6,)

  @chex.variants(with_jit=True, without_jit=True)
  def test_axes_any_order_and_negative(self):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    got = self._r(x, scales=[2.0, 0.5], axes=[-1, 1], mode="linear")
    assert got.shape == (2, 1, 8)
    # The reference rejects negative axes (DEVIATIONS.md, Resize 8): give it the positive ones.
    expected = _reference(dict(mode="linear", axes=[2, 1]), x,
                          scales=np.array([2.0, 0.5], np.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # And the same as naming every axis (scale 1 on the others).
    np.testing.assert_allclose(got, self._r(x, scales=[1.0, 0.5, 2.0], mode="linear"),
                               rtol=1e-12)


# --- dtypes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "uint8", "int8",
                                   "int16", "int32", "int64", "uint16"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_dtype_is_preserved(dtype, mode):
  x = jnp.asarray(np.arange(12).reshape(3, 4) % 7, dtype=dtype)
  y = jaxops.resize(x, scales=[2.0, 1.5], mode=mode)
  assert y.dtype == x.dtype and y.shape == (6, 6)


def test_integers_round_half_to_even():
  # asymmetric linear, scale 2: midpoints 1.5 -> 2, 2.5 -> 2 (half to even), 254.5 -> 254
  x = np.array([1, 2, 3, 254, 255], np.uint8)
  got = _r(x, scales=[2.0], mode="linear", coordinate_transformation_mode="asymmetric")
  np.testing.assert_array_equal(got, [1, 2, 2, 2, 3, 128, 254, 254, 255, 255])


def test_integers_saturate():
  import onnx
  from onnx.reference import ReferenceEvaluator

  # Cubic overshoot beyond 255 and below 0 saturates (the reference's saturate_cast).
  x = np.array([[0, 0, 255, 255, 0, 0]], np.uint8)
  got = _r(x, scales=[1.0, 3.0], mode="cubic")
  node = onnx.helper.make_node("Resize", ["X", "", "s"], ["Y"], mode="cubic")
  expected = ReferenceEvaluator(node).run(None, {"X": x, "s": np.array([1, 3], np.float32)})[0]
  np.testing.assert_array_equal(got, expected)
  assert got.max() == 255 and got.min() == 0


@pytest.mark.parametrize("dtype,x64", [(np.uint32, False), (np.int32, False),
                                       (np.uint64, True), (np.int64, True)])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_wide_integers_saturate_without_overflowing_the_bounds(dtype, x64, mode):
  # The saturation bounds were Python ints: uint32 without 64-bit types (and uint64 with them)
  # failed to trace ("An overflow was encountered"). Small values: float32 holds the weighted sums.
  x = np.array([[0, 3, 1000, 4095, 7, 0, 250]], dtype)
  with jax.enable_x64(x64):
    got = _r(x, sizes=[1, 16], mode=mode)  # no source coordinate is an integer (Resize 4)
  want = _reference({"mode": mode}, x, sizes=np.array([1, 16], np.int64))
  np.testing.assert_array_equal(got, want)
  assert got.dtype == x.dtype


def test_wide_integers_without_64_bit_types_compute_in_float32():
  """DEVIATIONS, Resize precision note: int32 linear with 64-bit types on is the reference's
  result; without them it is computed in float32, within float32's rounding of the inputs."""
  x = np.array([100000001, 100000003, 2000000001, 7], np.int32)
  kw = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
  want = _reference(kw, x, sizes=np.array([8], np.int64))
  assert want[:3].tolist() == [100000001, 100000002, 100000003]
  np.testing.assert_array_equal(_r(x, sizes=[8], **kw), want)
  with jax.enable_x64(False):
    got = _r(x, sizes=[8], **kw)
  assert got.dtype == np.int32 and got[:3].tolist() == [100000000] * 3
  np.testing.assert_allclose(got, want, rtol=0, atol=2e9 * 2.0 ** -22)
  # int64 values past int32 would wrap as JAX takes them (2**32 + 5 as 5): refused
  big = np.array([2 ** 32 + 5, 2 ** 32 + 7], np.int64)
  want = _reference(kw, big, sizes=np.array([3], np.int64))
  assert want.tolist() == [2 ** 32 + 5, 2 ** 32 + 6, 2 ** 32 + 7]
  np.testing.assert_array_equal(_r(big, sizes=[3], **kw), want)
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match=r"jaxops.resize: argument `x` must be within int32's "
                       r"range while JAX's 64-bit types are off"):
      _r(big, sizes=[3], **kw)
    assert _r(big - 2 ** 32, sizes=[3], **kw).tolist() == [5, 6, 7]


@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, np.int32])
def test_nearest_copies_any_dtype_exactly(dtype):
  x = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
  got = _r(x, scales=[1.0, 2.0], coordinate_transformation_mode="asymmetric")
  np.testing.assert_array_equal(got, np.repeat(x, 2, axis=1))
  assert got.dtype == x.dtype


def test_half_types_round_once():
  # float16 in, float16 out: 1 + 2**-10 is the float16 after 1, the exact midpoint here.
  x = jnp.asarray([1.0, 1.0 + 2**-9], jnp.float16)
  got = jaxops.resize(x, scales=[2.0], mode="linear", coordinate_transformation_mode="asymmetric")
  assert got.dtype == jnp.float16
  np.testing.assert_array_equal(np.asarray(got, np.float32),
                                np.float16([1.0, 1.0 + 2**-10, 1.0 + 2**-9, 1.0 + 2**-9]))


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,exc,match", [
    (dict(scales=[2.0], sizes=[3]), ValueError, r"exactly one of `sizes` and `scales`.*both"),
    (dict(), ValueError, r"exactly one of `sizes` and `scales`.*neither"),
    (dict(scales=[2.0, 2.0]), ValueError, r"resize: argument `scales` must be a 1-D sequence of 1"),
    (dict(scales=[0.0]), ValueError, r"`scales` must be finite numbers > 0"),
    (dict(sizes=[-1]), ValueError, r"`sizes` must be integers >= 0"),
    (dict(sizes=[2], mode="bilinear"), ValueError,
     r"`mode` must be one of 'nearest', 'linear', 'cubic'; got 'bilinear'"),
    (dict(sizes=[2], roi=[0.0, 0.5, 1.0], coordinate_transformation_mode="tf_crop_and_resize"),
     ValueError, r"`roi` must be a 1-D array of 2 values"),
    (dict(sizes=[2], antialias=True), ValueError, r"`antialias` must be False with mode="),
    (dict(sizes=[2, 2], axes=[0, -1]), ValueError, r"`axes` must be axes without repeats"),
    (dict(sizes=[2], axes=[1]), ValueError, r"`axes` must be axes in \[-1, 1\)"),
    (dict(sizes=[2], nearest_mode="round"), ValueError, r"`nearest_mode` must be one of"),
    (dict(sizes=[2], keep_aspect_ratio_policy="fit"), ValueError,
     r"`keep_aspect_ratio_policy` must be one of 'stretch', 'not_larger', 'not_smaller'"),
    # ignored silently before (found by a fuzzer); onnxruntime refuses the pair as well
    (dict(scales=[0.5], keep_aspect_ratio_policy="not_larger"), ValueError,
     r"`keep_aspect_ratio_policy` must be \"stretch\" with `scales`"),
])
def test_errors(kw, exc, match):
  with pytest.raises(exc, match=match):
    jaxops.resize(X4, **kw)


def test_linear_rejects_bool():
  """T1 allows bool, and the spec does not say what interpolating it means (neither oracle runs
  it): linear and cubic refuse it (docs/DEVIATIONS.md, Resize 17)."""
  with pytest.raises(TypeError, match=r"mode='linear' needs a floating, complex or integer `x`; "
                                      r"got dtype bool"):
    jaxops.resize(np.array([True, False]), scales=[2.0], mode="linear")


@pytest.mark.parametrize("kw", [
    dict(mode="linear"),
    dict(mode="cubic", exclude_outside=True),
    dict(mode="linear", antialias=True),
    dict(mode="cubic", coordinate_transformation_mode="tf_crop_and_resize",
         roi=[0.1, -0.4, 0.9, 1.3], extrapolation_value=7.0),
])
def test_complex_linear_and_cubic_resize_each_part_with_the_same_weights(kw):
  """Resize's T1 allows complex types, and linear and cubic are real-linear maps: the real and
  imaginary parts interpolated with the same weights (the imaginary part of the fill 0). jaxops
  refused them before (found by a fuzz). The oracle is onnx.reference on each part, as floats
  (on complex inputs it drops the imaginary part, even for nearest; onnxruntime has no complex
  Resize: docs/DEVIATIONS.md, Resize 17)."""
  rng = np.random.default_rng(8)
  x = (rng.standard_normal((5, 6)) + 1j * rng.standard_normal((5, 6))).astype(np.complex64)
  sizes = np.array([9, 4], np.int64)
  node_kw = {k: int(v) if isinstance(v, bool) else v for k, v in kw.items() if k != "roi"}
  extra = {"roi": np.asarray(kw["roi"], np.float32)} if "roi" in kw else {}
  want_re = _reference(node_kw, x.real.copy(), sizes=sizes, **extra)
  fill = dict(node_kw, extrapolation_value=0.0) if "extrapolation_value" in kw else node_kw
  want_im = _reference(fill, x.imag.copy(), sizes=sizes, **extra)
  got = jaxops.resize(x, sizes=list(sizes), **kw)
  assert got.dtype == np.complex64
  np.testing.assert_allclose(np.asarray(got).real, want_re, rtol=2e-6, atol=2e-6)
  np.testing.assert_allclose(np.asarray(got).imag, want_im, rtol=2e-6, atol=2e-6)


def test_tables_past_the_hosts_memory_are_refused_before_they_are_built():
  """An output that fits in memory can still need static tap tables that do not: a length-4
  axis resized to 2**31 (an 8 GiB output) built about 17.5 GB of NumPy tables before the
  process was killed for memory (found by a fuzz). A ValueError naming the tables, raised
  before anything is allocated; a long axis that fits still runs."""
  x = np.ones((1, 1, 4, 1), np.float32)
  with pytest.raises(ValueError, match=r"^jaxops.resize: the output would have shape \(1, 1, "
                                       r"2147483648, 1\), and its static tap tables"):
    jaxops.resize(x, sizes=(1, 1, 2 ** 31, 1), mode="linear")
  assert jaxops.resize(x, sizes=(1, 1, 2 ** 16, 1), mode="linear").shape == (1, 1, 2 ** 16, 1)


def test_traced_scales_is_a_clear_type_error():
  with pytest.raises(TypeError, match=r"resize: argument `scales` decides the output shape"):
    jax.jit(lambda x, s: jaxops.resize(x, scales=s))(X4, jnp.array([2.0]))


# --- tracing ------------------------------------------------------------------------------------


def test_same_static_configuration_is_traced_once(monkeypatch):
  # _static_passes runs only while _resize_jit traces: chex.assert_max_traces counts those runs
  # and fails on one more than allowed.
  chex.clear_trace_counter()
  monkeypatch.setattr(_resize, "_static_passes", chex.assert_max_traces(_resize._static_passes,
                                                                        n=1))
  x = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
  for _ in range(3):
    jaxops.resize(x, sizes=[41], axes=[1], mode="cubic", cubic_coeff_a=-0.61)  # new objects
  jaxops.resize(x, sizes=np.array([41]), axes=(-1,), mode="cubic", cubic_coeff_a=-0.61,
                nearest_mode="ceil")  # equal configuration (nearest_mode unused by cubic)
  with pytest.raises(AssertionError, match="traced > 1 times"):
    jaxops.resize(x, sizes=[42], axes=[1], mode="cubic", cubic_coeff_a=-0.61)  # a new one


def test_traced_and_static_roi_match_reference():
  x = np.random.default_rng(2).standard_normal((5, 6))
  roi = np.array([0.1, -0.2, 0.8, 0.9])
  sizes = np.array([4, 7])
  for mode in ("nearest", "linear", "cubic"):
    kw = dict(mode=mode, extrapolation_value=3.0,
              coordinate_transformation_mode="tf_crop_and_resize")
    expected = _reference(kw, x, roi=roi, sizes=sizes)
    static = _r(x, roi=roi, sizes=sizes, **kw)
    traced = np.asarray(jax.jit(lambda r, kw=kw: jaxops.resize(x, roi=r, sizes=sizes, **kw))(roi))
    # The reference computes cubic weights in float32 (DEVIATIONS.md, precision note).
    tol = 2e-6 if mode == "cubic" else 1e-12
    np.testing.assert_allclose(static, expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(traced, expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(traced, static, rtol=1e-12, atol=1e-12)  # and with each other


@pytest.mark.parametrize("dtype,x64", [("float32", True), ("float32", False),
                                       ("float64", True)])
@pytest.mark.parametrize("shape,sizes", [((4, 8), (8, 4)), ((7, 10), (8, 8))])
def test_traced_full_box_is_not_extrapolated(dtype, x64, shape, sizes):
  # roi [0, 0, 1, 1] samples x_original = y * (n - 1) / (len - 1): 0 and exactly n - 1 at the
  # ends, inside the input. Under jit, y * (n - 1) / (len - 1) in float32 becomes
  # 7 * 3 * float32(1 / 7) = 3.0000002 for 4 -> 8, which was extrapolated (-99).
  x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
  roi = np.array([0, 0, 1, 1], dtype)
  for mode in ("nearest", "linear", "cubic"):
    kw = dict(mode=mode, extrapolation_value=-99.0,
              coordinate_transformation_mode="tf_crop_and_resize")
    if mode == "nearest":
      kw["nearest_mode"] = "floor"  # also sensitive to x_original one step below an integer
    expected = _reference(kw, x, roi=roi, sizes=np.array(sizes))
    assert not np.any(expected == -99.0)
    with jax.enable_x64(x64):
      got = np.asarray(jax.jit(lambda r, kw=kw: jaxops.resize(x, roi=r, sizes=sizes, **kw))(roi))
    assert got.dtype == x.dtype
    tol = 1e-5 if dtype == "float32" else 2e-6  # cubic weights: float32 in the reference
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)
    np.testing.assert_array_equal(got[::sizes[0] - 1, ::sizes[1] - 1], x[::shape[0] - 1,
                                                                         ::shape[1] - 1])


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_traced_float32_crop_coordinates_are_rounded_once(mode):
  """A zoomed crop far from the origin with a traced float32 roi (x64 off): the coordinates are
  the float64 formula's rounded once (error-free sums and products), so the samples are as
  close to the float64 reference as onnxruntime's float32 kernel (before: 5x further, from a
  plain float32 formula and a snap to half-integers within 4 units of rounding); and an exact
  half-integer coordinate still lands exactly (nearest ties, as the float64 reference)."""
  import onnx
  import onnxruntime as ort

  x = np.random.default_rng(1).standard_normal((1, 1, 512, 512)).astype(np.float32)
  roi = np.array([0, 0, 0.9, 0.93, 1, 1, 0.93, 0.95], np.float32)
  sizes = np.array([1, 1, 96, 96])
  kw = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize")
  truth = _reference(kw, x.astype(np.float64), roi=roi.astype(np.float64), sizes=sizes)
  node = onnx.helper.make_node("Resize", ["X", "roi", "", "sizes"], ["Y"], **kw)
  graph = onnx.helper.make_graph(
      [node], "g",
      [onnx.helper.make_tensor_value_info(n, t, None) for n, t in
       (("X", onnx.TensorProto.FLOAT), ("roi", onnx.TensorProto.FLOAT),
        ("sizes", onnx.TensorProto.INT64))],
      [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
  model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
  theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, {"X": x, "roi": roi, "sizes": sizes})[0]
  with jax.enable_x64(False):
    ours = np.asarray(jax.jit(lambda a, r: jaxops.resize(a, roi=r, sizes=(1, 1, 96, 96), **kw))(
        x, roi))
  if mode == "nearest":  # a pixel picked across a rounding boundary moves by a whole pixel
    assert np.mean(ours != truth.astype(np.float32)) <= max(
        np.mean(theirs != truth.astype(np.float32)), 1e-3)
  else:
    err = np.max(np.abs(ours - truth))
    assert err <= 1.25 * np.max(np.abs(theirs - truth)) and err < 1.5e-4, err
  # roi [0, 1] on 4 -> 7: x_original = o / 2, half-integers exactly; nearest ties as the reference
  x4 = np.arange(4.0, dtype=np.float32)
  full = np.array([0.0, 1.0], np.float32)
  for nearest_mode in ("round_prefer_floor", "round_prefer_ceil"):
    kw1 = dict(mode="nearest", nearest_mode=nearest_mode,
               coordinate_transformation_mode="tf_crop_and_resize")
    with jax.enable_x64(False):
      got = np.asarray(jax.jit(lambda r, kw1=kw1: jaxops.resize(x4, roi=r, sizes=(7,), **kw1))(
          full))
    np.testing.assert_array_equal(got, _reference(kw1, x4, roi=full, sizes=np.array([7])))


def test_compensated_crop_coordinates_are_the_exact_value_rounded_once():
  """_resize._compensated on this backend, under jit, against exact rational arithmetic: the
  float64 ``g`` and float32 ``start``/``end`` as given, ``start * n1 + g * (end - start)`` rounded
  once to float32 (half a unit), where the plain float32 formula is off by thousands of units.
  A backend that fused the error-free steps (an FMA, a reassociation) would fail here."""
  rng = np.random.default_rng(4)
  worst_plain = 0.0
  cases = []
  for _ in range(60):
    n1 = int(rng.choice([5, 511, 2047, 65535, 2 ** 24 - 1]))
    out = int(rng.integers(2, 40))
    g = np.arange(out, dtype=np.float64) * n1 / (out - 1)
    scale = 10.0 ** rng.uniform(-3, 3)
    start, end = (np.float32(v) for v in rng.uniform(-1, 1, 2) * scale)
    cases.append((n1, g, start, end))

  def run(ends):  # the 60 cases in one program (one each spent the test compiling)
    return [_resize._compensated(g, n1, a, b) for (n1, g, _, _), (a, b) in zip(cases, ends)]

  with jax.enable_x64(False):
    gots = jax.jit(run)([(start, end) for _, _, start, end in cases])
  for (n1, g, start, end), got in zip(cases, gots):
    got = np.asarray(got, np.float64)
    # the plain float32 formula (NumPy's float32 arithmetic: one rounding per operation)
    plain = (start * np.float32(n1) + g.astype(np.float32) * (end - start)).astype(np.float64)
    out = len(g)
    exact = [Fraction(float(start)) * n1 + Fraction(float(v)) * (Fraction(float(end)) -
                                                                  Fraction(float(start)))
             for v in g]
    ulp = np.spacing(np.abs(np.array([float(e) for e in exact], np.float32)))
    err = np.array([abs(Fraction(float(a)) - e) for a, e in zip(got, exact)], np.float64) / ulp
    assert np.all(err <= 0.51), (n1, out, start, end, err.max())
    worst_plain = max(worst_plain, float(np.max(np.abs(plain - np.array(
        [float(e) for e in exact])) / ulp)))
  assert worst_plain > 4  # the formula it replaces was off by several units


def test_traced_float32_roi_too_large_for_the_split_keeps_the_plain_value():
  # 4097 * 1e35 overflows float32: the coordinates fall back to the plain formula's (finite)
  # values, as float64 computes them (the first sample at 0, the others extrapolated)
  x = np.arange(6.0, dtype=np.float32)
  roi = np.array([0.0, 1e35], np.float32)
  kw = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-7.0)
  with jax.enable_x64(False):
    got = np.asarray(jax.jit(lambda r: jaxops.resize(x, roi=r, sizes=(5,), **kw))(roi))
  np.testing.assert_array_equal(got, [0.0, -7.0, -7.0, -7.0, -7.0])
  with warnings.catch_warnings():  # the reference casts its huge coordinates to integers
    warnings.simplefilter("ignore", RuntimeWarning)
    want = _reference(kw, x.astype(np.float64), roi=roi.astype(np.float64), sizes=np.array([5]))
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("coord,n,out_len", [("asymmetric", 3, 7), ("half_pixel", 5, 12),
                                             ("asymmetric", 6, 4)])
def test_float64_cubic_is_the_closed_form(coord, n, out_len):
  # onnx.reference evaluates its cubic weights in float32 (NumPy 2 promotes its float32 `A`
  # times a Python float to float32), so its float64 results are off by 1e-7 to 1e-5; jaxops'
  # float64 tables are exact to float64 rounding. The differential sweep therefore runs the
  # reference with `A` as a Python float (test_resize_differential.py).
  a = float(np.float32(-0.797))  # attributes are float32 in ONNX
  x = np.random.default_rng(n).standard_normal(n)
  want = np.array([float(v) for v in _exact_1d([Fraction(v) for v in x], out_len, "cubic",
                                                Fraction(a), False, coord)])
  got = _r(x, sizes=[out_len], mode="cubic", coordinate_transformation_mode=coord,
           cubic_coeff_a=a)
  assert got.dtype == np.float64
  np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
  ref = _reference(dict(mode="cubic", coordinate_transformation_mode=coord, cubic_coeff_a=a), x,
                   sizes=np.array([out_len]))
  assert np.abs(ref - want).max() > 1e-9  # the reference's float32 weights (why the sweep
  np.testing.assert_allclose(ref, want, rtol=0, atol=1e-5)  # patches them)


def test_vmap_over_images_matches_torch():
  import torch
  F = torch.nn.functional
  x = np.random.default_rng(3).standard_normal((4, 3, 5, 6)).astype(np.float32)
  f = jax.vmap(lambda im: jaxops.resize(im, sizes=[9, 4], axes=[1, 2], mode="linear",
                                        coordinate_transformation_mode="pytorch_half_pixel"))
  expected = F.interpolate(torch.from_numpy(x), size=(9, 4), mode="bilinear",
                           align_corners=False).numpy()
  np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-5, atol=1e-6)


def test_vmap_over_roi_boxes_matches_reference():
  import onnx
  from onnx.reference import ReferenceEvaluator

  x = np.random.default_rng(4).standard_normal((1, 2, 6, 7)).astype(np.float32)
  boxes = np.array([[0.0, 0.0, 0.5, 0.5], [0.25, 0.125, 1.0, 0.875], [0.5, -0.25, 1.25, 0.75]],
                   np.float32)
  f = jax.vmap(lambda r: jaxops.resize(x, sizes=[3, 4], roi=r, axes=[2, 3], mode="linear",
                                       coordinate_transformation_mode="tf_crop_and_resize",
                                       extrapolation_value=-2.0))
  got = np.asarray(f(boxes))
  node = onnx.helper.make_node("Resize", ["X", "roi", "", "sizes"], ["Y"], mode="linear",
                               axes=[2, 3], coordinate_transformation_mode="tf_crop_and_resize",
                               extrapolation_value=-2.0)
  ref = ReferenceEvaluator(node)
  for b, box in enumerate(boxes):
    expected = ref.run(None, {"X": x, "roi": box, "sizes": np.array([3, 4])})[0]
    np.testing.assert_allclose(got[b], expected, rtol=1e-5, atol=1e-6)


# --- torch F.interpolate as an oracle -----------------------------------------------------------


@pytest.mark.parametrize("mode,torch_mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(11, 5), (3, 9)])
def test_matches_torch_interpolate(mode, torch_mode, align_corners, size):
  import torch
  x = np.random.default_rng(5).standard_normal((2, 3, 7, 6))
  coord = "align_corners" if align_corners else "pytorch_half_pixel"
  got = _r(x, sizes=list(size), axes=[2, 3], mode=mode, coordinate_transformation_mode=coord)
  expected = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=torch_mode,
                                             align_corners=align_corners).numpy()
  np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_antialias_matches_torch_interpolate():
  import torch
  x = np.random.default_rng(6).standard_normal((1, 2, 16, 12))
  for mode, torch_mode in (("linear", "bilinear"), ("cubic", "bicubic")):
    # torch (like Pillow) drops taps outside the image and renormalises (exclude_outside), and
    # its antialiased bicubic uses a = -0.5.
    got = _r(x, sizes=[5, 4], axes=[2, 3], mode=mode, antialias=True, exclude_outside=True,
             cubic_coeff_a=-0.5, coordinate_transformation_mode="pytorch_half_pixel")
    expected = torch.nn.functional.interpolate(torch.from_numpy(x), size=(5, 4),
                                               mode=torch_mode, align_corners=False,
                                               antialias=True).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# --- deviations (docs/DEVIATIONS.md) ------------------------------------------------------------


def _reference(node_kw: dict, x: np.ndarray, **inputs) -> np.ndarray:
  import onnx
  from onnx.reference import ReferenceEvaluator

  names = ["X", "roi", "scales", "sizes"]
  ins = [n if n == "X" or n in inputs else "" for n in names]
  while ins[-1] == "":
    ins.pop()
  node = onnx.helper.make_node("Resize", ins, ["Y"], **node_kw)
  return ReferenceEvaluator(node).run(None, {"X": x, **inputs})[0]


def test_deviation_pytorch_half_pixel_one_output_pixel():
  # Spec: length_resized > 1 ? ... : 0. The reference uses -0.5, which cubic interpolation
  # turns into a*1.5**3... weights over the edge: a/8 * x[1] = -0.9375 here.
  kw = dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")
  got = _r(X4, sizes=[1], **kw)
  np.testing.assert_allclose(got, [0.0])  # x_original = 0 -> x[0]
  np.testing.assert_allclose(_reference(kw, X4, sizes=np.array([1])), [-0.9375])
  # With 49 inputs, the reference's output_width (1/49)*49 is not exactly 1, so it even takes
  # (0.5)/scale - 0.5 = 24; the spec gives 0.
  x49 = np.arange(49.0)
  kw = dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
  np.testing.assert_allclose(_r(x49, sizes=[1], **kw), [0.0])
  np.testing.assert_allclose(_reference(kw, x49, sizes=np.array([1])), [24.0])


def test_deviation_tf_crop_and_resize_one_output_pixel():
  # Spec: length_resized == 1 -> 0.5 * (start + end) * (length - 1) = 0.75 * 48 = 36. The
  # reference's output_width (1/49)*49 != 1 sends it to the other branch: start * 48 = 24.
  x49 = np.arange(49.0)
  kw = dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize")
  roi = np.array([0.5, 1.0])
  np.testing.assert_allclose(_r(x49, sizes=[1], roi=roi, **kw), [36.0])
  np.testing.assert_allclose(_reference(kw, x49, roi=roi, sizes=np.array([1])), [24.0])


def test_deviation_align_corners_with_keep_aspect_ratio_policy():
  # sizes [4, 4] not_larger on (3, 5): scale 0.8, output lengths round(2.4) = 2 and 4. The
  # resized tensor's lengths are 2 and 4; align_corners maps y to y * (5 - 1) / (4 - 1)
  # along the last axis: the corners align. The reference divides by the fractional
  # 0.8 * 5 - 1 = 3 (same here) but by 0.8 * 3 - 1 = 1.4 on the first axis (rows 0 and 2/1.4).
  x = np.arange(15.0).reshape(3, 5)
  kw = dict(mode="linear", coordinate_transformation_mode="align_corners",
            keep_aspect_ratio_policy="not_larger")
  got = _r(x, sizes=[4, 4], **kw)
  cols = np.arange(4) * 4 / 3
  np.testing.assert_allclose(got, np.stack([cols, cols + 10]), rtol=1e-12)
  ref = _reference(kw, x, sizes=np.array([4, 4]))
  np.testing.assert_allclose(ref[1], cols + 5 * 2 / 1.4, rtol=1e-12)


def test_deviation_tap_window_one_rounding_step_above_an_integer():
  # sizes [1, 6] not_larger on (2, 5): scale 0.5, output (1, 3). half_pixel_symmetric on the
  # last axis: output_width 2.5, offset 2.5 * (1 - 3 / 2.5) = -0.5, x_original = 2y exactly.
  # The reference's float64 offset is -0.4999999999999999, its x_original[0] one step above
  # 0, and its tap window (from x + 2 rounded to 2.0) one tap to the left: with
  # exclude_outside its cubic weight lands outside and the output collapses towards 0.
  x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0, 7.0]])
  kw = dict(mode="cubic", coordinate_transformation_mode="half_pixel_symmetric",
            keep_aspect_ratio_policy="not_larger", exclude_outside=True)
  got = _r(x, sizes=[1, 6], **kw)
  # rows: x_original = 0.5 between the two rows (symmetric weights) -> the row mean
  np.testing.assert_allclose(got, [[2.0, 4.0, 6.0]], rtol=1e-12)
  ref = _reference(kw, x, sizes=np.array([1, 6]))
  assert abs(ref[0, 0] - 2.0) > 0.5


def test_deviation_exclude_outside_with_nearest_is_ignored():
  # ceil rounding at x_original = 3.25 (half_pixel, y = 7) picks pixel 4, outside the input: the reference
  # drops its only weight and divides 0 by its guard, giving 0; jaxops clamps to the edge pixel
  # (exclude_outside renormalises interpolation weights; nearest has a single sample).
  kw = dict(mode="nearest", nearest_mode="ceil", exclude_outside=1)
  got = _r(X4, scales=[2.0], nearest_mode="ceil", exclude_outside=True)
  assert got[-1] == 30.0
  ref = _reference(kw, X4, scales=np.array([2.0], np.float32))
  assert ref[-1] == 0.0


def test_deviation_output_length_ignores_roi():
  # Spec summary: floor(input_dimension * (roi_end - roi_start) * scale). The roi input "only
  # takes effect" in tf_crop_and_resize's coordinates; ONNX shape inference, the reference and
  # onnxruntime all give floor(scale * length), and so does jaxops (a traced roi cannot decide a
  # shape). scale 1 on length 4 with roi [0, 0.5] stays 4 samples of the first half.
  got = _r(X4, scales=[1.0], roi=[0.0, 0.5], mode="linear",
           coordinate_transformation_mode="tf_crop_and_resize")
  np.testing.assert_allclose(got, [0, 5, 10, 15])  # x_original = y * 0.5 * 3 / 3


def test_deviation_infinity_is_kept():
  # Nearest copies the pixel. The reference multiplies a zero weight into the infinity of the
  # other tap of its two-tap nearest window (NaN), and its saturate_cast clips inf to the
  # largest finite float.
  x = np.array([np.inf, 1.0], np.float32)
  got = _r(x, scales=[2.0], coordinate_transformation_mode="asymmetric")
  np.testing.assert_array_equal(got, [np.inf, np.inf, 1, 1])
  with np.errstate(invalid="ignore"):
    ref = _reference(dict(mode="nearest", coordinate_transformation_mode="asymmetric"), x,
                     scales=np.array([2.0], np.float32))
  assert np.isnan(ref[0]) and ref[1] == np.finfo(np.float32).max


# --- output size and index arithmetic -----------------------------------------------------------


def test_output_too_big_is_refused_before_allocation():
  # 2**20 x 2**20 float32: 2**40 elements, 2**42 bytes, more than any device here holds. The
  # check runs on the static configuration, eagerly and while tracing under jit.
  x = jnp.ones((2, 2), jnp.float32)
  match = (r"jaxops.resize: the output would have shape \(1048576, 1048576\) and dtype float32: "
           r"1099511627776 elements, 4398046511104 bytes")
  with pytest.raises(ValueError, match=match):
    jaxops.resize(x, sizes=[2**20, 2**20])
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda v: jaxops.resize(v, scales=[2.0**19, 2.0**19], mode="linear"))(x)


def test_gathers_index_one_axis_at_a_time():
  # Index arithmetic past 2**31 elements: every gather of the lowered program takes a 1-D index
  # vector (per-axis positions, each below its axis' length), never a flat index into the whole
  # array, so no index grows with the array's size; int32 suffices unless one axis is longer
  # than 2**31 - 1 (then the tables are int64: _resize._index_dtype; the kernel's tables are int64).
  import re

  x = jnp.ones((3, 40, 50), jnp.float32)
  for kw in (dict(mode="nearest"), dict(mode="linear"), dict(mode="cubic", antialias=True)):
    text = jax.jit(lambda v, kw=kw: jaxops.resize(v, sizes=[37, 61], axes=[1, 2], **kw)).lower(
        x).as_text()
    gathers = re.findall(r'"?stablehlo\.gather"?.*?:\s*\(tensor<([0-9x]+)x\w+>, tensor<([0-9x]+)x'
                         r'(i\d+)>\)', text)
    assert gathers, "no gather found"
    for _, idx_shape, idx_type in gathers:
      dims = [int(d) for d in idx_shape.split("x")]
      assert idx_type in ("i32", "i64") and dims[0] <= 61 and len(dims) <= 2, (idx_shape, idx_type)
  assert _resize._index_dtype(2**31 - 1) == np.int32 and _resize._index_dtype(2**31) == np.int64


def test_deviation_float32_roi_is_read_exactly():
  """docs/DEVIATIONS.md, Resize 13: roi start float32(0.2) on a length-6 axis gives the
  coordinate 5 * 0.20000000298 = 1.0000000149 (exact), ceiling 2; onnxruntime and onnx.reference
  round it to 1.0 in float32 and read pixel 1."""
  import onnxruntime as ort
  from onnx import TensorProto, helper
  from onnx.reference import ReferenceEvaluator

  x = (np.arange(6, dtype=np.float32) * 10).reshape(1, 6)
  roi = np.array([0, 0.2, 1, 0.8], np.float32)
  scales = np.array([1, 0.75], np.float32)
  first = Fraction(float(roi[1])) * 5
  assert first > 1 and int(np.ceil(float(first))) == 2
  kw = dict(mode="nearest", nearest_mode="ceil",
            coordinate_transformation_mode="tf_crop_and_resize")
  got = np.asarray(jaxops.resize(x, roi=roi, scales=scales, **kw))
  assert got[0, 0] == 20.0
  node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], **kw)
  feeds = {"x": x, "roi": roi, "scales": scales}
  assert ReferenceEvaluator(node).run(None, feeds)[0][0, 0] == 10.0

  def onnxruntime(node, feeds):
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]

  assert onnxruntime(node, feeds)[0, 0] == 10.0
  # a static roi must be finite; a traced NaN one extrapolates, where onnxruntime reads pixels
  # (nearest, linear: from the input's values 0-50) or gives 0 (cubic), all finite
  with pytest.raises(ValueError, match=r"jaxops.resize: argument `roi` must be finite"):
    jaxops.resize(x, roi=[0, np.nan, 1, 0.8], scales=scales, **kw)
  nan_roi = np.array([0, np.nan, 1, 0.8], np.float32)
  for mode in ("nearest", "linear", "cubic"):
    y = jax.jit(lambda r: jaxops.resize(x, roi=r, scales=scales, mode=mode,
                                        coordinate_transformation_mode="tf_crop_and_resize",
                                        extrapolation_value=-1.0))(jnp.asarray(nan_roi))
    np.testing.assert_array_equal(np.asarray(y), -1.0)
    theirs = onnxruntime(helper.make_node(
        "Resize", ["x", "roi", "scales"], ["y"], mode=mode, extrapolation_value=-1.0,
        coordinate_transformation_mode="tf_crop_and_resize"), feeds | {"roi": nan_roi})
    assert np.all((theirs >= 0) & (theirs <= 50)), (mode, theirs)


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "pytorch_half_pixel",
                                   "half_pixel_symmetric"])
def test_linear_outputs_past_an_edge_are_the_edge_pixel_exactly(coord):
  """Where the coordinate lies past the first or last pixel both linear taps read that pixel
  with weights (1 - r, r), and (1 - r) * v + r * v in float32 came out an ulp off v for 93 of
  2436 such outputs (found by a graph fuzz: onnxruntime, which clamps the coordinate, gave v,
  and a MaxPool after the Resize named another maximum on what should have been a tie).
  onnx.reference computes in float64 and gives v; so does jaxops now (2-D: both passes)."""
  rng = np.random.default_rng(17)
  for scales in ([1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 2.5, 1.5], [1.0, 1.0, 4.0, 1.25]):
    x = rng.standard_normal((1, 3, 5, 7)).astype(np.float32)
    kw = dict(mode="linear", coordinate_transformation_mode=coord)
    want = _reference(kw, x, scales=np.asarray(scales, np.float32))
    got = np.asarray(jaxops.resize(x, scales=scales, **kw))
    assert got.shape == want.shape
    pixels = set(x.ravel().tolist())
    on_pixel = np.isin(want, list(pixels))  # outputs that are an input pixel exactly
    assert on_pixel.sum() >= 3  # a corner at least, in each channel
    np.testing.assert_array_equal(got[on_pixel], want[on_pixel])
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
