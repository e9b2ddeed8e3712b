"""Argument validation shared by the ops.

Every error names the op, the argument, what was received and what is allowed, and is a
ValueError or TypeError (never an ``assert``: ``python -O`` strips those).
"""

from __future__ import annotations

import enum
import functools
import math
import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import jax
import numpy as np
from jax.custom_derivatives import SymbolicZero

E = TypeVar("E", bound="StrEnum")
R = TypeVar("R")


def _show(value: Any) -> str:
  """A short, readable rendering of a received value for an error message."""
  if isinstance(value, jax.core.Tracer):
    return f"a traced value of shape {value.shape} and dtype {value.dtype}"
  if isinstance(value, (np.ndarray, jax.Array)):
    if value.size <= 8:
      return f"array {np.asarray(value).tolist()!r} (dtype {value.dtype})"
    return f"an array of shape {value.shape} and dtype {value.dtype}"
  text = repr(value)
  return text if len(text) <= 80 else text[:77] + "..."


def value_error(op: str, arg: str, received: Any, allowed: str) -> ValueError:
  """``ValueError("op: argument `arg` must be <allowed>; got <received>")``."""
  return ValueError(f"{op}: argument `{arg}` must be {allowed}; got {_show(received)}")


def type_error(op: str, arg: str, received: Any, allowed: str) -> TypeError:
  """``TypeError("op: argument `arg` must be <allowed>; got <received>")``."""
  return TypeError(f"{op}: argument `{arg}` must be {allowed}; got {_show(received)}")


def is_traced(value: Any) -> bool:
  """True when ``value`` is (or contains) a JAX tracer."""
  if isinstance(value, jax.core.Tracer):
    return True
  if isinstance(value, (list, tuple)):
    return any(is_traced(v) for v in value)
  return False


def concrete(op: str, arg: str, value: Any) -> np.ndarray:
  """``value`` as a NumPy array, or a TypeError if it is traced.

  Arguments that decide output shapes (sizes, scales, axes, kernel_shape, pads, ...) must be
  known at trace time: pass Python or NumPy values, or mark them static under ``jax.jit``.
  """
  if is_traced(value):
    raise TypeError(
        f"{op}: argument `{arg}` decides the output shape, so it must be concrete (a Python or "
        f"NumPy value) under jax.jit/vmap/grad; got {_show(value)}. Pass it as a static "
        f"argument (e.g. jax.jit(..., static_argnames=...)) or close over a constant."
    )
  try:
    return np.asarray(value)
  except (TypeError, ValueError, OverflowError) as e:  # ragged nesting, unconvertible objects
    raise type_error(op, arg, value, f"a number or a flat sequence of numbers ({e})") from None


def int_tuple(op: str, arg: str, value: Any, *, length: int | None = None,
              minimum: int | None = None) -> tuple[int, ...]:
  """A static sequence of integers (list, tuple, NumPy array, or a scalar when ``length``)."""
  arr = concrete(op, arg, value)
  if arr.ndim == 0 and length is not None:
    arr = np.full((length,), arr)
  if arr.dtype == object and arr.ndim == 1 and all(
      isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in arr):
    # Python ints past uint64 (2**64): NumPy keeps them as objects (it was "a 1-D sequence of
    # integers", where 2**63 said what is wrong)
    raise value_error(op, arg, value, "integers that int64 holds")
  if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)
                           or _all_integral(arr)):
    raise type_error(op, arg, value, "a 1-D sequence of integers")
  out = tuple(int(v) for v in arr)
  if any(not -_INT_LIMIT <= v < _INT_LIMIT for v in out):  # XLA's shapes and strides: int64
    raise value_error(op, arg, value, "integers that int64 holds")
  if length is not None and len(out) != length:
    raise value_error(op, arg, value, f"a sequence of {length} integers")
  if minimum is not None and any(v < minimum for v in out):
    raise value_error(op, arg, value, f"integers >= {minimum}")
  return out


_INT_LIMIT = 2 ** 63


def _all_integral(arr: np.ndarray) -> bool:
  if arr.dtype.kind not in "iuf":  # not bools, not complex numbers (their real part is no int)
    return False
  return bool(np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))


def normalize_axes(op: str, arg: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
  """Axes in [-rank, rank) mapped to [0, rank), rejecting duplicates."""
  out = []
  for a in axes:
    if not -rank <= a < rank:
      raise value_error(op, arg, tuple(axes), f"axes in [-{rank}, {rank}) for a rank-{rank} input")
    out.append(a % rank)
  if len(set(out)) != len(out):
    raise value_error(op, arg, tuple(axes), "axes without repeats")
  return tuple(out)


class StrEnum(str, enum.Enum):
  """A mode string; ``from_string`` lists the allowed values in its error."""

  @classmethod
  def from_string(cls: type[E], op: str, arg: str, value: Any) -> E:
    if isinstance(value, cls):
      return value
    if isinstance(value, bytes):
      try:
        value = value.decode()
      except UnicodeDecodeError:
        pass  # not one of the names: the error below lists them
    if isinstance(value, str):
      for member in cls:
        if member.value == value:
          return member
    allowed = ", ".join(repr(m.value) for m in cls)
    raise value_error(op, arg, value, f"one of {allowed}")


def as_array(x: Any, op: str = "jaxops", arg: str = "x") -> jax.Array:
  """``x`` as a JAX array: a jax.Array or tracer as it is (what jnp.asarray would return, without
  its dispatch cost on every eager call), a NumPy array or scalar through ``jax.device_put``,
  anything else through jnp.asarray. A value that is no numeric array (None, strings, objects,
  integers too large for the dtype) is a TypeError naming ``op`` and ``arg``.

  ``jax.device_put`` gives what jnp.asarray gives for NumPy values (the dtype canonicalised as
  JAX does, not weakly typed, uncommitted; the same errors for types JAX cannot hold), but
  outside a trace jnp.asarray of a NumPy value runs a jitted copy (``lax.stage``) that compiles
  once per shape and dtype: about 30 ms more on the first eager call of every new shape."""
  if isinstance(x, jax.Array):
    return x
  check_wraps(x, op, arg)
  try:
    if isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, np.ma.MaskedArray):
      return jax.device_put(x)
    return jax.numpy.asarray(x)
  except (TypeError, ValueError, OverflowError) as e:
    raise type_error(op, arg, x, f"an array of numbers or bools ({e})") from None


def narrowed_by_jax(x: Any, kinds: str) -> np.ndarray | None:
  """``x`` as a NumPy array where it is a 64-bit NumPy value (array or scalar) of one of the
  dtype ``kinds`` that JAX, with its 64-bit types off, would narrow to 32 bits; else None."""
  if not isinstance(x, (np.ndarray, np.generic)) or x.dtype.kind not in kinds or \
      x.dtype.itemsize != 8 or jax.config.read("jax_enable_x64"):
    return None
  return np.asarray(x)


def check_wraps(x: Any, op: str, arg: str) -> None:
  """A 64-bit NumPy integer input, with JAX's 64-bit types off, whose values 32 bits cannot
  hold: JAX would wrap them without a word (int64 2**32 + 5 became 5), so a ValueError."""
  wide = narrowed_by_jax(x, "iu")
  if wide is None or wide.size == 0:
    return
  info = np.iinfo(np.int32 if wide.dtype.kind == "i" else np.uint32)
  lo, hi = int(np.min(wide)), int(np.max(wide))
  if lo < info.min or hi > info.max:
    raise value_error(op, arg, f"{x.dtype} values from {lo} to {hi}",
                      f"within {info.dtype}'s range while JAX's 64-bit types are off (JAX would "
                      f"wrap the others; jax.config.update('jax_enable_x64', True) keeps them)")


def index_array(x: Any, op: str, arg: str) -> jax.Array:
  """Integer indices as a JAX array, as :func:`as_array`; but a 64-bit NumPy integer input, with
  JAX's 64-bit types off, is first clipped on the host to int32's bounds. JAX would wrap it to
  int32 (2**32 + 5 became the valid index 5); clipped, it stays out of range, as it was, for
  the caller's range rule (dropped, or refused)."""
  wide = narrowed_by_jax(x, "iu")
  if wide is not None:
    info = np.iinfo(np.int32)
    x = np.clip(wide, info.min if wide.dtype.kind == "i" else 0, info.max).astype(np.int32)
  return as_array(x, op, arg)


def floating_input(op: str, x: Any, allowed: Sequence[np.dtype], *, arg: str = "x") -> jax.Array:
  """``x`` (the argument ``arg``) as a JAX array whose dtype is one of ``allowed``, else a
  TypeError naming them."""
  x = as_array(x, op, arg)
  if x.dtype not in allowed:
    names = ", ".join(np.dtype(d).name for d in allowed)
    raise TypeError(f"{op}: argument `{arg}` must have dtype in ({names}); got dtype {x.dtype}")
  return x


def global_pool_input(op: str, x: Any, allowed: Sequence[np.dtype]) -> jax.Array:
  """The input of a global pool: ``floating_input`` with at least the (N, C) axes."""
  x = floating_input(op, x, allowed)
  if x.ndim < 2:
    raise ValueError(f"{op}: argument `x` must have at least 2 axes (N, C, spatial...); got "
                     f"shape {tuple(x.shape)}")
  return x


# --- caching configurations of repeated eager calls ---------------------------------------------

# Scalar types whose values stand in a cache key as they are: hashable, compared by value, never
# traced. (jax.Arrays and tracers are unhashable; other objects may compare in surprising ways.)
_KEY_SCALARS = frozenset(
    {type(None), bool, int, float, str, bytes, np.bool_}
    | {np.dtype(c).type for c in np.typecodes["AllInteger"] + np.typecodes["Float"]})


def _signed_zero(value: Any) -> Any:
  """A float zero as (0.0, its sign): -0.0 == 0.0, and a static value such as a fill may keep
  its sign in the output."""
  if isinstance(value, (float, np.floating)) and value == 0:
    return value, math.copysign(1.0, value)
  return value


def concrete_shape(op: str, arg: str, x: Any) -> None:
  """Refuses a symbolic shape (``jax.export`` shape polymorphism) where the op plans static
  tables or index types from the whole shape: a ``TypeError`` naming the op, rather than JAX's
  InconclusiveDimensionOperation from inside the plan."""
  shape = x if isinstance(x, tuple) else getattr(x, "shape", ())
  if any(not isinstance(d, (int, np.integer)) for d in shape):
    raise TypeError(f"{op}: argument `{arg}` has the symbolic shape {tuple(shape)} (jax.export "
                    f"shape polymorphism); {op} plans static tables from every dimension, so "
                    f"export it with concrete ones")


def cache_key(*values: Any) -> Hashable | None:
  """A hashable stand-in for static arguments, or None when one of them has none.

  Two lists of values with equal keys are interchangeable: value by value the same type, and
  equal scalars; for a list or tuple the same element types and equal elements; for a NumPy
  array the same dtype, shape and bytes. So a configuration built (and validated) from one holds
  for the other. Python floats compare as Python compares them (-0.0 == 0.0), as they do as
  jax.jit static arguments, but for zeros, whose sign a key keeps. Traced values, jax.Arrays,
  nested sequences and unfamiliar objects have no key.
  """
  types = tuple(map(type, values))
  if _KEY_SCALARS.issuperset(types):
    return types, tuple(map(_signed_zero, values))
  parts: list[Hashable] = []
  for t, value in zip(types, values):
    if t in _KEY_SCALARS:
      parts.append(_signed_zero(value))
    elif t is tuple or t is list:
      inner = tuple(map(type, value))
      if not _KEY_SCALARS.issuperset(inner):
        return None
      parts.append((inner, tuple(map(_signed_zero, value))))
    elif t is np.ndarray and not value.dtype.hasobject:
      parts.append((value.dtype, value.shape, value.tobytes()))
    elif isinstance(value, (StrEnum, np.dtype)):
      parts.append(value)
    else:
      return None
  return types, tuple(parts)


class ConfigCache(Generic[R]):
  """Memoises ``build(*args)`` by a key of its static arguments, for repeated eager calls.

  ``cache(key, *args)`` returns ``build(*args)``, built once per ``key`` (``cache_key`` of the
  arguments that decide the result; None: built on every call). Only results are kept: a call
  that raises is never cached (a bad argument raises on every call, with the same message), and
  ``args`` (which may include the input array) are not retained. The memo is cleared when it
  reaches ``maxsize`` entries.
  """

  def __init__(self, build: Callable[..., R], maxsize: int = 1024):
    self.build = build
    self.maxsize = maxsize
    self.hits = 0
    self.misses = 0
    self._results: dict[Hashable, R] = {}

  def __call__(self, key: Hashable | None, *args: Any) -> R:
    if key is not None:
      try:
        result = self._results[key]
      except KeyError:
        pass
      else:
        self.hits += 1
        return result
    result = self.build(*args)
    if key is not None:
      self.misses += 1
      if len(self._results) >= self.maxsize:
        self._results.clear()
      self._results[key] = result
    return result

  def clear(self) -> None:
    """Forgets every result and resets the counters."""
    self._results.clear()
    self.hits = self.misses = 0


# --- static options and dtype helpers shared by every op ----------------------------------------


def is_flag(value: Any) -> bool:
  """Whether ``value`` is a bool or one of the ONNX flag integers 0 and 1."""
  return isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer))
                                                 and int(value) in (0, 1))


def static_bool(op: str, arg: str, value: Any) -> bool:
  """A static bool option: a Python/NumPy bool or the ONNX integers 0/1, else a TypeError.

  Traced values are a TypeError too (the option selects code, so it must be concrete).
  """
  if is_traced(value):
    raise type_error(op, arg, value, "a Python bool or 0/1 (it is static: it must be concrete "
                     "under jax.jit)")
  if is_flag(value):
    return bool(value)
  raise type_error(op, arg, value, "a bool (or the ONNX integers 0/1)")


def static_float(op: str, arg: str, value: Any, *, finite: bool = True) -> float:
  """A static float option (Python or NumPy number), else a TypeError; non-finite: ValueError."""
  if is_traced(value):
    raise type_error(op, arg, value, "a Python or NumPy float (it is static: it must be "
                     "concrete under jax.jit)")
  if isinstance(value, (bool, np.bool_, str, bytes)):
    raise type_error(op, arg, value, "a float")
  try:
    out = float(value)
  except (TypeError, ValueError):
    raise type_error(op, arg, value, "a float") from None
  if finite and not np.isfinite(out):
    raise value_error(op, arg, value, "a finite float")
  # one NaN object for every NaN: configurations compare as tuples, which take identical
  # objects as equal, so a NaN option keeps its jit cache entry (NaN != NaN otherwise)
  return math.nan if math.isnan(out) else out


_HALF_DTYPES = (np.dtype(jax.numpy.float16), np.dtype(jax.numpy.bfloat16))


def compute_dtype(dtype: Any) -> np.dtype:
  """The dtype a floating computation runs in: float32 for float16/bfloat16, else ``dtype``."""
  dtype = np.dtype(dtype)
  return np.dtype(np.float32) if dtype in _HALF_DTYPES else dtype


def no_tangent(v: Any) -> Any:
  """The tangent of an integer output ``v`` of a ``custom_jvp`` rule registered with
  ``symbolic_zeros=True``: a symbolic zero of ``v``'s own tangent type. ``np.zeros(shape,
  float0)`` lacks the varying mesh axes ``v`` has inside ``shard_map``, and JAX refuses it
  there."""
  return SymbolicZero(jax.typeof(v).to_tangent_aval())


def dense_tangent(t: Any) -> Any:
  """An input tangent of such a rule as an array: a symbolic zero instantiated."""
  return jax.numpy.zeros(t.shape, t.dtype) if isinstance(t, SymbolicZero) else t


def zeros_like_type(s: Any, shape: Any = None, dtype: Any = None) -> Any:
  """Zeros of the shape, dtype and (inside ``shard_map``) varying mesh axes of ``s`` (an abstract
  value or ``jax.eval_shape``'s result; ``shape`` and ``dtype`` replace its own): where a
  ``cond``'s other branch gives values that vary over mesh axes, zeros that do not are a
  different type, and JAX refuses the ``cond``. Of its own shape, on a mesh with explicit axes,
  they also take its sharding (``explicit_spec``)."""
  spec = explicit_spec(s) if shape is None else None
  z = jax.numpy.zeros(s.shape if shape is None else shape, s.dtype if dtype is None else dtype,
                      **({} if spec is None else {"out_sharding": jax.P(*spec)}))
  varying = getattr(getattr(s, "manual_axis_type", None), "varying", None)
  return jax.lax.pcast(z, tuple(varying), to="varying") if varying else z


def explicit_spec(x: Any) -> tuple[Any, ...] | None:
  """The partition spec (one entry per axis) in the type of ``x`` (an array, tracer or abstract
  value) where it names a mesh axis: arrays on a mesh with explicit axes (``jax.sharding.
  AxisType.Explicit``), whose shardings JAX's shape rules track; None otherwise."""
  aval = x if isinstance(x, jax.core.ShapedArray) else jax.typeof(x)
  spec = getattr(getattr(aval, "sharding", None), "spec", None)
  if not spec or all(e is None for e in spec):
    return None
  return tuple(spec) + (None,) * (len(aval.shape) - len(spec))


def reshape_lead(x: Any, shape: Sequence[int], lead: int) -> Any:
  """``x.reshape(shape)`` where the first ``lead`` axes are kept. On a mesh with explicit axes
  JAX asks a reshape for its output sharding: those axes keep theirs (the others are split or
  merged and must be unsharded; if not, JAX's own error is raised)."""
  spec = explicit_spec(x)
  if spec is None or any(e is not None for e in spec[lead:]):
    return x.reshape(shape)
  return jax.lax.reshape(x, tuple(shape),
                         out_sharding=jax.P(*spec[:lead], *(None,) * (len(shape) - lead)))


def replicated(x: Any) -> Any:
  """``x`` replicated where its type is sharded over explicit mesh axes (an all-gather): for
  reads whose positions come from data (a gather across the batch), which JAX cannot type."""
  return x if explicit_spec(x) is None else jax.sharding.reshard(x, jax.P())


def along_axis(vector: Any, axis: int, ndim: int) -> Any:
  """``vector`` (1-D) reshaped to broadcast along ``axis`` of a rank-``ndim`` array."""
  return vector.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


@functools.cache
def memory_limit() -> int:
  """Bytes an output may take at most: the default device's memory limit where JAX reports one
  (GPU/TPU), else the host's physical memory."""
  try:
    stats = jax.devices()[0].memory_stats() or {}
  except Exception:  # noqa: BLE001 - a backend without memory statistics
    stats = {}
  if stats.get("bytes_limit"):
    return int(stats["bytes_limit"])
  return host_memory()


@functools.cache
def host_memory() -> int:
  """The host's physical memory in bytes (where the static tables of a plan are built)."""
  try:
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
  except (ValueError, OSError, AttributeError):
    return 1 << 62


# Host bytes that a static tap table takes per output position and tap, NumPy's tables and
# XLA's constants together: a resize to 2**22 positions of one axis peaked at 86 (nearest), 80
# (linear) and 79 (cubic) bytes per position and tap in NumPy alone, and about twice that in
# the process's resident memory once compiled.
TABLE_BYTES_PER_TAP = 160


def check_output_size(op: str, shape: Sequence[int], dtype: Any, *, taps: int = 0) -> None:
  """A ValueError naming ``op``, the output shape and its size in bytes when an output of that
  shape and dtype cannot fit in the device's memory (``memory_limit()``), raised before XLA tries
  to allocate it. Sizes are Python integers, so the product never overflows. ``taps``: the
  output positions times taps of the plan's static tables (summed over its axes), which are
  built on the host (``TABLE_BYTES_PER_TAP`` each, beside the output where the device is the
  host): a long axis can need far more memory for them than for the output. A symbolic dim
  (``jax.export``'s shape polymorphism) counts as 1: the check is then a lower bound."""
  shape = tuple(int(d) if isinstance(d, (int, np.integer)) else 1 for d in shape)
  count = math.prod(shape)
  nbytes = count * np.dtype(dtype).itemsize
  # XLA multiplies the dims (and the element size) in int64 even when one dim is 0, and aborts
  # the process where that overflows: [2**40, 2**40, 0] must be an error, not an abort.
  held = np.dtype(jax.dtypes.canonicalize_dtype(dtype)).itemsize  # float64 is float32 without x64
  extent = math.prod(d for d in shape if d) * held
  if count == 0 and extent > np.iinfo(np.int64).max:  # (a non-empty one fails the next check)
    raise ValueError(
        f"{op}: the output shape {shape} has dims whose product times "
        f"the {held}-byte element ({extent}) exceeds 2**63 - 1, which XLA cannot represent "
        f"even when another dim is 0")
  limit = memory_limit()
  if nbytes > limit:
    raise ValueError(
        f"{op}: the output would have shape {shape} and dtype "
        f"{np.dtype(dtype).name}: {count} elements, {nbytes} bytes, more than the {limit} bytes of "
        f"memory of the device; ask for a smaller output")
  tables = taps * TABLE_BYTES_PER_TAP
  host = host_memory()
  if tables and tables + (nbytes if limit == host else 0) > host:
    raise ValueError(
        f"{op}: the output would have shape {shape}, and its static tap "
        f"tables ({taps} positions x taps, about {tables} bytes on the host) with the output's "
        f"{nbytes} bytes are more than the {host} bytes of the host's memory; ask for a "
        f"smaller output")


def all_true(b: Any) -> Any:
  """``jnp.all(b)`` (True when ``b`` is empty), as a minimum over bytes: XLA's CPU backend
  reduces a boolean array with ``and`` / ``or`` more slowly (``jnp.any(jnp.isnan(y))`` on
  8x64x56x56: 0.46-0.56 ms against 0.15-0.21; docs/PERFORMANCE.md)."""
  return jax.lax.reduce(b.astype(np.uint8), np.uint8(1), jax.lax.min, tuple(range(b.ndim))) > 0


def any_true(b: Any) -> Any:
  """``jnp.any(b)`` (False when ``b`` is empty), as a maximum over bytes (``all_true``)."""
  return jax.lax.reduce(b.astype(np.uint8), np.uint8(0), jax.lax.max, tuple(range(b.ndim))) > 0


def batch_first(args: Any, dims: Any) -> list[Any]:
  """A batching rule's operands with the mapped axis first: moved there where an operand is
  batched, broadcast along it where not (for primitives whose operands all lead with the same
  axes). Shared by max_pool's NaN windows, grid_sample's tangent and jaxops.torch's adaptive
  maximum."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  return [jax.numpy.moveaxis(a, d, 0) if d is not None
          else jax.numpy.broadcast_to(a, (size,) + a.shape) for a, d in zip(args, dims)]
