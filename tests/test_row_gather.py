"""jaxops._row_gather: a batched row gather whose single-device lowering flattens the index.

Oracles: NumPy fancy indexing (values), JAX's own transpose and vmap of the plain
``jax.vmap(lambda a, i: a[i])`` form, numerical differences (check_grads). The sharded lowering
(the batched form, no collectives) is pinned by tests/test_sharding.py through grid_sample.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxops._row_gather import row_gather


def _numpy(xt: np.ndarray, idx: np.ndarray) -> np.ndarray:
  return np.stack([xt[n][idx[n]] for n in range(xt.shape[0])])


def _plain(xt: jax.Array, idx: jax.Array) -> jax.Array:
  return jax.vmap(lambda a, i: a[i])(xt, idx)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_values_eager_and_jitted(dtype):
  rng = np.random.default_rng(0)
  xt = (rng.standard_normal((3, 10, 4)) * 10).astype(dtype)
  idx = rng.integers(0, 10, (3, 5, 2)).astype(np.int32)
  want = _numpy(xt, idx)
  got = row_gather(jnp.asarray(xt), jnp.asarray(idx))
  assert got.dtype == want.dtype and got.shape == (3, 5, 2, 4)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(jax.jit(row_gather)(xt, idx), want)


def test_transpose_and_derivatives():
  rng = np.random.default_rng(1)
  xt = jnp.asarray(rng.standard_normal((2, 7, 3)))
  idx = jnp.asarray(rng.integers(0, 7, (2, 9)).astype(np.int32))  # repeated rows: adds
  ct = jnp.asarray(rng.standard_normal((2, 9, 3)))
  (got,) = jax.linear_transpose(lambda a: row_gather(a, idx), xt)(ct)
  (want,) = jax.linear_transpose(lambda a: _plain(a, idx), xt)(ct)
  np.testing.assert_allclose(got, want, rtol=1e-14)
  (got,) = jax.jit(jax.linear_transpose(lambda a: row_gather(a, idx), xt))(ct)
  np.testing.assert_allclose(got, want, rtol=1e-14)

  def f(a):
    return jnp.sum(jnp.sin(row_gather(a, idx)) ** 2)

  check_grads(f, (xt,), order=2, modes=("fwd", "rev"))
  np.testing.assert_allclose(jax.jit(jax.grad(f))(xt),
                             jax.grad(lambda a: jnp.sum(jnp.sin(_plain(a, idx)) ** 2))(xt),
                             rtol=1e-13)


@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0), (None, 2), (2, 1)])
def test_vmap(axes):
  rng = np.random.default_rng(2)
  xb = rng.standard_normal((2, 3, 10, 4))
  ib = rng.integers(0, 10, (2, 3, 5)).astype(np.int32)
  a = xb[0] if axes[0] is None else np.moveaxis(xb, 0, axes[0])
  i = ib[0] if axes[1] is None else np.moveaxis(ib, 0, axes[1])
  got = jax.jit(jax.vmap(row_gather, in_axes=axes))(a, i)
  want = jax.vmap(_plain, in_axes=axes)(a, i)
  np.testing.assert_array_equal(got, want)
