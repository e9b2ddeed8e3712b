"""ATen's index and weight formulas, in the precision ATen computes them: shared by
``jaxops.torch``'s float tap tables and its uint8 passes (``jaxops._torch_uint8``, float64)."""

from __future__ import annotations

from typing import Any

import numpy as np


# Taps of each filter at scale 1 (ATen's interp_size): linear 2, cubic 4, Lanczos-3 6.
_INTERP_SIZE = {"linear": 2, "cubic": 4, "lanczos": 6}


def _scales_value(dt: type, scale: float | None, n_in: int, n_out: int) -> Any:
  """ATen's compute_scales_value: 1 / scale_factor when given, else in / out, in ``dt``."""
  if scale is not None and scale > 0:
    return dt(1.0 / scale)
  return dt(n_in) / dt(n_out)


def _area_scale(dt: type, n_in: int, n_out: int, align: bool, scale: float | None) -> Any:
  """ATen's area_pixel_compute_scale."""
  if align:
    return dt(n_in - 1) / dt(n_out - 1) if n_out > 1 else dt(0)
  return _scales_value(dt, scale, n_in, n_out)


def _source_index(dt: type, scale: Any, n_out: int, align: bool, cubic: bool) -> Any:
  """ATen's area_pixel_compute_source_index for outputs ``0 .. n_out - 1``, in ``dt``:
  ``scale * o`` with align_corners, else ``scale * (o + 0.5) - 0.5`` as one fused multiply-add
  (``_fma``), clamped at 0 except for cubic."""
  o: np.ndarray = np.arange(n_out, dtype=np.int64).astype(dt)
  if align:
    return scale * o
  real = _fma(dt, scale, o + dt(0.5), dt(-0.5))
  return real if cubic else np.maximum(real, dt(0))


def _floorf(v: Any) -> np.ndarray:
  """C's floorf on a double or float argument: round to float32 first, then floor."""
  return np.floor(np.asarray(v).astype(np.float32)).astype(np.int64)


def _fma(dt: type, a: Any, b: Any, c: Any) -> Any:
  """``a * b + c`` as ATen's CPU kernels compute it in ``dt``. They are built with FMA
  instructions and the compiler contracts ``a * b + c`` into one fused multiply-add (one
  rounding): for float32 that moves coordinates and cubic weights by an ulp or two from the
  separately rounded result, and a bicubic output by up to about 1e-5, torch's float32
  tolerance. float32 is emulated in float64, where the product of two float32 values is exact;
  float64 is computed as written (an ulp there is far below the float64 tolerance)."""
  if dt is np.float32:
    f64 = np.float64
    return (np.asarray(a, f64) * np.asarray(b, f64) + np.asarray(c, f64)).astype(np.float32)
  return a * b + c


def _cubic_near(dt: type, v: Any, a: float) -> Any:
  """ATen's cubic_convolution1, ``((a + 2) v - (a + 3)) v v + 1``, with its contractions."""
  return _fma(dt, (_fma(dt, dt(a + 2), v, dt(-(a + 3))) * v).astype(dt), v, dt(1))


def _cubic_far(dt: type, v: Any, a: float) -> Any:
  """ATen's cubic_convolution2, ``((a v - 5 a) v + 8 a) v - 4 a``, with its contractions."""
  inner = _fma(dt, _fma(dt, dt(a), v, dt(-5 * a)), v, dt(8 * a))
  return _fma(dt, inner, v, dt(-4 * a))
