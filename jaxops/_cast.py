"""cast() and cast_like(): ONNX Cast / CastLike, every element type a JAX array can hold.

The rules are those of the newest Cast (opset 24+); the one older behaviour that no attribute
expresses (Cast-19..23 send +-Inf to NaN for the FNUZ float8 types under ``saturate``) is the
keyword ``fnuz_inf_to_nan`` of :func:`cast_internal` / :func:`cast_like_internal`, which
``jaxops/onnx/_registry.py`` calls; the public functions forward to them.

XLA's conversion equals the ONNX rule for most pairs; where it does not, the rule is written out:

* float -> float8 with ``saturate``: clamp to +-max before rounding (NaN stays NaN).
* float -> float8e8m0: computed from the exponent and mantissa bits (``round_mode``, saturation).
* float -> float4e2m1: clamp to +-6; NaN gives +0 (as ONNX's node cases and ml_dtypes do).
* float64 -> float32/float16/bfloat16/float8: XLA on CPU rounds float64 through float32 (double
  rounding) and flushes float32 subnormals to zero; here float64 is first rounded to float32 with
  round-to-odd, which makes the second rounding exact, and float32 subnormals are built from bits.
* any -> int4/uint4/int2/uint2: wrap around (floats are rounded half to even first).
* STRING: on the host with NumPy, outside jit (JAX arrays cannot hold strings); the formatting
  and parsing live in ``jaxops/_cast_string.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxops import _cast_string, _checks, _dtypes

_OP_CAST = "jaxops.cast"
_OP_CAST_LIKE = "jaxops.cast_like"

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BF16 = np.dtype(jnp.bfloat16)
_E8M0 = np.dtype(jnp.float8_e8m0fnu)
_F4 = np.dtype(jnp.float4_e2m1fn)
_E5M2 = np.dtype(jnp.float8_e5m2)
_FLOAT8 = frozenset(np.dtype(t) for t in (jnp.float8_e4m3fn, jnp.float8_e4m3fnuz,
                                          jnp.float8_e5m2, jnp.float8_e5m2fnuz))
_FNUZ = frozenset(np.dtype(t) for t in (jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz))
_WIDE_FLOATS = frozenset((_F16, _F32, _F64, _BF16))
# Narrow integer types: (bits, signed).
_NARROW_INT = _dtypes.NARROW_INT


class RoundMode(_checks.StrEnum):
  """Rounding of casts to float8e8m0 (``round_mode`` of Cast-24+)."""

  UP = "up"
  DOWN = "down"
  NEAREST = "nearest"


def cast(x: jax.typing.ArrayLike, to: Any, *, saturate: bool = True,
         round_mode: str = "up") -> jax.Array | np.ndarray:
  """Casts ``x`` to the element type ``to`` by the rules of ONNX Cast (opset 24 and later).

  Numeric rules (ONNX's Cast text): float -> float rounds to nearest even, +-Inf when out of
  range; float -> integer truncates toward zero (out of range is undefined in ONNX; XLA
  saturates); float -> int4/uint4/int2/uint2 rounds half to even, then keeps the low bits
  (ONNX's Int4/Int2 notes); integer -> integer keeps the low bits (200 int16 -> -56 int8, 8
  -> -8 int4); integer -> float rounds, +-Inf when out of range; anything -> bool is ``x != 0``
  (NaN gives True); bool -> number is 1 or 0. With JAX's 64-bit types off (its default), INT64,
  UINT64 and DOUBLE targets give int32, uint32 and float32, as JAX narrows them (with its
  warning): the result is that of a cast to INT32, UINT32 or FLOAT.

  Float8 targets (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ) follow ONNX's saturation tables: with
  ``saturate`` values beyond the largest finite value, and +-Inf, become +-max; without it they
  become NaN (Inf for E5M2). FNUZ types have no -0 (it becomes +0). float8e8m0 (powers of two
  2**-127 .. 2**127, no sign, no zero) rounds the exponent by ``round_mode``; x > 2**127 (and
  +Inf) becomes 2**127 with ``saturate``, NaN without; x < 2**-127 (and 0, and negative x,
  which ONNX leaves unspecified) becomes 2**-127 with ``saturate``, NaN without.
  float4e2m1 saturates to +-6 and sends NaN to +0. The float6 types (Cast-28) exist in
  ml_dtypes but the installed XLA cannot convert them: they raise a TypeError.

  STRING (``to="STRING"``, or a NumPy array of str/object): runs on the host with NumPy, outside
  ``jax.jit``; JAX arrays cannot hold strings, so a traced ``x`` raises a TypeError. Numbers
  print in the shortest text that reads back to the same value (fewest digits, then the
  shorter notation: "0.1", "100", "1e+20"), NaN and +-Inf as "NaN", "INF", "-INF", bools as
  "1"/"0". Strings parse as decimal or scientific numbers; "INF", "+INF", "-INF", "NaN" in any
  case are the special values; a string that is no number raises a ValueError.

  Gradients: a float -> float cast is differentiable; its tangent is the input tangent cast to
  the output type (XLA's conversion, no saturation: a straight-through estimator), so the
  gradient is the cotangent cast back to the input type. The tangent lives in the output type:
  into FLOAT8E8M0 (no zero, no sign) a zero or negative tangent is NaN, and into the other
  float8 types one beyond the type's range is NaN or inf. Casts to integer or bool types have
  zero gradient (JAX's float0 tangents), and integer or bool inputs have none (``jax.grad``
  rejects them).

  Args:
    x: the array to cast: any dtype in jaxops' ONNX type table, or a NumPy str/object array.
    to: the target type: an ONNX TensorProto enum value (``1``), its name (``"FLOAT"``,
      ``"FLOAT8E4M3FN"``, ``"STRING"``) or a NumPy/JAX dtype (``jnp.bfloat16``).
    saturate: clamp out-of-range values to the largest finite value for float8 targets
      (including float8e8m0) instead of NaN/Inf. Ignored for other targets.
    round_mode: rounding of float8e8m0 targets: ``"up"`` (away from zero), ``"down"``
      (toward zero) or ``"nearest"`` (ties up). Ignored for other targets.

  Returns:
    A ``jax.Array`` of the target dtype and the shape of ``x``; a NumPy object array of Python
    ``str`` when ``to`` is STRING.

  Raises:
    TypeError: ``to`` is no type (None, a bool, an array, a traced value); ``to`` or ``x``'s
      dtype is complex or a float6 type (no XLA support), or ``x``'s has no ONNX element type;
      ``x`` is no array (None, ragged lists); a STRING cast under ``jax.jit``; ``saturate``
      not a bool or 0/1.
    ValueError: an unknown ``to`` (enum value, name, or a dtype with no ONNX element type) or
      ``round_mode``; a string that is not a number (or is +-Inf/NaN for an integer target).

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> jaxops.cast(jnp.array([1.5, 70000.0]), "FLOAT16")
    Array([1.5, inf], dtype=float16)
    >>> jaxops.cast(jnp.array([500.0, -jnp.inf]), jnp.float8_e4m3fn).astype(jnp.float32)
    Array([ 448., -448.], dtype=float32)
    >>> jaxops.cast(jnp.array([200], jnp.int16), "INT8")
    Array([-56], dtype=int8)
    >>> jaxops.cast(jnp.array([0.1, 100.0]), "STRING")
    array(['0.1', '100'], dtype=object)
  """
  return cast_internal(x, to, saturate=saturate, round_mode=round_mode)


def cast_like(x: jax.typing.ArrayLike, like: Any, *, saturate: bool = True,
              round_mode: str = "up") -> jax.Array | np.ndarray:
  """Casts ``x`` to the element type of ``like`` (ONNX CastLike); only ``like``'s dtype is used.

  The rules, STRING handling and gradients are those of :func:`jaxops.cast`.

  Args:
    x: the array to cast.
    like: an array (or NumPy str/object array for STRING) whose dtype is the target type. It
      may be traced: only its dtype is read.
    saturate: as in :func:`jaxops.cast` (float8 targets only).
    round_mode: as in :func:`jaxops.cast` (float8e8m0 targets only).

  Returns:
    ``x`` cast to ``like``'s dtype, shaped like ``x``.

  Raises:
    TypeError: ``like`` is no array (None, a dtype or type name: those are for
      :func:`jaxops.cast`) or its dtype has no ONNX element type; or as :func:`jaxops.cast`.
    ValueError: as :func:`jaxops.cast`.

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> jaxops.cast_like(jnp.array([1.7, -2.7]), jnp.zeros(3, jnp.int32))
    Array([ 1, -2], dtype=int32)
  """
  return cast_like_internal(x, like, saturate=saturate, round_mode=round_mode)


def cast_internal(x: Any, to: Any, *, saturate: Any = True, round_mode: Any = "up",
                  fnuz_inf_to_nan: bool = False) -> jax.Array | np.ndarray:
  """:func:`cast`, plus the Cast-19..23 rule that no attribute expresses (for the registry).

  ``fnuz_inf_to_nan``: +-Inf into FLOAT8E4M3FNUZ / FLOAT8E5M2FNUZ with ``saturate`` gives NaN
  (the saturate table of Cast-19, -21 and -23) instead of +-max (Cast-24+).
  """
  target = _dtypes.elem_type(_OP_CAST, "to", to)
  return _cast(_OP_CAST, x, target, saturate, round_mode, fnuz_inf_to_nan)


def cast_like_internal(x: Any, like: Any, *, saturate: Any = True, round_mode: Any = "up",
                       fnuz_inf_to_nan: bool = False) -> jax.Array | np.ndarray:
  """:func:`cast_like` with the ``fnuz_inf_to_nan`` switch of :func:`cast_internal`."""
  allowed = "an array whose dtype is an ONNX element type (not complex)"
  dtype = getattr(like, "dtype", None)
  if isinstance(like, (type, np.dtype)) or not isinstance(dtype, np.dtype):
    # A dtype or type is not an array (cast takes those); a list becomes one, unless it holds
    # objects that are neither numbers nor text (None, dicts, ragged rows).
    if like is None or isinstance(like, (type, np.dtype, str, bytes)):
      raise _checks.type_error(_OP_CAST_LIKE, "like", like, allowed + " (to name a type, use "
                               "jaxops.cast)")
    try:
      dtype = np.asarray(like).dtype
    except (TypeError, ValueError):
      dtype = np.dtype(object)
    if dtype == np.dtype(object):
      raise _checks.type_error(_OP_CAST_LIKE, "like", like, allowed)
  try:
    target = _dtypes.of_dtype(dtype)
  except (TypeError, ValueError):
    target = None
  if target is None or dtype.kind == "c":
    raise _checks.type_error(_OP_CAST_LIKE, "like", like, allowed)
  return _cast(_OP_CAST_LIKE, x, target, saturate, round_mode, fnuz_inf_to_nan, "like")


# --- dispatch -----------------------------------------------------------------------------------


def _cast(op: str, x: Any, target: _dtypes.ElemType, saturate: Any, round_mode: Any,
          fnuz_inf_to_nan: bool, target_arg: str = "to") -> jax.Array | np.ndarray:
  """Checks the options and dispatches: STRING on the host, everything else through XLA.

  ``target_arg`` names the argument that gave ``target`` in errors (``to`` or ``like``).
  """
  saturate = _checks.static_bool(op, "saturate", saturate)
  if isinstance(round_mode, bytes):
    try:
      round_mode = round_mode.decode()
    except UnicodeDecodeError:
      raise _checks.value_error(op, "round_mode", round_mode, "one of "
                                + ", ".join(repr(m.value) for m in RoundMode)) from None
  mode = RoundMode.from_string(op, "round_mode", round_mode)
  if target.name in ("COMPLEX64", "COMPLEX128") or target.dtype is None:
    raise _checks.type_error(op, target_arg, target.name, "a real ONNX element type (Cast has "
                             "no complex types)")
  if target.name == "STRING" or _cast_string.is_string_array(x):
    return _host_cast(op, x, target, saturate, mode, fnuz_inf_to_nan, target_arg)
  _check_dtype(op, target_arg, target.dtype)
  if not isinstance(x, jax.Array):  # jnp.asarray returns a jax.Array or tracer as it is
    if hasattr(x, "dtype"):
      _check_dtype(op, "x", x.dtype)  # before jnp.asarray, which fails obscurely on float6
    wide = _checks.narrowed_by_jax(x, "iuf")  # (NumPy scalars too, as 0-d arrays)
    if wide is not None:
      x = _narrowed_on_host(wide, np.dtype(target.dtype))
    x = _checks.as_array(x, op, "x")
  _check_dtype(op, "x", x.dtype)
  return _convert_jit(x, np.dtype(target.dtype), saturate, mode, fnuz_inf_to_nan)


def _narrowed_on_host(x: np.ndarray, dst: np.dtype) -> np.ndarray:
  """A 64-bit NumPy input, with JAX's 64-bit types off, made 32-bit on the host so that it casts
  to ``dst`` as its 64-bit values would. JAX itself would narrow it first (float64 rounded to
  float32, then rounded again by the cast; int64 wrapped to int32: 2**40 + 5 became 5): here
  floats for float targets are rounded to odd in float32 (the cast's one rounding then gives
  the right result), floats for integer targets are converted here as XLA converts them
  (toward zero, saturating, NaN as 0; for the narrow types the low bits of the rounded value),
  and an integer input keeps its low bits for an integer target (what the cast keeps anyway)."""
  if dst == np.dtype(bool):
    return x != 0
  if not _is_float(dst):
    if x.dtype.kind != "f":  # the low 32 bits: JAX's own wrap, made explicit
      return x.astype(np.int32 if x.dtype.kind == "i" else np.uint32)
    if dst in _NARROW_INT:  # round half to even, then the low bits (exact in float64)
      return np.fmod(np.round(x), float(1 << _NARROW_INT[dst][0])).astype(np.float32)
    # XLA's conversion: toward zero, saturating, NaN as 0; done here, where float32 would
    # first round 16777217.0 to 16777216
    out = _canonical(dst)
    info = np.iinfo(out)
    r = np.clip(np.nan_to_num(np.trunc(x), nan=0.0), float(info.min), float(info.max))
    return r.astype(out)  # (64-bit types are off: out has at most 32 bits, exact in float64)
  with np.errstate(over="ignore", invalid="ignore"):
    if _canonical(dst) == _F32:
      return x.astype(np.float32)
    return _round_to_odd(np, x, _F32)


@functools.cache
def _xla_holds(dtype: np.dtype) -> bool:
  """Whether the installed XLA can hold and convert ``dtype`` (the float6 types: not yet).
  NumPy's own types it holds (64-bit ones narrowed without x64): only ml_dtypes' are probed,
  so that the cached answer cannot depend on the 64-bit setting of the first call."""
  if np.dtype(dtype).kind != "V":
    return True
  try:
    with jax.ensure_compile_time_eval():
      lax.convert_element_type(jnp.zeros((1,), jnp.float32), dtype).block_until_ready()
  except Exception:  # noqa: BLE001 - any failure means unsupported
    return False
  return True


# The dtypes that passed _check_dtype, which reads nothing but the dtype: checked once each.
_CHECKED_DTYPES: set[np.dtype] = set()


def _check_dtype(op: str, arg: str, dtype: Any) -> None:
  if isinstance(dtype, np.dtype) and dtype in _CHECKED_DTYPES:
    return
  dtype = np.dtype(dtype)
  try:
    elem = _dtypes.of_dtype(dtype)
  except ValueError:
    raise TypeError(f"{op}: argument `{arg}` has dtype {dtype}, which has no ONNX element "
                    f"type") from None
  if dtype.kind == "c":
    raise TypeError(f"{op}: argument `{arg}` has complex dtype {dtype}; ONNX Cast has no "
                    f"complex types")
  if not _xla_holds(dtype):
    raise TypeError(f"{op}: argument `{arg}`: {elem.name} ({dtype}) is an ONNX type that the "
                    f"installed JAX/XLA cannot convert (jax {jax.__version__}); cast through "
                    f"float32 with NumPy/ml_dtypes on the host instead")
  _CHECKED_DTYPES.add(dtype)


def _wide_float() -> np.dtype:
  """float64 when 64-bit types are on (jax_enable_x64), else float32."""
  return _canonical(_F64)


def _canonical(dtype: np.dtype) -> np.dtype:
  """``dtype`` as JAX holds it (float64 is float32, int64 int32, without 64-bit types)."""
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _wide_int() -> np.dtype:
  return _canonical(np.dtype(np.int64))


def _is_float(dtype: np.dtype) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.floating))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _convert_jit(x: jax.Array, dst: np.dtype, saturate: bool, mode: RoundMode,
                 fnuz_inf_to_nan: bool) -> jax.Array:
  """One compiled computation per (dtype, shape, options): eager calls dispatch once."""
  return _convert(x, dst, saturate, mode, fnuz_inf_to_nan)


def _convert(x: jax.Array, dst: np.dtype, saturate: bool, mode: RoundMode,
             fnuz_inf_to_nan: bool) -> jax.Array:
  src = np.dtype(x.dtype)
  if src == dst and not (saturate and dst == _E5M2):
    return x  # (saturation maps float8e5m2's infinities to +-57344 even from float8e5m2)
  if dst == np.dtype(bool):
    if _is_float(src):
      # x != 0 on the bits without the sign: XLA's CPU comparisons read subnormals as zero
      if src not in (_F32, _F64):
        x = lax.convert_element_type(x, _F32)
      bits = lax.bitcast_convert_type(x, np.uint64 if x.dtype == _F64 else np.uint32)
      return (bits << 1) != 0
    if src in _NARROW_INT:
      x = lax.convert_element_type(x, np.int32)
    return x != 0
  if src == np.dtype(bool):
    x, src = lax.convert_element_type(x, np.int32), np.dtype(np.int32)
  if not _is_float(src):
    if not _is_float(dst):
      return _int_to_int(x, dst)
    wide = _wide_float()
    if _canonical(dst) == wide or 8 * src.itemsize <= np.finfo(wide).nmant + 1:
      x = lax.convert_element_type(x, wide)  # exact, or the one rounding there is
    else:
      x = _round_to_odd(jnp, x, wide)
    return _float_to_float(x, dst, saturate, mode, fnuz_inf_to_nan)
  if not _is_float(dst):
    return _float_to_int(x, dst)
  return _float_cast(x, dst.name, saturate, mode.value, fnuz_inf_to_nan)


def _round_to_odd(xp: Any, x: Any, wide: np.dtype) -> Any:
  """``x`` (integers, or floats wider than ``wide``) as the float ``wide`` rounded to odd: toward
  zero, with the last mantissa bit set where that dropped bits. A second rounding to a float
  type with at least two fewer mantissa bits (bfloat16, float16, float8, e8m0 in any round
  mode) then rounds as ``x`` itself would: int32 33685505 -> bfloat16 is 33816576, where
  rounding through float32 gives 33554432. ``xp`` is ``jnp`` (on device) or ``np`` (on the
  host, for 64-bit NumPy inputs that JAX cannot hold)."""
  if xp is np:
    convert, bitcast = (lambda a, t: a.astype(t)), (lambda a, t: a.view(t))
  else:
    convert, bitcast = lax.convert_element_type, lax.bitcast_convert_type
  f = convert(x, wide)
  if np.dtype(x.dtype).kind == "f":
    back = convert(f, x.dtype)
    inexact = ~(back == x) & ~xp.isnan(x)
    away = xp.abs(back) > xp.abs(x)
  else:
    info = np.iinfo(x.dtype)
    big = f >= wide.type(2.0 ** (8 * x.dtype.itemsize - (1 if info.min < 0 else 0)))  # past max
    back = xp.where(big, x.dtype.type(info.max),
                    convert(xp.where(big, wide.type(0), f), x.dtype))
    inexact = big | (back != x)
    away = big | xp.where(x >= 0, back > x, back < x)  # |f| > |x|
  t = xp.where(away, xp.nextafter(f, xp.zeros((), wide)), f).astype(wide)
  ui = np.dtype(np.uint64 if wide.itemsize == 8 else np.uint32)
  bits = bitcast(t, ui)
  return bitcast(xp.where(inexact, bits | ui.type(1), bits), wide)


def _int_to_int(x: jax.Array, dst: np.dtype) -> jax.Array:
  """Keeps the low bits of ``x`` (two's complement), as ONNX's fixed-point rule says."""
  if dst not in _NARROW_INT:
    return lax.convert_element_type(x, dst)  # XLA integer conversion is modular
  bits, signed = _NARROW_INT[dst]
  wide = np.dtype(np.int64) if np.dtype(x.dtype).itemsize == 8 else np.dtype(np.int32)
  v = lax.convert_element_type(x, wide) & wide.type((1 << bits) - 1)
  if signed:
    v = v - ((v >> (bits - 1)) << bits)
  return lax.convert_element_type(v, dst)


def _float_to_int(x: jax.Array, dst: np.dtype) -> jax.Array:
  if np.dtype(x.dtype) not in _WIDE_FLOATS:
    x = lax.convert_element_type(x, _F32)
  if dst in _NARROW_INT:  # ONNX's Int4/Int2 notes: round half to even, then keep the low bits
    # of the integer itself: fmod by 2**bits is exact, so a value past the wide integer's range
    # (3e9 in float32 without x64, 1e20) keeps its own low bits instead of saturating first
    low = jnp.fmod(jnp.round(x), x.dtype.type(1 << _NARROW_INT[dst][0]))
    return _int_to_int(lax.convert_element_type(low, np.int32), dst)
  return lax.convert_element_type(x, dst)


# --- float -> float -----------------------------------------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _float_cast(x: jax.Array, dst_name: str, saturate: bool, mode: str,
                fnuz_inf_to_nan: bool) -> jax.Array:
  return _float_to_float(x, np.dtype(dst_name), saturate, RoundMode(mode), fnuz_inf_to_nan)


@_float_cast.defjvp
def _float_cast_jvp(dst_name: str, saturate: bool, mode: str, fnuz_inf_to_nan: bool,
                    primals: tuple[jax.Array], tangents: tuple[jax.Array]
                    ) -> tuple[jax.Array, jax.Array]:
  (x,), (t,) = primals, tangents
  y = _float_cast(x, dst_name, saturate, mode, fnuz_inf_to_nan)
  return y, lax.convert_element_type(t, np.dtype(dst_name))


def _float_to_float(x: jax.Array, dst: np.dtype, saturate: bool, mode: RoundMode,
                    fnuz_inf_to_nan: bool) -> jax.Array:
  src = np.dtype(x.dtype)
  if dst == _F64:
    # Without 64-bit types JAX converts to float32 instead (and warns so), exactly from every
    # float it holds; _to_f64's rebuilt subnormals would flush to zero in float32 arithmetic.
    return _to_f64(x) if _canonical(dst) == _F64 else lax.convert_element_type(x, _F64)
  if src not in _WIDE_FLOATS:
    x, src = lax.convert_element_type(x, _F32), _F32  # narrow floats are exact in float32
    if dst == _F32:
      return x
  if dst == _E8M0:
    return _to_e8m0(x, saturate, mode)
  if dst in _FLOAT8:
    fmax = float(jnp.finfo(dst).max)
    if saturate and dst == _E4M3FN and src != _F64:
      return _f32_to_e4m3fn_saturating(lax.convert_element_type(x, _F32))
    if saturate:
      y = jnp.clip(x, -fmax, fmax)  # [x] > max -> max; NaN propagates
      out = _round_from(y, dst)
      if fnuz_inf_to_nan and dst in _FNUZ:
        out = jnp.where(jnp.isinf(x), jnp.asarray(jnp.nan, dst), out)
      return out
    return _round_from(x, dst)
  if dst == _F4:
    y = jnp.clip(jnp.where(jnp.isnan(x), jnp.zeros((), src), x), -6.0, 6.0)
    return _round_from(y, dst)
  return _round_from(x, dst)


_E4M3FN = np.dtype(jnp.float8_e4m3fn)


def _f32_to_e4m3fn_saturating(x: jax.Array) -> jax.Array:
  """float32 -> float8e4m3fn, saturating (|x| > 448 and +-inf to +-448), round to nearest
  even, built from the bits in one elementwise pass (XLA converts to float8 in software, and
  its convert after a clip is slower than this integer rounding on CPU).

  Normal results (|x| >= 2**-6): the float32 bits rounded at mantissa bit 20 (add half an
  ulp less one, plus the kept lowest bit: ties to even), exponent rebiased from 127 to 7; a
  carry out of the mantissa moves to the next binade, as it should. Subnormal results: the
  integer nearest ``|x| * 2**9`` (half to even), 0..8, where 8 is the bit pattern of 2**-6.
  NaN stays NaN (0x7F, sign kept).
  """
  bits = lax.bitcast_convert_type(x, np.uint32)
  sign = (bits >> 24) & np.uint32(0x80)
  mag = bits & np.uint32(0x7FFFFFFF)
  a = jnp.minimum(mag, np.uint32(0x43E00000))  # 448, the largest finite float8e4m3fn
  rounded = a + np.uint32(0x7FFFF) + ((a >> 20) & np.uint32(1))
  normal = (rounded >> 20) - np.uint32(120 << 3)
  tiny = lax.convert_element_type(
      jnp.round(lax.bitcast_convert_type(a, _F32) * np.float32(512.0)), np.uint32)
  v = jnp.where(a < np.uint32(0x3C800000), tiny, normal)  # below 2**-6: subnormal or zero
  v = jnp.where(mag > np.uint32(0x7F800000), np.uint32(0x7F), v)
  return lax.bitcast_convert_type(lax.convert_element_type(v | sign, np.uint8), _E4M3FN)


# float32-range subnormals: (unsigned type, exponent-field shift, field mask, smallest subnormal
# exponent). XLA on CPU flushes them to zero when it converts float32/bfloat16 to float64.
_SUBNORMAL_LAYOUT: dict[np.dtype, tuple[Any, int, int, int]] = {
    _F32: (np.uint32, 23, 0xFF, -149), _BF16: (np.uint16, 7, 0xFF, -133)}


def _to_f64(x: jax.Array) -> jax.Array:
  """Exact widening to float64, subnormals of float32/bfloat16 and 2**-127 of e8m0 included."""
  src = np.dtype(x.dtype)
  y = lax.convert_element_type(x, _F64)
  if src == _E8M0:
    byte = lax.bitcast_convert_type(x, np.uint8)
    return jnp.where(byte == 0, 2.0 ** -127, y)
  if src not in _SUBNORMAL_LAYOUT:
    return y
  utype, shift, mask, lowest = _SUBNORMAL_LAYOUT[src]
  bits = lax.bitcast_convert_type(x, utype)
  field = (bits >> utype(shift)) & utype(mask)
  frac = lax.convert_element_type(bits & utype((1 << shift) - 1), _F64)
  sign = jnp.where((bits >> utype(8 * np.dtype(utype).itemsize - 1)) != 0, -1.0, 1.0)
  return jnp.where(field == 0, sign * frac * 2.0 ** lowest, y)


def _round_from(x: jax.Array, dst: np.dtype) -> jax.Array:
  """Round-to-nearest-even conversion of a float array to ``dst``, correct from float64 too."""
  if np.dtype(x.dtype) != _F64 or dst == _F64:
    return lax.convert_element_type(x, dst)
  y = _f64_to_f32_odd(x) if dst != _F32 else lax.convert_element_type(x, _F32)
  if dst in (_F32, _BF16):  # targets with float32's exponent range: rebuild subnormals
    out = lax.convert_element_type(y, dst)
    return jnp.where(jnp.abs(x) < 2.0 ** -126, _tiny_from_f64(x, dst), out)
  return lax.convert_element_type(y, dst)


def _f64_to_f32_odd(x: jax.Array) -> jax.Array:
  """float64 -> float32 rounded to odd: a later rounding to <= 22 bits is then exact."""
  y = lax.convert_element_type(x, _F32)
  back = lax.convert_element_type(y, _F64)
  bits = lax.bitcast_convert_type(y, np.uint32)
  bits = jnp.where(jnp.abs(back) > jnp.abs(x), bits - np.uint32(1), bits)  # toward zero
  y = lax.bitcast_convert_type(bits, _F32)
  inexact = lax.convert_element_type(y, _F64) != x
  return lax.bitcast_convert_type(jnp.where(inexact, bits | np.uint32(1), bits), _F32)


def _tiny_from_f64(x: jax.Array, dst: np.dtype) -> jax.Array:
  """|x| < 2**-126 from float64 to float32/bfloat16, subnormals included, built from bits."""
  nmant = 23 if dst == _F32 else 7
  lowest = -126 - nmant  # exponent of the smallest subnormal
  m = jnp.round(jnp.abs(x) * 2.0 ** -lowest)  # half to even; <= 2**nmant (then min normal)
  utype = np.uint32 if dst == _F32 else np.uint16
  sign = jnp.where(jnp.signbit(x), utype(1 << (8 * np.dtype(utype).itemsize - 1)), utype(0))
  bits = lax.convert_element_type(m, utype) | sign
  return lax.bitcast_convert_type(bits, dst)


def _to_e8m0(x: jax.Array, saturate: bool, mode: RoundMode) -> jax.Array:
  """float -> float8e8m0 (2**-127 .. 2**127, NaN), from the exponent and mantissa bits.

  Out of range is judged on x itself, as ONNX's table writes it ("x > E8M0_MAX", "x <
  E8M0_MIN"), not on the rounded value; 0, -0 and negative x are below E8M0_MIN. Bits, not
  float comparisons, decide, so float32 subnormals count even where the CPU flushes them.
  """
  utype: type[np.unsignedinteger[Any]]
  itype: type[np.signedinteger[Any]]
  if np.dtype(x.dtype) == _F64:
    utype, itype, nmant, bias = np.uint64, np.int64, 52, 1023
  else:
    x = lax.convert_element_type(x, _F32)
    utype, itype, nmant, bias = np.uint32, np.int32, 23, 127
  width = 8 * np.dtype(utype).itemsize
  raw = lax.bitcast_convert_type(x, utype)
  negative = (raw >> utype(width - 1)) != 0
  bits = raw & utype((1 << (width - 1)) - 1)  # |x|
  field = lax.convert_element_type(bits >> utype(nmant), itype)
  frac = bits & utype((1 << nmant) - 1)
  normal = field > 0
  special = field == (1 << (width - 1 - nmant)) - 1  # Inf or NaN
  nan = special & (frac != 0)
  # A subnormal input: the leading one of the fraction sets the exponent.
  lead = (width - 1) - lax.convert_element_type(lax.clz(frac), itype)  # -1 when frac == 0
  exponent = jnp.where(normal, field - bias, lead + (1 - bias - nmant))  # floor(log2|x|)
  lead_bit = utype(1) << lax.convert_element_type(jnp.maximum(lead, 0), utype)
  below = jnp.where(normal, frac, frac & ~lead_bit)  # the bits after the leading one
  half_pos = jnp.where(normal, nmant - 1, lead - 1)
  half_bit = (below >> lax.convert_element_type(jnp.maximum(half_pos, 0), utype)) & utype(1)
  half_bit = jnp.where(half_pos >= 0, half_bit, utype(0))
  if mode is RoundMode.UP:
    inc = below != 0
  elif mode is RoundMode.NEAREST:
    inc = half_bit != 0  # ties (exactly 1.5 * 2**e) round up
  else:
    inc = jnp.zeros(x.shape, bool)
  e = exponent + lax.convert_element_type(inc, itype)
  zero = bits == 0
  under = negative | zero | (exponent < -127)
  over = (~negative) & (special | (exponent > 127) | ((exponent == 127) & (below != 0)))
  byte = lax.convert_element_type(jnp.clip(e, -127, 127) + 127, np.uint8)
  byte = jnp.where(over, np.uint8(254 if saturate else 255), byte)
  byte = jnp.where(under, np.uint8(0 if saturate else 255), byte)
  byte = jnp.where(nan, np.uint8(255), byte)
  return lax.bitcast_convert_type(byte, _E8M0)


# --- STRING, on the host ------------------------------------------------------------------------


def _host_cast(op: str, x: Any, target: _dtypes.ElemType, saturate: bool, mode: RoundMode,
               fnuz_inf_to_nan: bool, target_arg: str) -> Any:
  """A cast to or from STRING: formatted or parsed by ``_cast_string`` with NumPy, eagerly."""
  if _checks.is_traced(x):
    raise TypeError(
        f"{op}: casting to STRING runs on the host with NumPy (a jax.Array cannot hold strings), "
        f"so it cannot run under jax.jit/vmap/grad; got {_checks._show(x)}. Call it outside jit "
        f"on a concrete array.")
  a = np.asarray(x)
  if target.name == "STRING":
    if not _cast_string.is_string_array(a):
      _check_dtype(op, "x", a.dtype)
    return _cast_string.to_strings(op, a)
  dst = np.dtype(target.dtype)
  _check_dtype(op, target_arg, dst)
  values = _cast_string.parse(op, a, dst)
  if values.dtype == dst:
    return jnp.asarray(values)
  return _convert_jit(jnp.asarray(values), dst, saturate, mode, fnuz_inf_to_nan)
