"""roi_align(): ONNX RoiAlign, with traced boxes and an exact adaptive sampling count.

Bilinear sampling is separable: a sample at (y, x) reads ``wy(h) * wx(w) * X[h, w]``. Per roi and
per axis the samples of each output bin give a short list of (index, weight) taps, computed with
jnp from the (traced, differentiable) boxes. The adaptive count ``ceil(roi_size /
output_size)`` depends on the box, so the number of samples per bin has a static upper bound:
samples outside ``[-1, L]`` read nothing, and a bin holds at most ``L + 2`` samples inside it
(the spacing of adaptive samples is at least half a pixel, and at least ``(L + 1) / (L + 2)`` of
one once the bin is longer than the map). Each bin enumerates its samples from the first one
inside the map, masked beyond the bin's own count, so the result is exact for every box.

Two static plans compute the average, and the cheaper one (by a static count of multiply-adds)
is taken: a gather of the (2K x 2K) taps of each bin (K samples per bin and axis), or, for large
K, a dense separable contraction ``Ay[r] @ X[b_r] @ Ax[r]^T`` with per-axis weight matrices
``(output_size, L)``. ``mode="max"`` needs each sample's value, so it always gathers; with
``sampling_ratio=0`` pass ``max_sampling_ratio`` to bound its cost.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxops import _checks

_OP = "jaxops.roi_align"
_FLOATS = tuple(np.dtype(d) for d in (jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64))
_INTS = tuple(np.dtype(d) for d in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                    np.uint32, np.uint64))


class Mode(_checks.StrEnum):
  """How the samples of a bin are pooled."""

  AVG = "avg"
  MAX = "max"


class CoordinateTransformationMode(_checks.StrEnum):
  """half_pixel shifts the scaled box by -0.5; output_half_pixel does not (RoiAlign-10)."""

  HALF_PIXEL = "half_pixel"
  OUTPUT_HALF_PIXEL = "output_half_pixel"


@dataclasses.dataclass(frozen=True)
class _Config:
  mode: Mode
  out_h: int
  out_w: int
  sampling_ratio: int
  max_sampling_ratio: int | None
  spatial_scale: float
  half_pixel: bool
  corner_max: bool     # ONNX front end only: max of the weighted corner values (see the adapter)


def roi_align(x: ArrayLike, rois: ArrayLike, batch_indices: ArrayLike, *, mode: str = "avg",
              output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
              spatial_scale: float = 1.0, coordinate_transformation_mode: str = "half_pixel",
              max_sampling_ratio: int | None = None) -> jax.Array:
  """Pools each box of ``rois`` into an ``output_height x output_width`` grid (ONNX RoiAlign-22).

  For box ``[x1, y1, x2, y2]`` of image ``batch_indices[r]``, on each axis (y shown)::

    start = y1 * spatial_scale - offset        offset = 0.5 (half_pixel) or 0 (output_half_pixel)
    size  = y2 * spatial_scale - offset - start   (at least 1 with output_half_pixel)
    bin   = size / output_height
    g     = sampling_ratio if > 0 else ceil(size / output_height)   (adaptive)
    y_i   = start + ph * bin + (i + 0.5) * bin / g,   i = 0 .. g - 1

  Each sample is the bilinear interpolation of ``x`` at ``(y_i, x_j)`` (a sample with ``y < -1``,
  ``y > H``, ``x < -1`` or ``x > W`` reads 0; otherwise coordinates are clamped into the map).
  ``mode="avg"`` averages the ``g_h * g_w`` samples of a bin; a bin with no samples (adaptive
  count 0: a box of zero size) gives 0, as onnxruntime and the reference do. ``mode="max"`` takes
  the largest sample value. The gradient flows to ``x`` and to ``rois`` (the adaptive count is
  piecewise constant in the box).

  The adaptive count is exact under ``jax.jit`` with traced boxes: each bin evaluates a static
  number of samples per axis (``H + 2`` and ``W + 2``, enough for any box), masked beyond the
  bin's own count. ``mode="avg"`` then uses per-axis weight matrices (cost per roi about
  ``C * output_height * H * W * N`` multiply-adds); ``mode="max"`` evaluates every sample (cost per
  roi about ``4 * C * output_height * output_width * (H + 2) * (W + 2)``). ``max_sampling_ratio``
  (static) caps the adaptive count at ``min(g, max_sampling_ratio)`` and bounds the cost by it;
  it is exact for boxes whose adaptive count does not exceed it.

  Args:
    x: feature map ``(N, C, H, W)``, floating.
    rois: boxes ``(num_rois, 4)`` as ``[x1, y1, x2, y2]`` in input-image coordinates; floating,
      may be traced (differentiable).
    batch_indices: ``(num_rois,)`` integers, the image of each box (clipped into ``[0, N)``).
    mode: "avg" (default) or "max".
    output_height: pooled height (static, >= 1).
    output_width: pooled width (static, >= 1).
    sampling_ratio: samples per bin and axis; 0 (default) is adaptive.
    spatial_scale: factor from image coordinates to feature-map coordinates.
    coordinate_transformation_mode: "half_pixel" (default) or "output_half_pixel".
    max_sampling_ratio: static cap of the adaptive count (None: no cap), see above.

  Returns:
    Array ``(num_rois, C, output_height, output_width)`` of ``x``'s dtype (float16/bfloat16
    compute in float32).

  Raises:
    ValueError: bad shapes or options.
    TypeError: unsupported dtypes, or traced static options.

  Examples:
    >>> import jax.numpy as jnp
    >>> import jaxops
    >>> x = jnp.arange(16.0).reshape(1, 1, 4, 4)
    >>> rois = jnp.array([[0.0, 0.0, 4.0, 4.0]])
    >>> jaxops.roi_align(x, rois, jnp.array([0]), output_height=2, output_width=2)
    Array([[[[ 2.5,  4.5],
             [10.5, 12.5]]]], dtype=float32)
  """
  cfg = _config(mode, output_height, output_width, sampling_ratio, spatial_scale,
                coordinate_transformation_mode, max_sampling_ratio, False)
  return _roi_align_checked(x, rois, batch_indices, cfg)


def _config(mode: Any, output_height: Any, output_width: Any, sampling_ratio: Any,
            spatial_scale: Any, coordinate_transformation_mode: Any, max_sampling_ratio: Any,
            corner_max: bool) -> _Config:
  out_h, = _checks.int_tuple(_OP, "output_height", output_height, length=1, minimum=1)
  out_w, = _checks.int_tuple(_OP, "output_width", output_width, length=1, minimum=1)
  sr, = _checks.int_tuple(_OP, "sampling_ratio", sampling_ratio, length=1, minimum=0)
  msr = None
  if max_sampling_ratio is not None:
    msr, = _checks.int_tuple(_OP, "max_sampling_ratio", max_sampling_ratio, length=1, minimum=1)
  return _Config(Mode.from_string(_OP, "mode", mode), out_h, out_w, sr, msr,
                 _checks.static_float(_OP, "spatial_scale", spatial_scale),
                 CoordinateTransformationMode.from_string(
                     _OP, "coordinate_transformation_mode", coordinate_transformation_mode)
                 is CoordinateTransformationMode.HALF_PIXEL, corner_max)


def _roi_align_checked(x: Any, rois: Any, batch_indices: Any, cfg: _Config) -> jax.Array:
  x = _checks.floating_input(_OP, x, _FLOATS)
  rois = _checks.as_array(rois)
  batch_indices = _checks.as_array(batch_indices)
  if x.ndim != 4:
    raise _checks.value_error(_OP, "x", f"shape {x.shape}", "of rank 4: (N, C, H, W)")
  if rois.dtype not in _FLOATS:
    raise _checks.type_error(_OP, "rois", f"dtype {rois.dtype}", "floating")
  if batch_indices.dtype not in _INTS:
    raise _checks.type_error(_OP, "batch_indices", f"dtype {batch_indices.dtype}", "integer")
  if rois.ndim != 2 or rois.shape[1] != 4:
    raise _checks.value_error(_OP, "rois", f"shape {rois.shape}", "of shape (num_rois, 4)")
  if batch_indices.shape != rois.shape[:1]:
    raise _checks.value_error(_OP, "batch_indices", f"shape {batch_indices.shape}",
                              f"of shape ({rois.shape[0]},) (one per roi)")
  if x.shape[2] == 0 or x.shape[3] == 0 or x.shape[0] == 0:
    raise _checks.value_error(_OP, "x", f"shape {x.shape}", "non-empty N, H and W")
  return _roi_align_jit(x, rois, batch_indices, cfg)


def _samples_per_axis(cfg: _Config, length: int) -> int:
  """K: the static number of samples each bin evaluates on an axis of ``length``."""
  if cfg.sampling_ratio > 0:
    return cfg.sampling_ratio
  bound = length + 3  # length + 2 samples fit; one more absorbs rounding of the first index
  return bound if cfg.max_sampling_ratio is None else min(cfg.max_sampling_ratio + 1, bound)


def _axis(cfg: _Config, lo: Any, hi: Any, pooled: int, length: int,
          cdt: Any) -> tuple[Any, Any, Any, Any, Any]:
  """Per (roi, bin, sample): tap indices (2 ints), tap weights (2), the sample's validity; per
  (roi, bin): whether some of the bin's samples fall outside the map; per roi: the count g."""
  offset = 0.5 if cfg.half_pixel else 0.0
  start = lo.astype(cdt) * cfg.spatial_scale - offset
  end = hi.astype(cdt) * cfg.spatial_scale - offset
  size = end - start
  if not cfg.half_pixel:
    size = jnp.maximum(size, 1.0)
  bin_size = size / pooled
  k = _samples_per_axis(cfg, length)
  if cfg.sampling_ratio > 0:
    g = jnp.full_like(size, cfg.sampling_ratio)
  else:
    g = jnp.ceil(size / pooled)
    if cfg.max_sampling_ratio is not None:
      g = jnp.minimum(g, cfg.max_sampling_ratio)
  p = jnp.arange(pooled, dtype=cdt)
  bin_start = start[:, None] + p[None, :] * bin_size[:, None]            # (R, P)
  safe_g = jnp.maximum(g, 1.0)[:, None]
  step = bin_size[:, None] / safe_g
  kk = jnp.arange(k, dtype=cdt)
  if cfg.sampling_ratio > 0:
    first = jnp.zeros_like(bin_start)
  else:  # the first sample at or above -1, one earlier for rounding (masked if outside)
    first = jnp.ceil((-1.0 - bin_start) / jnp.where(step > 0, step, 1.0) - 0.5) - 1
    first = jax.lax.stop_gradient(jnp.clip(first, 0, None))
  i = first[..., None] + kk[None, None, :]                                                # (R, P, K)
  y = bin_start[..., None] + (i + 0.5) * bin_size[:, None, None] / safe_g[..., None]
  valid = i < g[:, None, None]
  inside = (y >= -1.0) & (y <= length)
  yc = jnp.clip(y, 0, length - 1)
  low = jnp.floor(yc)
  frac = yc - low
  use = (valid & inside).astype(cdt)
  idx = jnp.stack([low, jnp.minimum(low + 1, length - 1)], axis=-1).astype(jnp.int32)
  w = jnp.stack([1 - frac, frac], axis=-1) * use[..., None]
  n_in = jnp.sum(valid & inside, axis=-1)
  some_out = n_in < g[:, None]
  return idx, w, valid, some_out, g


@functools.partial(jax.jit, static_argnames=("cfg",))
def _roi_align_jit(x: jax.Array, rois: jax.Array, batch_indices: jax.Array,
                   cfg: _Config) -> jax.Array:
  n, c, h, w_len = x.shape
  num = rois.shape[0]
  cdt = jnp.promote_types(_checks.compute_dtype(x.dtype), _checks.compute_dtype(rois.dtype))
  b = jnp.clip(batch_indices.astype(jnp.int32), 0, n - 1)
  iy, wy, vy, outy, gy = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)
  ix, wx, vx, outx, gx = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)
  ky, kx = iy.shape[2], ix.shape[2]
  xt = x.astype(cdt).reshape(n, c, h * w_len).transpose(0, 2, 1)        # (N, HW, C)
  hi = jax.lax.Precision.HIGHEST
  if cfg.mode is Mode.AVG:
    count = jnp.maximum(gy * gx, 1.0)                                      # (R,)
    gather_cost = cfg.out_h * cfg.out_w * (2 * ky) * (2 * kx)
    dense_cost = n * cfg.out_h * h * w_len + cfg.out_h * w_len * cfg.out_w
    if gather_cost <= dense_cost:
      flat = (iy.reshape(num, cfg.out_h, 1, 2 * ky, 1, 1) * w_len
              + ix.reshape(num, 1, cfg.out_w, 1, 2 * kx, 1))[..., 0]       # (R, P, Q, 2K, 2K)
      wts = wy.reshape(num, cfg.out_h, 1, 2 * ky, 1) * wx.reshape(num, 1, cfg.out_w, 1, 2 * kx)
      rows = _rows(xt, b, flat.reshape(num, -1)).reshape(*flat.shape, c)
      out = jnp.sum(wts[..., None] * rows, axis=(3, 4)).transpose(0, 3, 1, 2)
    else:
      ay = _dense(iy, wy, h)                                                # (R, P, H)
      ax = _dense(ix, wx, w_len)                                            # (R, Q, W)
      onehot = (b[:, None] == jnp.arange(n)[None, :]).astype(cdt)           # (R, N)
      x4 = xt.reshape(n, h, w_len, c)
      # Z[n, h, r, q, c] = sum_w X[n, h, w, c] Ax[r, q, w]; then rows of the roi's own image.
      z = jnp.einsum("nhwc,rqw->rnhqc", x4, ax, precision=hi)
      z = jnp.einsum("rnhqc,rn->rhqc", z, onehot, precision=hi)
      out = jnp.einsum("rph,rhqc->rcpq", ay, z, precision=hi)
    out = out / count[:, None, None, None]
  else:
    # (R, P, K, 2) x (R, Q, K, 2) corner taps of each sample
    flat = (iy[:, :, None, :, None, :, None] * w_len
            + ix[:, None, :, None, :, None, :])                             # (R,P,Q,Ky,Kx,2,2)
    wts = wy[:, :, None, :, None, :, None] * wx[:, None, :, None, :, None, :]
    rows = _rows(xt, b, flat.reshape(num, -1)).reshape(*flat.shape, c)
    if cfg.corner_max:
      vals = jnp.max(wts[..., None] * rows, axis=(5, 6))
    else:
      vals = jnp.sum(wts[..., None] * rows, axis=(5, 6))                   # (R,P,Q,Ky,Kx,C)
    ok = vy[:, :, None, :, None] & vx[:, None, :, None, :]                  # (R,P,Q,Ky,Kx)
    vals = jnp.where(ok[..., None], vals, -jnp.inf)
    out = jnp.max(vals, axis=(3, 4))                                        # (R,P,Q,C)
    some_out = outy[:, :, None] | outx[:, None, :]
    out = jnp.where(some_out[..., None], jnp.maximum(out, 0.0), out)
    out = jnp.where(jnp.isneginf(out), 0.0, out)  # a bin with no samples
    out = out.transpose(0, 3, 1, 2)
  return out.astype(x.dtype)


def _rows(xt: jax.Array, b: jax.Array, flat: jax.Array) -> jax.Array:
  """xt[b[r], flat[r, i], :] for every roi r: (R, I, C)."""
  return jax.vmap(lambda bi, f: xt[bi].at[f].get(mode="promise_in_bounds"))(b, flat)


def _dense(idx: jax.Array, w: jax.Array, length: int) -> jax.Array:
  """(R, P, length): the weights of the (R, P, K, 2) taps summed per pixel."""
  onehot = idx[..., None] == jnp.arange(length, dtype=idx.dtype).reshape((1,) * idx.ndim + (-1,))
  return jnp.sum(jnp.where(onehot, w[..., None], 0.0), axis=(2, 3))
