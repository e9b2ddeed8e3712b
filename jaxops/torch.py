"""torch.nn.functional's resampling and pooling, by name and signature, on jaxops' operators.

``import jaxops.torch as F`` and a PyTorch model's ``F.interpolate``, ``F.avg_pool2d``,
``F.adaptive_avg_pool2d``, ... calls port unchanged: the same positional and keyword
parameters, the same defaults, NCHW layout (``(N, C, *spatial)``, or ``(C, *spatial)`` where torch
allows an unbatched input), and the values torch 2.13 computes on CPU. Inputs and outputs are
``jax.Array``; every function is pure and works under ``jax.jit``, ``jax.vmap`` and ``jax.grad``
(shape-deciding arguments -- sizes, scale factors, kernel sizes, strides, paddings -- must be
concrete Python or NumPy values, as for the jaxops operators).

How each maps onto jaxops:

- ``interpolate``: one separable pass per spatial axis of the resize kernel
  (``jaxops._resize_kernel``), with tap tables built from torch's own index formulas in torch's
  precision (float32 coordinates for float32 inputs, float64 for float64 ones, nearest indices
  rounded to float32 before the floor, as ATen's kernels compute them; which of ATen's kernels
  runs can depend on the output size); "area" is ``adaptive_avg_pool``. uint8 images
  (bilinear, bicubic, lanczos) take ATen's integer passes instead (``jaxops._torch_uint8``).
- ``avg_pool1d/2d/3d``: ``jaxops.average_pool`` with symmetric pads (torch's ceil_mode and
  count_include_pad are AveragePool-22's); ``divisor_override`` rescales by a static table.
- ``max_pool1d/2d/3d``: ``jaxops.max_pool`` with symmetric pads; torch's per-plane indices are
  its flat indices modulo the plane size.
- ``lp_pool1d/2d/3d``: torch's own definition on ``avg_pool``:
  ``(sign(a) * relu(|a|) * prod(kernel_size)) ** (1 / norm_type)``, ``a`` the average of
  ``input ** norm_type``.
- ``adaptive_avg_pool1d/2d/3d``: a static summing table per axis (window ``o`` of ``n -> m``
  is ``[floor(o * n / m), ceil((o + 1) * n / m))``) applied by the same separable kernel, then
  one division by the window's size, as torch rounds;
  where every ``m`` divides its ``n``, ``jaxops.average_pool`` with kernel = stride = ``n / m``.
- ``grid_sample``: ``jaxops.grid_sample`` (ONNX GridSample's "linear"/"cubic" spellings of
  "bilinear"/"bicubic"; its nearest rounding, cubic border/reflection taps and reflection
  borders are ATen's).
- ``affine_grid``: ``jaxops.affine_grid``.
- ``roi_align`` (``torchvision.ops.roi_align``): ``jaxops.roi_align(mode="avg")``, ``aligned``
  as the half_pixel / output_half_pixel coordinate modes, ``sampling_ratio <= 0`` as adaptive,
  the batch index column (or the list of per-image boxes) as ``batch_indices``.
- ``max_unpool1d/2d/3d``: torch's per-plane indices read in the plane of the output size as
  given, with ``jaxops.max_unpool``'s rule (of repeated indices the later one is kept). Where
  every index lies in its own window (as max_pool's do; checked at run time), no scatter: one
  select into per-element blocks where the pooling's windows do not overlap, a pull of each
  position's few candidate writers where they do (``jaxops.max_unpool``'s cases); otherwise
  one scatter.
- ``adaptive_max_pool1d/2d/3d``: the same static windows (a reshape where they tile an axis,
  else one gather of a static table per axis), scanned with torch's rule (first maximum in
  row-major order; a window holding NaN gives NaN at its last NaN): all taps in one pass for
  small windows, one axis at a time for larger ones, carrying plane positions from static
  tables; the gradient goes to that element.
- ``upsample``, ``upsample_nearest``, ``upsample_bilinear`` (deprecated in torch): ``interpolate``
  as torch calls it (``upsample_bilinear`` with ``align_corners=True``);
  ``max_pool{1,2,3}d_with_indices`` and ``adaptive_max_pool{1,2,3}d_with_indices``: the pools
  with ``return_indices=True``; ``pixel_shuffle`` / ``pixel_unshuffle``: a reshape and a
  transposition.

Errors: where torch raises RuntimeError for an impossible argument, these raise ValueError (or
TypeError for a wrong type) with the same condition; ValueError and NotImplementedError where
torch raises those.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir
from jax.typing import ArrayLike

import jaxops
from jaxops import _checks
from jaxops import _fused_sum
from jaxops import _grid_sample as _grid_sample_module
from jaxops import _max_pool as _max_pool_module
from jaxops import _pool as _pool_module
from jaxops import _roi_align as _roi_align_op
from jaxops import _resize_kernel
from jaxops import _torch_uint8
from jaxops._aten import (_INTERP_SIZE, _area_scale, _cubic_far, _cubic_near, _floorf,
                          _scales_value, _source_index)
from jaxops._window import WindowAxis

__all__ = [
    "interpolate",
    "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "max_pool1d", "max_pool2d", "max_pool3d",
    "lp_pool1d", "lp_pool2d", "lp_pool3d",
    "grid_sample", "affine_grid", "roi_align",
    "max_unpool1d", "max_unpool2d", "max_unpool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "upsample", "upsample_nearest", "upsample_bilinear",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d_with_indices",
    "pixel_shuffle", "pixel_unshuffle",
]

_NS = "jaxops.torch"
_FLOATS = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)


def _op(name: str) -> str:
  return f"{_NS}.{name}"


def _float_input(name: str, x: Any) -> jax.Array:
  return _checks.floating_input(_op(name), x, tuple(np.dtype(d) for d in _FLOATS), arg="input")


def _long(op: str, arg: str, value: int, received: Any, *, error: type = ValueError) -> int:
  """``value`` where int64 holds it (torch's C++ argument); torch's overflow error otherwise
  (a ValueError, or a TypeError where torch raises that: interpolate's ``size``)."""
  if not -2 ** 63 <= value < 2 ** 63:
    make = _checks.type_error if error is TypeError else _checks.value_error
    raise make(op, arg, received, "an integer that int64 holds (torch: Overflow when "
               "unpacking long long)")
  return value


def _coord_dtype(dtype: Any) -> type:
  """The type ATen computes coordinates in: float64 for float64 inputs, float32 otherwise."""
  return np.float64 if np.dtype(dtype) == np.float64 else np.float32


# --- interpolate --------------------------------------------------------------------------------

_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact",
          "lanczos")
_LINEAR_DIM = {"linear": 1, "bilinear": 2, "trilinear": 3}


@dataclasses.dataclass(frozen=True)
class _Interp:
  """The static plan of ``interpolate``: per spatial axis (in, out, scale_factor or None)."""

  kind: str                 # "nearest", "nearest-exact", "linear", "cubic", "lanczos", "area"
  axes: tuple[tuple[int, int, float | None], ...]
  align_corners: bool
  antialias: bool
  cdtype: str               # coordinate precision: "float32" or "float64"


def _nearest_table(dt: type, n_in: int, n_out: int, scale: float | None, exact: bool,
                   two_d: bool) -> np.ndarray:
  """ATen's nearest / nearest-exact source indices, ``floor(o * s)`` / ``floor((o + 0.5) * s)``.

  ``two_d``: ATen's 2-D "vectorized" kernel, which it runs where the output's height plus
  width is at most 128 (``_use_vectorized_kernel_cond_2d``; see ``_vectorized_2d``). It passes
  the scale as a float32 and multiplies in float32 (nearest-exact: in double, then rounded to
  float32); nearest there also copies an axis whose output length equals its input's and
  halves the index where it is twice, whatever the scale factor. Its generic kernel (1-D, 3-D,
  and 2-D outputs larger than that) computes in the input's precision (``dt``), with no copies:
  nearest rounds ``o * s`` to float32 before the floor; nearest-exact takes the source
  coordinate ``max(s * (o + 0.5) - 0.5, 0)`` as one fused multiply-add, as linear does, then
  the floor of that plus 0.5 rounded to float32 (2 -> 47 samples output 23 from input 1, where
  ``floor(23.5 * s)`` in float32 gives 0).
  """
  i = np.arange(n_out, dtype=np.int64)
  if two_d and not exact and n_out == n_in:
    return i
  if two_d and not exact and n_out == 2 * n_in:
    return i >> 1
  s = _scales_value(dt, scale, n_in, n_out)
  if two_d:
    s32 = np.float32(s)
    src = _floorf((i + 0.5) * np.float64(s32)) if exact else _floorf(i.astype(np.float32) * s32)
  elif exact:  # ATen's source coordinate, then + 0.5 in double
    real = _source_index(dt, s, n_out, align=False, cubic=False)
    src = _floorf(np.asarray(real, np.float64) + 0.5)
  else:
    src = _floorf(i.astype(dt) * s)
  return np.minimum(src, n_in - 1)


def _linear_table(dt: type, n_in: int, n_out: int, align: bool,
                  scale: float | None) -> tuple[np.ndarray, np.ndarray]:
  """ATen's compute_source_index_and_lambda (linear, bilinear, trilinear)."""
  i = np.arange(n_out, dtype=np.int64)
  if n_out == n_in:
    return np.stack([i, i], 1), np.stack([np.ones(n_out), np.zeros(n_out)], 1).astype(dt)
  real = _source_index(dt, _area_scale(dt, n_in, n_out, align, scale), n_out, align,
                       cubic=False)
  i0 = np.minimum(_floorf(real), n_in - 1)
  lam1 = np.clip(real - i0.astype(dt), dt(0), dt(1)).astype(dt)
  i1 = i0 + (i0 < n_in - 1)
  return np.stack([i0, i1], 1), np.stack([dt(1) - lam1, lam1], 1)


def _cubic_table(dt: type, n_in: int, n_out: int, align: bool,
                 scale: float | None) -> tuple[np.ndarray, np.ndarray]:
  """ATen's bicubic: Keys' kernel with A = -0.75 on the four taps around the source index."""
  real = _source_index(dt, _area_scale(dt, n_in, n_out, align, scale), n_out, align,
                       cubic=True)
  i0 = np.minimum(_floorf(real), n_in - 1)
  t = np.clip(real - i0.astype(dt), dt(0), dt(1)).astype(dt)
  w = np.stack([_cubic_far(dt, t + dt(1), -0.75), _cubic_near(dt, t, -0.75),
                _cubic_near(dt, dt(1) - t, -0.75), _cubic_far(dt, dt(2) - t, -0.75)], 1)
  idx = np.clip(i0[:, None] + np.arange(-1, 3)[None, :], 0, n_in - 1)
  return idx, w.astype(dt)


def _lanczos(dt: type, v: np.ndarray) -> np.ndarray:
  """HelperInterpLanczos::aa_filter on ``|x|`` = ``v`` in ``dt``: ``sinc(x) * sinc(x / 3)``
  below 3. ATen's ``x / 3.0`` divides by a double, so the second sinc runs in double even for
  float32, and the product is rounded back to ``dt``."""
  def sinc(u: np.ndarray, t: type) -> np.ndarray:
    u = np.asarray(u, t)
    xp = (u * t(np.pi)).astype(t)
    with np.errstate(invalid="ignore", divide="ignore"):
      out = (np.sin(xp.astype(np.float64)).astype(t) / xp).astype(t)
    return np.where(u == 0, t(1), out)
  f = sinc(v, dt).astype(np.float64) * sinc(np.asarray(v, np.float64) / 3.0, np.float64)
  return np.where(v < 3, f, 0).astype(dt)


def _aa_table(dt: type, n_in: int, n_out: int, align: bool, scale: float | None,
              kind: str) -> tuple[np.ndarray, np.ndarray]:
  """ATen's antialiased (Pillow-style) tables: a stretched triangle, Keys a=-0.5 or Lanczos-3
  kernel, taps outside the input dropped and the rest normalised."""
  interp = _INTERP_SIZE[kind]
  s = _area_scale(dt, n_in, n_out, align, scale)
  support = dt(interp * 0.5) * s if s >= 1 else dt(interp * 0.5)
  k_max = int(math.ceil(support)) * 2 + 1
  invscale = dt(1) / s if s >= 1 else dt(1)
  idx = np.zeros((n_out, k_max), np.int64)
  w: np.ndarray = np.zeros((n_out, k_max), dt)
  for o in range(n_out):
    center = s * dt(o + 0.5)
    xmin = max(int(center - support + dt(0.5)), 0)
    xsize = min(int(center + support + dt(0.5)), n_in) - xmin
    xsize = min(max(xsize, 0), k_max)
    j = np.arange(xsize)
    v = np.abs((j.astype(dt) + dt(xmin) - center + dt(0.5)) * invscale).astype(dt)
    if kind == "cubic":
      f = np.where(v < 1, _cubic_near(dt, v, -0.5),
                   np.where(v < 2, _cubic_far(dt, v, -0.5), dt(0)))
    elif kind == "lanczos":
      f = _lanczos(dt, v)
    else:
      f = np.where(v < 1, dt(1) - v, dt(0))
    f = f.astype(dt)
    total = f.sum(dtype=dt) if xsize else dt(0)
    if total != 0:
      f = (f / total).astype(dt)
    w[o, :xsize] = f
    idx[o, :xsize] = xmin + j
    idx[o, xsize:] = min(xmin, n_in - 1)
  return idx, w


def _adaptive_table(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
  """Averaging taps of torch's adaptive pooling: window o is [floor(o n / m), ceil((o+1) n / m))."""
  o = np.arange(n_out, dtype=np.int64)
  start = (o * n_in) // n_out
  end = -((-(o + 1) * n_in) // n_out)
  k = int((end - start).max()) if n_out else 1
  j = np.arange(k)[None, :]
  live = j < (end - start)[:, None]
  idx = np.where(live, start[:, None] + j, start[:, None])
  w = np.where(live, 1.0 / (end - start)[:, None], 0.0)
  return idx, w


def _adaptive_divisor(cfg: _Adaptive, lead: int, dtype: Any) -> Any:
  """The window sizes of uneven adaptive average pooling, as a divisor of the window sums (a
  table of the output plane; see ``_pool._divisor``): torch sums each window and divides by
  its size, rounding once. Weights of ``1 / size`` per axis rounded each product (a bfloat16
  mean that lies halfway between two bfloat16 values came out one float32 unit off, and was
  then rounded the other way)."""
  counts = tuple(tuple(int(c) for c in w.sum(axis=1)) for _, w in _adaptive_tables(cfg))
  return _pool_module._divisor(counts, lead, dtype)


def _vectorized_2d(axes: tuple[tuple[int, int, float | None], ...]) -> bool:
  """Whether ATen runs a 2-D nearest / nearest-exact resize of an NCHW input through its
  vectorized kernel: where the output's height plus width is at most 128 (its benchmarked
  threshold), else through its generic one. (It also takes the vectorized kernel for a
  channels-last input of more than 3 channels; an NCHW input is one only where its height and
  width are 1, and every index is then 0 in both kernels.)"""
  return len(axes) == 2 and sum(n_out for _, n_out, _ in axes) <= 128


@functools.lru_cache(maxsize=512)
def _interp_tables(cfg: _Interp) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
  dt = np.float64 if cfg.cdtype == "float64" else np.float32
  out = []
  vectorized = _vectorized_2d(cfg.axes)
  for n_in, n_out, scale in cfg.axes:
    if cfg.kind in ("nearest", "nearest-exact"):
      idx = _nearest_table(dt, n_in, n_out, scale, cfg.kind == "nearest-exact",
                           vectorized)[:, None]
      tab = (idx, np.ones(idx.shape))
    elif cfg.kind == "area":
      tab = _adaptive_table(n_in, n_out)
    elif cfg.antialias and n_in == n_out:  # ATen skips an axis whose length is kept
      tab = (np.arange(n_out)[:, None], np.ones((n_out, 1)))
    elif cfg.antialias:
      tab = _aa_table(dt, n_in, n_out, cfg.align_corners, scale, cfg.kind)
    elif cfg.kind == "linear":
      tab = _linear_table(dt, n_in, n_out, cfg.align_corners, scale)
    else:
      tab = _cubic_table(dt, n_in, n_out, cfg.align_corners, scale)
    idx, w = tab
    idx.setflags(write=False)
    w = np.asarray(w, np.float64)
    w.setflags(write=False)
    out.append((idx, w))
  return tuple(out)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _interp_jit(x: jax.Array, cfg: _Interp) -> jax.Array:
  lead = x.ndim - len(cfg.axes)
  if x.dtype == np.uint8 and cfg.kind in ("linear", "cubic", "lanczos"):  # ATen's integers
    return _torch_uint8.resize(x, cfg.axes, cfg.align_corners, cfg.kind, cfg.antialias)
  passes = []
  for d, ((n_in, n_out, _), (idx, w)) in enumerate(zip(cfg.axes, _interp_tables(cfg))):
    if n_in == n_out and np.array_equal(idx[:, 0], np.arange(n_out)) and np.all(
        w[:, 0] == 1) and not np.any(w[:, 1:]):
      continue  # an identity pass
    passes.append((lead + d, idx, w))
  if any(n_out == 0 for _, n_out, _ in cfg.axes) or x.size == 0:
    shape = x.shape[:lead] + tuple(n for _, n, _ in cfg.axes)
    return jnp.zeros(shape, x.dtype)
  if not passes:
    return x
  if not jnp.issubdtype(x.dtype, jnp.floating):  # nearest on integers and bools: exact gathers
    for axis, idx, _ in passes:
      x = jnp.take(x, jnp.asarray(idx[:, 0]), axis=axis)
    return x
  # float16 and bfloat16 in float32, rounded once (not after each pass)
  return _resize_kernel.apply_separable(x.astype(_checks.compute_dtype(x.dtype)),
                                        passes).astype(x.dtype)


def interpolate(input: ArrayLike, size: Any = None, scale_factor: Any = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> jax.Array:
  """``torch.nn.functional.interpolate``: resizes the spatial axes of an ``(N, C, *spatial)``
  array.

  Modes and their input ranks (as torch): "nearest", "nearest-exact" and "area" for 3-D, 4-D
  and 5-D inputs; "linear" 3-D, "bilinear", "bicubic" and "lanczos" 4-D, "trilinear" 5-D.
  Output lengths are ``size``, or ``floor(length * scale_factor)``. Source coordinates are
  torch's:

  - "nearest": ``floor(o * scale)`` (torch's legacy rule, ONNX asymmetric + floor), with
    ``scale = 1 / scale_factor`` when a scale factor is given (and not recomputed), else
    ``in / out``; the product rounded to float32 before the floor, as ATen does. On 4-D
    inputs whose output height plus width is at most 128, ATen's vectorized kernel takes the
    scale as a float32 and copies an axis whose output length equals its input's and halves
    the index where it is twice, whatever the scale factor; so does this. Larger 4-D outputs
    take ATen's generic kernel, as 3-D and 5-D inputs do: the scale in the input's precision,
    no copies.
  - "nearest-exact": ``floor((o + 0.5) * scale)`` (ONNX half_pixel + round_prefer_ceil).
  - "linear"/"bilinear"/"trilinear"/"bicubic": ``align_corners=True``:
    ``o * (in - 1) / (out - 1)``; else ``(o + 0.5) * scale - 0.5`` (linear clamps it at 0).
    Bicubic is Keys' kernel with ``a = -0.75`` and edge pixels repeated.
  - ``antialias=True`` (bilinear, bicubic, 4-D): Pillow's filters stretched by the downsampling
    factor, taps outside the input dropped and weights renormalised; bicubic then uses
    ``a = -0.5``.
  - "lanczos" (4-D, ``antialias=True`` required, ``align_corners`` not True): the same with
    Pillow's Lanczos-3 filter ``sinc(x) * sinc(x / 3)`` on ``|x| < 3`` (torch 2.13).
  - "area": ``adaptive_avg_pool`` to the output size.
  - uint8 input to "bilinear"/"bicubic" (plain or antialiased) and "lanczos": ATen's integer
    arithmetic, exactly: weights computed in double (bicubic without antialias with
    ``a = -0.75``, taps outside the input added to the edge tap), scaled to int16 with a
    per-axis precision, one rounding shift and clamp per pass, the width first
    (``jaxops._torch_uint8``).

  Args:
    input: ``(N, C, *spatial)`` array; float16, bfloat16, float32 or float64; also uint8 for
      "bilinear", "bicubic" and "lanczos"; any dtype for "nearest" and "nearest-exact".
    size: output spatial size: an int (every axis) or one int per spatial axis.
    scale_factor: a float (every axis) or one per spatial axis; exactly one of ``size`` and
      ``scale_factor``.
    mode: one of "nearest", "linear", "bilinear", "bicubic", "trilinear", "area",
      "nearest-exact", "lanczos".
    align_corners: linear modes only (None means False); must be None for the others.
    recompute_scale_factor: compute the output size from ``scale_factor`` and then interpolate
      as if that size had been given (the coordinate map then uses ``in / out``).
    antialias: bilinear, bicubic and lanczos on 4-D inputs only (lanczos requires it).

  Returns:
    The resized array, of ``input``'s dtype (float16/bfloat16 compute in float32).

  Raises:
    ValueError: both or neither of ``size``/``scale_factor``; wrong lengths; ``align_corners``
      with a non-interpolating mode; ``recompute_scale_factor`` with ``size``; ``antialias``
      with another mode or rank; lanczos without antialias or with align_corners=True; output
      or input sizes of 0.
    NotImplementedError: a mode that does not exist for the input's rank, or an unknown mode.
    TypeError: non-integer sizes, a traced size or scale factor, a non-float input to an
      interpolating mode (but uint8 to bilinear, bicubic and lanczos).

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> x = jnp.array([[[1.0, 2.0, 4.0]]])
    >>> F.interpolate(x, scale_factor=2, mode="linear")
    Array([[[1.  , 1.25, 1.75, 2.5 , 3.5 , 4.  ]]], dtype=float32)
    >>> F.interpolate(x, size=5, mode="nearest").tolist()
    [[[1.0, 1.0, 2.0, 2.0, 4.0]]]
  """
  op = _op("interpolate")
  x = _checks.as_array(input, op, "input")
  _checks.concrete_shape(op, "input", x)
  static = (x.shape, x.dtype, size, scale_factor, mode, align_corners, recompute_scale_factor,
            antialias)
  cfg = _INTERP(_checks.cache_key(*static), *static)
  if cfg.kind == "area":  # torch's area is its adaptive_avg_pool (values, inf rule and errors)
    nd = len(cfg.axes)
    return _adaptive_avg(f"adaptive_avg_pool{nd}d", nd, x, tuple(o for _, o, _ in cfg.axes))
  return _interp_jit(x, cfg)


def _interp_config(shape: tuple[int, ...], dtype: Any, size: Any, scale_factor: Any, mode: Any,
                   align_corners: Any, recompute_scale_factor: Any, antialias: Any) -> _Interp:
  op = _op("interpolate")
  if mode not in _MODES:
    raise NotImplementedError(
        f"{op}: Input Error: Only 3D, 4D and 5D input Tensors supported (got {len(shape)}D) "
        f"for the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
        f"nearest-exact | lanczos (got {mode})")
  if mode in ("nearest", "area", "nearest-exact"):
    if align_corners is not None:
      raise ValueError(f"{op}: align_corners option can only be set with the interpolating "
                       f"modes: linear | bilinear | bicubic | trilinear")
    align = False
  else:
    align = _align_corners(op, align_corners)
  antialias = _flag(op, "antialias", antialias)
  dim = len(shape) - 2
  if size is not None and scale_factor is not None:
    raise ValueError(f"{op}: only one of size or scale_factor should be defined")
  scales: tuple[float | None, ...]
  if size is not None:
    if isinstance(size, (list, tuple)) and len(size) != dim:
      raise ValueError(
          f"{op}: Input and output must have the same number of spatial dimensions, but got "
          f"input with spatial dimensions of {list(shape[2:])} and output size of {size}. "
          f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
          f"(o1, o2, ...,oK) format.")
    sizes = size if isinstance(size, (list, tuple)) else (size,) * max(dim, 0)
    arr = [_checks.concrete(op, "size", v) for v in sizes]
    if not all(a.ndim == 0 and (np.issubdtype(a.dtype, np.integer)) for a in arr):
      raise TypeError(f"{op}: expected size to be one of int or Tuple[int] or Tuple[int, int] "
                      f"or Tuple[int, int, int], but got size with types "
                      f"{[type(v) for v in sizes]}")
    out = [_long(op, "size", int(a), size, error=TypeError) for a in arr]
    scales = (None,) * len(out)
  elif scale_factor is not None:
    if isinstance(scale_factor, (list, tuple)) and len(scale_factor) != dim:
      raise ValueError(
          f"{op}: Input and scale_factor must have the same number of spatial dimensions, but "
          f"got input with spatial dimensions of {list(shape[2:])} and scale_factor of shape "
          f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
          f"scale_factor in (s1, s2, ...,sK) format.")
    sf = scale_factor if isinstance(scale_factor, (list, tuple)) else (scale_factor,) * max(dim,
                                                                                           0)
    raw = [_bool_as_number(v) for v in sf]
    scales = tuple(_checks.static_float(op, "scale_factor", v) for v in raw)
    out = None
  else:
    raise ValueError(f"{op}: either size or scale_factor should be defined")
  recompute = _flag(op, "recompute_scale_factor", recompute_scale_factor)
  if recompute and size is not None:
    raise ValueError(f"{op}: recompute_scale_factor is not meaningful with an explicit size.")
  if mode == "area" and out is None:
    recompute = True
  if out is None and recompute:
    # torch computes these sizes in Python, ``int(length * scale_factor)``: the product in the
    # scale's own type (a NumPy float32 scale multiplies in float32: 10 * 0.7 is 7 there, 6 in
    # double), truncated toward zero (-0.8 gives an empty axis)
    out = [int(shape[i + 2] * v) for i, v in enumerate(raw)]
    scales = (None,) * len(out)
  elif out is None:  # (the size its C++ kernels compute from the double scale)
    out = [int(math.floor(float(shape[i + 2]) * float(s or 0.0))) for i, s in enumerate(scales)]
  if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and len(shape) == 4):
    raise ValueError(f"{op}: Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                     f"modes and requires a 4-D tensor as input")
  rank = len(shape)
  if mode == "lanczos" and rank == 4:
    if align:
      raise ValueError(f"{op}: Lanczos mode does not support align_corners=True")
    if not antialias:
      raise ValueError(f"{op}: Lanczos mode requires antialias=True")
  want = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}.get(mode)
  if rank not in (3, 4, 5) or (want is not None and rank != want) or (mode == "lanczos"
                                                                       and rank != 4):
    if want is not None and rank in (3, 4, 5):
      raise NotImplementedError(f"{op}: Got {rank}D input, but {mode} mode needs {want}D input")
    raise NotImplementedError(
        f"{op}: Input Error: Only 3D, 4D and 5D input Tensors supported (got {rank}D) for the "
        f"modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact | "
        f"lanczos (got {mode})")
  spatial = shape[2:]
  if mode == "area":
    if any(o < 0 for o in out):
      raise ValueError(f"{op}: output sizes must be >= 0; got {out}")
  elif any(n <= 0 for n in spatial) or any(o <= 0 for o in out):
    raise ValueError(f"{op}: Input and output sizes should be greater than 0, but got input "
                     f"{tuple(spatial)} output {tuple(out)}")
  elif shape[1] == 0:  # ATen's upsampling kernels take an empty batch, not empty channels
    raise ValueError(f"{op}: Non-empty {rank}D data tensor expected but got a tensor with "
                     f"sizes {list(shape)}")
  uint8_ok = mode in ("bilinear", "bicubic", "lanczos") and np.dtype(dtype) == np.uint8
  if mode != "nearest" and mode != "nearest-exact" and not (
      jnp.issubdtype(dtype, jnp.floating) or uint8_ok):
    allowed = ("a floating or uint8" if mode in ("bilinear", "bicubic", "lanczos")
               else "a floating")
    raise TypeError(f"{op}: mode={mode!r} needs {allowed} input; got dtype "
                    f"{np.dtype(dtype).name}")
  kind = {"bicubic": "cubic", "bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
  _checks.check_output_size(op, tuple(shape[:2]) + tuple(out), dtype,
                            taps=_interp_taps(kind, antialias, spatial, out))
  return _Interp(kind, tuple((int(n), int(o), s) for n, o, s in zip(spatial, out, scales)),
                 align, antialias, np.dtype(_coord_dtype(dtype)).name)


_INTERP = _checks.ConfigCache(_interp_config)


def _interp_taps(kind: str, antialias: bool, spatial: Sequence[int], out: Sequence[int]) -> int:
  """About how many (output position, tap) entries ``interpolate``'s static tables hold
  (``_checks.check_output_size``): the filter's taps, stretched over in / out where
  antialiasing downsamples; an area window's length."""
  total = 0
  for n, o in zip(spatial, out):
    if kind == "area":
      k = -(-n // o) + 1 if o else 0
    else:
      k = _INTERP_SIZE.get(kind, 1)
      if antialias and 0 < o < n:
        k = -(-k * n // o) + 1
    total += o * k
  return total


# --- adaptive average pooling -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Adaptive:
  axes: tuple[tuple[int, int], ...]  # (in, out) per pooled axis


@functools.lru_cache(maxsize=512)
def _adaptive_tables(cfg: _Adaptive) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
  """Per pooled axis, the summing taps of its windows: (index, 1 for a tap of the window or 0
  for the padding of a shorter one). The sums are divided by the window's size after
  (``_adaptive_divisor``)."""
  out = []
  for n_in, n_out in cfg.axes:
    idx, w = _adaptive_table(n_in, n_out)
    w = (w > 0).astype(np.float64)
    idx.setflags(write=False)
    w.setflags(write=False)
    out.append((idx, w))
  return tuple(out)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _adaptive_jit(x: jax.Array, cfg: _Adaptive) -> jax.Array:
  lead = x.ndim - len(cfg.axes)
  if x.size == 0 or any(o == 0 for _, o in cfg.axes):
    return jnp.zeros(x.shape[:lead] + tuple(o for _, o in cfg.axes), x.dtype)
  if all(n % o == 0 for n, o in cfg.axes) and any(n != o for n, o in cfg.axes):
    # Even windows (n -> n / k): the windows are average_pool's with kernel = stride = k.
    k = tuple(n // o for n, o in cfg.axes)
    return jaxops.average_pool(x, k, strides=k)
  return _adaptive_uneven(x, cfg) if any(n != o for n, o in cfg.axes) else x


def _uneven_passes(cfg: _Adaptive, ndim: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
  """(axis, idx, w) of every pooled axis that changes length, on an input of rank ``ndim``."""
  lead = ndim - len(cfg.axes)
  return [(lead + d, idx, w) for d, ((n, o), (idx, w))
          in enumerate(zip(cfg.axes, _adaptive_tables(cfg))) if n != o]


@functools.lru_cache(maxsize=512)
def _adaptive_matrices(cfg: _Adaptive) -> tuple[np.ndarray, ...]:
  """Each pooled axis' summing matrix ``(out, in)`` (1 where the input lies in the output's
  window), built once per configuration."""
  out = []
  for (n_in, n_out), (idx, w) in zip(cfg.axes, _adaptive_tables(cfg)):
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    m.setflags(write=False)
    out.append(m)
  return tuple(out)


def _adaptive_uneven(x: jax.Array, cfg: _Adaptive) -> jax.Array:
  """Uneven adaptive average pooling, a linear primitive whose transpose is
  ``_adaptive_uneven_t``: written as two primitives that are each other's transposes (as
  ``_fused_sum``'s), so that forward mode, reverse mode and any order of the two work (a
  ``custom_vjp`` refuses ``jax.jvp``, ``jacfwd`` and ``hessian``) and vmap batches them."""
  return _adaptive_uneven_p.bind(x, cfg=cfg)


def _adaptive_uneven_t(ct: jax.Array, cfg: _Adaptive) -> jax.Array:
  """The transpose of ``_adaptive_uneven``: from (..., out) back to (..., in)."""
  return _adaptive_uneven_t_p.bind(ct, cfg=cfg)


def _window_sums(a: jax.Array, axis: int, start: np.ndarray, size: np.ndarray) -> jax.Array:
  """``a`` with ``axis`` replaced by the sums of its windows ``[start, start + size)`` (static),
  one reduction of a static slice each: only the window's own elements, so inf and NaN give
  what torch's window sums give."""
  return jnp.concatenate([jnp.sum(lax.slice_in_dim(a, int(b), int(b + n), axis=axis), axis=axis,
                                  keepdims=True) for b, n in zip(start, size)], axis=axis)


def _adaptive_uneven_impl(x: jax.Array, *, cfg: _Adaptive, partitioned: bool = False
                          ) -> jax.Array:
  """Uneven adaptive average pooling: the separable taps forward. Its transpose (the backward
  pass) multiplies the cotangent by each axis' small dense pooling matrix (``(out, in)``, at
  most two nonzeros per input column) with XLA's dot: the transposed taps are an upsampling
  by gathers (56 -> 9 on 8x64x56x56: 19 ms against 4.8, one process). A cotangent holding inf
  or NaN takes a branch that gives each input what torch's window shares give it (0 * inf in
  the matrices, or in the taps' zero-weight entries, would reach other windows' inputs). So
  does an input holding inf in the forward: a window with +inf averages to +inf, one with both
  infinities to NaN (one pass over the input to look for them); not where every changing axis
  has windows longer than the kernel unrolls, which are sums of static slices, right for any
  input as they are."""
  passes = _uneven_passes(cfg, x.ndim)
  # Windows longer than the resize kernel unrolls are summed slice by slice (the kernel's loop
  # takes one tap per step: 1024 -> 7 took 1.4 ms against PyTorch's 0.09), up to
  # _resize_kernel._UNROLLED_TAPS windows (a reduction each: 1000 took 16 s to compile)
  limit = _resize_kernel._UNROLLED_TAPS
  is_long = [idx.shape[1] > limit >= idx.shape[0] for _, idx, _ in passes]
  long = [p for p, k in zip(passes, is_long) if k]
  taps = [p for p, k in zip(passes, is_long) if not k]

  def plain(a: jax.Array) -> jax.Array:
    for axis, idx, w in long:
      a = _window_sums(a, axis, idx[:, 0], w.sum(axis=1))
    if taps:
      a = _resize_kernel.apply_separable(a, taps)
    return a / _adaptive_divisor(cfg, x.ndim - len(cfg.axes), a.dtype)

  def infinite(a: jax.Array) -> jax.Array:
    # The taps' table pads short windows with zero-weight taps on a pixel of the window, whose
    # 0 * inf would turn a window's inf into NaN; torch sums the window's own elements only.
    def hit(m: jax.Array) -> jax.Array:  # live taps have positive weights
      return plain(m.astype(a.dtype)) > 0
    out = plain(jnp.where(jnp.isfinite(a), a, jnp.zeros((), a.dtype)))
    pos, neg, nan = hit(a == jnp.inf), hit(a == -jnp.inf), hit(jnp.isnan(a))
    out = jnp.where(pos, jnp.asarray(jnp.inf, a.dtype), out)
    out = jnp.where(neg, jnp.asarray(-jnp.inf, a.dtype), out)
    return jnp.where(nan | (pos & neg), jnp.asarray(jnp.nan, a.dtype), out)

  # float16 and bfloat16 in float32, rounded once (not after each pass)
  x32 = x.astype(_checks.compute_dtype(x.dtype))
  if not taps:  # window sums of the window's own elements: right for inf and NaN as they are
    return plain(x32).astype(x.dtype)
  if partitioned:  # a predicate over the whole array would need a collective: the general way
    return infinite(x32).astype(x.dtype)
  return lax.cond(_checks.any_true(jnp.isinf(x32)), infinite, plain, x32).astype(x.dtype)


def _adaptive_uneven_t_impl(ct: jax.Array, *, cfg: _Adaptive, partitioned: bool = False
                            ) -> jax.Array:
  lead = ct.ndim - len(cfg.axes)
  mats = [(lead + d, m) for d, ((n, o), m) in enumerate(zip(cfg.axes, _adaptive_matrices(cfg)))
          if n != o]

  def dense(c: jax.Array) -> jax.Array:
    c = c / _adaptive_divisor(cfg, lead, c.dtype)
    for axis, m in mats:
      c = jnp.moveaxis(jnp.tensordot(c, jnp.asarray(m, c.dtype), axes=([axis], [0]),
                                     precision=lax.Precision.HIGHEST), -1, axis)
    return c

  def non_finite(c: jax.Array) -> jax.Array:
    # The finite part through the matrices; an input any of whose windows holds +inf, -inf or
    # NaN takes what torch's sum of window shares gives it (the weights are positive).
    finite = jnp.isfinite(c)
    reach = [dense(m.astype(c.dtype)) > 0 for m in (c == jnp.inf, c == -jnp.inf, jnp.isnan(c))]
    out = dense(jnp.where(finite, c, 0))
    out = jnp.where(reach[0], jnp.inf, jnp.where(reach[1], -jnp.inf, out))
    return jnp.where(reach[2] | (reach[0] & reach[1]), jnp.nan, out).astype(c.dtype)

  # float16 and bfloat16 in float32, as the taps and torch compute them, rounded once;
  # materialised once: the check and the branch read it (XLA would otherwise fuse the forward
  # into each, computing it again)
  c32 = lax.optimization_barrier(ct.astype(_checks.compute_dtype(ct.dtype)))
  if partitioned:  # as the forward: no predicate over the whole array
    return non_finite(c32).astype(ct.dtype)
  return lax.cond(jnp.isfinite(jnp.sum(c32 * 0)), dense, non_finite, c32).astype(ct.dtype)


def _adaptive_shape(shape: tuple[int, ...], cfg: _Adaptive, side: int) -> tuple[int, ...]:
  """``shape`` with its pooled trailing axes set to their input (side 0) or output (side 1)
  lengths."""
  return shape[:len(shape) - len(cfg.axes)] + tuple(a[side] for a in cfg.axes)


_adaptive_uneven_p = Primitive("jaxops_adaptive_avg_uneven")
_adaptive_uneven_t_p = Primitive("jaxops_adaptive_avg_uneven_transpose")
for _prim, _impl, _side, _other in (
    (_adaptive_uneven_p, _adaptive_uneven_impl, 1, _adaptive_uneven_t),
    (_adaptive_uneven_t_p, _adaptive_uneven_t_impl, 0, _adaptive_uneven)):
  _prim.def_impl(jax.jit(_impl, static_argnames=("cfg",)))
  _prim.def_abstract_eval(
      lambda v, *, cfg, _side=_side: v.update(shape=_adaptive_shape(v.shape, cfg, _side),
                                               weak_type=False))
  # compiled for several devices, the conditional on inf or NaN anywhere is left out (its
  # predicate would need an all-reduce): the general branch, right for every input
  mlir.register_lowering(_prim, lambda ctx, v, *, cfg, _impl=_impl: mlir.lower_fun(
      functools.partial(_impl, partitioned=_fused_sum.partitioned(ctx)),
      multiple_results=False)(ctx, v, cfg=cfg))
  ad.deflinear2(_prim, lambda ct, v, *, cfg, _other=_other: [_other(ct, cfg)])
  # the pooled axes are the trailing ones: the batch axis goes first
  batching.primitive_batchers[_prim] = lambda args, dims, *, cfg, _prim=_prim: (
      _prim.bind(jnp.moveaxis(args[0], dims[0], 0), cfg=cfg), 0)
del _prim, _impl, _side, _other


def _adaptive_config(name: str, nd: int, shape: tuple[int, ...], output_size: Any) -> _Adaptive:
  op = _op(name)
  if isinstance(output_size, np.ndarray) and output_size.ndim == 1:
    output_size = tuple(output_size.tolist())  # torch takes a 1-D NumPy array as a sequence
  # torch's adaptive_avg_pool2d/3d to size 1 on every axis is a mean over the last axes, of an
  # input of any rank (its Python wrapper asks nd + 1 axes of a sequence output_size, nd of an
  # int); the rank is checked below, once the sizes are known
  mean_any_rank = "avg" in name and nd > 1
  at_least = nd + 1 if isinstance(output_size, (list, tuple)) else nd
  usual_rank = len(shape) in (nd + 1, nd + 2)

  def wrong_rank(note: str = "") -> ValueError:
    return ValueError(f"{op}: Expected {nd + 1}D or {nd + 2}D tensor, but got input of shape "
                      f"{tuple(shape)}{note}")
  if not usual_rank and not (mean_any_rank and len(shape) >= at_least):
    raise wrong_rank()
  spatial = shape[len(shape) - nd:]
  if output_size is None:  # torch: "object of type 'NoneType' has no len()"
    raise _checks.type_error(op, "output_size", output_size,
                             f"an int or a sequence of {nd} ints (None only as an entry)")
  if isinstance(output_size, (list, tuple)):
    if len(output_size) != nd:
      raise _checks.value_error(op, "output_size", output_size,
                                f"an int or a sequence of {nd} ints (or None)")
    sizes = tuple(output_size)
  else:
    sizes = (output_size,) * nd
  out = []
  for n, v in zip(spatial, sizes):
    if v is None and nd > 1:
      out.append(int(n))
      continue
    a = _checks.concrete(op, "output_size", v)
    if a.ndim != 0 or not np.issubdtype(a.dtype, np.integer):
      raise _checks.type_error(op, "output_size", output_size,
                               f"an int or a sequence of {nd} ints")
    if _long(op, "output_size", int(a), output_size) < 0:
      raise _checks.value_error(op, "output_size", output_size, "sizes >= 0")
    out.append(int(a))
  if not usual_rank and any(o != 1 for o in out):
    raise wrong_rank(f" (any rank from {at_least} only for output size 1)")
  # torch's checks: adaptive_avg_pool1d/2d need non-empty spatial axes (channels may be empty),
  # adaptive_avg_pool3d and the max pools every axis after the first, batched or not; except
  # that an average to size 1 on every axis is torch's mean, which takes any empty axis (NaN)
  rest = shape[len(shape) - nd:] if "avg" in name and nd < 3 else shape[1:]
  mean = "avg" in name and all(o == 1 for o in out)
  for d in rest:
    if d == 0 and not mean:
      raise ValueError(f"{op}: Expected input to have non-zero size for non-batch dimensions, "
                       f"but input has shape {tuple(shape)}")
  _checks.check_output_size(op, tuple(shape[:len(shape) - nd]) + tuple(out), np.float32,
                            taps=_interp_taps("area", False, spatial, out))
  return _Adaptive(tuple((int(n), o) for n, o in zip(spatial, out)))


_ADAPTIVE = _checks.ConfigCache(_adaptive_config)


def _adaptive_avg(name: str, nd: int, input: ArrayLike, output_size: Any) -> jax.Array:
  x = _float_input(name, input)
  cfg = _ADAPTIVE(_checks.cache_key(name, nd, x.shape, output_size), name, nd, x.shape,
                  output_size)
  if any(n == 0 for n, _ in cfg.axes):  # every output size is 1 here: torch's mean, NaN
    return jnp.mean(x, axis=tuple(range(x.ndim - nd, x.ndim)), keepdims=True)
  if all(o == 1 for _, o in cfg.axes):  # torch's mean too: GlobalAveragePool's row sums, 2.2
    # to 4 times faster than the windows' sums (8x32x64x64: 0.06-0.11 ms against 0.24-0.25)
    return _pool_module.mean_after(x, lead=x.ndim - nd)
  if any(o and n % o for n, o in cfg.axes):  # uneven windows: the resize kernel's plans
    _checks.concrete_shape(_op(name), "input", x)
  return _adaptive_jit(x, cfg)


def adaptive_avg_pool1d(input: ArrayLike, output_size: Any) -> jax.Array:
  """``torch.nn.functional.adaptive_avg_pool1d`` on ``(N, C, L)`` or ``(C, L)``.

  Output ``o`` of ``L -> m`` averages ``input[..., floor(o * L / m) : ceil((o + 1) * L / m)]``
  (windows of uneven length where ``m`` does not divide ``L``).

  Args:
    input: float16, bfloat16, float32 or float64 array.
    output_size: the output length ``m`` (an int or a 1-tuple).

  Returns:
    ``(N, C, m)`` (or ``(C, m)``), of ``input``'s dtype.

  Raises:
    ValueError: wrong rank, an empty non-batch axis, a negative size.
    TypeError: a non-integer or traced size, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.adaptive_avg_pool1d(jnp.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]]), 3).tolist()
    [[[1.5, 3.0, 4.5]]]
  """
  return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input: ArrayLike, output_size: Any) -> jax.Array:
  """``torch.nn.functional.adaptive_avg_pool2d`` on ``(N, C, H, W)`` or ``(C, H, W)``.

  Per axis, output ``o`` of ``n -> m`` averages input ``[floor(o * n / m), ceil((o + 1) * n /
  m))``; the 2-D window is the product of the two. To size 1 on both axes it is torch's mean
  over the last two axes, of an input of any rank (from 2 axes with an int ``output_size``, 3
  with a sequence), as torch takes it.

  Args:
    input: float16, bfloat16, float32 or float64 array.
    output_size: ``m`` for both axes, or ``(mH, mW)``; a ``None`` entry keeps that axis' size.

  Returns:
    ``(N, C, mH, mW)`` (or ``(C, mH, mW)``), of ``input``'s dtype.

  Raises:
    ValueError: wrong rank, an empty non-batch axis, a negative size.
    TypeError: a non-integer or traced size, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.adaptive_avg_pool2d(jnp.arange(9.0).reshape(1, 3, 3), 2).tolist()
    [[[2.0, 3.0], [5.0, 6.0]]]
  """
  return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool3d(input: ArrayLike, output_size: Any) -> jax.Array:
  """``torch.nn.functional.adaptive_avg_pool3d`` on ``(N, C, D, H, W)`` or ``(C, D, H, W)``.

  Per axis, output ``o`` of ``n -> m`` averages input ``[floor(o * n / m), ceil((o + 1) * n /
  m))``; the 3-D window is the product of the three. To size 1 on every axis it is torch's
  mean over the last three axes, of an input of any rank (from 3 axes with an int
  ``output_size``, 4 with a sequence), as torch takes it.

  Args:
    input: float16, bfloat16, float32 or float64 array.
    output_size: ``m`` for every axis, or ``(mD, mH, mW)``; a ``None`` entry keeps that size.

  Returns:
    ``(N, C, mD, mH, mW)`` (or without ``N``), of ``input``'s dtype.

  Raises:
    ValueError: wrong rank, an empty non-batch axis, a negative size.
    TypeError: a non-integer or traced size, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.adaptive_avg_pool3d(jnp.ones((1, 2, 3, 4)), 1).shape
    (1, 1, 1, 1)
  """
  return _adaptive_avg("adaptive_avg_pool3d", 3, input, output_size)


# --- average pooling ----------------------------------------------------------------------------


def _aten_bool(op: str, arg: str, value: Any, *, allowed: str = "a Python bool") -> bool:
  """A bool argument that torch passes to its ATen operator: a Python bool only (torch's
  TypeError for 0 or 1, a NumPy bool or None)."""
  if not isinstance(value, bool):
    raise _checks.type_error(op, arg, value, f"{allowed}, as torch takes it")
  return value


def _flag(op: str, arg: str, value: Any, *, numbers_only: bool = False) -> bool:
  """A flag that torch tests in Python (``if return_indices:``): any value's truth, None as
  False, as torch takes it; traced values are a TypeError (the flag selects code). With
  ``numbers_only`` (a bool that torch passes to a registered operator, which takes None and
  numbers), other types are a TypeError. An array of several values is torch's ValueError."""
  if _checks.is_traced(value):
    raise _checks.type_error(op, arg, value, "a concrete value (it selects code, so it must be "
                             "concrete under jax.jit)")
  if numbers_only and value is not None and not isinstance(
      value, (bool, int, float, np.bool_, np.integer, np.floating)):
    raise _checks.type_error(op, arg, value, "a bool (or None or a number, as torch's operators "
                             "take it)")
  try:
    return bool(value)
  except ValueError:
    raise _checks.value_error(op, arg, value, "a value with one truth value (a bool)") from None
  except TypeError:
    raise _checks.type_error(op, arg, value, "a value with a truth value (a bool)") from None


def _bool_as_number(value: Any) -> Any:
  """A Python or NumPy bool as the number torch reads it as (True is 1.0); else ``value``."""
  return float(value) if isinstance(value, (bool, np.bool_)) else value


def _align_corners(op: str, value: Any) -> bool:
  """torch's align_corners: None (False) or a Python bool; anything else (0 or 1, a NumPy or
  JAX bool) is torch's TypeError."""
  if value is None:
    return False
  return _aten_bool(op, "align_corners", value, allowed="None or a Python bool")


def _no_floats(op: str, arg: str, value: Any, what: str) -> None:
  """A float entry, even an integral one, in torch's int argument ``arg``: torch's TypeError."""
  items = value if isinstance(value, (list, tuple)) else (value,)
  if any(isinstance(v, (float, np.floating)) or (isinstance(v, (np.ndarray, jax.Array))
                                                 and jnp.issubdtype(v.dtype, jnp.floating))
         for v in items):
    raise _checks.type_error(op, arg, value, f"{what} (as torch: not floats)")


def _pool_arg(op: str, arg: str, value: Any, nd: int, *, allow_empty: bool = False,
              broadcast: bool = True) -> tuple:
  """torch's int-or-tuple pooling argument as ``nd`` ints (an empty sequence: ``()``). A float,
  even an integral one, is torch's TypeError. ``broadcast=False``: a sequence must hold ``nd``
  ints (torch's max_unpool reads a one-element tuple's second entry and fails)."""
  _no_floats(op, arg, value, "an int or a tuple of ints")
  if isinstance(value, (list, tuple)):
    if allow_empty and len(value) == 0:
      return ()
    if len(value) not in ((1, nd) if broadcast else (nd,)):
      what = ("a single int, or a tuple of " if broadcast else "an int, or a tuple of ") + {
          1: "one int", 2: "two ints", 3: "three ints"}[nd]
      raise _checks.value_error(op, arg, value, ("omitted, " if allow_empty else "") + what)
    vals = tuple(_checks.int_tuple(op, arg, value))
    return vals * nd if len(vals) == 1 else vals
  return _checks.int_tuple(op, arg, (value,)) * nd


@dataclasses.dataclass(frozen=True)
class _AvgPool:
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  pad: tuple[int, ...]
  ceil_mode: bool
  count_include_pad: bool
  rescale: Any   # None, or a static table (nested tuples) that turns the mean into sum/override


def _avg_config(name: str, nd: int, shape: tuple[int, ...], kernel_size: Any, stride: Any,
                padding: Any, ceil_mode: Any, count_include_pad: Any,
                divisor_override: Any) -> _AvgPool:
  op = _op(name)
  k = _pool_arg(op, "kernel_size", kernel_size, nd)
  s = k if stride is None else (_pool_arg(op, "stride", stride, nd, allow_empty=True) or k)
  p = _pool_arg(op, "padding", padding, nd)
  ceil_mode = _aten_bool(op, "ceil_mode", ceil_mode)
  cip = _aten_bool(op, "count_include_pad", count_include_pad)
  if divisor_override is not None:
    if _checks.is_traced(divisor_override) or not isinstance(divisor_override,
                                                             (int, np.integer)) or isinstance(
                                                                 divisor_override, bool):
      raise _checks.type_error(op, "divisor_override", divisor_override, "an int or None")
    if _long(op, "divisor_override", int(divisor_override), divisor_override) == 0:
      raise _checks.value_error(op, "divisor_override", divisor_override,
                                "non-zero (divisor must be not zero)")
  if any(v <= 0 for v in k):
    raise _checks.value_error(op, "kernel_size", kernel_size, "greater than zero")
  if any(v <= 0 for v in s):
    raise _checks.value_error(op, "stride", stride, "greater than zero")
  if any(v < 0 for v in p):
    raise _checks.value_error(op, "padding", padding, "non-negative")
  if any(pv > kv // 2 for pv, kv in zip(p, k)):
    raise _checks.value_error(op, "padding", padding,
                              f"at most half of the kernel size (kernel_size {k})")
  if len(shape) not in (nd + 1, nd + 2) or any(d == 0 for d in shape[len(shape) - nd - 1:]):
    raise ValueError(f"{op}: Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional "
                     f"0 dim batch size for input; got shape {tuple(shape)}")
  spatial = shape[len(shape) - nd:]
  if nd == 3 and any(n < kv for n, kv in zip(spatial, k)):
    raise ValueError(f"{op}: input image {tuple(spatial)} smaller than kernel size {k} (torch's "
                     f"3-D pooling needs each unpadded axis at least the kernel)")
  outs, counts = [], []
  for n, kv, sv, pv in zip(spatial, k, s, p):
    span = n + 2 * pv - kv
    o = (span + (sv - 1 if ceil_mode else 0)) // sv + 1
    if ceil_mode and (o - 1) * sv >= n + pv:
      o -= 1
    if o < 1:
      raise ValueError(f"{op}: Given input size {tuple(spatial)}, the calculated output size "
                       f"is too small (kernel_size {k}, stride {s}, padding {p})")
    outs.append(o)
    start = np.arange(o) * sv - pv
    end = np.minimum(start + kv, n + pv)
    if cip:
      counts.append(end - start)
    else:
      counts.append(np.minimum(end, n) - np.maximum(start, 0))
  rescale = None
  if divisor_override is not None:
    table = np.ones((), np.float64)
    for c in counts:
      table = np.multiply.outer(table, c.astype(np.float64))
    rescale = (table / int(divisor_override)).tolist()
    rescale = _freeze(rescale)
  return _AvgPool(k, s, p, ceil_mode, cip, rescale)


def _freeze(v: Any) -> Any:
  return tuple(_freeze(e) for e in v) if isinstance(v, list) else v


_AVG = _checks.ConfigCache(_avg_config)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _avg_jit(x: jax.Array, cfg: _AvgPool) -> jax.Array:
  y = jaxops.average_pool(x, cfg.kernel, strides=cfg.stride, pads=cfg.pad + cfg.pad,
                          ceil_mode=cfg.ceil_mode, count_include_pad=cfg.count_include_pad)
  if cfg.rescale is not None:
    r = np.asarray(cfg.rescale, np.float64)
    r = r.reshape((1,) * (y.ndim - r.ndim) + r.shape)
    dt = _checks.compute_dtype(y.dtype)
    y = (y.astype(dt) * jnp.asarray(r, dt)).astype(y.dtype)
  return y


def _avg_pool(name: str, nd: int, input: ArrayLike, kernel_size: Any, stride: Any,
              padding: Any, ceil_mode: Any, count_include_pad: Any,
              divisor_override: Any) -> jax.Array:
  x = _float_input(name, input)
  static = (name, nd, x.shape, kernel_size, stride, padding, ceil_mode, count_include_pad,
            divisor_override)
  cfg = _AVG(_checks.cache_key(*static), *static)
  return _avg_jit(x, cfg)


def avg_pool1d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> jax.Array:
  """``torch.nn.functional.avg_pool1d`` on ``(N, C, L)`` or ``(C, L)``.

  Output length ``floor((L + 2 p - k) / s) + 1`` (``ceil`` with ``ceil_mode``, less one if the
  last window would start in the right padding). Window ``o`` covers ``[o s - p, o s - p + k)``;
  its sum is divided by the number of its positions in ``[-p, L + p)``
  (``count_include_pad=True``) or in ``[0, L)``.

  Args:
    input: float16, bfloat16, float32 or float64 array.
    kernel_size: window length (an int or a 1-tuple).
    stride: step; default ``kernel_size``.
    padding: implicit zero padding on both sides, at most ``kernel_size // 2``.
    ceil_mode: round the output length up.
    count_include_pad: count the padding in the divisor.

  Returns:
    The pooled array, of ``input``'s dtype.

  Raises:
    ValueError: sizes below 1, padding over half the kernel, wrong rank, an output length < 1.
    TypeError: non-integer or traced sizes, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.avg_pool1d(jnp.array([[[1.0, 2.0, 3.0, 4.0]]]), 2, padding=1).tolist()
    [[[0.5, 2.5, 2.0]]]
  """
  return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                   count_include_pad, None)


def avg_pool2d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> jax.Array:
  """``torch.nn.functional.avg_pool2d`` on ``(N, C, H, W)`` or ``(C, H, W)``.

  Per axis as ``avg_pool1d``; the divisor is the product of the per-axis counts, or
  ``divisor_override`` when given (the window sum divided by it).

  Args:
    input: float16, bfloat16, float32 or float64 array.
    kernel_size: an int or ``(kH, kW)``.
    stride: an int or ``(sH, sW)``; default ``kernel_size``.
    padding: an int or ``(pH, pW)``, each at most half its kernel.
    ceil_mode: round output lengths up.
    count_include_pad: count the padding in the divisor.
    divisor_override: a non-zero int that replaces the divisor.

  Returns:
    The pooled array, of ``input``'s dtype.

  Raises:
    ValueError: sizes below 1, padding over half the kernel, a zero divisor, wrong rank, an
      output length < 1.
    TypeError: non-integer or traced sizes, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
    >>> F.avg_pool2d(x, 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    >>> F.avg_pool2d(x, 2, divisor_override=1).tolist()
    [[[[10.0, 18.0], [42.0, 50.0]]]]
  """
  return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                   count_include_pad, divisor_override)


def avg_pool3d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> jax.Array:
  """``torch.nn.functional.avg_pool3d`` on ``(N, C, D, H, W)`` or ``(C, D, H, W)``.

  Per axis as ``avg_pool1d``; the divisor is the product of the per-axis counts, or
  ``divisor_override`` when given.

  Args:
    input: float16, bfloat16, float32 or float64 array.
    kernel_size: an int or ``(kD, kH, kW)``.
    stride: an int or ``(sD, sH, sW)``; default ``kernel_size``.
    padding: an int or ``(pD, pH, pW)``, each at most half its kernel.
    ceil_mode: round output lengths up.
    count_include_pad: count the padding in the divisor.
    divisor_override: a non-zero int that replaces the divisor.

  Returns:
    The pooled array, of ``input``'s dtype.

  Raises:
    ValueError: sizes below 1, padding over half the kernel, a zero divisor, wrong rank, an
      output length < 1, an (unpadded) input axis shorter than its kernel.
    TypeError: non-integer or traced sizes, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.avg_pool3d(jnp.ones((1, 1, 2, 2, 2)), 2).tolist()
    [[[[[1.0]]]]]
  """
  return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode,
                   count_include_pad, divisor_override)


# --- max pooling (jaxops.max_pool, jaxops.max_unpool) --------------------------------------------


@dataclasses.dataclass(frozen=True)
class _MaxPool:
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  pad: tuple[int, ...]
  dilation: tuple[int, ...]
  ceil_mode: bool
  indices: bool


def _max_config(name: str, nd: int, shape: tuple[int, ...], kernel_size: Any, stride: Any,
                padding: Any, dilation: Any, ceil_mode: Any, return_indices: Any) -> _MaxPool:
  op = _op(name)
  k = _pool_arg(op, "kernel_size", kernel_size, nd)
  s = k if stride is None else (_pool_arg(op, "stride", stride, nd, allow_empty=True) or k)
  p = _pool_arg(op, "padding", padding, nd)
  d = _pool_arg(op, "dilation", dilation, nd)
  ceil_mode = _aten_bool(op, "ceil_mode", ceil_mode)
  ind = _flag(op, "return_indices", return_indices)
  if any(v <= 0 for v in k):
    raise _checks.value_error(op, "kernel_size", kernel_size, "greater than zero")
  if any(v <= 0 for v in s):
    raise _checks.value_error(op, "stride", stride, "greater than zero")
  if any(v <= 0 for v in d):
    raise _checks.value_error(op, "dilation", dilation, "greater than zero")
  if any(v < 0 for v in p):
    raise _checks.value_error(op, "padding", padding, "non-negative")
  ext = [dv * (kv - 1) + 1 for kv, dv in zip(k, d)]
  if any(pv > kv // 2 for pv, kv in zip(p, k)):  # torch's limit: half the undilated kernel
    raise _checks.value_error(op, "padding", padding,
                              f"at most half of kernel_size {k} (as torch's max_pool{nd}d, "
                              f"whatever the dilation)")
  if len(shape) not in (nd + 1, nd + 2) or any(v == 0 for v in shape[len(shape) - nd - 1:]):
    raise ValueError(f"{op}: Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional "
                     f"0 dim batch size for input; got shape {tuple(shape)}")
  spatial = shape[len(shape) - nd:]
  out = []
  for n, kv, sv, pv, e in zip(spatial, k, s, p, ext):
    o = (n + 2 * pv - e + (sv - 1 if ceil_mode else 0)) // sv + 1
    if ceil_mode and (o - 1) * sv >= n + pv:
      o -= 1
    if o < 1:
      raise ValueError(f"{op}: Given input size {tuple(spatial)}, the calculated output size "
                       f"is too small (kernel_size {k}, stride {s}, padding {p}, dilation {d})")
    out.append(o)
  for axis, (n, o, kv, sv, pv, dv) in enumerate(zip(spatial, out, k, s, p, d)):
    first, last = WindowAxis(n, kv, sv, dv, pv, pv, o).inside(0, n)
    empty = first == last
    if empty.any():  # torch returns -inf with an index outside the input (DEVIATIONS.md)
      raise ValueError(
          f"{op}: with padding {p} and dilation {d}, the window of output position "
          f"{int(np.argmax(empty))} along spatial axis {axis} (kernel_size {k}) covers only "
          f"padding, so its maximum is undefined; allowed: padding and dilation whose every "
          f"window reads an input element")
  return _MaxPool(k, s, p, d, ceil_mode, ind)


_MAX = _checks.ConfigCache(_max_config)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _max_jit(x: jax.Array, cfg: _MaxPool) -> Any:
  # (with indices: each within its plane, torch's)
  return _max_pool_module._max_pool_of(x, cfg.kernel, strides=cfg.stride, pads=cfg.pad + cfg.pad,
                                       dilations=cfg.dilation, auto_pad="NOTSET",
                                       ceil_mode=cfg.ceil_mode, storage_order=0,
                                       return_indices=cfg.indices, pytorch=True)


def _max_pool(name: str, nd: int, input: ArrayLike, kernel_size: Any, stride: Any, padding: Any,
              dilation: Any, ceil_mode: Any, return_indices: Any) -> Any:
  x = _checks.floating_input(_op(name), input, tuple(np.dtype(d) for d in _FLOATS)
                             + _max_pool_module.INTEGERS, arg="input")
  static = (name, nd, x.shape, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
  cfg = _MAX(_checks.cache_key(*static), *static)
  if cfg.indices:
    _check_plane_index(name, math.prod(x.shape[x.ndim - nd:]))
  return _max_jit(x, cfg)


_MAX_DOC = """``torch.nn.functional.max_pool{nd}d`` on ``(N, C, *spatial)`` or ``(C, *spatial)``.

  Per axis: window ``o`` reads ``o * stride - padding + j * dilation`` for ``j < kernel``
  (padding never wins); output length ``floor((n + 2 p - dilation (k - 1) - 1) / s) + 1``
  (``ceil`` with ``ceil_mode``, less one if the last window would start in the right padding;
  a last window that reaches past the padded input is kept, reading its taps inside the input).
  As torch's CPU kernel, the window is scanned in order and a tap is taken when it is greater
  than the running maximum or NaN: ties go to the first maximum in window order, and a window
  holding a NaN gives NaN, indexed at its last NaN (where ``jaxops.max_pool`` keeps ONNX's rule).
  ``return_indices`` gives torch's indices: the flat position of the maximum within its
  ``(N, C)`` plane of the input, for ``max_unpool{nd}d``. The gradient goes to that element.

  Args:
    input: float16, bfloat16, float32, float64 or integer (int8 to int64, uint8) array.
    kernel_size: an int or one per spatial axis.
    stride: an int or one per axis; default ``kernel_size``.
    padding: an int or one per axis, at most half the kernel (torch's limit, with or without
      dilation).
    dilation: an int or one per axis.
    ceil_mode: round output lengths up.
    return_indices: also return the indices (int64; int32 without JAX's 64-bit mode).

  Returns:
    The pooled array (``input``'s dtype), or the pair (pooled, indices).

  Raises:
    ValueError: sizes below 1, padding over half the kernel,
      wrong rank, an output length < 1.
    TypeError: non-integer or traced sizes, an unsupported dtype.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> y, i = F.max_pool{nd}d(jnp.arange(8.0).reshape({shape}), 2, return_indices=True)
    >>> i.ravel().tolist()
    {idx}
  """


def max_pool1d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
  return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode,
                   return_indices)


def max_pool2d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
  return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode,
                   return_indices)


def max_pool3d(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
  return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode,
                   return_indices)


max_pool1d.__doc__ = _MAX_DOC.format(nd=1, shape="1, 1, 8", idx="[1, 3, 5, 7]")
max_pool2d.__doc__ = _MAX_DOC.format(nd=2, shape="1, 2, 4", idx="[5, 7]")
max_pool3d.__doc__ = _MAX_DOC.format(nd=3, shape="1, 2, 2, 2", idx="[7]")


# --- power-average pooling (torch's definition on avg_pool) -------------------------------------


def _lp_pool(name: str, nd: int, input: ArrayLike, norm_type: Any, kernel_size: Any,
             stride: Any, ceil_mode: Any) -> jax.Array:
  op = _op(name)
  x = _float_input(name, input)
  if (isinstance(norm_type, (int, np.integer)) and not isinstance(norm_type, (bool, np.bool_))
      and not -2 ** 63 <= norm_type < 2 ** 64):  # torch converts an int norm_type in C++
    raise _checks.value_error(op, "norm_type", norm_type, "a number; an int in [-2**63, 2**64) "
                              "(torch: int too big to convert)")
  p = _checks.static_float(op, "norm_type", _bool_as_number(norm_type), finite=False)
  # torch's lp_pool multiplies by kernel_size: lp_pool1d takes an int only (a sequence is
  # torch's TypeError; with p = +-inf torch's lp_pool1d is its max_pool1d, which takes one),
  # lp_pool2d/3d unpack it into exactly nd ints (no one-element broadcast).
  if isinstance(kernel_size, (list, tuple)) and nd == 1 and not np.isinf(p):
    raise TypeError(f"{op}: argument `kernel_size` must be an int, as torch's lp_pool1d "
                    f"takes it; got {kernel_size!r}")
  if isinstance(kernel_size, (list, tuple)) and len(kernel_size) != nd:
    raise _checks.value_error(op, "kernel_size", kernel_size,
                              f"a single int, or a tuple of {nd} ints (torch's lp_pool{nd}d "
                              f"does not broadcast one)")
  k = _pool_arg(op, "kernel_size", kernel_size, nd)
  if np.isinf(p):  # torch: the largest |x| of each window (+inf), or the smallest (-inf)
    mx = {1: max_pool1d, 2: max_pool2d, 3: max_pool3d}[nd]
    sign = 1 if p > 0 else -1
    a = x * jnp.sign(x)  # |x| with torch's derivative sign(x): 0 at 0 (jnp.abs gives 1)
    return sign * mx(sign * a, kernel_size, stride, 0, 1, ceil_mode)
  # float16 and bfloat16 in float32, rounded once (each step of the chain rounded eagerly, and
  # jit, which fuses the steps, did not: their results differed); the average pool's argument
  # errors name lp_pool{nd}d
  v = x.astype(_checks.compute_dtype(x.dtype))
  a = _avg_pool(name, nd, _pow_scalar(v, p), kernel_size, stride, 0, ceil_mode, True, None)
  if p == 0:  # torch's 1 / norm_type, after its avg_pool: its ZeroDivisionError, also a ValueError
    raise _ZeroNormType(f"{op}: argument `norm_type` must be nonzero (torch divides by it: 1 / "
                        f"norm_type); got {norm_type!r}")
  # (NaN: x ** nan is NaN but 1 ** nan is 1, as in torch's pow)
  return _pow_scalar(jnp.sign(a) * _relu(jnp.abs(a)) * math.prod(k), 1.0 / p).astype(x.dtype)


@jax.custom_jvp
def _relu(v: jax.Array) -> jax.Array:
  """``torch.relu``, whose derivative is torch's: the tangent passes wherever ``v <= 0`` is
  false, so also at NaN (``jax.nn.relu``'s stops there, which gave lp_pool's window of a NaN
  output a zero gradient in its other elements where torch's is NaN)."""
  return jnp.maximum(v, jnp.zeros((), v.dtype))


@_relu.defjvp
def _relu_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]
              ) -> tuple[jax.Array, jax.Array]:
  (v,), (t,) = primals, tangents
  return _relu(v), jnp.where(v <= 0, jnp.zeros((), t.dtype), t)


class _ZeroNormType(ValueError, ZeroDivisionError):
  """``lp_pool{1,2,3}d``'s ``norm_type=0``: torch's ZeroDivisionError, and the ValueError that
  names the argument."""


def _pow_scalar(v: jax.Array, e: float) -> jax.Array:
  """``torch.pow(v, e)`` for a Python number ``e``, with torch's special cases (a copy for 1,
  products for 2 and 3, a square root for 0.5): the same values, and no transcendental
  ``pow`` (nor one in the derivative) where torch has none."""
  if e == 1:
    return v
  if e in (2, 3):
    return lax.integer_pow(v, int(e))
  if e == 0.5:
    return jnp.sqrt(v)
  return v ** jnp.asarray(e, v.dtype)


_LP_DOC = """``torch.nn.functional.lp_pool{nd}d``: ``(sum over the window of x ** p) ** (1 / p)``.

  Computed as torch defines it: ``a = avg_pool{nd}d(input ** norm_type, kernel_size, stride,
  0, ceil_mode)``, then ``(sign(a) * relu(|a|) * prod(kernel_size)) ** (1 / norm_type)``
  (so a ``ceil_mode`` window cut by the input's end is scaled by the full kernel size, as in
  torch).

  Args:
    input: float16, bfloat16, float32 or float64 array, ``(N, C, *spatial)`` or unbatched.
    norm_type: ``p`` (a float; negative window sums give NaN for fractional powers, as torch;
      ``inf`` gives each window's largest ``|x|`` and ``-inf`` its smallest, NaN takes torch's
      pow (NaN, but ``1 ** nan`` is 1), and a bool is the number 1 or 0, as torch).
    kernel_size: {kernel_arg}
    stride: an int or one per axis; default ``kernel_size``.
    ceil_mode: round output lengths up.

  Returns:
    The pooled array, of ``input``'s dtype.

  Raises:
    ValueError: as ``avg_pool{nd}d``{seq_value}; ``norm_type`` 0 (also a ZeroDivisionError,
      as torch raises).
    TypeError: a non-number ``norm_type``, non-integer or traced sizes, a non-float input{seq}.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.lp_pool{nd}d(jnp.full({shape}, 2.0), 2, 2).ravel().tolist()
    {out}
  """


def lp_pool1d(input: ArrayLike, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> jax.Array:
  return _lp_pool("lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: ArrayLike, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> jax.Array:
  return _lp_pool("lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input: ArrayLike, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> jax.Array:
  return _lp_pool("lp_pool3d", 3, input, norm_type, kernel_size, stride, ceil_mode)


_LP_ONE = dict(kernel_arg="an int (torch's lp_pool1d takes no sequence).", seq_value="",
               seq=", a sequence ``kernel_size``")
_LP_ND = dict(kernel_arg="an int or one per spatial axis (a sequence of exactly that length).",
              seq_value="; a ``kernel_size`` sequence of another length", seq="")
lp_pool1d.__doc__ = _LP_DOC.format(nd=1, shape="(1, 1, 2)", out="[2.8284270763397217]", **_LP_ONE)
lp_pool2d.__doc__ = _LP_DOC.format(nd=2, shape="(1, 2, 2)", out="[4.0]", **_LP_ND)
lp_pool3d.__doc__ = _LP_DOC.format(nd=3, shape="(1, 2, 2, 2)", out="[5.656854152679443]",
                                   **_LP_ND)


# --- grid_sample, affine_grid (jaxops.grid_sample, jaxops.affine_grid) and roi_align ------------

_GS_MODES = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_GS_PADDINGS = ("zeros", "border", "reflection")


@dataclasses.dataclass(frozen=True)
class _GridSample:
  mode: str            # jaxops.grid_sample's (ONNX) spelling: "linear", "nearest", "cubic"
  padding_mode: str
  align_corners: bool


def _same_given_dtype(op: str, input: Any, name: str, others: Sequence[Any]) -> None:
  """torch's rule that ``others`` (the grid, the boxes) have ``input``'s float dtype, on the
  dtypes as given: with JAX's 64-bit types off a float64 NumPy array becomes float32, and a
  float64 grid beside a float32 input passed the check on the converted arrays (found by an
  error-handling audit)."""
  a = getattr(input, "dtype", None)
  if not isinstance(a, np.dtype) or not jnp.issubdtype(a, jnp.floating):
    return
  for other in others:
    b = getattr(other, "dtype", None)
    if isinstance(b, np.dtype) and jnp.issubdtype(b, jnp.floating) and b != a:
      raise _checks.type_error(op, name, f"dtype {b.name}", f"of input's dtype {a.name} (as "
                               f"torch)")


def _grid_sample_config(shape: tuple[int, ...], dtype: Any, grid_shape: tuple[int, ...],
                        grid_dtype: Any, mode: Any, padding_mode: Any,
                        align_corners: Any) -> _GridSample:
  op = _op("grid_sample")
  if not isinstance(mode, str) or mode not in _GS_MODES:
    raise _checks.value_error(op, "mode", mode, "one of 'bilinear', 'nearest', 'bicubic'")
  if not isinstance(padding_mode, str) or padding_mode not in _GS_PADDINGS:
    raise _checks.value_error(op, "padding_mode", padding_mode,
                              "one of 'zeros', 'border', 'reflection'")
  align = _align_corners(op, align_corners)
  floats = tuple(np.dtype(d) for d in _FLOATS)
  if np.dtype(dtype) not in floats:
    raise _checks.type_error(op, "input", f"dtype {np.dtype(dtype).name}",
                             "floating (float16, bfloat16, float32 or float64)")
  if np.dtype(grid_dtype) != np.dtype(dtype):
    raise _checks.type_error(op, "grid", f"dtype {np.dtype(grid_dtype).name}",
                             f"of input's dtype {np.dtype(dtype).name} (as torch)")
  rank = len(shape)
  if rank not in (4, 5) or len(grid_shape) != rank:
    raise _checks.value_error(op, "input", f"shape {tuple(shape)} with grid of shape "
                              f"{tuple(grid_shape)}",
                              "4-D (N, C, H, W) with a 4-D grid (N, H_out, W_out, 2), or 5-D "
                              "(N, C, D, H, W) with a 5-D grid (N, D_out, H_out, W_out, 3)")
  if grid_shape[0] != shape[0]:
    raise _checks.value_error(op, "grid", f"shape {tuple(grid_shape)}",
                              f"of input's batch size {shape[0]} (input shape {tuple(shape)})")
  if grid_shape[-1] != rank - 2:
    raise _checks.value_error(op, "grid", f"shape {tuple(grid_shape)}",
                              f"of size {rank - 2} in its last dimension for a {rank}-D input")
  if any(d == 0 for d in shape[2:]):
    raise _checks.value_error(op, "input", f"shape {tuple(shape)}",
                              "of non-empty spatial dimensions")
  if mode == "bicubic" and rank == 5:
    raise _checks.value_error(op, "mode", mode, "'bilinear' or 'nearest' for a 5-D input "
                              "(bicubic interpolation only supports 4-D input)")
  return _GridSample(_GS_MODES[mode], padding_mode, align)


_GRID_SAMPLE = _checks.ConfigCache(_grid_sample_config)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _grid_sample_jit(x: jax.Array, grid: jax.Array, cfg: _GridSample) -> jax.Array:
  # nearest: ATen's 2-D kernel is vectorized and rounds (g + 1) * L - 1 once (a fused
  # multiply-add), its 3-D kernel is scalar and rounds the product, then the difference
  return _grid_sample_module.sample(x, grid, cfg.mode, cfg.padding_mode, cfg.align_corners,
                                    fused=x.ndim == 4)


def grid_sample(input: ArrayLike, grid: ArrayLike, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool | None = None) -> jax.Array:
  """``torch.nn.functional.grid_sample``: samples ``input`` at the normalised positions of
  ``grid``.

  ``input`` is ``(N, C, H, W)`` with ``grid`` ``(N, H_out, W_out, 2)``, or ``(N, C, D, H, W)``
  with ``grid`` ``(N, D_out, H_out, W_out, 3)``; ``grid[..., 0]`` is x (width), then y, then z.
  A normalised ``g`` on an axis of length ``L`` is the pixel coordinate ``(g + 1) / 2 * (L - 1)``
  (``align_corners=True``) or ``((g + 1) * L - 1) / 2`` (``False``, the default; torch warns
  when it is left as None, this does not). "nearest" reads pixel ``round(u)``, halves to even
  (C's nearbyint, as ATen); "bilinear" (trilinear on 5-D inputs) and "bicubic" (Keys,
  ``a = -0.75``; 4-D only) interpolate. ``padding_mode`` "zeros" reads 0 outside; "border"
  clips the coordinate (bicubic: each of the 4x4 tap indices) into the input; "reflection"
  reflects it about the borders (``0`` and ``L - 1`` with align_corners, ``-0.5`` and
  ``L - 0.5`` without) and then clips it (bicubic: each tap index). This is
  ``jaxops.grid_sample`` with ONNX's spellings "linear"/"cubic", which computes what ATen
  computes.

  Args:
    input: float16, bfloat16, float32 or float64 array, 4-D or 5-D.
    grid: array of ``input``'s dtype and rank (as torch); may be traced (differentiable).
    mode: "bilinear" (default), "nearest" or "bicubic".
    padding_mode: "zeros" (default), "border" or "reflection".
    align_corners: None (means False) or a bool.

  Returns:
    ``(N, C, H_out, W_out)`` (or ``(N, C, D_out, H_out, W_out)``), of ``input``'s dtype.

  Raises:
    ValueError: an unknown mode or padding mode, bicubic on a 5-D input, shapes that do not
      match (rank, batch size, the grid's last dimension), an empty spatial dimension.
    TypeError: a non-float input, a grid of another dtype, a traced ``align_corners``.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> x = jnp.arange(4.0).reshape(1, 1, 2, 2)
    >>> grid = jnp.array([[[[-1.0, -1.0], [0.0, 0.0], [0.5, 1.0]]]])
    >>> F.grid_sample(x, grid, align_corners=True).tolist()
    [[[[0.0, 1.5, 2.75]]]]
    >>> F.grid_sample(x, grid, mode="nearest", padding_mode="border").tolist()
    [[[[0.0, 0.0, 3.0]]]]
  """
  op = _op("grid_sample")
  _same_given_dtype(op, input, "grid", [grid])
  x = _checks.as_array(input, op, "input")
  _checks.concrete_shape(op, "input", x)
  g = _checks.as_array(grid, op, "grid")
  static = (x.shape, x.dtype, g.shape, g.dtype, mode, padding_mode, align_corners)
  cfg = _GRID_SAMPLE(_checks.cache_key(*static), *static)
  return _grid_sample_jit(x, g, cfg)


def _affine_grid_config(theta_shape: tuple[int, ...], theta_dtype: Any, size: Any,
                        align_corners: Any) -> tuple[tuple[int, ...], bool]:
  op = _op("affine_grid")
  align = _align_corners(op, align_corners)
  if not jnp.issubdtype(theta_dtype, jnp.floating):  # torch: ValueError
    raise _checks.value_error(op, "theta", f"dtype {np.dtype(theta_dtype).name}",
                              "floating (float16, bfloat16, float32 or float64)")
  if isinstance(size, (int, np.integer)) or np.ndim(_checks.concrete(op, "size", size)) != 1:
    raise _checks.type_error(op, "size", size, "a sequence of 4 or 5 ints")
  _no_floats(op, "size", size, "a sequence of 4 or 5 ints")
  size_t = _checks.int_tuple(op, "size", size)
  if len(size_t) not in (4, 5):
    raise NotImplementedError(f"{op}: argument `size` must have 4 or 5 entries (affine_grid "
                              f"only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                              f"respectively); got {list(size_t)}")
  r = len(size_t) - 2
  if len(theta_shape) != 3 or theta_shape[1:] != (r, r + 1):
    raise _checks.value_error(op, "theta", f"shape {tuple(theta_shape)}",
                              f"a batch of {r}-D affine matrices of shape Nx{r}x{r + 1} for "
                              f"size {list(size_t)}")
  if not (align and min(size_t[2:]) == 1) and min(size_t) <= 0:
    raise _checks.value_error(op, "size", list(size_t), "non-zero, positive sizes")
  if min(size_t) < 0:
    raise _checks.value_error(op, "size", list(size_t), "non-negative sizes")
  if theta_shape[0] != size_t[0]:
    raise _checks.value_error(op, "theta", f"shape {tuple(theta_shape)}",
                              f"of batch size {size_t[0]} (size[0])")
  return size_t, align


_AFFINE_GRID = _checks.ConfigCache(_affine_grid_config)


@functools.partial(jax.jit, static_argnames=("size", "align"))
def _affine_grid_jit(theta: jax.Array, size: tuple[int, ...], align: bool) -> jax.Array:
  # on torch's base positions (its linspace, rounded as ATen rounds it), so that a grid of a
  # pure scaling is torch's to the bit and nearest sampling reads torch's pixels at half-pixels
  return _grid_sample_module._affine_grid_jit(theta, size[2:], align, True)


def affine_grid(theta: ArrayLike, size: Any, align_corners: bool | None = None) -> jax.Array:
  """``torch.nn.functional.affine_grid``: the ``grid_sample`` grid of a batch of affine maps.

  ``theta`` ``(N, 2, 3)`` with ``size = (N, C, H, W)`` gives ``(N, H, W, 2)``;
  ``(N, 3, 4)`` with ``(N, C, D, H, W)`` gives ``(N, D, H, W, 3)``. Each entry is
  ``theta[n] @ (x, y[, z], 1)`` at evenly spaced base positions in ``[-1, 1]``:
  ``-1 + 2 i / (L - 1)`` with ``align_corners=True`` (0 when ``L = 1``),
  ``-1 + (2 i + 1) / L`` otherwise (the default; None means False, without torch's warning).
  This is ``jaxops.affine_grid`` on torch's base positions, rounded as torch rounds them
  (``linspace(-1, 1, L)``, times ``(L - 1) / L`` without align_corners), which differ from the
  exact positions by an ulp here and there.

  Args:
    theta: floating array; may be traced (differentiable).
    size: the target size (4 or 5 ints; static).
    align_corners: None (means False) or a bool.

  Returns:
    The grid, of ``theta``'s dtype.

  Raises:
    ValueError: a non-float theta, a theta shape that does not match ``size``, a size entry
      <= 0 (as torch, allowed with align_corners=True when a spatial size is 1).
    NotImplementedError: a size of another length.
    TypeError: a traced or non-integer size.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> theta = jnp.array([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.5]]])
    >>> F.affine_grid(theta, (1, 1, 2, 2), align_corners=False)[0, :, 0].tolist()
    [[-0.5, -0.5], [-0.5, 1.5]]
  """
  op = _op("affine_grid")
  t = _checks.as_array(theta, op, "theta")
  static = (t.shape, t.dtype, size, align_corners)
  size_t, align = _AFFINE_GRID(_checks.cache_key(*static), *static)
  _checks.check_output_size(op, (size_t[0],) + size_t[2:] + (len(size_t) - 2,), t.dtype)
  return _affine_grid_jit(t, size_t, align)


@dataclasses.dataclass(frozen=True)
class _RoiAlign:
  out_h: int
  out_w: int
  spatial_scale: float
  sampling_ratio: int                    # jaxops.roi_align's: 0 is adaptive
  aligned: bool
  lengths: tuple[int, ...] | None        # boxes as a list: boxes per image; None: a (K, 5) array


def _roi_align_config(shape: tuple[int, ...], dtype: Any, boxes: tuple, output_size: Any,
                      spatial_scale: Any, sampling_ratio: Any, aligned: Any) -> _RoiAlign:
  op = _op("roi_align")
  floats = tuple(np.dtype(d) for d in _FLOATS)
  if np.dtype(dtype) not in floats:
    raise _checks.type_error(op, "input", f"dtype {np.dtype(dtype).name}",
                             "floating (float16, bfloat16, float32 or float64)")
  if len(shape) != 4:
    raise _checks.value_error(op, "input", f"shape {tuple(shape)}", "4-D: (N, C, H, W)")
  lengths: tuple[int, ...] | None
  if boxes[0] == "list":  # one (L, 4) array per image
    for s, _ in boxes[1]:
      if len(s) != 2 or s[1] != 4:
        raise _checks.value_error(op, "boxes", f"a list with an entry of shape {s}",
                                  "a list of (L, 4) arrays (one per image)")
    lengths = tuple(s[0] for s, _ in boxes[1])
    past = [i for i, n in enumerate(lengths) if n and i >= shape[0]]
    if past:  # torchvision would read past the last image
      raise _checks.value_error(op, "boxes", f"a list of {len(lengths)} arrays with boxes in "
                                f"entry {past[0]}", f"at most one array of boxes per image of "
                                f"input (N = {shape[0]})")
    kinds = {np.dtype(d) for _, d in boxes[1]}
  else:
    _, s, d = boxes
    if len(s) != 2 or s[1] != 5:
      raise _checks.value_error(op, "boxes", f"an array of shape {s}",
                                "a (K, 5) array (batch index, x1, y1, x2, y2) or a list of "
                                "(L, 4) arrays")
    lengths = None
    kinds = {np.dtype(d)}
  if kinds and kinds != {np.dtype(dtype)}:
    raise _checks.type_error(op, "boxes", f"dtype {', '.join(sorted(k.name for k in kinds))}",
                             f"of input's dtype {np.dtype(dtype).name} (as torchvision)")
  _no_floats(op, "output_size", output_size, "an int or (height, width)")
  if isinstance(output_size, (list, tuple)):
    if len(output_size) != 2:
      raise _checks.value_error(op, "output_size", output_size, "an int or (height, width)")
    out = _checks.int_tuple(op, "output_size", output_size)
  else:
    out = _checks.int_tuple(op, "output_size", output_size, length=2)
  if min(out) < 0:
    raise _checks.value_error(op, "output_size", output_size, "non-negative sizes")
  scale = _checks.static_float(op, "spatial_scale", spatial_scale)
  if _checks.is_traced(sampling_ratio) or isinstance(sampling_ratio, (bool, np.bool_)) or (
      not isinstance(sampling_ratio, (int, np.integer))):
    raise _checks.type_error(op, "sampling_ratio", sampling_ratio, "an int")
  align = _flag(op, "aligned", aligned, numbers_only=True)
  ratio = max(_long(op, "sampling_ratio", int(sampling_ratio), sampling_ratio), 0)
  k = sum(lengths) if lengths is not None else boxes[1][0]
  # torchvision's kernel returns an empty output before it reads the input
  if (shape[0] == 0 or shape[2] == 0 or shape[3] == 0) and k * shape[1] * out[0] * out[1]:
    raise _checks.value_error(op, "input", f"shape {tuple(shape)}", "non-empty N, H and W "
                              "(unless the output is empty)")
  if k * shape[1] * out[0] * out[1]:  # jaxops.roi_align's memory checks, in this op's names
    _roi_align_op.check_memory(op, k, shape, dtype, out[0], out[1], ratio, None,
                               {"output_height": "output_size", "output_width": "output_size"})
  return _RoiAlign(out[0], out[1], scale, ratio, align, lengths)


_ROI_ALIGN = _checks.ConfigCache(_roi_align_config)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _roi_align_jit(x: jax.Array, boxes: Any, cfg: _RoiAlign) -> jax.Array:
  if cfg.lengths is None:
    rois = boxes[:, 1:]
    index = boxes[:, 0].astype(jnp.int32)  # C's (int) conversion: toward zero
  else:
    rois = jnp.concatenate(boxes, axis=0) if boxes else jnp.zeros((0, 4), x.dtype)
    index = jnp.asarray(np.repeat(np.arange(len(cfg.lengths)), cfg.lengths), jnp.int32)
  k = rois.shape[0]
  if k * x.shape[1] * cfg.out_h * cfg.out_w == 0:
    return jnp.zeros((k, x.shape[1], cfg.out_h, cfg.out_w), x.dtype)
  return jaxops.roi_align(
      x, rois, index, mode="avg", output_height=cfg.out_h, output_width=cfg.out_w,
      sampling_ratio=cfg.sampling_ratio, spatial_scale=cfg.spatial_scale,
      coordinate_transformation_mode="half_pixel" if cfg.aligned else "output_half_pixel")


def roi_align(input: ArrayLike, boxes: Any, output_size: Any, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> jax.Array:
  """``torchvision.ops.roi_align``: average-pools each box into an ``output_size`` grid.

  On each axis (y shown) a box is ``start = y1 * spatial_scale - offset``, ``size = y2 *
  spatial_scale - offset - start`` with ``offset = 0.5`` when ``aligned`` (ONNX RoiAlign's
  half_pixel) and 0 otherwise (output_half_pixel; the size is then at least 1, as torchvision
  forces malformed boxes to 1 x 1). Each of the ``output_size`` bins averages ``g_h * g_w``
  bilinear samples at ``start + (ph + (i + 0.5) / g) * size / output_h``; ``g = sampling_ratio``
  when it is > 0, else ``ceil(size / output_h)`` (adaptive, exact under jit with traced boxes);
  a bin without samples gives 0. A sample beyond one pixel outside the map reads 0; others
  clamp into it. This is ``jaxops.roi_align(mode="avg")``, torchvision's CPU kernel's values.

  Args:
    input: ``(N, C, H, W)``; float16, bfloat16, float32 or float64.
    boxes: a ``(K, 5)`` array of ``(batch index, x1, y1, x2, y2)`` rows (the index is truncated
      to an int, as torchvision does), or a list of ``(L_i, 4)`` arrays, the boxes of image
      ``i``; of ``input``'s dtype (as torchvision). The coordinates may be traced
      (differentiable).
    output_size: an int or ``(height, width)`` (static).
    spatial_scale: factor from box coordinates to ``input`` coordinates.
    sampling_ratio: samples per bin and axis; <= 0 (default -1) is adaptive.
    aligned: shift the box by -0.5 pixel (True) or use the legacy coordinates (False).

  Returns:
    ``(K, C, output_height, output_width)``, of ``input``'s dtype.

  Raises:
    ValueError: an input that is not 4-D, or empty where the output is not, boxes not
      ``(K, 5)`` (or a list entry not ``(L, 4)``), a bad ``output_size``.
    TypeError: a non-float input, boxes of another dtype, non-integer or traced static
      arguments.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
    >>> F.roi_align(x, jnp.array([[0.0, 0.0, 0.0, 4.0, 4.0]]), 2, aligned=True).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    >>> F.roi_align(x, [jnp.array([[0.0, 0.0, 2.0, 2.0]])], (1, 1), sampling_ratio=2).tolist()
    [[[[5.0]]]]
  """
  op = _op("roi_align")
  _same_given_dtype(op, input, "boxes", boxes if isinstance(boxes, (list, tuple)) else [boxes])
  x = _checks.as_array(input, op, "input")
  _checks.concrete_shape(op, "input", x)
  if isinstance(boxes, (list, tuple)):
    b: Any = [_checks.as_array(v, op, "boxes") for v in boxes]
    described: Any = ("list", tuple((tuple(v.shape), v.dtype) for v in b))
  else:
    b = _checks.as_array(boxes, op, "boxes")
    described = ("array", tuple(b.shape), b.dtype)
  static = (x.shape, x.dtype, described, output_size, spatial_scale, sampling_ratio, aligned)
  key = _checks.cache_key(x.shape, x.dtype, output_size, spatial_scale, sampling_ratio, aligned)
  cfg = _ROI_ALIGN(None if key is None else (key, described), *static)
  return _roi_align_jit(x, b, cfg)


# --- max unpooling and adaptive max pooling ----------------------------------------------------
# torch's per-(N, C)-plane indices with jaxops.max_unpool's rule for repeats; adaptive max pooling
# on static window tables with torch's scan rule for ties and NaN.

import itertools  # noqa: E402  (imports kept inside this self-contained section)
import operator  # noqa: E402

from jaxops import _max_pool as _max_pool_op  # noqa: E402
from jaxops._max_pool import (_last_writers, _take_last, _Unpool,  # noqa: E402
                              _unpool_in_window, _unpool_kept, _unpool_local, _unpool_overlaps)


def _unpool_config(name: str, nd: int, shape: tuple[int, ...], i_shape: tuple[int, ...],
                   kernel_size: Any, stride: Any, padding: Any, output_size: Any) -> _Unpool:
  op = _op(name)
  if len(shape) not in (nd + 1, nd + 2):
    raise ValueError(f"{op}: Input to max_unpooling{nd}d should be a {nd + 1}d or {nd + 2}d "
                     f"Tensor, but got a tensor with {len(shape)} dimensions")
  if tuple(i_shape) != tuple(shape):
    raise ValueError(f"{op}: argument `indices` must have the shape of input {tuple(shape)}; "
                     f"got shape {tuple(i_shape)}")
  for d in range(len(shape) - nd - 1, len(shape)):
    if shape[d] == 0:
      raise ValueError(f"{op}: Expected input to have non-zero size for non-batch dimensions, "
                       f"but got {list(shape)} with dimension {d} being empty")
  k = _pool_arg(op, "kernel_size", kernel_size, nd, broadcast=False)
  s = k if stride is None else _pool_arg(op, "stride", stride, nd, broadcast=False)
  p = _pool_arg(op, "padding", padding, nd, broadcast=False)
  if nd == 3 and any(v <= 0 for v in s):  # torch checks strides of the 3-D kernel only
    raise _checks.value_error(op, "stride", stride, "greater than zero")
  spatial = shape[len(shape) - nd:]
  default = [(n - 1) * sv + kv - 2 * pv for n, kv, sv, pv in zip(spatial, k, s, p)]
  if output_size is None:
    out = default
  else:
    if _checks.is_traced(output_size):
      _checks.concrete(op, "output_size", output_size)
    try:
      sizes = list(output_size)
    except TypeError:
      raise _checks.type_error(op, "output_size", output_size,
                               f"a sequence of {nd} or {nd + 2} ints") from None
    _no_floats(op, "output_size", sizes, f"a sequence of {nd} or {nd + 2} ints")
    if len(sizes) == nd + 2:
      sizes = sizes[2:]
    if len(sizes) != nd:
      raise _checks.value_error(op, "output_size", output_size,
                                f"a sequence of {nd} or {nd + 2} ints")
    out = list(_checks.int_tuple(op, "output_size", sizes))
    for d, (o, dv, sv) in enumerate(zip(out, default, s)):
      if not dv - sv < o < dv + sv:
        raise _checks.value_error(op, "output_size", output_size,
                                  f"between {dv - sv} and {dv + sv} (exclusive) in dim {d}")
  for d, o in enumerate(out):
    if o < 0:
      raise _checks.value_error(op, "output_size", output_size if output_size is not None
                                else tuple(out),
                                f"non-negative spatial sizes (kernel_size {k}, stride {s}, "
                                f"padding {p} give {tuple(out)})")
  return _Unpool(tuple(shape[:len(shape) - nd]) + tuple(int(o) for o in out), nd, k, s, p)


_UNPOOL = _checks.ConfigCache(_unpool_config)


@functools.partial(jax.jit, static_argnames=("plane",))
def _bad_index(indices: jax.Array, plane: int) -> jax.Array:
  return _checks.any_true((indices < 0) | (indices >= plane))


def _unpool_flat(indices: jax.Array, cfg: _Unpool) -> tuple[jax.Array, int]:
  """Torch's per-plane indices as flat indices of the whole output, or the spare slot ``size``
  where an index lies outside its plane; and ``size``."""
  out = cfg.out
  planes = math.prod(out[:len(out) - cfg.nd])
  plane = math.prod(out[len(out) - cfg.nd:])
  size = planes * plane
  dtype = _max_pool_op._index_dtype()
  i = indices.astype(dtype).reshape(planes, -1)
  base = jnp.arange(planes, dtype=dtype).reshape(planes, 1) * np.array(plane, dtype)
  return jnp.where((i >= 0) & (i < plane), i + base, np.array(size, dtype)).reshape(-1), size


def _unpool_scatter(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """Any indices: a scatter of the last writer of each position."""
  flat, size = _unpool_flat(indices, cfg)
  return _take_last(x, _last_writers(flat, size)[0][:size]).reshape(cfg.out)


def _unpool_is_local(indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """Does every index lie in its own window (what max_pool's indices of non-overlapping
  windows always do)? Then no two elements name one position and no scatter is needed."""
  return _checks.all_true(_unpool_in_window(indices, cfg, indices.shape[indices.ndim - cfg.nd:]))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _unpool_windows(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  """A select into the windows (or where they overlap, a pull of each position's candidates)
  when every index lies in its own, else the scatter (a check on the values)."""
  return lax.cond(_unpool_is_local(indices, cfg), lambda v, i: _unpool_local(v, i, cfg),
                  lambda v, i: _unpool_scatter(v, i, cfg), x, indices)


@_unpool_windows.defjvp
def _unpool_windows_jvp(cfg: _Unpool, primals: tuple[Any, ...],
                        tangents: tuple[Any, ...]) -> tuple[Any, Any]:
  # The same linear map on the tangent, as a scatter-add at each kept element's position: its
  # transpose (the backward pass) is one gather, as jaxops.max_unpool's, where a reverse pass
  # through the cond of values runs several times slower.
  x, indices = primals
  size = math.prod(cfg.out)

  def rest(i: jax.Array) -> jax.Array:
    f = _unpool_flat(i, cfg)[0]
    return jnp.where(_last_writers(f, size)[1], f, size)

  def local(i: jax.Array) -> jax.Array:
    f = _unpool_flat(i, cfg)[0]
    if not _unpool_overlaps(cfg):
      return f
    # in the input's shape, reshaped after: as one flat loop, its index arithmetic per shifted
    # compare of _unpool_kept took 3.5 times as long as the flags alone
    return jnp.where(_unpool_kept(i, cfg), f.reshape(i.shape), size).reshape(-1)

  # In own windows of a pooling whose windows do not overlap, no two elements share a
  # position: all in-plane ones are kept; where they overlap, those no later element of a
  # covering window overwrites. The targets are computed inside the branches (computed before
  # the conditional and passed through it, they were written and copied out: the backward pass
  # 1.6 times the operator's).
  target = (lax.cond(_unpool_is_local(indices, cfg), local, rest, indices)
            if _max_pool_op.unpool_keeps_by_compares(cfg) else rest(indices))
  return _unpool_windows(x, indices, cfg), _max_pool_op.scatter_add(tangents[0], target, cfg.out)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _unpool_jit(x: jax.Array, indices: jax.Array, cfg: _Unpool) -> jax.Array:
  if math.prod(cfg.out) == 0:
    return jnp.zeros(cfg.out, x.dtype)
  # torch's arguments allow windows that are none (kernel_size or stride 0 or below)
  if (not all(k >= 1 and s >= 1 for k, s in zip(cfg.kernel, cfg.stride)) or
          not _max_pool_op.unpool_windowed(cfg)):
    return _unpool_scatter(x, indices, cfg)
  return _unpool_windows(x, indices, cfg)


def _max_unpool_nd(name: str, nd: int, input: ArrayLike, indices: ArrayLike, kernel_size: Any,
                   stride: Any, padding: Any, output_size: Any) -> jax.Array:
  op = _op(name)
  x = _float_input(name, input)
  i = _checks.index_array(indices, op, "indices")
  if not jnp.issubdtype(i.dtype, jnp.integer):
    raise TypeError(f"{op}: argument `indices` must have an integer dtype (torch's int64); "
                    f"got dtype {i.dtype}")
  static = (name, nd, x.shape, i.shape, kernel_size, stride, padding, output_size)
  cfg = _UNPOOL(_checks.cache_key(*static), *static)
  plane = math.prod(cfg.out[len(cfg.out) - nd:])
  _checks.check_output_size(op, cfg.out, x.dtype)
  _check_plane_index(name, plane, what="an output")
  # a concrete array closed over by the caller's jit still gives a traced check there
  bad_index = None if _checks.is_traced(i) or not math.prod(cfg.out) else _bad_index(i, plane)
  if bad_index is not None and not _checks.is_traced(bad_index) and bool(bad_index):
    # the caller's values (a 64-bit NumPy array without x64 was clipped to int32 for JAX)
    flat = np.asarray(indices if isinstance(indices, (np.ndarray, np.generic)) else i).reshape(-1)
    bad = int(flat[(flat < 0) | (flat >= plane)][0])
    raise ValueError(f"{op}: argument `indices` must hold indices in [0, {plane}), the size "
                     f"of an output plane {cfg.out[len(cfg.out) - nd:]}; got {bad} (torch: "
                     f"Found an invalid max index)")
  return _max_pool_op.unpool_replicated(_unpool_jit, x, i, nd, cfg)


_UNPOOL_DOC = """``torch.nn.functional.max_unpool{nd}d``: the partial inverse of ``max_pool{nd}d``.

  Each element of ``input`` goes to the position ``indices`` names within its ``(N, C)`` plane
  of the output (torch's per-plane flat index, as ``max_pool{nd}d(..., return_indices=True)``
  returns it); the rest is zero. The output's spatial size per axis is ``output_size`` or the
  default ``(n - 1) * stride - 2 * padding + kernel_size``; the indices are read in the output's
  plane whichever it is. Where two elements of a plane name the same position, the later one
  (row-major in ``input``) is kept: torch's CPU result (with one thread; see
  docs/DEVIATIONS.md, jaxops.torch 6). Linear in ``input``; the gradient gathers the cotangent
  at the kept positions (zero for an element overwritten by a later one).

  Out-of-range indices: torch raises, and so does this (ValueError) when ``indices`` is
  concrete; under ``jax.jit``/``vmap``, where it cannot be checked, such elements are dropped.

  Args:
    input: ``(N, C, *spatial)`` or ``(C, *spatial)``; float16, bfloat16, float32 or float64.
    indices: integer array of ``input``'s shape (int64 in torch; any integer dtype here).
    kernel_size: an int or one per spatial axis.
    stride: an int or one per axis; default ``kernel_size``.
    padding: an int or one per axis.
    output_size: the spatial output size, alone or after two leading entries (which are
      ignored, as torch ignores them); each strictly between ``default - stride`` and
      ``default + stride``.

  Returns:
    ``(N, C, *output_size)`` (or ``(C, *output_size)``), of ``input``'s dtype.

  Raises:
    ValueError: wrong rank, mismatched ``indices``, an empty non-batch axis, an
      ``output_size`` of the wrong length or out of range, a negative output size, an index
      outside its output plane (concrete indices).
    TypeError: non-integer or traced sizes, a non-float input, non-integer indices.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> y, i = F.max_pool{nd}d(jnp.arange(8.0).reshape({shape}), 2, return_indices=True)
    >>> F.max_unpool{nd}d(y, i, 2).ravel().tolist()
    {out}
  """


def max_unpool1d(input: ArrayLike, indices: ArrayLike, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> jax.Array:
  return _max_unpool_nd("max_unpool1d", 1, input, indices, kernel_size, stride, padding,
                        output_size)


def max_unpool2d(input: ArrayLike, indices: ArrayLike, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> jax.Array:
  return _max_unpool_nd("max_unpool2d", 2, input, indices, kernel_size, stride, padding,
                        output_size)


def max_unpool3d(input: ArrayLike, indices: ArrayLike, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> jax.Array:
  return _max_unpool_nd("max_unpool3d", 3, input, indices, kernel_size, stride, padding,
                        output_size)


max_unpool1d.__doc__ = _UNPOOL_DOC.format(
    nd=1, shape="1, 1, 8", out="[0.0, 1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0]")
max_unpool2d.__doc__ = _UNPOOL_DOC.format(
    nd=2, shape="1, 2, 4", out="[0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 7.0]")
max_unpool3d.__doc__ = _UNPOOL_DOC.format(
    nd=3, shape="1, 2, 2, 2", out="[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]")


@dataclasses.dataclass(frozen=True)
class _AdaptiveMax:
  """The static plan of ``adaptive_max_pool{nd}d``: (in, out) per pooled axis."""

  axes: tuple[tuple[int, int], ...]
  indices: bool


def _amax_config(name: str, nd: int, shape: tuple[int, ...], output_size: Any,
                 return_indices: Any) -> _AdaptiveMax:
  op = _op(name)
  ind = _flag(op, "return_indices", return_indices)
  return _AdaptiveMax(_adaptive_config(name, nd, shape, output_size).axes, ind)


def _check_plane_index(name: str, plane: int, *, what: str = "an input") -> None:
  """Torch's per-plane indices of a plane of ``plane`` elements must fit the index type, which
  follows jax_enable_x64 at each call (so this is not part of a cached configuration)."""
  dtype = _max_pool_op._index_dtype()
  if plane > np.iinfo(dtype).max:
    raise ValueError(f"{_op(name)}: {what} plane of {plane} elements is more than "
                     f"{dtype.name} indices can address; enable jax_enable_x64 for int64 "
                     f"indices")


_AMAX = _checks.ConfigCache(_amax_config)

@functools.lru_cache(maxsize=512)
def _amax_table(n_in: int, n_out: int) -> np.ndarray:
  """``(n_out, K)`` input positions of each window, its last position repeated up to ``K``
  (the longest window's length)."""
  o = np.arange(n_out, dtype=np.int64)
  start = (o * n_in) // n_out
  end = -((-(o + 1) * n_in) // n_out)
  k = int((end - start).max())
  table = np.minimum(start[:, None] + np.arange(k)[None, :], end[:, None] - 1)
  table.setflags(write=False)
  return table


@functools.lru_cache(maxsize=256)
def _amax_plan(axes: tuple[tuple[int, int], ...]) -> np.ndarray:
  """The joint window ``(m1, K1, m2, K2, ...)``: each tap's flat position in the input plane
  (row-major, so never decreasing in the window's scan order)."""
  spatial = [n for n, _ in axes]
  pos: np.ndarray = np.zeros((), np.int64)
  for d, (n_in, n_out) in enumerate(axes):
    pos = np.add.outer(pos, _amax_table(n_in, n_out) * math.prod(spatial[d + 1:]))
  pos.setflags(write=False)
  return pos


def _amax_windows(v: jax.Array, axes: tuple[tuple[int, int], ...]) -> jax.Array:
  """``v`` with each pooled axis replaced by (window, tap): a reshape where the windows tile
  the axis, else one gather of the static table."""
  lead = v.ndim - len(axes)
  for d, (n_in, n_out) in enumerate(axes):
    a = lead + 2 * d
    table = _amax_table(n_in, n_out)
    shape = v.shape[:a] + table.shape + v.shape[a + 1:]
    if n_in % n_out:
      v = jnp.take(v, jnp.asarray(table.reshape(-1).astype(np.int32)), axis=a, mode="clip")
    v = v.reshape(shape)
  return v


# Joint windows of at most this many taps are scanned in one pass over their taps; larger ones
# one axis at a time.
_AMAX_SCAN_TAPS = 48


def _amax_scan(g: jax.Array, taps: list[tuple[Any, ...]],
               cand: Any, nan: bool = True) -> tuple[jax.Array, jax.Array]:
  """Torch's scan over ``taps`` (index tuples into ``g``, in scan order): an element is taken
  when it is greater than the running maximum or NaN. ``cand(tap)`` is the plane position
  of that tap. Returns (maximum, position). With ``nan=False``, NaN is not looked for: right
  for windows without NaN (the caller fixes the others, ``_amax_last_nan``)."""
  best = g[taps[0]]
  where = jnp.broadcast_to(cand(taps[0]), best.shape)
  for tap in taps[1:]:
    v = g[tap]
    take = (v > best) | jnp.isnan(v) if nan else v > best
    best = jnp.where(take, v, best)
    where = jnp.where(take, cand(tap), where)
  return best, where


def _amax_forward(x: jax.Array, axes: tuple[tuple[int, int], ...]) -> tuple[jax.Array,
                                                                             jax.Array]:
  """(maximum, torch's per-plane index) of every adaptive window.

  Torch scans a window row-major and takes an element when it is greater than the running
  maximum or NaN: ties go to the first maximum, and a window holding NaN gives NaN at its last
  NaN. Small windows run that scan over all their taps at once (windows that tile the input
  find positions without the NaN test and fix NaN windows after, ``_amax_tiled``); larger
  ones one axis at a time from the last, carrying each partial maximum's position (the scan
  is separable: the first maximum in row-major order is the first row's first maximum among
  the rows' maxima, and the last NaN the last row's last NaN). A repeated tap (the padding of
  a short window) names an element of the window again and changes neither.
  """
  nd = len(axes)
  lead = x.ndim - nd
  dtype = _max_pool_op._index_dtype()
  spatial = [n for n, _ in axes]
  if all(o == 1 for _, o in axes):
    # one window over the whole plane: torch's scan as jaxops.global_max_pool's maximum and
    # rounds over the contiguous plane, with torch's NaN rule. Planes with an axis past
    # _AMAX_UNROLLED_TAPS took a variadic reduce one axis at a time (112 x 112 -> 1 on 2x64
    # planes: 8.7 ms against 1.0-1.2), and shorter planes their per-axis scans, slower than
    # the rounds since the rounds find positions after them (docs/PERFORMANCE.md,
    # "GlobalMaxPool" and "GlobalMaxPool: XLA's maximum where it is exact")
    flat = x.reshape(x.shape[:lead] + (-1,))
    best = _max_pool_op._maximum(flat, last_nan=True)
    first = _max_pool_op._rounds(flat, last_nan=True)[1]
    out = x.shape[:lead] + (1,) * nd
    return best.reshape(out), first.astype(dtype).reshape(out)
  scan = _amax_scan_dtype(axes)
  pos = _amax_plan(axes).astype(scan)
  if math.prod(pos.shape[1::2]) <= _AMAX_SCAN_TAPS:
    if _amax_tiling(axes):
      return _amax_tiled(x, axes)
    every = [sum(((slice(None), j) for j in tap), ())
             for tap in itertools.product(*[range(k) for k in pos.shape[1::2]])]
    best, found = _amax_split_scan(x, axes, [(slice(None),) * lead + at for at in every],
                                   lambda tap: jnp.asarray(pos[tap[lead:]].reshape(
                                       (1,) * lead + pos[tap[lead:]].shape)))
    return best, found.astype(dtype)
  v: Any = x
  where: Any = None
  for d in reversed(range(nd)):
    n_in, n_out = axes[d]
    a = lead + d
    one = axes[d:d + 1]
    table = (_amax_table(n_in, n_out) * math.prod(spatial[d + 1:])).astype(scan)
    gp = None if where is None else _amax_windows(jnp.moveaxis(where, a, -1), one)
    shape = (1,) * (v.ndim - 1) + (n_out,)

    def cand(tap: tuple[Any, ...], table: np.ndarray = table, gp: Any = gp,
             shape: tuple[int, ...] = shape) -> Any:
      c = jnp.asarray(table[:, tap[-1]].reshape(shape))
      return c if gp is None else c + gp[tap]

    if table.shape[1] > _AMAX_UNROLLED_TAPS:
      best, pos_d = _amax_reduce(_amax_windows(jnp.moveaxis(v, a, -1), one),
                                 jnp.asarray(table.reshape(shape + (-1,)))
                                 + (0 if gp is None else gp))
    else:
      taps = [(Ellipsis, j) for j in range(table.shape[1])]
      best, pos_d = _amax_split_scan(jnp.moveaxis(v, a, -1), one, taps, cand)
    v, where = jnp.moveaxis(best, -1, a), jnp.moveaxis(pos_d, -1, a)
  return v, where.astype(dtype)


def _amax_scan_dtype(axes: tuple[tuple[int, int], ...]) -> np.dtype:
  """The dtype in which ``_amax_forward``'s scans carry plane positions: float32 where it holds
  every position exactly and no axis needs ``_amax_reduce`` (whose variadic reduce takes
  integer positions), else the index dtype. A select chain of integer positions on float
  comparisons ran several times as long as one of floats on an Intel Xeon, as in
  ``_amax_tile_offset`` (docs/PERFORMANCE.md, "Integer select chains")."""
  if (math.prod(n for n, _ in axes) <= 1 << 24
      and all(_amax_table(n, o).shape[1] <= _AMAX_UNROLLED_TAPS for n, o in axes)):
    return np.dtype(np.float32)
  return np.dtype(_max_pool_op._index_dtype())


# Longest window along one axis that ``_amax_forward`` scans unrolled (a select per tap); past
# it, ``_amax_reduce`` (1000 -> 1 on both axes took 24 s to compile unrolled).
_AMAX_UNROLLED_TAPS = 64


def _amax_reduce(g: jax.Array, p: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``_amax_scan`` over the last axis of ``g`` (taps in scan order, plane positions ``p``),
  as one variadic reduce: the scan's result as a total order, so that the reduction may run in
  any order. A NaN beats any number, and of two NaNs the later position wins (the scan's last
  NaN); a larger number wins, and of equal numbers the earlier position (its first maximum)."""
  p = jnp.broadcast_to(p, g.shape)

  def pick(a: tuple[jax.Array, jax.Array], b: tuple[jax.Array, jax.Array]
           ) -> tuple[jax.Array, jax.Array]:
    (va, pa), (vb, pb) = a, b
    na, nb = jnp.isnan(va), jnp.isnan(vb)
    take = (nb & ~na) | (nb & na & (pb > pa)) | (~na & ~nb & ((vb > va) | ((vb == va) & (pb < pa))))
    return jnp.where(take, vb, va), jnp.where(take, pb, pa)

  init = (np.array(-np.inf, g.dtype), np.array(np.iinfo(p.dtype).max, p.dtype))
  best, where = lax.reduce((g, p), init, pick, (g.ndim - 1,))
  return best, where


def _amax_split_scan(v: jax.Array, axes: tuple[tuple[int, int], ...], taps: list[tuple[Any, ...]],
                     cand: Any) -> tuple[jax.Array, jax.Array]:
  """``_amax_scan`` over the windows of ``v`` (``_amax_windows``), the maximum and the position
  each from a gather of their own. One gather read by both loops is materialised in its
  tap-major layout, which each reads across its planes: 56 -> 9 on 8x64x56x56 took 17.4 ms
  against 5.3 with two gathers, each fused into its loop (the second reads ``v`` through an
  optimization barrier, so that XLA does not merge the two). Windows that tile their axes are a
  reshape, not a gather, and take one scan."""
  if all(n % o == 0 for n, o in axes):
    return _amax_scan(_amax_windows(v, axes), taps, cand)
  best = _amax_scan(_amax_windows(v, axes), taps, cand)[0]
  pos = _amax_scan(_amax_windows(lax.optimization_barrier(v), axes), taps, cand)[1]
  return best, pos


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _amax(x: jax.Array, axes: tuple[tuple[int, int], ...]) -> tuple[jax.Array, jax.Array]:
  return _amax_forward(x, axes)


def _amax_jvp(axes: tuple[tuple[int, int], ...], primals: tuple[Any, ...],
              tangents: tuple[Any, ...]) -> tuple[Any, Any]:
  """The tangent of the selected element. Windows that tile the input (``_amax_tiling``) pick
  it by tap number, so that the backward pass is one select per input element; other windows
  gather it at the index, so that the backward pass is a scatter-add of one value per output
  (torch's backward). Within each plane, the leading axes kept apart (merged, a batch- or
  channel-sharded call needed an all-gather)."""
  (x,), (t,) = primals, tangents
  # the primal through the custom rule again, so that higher derivatives take it too (JAX's
  # own rule for the variadic reduce of long windows fails at second order)
  y, pos = _amax(x, axes)
  t = _checks.dense_tangent(t)
  lead = x.shape[:x.ndim - len(axes)]
  if _amax_tiling(axes):
    ty = _amax_tiled_tangent(t, lax.stop_gradient(x), lax.stop_gradient(y), axes)
    return (y, pos), (ty, _checks.no_tangent(pos))
  ty = jnp.take_along_axis(t.reshape(lead + (-1,)), lax.stop_gradient(pos).reshape(lead + (-1,)),
                           axis=-1, mode="clip").reshape(y.shape)
  return (y, pos), (ty, _checks.no_tangent(pos))


def _amax_tiling(axes: tuple[tuple[int, int], ...]) -> bool:
  """Whether the windows tile every pooled axis (kernel = stride = ``n / m``) with at most
  ``_AMAX_SCAN_TAPS`` taps (``_amax_tiled``, ``_amax_tiled_tangent``: a select per tap)."""
  return (all(o and n % o == 0 for n, o in axes)
          and math.prod(n // o for n, o in axes) <= _AMAX_SCAN_TAPS)


def _amax_tiles(ndim: int, axes: tuple[tuple[int, int], ...]) -> list[tuple[Any, ...]]:
  """The taps of windows that tile every pooled axis (kernel = stride = ``n / m``), in torch's
  scan order: strided slices of the input."""
  ks = [n // o for n, o in axes]
  return [(slice(None),) * (ndim - len(axes)) + tuple(slice(j, None, k) for j, k in zip(tap, ks))
          for tap in itertools.product(*[range(k) for k in ks])]


def _amax_tile_number(taps: list[tuple[Any, ...]], dtype: Any) -> Any:
  """Each tiled tap's number in the window (scan order), a scalar constant."""
  return lambda tap: np.asarray(taps.index(tap), dtype)


def _amax_tile_position(taps: list[tuple[Any, ...]], axes: tuple[tuple[int, int], ...],
                        dtype: Any) -> Any:
  """Each tiled tap's plane position (torch's index), a constant of the output's shape."""
  plan = _amax_plan(axes).astype(dtype)
  lead = len(taps[0]) - len(axes)

  def position(tap: tuple[Any, ...]) -> jax.Array:
    at = plan[sum(((slice(None), s.start) for s in tap[lead:]), ())]
    return jnp.asarray(at.reshape((1,) * lead + at.shape))
  return position


def _amax_last_nan(y: jax.Array, where: jax.Array, x: jax.Array, *,
                   axes: tuple[tuple[int, int], ...], positions: bool,
                   partitioned: bool = False) -> jax.Array:
  """``where`` (each tiled window's first maximum when NaN is left out: a tap number, or its
  plane position) with the windows whose maximum ``y`` is NaN set to their last NaN, torch's
  choice. Only if there is one: a conditional (with the NaN test in every tap's comparison,
  the gradient of 8x512x14x14 -> 7x7 took 2.3-2.5 times max_pool's, against 1.6-1.8). A
  primitive, so that a program compiled for several devices, where the predicate would need
  an all-reduce, fixes every window unconditionally instead."""
  taps = _amax_tiles(x.ndim, axes)
  cand = (_amax_tile_position(taps, axes, where.dtype) if positions
          else _amax_tile_number(taps, where.dtype))

  def fix() -> jax.Array:
    last = jnp.broadcast_to(cand(taps[0]), where.shape)
    for tap in taps[1:]:
      last = jnp.where(jnp.isnan(x[tap]), cand(tap), last)
    return jnp.where(jnp.isnan(y), last, where)
  if partitioned:
    return fix()
  return lax.cond(_checks.any_true(jnp.isnan(y)), fix, lambda: where)


_amax_last_nan_p = Primitive("jaxops_torch_adaptive_max_last_nan")
_amax_last_nan_p.def_impl(jax.jit(_amax_last_nan, static_argnames=("axes", "positions")))
_amax_last_nan_p.def_abstract_eval(lambda y, where, x, **_: where)
mlir.register_lowering(_amax_last_nan_p, lambda ctx, y, where, x, **params: mlir.lower_fun(
    functools.partial(_amax_last_nan, partitioned=_fused_sum.partitioned(ctx), **params),
    multiple_results=False)(ctx, y, where, x))


def _amax_last_nan_batch(args: Any, dims: Any, **params: Any) -> tuple[jax.Array, int]:
  # the pooled axes are the trailing ones: a batch axis goes first
  return _amax_last_nan_p.bind(*_checks.batch_first(args, dims), **params), 0


batching.primitive_batchers[_amax_last_nan_p] = _amax_last_nan_batch


def _amax_tiled(x: jax.Array, axes: tuple[tuple[int, int], ...]) -> tuple[jax.Array,
                                                                           jax.Array]:
  """``_amax_forward`` where the windows tile every pooled axis: the maxima by torch's rule,
  their positions by the scan without NaN, and NaN windows fixed by ``_amax_last_nan``."""
  taps = _amax_tiles(x.ndim, axes)
  best = _amax_scan(x, taps, _amax_tile_number(taps, np.int8))[0]  # (its numbers unused)
  number = _amax_scan(x, taps, _amax_tile_number(taps, np.float32), nan=False)[1]
  where = _amax_tile_offset(number, axes) + _amax_tile_position(
      taps, axes, _max_pool_op._index_dtype())(taps[0])
  return best, _amax_last_nan_p.bind(best, where, x, axes=axes, positions=True)


def _amax_tile_offset(number: jax.Array, axes: tuple[tuple[int, int], ...]) -> jax.Array:
  """The plane offset of tiled tap ``number`` (float, as ``_amax_scan`` carries it) from its
  window's first tap: the tap's per-axis steps (its number's row-major digits) times the plane's
  strides. The scan carries float numbers, not integer positions: a select chain of integers
  on float comparisons ran 4-5 times as long on an Intel Xeon (8x512x14x14 -> 7x7 with
  indices: 1.75 ms against 0.79 for max_pool2d's; docs/PERFORMANCE.md)."""
  dtype = _max_pool_op._index_dtype()
  rest = number.astype(dtype)
  offset = jnp.zeros(number.shape, dtype)
  spatial = [n for n, _ in axes]
  for d in reversed(range(len(axes))):
    k = spatial[d] // axes[d][1]
    offset = offset + (rest % k) * math.prod(spatial[d + 1:])
    rest = rest // k
  return offset


def _amax_tiled_tangent(t: jax.Array, x: jax.Array, y: jax.Array,
                        axes: tuple[tuple[int, int], ...]) -> jax.Array:
  """The tangent of the maxima where the windows tile every pooled axis: each window's
  winning tap number (the scan again, NaN fixed as in ``_amax_tiled``) picks that tap as
  max_pool's backward does (``_select_taps``), so that the backward pass is one elementwise
  pass over the input instead of a scatter-add (8x512x14x14 -> 7x7, the gradient of
  sum(y ** 2): 0.57-0.63 ms against 0.94, benchmarks/)."""
  taps = _amax_tiles(x.ndim, axes)
  # (float tap numbers, exact below _AMAX_SCAN_TAPS: with int8 numbers, materialised for the
  # NaN fix's conditional, the gradient above took 2.1 ms against 0.90; _amax_tile_offset)
  arg = _amax_scan(x, taps, _amax_tile_number(taps, np.float32), nan=False)[1]
  arg = _amax_last_nan_p.bind(y, arg, x, axes=axes, positions=False)
  windows = tuple(_max_pool_op.WindowAxis(n, n // o, n // o, 1, 0, 0, o) for n, o in axes)
  return _max_pool_op._select_taps(t, arg, windows)


_amax.defjvp(_amax_jvp, symbolic_zeros=True)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _amax_jit(x: jax.Array, cfg: _AdaptiveMax) -> Any:
  nd = len(cfg.axes)
  shape = x.shape[:x.ndim - nd] + tuple(o for _, o in cfg.axes)
  if math.prod(shape) == 0:
    y, i = jnp.zeros(shape, x.dtype), jnp.zeros(shape, _max_pool_op._index_dtype())
  else:
    y, i = _amax(x, cfg.axes)
  return (y, i) if cfg.indices else y


def _adaptive_max(name: str, nd: int, input: ArrayLike, output_size: Any,
                  return_indices: Any) -> Any:
  x = _float_input(name, input)
  static = (name, nd, x.shape, output_size, return_indices)
  cfg = _AMAX(_checks.cache_key(*static), *static)
  if cfg.indices:
    _check_plane_index(name, math.prod(n for n, _ in cfg.axes))
  return _amax_jit(x, cfg)


_AMAX_DOC = """``torch.nn.functional.adaptive_max_pool{nd}d`` on ``(N, C, *spatial)`` or
  ``(C, *spatial)``.

  Per axis, output ``o`` of ``n -> m`` takes the maximum over input
  ``[floor(o * n / m), ceil((o + 1) * n / m))`` (windows of uneven length where ``m`` does not
  divide ``n``); the window is the product of the per-axis ones. As torch's CPU kernel, the
  window is scanned row-major and an element is taken when it is greater than the running
  maximum or NaN: ties go to the first maximum, and a window holding NaN gives NaN, indexed at
  its last NaN. ``return_indices`` gives torch's indices: the flat position of the maximum
  within its ``(N, C)`` plane of the input (for ``max_unpool{nd}d``). The gradient goes to that
  element (summed where windows share it), as torch's autograd.

  Args:
    input: float16, bfloat16, float32 or float64 array.
    output_size: {size_arg}
    return_indices: also return the indices (int64; int32 without JAX's 64-bit mode).

  Returns:
    The pooled array (``input``'s dtype), or the pair (pooled, indices).

  Raises:
    ValueError: wrong rank, an empty non-batch axis, a negative size, a sequence of the wrong
      length.
    TypeError: a non-integer or traced size, a non-float input.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> y, i = F.adaptive_max_pool{nd}d(jnp.array({x}), {out}, return_indices=True)
    >>> y.ravel().tolist(), i.ravel().tolist()
    {result}
  """


def adaptive_max_pool1d(input: ArrayLike, output_size: Any,
                        return_indices: bool = False) -> Any:
  return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input: ArrayLike, output_size: Any,
                        return_indices: bool = False) -> Any:
  return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input: ArrayLike, output_size: Any,
                        return_indices: bool = False) -> Any:
  return _adaptive_max("adaptive_max_pool3d", 3, input, output_size, return_indices)


adaptive_max_pool1d.__doc__ = _AMAX_DOC.format(
    nd=1, size_arg="the output length ``m`` (an int or a 1-tuple).",
    x="[[[1.0, 3.0, 3.0, 2.0, 0.0]]]", out=3, result="([3.0, 3.0, 2.0], [1, 1, 3])")
adaptive_max_pool2d.__doc__ = _AMAX_DOC.format(
    nd=2, size_arg="``m`` for both axes, or ``(mH, mW)``; a ``None`` entry keeps that size.",
    x="[[[1.0, 5.0, 2.0], [4.0, 3.0, 6.0]]]", out="(1, 2)", result="([5.0, 6.0], [1, 5])")
adaptive_max_pool3d.__doc__ = _AMAX_DOC.format(
    nd=3, size_arg="``m`` for every axis, or ``(mD, mH, mW)``; a ``None`` entry keeps that "
    "size.", x="[[[[1.0, 2.0], [7.0, 4.0]]]]", out=1, result="([7.0], [2])")


# --- torch's other names for the same calls -----------------------------------------------------


def upsample(input: ArrayLike, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> jax.Array:
  """``torch.nn.functional.upsample`` (deprecated in torch, which warns and calls
  ``interpolate``): ``interpolate(input, size, scale_factor, mode, align_corners)``."""
  return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: ArrayLike, size: Any = None, scale_factor: Any = None) -> jax.Array:
  """``torch.nn.functional.upsample_nearest`` (deprecated in torch):
  ``interpolate(input, size, scale_factor, mode="nearest")``."""
  return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: ArrayLike, size: Any = None, scale_factor: Any = None) -> jax.Array:
  """``torch.nn.functional.upsample_bilinear`` (deprecated in torch):
  ``interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)`` -- note
  ``align_corners=True``, unlike ``interpolate``'s default."""
  return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def _with_indices(pool: Any) -> Any:
  def call(input: ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0,
           dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    del return_indices  # torch's *_with_indices return both whatever it says
    return pool(input, kernel_size, stride, padding, dilation, ceil_mode, True)
  call.__name__ = call.__qualname__ = pool.__name__ + "_with_indices"
  call.__doc__ = (f"``torch.nn.functional.{call.__name__}``: ``{pool.__name__}(..., "
                  f"return_indices=True)``, the pair (pooled, indices) whatever "
                  f"``return_indices`` says.")
  return call


def _adaptive_with_indices(pool: Any) -> Any:
  def call(input: ArrayLike, output_size: Any, return_indices: bool = False) -> Any:
    del return_indices  # torch's *_with_indices return both whatever it says
    return pool(input, output_size, True)
  call.__name__ = call.__qualname__ = pool.__name__ + "_with_indices"
  call.__doc__ = (f"``torch.nn.functional.{call.__name__}``: ``{pool.__name__}(input, "
                  f"output_size, return_indices=True)``, the pair (pooled, indices) whatever "
                  f"``return_indices`` says.")
  return call


max_pool1d_with_indices = _with_indices(max_pool1d)
max_pool2d_with_indices = _with_indices(max_pool2d)
max_pool3d_with_indices = _with_indices(max_pool3d)
adaptive_max_pool1d_with_indices = _adaptive_with_indices(adaptive_max_pool1d)
adaptive_max_pool2d_with_indices = _adaptive_with_indices(adaptive_max_pool2d)
adaptive_max_pool3d_with_indices = _adaptive_with_indices(adaptive_max_pool3d)


# --- pixel_shuffle / pixel_unshuffle ------------------------------------------------------------


def _shuffle_factor(name: str, what: str, x: jax.Array, factor: Any) -> int:
  op = _op(name)
  if isinstance(factor, (bool, np.bool_)) or not isinstance(factor, (int, np.integer)):
    raise _checks.type_error(op, what, factor, "an int")
  r = int(factor)
  if x.ndim < 3:
    raise ValueError(f"{op}: {name} expects input to have at least 3 dimensions, but got input "
                     f"with {x.ndim} dimension(s)")
  if r <= 0:
    raise ValueError(f"{op}: {name} expects a positive {what}, but got {r}")
  return _long(op, what, r, factor)


def pixel_shuffle(input: ArrayLike, upscale_factor: int) -> jax.Array:
  """``torch.nn.functional.pixel_shuffle``: ``(*, C * r**2, H, W)`` to ``(*, C, H * r, W * r)``;
  output ``[c, h * r + i, w * r + j]`` is input ``[c * r**2 + i * r + j, h, w]`` (the
  sub-pixel convolution's rearrangement). Any dtype; a reshape and a transposition, so exact
  and linear (its gradient is ``pixel_unshuffle`` of the cotangent).

  Raises:
    TypeError: a non-int ``upscale_factor`` (torch refuses floats, 2.0 included).
    ValueError: fewer than 3 axes, ``upscale_factor`` below 1, channels not divisible by its
      square.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.pixel_shuffle(jnp.arange(4).reshape(1, 4, 1, 1), 2)[0, 0].tolist()
    [[0, 1], [2, 3]]
  """
  x = _checks.as_array(input, _op("pixel_shuffle"), "input")
  r = _shuffle_factor("pixel_shuffle", "upscale_factor", x, upscale_factor)
  *lead, c, h, w = x.shape
  if c % (r * r):
    raise ValueError(f"{_op('pixel_shuffle')}: pixel_shuffle expects its input's 'channel' "
                     f"dimension to be divisible by the square of upscale_factor, but "
                     f"input.size(-3)={c} is not divisible by {r * r}")
  n = len(lead)
  # (torch wraps these shapes in int64; XLA aborts the process on an overflowing extent)
  _checks.check_output_size(_op("pixel_shuffle"), (*lead, c // (r * r), r, r, h, w), x.dtype)
  _checks.check_output_size(_op("pixel_shuffle"), (*lead, c // (r * r), h * r, w * r), x.dtype)
  y = x.reshape(*lead, c // (r * r), r, r, h, w)
  y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
  return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: ArrayLike, downscale_factor: int) -> jax.Array:
  """``torch.nn.functional.pixel_unshuffle``: the inverse of ``pixel_shuffle``,
  ``(*, C, H * r, W * r)`` to ``(*, C * r**2, H, W)``. Any dtype; exact and linear.

  Raises:
    TypeError: a non-int ``downscale_factor``.
    ValueError: fewer than 3 axes, ``downscale_factor`` below 1, a height or width not
      divisible by it.

  Examples:
    >>> import jax.numpy as jnp, jaxops.torch as F
    >>> F.pixel_unshuffle(jnp.arange(4).reshape(1, 1, 2, 2), 2).ravel().tolist()
    [0, 1, 2, 3]
  """
  x = _checks.as_array(input, _op("pixel_unshuffle"), "input")
  r = _shuffle_factor("pixel_unshuffle", "downscale_factor", x, downscale_factor)
  *lead, c, h, w = x.shape
  for axis, length, offset in (("height", h, -2), ("width", w, -1)):
    if length % r:
      raise ValueError(f"{_op('pixel_unshuffle')}: pixel_unshuffle expects {axis} to be "
                       f"divisible by downscale_factor, but input.size({offset})={length} is "
                       f"not divisible by {r}")
  n = len(lead)
  # (torch wraps these shapes in int64; XLA aborts the process on an overflowing extent)
  _checks.check_output_size(_op("pixel_unshuffle"), (*lead, c, h // r, r, w // r, r), x.dtype)
  _checks.check_output_size(_op("pixel_unshuffle"), (*lead, c * r * r, h // r, w // r),
                            x.dtype)
  y = x.reshape(*lead, c, h // r, r, w // r, r)
  y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
  return y.reshape(*lead, c * r * r, h // r, w // r)
