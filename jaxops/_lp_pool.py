"""lp_pool(), global_lp_pool(): ONNX LpPool / GlobalLpPool in JAX.

``y = (sum over the window of |x| ** p) ** (1 / p)``, the padding counted as zeros. The windows
come from the static plan in _window.py; the window sums are average_pool's (separable passes of
slices or 1-D reduce_window, see _pool.window_sums), on ``|x| ** p``.

The gradient of the p-th root is infinite where a window's sum is zero; jaxops defines the
gradient of an all-zero window as zero (the subgradient PyTorch's lp_pool also gives for p = 1
and the limit along the window's axes for any p), so a zero window never puts NaN into a
gradient.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxops._checks import (ConfigCache, cache_key, compute_dtype, floating_input,
                            global_pool_input, is_traced, static_bool, type_error, value_error)
from jaxops._pool import window_sums
from jaxops._window import WindowAxis, window_plan

_DTYPES = tuple(np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
_OP = "jaxops.lp_pool"


def _p_value(op: str, p: Any, *, integer: bool = True) -> float:
  """``p`` as a float: a positive integer (or, for the ONNX version-1 float attribute, any
  positive finite number)."""
  if is_traced(p):
    raise type_error(op, "p", p, "a Python integer (it is static: it must be concrete under "
                     "jax.jit)")
  if isinstance(p, (bool, np.bool_)):
    raise type_error(op, "p", p, "a positive integer")
  if integer:
    if not isinstance(p, (int, np.integer)):
      raise type_error(op, "p", p, "a positive integer")
    if p < 1:
      raise value_error(op, "p", p, "a positive integer")
    if p >= 2 ** 63:  # ONNX's p is an int64 attribute (2**64 ran, its windows 0 or inf)
      raise value_error(op, "p", p, "a positive integer that int64 holds")
    return float(p)
  try:
    value = float(p)
  except (TypeError, ValueError):
    raise type_error(op, "p", p, "a positive number") from None
  if not np.isfinite(value) or value <= 0:
    raise value_error(op, "p", p, "a positive finite number")
  return value


@dataclasses.dataclass(frozen=True)
class _LpPlan:
  axes: tuple[WindowAxis, ...]
  p: float


def _plan(shape: tuple[int, ...], kernel_shape: Any, p: float, strides: Any, pads: Any,
          dilations: Any, auto_pad: Any, ceil_mode: Any) -> _LpPlan:
  axes = window_plan(_OP, shape, kernel_shape, strides, pads, dilations, auto_pad,
                     static_bool(_OP, "ceil_mode", ceil_mode))
  return _LpPlan(axes, p)


_PLANS = ConfigCache(_plan)


def lp_pool(x: jax.typing.ArrayLike, kernel_shape: Sequence[int], *, p: int = 2,
            strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
            dilations: Sequence[int] | None = None, auto_pad: str = "NOTSET",
            ceil_mode: bool = False) -> jax.Array:
  """ONNX LpPool (opset 22): the Lp norm of each sliding window of the trailing axes.

  ``y = (sum of |x| ** p over the window) ** (1 / p)``, the padding counted as zeros. Windows
  (output lengths, padding, ``ceil_mode``, ``auto_pad``, ``dilations``) are as in
  :func:`jaxops.average_pool`.

  The gradient at a window whose elements are all zero is zero (not NaN): the p-th root has no
  derivative at zero, and jaxops takes the zero subgradient.

  Args:
    x: input array, float16, bfloat16, float32 or float64.
    kernel_shape: window size along each pooled axis.
    p: the order of the norm, a positive integer; default 2.
    strides: step along each pooled axis; default 1.
    pads: ``[x1_begin, ..., x1_end, ...]``, each smaller than the kernel along its axis.
    dilations: spacing of the window's taps along each pooled axis; default 1.
    auto_pad: "NOTSET" (or ""), "SAME_UPPER", "SAME_LOWER" or "VALID".
    ceil_mode: round the output length up instead of down.

  ``kernel_shape``, ``strides``, ``pads``, ``dilations`` and ``p`` must be concrete.

  Returns:
    The pooled array, of the dtype of ``x`` (float16 and bfloat16 compute in float32).

  Raises:
    TypeError: ``x`` has another dtype; ``p`` is not an integer; a shape argument is traced.
    ValueError: ``p`` below 1; as :func:`jaxops.average_pool` for the window arguments.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> x = jnp.array([[[3.0, -4.0, 0.0, 1.0]]])
    >>> jaxops.lp_pool(x, (2,), strides=(2,))
    Array([[[5., 1.]]], dtype=float32)
    >>> jaxops.lp_pool(x, (2,), p=1, pads=(1, 0))
    Array([[[3., 7., 4., 1.]]], dtype=float32)
  """
  return _lp_pool_any_p(x, kernel_shape, _p_value(_OP, p), strides=strides, pads=pads,
                        dilations=dilations, auto_pad=auto_pad, ceil_mode=ceil_mode)


def _lp_pool_any_p(x: Any, kernel_shape: Any, p: float, *, strides: Any = None, pads: Any = None,
                   dilations: Any = None, auto_pad: Any = "NOTSET",
                   ceil_mode: Any = False) -> jax.Array:
  """lp_pool with a checked float ``p`` (LpPool-1's float attribute reaches here directly)."""
  x = floating_input(_OP, x, _DTYPES)
  static = (tuple(x.shape), kernel_shape, p, strides, pads, dilations, auto_pad, ceil_mode)
  plan = _PLANS(cache_key(*static), *static)
  return _lp_pool(x, plan)


def _power(x: jax.Array, p: float) -> jax.Array:
  """``|x| ** p`` with the derivative at ``x == 0`` taken as zero: for p > 1 it is zero, for
  p = 1 the subgradient sign(0), and for a float p below 1 (LpPool-1, GlobalLpPool-1) where
  ``|x| ** p`` has an infinite slope at zero, zero too (otherwise an all-zero window's zero
  gradient from ``_root`` would meet it as 0 * inf = NaN)."""
  if p == 1:
    return x * jnp.sign(x)  # |x| with the derivative sign(x): zero at zero
  a = jnp.abs(x)
  if p == int(p):
    return lax.integer_pow(a, int(p))
  if p > 1:
    return a ** np.asarray(p, a.dtype)
  return _zero_at_zero(a, lambda v: v ** np.asarray(p, a.dtype))


def _root(s: jax.Array, p: float) -> jax.Array:
  """``s ** (1 / p)`` for ``s >= 0``, with the gradient at ``s == 0`` taken as zero."""
  if p == 1:
    return s
  return _zero_at_zero(s, jnp.sqrt if p == 2 else lambda v: v ** np.asarray(1.0 / p, s.dtype))


def _zero_at_zero(v: jax.Array, f: Callable[[jax.Array], jax.Array]) -> jax.Array:
  """``f(v)``, but 0 with a zero derivative where ``v == 0`` (where ``f``'s own derivative is
  infinite); ``f`` never sees a zero. (Not ``v > 0``: a NaN must stay NaN.)"""
  zero = v == 0
  return jnp.where(zero, np.zeros((), v.dtype), f(jnp.where(zero, np.ones((), v.dtype), v)))


@functools.partial(jax.jit, static_argnums=1)
def _lp_pool(x: jax.Array, plan: _LpPlan) -> jax.Array:
  dtype = x.dtype
  z = _power(x.astype(compute_dtype(dtype)), plan.p)
  return _root(window_sums(z, plan.axes), plan.p).astype(dtype)


def global_lp_pool(x: jax.typing.ArrayLike, *, p: int = 2) -> jax.Array:
  """ONNX GlobalLpPool: the Lp norm over every axis after the first two.

  ``x`` is ``(N, C, D1, ..., Dn)``; the result is ``(N, C, 1, ..., 1)``, ``(sum |x| ** p) **
  (1 / p)`` per (n, c) plane. The gradient of an all-zero plane is zero.

  Args:
    x: input array with at least two axes, float16, bfloat16, float32 or float64.
    p: the order of the norm, a positive integer; default 2.

  Returns:
    The norms, of the same dtype as ``x`` (float16 and bfloat16 compute in float32).

  Raises:
    TypeError: ``x`` has another dtype; ``p`` is not an integer.
    ValueError: ``x`` has fewer than two axes; ``p`` below 1.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> jaxops.global_lp_pool(jnp.array([[[3.0, 4.0], [1.0, -1.0]]]), p=1)
    Array([[[7.],
            [2.]]], dtype=float32)
  """
  op = "jaxops.global_lp_pool"
  return _global_lp_pool_any_p(x, _p_value(op, p), op)


def _global_lp_pool_any_p(x: Any, p: float, op: str = "jaxops.global_lp_pool") -> jax.Array:
  x = global_pool_input(op, x, _DTYPES)
  return _global_lp_pool(x, p)


@functools.partial(jax.jit, static_argnums=1)
def _global_lp_pool(x: jax.Array, p: float) -> jax.Array:
  dtype = x.dtype
  z = _power(x.astype(compute_dtype(dtype)), p)
  size = math.prod(x.shape[2:])
  sums = jnp.sum(z.reshape(x.shape[:2] + (size,)), axis=-1)
  y = _root(sums, p)
  return y.reshape(x.shape[:2] + (1,) * (x.ndim - 2)).astype(dtype)
