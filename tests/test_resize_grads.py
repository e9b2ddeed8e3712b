"""Gradients of jaxops.resize: numerical checks (order 2, forward and reverse) with respect to x
and to a traced roi, under vmap, and against torch autograd of F.interpolate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxops



@pytest.mark.parametrize("kw", [
    dict(mode="linear", scales=[1.5, 0.75]),
    dict(mode="linear", sizes=[5, 2], coordinate_transformation_mode="align_corners"),
    dict(mode="cubic", sizes=[6, 3]),
    dict(mode="cubic", scales=[2.0, 0.5], exclude_outside=True, cubic_coeff_a=-0.5),
    dict(mode="linear", scales=[0.5, 0.4], antialias=True),
    dict(mode="cubic", sizes=[2, 2], antialias=True),
    dict(mode="nearest", scales=[2.0, 0.6]),
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_check_grads_wrt_x(kw):
  x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 5)))
  check_grads(lambda v: jaxops.resize(v, **kw), (x,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_check_grads_wrt_traced_roi(mode):
  x = jnp.asarray(np.random.default_rng(2).standard_normal((6, 7)))
  roi = jnp.asarray([0.13, 0.21, 0.77, 0.69])  # coordinates away from integers

  def f(r):
    return jaxops.resize(x, sizes=[4, 5], roi=r, mode=mode,
                         coordinate_transformation_mode="tf_crop_and_resize")

  # Second differences of eps 1e-4 carry ~1e-5 relative error here: compare at 1e-3.
  check_grads(f, (roi,), order=2, modes=("fwd", "rev"), eps=1e-4, atol=1e-3, rtol=1e-3)
  assert float(jnp.abs(jax.grad(lambda r: f(r).sum())(roi)).sum()) > 0


def test_grad_wrt_roi_and_x_together():
  x = jnp.asarray(np.random.default_rng(3).standard_normal((5, 5)))
  roi = jnp.asarray([0.11, 0.32, 0.83, 0.71])

  def f(v, r):
    return jaxops.resize(v, sizes=[3, 4], roi=r, mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize")

  check_grads(f, (x, roi), order=1, modes=("rev",), eps=1e-4)


def test_vmap_over_roi_boxes_is_differentiable():
  # A differentiable crop-and-resize of many boxes: vmap over boxes, grad to boxes and image.
  x = jnp.asarray(np.random.default_rng(4).standard_normal((2, 8, 8)))
  # Boxes whose sample points stay inside the image under small perturbations (extrapolation
  # switches at the image border, where the crop is not differentiable).
  boxes = jnp.asarray([[0.1, 0.2, 0.6, 0.7], [0.3, 0.05, 0.9, 0.55], [0.02, 0.03, 0.97, 0.98]])

  def crops(v, b):
    return jax.vmap(lambda r: jaxops.resize(v, sizes=[3, 3], roi=r, axes=[1, 2], mode="linear",
                                            coordinate_transformation_mode="tf_crop_and_resize"))(b)

  assert crops(x, boxes).shape == (3, 2, 3, 3)
  check_grads(crops, (x, boxes), order=1, modes=("rev",), eps=1e-4)
  # The full box samples 8 -> 3 at x_original = 0, 3.5, 7: its corners are the image's.
  full = crops(x, jnp.asarray([[0.0, 0.0, 1.0, 1.0]]))[0]
  np.testing.assert_allclose(full[:, ::2, ::2], x[:, ::7, ::7], rtol=1e-12)


def test_vmap_over_batch_grad_matches_torch_autograd():
  import torch
  x = np.random.default_rng(5).standard_normal((3, 4, 5))

  def one(im):
    return jnp.sum(jaxops.resize(im, scales=[1.5, 2.0], mode="cubic") ** 2)

  per_image = np.asarray(jax.vmap(jax.grad(one))(jnp.asarray(x)))
  # torch's bicubic (a = -0.75, edge-clamped taps) with the given scale_factor maps
  # y -> (y + 0.5) / scale - 0.5 as half_pixel does: 4x5 -> 6x10.
  t = torch.from_numpy(x[:, None]).requires_grad_(True)
  y = torch.nn.functional.interpolate(t, scale_factor=(1.5, 2.0), mode="bicubic",
                                      align_corners=False)
  assert tuple(y.shape[2:]) == (6, 10)
  (y * y).sum().backward()
  np.testing.assert_allclose(per_image, t.grad.numpy()[:, 0], rtol=1e-9, atol=1e-9)
  # And the same as one batched gradient over axes 1 and 2.
  batched = jax.grad(lambda v: jnp.sum(
      jaxops.resize(v, scales=[1.5, 2.0], axes=[1, 2], mode="cubic") ** 2))(jnp.asarray(x))
  np.testing.assert_allclose(per_image, batched, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,torch_mode", [("linear", "bilinear"), ("cubic", "bicubic")])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(4, 11)])  # rows downsampled 7 -> 4, columns 8 -> 11
def test_grad_matches_torch_autograd(mode, torch_mode, align_corners, size):
  import torch
  x = np.random.default_rng(6).standard_normal((2, 3, 7, 8))
  coord = "align_corners" if align_corners else "pytorch_half_pixel"

  def loss(v):
    y = jaxops.resize(v, sizes=list(size), axes=[2, 3], mode=mode,
                      coordinate_transformation_mode=coord)
    return jnp.sum(y * y)

  got = np.asarray(jax.grad(loss)(jnp.asarray(x)))
  t = torch.from_numpy(x).requires_grad_(True)
  y = torch.nn.functional.interpolate(t, size=size, mode=torch_mode, align_corners=align_corners)
  (y * y).sum().backward()
  np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_traced_nan_roi_gives_the_input_no_gradient(mode):
  """tf_crop_and_resize with a traced NaN roi fills extrapolation_value (DEVIATIONS Resize 13),
  a value that does not depend on x: x's gradient is 0. Linear gave NaN in the taps' column
  (the masked cotangent times NaN weights; found by a gradient sweep)."""
  f = jax.jit(lambda v, r: jaxops.resize(v, roi=r, sizes=[3, 4], mode=mode,
                                         coordinate_transformation_mode="tf_crop_and_resize"))
  x = jnp.arange(30.0).reshape(5, 6)
  roi = jnp.array([0.1, jnp.nan, 0.8, 0.9])
  np.testing.assert_array_equal(np.asarray(f(x, roi)), 0.0)
  np.testing.assert_array_equal(np.asarray(jax.grad(lambda v: jnp.sum(f(v, roi)))(x)), 0.0)
