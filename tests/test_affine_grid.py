"""affine_grid: hand-derived values, errors, dtypes, gradients, vmap over thetas, the ONNX
adapter, and the length-1 axis with align_corners (docs/DEVIATIONS.md, AffineGrid)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
import torch
from jax.test_util import check_grads
from onnx import helper

import jaxops
from jaxops.onnx import Backend


class TestValues(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_identity_gives_the_base_positions(self):
    # W = 4: align_corners -1 + 2w / 3 = -1, -1/3, 1/3, 1; else -1 + (2w + 1) / 4.
    eye = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    f = self.variant(lambda t, ac: jaxops.affine_grid(t, (1, 1, 2, 4), align_corners=ac),
                     static_argnums=1)
    np.testing.assert_allclose(np.asarray(f(eye, True))[0, 0, :, 0], [-1, -1 / 3, 1 / 3, 1],
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(f(eye, False))[0, 0, :, 0], [-0.75, -0.25, 0.25, 0.75],
                               rtol=1e-12)
    # y (the second component) runs over H = 2: -0.5, 0.5 without align_corners
    np.testing.assert_allclose(np.asarray(f(eye, False))[0, :, 0, 1], [-0.5, 0.5], rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  def test_3d_translation(self):
    # A pure translation t adds t to every base position: (x, y, z) listed innermost first.
    theta = np.concatenate([np.eye(3), [[0.1], [0.2], [0.3]]], axis=1)[None]
    g = self.variant(lambda t: jaxops.affine_grid(t, (1, 1, 2, 3, 4)))(theta)
    assert g.shape == (1, 2, 3, 4, 3)
    np.testing.assert_allclose(np.asarray(g)[0, 1, 2, 3], [0.75 + 0.1, 2 / 3 + 0.2, 0.5 + 0.3],
                               rtol=1e-12)


def test_errors():
  with pytest.raises(ValueError, match=r"jaxops.affine_grid: argument `theta`.*\(2, 2, 3\)"):
    jaxops.affine_grid(np.zeros((1, 2, 3)), (2, 1, 4, 4))
  with pytest.raises(ValueError, match=r"jaxops.affine_grid: argument `size`"):
    jaxops.affine_grid(np.zeros((1, 2, 3)), (1, 1, 4))
  with pytest.raises(TypeError, match=r"jaxops.affine_grid: argument `theta`.*floating"):
    jaxops.affine_grid(np.zeros((1, 2, 3), np.int32), (1, 1, 4, 4))
  with pytest.raises(TypeError, match=r"jaxops.affine_grid: argument `size` decides the output"):
    jax.jit(lambda s: jaxops.affine_grid(np.zeros((1, 2, 3)), s))(jnp.array([1, 1, 4, 4]))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, np.float32, np.float64])
def test_dtypes_follow_theta(dtype):
  theta = np.random.default_rng(0).standard_normal((2, 2, 3))
  want = torch.nn.functional.affine_grid(torch.tensor(theta), (2, 1, 3, 5),
                                         align_corners=False).numpy()
  g = jaxops.affine_grid(theta.astype(dtype), (2, 1, 3, 5))
  assert g.dtype == np.dtype(dtype)
  tol = {np.float64: 1e-12, np.float32: 1e-6}.get(dtype, 2e-2)
  np.testing.assert_allclose(np.asarray(g, np.float64), want, rtol=tol, atol=tol * 5)


def test_gradients_and_vmap_over_thetas():
  rng = np.random.default_rng(1)
  thetas = rng.standard_normal((4, 1, 3, 4))
  check_grads(lambda t: jaxops.affine_grid(t, (1, 2, 2, 3, 2)), (thetas[0],), order=2,
              modes=("fwd", "rev"))
  got = jax.vmap(lambda t: jaxops.affine_grid(t, (1, 2, 2, 3, 2), align_corners=True))(thetas)
  for i in range(4):
    want = torch.nn.functional.affine_grid(torch.tensor(thetas[i]), (1, 2, 2, 3, 2),
                                           align_corners=True).numpy()
    np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-12, atol=1e-13)
  # the gradient with respect to theta equals torch autograd (through grid_sample as well)
  x = rng.standard_normal((1, 2, 5, 6))
  theta = np.eye(2, 3)[None] + 0.2 * rng.standard_normal((1, 2, 3))
  tt = torch.tensor(theta, requires_grad=True)
  out = torch.nn.functional.grid_sample(
      torch.tensor(x), torch.nn.functional.affine_grid(tt, (1, 2, 4, 3), align_corners=False),
      align_corners=False)
  (out ** 2).sum().backward()
  dt = jax.grad(lambda t: jnp.sum(jaxops.grid_sample(x, jaxops.affine_grid(t, (1, 2, 4, 3)))
                                  ** 2))(theta)
  np.testing.assert_allclose(np.asarray(dt), tt.grad.numpy(), rtol=1e-9, atol=1e-11)


def _ort(theta, size, ac):
  node = helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=ac)
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("t", 1, None),
                                          helper.make_tensor_value_info("s", 7, None)],
                            [helper.make_tensor_value_info("y", 1, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
  model.ir_version = 10
  return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
      None, {"t": theta, "s": np.array(size, np.int64)})[0]


def test_deviation_length_one_axis_with_align_corners():
  # One pixel: its centre is both corners; jaxops places it at 0 (the middle of [-1, 1], as
  # torch does); onnxruntime places it at 1; the reference divides by zero.
  eye = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], np.float32)
  g = np.asarray(jaxops.affine_grid(eye, (1, 1, 1, 3), align_corners=True))
  np.testing.assert_allclose(g[0, 0, :, 1], [0.0, 0.0, 0.0])
  np.testing.assert_allclose(g[0, 0, :, 0], [-1.0, 0.0, 1.0])
  with pytest.warns(UserWarning, match="unit-size grids"):
    want = torch.nn.functional.affine_grid(torch.tensor(eye), (1, 1, 1, 3), align_corners=True)
  np.testing.assert_allclose(g, want.numpy())
  np.testing.assert_allclose(_ort(eye, (1, 1, 1, 3), 1)[0, 0, :, 1], [1.0, 1.0, 1.0])


def test_onnx_adapter():
  theta = np.random.default_rng(2).standard_normal((2, 2, 3)).astype(np.float32)
  node = helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=1)
  got = Backend.run_node(node, [theta, np.array([2, 3, 4, 5], np.int64)], opset_version=20)[0]
  np.testing.assert_allclose(got, _ort(theta, (2, 3, 4, 5), 1), rtol=1e-5, atol=1e-6)
  with pytest.raises(TypeError, match=r"\(AffineGrid-20\): input 0 \(`theta`\) has element type INT32"):
    Backend.run_node(node, [theta.astype(np.int32), np.array([2, 3, 4, 5], np.int64)],
                     opset_version=20)
