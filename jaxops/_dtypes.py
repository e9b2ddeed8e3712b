"""The one table between ONNX TensorProto element types and NumPy/JAX dtypes.

The enum values are ONNX's (onnx.TensorProto.DataType); they are written out here so that the
core never imports the onnx package. The narrow float and integer types come from ml_dtypes,
reached through ``jax.numpy`` (jax depends on ml_dtypes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class ElemType:
  """One ONNX element type: its enum value, its name, and the NumPy dtype that holds it.

  ``dtype`` is None where no NumPy/JAX dtype can hold the type (complex types are held by NumPy
  but ONNX's Cast does not allow them). STRING is held by NumPy object arrays on the host only.
  """

  enum: int
  name: str
  dtype: np.dtype | None

  @property
  def jax_ok(self) -> bool:
    """True when a jax.Array can hold this type (everything but STRING and the unheld ones)."""
    return self.dtype is not None and self.dtype != np.dtype(object)


def _d(t: Any) -> np.dtype:
  return np.dtype(t)


ELEM_TYPES: tuple[ElemType, ...] = (
    ElemType(1, "FLOAT", _d(np.float32)),
    ElemType(2, "UINT8", _d(np.uint8)),
    ElemType(3, "INT8", _d(np.int8)),
    ElemType(4, "UINT16", _d(np.uint16)),
    ElemType(5, "INT16", _d(np.int16)),
    ElemType(6, "INT32", _d(np.int32)),
    ElemType(7, "INT64", _d(np.int64)),
    ElemType(8, "STRING", _d(object)),
    ElemType(9, "BOOL", _d(np.bool_)),
    ElemType(10, "FLOAT16", _d(np.float16)),
    ElemType(11, "DOUBLE", _d(np.float64)),
    ElemType(12, "UINT32", _d(np.uint32)),
    ElemType(13, "UINT64", _d(np.uint64)),
    ElemType(14, "COMPLEX64", _d(np.complex64)),
    ElemType(15, "COMPLEX128", _d(np.complex128)),
    ElemType(16, "BFLOAT16", _d(jnp.bfloat16)),
    ElemType(17, "FLOAT8E4M3FN", _d(jnp.float8_e4m3fn)),
    ElemType(18, "FLOAT8E4M3FNUZ", _d(jnp.float8_e4m3fnuz)),
    ElemType(19, "FLOAT8E5M2", _d(jnp.float8_e5m2)),
    ElemType(20, "FLOAT8E5M2FNUZ", _d(jnp.float8_e5m2fnuz)),
    ElemType(21, "UINT4", _d(jnp.uint4)),
    ElemType(22, "INT4", _d(jnp.int4)),
    ElemType(23, "FLOAT4E2M1", _d(jnp.float4_e2m1fn)),
    ElemType(24, "FLOAT8E8M0", _d(jnp.float8_e8m0fnu)),
    ElemType(25, "UINT2", _d(jnp.uint2)),
    ElemType(26, "INT2", _d(jnp.int2)),
    ElemType(27, "FLOAT6E2M3", _d(jnp.float6_e2m3fn)),
    ElemType(28, "FLOAT6E3M2", _d(jnp.float6_e3m2fn)),
)

BY_ENUM: dict[int, ElemType] = {t.enum: t for t in ELEM_TYPES}
BY_NAME: dict[str, ElemType] = {t.name: t for t in ELEM_TYPES}
BY_DTYPE: dict[np.dtype, ElemType] = {t.dtype: t for t in ELEM_TYPES if t.dtype is not None}

# The integer types narrower than a byte: dtype -> (bits, signed). Casts into them keep the low
# bits (two's complement), which NumPy/XLA conversion alone does not do.
NARROW_INT: dict[np.dtype, tuple[int, bool]] = {
    _d(jnp.int4): (4, True), _d(jnp.uint4): (4, False), _d(jnp.int2): (2, True),
    _d(jnp.uint2): (2, False)}

FLOAT8_NAMES = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0")
# Types whose values compare exactly in tests (no rtol/atol).
EXACT_NAMES = frozenset(
    {"UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "UINT32", "UINT64", "BOOL", "STRING",
     "UINT4", "INT4", "UINT2", "INT2", "FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2", *FLOAT8_NAMES})


def elem_type(op: str, arg: str, to: Any) -> ElemType:
  """Resolve ``to`` (TensorProto enum int, its name, or a NumPy/JAX dtype) to an ElemType.

  Raises:
    TypeError: ``to`` is none of those (None, a bool, an array or a traced value included).
    ValueError: an unknown enum value or name, or a dtype with no ONNX element type.
  """
  kinds = "an ONNX TensorProto enum value, its name or a dtype"
  if to is None or isinstance(to, (bool, np.bool_, tuple, list, dict)):
    # (NumPy reads ('a', 'b') or [('f', 'i4')] as structured dtypes: no ONNX type)
    raise TypeError(f"{op}: argument `{arg}` must be {kinds}; got {to!r}")
  if isinstance(to, (int, np.integer)):
    if int(to) in BY_ENUM:
      return BY_ENUM[int(to)]
    raise ValueError(f"{op}: argument `{arg}` must be an ONNX TensorProto enum value in "
                     f"{sorted(BY_ENUM)}; got {int(to)}")
  if isinstance(to, bytes):
    try:
      to = to.decode()
    except UnicodeDecodeError:
      raise ValueError(f"{op}: argument `{arg}` must be an ONNX type name; got {to!r}") from None
  if isinstance(to, str):
    if to.upper() in BY_NAME:
      return BY_NAME[to.upper()]
    try:
      dtype = np.dtype(to)
    except (TypeError, ValueError, SyntaxError):
      raise ValueError(f"{op}: argument `{arg}` must be an ONNX type name "
                       f"({', '.join(BY_NAME)}) or a dtype name; got {to!r}") from None
    return _from_dtype(op, arg, dtype)
  if not isinstance(to, (np.dtype, type)) and hasattr(to, "shape"):
    # An array (or a traced value) is no type, although NumPy would read its dtype.
    shape = getattr(to, "shape", None)
    raise TypeError(f"{op}: argument `{arg}` must be {kinds}, not an array; got an array of "
                    f"shape {shape}")
  try:
    dtype = np.dtype(to)
  except (TypeError, ValueError, SyntaxError):
    raise TypeError(f"{op}: argument `{arg}` must be {kinds}; got {to!r}") from None
  return _from_dtype(op, arg, dtype)


def _from_dtype(op: str, arg: str, dtype: np.dtype) -> ElemType:
  if dtype.kind in ("U", "S", "O"):
    return BY_NAME["STRING"]
  if dtype in BY_DTYPE:
    return BY_DTYPE[dtype]
  raise ValueError(f"{op}: argument `{arg}`: dtype {dtype} has no ONNX element type")


def of_dtype(dtype: Any) -> ElemType:
  """The ElemType of a dtype (``np.str_`` and object arrays are STRING)."""
  return _from_dtype("jaxops", "dtype", np.dtype(dtype))
