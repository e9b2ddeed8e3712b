"""jaxops._fused_sum: a broadcast and a sum over the last axis that are each other's transposes.

Oracles: jnp.sum / jnp.broadcast_to (values, IEEE special cases), numerical differences
(check_grads), and JAX's own transposes of the plain operations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxops import _fused_sum as fs


def test_values_are_the_plain_operations():
  rng = np.random.default_rng(0)
  v = rng.standard_normal((3, 4, 5))
  np.testing.assert_allclose(fs.sum_last(v), v.sum(-1), rtol=1e-14)
  np.testing.assert_array_equal(fs.broadcast_last(v, 3), np.broadcast_to(v[..., None],
                                                                         (3, 4, 5, 3)))
  f32 = v.astype(np.float32)
  assert fs.sum_last(f32).dtype == np.float32
  np.testing.assert_allclose(fs.sum_last(f32), f32.sum(-1), rtol=1e-6)
  assert fs.sum_last(jnp.zeros((2, 0))).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("values", [[np.inf, 1.0], [-np.inf, np.inf], [np.nan, 1.0],
                                    [-0.0, -0.0], [-0.0, 0.0], [1e308, 1e308], [1.0, -1.0]])
def test_special_values_sum_as_add_does(values):
  """a - (-b) is a + b for every pair of IEEE values: infinities, NaN, signed zeros (from the
  +0 start, as jnp.sum's) and overflow come out as jnp.sum's."""
  v = jnp.asarray(values, jnp.float64)
  got, want = float(jax.jit(fs.sum_last)(v)), float(jnp.sum(v))
  np.testing.assert_array_equal(got, want)
  assert np.signbit(got) == np.signbit(want)


def test_transposes_and_derivatives():
  rng = np.random.default_rng(1)
  v = jnp.asarray(rng.standard_normal((2, 3)))
  ct = jnp.asarray(rng.standard_normal((2, 3, 4)))
  (t,) = jax.linear_transpose(lambda u: fs.broadcast_last(u, 4), v)(ct)
  np.testing.assert_allclose(t, ct.sum(-1), rtol=1e-14)
  (t,) = jax.linear_transpose(fs.sum_last, ct)(v)
  np.testing.assert_array_equal(t, jnp.broadcast_to(v[..., None], ct.shape))

  def f(u):
    return jnp.sin(fs.sum_last(fs.broadcast_last(u, 3) * u[..., None] ** 2))

  # jitted: eager, every primitive of every derivative compiles on its own (177 programs)
  check_grads(jax.jit(f), (v,), order=2, modes=("fwd", "rev"), eps=1e-6)
  plain = jax.jit(jax.hessian(lambda u: jnp.sum(jnp.sin(3 * u ** 3))))(v)
  np.testing.assert_allclose(jax.jit(jax.hessian(lambda u: jnp.sum(f(u))))(v), plain,
                             rtol=1e-12, atol=1e-12)


def test_vmap_over_any_axis():
  rng = np.random.default_rng(2)
  v = jnp.asarray(rng.standard_normal((3, 4, 5)))
  for axis in range(3):
    np.testing.assert_allclose(jax.vmap(fs.sum_last, in_axes=axis)(v),
                               jnp.moveaxis(v, axis, 0).sum(-1), rtol=1e-14)
    np.testing.assert_array_equal(
        jax.vmap(lambda u: fs.broadcast_last(u, 2), in_axes=axis)(v),
        jnp.broadcast_to(jnp.moveaxis(v, axis, 0)[..., None], (v.shape[axis],) +
                         tuple(np.delete(v.shape, axis)) + (2,)))
  g = jax.vmap(jax.grad(lambda u: jnp.sum(fs.broadcast_last(u, 3) ** 2)))(v)
  np.testing.assert_allclose(g, 6 * v, rtol=1e-14)
