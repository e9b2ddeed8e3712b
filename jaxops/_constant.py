"""constant_of_shape(): ONNX ConstantOfShape."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxops import _cast, _checks, _dtypes

_OP = "jaxops.constant_of_shape"


def constant_of_shape(shape: Any, value: jax.typing.ArrayLike | None = None) -> jax.Array:
  """A tensor of shape ``shape`` filled with ``value`` (ONNX ConstantOfShape, opset 9-25).

  ``shape`` decides the output shape, so it must be concrete (a Python or NumPy value) under
  ``jax.jit``; ``value`` may be traced (the result is differentiable with respect to it).

  Args:
    shape: the output shape: a list, tuple or 1-D NumPy integer array of dims >= 0. An empty
      shape gives a scalar; a zero dim gives an empty tensor.
    value: a one-element array (any shape) whose dtype and value fill the output: any ONNX
      element type a JAX array holds (bool, integers incl. int4/uint4/int2/uint2, float16,
      bfloat16, float32, float64, the float8 types, float4e2m1). A Python scalar takes JAX's
      default dtype for it. ``None`` (the default) gives float32 zeros.

  Returns:
    A ``jax.Array`` of shape ``tuple(shape)``, with ``value``'s dtype (float32 if ``value`` is
    None).

  Raises:
    TypeError: ``shape`` is traced or not integers; ``value`` is a string or complex, or its
      dtype has no ONNX element type (or is one the installed XLA cannot hold: the float6
      types).
    ValueError: a negative dim; ``value`` has more or fewer than one element; the output cannot
      fit in memory (raised before anything is allocated, naming the shape and its bytes).

  Examples:
    >>> import numpy as np, jaxops
    >>> jaxops.constant_of_shape([2, 3])
    Array([[0., 0., 0.],
           [0., 0., 0.]], dtype=float32)
    >>> jaxops.constant_of_shape(np.array([2], np.int64), np.array([7], np.int32))
    Array([7, 7], dtype=int32)
    >>> jaxops.constant_of_shape([]).shape
    ()
  """
  dims = _DIMS(_checks.cache_key(shape), shape)
  if value is None:
    _checks.check_output_size(_OP, dims, np.float32)
    return jnp.zeros(dims, jnp.float32)
  if isinstance(value, (str, bytes)) or (isinstance(value, np.ndarray)
                                         and value.dtype.kind in ("U", "S", "O")):
    raise _checks.type_error(_OP, "value", value, "a numeric or bool one-element array "
                             "(ConstantOfShape has no STRING output)")
  if not isinstance(value, (np.ndarray, np.generic, jax.Array)):
    value = _checks.as_array(value, _OP, "value")
  _checks.check_wraps(value, _OP, "value")  # a NumPy value goes to JAX as it is, below
  dtype = np.dtype(value.dtype)
  if dtype not in _VALUE_DTYPES:
    try:
      elem = _dtypes.of_dtype(dtype)
    except ValueError:
      elem = None
    if elem is None or not elem.jax_ok or dtype.kind == "c":
      raise _checks.type_error(_OP, "value", value, "an array whose dtype is a real ONNX "
                               "element type")
    if not _cast._xla_holds(dtype):
      raise _checks.type_error(_OP, "value", value, f"an array of a type the installed JAX/XLA "
                               f"can hold ({elem.name} is not, in jax {jax.__version__})")
    _VALUE_DTYPES.add(dtype)
  if int(np.size(value)) != 1:
    raise _checks.value_error(_OP, "value", value, "a one-element array")
  _checks.check_output_size(_OP, dims, dtype)
  return _fill(value, dims)


def _dims(shape: Any) -> tuple[int, ...]:
  """``shape`` checked, as a tuple of dims."""
  if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
    raise _checks.type_error(_OP, "shape", shape, "a 1-D sequence of integers (the dims)")
  try:
    arr = _checks.concrete(_OP, "shape", shape)
  except (TypeError, ValueError) as e:
    if _checks.is_traced(shape):  # concrete's own message says how to fix it
      raise
    raise _checks.type_error(_OP, "shape", shape, "a 1-D sequence of integers") from None
  if arr.size and arr.dtype.kind not in ("i", "u"):  # ONNX's shape is an int64 tensor
    raise _checks.type_error(_OP, "shape", shape, "a 1-D sequence of integers")
  dims = _checks.int_tuple(_OP, "shape", arr)
  if any(d < 0 for d in dims):
    raise _checks.value_error(_OP, "shape", shape, "dims >= 0")
  return dims


# Eager calls with a shape seen before skip its checks; `value` dtypes are checked once each.
_DIMS = _checks.ConfigCache(_dims)
_VALUE_DTYPES: set[np.dtype] = set()


@functools.partial(jax.jit, static_argnums=1)
def _fill(value: jax.Array, dims: tuple[int, ...]) -> jax.Array:
  return jnp.broadcast_to(jnp.reshape(value, ()), dims)
