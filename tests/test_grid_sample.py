"""grid_sample: hand-derived values, non-finite grids, dtypes, errors, the ONNX adapters' version
rules, the documented deviations, gradients (check_grads and torch autograd), jit/vmap/retrace."""

from __future__ import annotations

import functools
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads
from onnx import helper
from onnx.reference import ReferenceEvaluator

import jaxops
from _ulps import compiled, half_pixel_grid
from jaxops.onnx import Backend

X = np.arange(12.0).reshape(1, 1, 3, 4)  # rows 0..2, columns 0..3; value 4 * row + col


def _grid(points):
  """A (1, 1, n, 2) grid of (x, y) normalised points."""
  return np.asarray(points, np.float64).reshape(1, 1, -1, 2)


def _norm(u, length, align_corners):
  """The normalised coordinate of pixel coordinate u (the inverse of the spec's maps)."""
  return 2 * u / (length - 1) - 1 if align_corners else (2 * u + 1) / length - 1


class TestValues(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_bilinear_midpoints(self):
    # Pixel (row 0.5, col 1.5) is the mean of rows 0-1 and columns 1-2: (1 + 2 + 5 + 6) / 4.
    for ac in (False, True):
      g = _grid([[_norm(1.5, 4, ac), _norm(0.5, 3, ac)]])
      y = self.variant(lambda a, b, ac=ac: jaxops.grid_sample(a, b, align_corners=ac))(X, g)
      np.testing.assert_allclose(np.asarray(y).ravel(), [3.5], rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_nearest_rounds_half_to_even(self):
    # Column 0.5 rounds to 0 and 1.5 to 2 (halves to even), row 1: values 4 and 6.
    g = _grid([[_norm(0.5, 4, True), _norm(1.0, 3, True)],
               [_norm(1.5, 4, True), _norm(1.0, 3, True)]])
    y = self.variant(lambda a, b: jaxops.grid_sample(a, b, mode="nearest", align_corners=True))(
        X, g)
    np.testing.assert_array_equal(np.asarray(y).ravel(), [4.0, 6.0])

  @chex.variants(with_jit=True, without_jit=True)
  def test_padding_modes_far_outside(self):
    # Column -7.25 (align_corners): zeros reads nothing; border clips to column 0; reflection
    # about 0 and 3 (span 3): |-7.25| = 7.25 = 2 * 3 + 1.25, an even number of flips: 1.25,
    # interpolated between columns 1 and 2 of row 2: 8 + 1.25.
    g = _grid([[_norm(-7.25, 4, True), 1.0]])
    f = self.variant(lambda a, b, p: jaxops.grid_sample(a, b, padding_mode=p, align_corners=True),
                     static_argnums=2)
    np.testing.assert_allclose(np.asarray(f(X, g, "zeros")).ravel(), [0.0], atol=0)
    np.testing.assert_allclose(np.asarray(f(X, g, "border")).ravel(), [8.0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(f(X, g, "reflection")).ravel(), [9.25], rtol=1e-12)

  def test_cubic_at_pixel_centres_is_exact_and_between_is_keys(self):
    # At integer pixel coordinates Keys' kernel is (0, 1, 0, 0): the pixel itself.
    g = _grid([[_norm(2.0, 4, True), _norm(1.0, 3, True)]])
    y = jaxops.grid_sample(X, g, mode="cubic", align_corners=True)
    np.testing.assert_allclose(np.asarray(y).ravel(), [6.0], rtol=1e-12)
    # Halfway between columns 1 and 2 of a row that is linear in the column (4 * row + col),
    # with all four taps inside: the weights sum to 1 and are symmetric, so the value is 5.5.
    g = _grid([[_norm(1.5, 4, True), _norm(1.0, 3, True)]])
    y = jaxops.grid_sample(X, g, mode="cubic", align_corners=True)
    np.testing.assert_allclose(np.asarray(y).ravel(), [5.5], rtol=1e-12)

  def test_3d_and_1d(self):
    x = np.arange(24.0).reshape(1, 1, 2, 3, 4)  # value 12 d + 4 h + w
    g = np.array([_norm(1.5, 4, True), _norm(1.0, 3, True), _norm(0.5, 2, True)])
    y = jaxops.grid_sample(x, g.reshape(1, 1, 1, 1, 3), align_corners=True)
    np.testing.assert_allclose(np.asarray(y).ravel(), [6 + 4 + 1.5], rtol=1e-12)
    x1 = np.arange(5.0).reshape(1, 1, 5)
    y1 = jaxops.grid_sample(x1, np.array([[[0.25]]]), align_corners=True)  # u = 2.5
    np.testing.assert_allclose(np.asarray(y1).ravel(), [2.5], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reflection_at_exact_multiples_of_the_span_follows_torch(dtype):
  # A coordinate an exact number of spans from the border reflects onto the border that the
  # parity of floor(v / span) names. XLA turned v / span into v * (1 / span): in float32, at
  # L = 41 or 42 for example, v = 32 spans came out just under 32 and reflected onto the other
  # border. torch divides once.
  for length in (41, 42, 47, 48, 100):
    for align_corners in (False, True):
      lo, span = (0.0, length - 1.0) if align_corners else (-0.5, float(length))
      u = lo + span * np.arange(-40.0, 41.0)                  # pixel coordinates
      g = (2 * u / (length - 1) - 1) if align_corners else ((2 * u + 1) / length - 1)
      grid = np.stack([np.zeros_like(g), g], -1).astype(dtype)[None, :, None, :]  # (1, 81, 1, 2)
      x = np.arange(length, dtype=dtype).reshape(1, 1, length, 1)
      kw = dict(mode="nearest", padding_mode="reflection", align_corners=align_corners)
      got = np.asarray(jax.jit(lambda a, b, kw=kw: jaxops.grid_sample(a, b, **kw))(x, grid))
      want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grid), **kw).numpy()
      np.testing.assert_array_equal(got, want, err_msg=f"{length} {align_corners}")


def test_non_finite_grid():
  # NaN gives NaN; +-inf reads 0 (zeros), the edge pixel (border), NaN (reflection).
  g = _grid([[np.nan, 0.0], [np.inf, 0.0], [-np.inf, 0.0]])
  for mode in ("nearest", "linear", "cubic"):
    z = np.asarray(jaxops.grid_sample(X, g, mode=mode))
    b = np.asarray(jaxops.grid_sample(X, g, mode=mode, padding_mode="border"))
    r = np.asarray(jaxops.grid_sample(X, g, mode=mode, padding_mode="reflection"))
    assert np.isnan(z[0, 0, 0, 0]) and np.isnan(b[0, 0, 0, 0]) and np.isnan(r).all()
    np.testing.assert_array_equal(z[0, 0, 0, 1:], [0.0, 0.0])
    # the grid's y is 0: row 1 (the middle row of 3); x = +inf: column 3, -inf: column 0.
    np.testing.assert_allclose(b[0, 0, 0, 1:], [7.0, 4.0], rtol=1e-12)
  xi = X.astype(np.int32)
  yi = np.asarray(jaxops.grid_sample(xi, g, mode="nearest"))
  assert yi.dtype == np.int32
  np.testing.assert_array_equal(yi.ravel(), [0, 0, 0])


def _ort_grid_sample(x, g, mode, padding_mode, align_corners):
  """onnxruntime's GridSample-22 of float64 ``x`` at ``g``."""
  import onnxruntime as ort
  from onnx import TensorProto
  model = helper.make_model(helper.make_graph(
      [helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding_mode,
                        align_corners=int(align_corners))], "g",
      [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape)),
       helper.make_tensor_value_info("g", TensorProto.DOUBLE, list(g.shape))],
      [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 10
  return model, ort.InferenceSession(model.SerializeToString(), providers=[
      "CPUExecutionProvider"]).run(None, {"x": x, "g": g})[0]


# (x, the points (innermost axis first), channels) with an axis of length 1 under align_corners;
# ranks 2 and 3, the length-1 axis inner or outer, and channels enough for the fused bilinear
# loop's tap tables (_FUSED_TABLE_CHANNELS) and the trilinear loop
_LENGTH_ONE_AXIS = [
    ((1, 3), [[0.0, np.inf], [0.0, -np.inf], [-0.3, np.inf], [np.nan, 0.0]], 1),
    ((3, 1), [[np.inf, 0.0], [-np.inf, 0.5], [1e30, -0.5]], 1),
    ((1, 3), [[0.0, np.inf], [0.5, -np.inf]], 8),
    ((1, 2, 3), [[0.0, 0.0, np.inf], [0.4, -1.0, -np.inf], [0.0, 0.0, np.nan]], 2)]


@pytest.mark.parametrize("case", range(len(_LENGTH_ONE_AXIS)))
def test_infinite_coordinate_on_a_length_one_axis_with_align_corners(case):
  """A length-1 axis with align_corners has no span: every grid value on it but NaN, +-inf
  included, is its one pixel, in every mode and padding, as onnxruntime reads it (the product
  (g + 1) / 2 * 0 made +-inf NaN: jaxops gave 0 with zeros and border padding and linear
  sampling, NaN with nearest, and NaN with reflection; found by a random sweep). NaN still gives
  NaN. The values against onnxruntime (torch gives NaN or 0 for several); the gradients (ranks
  2 and 3) are finite."""
  spatial, points, c = _LENGTH_ONE_AXIS[case]
  r = len(spatial)
  x = np.arange(c * np.prod(spatial), dtype=np.float64).reshape((1, c) + spatial) + 1
  g = np.array(points, np.float64).reshape((1,) * r + (-1, r))
  nan = np.isnan(g).any(axis=-1).ravel()
  for mode in ("nearest", "linear", "cubic"):
    for pad in ("zeros", "border", "reflection"):
      kw = dict(mode=mode, padding_mode=pad, align_corners=True)
      y = np.asarray(jax.jit(lambda a, b, kw=kw: jaxops.grid_sample(a, b, **kw))(x, g))
      assert np.isnan(y[0, :].reshape(c, -1)[:, nan]).all() and not np.isnan(
          y[0, :].reshape(c, -1)[:, ~nan]).any(), (mode, pad)
      if mode == "cubic" and r == 3:
        continue  # onnxruntime's GridSample has no 3-D cubic
      want = _ort_grid_sample(x, g, mode, pad, True)[1]
      np.testing.assert_allclose(y[..., ~nan], want[..., ~nan], rtol=1e-12, atol=0,
                                 err_msg=f"{mode} {pad}")
      if case == 0 and mode != "nearest" or case == 3 and (mode, pad) == ("linear", "reflection"):
        ok = g[..., ~nan, :]
        dx, dg = jax.grad(lambda a, b, kw=kw: jnp.sum(jaxops.grid_sample(a, b, **kw) ** 2),
                          argnums=(0, 1))(x, ok)
        assert np.isfinite(dx).all() and np.isfinite(dg).all(), (mode, pad)


_CORNER = np.array([[[[1.0, 2.0, 3.0], [4.0, 5.0, np.inf]]]])
_NAN_EDGE = np.array([[[[np.nan, 2.0, 3.0], [4.0, 5.0, 6.0]]]])
_CUBE = np.array([1.0, 2, 3, 4, 5, 6, 7, -np.inf]).reshape(1, 1, 2, 2, 2)
_WIDE = np.arange(16 * 96 * 96, dtype=np.float64).reshape(1, 16, 96, 96) / 1000
_WIDE[0, :, 0, 1] = np.inf   # beside the top edge
_WIDE[0, :, 95, 95] = np.nan  # the bottom right corner
_NON_FINITE_AT_THE_EDGE = [
    # (x, points, mode, align_corners, padding modes where the three oracles agree)
    (np.array([[[[1.0, np.inf, 3.0, 4.0, 5.0]]]]), [[-0.25, 0.0]], "linear", True, ("zeros",)),
    (np.array([[[[1.0, 2.0], [3.0, -np.inf]]]]), [[1.0, 1.0]], "linear", False,
     ("zeros", "border", "reflection")),
    # every tap outside the input (zeros padding reads 0), and taps beside the corner
    (_CORNER, [[3.0, 3.0], [-1.0, 5.0], [1.0, 1.0], [1.2, 0.9]], "linear", False, ("zeros",)),
    (_CORNER, [[3.0, 3.0], [0.9, 0.8], [1.2, 0.9]], "nearest", False, ("zeros",)),
    (_CORNER, [[3.0, 3.0], [-1.0, 5.0], [1.0, 1.0]], "cubic", False, ("zeros",)),
    (_NAN_EDGE, [[-3.0, -3.0], [-1.5, 0.0], [5.0, 5.0]], "linear", True, ("zeros",)),
    # the fused trilinear loop
    (_CUBE, [[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]], "linear", False, ("zeros",)),
    # the fused bilinear loop's per-point tap tables (16 channels, a 96 x 96 plane)
    (_WIDE, [[-1 + 2 / 95, -1 - 0.5 / 95], [3.0, 3.0], [1.0 - 0.5 / 95, 1.0 + 0.2 / 95],
             [1.0, 1.0]], "linear", True, ("zeros",))]


@pytest.mark.parametrize("case", range(len(_NON_FINITE_AT_THE_EDGE)))
def test_non_finite_pixel_beside_a_tap_outside_the_input(case):
  """A tap outside the input reads no pixel (zeros padding's 0), as in torch, onnxruntime and
  onnx.reference, so an infinite or NaN pixel at the edge reaches only the samples that weigh
  it: the other tap's inf stays inf, and a point whose taps are all outside reads 0. (jaxops
  gave NaN there: it read the clipped edge pixel with weight 0, and 0 * inf is NaN; found by a
  random sweep.)"""
  x, points, mode, ac, paddings = _NON_FINITE_AT_THE_EDGE[case]
  g = np.array(points, np.float64).reshape((1,) * (x.ndim - 2) + (-1, x.ndim - 2))
  g = np.repeat(g, len(x), axis=0)
  torch_mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
  for pad in paddings:
    want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), mode=torch_mode,
                                           padding_mode=pad, align_corners=ac).numpy()
    model, got_ort = _ort_grid_sample(x, g, mode, pad, ac)
    np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, {"x": x, "g": g})[0], want)
    np.testing.assert_array_equal(got_ort, want)
    assert not np.isfinite(want).all() and not np.isnan(want).all()
    for dtype in (np.float64, np.float32):
      got = jaxops.grid_sample(x.astype(dtype), g.astype(dtype), mode=mode, padding_mode=pad,
                               align_corners=ac)
      np.testing.assert_array_equal(np.asarray(got), want.astype(dtype), err_msg=pad)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_finite_grid_whose_pixel_coordinate_overflows_reflects(mode, align_corners):
  # (3e38 + 1) * 5 overflows float32 (as (3e38 + 1) / 2 * 4 does): the point still reflects, to
  # what the exact g does. The reflection's period is 4 in normalised units, so torch at
  # fmod(g, 4) (exact) is the oracle. (torch at g itself reads pixel 0, or NaN with bicubic.)
  x = np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 1, 1, 5)
  g = np.array([[[[3e38, 0.0], [-2.9e38, 0.0], [3.4e38, 0.0], [-3.3e38, 0.0]]]], np.float32)
  tmode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
  want = torch.nn.functional.grid_sample(
      torch.tensor(x), torch.tensor(np.fmod(g, np.float32(4))), mode=tmode,
      padding_mode="reflection", align_corners=align_corners)
  f = lambda a: jaxops.grid_sample(a, g, mode=mode, padding_mode="reflection",  # noqa: E731
                                   align_corners=align_corners)
  np.testing.assert_allclose(np.asarray(f(x)), want.numpy(), rtol=1e-6)
  if mode != "nearest":  # the input's gradient (the block formulation reflects on its own)
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.grid_sample(xt, torch.tensor(np.fmod(g, np.float32(4))), mode=tmode,
                                    padding_mode="reflection",
                                    align_corners=align_corners).sum().backward()
    np.testing.assert_allclose(np.asarray(jax.grad(lambda a: jnp.sum(f(a)))(x)),
                               xt.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_half_pixel_ties_round_as_onnxruntime(dtype):
  """Nearest sampling (align_corners=0) at every half-pixel of an axis and two ulps either
  side: the pixel coordinate ((g + 1) * L - 1) / 2 is rounded as onnxruntime (and
  onnx.reference, and torch's scalar 3-D kernel) computes it, the product and then the
  difference, whether or not XLA contracts its own arithmetic into a fused multiply-add (its
  default backend optimization level does, level 0 does not; both are compiled here). Before,
  float64 g = -1/3 on three pixels read pixel 1 at the default level where onnxruntime reads
  pixel 0. Zeros and border padding (reflection's ties: test_deviation_nearest_reflection_ties)."""
  import onnxruntime as ort

  elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
  rng = np.random.default_rng(5404)
  for spatial in ((3, 33), (6, 7, 31)):
    x = np.arange(np.prod(spatial), dtype=dtype).reshape((1, 1) + spatial)
    grid = half_pixel_grid(spatial, dtype, rng)
    for pad in ("zeros", "border"):
      node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="nearest",
                              padding_mode=pad, align_corners=0)
      model = helper.make_model(helper.make_graph(
          [node], "g", [helper.make_tensor_value_info("x", elem, None),
                        helper.make_tensor_value_info("g", elem, None)],
          [helper.make_tensor_value_info("y", elem, None)]),
          opset_imports=[helper.make_opsetid("", 20)])
      model.ir_version = 10
      want = ort.InferenceSession(model.SerializeToString(), providers=[
          "CPUExecutionProvider"]).run(None, {"x": x, "g": grid})[0]
      f = lambda a, g, pad=pad: jaxops.grid_sample(a, g, mode="nearest",  # noqa: E731
                                                   padding_mode=pad)
      for level in (0, 3):
        got = compiled(f, x, grid, level=level)(x, grid)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{spatial} {pad} {level}")


def test_deviation_nearest_reflection_ties():
  """Nearest with reflection and align_corners=0 at a halfway point: jaxops (as torch) reflects
  the grid location, then rounds the reflected sampling point half to even; onnxruntime and
  onnx.reference round the unreflected coordinate first and reflect the index about -0.5 and
  L - 0.5, which moves a tie to the other pixel. x = [10, 20] (L = 2): g = 2 is u = 2.5, which
  reflects to 0.5 and rounds to pixel 0 (the others: rint 2, reflected to 1); g = -2 is
  u = -1.5, reflected 0.5, pixel 0 (the others: rint -2, reflected to 1)."""
  import onnxruntime as ort

  x = np.array([[[[10.0, 20.0]]]], np.float32)
  g = np.array([[[[2.0, 0.0], [-2.0, 0.0]]]], np.float32)
  want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), mode="nearest",
                                         padding_mode="reflection", align_corners=False)
  np.testing.assert_array_equal(want.numpy().ravel(), [10.0, 10.0])
  node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="nearest",
                          padding_mode="reflection", align_corners=0)
  got = Backend.run_node(node, [x, g])[0]
  np.testing.assert_array_equal(np.asarray(got).ravel(), [10.0, 10.0])
  np.testing.assert_array_equal(
      np.asarray(jaxops.grid_sample(x, g, mode="nearest", padding_mode="reflection")).ravel(),
      [10.0, 10.0])
  ref = ReferenceEvaluator(node).run(None, {"x": x, "g": g})[0]
  np.testing.assert_array_equal(ref.ravel(), [20.0, 20.0])
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", 1, [1, 1, 1, 2]),
                    helper.make_tensor_value_info("g", 1, [1, 1, 2, 2])],
      [helper.make_tensor_value_info("y", 1, None)]), opset_imports=[helper.make_opsetid("", 20)])
  model.ir_version = 10
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  np.testing.assert_array_equal(sess.run(None, {"x": x, "g": g})[0].ravel(), [20.0, 20.0])


@pytest.mark.parametrize("version", [16, 20, 22])
def test_onnx_grid_must_have_the_rank_of_x(version):
  node = helper.make_node("GridSample", ["x", "g"], ["y"])
  x = np.zeros((1, 1, 3, 3), np.float32)
  for g in (np.zeros((1, 4, 2), np.float32), np.zeros((1, 2, 2, 2, 2), np.float32)):
    with pytest.raises(ValueError, match=rf"GridSample-{version} input `grid` must have the "
                                         rf"rank of X \(4"):
      Backend.run_node(node, [x, g], opset_version=version)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, np.float32, np.float64])
def test_dtypes_follow_x(dtype):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 3, 5, 4))
  g = rng.uniform(-1.2, 1.2, (2, 3, 2, 2))
  want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g),
                                         align_corners=False).numpy()
  y = jaxops.grid_sample(x.astype(dtype), g.astype(dtype))
  assert y.dtype == np.dtype(dtype)
  tol = {np.float64: 1e-12, np.float32: 1e-5}.get(dtype, 3e-2)
  # half types: the input is rounded to the half type; tolerance relative to |x| <= ~3
  np.testing.assert_allclose(np.asarray(y, np.float64), want, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.bool_])
def test_nearest_copies_integer_and_bool_pixels(dtype):
  rng = np.random.default_rng(4)
  x = rng.integers(0, 2 if dtype == np.bool_ else 100, (1, 2, 4, 5)).astype(dtype)
  g = rng.uniform(-1.3, 1.3, (1, 3, 3, 2))
  want = torch.nn.functional.grid_sample(torch.tensor(x.astype(np.float64)), torch.tensor(g),
                                         mode="nearest", align_corners=False).numpy()
  y = jaxops.grid_sample(x, g, mode="nearest")
  assert y.dtype == np.dtype(dtype)
  np.testing.assert_array_equal(np.asarray(y).astype(np.float64), want)


def test_errors():
  g = np.zeros((1, 2, 2, 2))
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `mode`.*'linear'"):
    jaxops.grid_sample(X, g, mode="bilinear")
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `padding_mode`"):
    jaxops.grid_sample(X, g, padding_mode="wrap")
  with pytest.raises(TypeError, match=r"jaxops.grid_sample: argument `align_corners`"):
    jaxops.grid_sample(X, g, align_corners="yes")
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `grid`.*\(N, O1"):
    jaxops.grid_sample(X, np.zeros((1, 2, 2, 3)))
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `grid`"):
    jaxops.grid_sample(X, np.zeros((2, 2, 2, 2)))
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `x`.*rank >= 3"):
    jaxops.grid_sample(np.zeros((3, 4)), g)
  with pytest.raises(TypeError, match=r"jaxops.grid_sample: argument `x`.*'linear'"):
    jaxops.grid_sample(X.astype(np.int32), g)
  with pytest.raises(TypeError, match=r"jaxops.grid_sample: argument `grid`.*floating"):
    jaxops.grid_sample(X, g.astype(np.int32))
  with pytest.raises(TypeError, match="positional"):
    jaxops.grid_sample(X, g, "nearest")  # pylint: disable=too-many-function-args


# --- the ONNX adapters ----------------------------------------------------------------------


def _run_node(version, x, grid, **attrs):
  node = helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)
  return Backend.run_node(node, [x, grid], opset_version=version)[0]


def test_images_of_2_to_the_31_pixels_are_refused():
  # the per-image pixel offsets are int32 in every path; checked from the shapes alone
  big = jax.ShapeDtypeStruct((1, 1, 2 ** 16, 2 ** 15), jnp.float32)
  grid = jax.ShapeDtypeStruct((1, 2, 2, 2), jnp.float32)
  with pytest.raises(ValueError, match=r"jaxops.grid_sample: argument `x`.*2\*\*31 pixels"):
    jax.eval_shape(jaxops.grid_sample, big, grid)
  under = jax.ShapeDtypeStruct((1, 1, 2 ** 16, 2 ** 15 - 1), jnp.float32)
  assert jax.eval_shape(jaxops.grid_sample, under, grid).shape == (1, 1, 2, 2)


def test_onnx_versions_accept_only_their_own_spellings():
  x = X.astype(np.float32)
  g = np.random.default_rng(0).uniform(-1, 1, (1, 2, 3, 2)).astype(np.float32)
  for old, new in (("bilinear", "linear"), ("bicubic", "cubic")):
    a = _run_node(16, x, g, mode=old)
    for v in (20, 22):
      np.testing.assert_array_equal(_run_node(v, x, g, mode=new), a)
      with pytest.raises(ValueError, match=f"GridSample-{v}.*{old!r} is the spelling of "
                                           f"GridSample-16"):
        _run_node(v, x, g, mode=old)
    with pytest.raises(ValueError, match=f"GridSample-16.*{new!r} is the spelling of "
                                         f"GridSample-22"):
      _run_node(16, x, g, mode=new)
  with pytest.raises(ValueError, match="GridSample-16 takes 4-D X"):
    _run_node(16, np.zeros((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 1, 1, 3), np.float32))
  assert _run_node(20, np.zeros((1, 1, 2, 2, 2), np.float32),
                   np.zeros((1, 1, 1, 1, 3), np.float32)).shape == (1, 1, 1, 1, 1)
  with pytest.raises(TypeError, match=r"\(GridSample-20\): input 1 \(`grid`\) has element "
                                      "type BFLOAT16"):
    _run_node(20, x, g.astype(jnp.bfloat16))
  assert _run_node(22, x, g.astype(jnp.bfloat16)).dtype == np.float32


# --- deviations (docs/DEVIATIONS.md, GridSample) --------------------------------------------


def test_deviation_cubic_border_pads_the_image_before_the_neighbourhood():
  # Column u = -0.7 without align_corners (length 4, row 0 of 0..3): the taps are columns
  # -2, -1, 0, 1 at distances 1.3, 0.3, 0.7, 1.7; border padding reads columns 0, 0, 0, 1,
  # so the value is w(1.7) * 1 (the other taps read 0): Keys a = -0.75 at t = 1.7 is
  # a t^3 - 5 a t^2 + 8 a t - 4 a = -0.75 * (4.913 - 14.45 + 13.6 - 4) = -0.04725.
  x = np.arange(4.0).reshape(1, 1, 1, 4)
  g = _grid([[_norm(-0.7, 4, False), 0.0]])
  y = jaxops.grid_sample(x, g, mode="cubic", padding_mode="border")
  np.testing.assert_allclose(np.asarray(y).ravel(), [-0.04725], rtol=1e-10)
  want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), mode="bicubic",
                                         padding_mode="border", align_corners=False)
  np.testing.assert_allclose(np.asarray(y), want.numpy(), rtol=1e-10)
  # onnx.reference clips the coordinate to 0 first (then reads pixel 0 exactly): 0.
  node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode="border")
  ref = ReferenceEvaluator(node).run(None, {"x": x.astype(np.float32),
                                            "g": g.astype(np.float32)})[0]
  np.testing.assert_allclose(ref.ravel(), [0.0], atol=1e-7)


def test_deviation_reference_keeps_float64_coordinates_in_float32():
  """onnx.reference 1.23 stores each pixel coordinate in a float32 array
  (``_gs_denormalize_coordinates``), also for float64 inputs. float64 g = -0.8181818181818181
  (just above -9/11) on 33 pixels is u = 2.500000000000001, pixel 3, in jaxops and onnxruntime
  (and exactly); the reference's float32 u is 2.5, pixel 2. Linear sampling at g = 0.123456789
  reads 18.0370370185 in jaxops and onnxruntime, 18.037036895751953 in the reference."""
  import onnxruntime as ort

  x = np.arange(33.0).reshape(1, 1, 1, 33)
  g = np.array([[[[-0.8181818181818181, 0.0], [0.123456789, 0.0]]]])
  for mode, want, ref_want in (("nearest", [3.0, 18.0], [2.0, 18.0]),
                               ("linear", [2.500000000000001, 18.0370370185],
                                [2.5, 18.037036895751953])):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, align_corners=0)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 11, None),
                      helper.make_tensor_value_info("g", 11, None)],
        [helper.make_tensor_value_info("y", 11, None)]),
        opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    got = np.asarray(jaxops.grid_sample(x, g, mode=mode)).ravel()
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x, "g": g})[0].ravel(), want, rtol=1e-15)
    np.testing.assert_array_equal(
        ReferenceEvaluator(node).run(None, {"x": x, "g": g})[0].ravel(), ref_want)


def test_deviation_reference_computes_coordinates_in_a_half_grids_type():
  """A float16 grid on float64 X (T2 is its own type parameter): onnx.reference computes the
  pixel coordinates in float16, the grid's type, and samples 0.02-0.07 away on 16 pixels (a
  dtype fuzz found it). jaxops computes them in X's precision from the grid's exact values,
  as torch does in float64 with the grid converted exactly."""
  rng = np.random.default_rng(21)
  x = rng.standard_normal((1, 2, 16, 16))
  g = rng.uniform(-1, 1, (1, 5, 5, 2)).astype(np.float16)
  node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="linear", align_corners=0)
  want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g.astype(np.float64)),
                                         mode="bilinear", align_corners=False).numpy()
  got = np.asarray(jaxops.grid_sample(x, g))
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  ref = ReferenceEvaluator(node).run(None, {"x": x, "g": g})[0]
  assert np.max(np.abs(ref - want)) > 1e-3


def test_deviation_reflection_axes_follow_align_corners():
  # align_corners=1 reflects about pixel centres 0 and L - 1: index -1 reads index 1 (the
  # spec's sentence); align_corners=0 about the pixel edges -0.5 and L - 0.5: -1 reads 0. In
  # normalised units both reflect about -1 and 1, as the spec's example (-3.5 -> 1.5 -> 0.5).
  row = np.array([10.0, 20.0, 30.0, 40.0]).reshape(1, 1, 1, 4)
  for ac, want in ((True, 20.0), (False, 10.0)):
    g = _grid([[_norm(-1.0, 4, ac), 0.0]])
    y = jaxops.grid_sample(row, g, mode="nearest", padding_mode="reflection", align_corners=ac)
    np.testing.assert_array_equal(np.asarray(y).ravel(), [want])
    a = jaxops.grid_sample(row, _grid([[-3.5, 0.0]]), padding_mode="reflection",
                           align_corners=ac)
    b = jaxops.grid_sample(row, _grid([[0.5, 0.0]]), padding_mode="reflection",
                           align_corners=ac)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
  # A length-1 axis with align_corners has no span: the single pixel (torch agrees);
  # onnx.reference divides by the zero span and fails.
  one = np.array([[[[5.0]]]])
  g = _grid([[0.3, 0.7]])
  y = jaxops.grid_sample(one, g, padding_mode="reflection", align_corners=True)
  np.testing.assert_array_equal(np.asarray(y).ravel(), [5.0])
  node = helper.make_node("GridSample", ["x", "g"], ["y"], padding_mode="reflection",
                          align_corners=1)
  with np.errstate(divide="ignore"), pytest.raises(OverflowError):
    ReferenceEvaluator(node).run(None, {"x": one.astype(np.float32), "g": g.astype(np.float32)})


# --- gradients, jit, vmap -------------------------------------------------------------------


def _interior_grid(rng, shape, lengths, align_corners):
  """Grid points whose pixel coordinates stay a margin away from integers (smooth there)."""
  r = len(lengths)
  u = np.stack([rng.integers(-1, lengths[r - 1 - i] + 1, shape) + rng.uniform(0.2, 0.8, shape)
                for i in range(r)], axis=-1)
  return np.stack([_norm(u[..., i], lengths[r - 1 - i], align_corners) for i in range(r)],
                  axis=-1)


@pytest.mark.parametrize("mode, padding_mode, order", [("linear", "zeros", 2),
                                                       ("cubic", "border", 1),
                                                       ("linear", "reflection", 1)])
def test_check_grads(mode, padding_mode, order):
  rng = np.random.default_rng(7)
  x = rng.standard_normal((1, 2, 4, 5))
  g = _interior_grid(rng, (1, 2, 2), (4, 5), False)
  f = lambda a, b: jaxops.grid_sample(a, b, mode=mode, padding_mode=padding_mode)  # noqa: E731
  # smooth in x and, between pixel coordinates, in the grid (border/reflection clip: order 1)
  check_grads(f, (x, g), order=order, modes=("fwd", "rev"), eps=1e-4)


@pytest.mark.parametrize("rank, padding_mode, mode", [
    (r, p, m) for r in (2, 3) for p in ("zeros", "border", "reflection")
    for m in ("linear", "cubic", "nearest") if not (r == 3 and m != "nearest" and p != "zeros")])
def test_check_grads_order_two_everywhere_smooth(mode, padding_mode, rank):
  """Order 2, fwd and rev: in x for every mode (the samples are linear in x), and in the grid
  for linear and cubic at interior points (between pixel coordinates every padding is smooth;
  cubic's finite differences of order 2 need a looser tolerance at this eps, its Hessian
  matching central differences of the gradient). 3-D linear and cubic with zeros padding only:
  their second derivatives compile slowly (10-40 s a case, most of the suite's time in this
  test), and border and reflection take the code paths of 2-D, with the coordinates clipped or
  reflected per axis (test_grid_only_3d_gradients_equal_torch_autograd and
  test_3d_gradients_equal_torch_autograd check the first derivatives of every 3-D padding
  against torch); 3-D cubic's grid at order 2 in reverse mode only (forward over forward is
  its slowest compile)."""
  rng = np.random.default_rng(11 + rank)
  spatial = (3, 4, 5)[-rank:]
  x = rng.standard_normal((1, 2) + spatial)
  g = _interior_grid(rng, (1,) + (2,) * rank, spatial, False)
  kw = dict(mode=mode, padding_mode=padding_mode)
  # jitted: the finite differences then reuse one compiled program per derivative order
  check_grads(jax.jit(lambda a: jaxops.grid_sample(a, g, **kw)), (x,), order=2,
              modes=("fwd", "rev"), eps=1e-4)
  if mode != "nearest":
    tol = 1e-5 if mode == "linear" else 2e-4
    modes = ("rev",) if rank == 3 and mode == "cubic" else ("fwd", "rev")
    check_grads(jax.jit(lambda b: jaxops.grid_sample(x, b, **kw)), (g,), order=2,
                modes=modes, eps=1e-4, atol=tol, rtol=tol)


@pytest.mark.parametrize("mode, tmode", [("linear", "bilinear"), ("cubic", "bicubic"),
                                         ("nearest", "nearest")])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_gradients_equal_torch_autograd(mode, tmode, padding_mode):
  rng = np.random.default_rng(11)
  x = rng.standard_normal((2, 3, 5, 6))
  g = rng.uniform(-1.6, 1.6, (2, 4, 3, 2))
  ct = rng.standard_normal((2, 3, 4, 3))
  align_corners = padding_mode != "border"
  tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
  out = torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                        align_corners=align_corners)
  out.backward(torch.tensor(ct))
  y, vjp = jax.vjp(lambda a, b: jaxops.grid_sample(a, b, mode=mode, padding_mode=padding_mode,
                                                   align_corners=align_corners), x, g)
  dx, dg = vjp(ct)
  np.testing.assert_allclose(np.asarray(y), out.detach().numpy(), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.asarray(dx), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.asarray(dg), tg.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode, tmode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("g_shape", [(2, 4, 3, 2), (2, 48, 45, 2)])  # small; materialised path
def test_nan_point_has_zero_gradient(mode, tmode, g_shape):
  """A NaN coordinate's sample is NaN and passes no gradient: with the loss sum(y ** 2), whose
  cotangent is NaN there, x's gradient is torch's for the grid with that point moved far
  outside the input (where it reads nothing), and the point's grid gradient is 0."""
  rng = np.random.default_rng(13)
  x = rng.standard_normal((2, 16, 9, 11))
  g = rng.uniform(-1.2, 1.2, g_shape)
  gn, gfar = g.copy(), g.copy()
  gn[1, 2, 1, 0] = np.nan
  gfar[1, 2, 1] = 9.0
  dx, dg = jax.grad(lambda a, b: jnp.sum(jaxops.grid_sample(a, b, mode=mode) ** 2),
                    argnums=(0, 1))(x, gn)
  tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(gfar, requires_grad=True)
  (torch.nn.functional.grid_sample(tx, tg, mode=tmode, align_corners=False) ** 2).sum().backward()
  np.testing.assert_allclose(np.asarray(dx), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
  want_g = tg.grad.numpy()
  want_g[1, 2, 1] = 0.0
  np.testing.assert_allclose(np.asarray(dg), want_g, rtol=1e-9, atol=1e-10)


def test_3d_gradients_equal_torch_autograd():
  rng = np.random.default_rng(12)
  x = rng.standard_normal((2, 2, 3, 4, 5))
  g = rng.uniform(-1.3, 1.3, (2, 2, 3, 2, 3))
  ct = rng.standard_normal((2, 2, 2, 3, 2))
  for pad in ("zeros", "reflection"):
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
    torch.nn.functional.grid_sample(tx, tg, padding_mode=pad,
                                    align_corners=False).backward(torch.tensor(ct))
    _, vjp = jax.vjp(lambda a, b, p=pad: jaxops.grid_sample(a, b, padding_mode=p), x, g)
    dx, dg = vjp(ct)
    np.testing.assert_allclose(np.asarray(dx), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(dg), tg.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode, tmode, padding_mode, x_shape, g_shape", [
    # more points than one chunk of gathered blocks holds (the remainder padded), float64
    ("linear", "bilinear", "zeros", (2, 3, 9, 7), (2, 110, 110, 2)),
    ("linear", "bilinear", "reflection", (2, 3, 9, 7), (2, 110, 110, 2)),
    ("cubic", "bicubic", "border", (2, 3, 9, 7), (2, 60, 50, 2)),
    ("cubic", "bicubic", "zeros", (2, 3, 9, 7), (2, 60, 50, 2)),
    # cubic reflection: no blocks, a loop over the taps (its transpose, one accumulator)
    ("cubic", "bicubic", "reflection", (2, 3, 9, 7), (2, 60, 50, 2)),
    ("linear", "bilinear", "zeros", (1, 2, 4, 5, 6), (1, 20, 30, 30, 3)),
    # an axis shorter than the kernel: the padded input
    ("linear", "bilinear", "zeros", (2, 2, 1, 5), (2, 4, 3, 2)),
    ("linear", "bilinear", "border", (2, 2, 4, 1), (2, 4, 3, 2)),
    ("cubic", "bicubic", "zeros", (2, 2, 3, 5), (2, 4, 3, 2)),
    ("cubic", "bicubic", "border", (2, 2, 6, 2), (2, 4, 3, 2)),
])
def test_block_gradients_equal_torch_autograd_chunks_and_short_axes(mode, tmode, padding_mode,
                                                                    x_shape, g_shape):
  from jaxops import _grid_sample
  rng = np.random.default_rng(13)
  x = rng.standard_normal(x_shape)
  g = rng.uniform(-1.2, 1.2, g_shape)
  ct = rng.standard_normal(x_shape[:2] + g_shape[1:-1])
  if g_shape[1] > 10:  # the case must need several chunks
    k = (2 if mode == "linear" else 4) ** (len(x_shape) - 2)
    per_chunk = _grid_sample._CHUNK_BYTES // (x_shape[0] * k * x_shape[1] * 8)
    assert np.prod(g_shape[1:-1]) > per_chunk
  tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
  out = torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                        align_corners=False)
  out.backward(torch.tensor(ct))
  y, vjp = jax.vjp(lambda a, b: jaxops.grid_sample(a, b, mode=mode, padding_mode=padding_mode),
                   x, g)
  dx, dg = vjp(ct)
  np.testing.assert_allclose(np.asarray(y), out.detach().numpy(), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.asarray(dx), tx.grad.numpy(), rtol=1e-10, atol=1e-11)
  np.testing.assert_allclose(np.asarray(dg), tg.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode, tmode", [("linear", "bilinear"), ("cubic", "bicubic"),
                                         ("nearest", "nearest")])
@pytest.mark.parametrize("x_shape, g_shape", [((0, 2, 4, 4), (0, 3, 3, 2)),
                                              ((1, 2, 4, 4), (1, 0, 3, 2)),
                                              ((1, 0, 4, 4), (1, 3, 3, 2))])
def test_empty_batch_points_or_channels_equal_torch(mode, tmode, x_shape, g_shape):
  rng = np.random.default_rng(14)
  x, g = rng.standard_normal(x_shape), rng.uniform(-1, 1, g_shape)
  tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
  out = torch.nn.functional.grid_sample(tx, tg, mode=tmode, align_corners=False)
  f = lambda a, b: jaxops.grid_sample(a, b, mode=mode)  # noqa: E731
  y = f(x, g)
  assert y.shape == tuple(out.shape)
  if mode != "nearest":
    dx, dg = jax.grad(lambda a, b: jnp.sum(f(a, b)), argnums=(0, 1))(x, g)
    np.testing.assert_array_equal(np.asarray(dx), np.zeros(x_shape))  # nothing is read
    np.testing.assert_array_equal(np.asarray(dg), np.zeros(g_shape))


@pytest.mark.parametrize("mode, tmode, padding_mode", [("linear", "bilinear", "zeros"),
                                                       ("cubic", "bicubic", "border"),
                                                       ("cubic", "bicubic", "reflection")])
@pytest.mark.parametrize("shared_x", [False, True])
def test_vmap_of_the_gradient_in_input_and_grid_equals_torch(mode, tmode, padding_mode, shared_x):
  """The gradient in both the input and the grid (one primitive whose transpose orders the two
  parts) under vmap, over inputs and grids or over grids with one shared input, equals torch
  autograd element by element. 40x40 points take several chunks of the input's scatter
  loop."""
  rng = np.random.default_rng(17)
  xs = rng.standard_normal((1 if shared_x else 3, 2, 8, 7, 9))
  grids = rng.uniform(-1.2, 1.2, (3, 2, 40, 40, 2))
  cts = rng.standard_normal((3, 2, 8, 40, 40))

  def vjp(a, b, c):
    return jax.vjp(lambda u, v: jaxops.grid_sample(u, v, mode=mode, padding_mode=padding_mode),
                   a, b)[1](c)

  dx, dg = jax.vmap(vjp, in_axes=(None if shared_x else 0, 0, 0))(
      xs[0] if shared_x else xs, grids, cts)
  want_dx = []
  for i in range(3):
    tx = torch.tensor(xs[0 if shared_x else i], requires_grad=True)
    tg = torch.tensor(grids[i], requires_grad=True)
    torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                    align_corners=False).backward(torch.tensor(cts[i]))
    want_dx.append(tx.grad.numpy())
    np.testing.assert_allclose(np.asarray(dg[i]), tg.grad.numpy(), rtol=1e-9, atol=1e-10)
  np.testing.assert_allclose(np.asarray(dx), np.stack(want_dx), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("mode, tmode, padding_mode", [("linear", "bilinear", "zeros"),
                                                       ("cubic", "bicubic", "border"),
                                                       ("cubic", "bicubic", "reflection")])
def test_vmap_of_the_jvp_in_input_and_grid_pairs_with_torch_gradient(mode, tmode, padding_mode):
  """Forward mode in both the input and the grid, under vmap (torch has no forward mode for
  grid_sample): for each element, the jvp's inner product with a cotangent equals the
  tangents' inner products with torch's gradients, <J t, c> = <t, J^T c>."""
  rng = np.random.default_rng(19)
  xs, txs = rng.standard_normal((2, 3, 2, 4, 7, 9))
  grids, tgs = rng.uniform(-1.2, 1.2, (2, 3, 2, 30, 30, 2))
  cts = rng.standard_normal((3, 2, 4, 30, 30))
  f = lambda a, b: jaxops.grid_sample(a, b, mode=mode, padding_mode=padding_mode)  # noqa: E731
  tangents = jax.vmap(lambda a, b, ta, tb: jax.jvp(f, (a, b), (ta, tb))[1])(xs, grids, txs, tgs)
  for i in range(3):
    tx = torch.tensor(xs[i], requires_grad=True)
    tg = torch.tensor(grids[i], requires_grad=True)
    torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                    align_corners=False).backward(torch.tensor(cts[i]))
    want = np.sum(txs[i] * tx.grad.numpy()) + np.sum(tgs[i] * tg.grad.numpy())
    np.testing.assert_allclose(np.sum(np.asarray(tangents[i]) * cts[i]), want, rtol=1e-10)


def test_vmap_over_grids_and_no_retrace():
  rng = np.random.default_rng(5)
  x = rng.standard_normal((1, 2, 4, 4))
  grids = rng.uniform(-1, 1, (6, 1, 3, 3, 2))
  got = jax.vmap(lambda g: jaxops.grid_sample(x, g, mode="cubic"))(grids)
  for i in range(6):
    want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grids[i]),
                                           mode="bicubic", align_corners=False).numpy()
    np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-10, atol=1e-12)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def f(a, b):
    return jaxops.grid_sample(a, b, padding_mode="border")

  for i in range(3):
    f(x + i, grids[i])


@pytest.mark.parametrize("mode, tmode, padding_mode, align_corners", [
    ("linear", "bilinear", "zeros", False), ("linear", "bilinear", "border", True),
    ("linear", "bilinear", "reflection", False), ("nearest", "nearest", "zeros", False),
    ("nearest", "nearest", "reflection", True)])
@pytest.mark.parametrize("spatial", [2, 3])
def test_materialised_row_gathers_equal_torch(mode, tmode, padding_mode, align_corners, spatial):
  """Calls with enough samples that the CPU forward runs its row gathers as the branch of a
  conditional (``_materialised``): values against torch, float64 and float32, the non-finite
  grid rule, vmap over grids, and integer input in nearest mode."""
  from jaxops import _grid_sample
  rng = np.random.default_rng(21 + spatial)
  if spatial == 2:
    x_shape, g_shape = (2, 16, 37, 41), (2, 48, 45, 2)
  else:
    x_shape, g_shape = (1, 8, 9, 12, 14), (1, 16, 16, 32, 3)
  assert x_shape[0] * x_shape[1] * np.prod(g_shape[1:-1]) >= _grid_sample._MATERIALISE_MIN
  x = rng.standard_normal(x_shape)
  g = rng.uniform(-1.3, 1.3, g_shape)
  g.reshape(-1, spatial)[::97] = rng.uniform(-9.0, 9.0, spatial)  # far outside the input
  kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
  f = jax.jit(lambda a, b: jaxops.grid_sample(a, b, **kw))
  assert "conditional(" in f.lower(x, g).compile().as_text()  # the materialised path runs
  tkw = dict(mode=tmode, padding_mode=padding_mode, align_corners=align_corners)
  want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), **tkw).numpy()
  np.testing.assert_allclose(np.asarray(f(x, g)), want, rtol=1e-12, atol=1e-12)
  want32 = torch.nn.functional.grid_sample(torch.tensor(x, dtype=torch.float32),
                                           torch.tensor(g, dtype=torch.float32), **tkw).numpy()
  np.testing.assert_allclose(np.asarray(f(x.astype(np.float32), g.astype(np.float32))), want32,
                             rtol=1e-5, atol=1e-5)
  # a NaN coordinate gives NaN in every channel of its point, and only there
  gn = g.copy()
  gn[0, 3, 5, ..., 0] = np.nan
  yn = np.asarray(f(x, gn))
  nan_at = np.zeros(yn.shape, bool)
  nan_at[0, :, 3, 5] = True
  np.testing.assert_array_equal(np.isnan(yn), nan_at)
  np.testing.assert_allclose(yn[~nan_at], want[~nan_at], rtol=1e-12, atol=1e-12)
  # vmap over two grids for one input
  g2 = np.stack([g, -g])
  yv = jax.vmap(lambda b: jaxops.grid_sample(x, b, **kw))(g2)
  want_neg = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(-g), **tkw).numpy()
  np.testing.assert_allclose(np.asarray(yv), np.stack([want, want_neg]), rtol=1e-12, atol=1e-12)
  if mode == "nearest":  # integers are read as they are
    xi = rng.integers(-1000, 1000, x_shape).astype(np.int32)
    yi = np.asarray(f(xi, g))
    assert yi.dtype == np.int32
    want_i = torch.nn.functional.grid_sample(torch.tensor(xi, dtype=torch.float64),
                                             torch.tensor(g), **tkw).numpy()
    np.testing.assert_array_equal(yi, want_i.astype(np.int32))


@pytest.mark.parametrize("padding_mode, align_corners", [
    ("zeros", False), ("border", True), ("reflection", False), ("reflection", True)])
def test_both_linear_forwards_equal_torch(padding_mode, align_corners):
  """The linear forward's two paths (``_uses_fused_linear``): the fused loop on few channels
  and on large planes, the row gathers on smaller planes with more channels; each against
  torch in float64 and float32, with points far outside the input and a NaN point."""
  from jaxops import _grid_sample
  cfg = _grid_sample._Config(_grid_sample.Mode.LINEAR, _grid_sample.PaddingMode(padding_mode),
                             align_corners)
  rng = np.random.default_rng(24)
  for x_shape, fused in [((2, 3, 37, 41), True), ((2, 6, 37, 41), False),
                         ((1, 6, 256, 257), True), ((2, 8, 37, 41), True),
                         ((2, 16, 97, 100), True)]:
    assert _grid_sample._uses_fused_linear(cfg, x_shape) is fused
    # the last two: the fused loop from per-point tap tables
    assert (x_shape[1] >= _grid_sample._FUSED_TABLE_CHANNELS) is (x_shape[1] >= 8)
    assert _grid_sample._uses_fused_linear(cfg, x_shape, jvp_primal=True) is (
        x_shape[1] == 3 or x_shape[2] * x_shape[3] >= 256 * 256)
    x = rng.standard_normal(x_shape)
    g = rng.uniform(-1.3, 1.3, (x_shape[0], 48, 45, 2))
    g.reshape(-1, 2)[::97] = rng.uniform(-9.0, 9.0, 2)
    g[0, 3, 5, 1] = np.nan
    kw = dict(padding_mode=padding_mode, align_corners=align_corners)
    # float32: points reflected from 9 spans out sit near pixel 2000, where float32 coordinates
    # are 1.2e-4 pixels apart (torch rounds them in another order)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 3e-4)):
      want = torch.nn.functional.grid_sample(torch.tensor(x.astype(dtype)),
                                             torch.tensor(g.astype(dtype)), **kw).numpy()
      got = np.array(jaxops.grid_sample(x.astype(dtype), g.astype(dtype), **kw))
      assert np.isnan(got[0, :, 3, 5]).all()
      got[0, :, 3, 5] = want[0, :, 3, 5] = 0  # torch reads a NaN point as zero
      np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{x_shape} {dtype}")


@pytest.mark.parametrize("mode, tmode, padding_mode", [
    ("linear", "bilinear", "zeros"), ("linear", "bilinear", "reflection"),
    ("cubic", "bicubic", "border"), ("cubic", "bicubic", "zeros")])
@pytest.mark.parametrize("large", [False, True])
def test_grid_only_gradients_equal_torch_autograd(mode, tmode, padding_mode, large):
  """With ``x`` held constant only the grid is differentiated: the tangent is the row gathers'
  (``_grid_jvp``, no scatter), behind the conditional when large. The gradient with
  respect to the grid equals torch autograd's, and check_grads (fwd and rev) holds for the grid
  alone."""
  rng = np.random.default_rng(31)
  x_shape, g_shape = ((2, 16, 30, 33), (2, 45, 48, 2)) if large else ((2, 3, 5, 6), (2, 4, 3, 2))
  f = _check_grid_only_gradient(rng, x_shape, g_shape, large, mode=mode, tmode=tmode,
                                padding_mode=padding_mode, align_corners=False)
  if not large:
    gi = _interior_grid(rng, (2, 2, 2), x_shape[2:], False)
    # order 2 where check_grads' finite differences are well conditioned: cubic's order-2
    # fwd-and-rev check misses by about 2e-5 at this eps, though its Hessian matches central
    # differences of the gradient to 1e-8
    smooth = mode == "linear" and padding_mode == "zeros"
    check_grads(f, (gi,), order=2 if smooth else 1, modes=("fwd", "rev"), eps=1e-4)


@pytest.mark.parametrize("mode, tmode, padding_mode", [
    ("linear", "bilinear", "zeros"), ("cubic", "bicubic", "border")])
def test_input_only_and_joint_gradients_equal_torch_autograd(mode, tmode, padding_mode):
  """The two parts of the tangent on their own and together, behind the CPU's conditional:
  with the grid constant only the input's part (the blocks' scatter) runs; with both varying
  the grid's part (row gathers) is added to it. Both gradients against torch autograd's."""
  from jaxops import _grid_sample
  rng = np.random.default_rng(43)
  x = rng.standard_normal((2, 16, 30, 33))
  g = rng.uniform(-1.2, 1.2, (2, 45, 48, 2))
  assert 2 * 16 * 45 * 48 >= _grid_sample._MATERIALISE_MIN
  ct = rng.standard_normal((2, 16, 45, 48))
  tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
  torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                  align_corners=False).backward(torch.tensor(ct))

  def f(a, b):
    return jaxops.grid_sample(a, b, mode=mode, padding_mode=padding_mode)

  dx_only = jax.vjp(lambda a: f(a, g), x)[1](ct)[0]
  np.testing.assert_allclose(np.asarray(dx_only), tx.grad.numpy(), rtol=1e-9, atol=1e-9)
  dx, dg = jax.vjp(f, x, g)[1](ct)
  np.testing.assert_allclose(np.asarray(dx), tx.grad.numpy(), rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(np.asarray(dg), tg.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode, tmode, padding_mode", [("linear", "bilinear", "zeros"),
                                                       ("linear", "bilinear", "reflection"),
                                                       ("cubic", "bicubic", "border")])
@pytest.mark.parametrize("images", [3, 4])
@pytest.mark.parametrize("mapped", ["inputs", "grids"])
def test_vmap_of_the_input_only_gradient_equals_torch(mode, tmode, padding_mode, images, mapped):
  """The gradient in the input alone (the grid a constant: its own primitive, whose transpose
  adds the chunks' block cotangents into one accumulator per group of images) under vmap,
  over inputs with one grid or over grids with one input, equals torch autograd. An even
  batch takes two groups, an odd one a single accumulator; 40x40 points take one chunk
  (bilinear) or four (bicubic), and the grid's NaN point a zero gradient (torch's oracle reads a finite point there with a
  zero cotangent: torch's own backward crashes on a NaN coordinate with reflection padding)."""
  rng = np.random.default_rng(23 + images)
  xs = rng.standard_normal((3, images, 8, 7, 9))
  grids = rng.uniform(-1.2, 1.2, (3, images, 40, 40, 2))
  grids[:, 0, 3, 5, 1] = np.nan
  cts = rng.standard_normal((3, images, 8, 40, 40))

  def vjp(a, b, c):
    return jax.vjp(lambda u: jaxops.grid_sample(u, b, mode=mode, padding_mode=padding_mode),
                   a)[1](c)[0]

  axes = (0, None, 0) if mapped == "inputs" else (None, 0, 0)
  dx = jax.jit(jax.vmap(vjp, in_axes=axes))(xs if mapped == "inputs" else xs[0],
                                            grids[0] if mapped == "inputs" else grids, cts)
  finite, cts_finite = np.nan_to_num(grids), cts.copy()
  cts_finite[:, 0, :, 3, 5] = 0
  for i in range(3):
    tx = torch.tensor(xs[i if mapped == "inputs" else 0], requires_grad=True)
    tg = torch.tensor(finite[0 if mapped == "inputs" else i])
    torch.nn.functional.grid_sample(tx, tg, mode=tmode, padding_mode=padding_mode,
                                    align_corners=False).backward(torch.tensor(cts_finite[i]))
    np.testing.assert_allclose(np.asarray(dx[i]), tx.grad.numpy(), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("large", [False, True])
def test_grid_only_3d_gradients_equal_torch_autograd(padding_mode, large):
  """Trilinear with ``x`` held constant: the grid-only tangent over three axes (eight taps per
  point), small and behind the conditional, against torch autograd's grid gradient."""
  rng = np.random.default_rng(41)
  x_shape, g_shape = (((1, 8, 9, 12, 14), (1, 16, 16, 32, 3)) if large
                      else ((2, 3, 4, 5, 6), (2, 3, 2, 4, 3)))
  _check_grid_only_gradient(rng, x_shape, g_shape, large, mode="linear", tmode="bilinear",
                            padding_mode=padding_mode, align_corners=True)


def _check_grid_only_gradient(rng, x_shape, g_shape, large, *, mode, tmode, padding_mode,
                              align_corners):
  """jaxops.grid_sample's value and gradient with respect to the grid alone (``x`` a constant)
  against torch autograd's, for a random input, grid and cotangent; returns the function of
  the grid. ``large``: enough samples for the CPU's conditional (asserted)."""
  from jaxops import _grid_sample
  if large:
    assert x_shape[0] * x_shape[1] * np.prod(g_shape[1:-1]) >= _grid_sample._MATERIALISE_MIN
  x = rng.standard_normal(x_shape)
  g = rng.uniform(-1.2, 1.2, g_shape)
  ct = rng.standard_normal(x_shape[:2] + g_shape[1:-1])
  tg = torch.tensor(g, requires_grad=True)
  out = torch.nn.functional.grid_sample(torch.tensor(x), tg, mode=tmode,
                                        padding_mode=padding_mode, align_corners=align_corners)
  out.backward(torch.tensor(ct))

  def f(b):
    return jaxops.grid_sample(x, b, mode=mode, padding_mode=padding_mode,
                              align_corners=align_corners)

  y, vjp = jax.vjp(f, g)
  np.testing.assert_allclose(np.asarray(y), out.detach().numpy(), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.asarray(vjp(ct)[0]), tg.grad.numpy(), rtol=1e-9, atol=1e-9)
  return f


def test_marks_of_taps_outside_the_input(monkeypatch):
  """A tap's flat offset is negative exactly where one of its axes' taps is outside the input,
  without overflowing int32, under both rules of ``_offset_rule``: a large negative mark and a
  plain sum (images of up to 2**31 / r pixels), and beyond that the mark -1 kept by the
  combination. The second rule, forced on small images, gives the oracles' samples too."""
  from jaxops import _grid_sample
  rng = np.random.default_rng(5)
  for p, r in ((12, 2), (2 ** 30 - 1, 2), (2 ** 30 + 1, 2), (715827882, 3), (715827883, 3)):
    mark, add = _grid_sample._offset_rule(p, r)
    assert (add is _grid_sample._add_offsets) == (p > (2 ** 31 - 1) // r)
    # per axis: offsets whose inside sum is at most p - 1, or the mark
    parts = [rng.integers(0, p // r, size=1000, dtype=np.int32) for _ in range(r)]
    outside = [rng.random(1000) < 0.3 for _ in range(r)]
    marked = [jnp.where(o, mark, v) for v, o in zip(parts, outside)]
    combined = np.asarray(functools.reduce(add, marked))
    any_outside = functools.reduce(np.logical_or, outside)
    np.testing.assert_array_equal(combined < 0, any_outside)
    np.testing.assert_array_equal(combined[~any_outside], sum(parts)[~any_outside])
  # the cases again under the -1 rule, each image twice (new shapes: traced afresh, without
  # clearing JAX's caches for the tests after this one)
  monkeypatch.setattr(_grid_sample, "_offset_rule", lambda p, r: (-1, _grid_sample._add_offsets))
  monkeypatch.setattr(sys.modules[__name__], "_NON_FINITE_AT_THE_EDGE", [
      (np.concatenate([x, x]), points, *rest) for x, points, *rest in _NON_FINITE_AT_THE_EDGE])
  for case in range(len(_NON_FINITE_AT_THE_EDGE)):
    test_non_finite_pixel_beside_a_tap_outside_the_input(case)
