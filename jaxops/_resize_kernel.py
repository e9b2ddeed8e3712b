"""The device work of resize along one axis: a K-tap gather and a weighted sum.

``apply_taps(x, axis, idx, weights)`` computes ``y[..., j, ...] = sum_k weights[j, k] *
x[..., idx[j, k], ...]`` along ``axis``. ``idx`` (int, shape (out, K)) is static NumPy;
``weights`` (shape (out, K)) is static NumPy or, on the traced-roi path, a traced array.

This is the plain version: its autodiff backward is the scatter-add that XLA derives from the
gather. A faster transpose replaces it behind the same signature.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def apply_taps(x: jax.Array, axis: int, idx: np.ndarray, weights: Any) -> jax.Array:
  """Resample ``x`` along ``axis`` with static tap indices and (static or traced) weights."""
  out, k = idx.shape
  taps = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
  shape = list(x.shape)
  shape[axis:axis + 1] = [out, k]
  taps = taps.reshape(shape)
  w = jnp.asarray(weights, dtype=x.dtype)
  w = w.reshape((out, k) + (1,) * (x.ndim - axis - 1))
  return jnp.sum(taps * w, axis=axis + 1)
