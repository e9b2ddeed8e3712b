"""The 1-D interpolation kernels shared by resize, grid_sample and roi_align.

Each function takes ``xp`` (``numpy`` for tables built at trace time, ``jax.numpy`` for traced
coordinates), so one formula serves both paths.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxops import _checks


class Mode(_checks.StrEnum):
  """Interpolation mode: resize's `mode`, GridSample-20+'s spelling."""

  NEAREST = "nearest"
  LINEAR = "linear"
  CUBIC = "cubic"


def kernel(xp: Any, mode: str, t: Any, a: float) -> Any:
  """The weight of a tap at signed distance ``t`` from the sample point.

  ``mode`` "linear": the triangle ``max(1 - |t|, 0)``. "cubic": Keys' cubic convolution with
  coefficient ``a`` (ONNX's ``cubic_coeff_a``; -0.75 as in PyTorch, -0.5 as in TensorFlow)::

    |t| <= 1      (a + 2)|t|^3 - (a + 3)|t|^2 + 1
    1 < |t| < 2   a|t|^3 - 5a|t|^2 + 8a|t| - 4a
    otherwise     0

  Examples:
    >>> import numpy as np
    >>> from jaxops._interp import kernel
    >>> kernel(np, "linear", np.array([-1.5, -0.25, 0.0, 0.5]), -0.75).tolist()
    [0.0, 0.75, 1.0, 0.5]
    >>> kernel(np, "cubic", np.array([0.0, 1.0, 2.0]), -0.75).tolist()
    [1.0, 0.0, 0.0]
  """
  t = xp.abs(t)
  if mode == "linear":
    return xp.maximum(1 - t, 0.0)
  t2, t3 = t * t, t * t * t
  near = (a + 2) * t3 - (a + 3) * t2 + 1
  far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
  return xp.where(t <= 1, near, xp.where(t < 2, far, 0.0))


def taps(xp: Any, mode: str, u: Any, a: float = -0.75) -> tuple[Any, Any]:
  """(first tap index, weights (..., K)) of sampling at coordinate ``u`` (pixel units).

  "linear": K = 2 taps ``floor(u), floor(u) + 1``; "cubic": K = 4 taps ``floor(u) - 1 ...
  floor(u) + 2``. The weights are ``kernel(tap - u)``; the index is a float (callers clip it
  and convert it to an integer type).

  Examples:
    >>> import numpy as np
    >>> from jaxops._interp import taps
    >>> first, w = taps(np, "linear", np.array(2.25))
    >>> float(first), w.tolist()
    (2.0, [0.75, 0.25])
  """
  base = xp.floor(u)
  frac = u - base
  if mode == "linear":
    return base, xp.stack([1 - frac, frac], axis=-1)
  offsets = (-1.0, 0.0, 1.0, 2.0)
  w = xp.stack([kernel(xp, "cubic", o - frac, a) for o in offsets], axis=-1)
  return base - 1, w


def divide(a: Any, b: Any) -> Any:
  """``a / b`` (jnp) rounded once, as C divides. XLA rewrites a division by a value it can see as
  a constant, or by a broadcast value, into a multiplication by the reciprocal: in float32
  ``21 / 7`` then gives 3.0000002, whose ceiling (roi_align's sample count) is 4, and whose
  floor decides which border grid_sample's reflection lands on. The divisor is broadcast to
  the quotient's shape and passed through an optimization barrier, which XLA cannot look
  through.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from jaxops._interp import divide
    >>> float(jax.jit(lambda v: divide(v, 7))(jnp.float32(21.0)))
    3.0
  """
  a, b = jnp.broadcast_arrays(a, jnp.asarray(b, jnp.result_type(a)))
  return a / jax.lax.optimization_barrier(b)
