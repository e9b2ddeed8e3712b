"""Gradients of average_pool / global_average_pool, and their behaviour under jit and vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxops
from jaxops import _pool


def _configs():
  rng = np.random.default_rng(42)
  out = []
  while len(out) < 8:
    nd = int(rng.integers(1, 4))
    kernel = [int(v) for v in rng.integers(1, 4, nd)]
    strides = [int(v) for v in rng.integers(1, 3, nd)]
    dilations = [int(v) for v in rng.integers(1, 3, nd)]
    pads = [int(rng.integers(0, k)) for k in kernel * 2]
    shape = (1, 2) + tuple(int(v) for v in rng.integers(3, {1: 8, 2: 6, 3: 4}[nd] + 1, nd))
    kw = dict(strides=strides, dilations=dilations, pads=pads,
              ceil_mode=bool(len(out) % 2), count_include_pad=bool(len(out) % 3 == 0))
    try:
      jaxops.average_pool(np.zeros(shape), kernel, **kw)
    except ValueError:
      continue
    out.append((shape, kernel, kw))
  return out


@pytest.mark.parametrize("shape, kernel, kw", _configs())
def test_check_grads_order_2(shape, kernel, kw):
  x = np.random.default_rng(len(shape) + sum(kernel)).standard_normal(shape)
  check_grads(lambda v: jaxops.average_pool(v, kernel, **kw), (x,), order=2,
              modes=("fwd", "rev"))


def test_check_grads_tiled_and_global():
  x = np.random.default_rng(0).standard_normal((2, 2, 4, 6))
  check_grads(lambda v: jaxops.average_pool(v, (2, 3), strides=(2, 3)), (x,), order=2,
              modes=("fwd", "rev"))
  check_grads(lambda v: jaxops.average_pool(v, (2, 2), strides=(2, 2), auto_pad="SAME_LOWER"),
              (x[..., :5],), order=2, modes=("fwd", "rev"))
  check_grads(jaxops.global_average_pool, (x,), order=2, modes=("fwd", "rev"))


def test_hand_derived_gradient():
  # y = [x0, (x0 + x1) / 2, (x1 + x2) / 2, x2] (kernel 2, pads 1, 1, padding not counted), so
  # for a cotangent w: dx0 = w0 + w1 / 2, dx1 = (w1 + w2) / 2, dx2 = w2 / 2 + w3.
  w = np.array([[[1.0, 2.0, 3.0, 4.0]]])
  x = np.array([[[0.3, -1.0, 2.0]]])
  _, vjp = jax.vjp(lambda v: jaxops.average_pool(v, (2,), pads=(1, 1)), x)
  np.testing.assert_allclose(np.asarray(vjp(w)[0]), [[[2.0, 2.5, 5.5]]], rtol=1e-15)
  # counted padding: every window divides by 2.
  _, vjp = jax.vjp(lambda v: jaxops.average_pool(v, (2,), pads=(1, 1), count_include_pad=True), x)
  np.testing.assert_allclose(np.asarray(vjp(w)[0]), [[[1.5, 2.5, 3.5]]], rtol=1e-15)
  # ceil_mode, stride 2 over 5: windows (0, 1) (2, 3) (4): dx = [w0/2, w0/2, w1/2, w1/2, w2].
  _, vjp = jax.vjp(lambda v: jaxops.average_pool(v, (2,), strides=(2,), ceil_mode=True),
                   np.zeros((1, 1, 5)))
  np.testing.assert_allclose(np.asarray(vjp(w[..., :3])[0]), [[[0.5, 0.5, 1.0, 1.0, 3.0]]])
  # global: every element gets w / size.
  g = jax.grad(lambda v: jnp.sum(jaxops.global_average_pool(v) * 3.0))(np.ones((1, 1, 2, 3)))
  np.testing.assert_allclose(np.asarray(g), np.full((1, 1, 2, 3), 0.5))


def spec_pool(x, kernel, strides=None, pads=None, dilations=None, ceil_mode=False,
              count_include_pad=False):
  """The spec text's window loop (test_pool_differential.spec_pool) in float64, the oracle."""
  from test_pool_differential import spec_pool as loop  # a missing oracle fails, never skips

  nd = len(kernel)
  x = np.asarray(x, np.float64)
  lead = x.shape[:-nd - 1] if x.ndim > nd + 1 else ()
  y = loop(x.reshape((-1,) + x.shape[-nd - 1:]), list(kernel), list(strides or [1] * nd),
           list(pads) if pads else None, list(dilations or [1] * nd), "NOTSET", ceil_mode,
           count_include_pad)
  return y.reshape(lead + y.shape[1:])


def test_jit_eager_and_vmap_match_the_spec_loop():
  x = np.random.default_rng(1).standard_normal((2, 3, 7, 6)).astype(np.float32)
  kw = dict(strides=(2, 1), pads=(1, 0, 1, 1), dilations=(1, 2), ceil_mode=True)
  want = spec_pool(x, (3, 2), **kw)
  f = lambda v: jaxops.average_pool(v, (3, 2), **kw)  # noqa: E731
  eager, jitted = f(x), jax.jit(f)(x)
  mapped = jax.vmap(f)(x[:, None])[:, 0]  # one (1, 3, 7, 6) input per batch element
  for got in (eager, jitted, mapped):
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(jitted), np.asarray(eager))  # besides the oracle
  # shape arguments as static arguments of an outer jit: 2x2 blocks of the leading 6x6
  static = jax.jit(jaxops.average_pool, static_argnames=("kernel_shape", "strides"))
  want = x[:, :, :6, :6].astype(np.float64).reshape(2, 3, 3, 2, 3, 2).mean(axis=(3, 5))
  np.testing.assert_allclose(np.asarray(static(x, kernel_shape=(2, 2), strides=(2, 2))), want,
                             rtol=1e-6, atol=1e-6)


def test_vmap():
  x = np.random.default_rng(2).standard_normal((4, 1, 2, 5, 5))
  kw = dict(strides=(2, 2), pads=(1, 1, 1, 1))
  f = lambda v: jaxops.average_pool(v, (3, 3), **kw)  # noqa: E731
  want = spec_pool(x, (3, 3), **kw)  # the loop pools each (1, 2, 5, 5) element alike
  # atol: a window whose values nearly cancel (a mean of -4e-4 from N(0, 1) values) differs by
  # the summation order's rounding, about 1e-17, which rtol alone reads as 4e-14
  tol = dict(rtol=1e-14, atol=1e-15)
  for got in (jax.vmap(f)(x), jax.jit(jax.vmap(f))(x), f(x)):
    np.testing.assert_allclose(np.asarray(got), want, **tol)
  # batch axis in the middle: vmap moves it, the trailing axes are still the pooled ones.
  np.testing.assert_allclose(np.asarray(jax.vmap(f, in_axes=1, out_axes=1)(x.swapaxes(0, 1))),
                             want.swapaxes(0, 1), **tol)
  want = x.mean(axis=(3, 4), keepdims=True)
  g = jaxops.global_average_pool
  for got in (jax.vmap(g)(x), jax.jit(jax.vmap(g))(x), g(x[:, 0])[:, None]):
    np.testing.assert_allclose(np.asarray(got), want, **tol)


def test_no_retrace_on_repeated_call(monkeypatch):
  traces = []
  for name in ("_taps_sum", "_window_sum"):
    original = getattr(_pool, name)

    def counting(*args, _original=original, **kwargs):
      traces.append(1)
      return _original(*args, **kwargs)

    monkeypatch.setattr(_pool, name, counting)
  rng = np.random.default_rng(3)
  kw = dict(strides=(2, 1), pads=(1, 1, 0, 2), count_include_pad=True)
  shape = (1, 1, 13, 11)  # a shape no other test uses, so the first call traces
  jaxops.average_pool(rng.standard_normal(shape), (3, 3), **kw)
  first = len(traces)
  assert first >= 1
  for _ in range(3):
    jaxops.average_pool(rng.standard_normal(shape), (3, 3), **kw)
    jaxops.average_pool(rng.standard_normal(shape), [3, 3], **{**kw, "pads": [1, 1, 0, 2]})
  assert len(traces) == first


@pytest.mark.parametrize("op", ["average_pool", "lp_pool"])
@pytest.mark.parametrize("shape, kernel, pads, dilations", [
    ((1, 1, 1), (2,), (1, 1), (2,)),                    # the one window reads positions -1, 1
    ((2, 3, 1, 6), (2, 3), (1, 1, 1, 1), (2, 1)),
    ((1, 2, 3, 1, 4), (2, 2, 2), (1, 1, 1, 1, 1, 1), (1, 2, 2)),
])
def test_windows_of_padding_only_on_a_length_1_axis(op, shape, kernel, pads, dilations):
  """A dilated window over a length-1 axis can read only padding: its sum is 0 whatever x is.
  XLA's CPU compiler miscompiled the transpose of the dilated reduce_window there (jax.grad
  gave 0.5 for average_pool, 1 for lp_pool p=1, where the gradient is 0). Oracles: central
  differences in float64 (check_grads) and forward mode."""
  rng = np.random.default_rng(9)
  x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
  kw = dict(pads=pads, dilations=dilations)
  if op == "average_pool":
    f = lambda v: jaxops.average_pool(v, kernel, count_include_pad=True, **kw)
  else:
    f = lambda v: jaxops.lp_pool(v, kernel, p=1, **kw)
  w = rng.standard_normal(f(x).shape)
  loss = lambda v: jnp.sum(f(v) * w)
  check_grads(loss, (x,), order=1, modes=("rev",), atol=1e-7, rtol=1e-7)
  np.testing.assert_allclose(jax.grad(loss)(x), jax.jacfwd(loss)(x), rtol=1e-12, atol=1e-12)
  if shape == (1, 1, 1):
    assert float(jax.grad(loss)(x).ravel()[0]) == 0.0
