"""STRING casts on the host: numbers to text and text to numbers, with NumPy only.

A ``jax.Array`` cannot hold strings, so :func:`jaxops.cast` runs a cast to or from STRING here,
eagerly, on NumPy arrays; this module knows nothing of JAX. What it returns for a numeric
target (bools, integers already wrapped to the target's bits, or float64 values for a float
target to round) is handed back to ``jaxops/_cast.py``, which applies the float rules.

Numbers print in the shortest text that reads back to the same value of their type (fewest
digits, then the shorter notation), NaN and +-Inf as ONNX writes them ("NaN", "INF", "-INF"),
bools as "1"/"0". Texts parse as decimal or scientific numbers, "INF", "+INF", "-INF", "NaN"
in any case (and "true"/"false"); a text that is no number is a ValueError naming the op.
"""

from __future__ import annotations

import math
import re
from typing import Any

import ml_dtypes
import numpy as np

from jaxops import _dtypes


def is_string_array(x: Any) -> bool:
  """Whether ``x`` holds text: a str/bytes, a NumPy str/bytes/object array, or a list of str."""
  if isinstance(x, (str, bytes)):
    return True
  if isinstance(x, np.ndarray):
    return x.dtype.kind in ("U", "S", "O")
  if isinstance(x, (list, tuple)):
    try:
      return np.asarray(x).dtype.kind in ("U", "S", "O")
    except (TypeError, ValueError):  # ragged: not an array at all, the caller says so
      return False
  return False


def to_strings(op: str, a: np.ndarray) -> np.ndarray:
  """``a`` as a NumPy object array of Python ``str`` (texts as they are, numbers formatted).

  Examples:
    >>> import numpy as np
    >>> to_strings("jaxops.cast", np.array([0.1, 1e20, -np.inf], np.float32)).tolist()
    ['0.1', '1e+20', '-INF']
  """
  out = np.empty(a.shape, dtype=object)
  if a.dtype.kind in ("U", "S", "O"):
    for i, v in np.ndenumerate(a):
      out[i] = as_str(op, v)
  else:
    for i, v in np.ndenumerate(a):
      out[i] = format_number(v, a.dtype)
  return out


def parse(op: str, a: np.ndarray, dst: np.dtype) -> np.ndarray:
  """The texts of ``a`` read as numbers for the target ``dst``, shaped like ``a``.

  Bool targets: ``number != 0`` (NaN is True). Integer targets: the integer the number casts to
  (see :func:`parse_int`), wrapped to ``dst``'s bits; the result has dtype ``dst``. Float
  targets: the numbers as float64, for the caller to round to ``dst`` by the float rules.

  Examples:
    >>> import numpy as np, ml_dtypes
    >>> parse("jaxops.cast", np.array(["6.8", "2.5", "-10.7"]), np.dtype(ml_dtypes.int4))
    array([7, 2, 5], dtype=int4)
  """
  texts = [as_str(op, s) for s in a.reshape(-1)]
  if dst == np.dtype(bool):
    return np.array([parse_float(op, s) != 0 for s in texts], dtype=bool).reshape(a.shape)
  if dst.kind in ("i", "u") or dst in _dtypes.NARROW_INT:
    narrow = dst in _dtypes.NARROW_INT
    ints = [wrap(parse_int(op, s, round_half_even=narrow), dst) for s in texts]
    return np.array(ints, dtype=dst).reshape(a.shape)
  return np.array([parse_float(op, s) for s in texts], dtype=np.float64).reshape(a.shape)


def as_str(op: str, s: Any) -> str:
  """``s`` as text: bytes decoded as UTF-8, anything else through ``str``."""
  if isinstance(s, bytes):
    try:
      return s.decode()
    except UnicodeDecodeError:
      raise ValueError(f"{op}: argument `x`: the bytes {s!r} are not UTF-8 text") from None
  return str(s)


def format_number(v: Any, dtype: np.dtype) -> str:
  """Shortest text that reads back to the same value of ``dtype``; ONNX's INF/NaN literals.

  Fewest significant digits first (the round trip is checked in ``dtype``), then the shorter of
  positional and scientific notation (positional on a tie).

  Examples:
    >>> import numpy as np
    >>> [format_number(v, np.dtype(np.float32)) for v in np.array([100, 0.1, 1e15], np.float32)]
    ['100', '0.1', '1e+15']
  """
  if dtype == np.dtype(bool):
    return "1" if v else "0"
  if dtype.kind in ("i", "u") or dtype in _dtypes.NARROW_INT:
    return str(int(v))
  f = float(v)
  if math.isnan(f):
    return "NaN"
  if math.isinf(f):
    return "INF" if f > 0 else "-INF"
  digits, text = 17, f"{f:.16e}"
  # FLOAT8E8M0 reads text back with a round_mode (up by default), not to nearest: its text must
  # be the power of two itself (exact in float64), or "5e-38" would read back as 2**-123
  exact = dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
  for p in range(1, 18):
    candidate = f"{f:.{p - 1}e}"
    if (float(candidate) == f) if exact else (np.array(float(candidate)).astype(dtype) == v):
      digits, text = p, candidate
      break
  mantissa, exp_text = text.split("e")
  exponent = int(exp_text)
  sign = "-" if mantissa.startswith("-") else ""
  d = mantissa.lstrip("-").replace(".", "")
  d = d.rstrip("0") or "0"
  scientific = f"{sign}{d[0]}{'.' + d[1:] if len(d) > 1 else ''}e{exponent:+03d}"
  if exponent >= len(d) - 1:
    positional = sign + d + "0" * (exponent - len(d) + 1)
  elif exponent >= 0:
    positional = sign + d[:exponent + 1] + "." + d[exponent + 1:]
  else:
    positional = sign + "0." + "0" * (-exponent - 1) + d
  return positional if len(positional) <= len(scientific) else scientific


# Decimal or scientific numbers in ASCII digits (Python's float() would also take "1_000" and
# other scripts' digits), and the special values in any case.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)",
                     re.IGNORECASE | re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def parse_float(op: str, s: str) -> float:
  """The number a text names, as a float64 (correctly rounded from the decimal text)."""
  text = s.strip()
  if text.lower() in ("true", "false"):
    return 1.0 if text.lower() == "true" else 0.0
  if not _NUMBER.fullmatch(text):
    raise ValueError(f"{op}: argument `x`: the string {s!r} is not a number (ONNX reads "
                     f"decimal or scientific numbers and INF, +INF, -INF, NaN)")
  return float(text)


def parse_int(op: str, s: str, *, round_half_even: bool) -> int:
  """The integer a text casts to, before wrapping: what casting the number as a float gives.

  An integer text is read exactly. Any other number is read as a float64, then truncated toward
  zero (the float -> integer rule) or, with ``round_half_even`` (INT4/UINT4/INT2/UINT2, ONNX's
  Int4/Int2 notes), rounded to the nearest integer with ties to even.
  """
  text = s.strip()
  if _INTEGER.fullmatch(text) and len(text) < 4000:  # int() refuses longer texts
    return int(text)
  f = parse_float(op, s)
  if not math.isfinite(f):
    raise ValueError(f"{op}: argument `x`: the string {s!r} is {f} and has no integer value")
  return round(f) if round_half_even else math.trunc(f)  # Python's round: ties to even


def wrap(v: int, dst: np.dtype) -> int:
  """``v`` reduced to ``dst``'s bits (two's complement), as for integer -> integer casts."""
  if dst in _dtypes.NARROW_INT:
    bits, signed = _dtypes.NARROW_INT[dst]
  else:
    bits, signed = 8 * dst.itemsize, dst.kind == "i"
  v &= (1 << bits) - 1
  if signed and v >> (bits - 1):
    v -= 1 << bits
  return v
