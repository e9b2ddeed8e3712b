"""Derivatives of the pools whose derivative is written apart from their value: windows that tile
an axis (kernel == stride, no dilation) and the global pool. Oracle: PyTorch (autograd for
reverse mode; for forward mode, the pool is linear, so the tangent is the pool of the tangent)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import jaxops  # float64 end to end: tests/conftest.py enables jax_enable_x64


# (shape, kernel, pads): kernel == stride on every axis; symmetric pads (torch needs pad <= k/2);
# lengths that the windows tile, that leave a tail no window reads, and padded ones.
TILED = [
    ((2, 3, 8, 8), (2, 2), (0, 0)),
    ((2, 3, 9, 7), (2, 2), (0, 0)),  # last row / column read by no window
    ((1, 2, 9, 12), (3, 4), (1, 2)),
    ((1, 2, 10), (2,), (1,)),
    ((1, 2, 6, 8, 4), (2, 2, 2), (0, 1, 1)),
]


def _torch_pool(t: torch.Tensor, kernel: tuple[int, ...], pads: tuple[int, ...]) -> torch.Tensor:
  fn = getattr(torch.nn.functional, f"avg_pool{len(kernel)}d")
  return fn(t, kernel, kernel, pads, count_include_pad=False)


@pytest.mark.parametrize("shape, kernel, pads", TILED)
def test_tiled_vjp_and_jvp_against_torch(shape, kernel, pads):
  rng = np.random.default_rng(sum(shape))
  x, t = rng.standard_normal(shape), rng.standard_normal(shape)

  def pool(v):
    return jaxops.average_pool(v, kernel, strides=kernel, pads=pads + pads)

  y, vjp = jax.vjp(pool, x)
  w = rng.standard_normal(y.shape)
  xt = torch.from_numpy(x).requires_grad_(True)
  yt = _torch_pool(xt, kernel, pads)
  (want,) = torch.autograd.grad(yt, xt, torch.from_numpy(w), retain_graph=True)
  np.testing.assert_allclose(np.asarray(vjp(w)[0]), want.numpy(), rtol=1e-13, atol=1e-14)
  # Under jit and as the benchmark differentiates: the gradient of a squared loss.
  g = jax.jit(jax.grad(lambda v: (pool(v) ** 2).sum()))(x)
  (want,) = torch.autograd.grad((yt ** 2).sum(), xt)
  np.testing.assert_allclose(np.asarray(g), want.numpy(), rtol=1e-13, atol=1e-14)
  _, tangent = jax.jvp(pool, (x,), (t,))
  want = _torch_pool(torch.from_numpy(t), kernel, pads).numpy()
  np.testing.assert_allclose(np.asarray(tangent), want, rtol=1e-13, atol=1e-14)


def test_tiled_vjp_under_vmap_against_torch():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((3, 2, 4, 6))
  w = rng.standard_normal((3, 2, 2, 3))

  def one(v, c):
    return jax.vjp(lambda u: jaxops.average_pool(u, (2, 2), strides=(2, 2)), v)[1](c)[0]

  got = jax.vmap(one)(x, w)
  xt = torch.from_numpy(x).requires_grad_(True)
  (want,) = torch.autograd.grad(_torch_pool(xt, (2, 2), (0, 0)), xt, torch.from_numpy(w))
  np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("shape", [(2, 5, 7, 7), (1, 3, 4, 5, 6), (3, 4)])
def test_global_vjp_and_jvp_against_torch(shape):
  rng = np.random.default_rng(len(shape))
  x, t = rng.standard_normal(shape), rng.standard_normal(shape)
  spatial = tuple(range(2, len(shape)))
  y, vjp = jax.vjp(jaxops.global_average_pool, x)
  w = rng.standard_normal(y.shape)
  xt = torch.from_numpy(x).requires_grad_(True)
  yt = xt.mean(dim=spatial, keepdim=True) if spatial else xt
  (want,) = torch.autograd.grad(yt, xt, torch.from_numpy(w), retain_graph=True)
  np.testing.assert_allclose(np.asarray(vjp(w)[0]), want.numpy(), rtol=1e-13, atol=1e-14)
  g = jax.jit(jax.grad(lambda v: (jaxops.global_average_pool(v) ** 2).sum()))(x)
  (want,) = torch.autograd.grad((yt ** 2).sum(), xt)
  np.testing.assert_allclose(np.asarray(g), want.numpy(), rtol=1e-13, atol=1e-14)
  _, tangent = jax.jvp(jaxops.global_average_pool, (x,), (t,))
  tt = torch.from_numpy(t)
  want = (tt.mean(dim=spatial, keepdim=True) if spatial else tt).numpy()
  np.testing.assert_allclose(np.asarray(tangent), want, rtol=1e-13, atol=1e-14)


def test_float32_gradient_of_the_benchmark_case_against_torch():
  # The benchmark's AveragePool 2x2 s2 and GlobalAveragePool backward rows, in float32.
  rng = np.random.default_rng(0)
  for shape, f, tf in [
      ((2, 4, 8, 8), lambda v: jaxops.average_pool(v, (2, 2), strides=(2, 2)),
       lambda t: torch.nn.functional.avg_pool2d(t, 2, 2)),
      ((2, 8, 7, 7), jaxops.global_average_pool,
       lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 1))]:
    x = rng.standard_normal(shape, dtype=np.float32)
    g = jax.jit(jax.grad(lambda v: (f(v) ** 2).sum()))(x)
    assert g.dtype == np.float32
    xt = torch.from_numpy(x).requires_grad_(True)
    (want,) = torch.autograd.grad((tf(xt) ** 2).sum(), xt)
    np.testing.assert_allclose(np.asarray(g), want.numpy(), rtol=1e-6, atol=1e-7)
