"""The static window plan shared by every pooling op (average, max, Lp).

A pool slides a window of ``kernel`` taps, ``dilation`` apart, with step ``stride`` along each of
the trailing ``len(kernel_shape)`` axes of its input. Everything about those windows depends only
on static arguments: how many there are (the output length), how much padding they read at each
end, and which input position each tap reads. This module computes that once per configuration,
in plain Python, exactly as the ONNX pooling specifications write it, and checks the arguments
with errors that name the op and the argument.

What a pool then does with the windows (average with a divisor, max with an argmax, Lp norm)
lives in its own module: _pool.py, _max_pool.py, _lp_pool.py.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from jaxops._checks import StrEnum, int_tuple, value_error


class AutoPad(StrEnum):
  """ONNX's ``auto_pad`` attribute. The empty string reads as NOTSET (exporters write it, and
  onnxruntime and onnx.reference both accept it)."""

  NOTSET = "NOTSET"
  SAME_UPPER = "SAME_UPPER"
  SAME_LOWER = "SAME_LOWER"
  VALID = "VALID"

  @classmethod
  def from_string(cls, op: str, arg: str, value: Any) -> AutoPad:
    if isinstance(value, (str, bytes)) and value in ("", b""):
      return cls.NOTSET
    return super().from_string(op, arg, value)


@dataclasses.dataclass(frozen=True)
class WindowAxis:
  """The static plan of one pooled axis.

  Window ``o`` (``0 <= o < out_len``) reads input positions ``o * stride - pad_begin +
  j * dilation`` for ``j < kernel``; positions outside ``[0, size)`` are padding.

  Attributes:
    size: the input length along this axis.
    kernel: taps per window.
    stride: step between windows.
    dilation: spacing of the taps.
    pad_begin: the padding before the input (explicit ``pads`` or the SAME split).
    pad_end: the padding after the input, as given (explicit or SAME); ceil_mode may make the
      last window read past it, see ``pad_end_read``.
    out_len: the number of windows.
  """

  size: int
  kernel: int
  stride: int
  dilation: int
  pad_begin: int
  pad_end: int
  out_len: int

  @property
  def extent(self) -> int:
    """Input positions one window spans: ``dilation * (kernel - 1) + 1``."""
    return self.dilation * (self.kernel - 1) + 1

  @property
  def pad_end_read(self) -> int:
    """The padding after the input that the windows read, ceil-mode extension included;
    negative where trailing input elements are read by no window."""
    return (self.out_len - 1) * self.stride + self.extent - self.size - self.pad_begin

  def inside(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Per window, the first tap number ``j`` whose position lies in ``[lo, hi)`` and one past
    the last (the taps in between, and only they, are there: positions grow with ``j``; equal
    where none is), in O(out_len) rather than from every tap's position (out_len x kernel)."""
    starts = np.arange(self.out_len, dtype=np.int64) * self.stride - self.pad_begin
    first = np.clip(-((starts - lo) // self.dilation), 0, self.kernel)  # ceil((lo - s) / d)
    last = np.clip((hi - 1 - starts) // self.dilation + 1, 0, self.kernel)
    return first, np.maximum(last, first)

  # Short names read by _pool._taps_sum / _pool._window_sum (their bodies are tuned in place).
  k = property(lambda self: self.kernel)
  s = property(lambda self: self.stride)
  d = property(lambda self: self.dilation)
  lo = property(lambda self: self.pad_begin)
  hi = property(lambda self: self.pad_end_read)
  out = property(lambda self: self.out_len)


@functools.lru_cache(maxsize=512)
def _axis(op: str, n: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool,
          axis: int) -> WindowAxis:
  """Output length of one axis with explicit pads, as the spec text defines it."""
  ext = d * (k - 1) + 1
  span = n + pb + pe - ext
  if ceil_mode:
    out = -(-span // s) + 1
    # A window that would start in the right padding is dropped (ONNX AveragePool-22 and
    # MaxPool-22 text, onnxruntime, PyTorch).
    if (out - 1) * s >= n + pb:
      out -= 1
  else:
    out = span // s + 1
  # With ceil_mode the spec's length keeps one window that is longer than the padded input
  # (input 3, kernel 3, dilation 2, stride 3: one window reading 0 and 2), as onnx.reference,
  # onnxruntime and PyTorch compute it; without, such a window gives no output: a length of 0
  # where the formula gives 0 (an empty axis, as onnx.reference and onnx's shape inference),
  # an error where it is negative.
  if out < 0:
    raise ValueError(
        f"{op}: the window along spatial axis {axis} spans {ext} elements (kernel_shape {k}, "
        f"dilation {d}) but the padded input has only {n + pb + pe} ({n} + pads {pb} + {pe}): "
        f"the spec's output length is {out}, negative; the window must fit in the padded "
        f"input, or overhang it by less than the stride {s} (an empty axis)")
  return WindowAxis(n, k, s, d, pb, pe, out)


# The longest window per axis: a window's taps are planned on the host one by one, so a kernel
# of 2**40 (which auto_pad SAME pads any input to hold) would ask for terabytes.
_MAX_KERNEL = 1 << 24


def window_plan(op: str, shape: tuple[int, ...], kernel_shape: Any, strides: Any, pads: Any,
                dilations: Any, auto_pad: Any, ceil_mode: bool) -> tuple[WindowAxis, ...]:
  """The per-axis window plans of a pool over the trailing ``len(kernel_shape)`` axes.

  Output length per axis (``e = dilation * (kernel - 1) + 1``, ``n`` the input length)::

    out = floor((n + pb + pe - e) / s) + 1     # NOTSET, ceil_mode=False
    out = ceil((n + pb + pe - e) / s) + 1      # NOTSET, ceil_mode=True, less one if the last
                                               # window would start at or after n + pb
    out = floor((n - e) / s) + 1               # VALID (pads are 0)
    out = ceil(n / s)                          # SAME_UPPER / SAME_LOWER

  With SAME the total padding ``(out - 1) * s + e - n`` (never negative) is split with the odd
  element at the end (SAME_UPPER) or at the beginning (SAME_LOWER). ceil_mode has no effect with
  auto_pad: the spec's SAME and VALID lengths are the same either way.

  Raises:
    TypeError: a shape argument is traced or not a sequence of integers.
    ValueError: wrong lengths; kernel_shape, strides or dilations below 1 (or a kernel_shape
      over 2**24); negative pads, pads
      at least the kernel, pads with auto_pad; an unknown auto_pad; a negative output length
      (a window that overhangs the padded input by the stride or more; by less, the formula's
      length is 0: an empty axis); ``x`` with fewer axes than the kernel.
  """
  kernel = int_tuple(op, "kernel_shape", kernel_shape)
  nd = len(kernel)
  if nd == 0:
    raise value_error(op, "kernel_shape", kernel_shape, "a non-empty sequence of integers")
  if any(k < 1 for k in kernel):
    raise value_error(op, "kernel_shape", kernel_shape, "integers >= 1")
  if any(k > _MAX_KERNEL for k in kernel):  # the plans hold a row per tap of a window
    raise value_error(op, "kernel_shape", kernel_shape, f"integers <= {_MAX_KERNEL} (windows of "
                      f"at most 2**24 taps per axis)")
  if len(shape) < nd:
    raise ValueError(f"{op}: argument `x` must have at least {nd} axes for a {nd}-D "
                     f"kernel_shape {kernel}; got shape {shape}")
  spatial = shape[len(shape) - nd:]
  strides_ = (1,) * nd if strides is None else int_tuple(op, "strides", strides, length=nd)
  if any(v < 1 for v in strides_):
    raise value_error(op, "strides", strides, "integers >= 1 (zero or negative strides are "
                      "not allowed)")
  dil = (1,) * nd if dilations is None else int_tuple(op, "dilations", dilations, length=nd)
  if any(v < 1 for v in dil):
    raise value_error(op, "dilations", dilations, "integers >= 1")
  mode = AutoPad.from_string(op, "auto_pad", auto_pad)
  if pads is not None:
    pads_ = int_tuple(op, "pads", pads, length=2 * nd)
    if any(v < 0 for v in pads_):
      raise value_error(op, "pads", pads, "integers >= 0")
    if any(p >= k for p, k in zip(pads_, kernel + kernel)):
      raise value_error(op, "pads", pads,
                        f"smaller than the kernel along its axis (kernel_shape {kernel})")
    if mode is not AutoPad.NOTSET and any(pads_):
      raise value_error(op, "pads", pads, f"omitted (or zeros) when auto_pad is {mode.value!r}")
  else:
    pads_ = (0,) * (2 * nd)
  begins, ends = list(pads_[:nd]), list(pads_[nd:])
  if mode is not AutoPad.NOTSET:
    for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides_, dil)):
      ext = d * (k - 1) + 1
      if mode is AutoPad.VALID:
        begins[i] = ends[i] = 0
        continue
      out = -(-n // s)  # SAME: ceil(n / s) == floor((n - 1) / s) + 1
      total = max(0, (out - 1) * s + ext - n)
      small, large = total // 2, total - total // 2
      begins[i], ends[i] = (small, large) if mode is AutoPad.SAME_UPPER else (large, small)
    # The spec's SAME/VALID lengths do not depend on ceil_mode (for VALID, the -11+ texts write
    # ceil((n - e + 1) / s) == floor((n - e) / s) + 1), and the padding fits exactly.
    ceil_mode = False
  return tuple(_axis(op, n, k, s, d, pb, pe, bool(ceil_mode), i)
               for i, (n, k, s, d, pb, pe) in enumerate(zip(spatial, kernel, strides_, dil,
                                                             begins, ends)))
