"""roi_align(): ONNX RoiAlign, with traced boxes and an exact adaptive sampling count.

Bilinear sampling is separable: a sample at (y, x) reads ``wy(h) * wx(w) * X[h, w]``. Per roi and
per axis the samples of each output bin give a short list of (index, weight) taps, computed with
jnp from the (traced, differentiable) boxes. The adaptive count ``ceil(roi_size /
output_size)`` depends on the box, so the number of samples per bin has a static upper bound:
samples outside ``[-1, L]`` read nothing, and a bin holds at most ``L + 2`` samples inside it
(the spacing of adaptive samples is at least half a pixel, and at least ``(L + 1) / (L + 2)`` of
one once the bin is longer than the map). Each bin enumerates its samples from the first one
inside the map, masked beyond the bin's own count, so the result is exact for every box.

The average has a general plan and a tap plan. The general plan evaluates the static bound: a
gather of the (2K x 2K) taps of each bin (K samples per bin and axis), or, for large K, a dense
separable contraction ``Ay[r] @ X[b_r] @ Ax[r]^T`` with per-axis weight matrices
``(output_size, L)``, whichever takes fewer multiply-adds. The tap plan (calls with many output
elements) reads channels-last rows: for each (row, column) pair a bin reads, one gather of
channel vectors and a multiply-add into the bin's accumulator, fused into one loop, on chunks of
rois so that no (taps x channels) intermediate exists. With adaptive counts the rois are sorted
by the samples they need, and each chunk runs the tap plan sized for its largest box (a static
ladder of sizes, the rows a bin reads merged), or the general plan, a few boxes at a time, when
its boxes need more. The tap plan's derivative is two tap loops of its own (``_tap_sums``): in
the map, transposed to one scatter of channel vectors per tap; in the boxes, through the tap
weights. ``mode="max"`` needs each sample's value:
calls with many output elements run a loop over the samples on chunks of rois (each sample's
four corner rows gathered, weighted and folded into a running maximum, one fused loop per
sample; adaptive counts loop only as far as each chunk's largest count); smaller calls gather
every sample's corner rows at once (the static bound with adaptive counts: pass
``max_sampling_ratio`` to bound that cost). Its derivative is that of each output's winning
sample (the first in loop order on ties): the sample loop once more, keeping which sample won,
then that sample alone read as a function of the map and the boxes, at the output's cost; on the
CPU with 1 or 2 samples per axis, a loop over the samples on chunks of rois, each sample's corner
rows masked to the outputs it won, so that the map's cotangent is scattered in channel vectors.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
import numpy as np
from jax.typing import ArrayLike

from jaxops import _checks
from jaxops import _exact
from jaxops import _interp

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
  bin's own count. ``mode="avg"`` on the CPU, for calls with many output elements, sorts the
  boxes by their counts and sizes each chunk of boxes by its largest count, rounded up to a rung
  ``k`` of a short static ladder (cost per roi about ``C * output_height * output_width *
  min(2k, k + 2) ** 2`` multiply-adds, for counts up to a few); otherwise, and for larger counts,
  it uses per-axis weight matrices (cost per roi about ``C * output_height * H * W * N``).
  ``mode="max"``, for calls with many output elements, loops over the samples on chunks of boxes,
  as far as each chunk's largest count (cost per roi about ``4 * C * output_height *
  output_width * g_h * g_w`` for that largest count); smaller calls evaluate every sample of
  the static bound (cost per roi about ``4 * C * output_height * output_width * (H + 2) *
  (W + 2)``, and that much memory). ``max_sampling_ratio`` (static) caps the adaptive count at
  ``min(g, max_sampling_ratio)`` and bounds the cost by it; it is exact for boxes whose adaptive
  count does not exceed it. The derivative of ``mode="max"`` is that of each output's largest
  sample (the first in sampling order on ties, as ``max_pool``'s): the sample loop once more,
  then that sample alone, a few gathers of the output's size.

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
    ValueError: bad shapes or options; an output, or one roi's sample tables (``sampling_ratio``
      or the adaptive bound per bin and axis, times the output size), past the device's memory.
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
    # a cap past int32 caps nothing the traced count can reach (it compares in int32 without
    # JAX's 64-bit types, where a larger Python int overflowed)
    msr = min(msr, 2 ** 31 - 2)
  return _Config(Mode.from_string(_OP, "mode", mode), out_h, out_w, sr, msr,
                 _checks.static_float(_OP, "spatial_scale", spatial_scale),
                 CoordinateTransformationMode.from_string(
                     _OP, "coordinate_transformation_mode", coordinate_transformation_mode)
                 is CoordinateTransformationMode.HALF_PIXEL, corner_max)


def _roi_align_checked(x: Any, rois: Any, batch_indices: Any, cfg: _Config) -> jax.Array:
  x = _checks.floating_input(_OP, x, _FLOATS)
  _checks.concrete_shape(_OP, "x", x)
  rois = _checks.as_array(rois, _OP, "rois")
  batch_indices = _checks.index_array(batch_indices, _OP, "batch_indices")
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
  check_memory(_OP, rois.shape[0], x.shape, x.dtype, cfg.out_h, cfg.out_w, cfg.sampling_ratio,
               cfg.max_sampling_ratio)
  return _roi_align_jit(x, rois, batch_indices, cfg)


def check_memory(op: str, k: int, shape: tuple[int, ...], dtype: Any, out_h: int, out_w: int,
                 sampling_ratio: int, max_sampling_ratio: int | None,
                 names: Mapping[str, str] | None = None) -> None:
  """ValueErrors naming ``op`` where the output of ``k`` rois on an input of ``shape`` cannot
  fit in the device's memory, or one roi's sample tables cannot. Each axis' samples (per roi,
  bin and sample: taps, weights, masks) are tables the output's size does not bound:
  sampling_ratio=2**31 on one 1 x 1 bin asked XLA for 318 GB and failed only when the result was
  read (RESOURCE_EXHAUSTED). The plans take the rois in chunks, but never less than one.
  ``names``: the caller's names of ``sampling_ratio``, ``output_height`` and ``output_width``."""
  _checks.check_output_size(op, (k, shape[1], out_h, out_w), dtype)
  kh, kw = (_samples_bound(sampling_ratio, max_sampling_ratio, n) for n in shape[2:])
  limit = _checks.memory_limit()
  if (out_h * kh + out_w * kw) * _SAMPLE_BYTES > limit:
    arg, value = (("sampling_ratio", sampling_ratio) if sampling_ratio > 0 else
                  ("output_height", out_h) if out_h >= out_w else ("output_width", out_w))
    raise _checks.value_error(
        op, (names or {}).get(arg, arg), value, f"small enough for one roi's sample tables to "
        f"fit in memory (output height {out_h} x {kh} + output width {out_w} x {kw} samples, "
        f"at least {_SAMPLE_BYTES} bytes each, are more than the {limit} bytes of the device)")


# Bytes per sample and axis of the tables above, at least (two tap indices, two weights, the
# coordinate and masks; XLA asked for 74 bytes per sample and axis where sampling_ratio=2**31).
_SAMPLE_BYTES = 64


def _samples_per_axis(cfg: _Config, length: int) -> int:
  """K: the static number of samples each bin evaluates on an axis of ``length``."""
  return _samples_bound(cfg.sampling_ratio, cfg.max_sampling_ratio, length)


def _samples_bound(sampling_ratio: int, max_sampling_ratio: int | None, length: int) -> int:
  if sampling_ratio > 0:
    return sampling_ratio
  bound = length + 3  # length + 2 samples fit; one more absorbs rounding of the first index
  return bound if max_sampling_ratio is None else min(max_sampling_ratio + 1, bound)


def _count(cfg: _Config, lo: Any, hi: Any, pooled: int, cdt: Any) -> tuple[Any, Any, Any]:
  """Per roi and axis: the scaled start, the bin size and the sample count g."""
  offset = 0.5 if cfg.half_pixel else 0.0
  # each product rounded before the difference, as onnxruntime and torchvision compute it: XLA
  # would otherwise contract it into a fused multiply-add (at its default optimization level),
  # and an extent of exactly 3 (boxes 6 to 36 at spatial_scale 0.1 in float32) becomes
  # 3.0000002, four samples per bin where they take three
  start = _exact.rounded(lo.astype(cdt) * cfg.spatial_scale) - offset
  end = _exact.rounded(hi.astype(cdt) * cfg.spatial_scale) - offset
  size = end - start
  if not cfg.half_pixel:
    size = jnp.maximum(size, 1.0)
  bin_size = _interp.divide(size, pooled)
  if cfg.sampling_ratio > 0:
    g = jnp.full_like(size, cfg.sampling_ratio)
  else:
    g = jnp.ceil(bin_size)
    if cfg.max_sampling_ratio is not None:
      g = jnp.minimum(g, cfg.max_sampling_ratio)
  return start, bin_size, g


def _axis(cfg: _Config, lo: Any, hi: Any, pooled: int, length: int, cdt: Any,
          k: int | None = None) -> tuple[Any, Any, Any, Any, Any]:
  """Per (roi, bin, sample): tap indices (2 ints), tap weights (2), the sample's validity; per
  (roi, bin): whether some of the bin's samples fall outside the map; per roi: the count g.
  ``k`` (static) replaces the number of samples evaluated per bin when every box of the call
  needs at most that many (see ``_needed``)."""
  start, bin_size, g = _count(cfg, lo, hi, pooled, cdt)
  k = _samples_per_axis(cfg, length) if k is None else k
  p = jnp.arange(pooled, dtype=cdt)
  bin_start = start[:, None] + _exact.rounded(p[None, :] * bin_size[:, None])   # (R, P)
  safe_g = jnp.maximum(g, 1.0)[:, None]
  step = _interp.divide(bin_size[:, None], safe_g)
  kk = jnp.arange(k, dtype=cdt)
  if cfg.sampling_ratio > 0:
    first = jnp.zeros_like(bin_start)
  else:  # the first sample at or above -1, one earlier for rounding (masked if outside)
    first = jnp.ceil((-1.0 - bin_start) / jnp.where(step > 0, step, 1.0) - 0.5) - 1
    first = jax.lax.stop_gradient(jnp.clip(first, 0, None))
  i = first[..., None] + kk[None, None, :]                                                # (R, P, K)
  y = bin_start[..., None] + _interp.divide((i + 0.5) * bin_size[:, None, None], safe_g[..., None])
  valid = i < g[:, None, None]
  inside = (y >= -1.0) & (y <= length)
  yc = jnp.clip(y, 0, length - 1)
  low = jnp.floor(yc)
  frac = yc - low
  use = (valid & inside).astype(cdt)
  idx = jnp.stack([low, jnp.minimum(low + 1, length - 1)], axis=-1).astype(jnp.int32)
  w = jnp.stack([1 - frac, frac], axis=-1) * use[..., None]
  n_in = jnp.sum(valid & inside, axis=-1)
  some_out = n_in.astype(g.dtype) < g[:, None]  # (explicit: strict dtype promotion)
  return idx, w, valid, some_out, g


def _counted(w: Any) -> Any:
  """Per (roi, bin, sample) of ``_axis``' (R, P, K, 2) tap weights: whether the bin counts the
  sample (an uncounted one, past the count g or outside the map, has both weights 0; a counted
  one weights summing to 1)."""
  return w[..., 0] + w[..., 1] > 0


def _needed(cfg: _Config, lo: Any, hi: Any, pooled: int, length: int, cdt: Any) -> Any:
  """Per roi: the samples per bin that ``_axis`` must evaluate for this box (at most
  ``_samples_per_axis``): its count g, capped by that bound."""
  return jnp.minimum(_count(cfg, lo, hi, pooled, cdt)[2], _samples_per_axis(cfg, length))


def _taps(cfg: _Config, lo: Any, hi: Any, pooled: int, length: int, cdt: Any, k: int,
          merge: bool) -> tuple[Any, Any, Any, Any]:
  """Per (roi, bin): the rows an axis reads and their summed weights, ``(R, P, M)`` each, the
  count g per roi, and two ``(R, P, M)`` flags: the rows that a counted sample reads, and those
  it reads with weight 0 (a sample on a pixel's row: its upper corner). Without
  ``merge`` the rows are the 2 corners of each of the ``k`` samples (M = 2k). With ``merge``
  (adaptive, uncapped counts only: the g <= k samples of a bin lie within ``g - 1`` of each
  other, so their lower corners span at most g rows, one more for rounding, and the upper
  corners one row beyond: ``k + 2``) each row appears once, counted from the lowest one the bin
  reads, which is cheaper for k above 2. A row no counted sample reads (a merged row past the
  bin's last sample, a sample past the count g or outside the map) has weight 0 and must add
  nothing, not 0 times its pixel: an inf there would make the bin NaN (DEVIATIONS RoiAlign 7)."""
  idx, w, _, _, g = _axis(cfg, lo, hi, pooled, length, cdt, k)
  num = idx.shape[0]
  read = jnp.broadcast_to(_counted(w)[..., None], w.shape)
  idx = idx.reshape(num, pooled, 2 * k)
  w = w.reshape(num, pooled, 2 * k)
  read = read.reshape(num, pooled, 2 * k)
  if not merge or k + 2 >= 2 * k:
    return idx, w, g, (read, read & (w == 0))
  m = k + 2
  row0 = jnp.min(jnp.where(w > 0, idx, length), axis=-1, keepdims=True)
  row0 = jnp.minimum(row0, length - 1)
  pos = jnp.clip(idx - row0, 0, m - 1)                                    # (R, P, 2k)
  hit = pos[..., None] == jnp.arange(m, dtype=pos.dtype).reshape(1, 1, 1, m)  # (R, P, 2k, M)
  wm = jnp.sum(jnp.where(hit, w[..., None], 0.0), axis=-2)               # (R, P, M)
  rows = jnp.minimum(row0 + jnp.arange(m, dtype=row0.dtype).reshape(1, 1, m), length - 1)
  hit = hit & read[..., None]
  return rows, wm, g, (jnp.any(hit, axis=-2), jnp.any(hit & (w == 0)[..., None], axis=-2))


@functools.partial(jax.jit, static_argnames=("cfg",))
def _roi_align_jit(x: jax.Array, rois: jax.Array, batch_indices: jax.Array,
                   cfg: _Config) -> jax.Array:
  n, c, h, w_len = x.shape
  if rois.shape[0] == 0:  # no boxes: the sample tables' reshapes cannot infer their length
    return jnp.zeros((0, c, cfg.out_h, cfg.out_w), x.dtype)
  cdt = jnp.promote_types(_checks.compute_dtype(x.dtype), _checks.compute_dtype(rois.dtype))
  # clipped in their own type (through int32 first, 2**32 would have wrapped to image 0)
  b = jnp.clip(batch_indices, 0, min(n - 1, int(jnp.iinfo(batch_indices.dtype).max)))
  b = b.astype(jnp.int32)
  xt = x.astype(cdt).reshape(n, c, h * w_len).transpose(0, 2, 1)        # (N, HW, C)
  # A box with a NaN or infinite coordinate, or whose scaled extent overflows the compute type
  # (x2 - x1 past float32's largest value), is pooled as the box 0 and given its bins
  # (DEVIATIONS RoiAlign 4) after: its weights were NaN, and in the backward 0 * NaN reached
  # the gradient of every box (the dense plan sums over every box and image).
  extent = [_count(cfg, rois[:, lo], rois[:, hi], 1, cdt)[1] for lo, hi in ((0, 2), (1, 3))]
  bad = ~(jnp.all(jnp.isfinite(rois), axis=1) & jnp.isfinite(extent[0])
           & jnp.isfinite(extent[1]))
  rois = jnp.where(bad[:, None], jnp.zeros((), rois.dtype), rois)
  pool = _avg if cfg.mode is Mode.AVG else _max
  out = pool(xt, rois, b, cfg, h, w_len, cdt).transpose(0, 3, 1, 2)      # (R, C, P, Q)
  fill = 0.0 if cfg.mode is Mode.MAX and cfg.sampling_ratio == 0 else jnp.nan
  return jnp.where(bad[:, None, None, None], fill, out).astype(x.dtype)


def _max_general(xt: jax.Array, rois: jax.Array, b: jax.Array, *, cfg: _Config, h: int,
                 w_len: int, cdt: Any) -> jax.Array:
  """mode="max" of small calls, ``(R, P, Q, C)``: every sample of every bin gathered at once
  (the corner rows of all of them, ``(R, P * Q * Ky * Kx * 4, C)``), then the maxima. Only the
  value: the derivative is ``_max_at``'s (see ``_max``)."""
  num = rois.shape[0]
  c = xt.shape[2]
  iy, wy, vy, outy, _ = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)
  ix, wx, vx, outx, _ = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)
  # (R, P, K, 2) x (R, Q, K, 2) corner taps of each sample
  flat = (iy[:, :, None, :, None, :, None] * w_len
          + ix[:, None, :, None, :, None, :])                               # (R,P,Q,Ky,Kx,2,2)
  wts = wy[:, :, None, :, None, :, None] * wx[:, None, :, None, :, None, :]
  rows = _rows(xt, b, flat.reshape(num, -1)).reshape(*flat.shape, c)
  ok = vy[:, :, None, :, None] & vx[:, None, :, None, :]                    # (R,P,Q,Ky,Kx)
  if cfg.corner_max:
    vals = jnp.max(wts[..., None] * rows, axis=(5, 6))
  else:
    vals = jnp.sum(wts[..., None] * rows, axis=(5, 6))                     # (R,P,Q,Ky,Kx,C)
  vals = jnp.where(ok[..., None], vals, -jnp.inf)
  return _max_finish(jnp.max(vals, axis=(3, 4)), outy, outx)


def _max_finish(out: jax.Array, outy: jax.Array, outx: jax.Array) -> jax.Array:
  """The bins' maxima ``(R, P, Q, C)`` (-inf where a bin has no sample) as RoiAlign gives them:
  a bin with samples outside the map also counts their value 0; a bin with none gives 0."""
  some_out = outy[:, :, None] | outx[:, None, :]
  out = jnp.where(some_out[..., None], jnp.maximum(out, 0.0), out)
  return jnp.where(jnp.isneginf(out), 0.0, out)


def _max(xt: jax.Array, rois: jax.Array, b: jax.Array, cfg: _Config, h: int, w_len: int,
         cdt: Any) -> jax.Array:
  """mode="max": ``(R, P, Q, C)``. Calls with many output elements take the sample loop on
  chunks of rois (``_max_scan``), smaller ones the general plan. The derivative is that of
  the winning value alone: the sample loop once more, keeping which sample (and, for
  ``corner_max``, which corner) each output took, the first in loop order on ties
  (``_max_scan``), then that sample's value as a function of ``xt`` and the boxes
  (``_max_at``), so that it costs the output's size, not the static bound's; on the CPU, with
  few samples per bin, a masked loop over the samples instead (``_at_winners_by_taps``)."""
  kw: dict[str, Any] = dict(cfg=cfg, h=h, w_len=w_len, cdt=cdt)
  c = xt.shape[2]
  num = rois.shape[0]
  small = num * cfg.out_h * cfg.out_w * c < _MIN_ELEMENTS
  chunk = max(1, min(num, _CHUNK_BYTES // (cfg.out_h * cfg.out_w * c * np.dtype(cdt).itemsize)))

  @jax.custom_jvp
  def pooled(xt: jax.Array, rois: jax.Array, b: jax.Array) -> jax.Array:
    if small:
      return _max_general(xt, rois, b, **kw)
    return _chunked(functools.partial(_max_scan, xt, winners=False, **kw), rois, b, chunk)

  def jvp(primals: Any, tangents: Any) -> tuple[jax.Array, jax.Array]:
    xt, rois, b = primals
    dxt, drois = (None if type(t) is SymbolicZero else t for t in tangents[:2])
    out = pooled(*primals)
    if dxt is None and drois is None:
      return out, jnp.zeros_like(out)
    x0, r0 = jax.lax.stop_gradient((xt, rois))

    def at_winners() -> jax.Array:
      win = _max_scan(x0, r0, b, winners=True, **kw)[1]
      dense = tuple(jnp.zeros_like(p) if t is None else t for p, t in ((xt, dxt), (rois, drois)))
      return jax.jvp(lambda a, r: _max_at(a, r, b, win, **kw), (xt, rois), dense)[1]

    # On the CPU, with few samples per bin (_MAX_DERIVATIVE_SAMPLES), a loop over the samples
    # on chunks of rois, each sample's corner rows masked to the outputs it won, so that the
    # map's cotangent is one scatter of channel vectors per sample and corner where the
    # derivative at the winners alone (_max_at) scatters single values.
    if small or not 0 < cfg.sampling_ratio ** 2 <= _MAX_DERIVATIVE_SAMPLES:
      return out, at_winners()

    def by_taps() -> jax.Array:
      # (the winners' loop on chunks of rois, as the forward's: on all of them at once, its
      # running maxima and winners, the output's size, went through memory at every sample;
      # the derivative at the winners keeps the one loop, which measured faster beside it)
      val, win = _chunked(functools.partial(_max_scan, x0, winners=True, **kw), r0, b, chunk)
      outy = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)[3]
      outx = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)[3]

      def body(r: jax.Array, bi: jax.Array, w: jax.Array, *dr: jax.Array) -> jax.Array:
        return _at_winners_by_taps(xt, r, bi, w, dxt, dr[0] if dr else None,
                                   k=cfg.sampling_ratio, **kw)

      dval = _chunked(body, rois, b, chunk, win, *([] if drois is None else [drois]),
                      remat=False)
      return jax.jvp(lambda v: _max_finish(v, outy, outx), (val,), (dval,))[1]

    return out, jax.lax.platform_dependent(cpu=by_taps, default=at_winners)

  pooled.defjvp(jvp, symbolic_zeros=True)
  return pooled(xt, rois, b)


def _at_winners_by_taps(xt: jax.Array, rois: jax.Array, b: jax.Array, win: jax.Array, dxt: Any,
                        drois: Any, *, k: int, cfg: _Config, h: int, w_len: int,
                        cdt: Any) -> jax.Array:
  """The tangent ``(R, P, Q, C)`` of the winning samples' values (``_max_val_at``) for boxes
  whose bins have at most ``k`` samples per axis: a loop over those samples (the first ``k`` of
  ``_axis``'s, numbered as ``_max_scan`` numbers them, ``ky * Kx + kx``), each one's corner
  rows gathered, weighted and added where the output took it. Two loops: in the map (its
  transpose scatters channel vectors, the weights kept) and in the boxes through the corner
  weights (checkpointed: its transpose gathers the rows again rather than keeping them)."""

  def tables(r: jax.Array) -> tuple[jax.Array, ...]:
    iy, wy = _axis(cfg, r[:, 1], r[:, 3], cfg.out_h, h, cdt, k)[:2]
    ix, wx = _axis(cfg, r[:, 0], r[:, 2], cfg.out_w, w_len, cdt, k)[:2]
    return iy, wy, ix, wx

  (iy, wy, ix, wx), (_, dwy, _, dwx) = (jax.jvp(tables, (rois,), (drois,)) if drois is not None
                                        else (tables(rois), (None,) * 4))
  base = b[:, None, None] * (h * w_len)
  kx_bound = _samples_per_axis(cfg, w_len)  # Kx, as _max_scan numbers the samples

  def loop(src: jax.Array, pairs: list[tuple[jax.Array, jax.Array]], remat: bool) -> jax.Array:
    table = _checks.replicated(src).reshape(-1, src.shape[2])

    def row(ky: Any, acc: jax.Array) -> jax.Array:
      iy_k = jax.lax.dynamic_index_in_dim(iy, ky, axis=2, keepdims=False)    # (R, P, 2)
      wy_k = [jax.lax.dynamic_index_in_dim(a, ky, axis=2, keepdims=False) for a, _ in pairs]
      for kx in range(k):
        number = ky * kx_bound + kx
        terms = []
        for a in range(2):
          for e in range(2):
            wt = functools.reduce(operator.add, [u[:, :, None, a] * v[:, None, :, kx, e]
                                                 for u, (_, v) in zip(wy_k, pairs)])
            flat = base + iy_k[:, :, None, a] * w_len + ix[:, None, :, kx, e]
            terms.append(wt[..., None] * table.at[flat].get(mode="promise_in_bounds"))
        if cfg.corner_max:
          for j, term in enumerate(terms):
            acc = acc + jnp.where(win == number * 4 + j, term, jnp.zeros((), term.dtype))
        else:
          acc = acc + jnp.where(win == number, functools.reduce(operator.add, terms),
                                jnp.zeros((), acc.dtype))
      return acc

    acc = jnp.zeros(win.shape, cdt)
    return jax.lax.fori_loop(0, k, jax.checkpoint(row) if remat else row, acc)

  dval = jnp.zeros(win.shape, cdt)
  if drois is not None:
    dval = loop(xt, [(dwy, wx), (wy, dwx)], remat=True)
  if dxt is not None:
    dval = dval + loop(dxt, [(wy, wx)], remat=False)
  return dval


def _max_scan(xt: jax.Array, rois: jax.Array, b: jax.Array, *, winners: bool, cfg: _Config,
              h: int, w_len: int, cdt: Any) -> jax.Array:
  """For each sample of the bins (a loop over the rows' samples; the columns' unrolled for a
  fixed ratio up to 8, else a loop too; adaptive counts loop only as far as the rois' largest
  count), its four corner rows gathered from the channels-last ``xt`` and weighted, and a
  running maximum, all in one fused loop per sample: no ``(samples x channels)`` intermediate,
  where the general plan materialises every sample's corner rows (512 rois, 7x7 bins, 2x2
  samples, 256 channels: 411 MB). Returns the bins' values ``(R, P, Q, C)``,
  or with ``winners`` their largest samples (-inf where no sample counts) and the number of the
  sample each took (``ky * Kx + kx``; times 4 plus the corner for ``corner_max``), the first in
  loop order on ties, NaN over any number, -1 where no sample counts."""
  iy, wy, vy, outy, _ = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)
  ix, wx, vx, outx, _ = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)
  base = b[:, None, None] * (h * w_len)
  table = _checks.replicated(xt).reshape(-1, xt.shape[2])
  kxn = ix.shape[2]

  def sample(ky: Any, kx: Any, state: Any) -> Any:
    iy_k = jax.lax.dynamic_index_in_dim(iy, ky, axis=2, keepdims=False)   # (R, P, 2)
    wy_k = jax.lax.dynamic_index_in_dim(wy, ky, axis=2, keepdims=False)
    vy_k = jax.lax.dynamic_index_in_dim(vy, ky, axis=2, keepdims=False)   # (R, P)
    ix_k = jax.lax.dynamic_index_in_dim(ix, kx, axis=2, keepdims=False)   # (R, Q, 2)
    wx_k = jax.lax.dynamic_index_in_dim(wx, kx, axis=2, keepdims=False)
    vx_k = jax.lax.dynamic_index_in_dim(vx, kx, axis=2, keepdims=False)
    ok = (vy_k[:, :, None] & vx_k[:, None, :])[..., None]

    def corner(a: int, e: int) -> jax.Array:  # (R, P, Q, C)
      wt = wy_k[:, :, None, a] * wx_k[:, None, :, e]
      flat = base + iy_k[:, :, None, a] * w_len + ix_k[:, None, :, e]
      return wt[..., None] * table.at[flat].get(mode="promise_in_bounds")

    corners = [corner(a, e) for a in range(2) for e in range(2)]
    if not winners:
      combine = jnp.maximum if cfg.corner_max else operator.add
      return jnp.maximum(state, jnp.where(ok, functools.reduce(combine, corners), -jnp.inf))
    acc, win = state
    number = ky * kxn + kx
    vals = ([(v, number * 4 + j) for j, v in enumerate(corners)] if cfg.corner_max
            else [(functools.reduce(operator.add, corners), number)])
    for v, n in vals:
      v = jnp.where(ok, v, -jnp.inf)
      better = (v > acc) | (jnp.isnan(v) & ~jnp.isnan(acc))
      acc, win = jnp.where(better, v, acc), jnp.where(better, n, win)
    return acc, win

  # A bin's valid samples come first (``_axis``), so the loops need as many samples per axis as
  # the bins have valid ones at most: with adaptive counts they run to that (traced) count
  # rather than to the static bound.
  adaptive = cfg.sampling_ratio == 0
  ny = jnp.max(jnp.sum(vy, axis=-1)) if adaptive else iy.shape[2]
  nx = jnp.max(jnp.sum(vx, axis=-1)) if adaptive else kxn

  def row(ky: Any, state: Any) -> Any:
    if not adaptive and kxn <= 8:
      for kx in range(kxn):
        state = sample(ky, kx, state)
      return state
    return jax.lax.fori_loop(0, nx, lambda kx, s: sample(ky, kx, s), state)

  acc = jnp.full((rois.shape[0], cfg.out_h, cfg.out_w, xt.shape[2]), -jnp.inf, cdt)
  if winners:
    return jax.lax.fori_loop(0, ny, row, (acc, jnp.full(acc.shape, -1, jnp.int32)))
  return _max_finish(jax.lax.fori_loop(0, ny, row, acc), outy, outx)


def _max_at(xt: jax.Array, rois: jax.Array, b: jax.Array, win: jax.Array, *, cfg: _Config,
            h: int, w_len: int, cdt: Any) -> jax.Array:
  """The bins' values ``(R, P, Q, C)`` read at the samples ``win`` (``_max_scan``'s winners)
  alone, as functions of ``xt`` and the boxes: the derivative of mode="max"."""
  outy = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)[3]
  outx = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)[3]
  return _max_finish(_max_val_at(xt, rois, b, win, cfg=cfg, h=h, w_len=w_len, cdt=cdt), outy,
                     outx)


def _max_val_at(xt: jax.Array, rois: jax.Array, b: jax.Array, win: jax.Array, *, cfg: _Config,
                h: int, w_len: int, cdt: Any) -> jax.Array:
  """``_max_at`` before ``_max_finish``: the winning samples' values, -inf where none won."""
  iy, wy, _, _, _ = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)
  ix, wx, _, _, _ = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)
  num, p_len, q_len, c = win.shape
  number = jnp.maximum(win, 0)
  if cfg.corner_max:
    number, which = number // 4, number % 4
  ky, kx = number // ix.shape[2], number % ix.shape[2]
  # flat (one-component) indices: XLA's gathers and scatters of rows are faster so
  r = jnp.arange(num).reshape(-1, 1, 1, 1)
  at_y = (r * p_len + jnp.arange(p_len).reshape(1, -1, 1, 1)) * iy.shape[2] + ky
  at_x = (r * q_len + jnp.arange(q_len).reshape(1, 1, -1, 1)) * ix.shape[2] + kx
  iy_w, wy_w = (v.reshape(-1, 2).at[at_y].get(mode="promise_in_bounds") for v in (iy, wy))
  ix_w, wx_w = (v.reshape(-1, 2).at[at_x].get(mode="promise_in_bounds") for v in (ix, wx))
  table = _checks.replicated(xt).reshape(-1)
  base = b.reshape(-1, 1, 1, 1) * (h * w_len)
  channel = jnp.arange(c).reshape(1, 1, 1, c)

  def corner(a: int, e: int) -> jax.Array:  # (R, P, Q, C)
    flat = (base + iy_w[..., a] * w_len + ix_w[..., e]) * c + channel
    return wy_w[..., a] * wx_w[..., e] * table.at[flat].get(mode="promise_in_bounds")

  corners = [corner(a, e) for a in range(2) for e in range(2)]
  if cfg.corner_max:
    val = functools.reduce(lambda acc, j: jnp.where(which == j, corners[j], acc),
                           range(1, 4), corners[0])
  else:
    val = functools.reduce(operator.add, corners)
  return jnp.where(win >= 0, val, -jnp.inf)


# The tap plan (one gather and multiply-add per pair of rows read, accumulated in registers)
# serves bins that read at most this many (row, column) pairs; beyond, the general plan.
_MAX_TAPS = 64
# The derivative of mode="max" loops over the samples of each bin, masked to the outputs each
# won, for bins of at most this many samples: every sample costs a pass over the chunk's
# output, where the derivative at the winners alone costs one (the gradient in x and the boxes
# against it, 512 boxes, 7x7, 2x256x50x68: 0.15 of its time with 1 sample per bin, 0.48 with
# 4, 1.0 with 9, 1.5 with 16).
_MAX_DERIVATIVE_SAMPLES = 4
# Samples per bin and axis of the adaptive ladder's rungs (``_ladder`` keeps those a map's boxes
# can use): each rung compiles its own loop, so the ladder is sparse. Rungs 12 and 24 serve
# large boxes on fine maps (FPN's stride 4), which the general plan's dense contraction over the
# whole image took 15 times as long as they do (docs/PERFORMANCE.md).
_RUNGS = (1, 2, 4, 6, 12, 24)
# The ladder's rungs read at most this many (row, column) pairs per bin (26 x 26 for 24
# samples per axis merged); the tap plan of a fixed sampling_ratio keeps _MAX_TAPS.
_MAX_RUNG_TAPS = 26 * 26
# The tap plan's loop takes the x taps of one y tap in groups of this many.
_X_GROUP = 8
# The tap plan's derivative in the map keeps each tap's weight and row number for its
# transpose up to this many bytes a chunk; beyond, it recomputes them.
_KEPT_BYTES = 16 << 20
# Rois per chunk of the tap plan: each chunk's (rois, P, Q, C) result stays about this size.
_CHUNK_BYTES = 2 << 20
# Calls with fewer output elements keep the general plan: it compiles faster, and on outputs
# this small the tap plan's loop saves nothing.
_MIN_ELEMENTS = 1 << 16


def _avg(xt: jax.Array, rois: jax.Array, b: jax.Array, cfg: _Config, h: int, w_len: int,
         cdt: Any) -> jax.Array:
  """mode="avg": ``(R, P, Q, C)``, by the tap plan on the CPU where it applies (see
  ``_tap_plan``), by the general plan elsewhere: on accelerators the general plan's one large
  gather is already fast, and a loop over chunks of rois would only add launches."""
  general = functools.partial(_avg_general, cfg=cfg, h=h, w_len=w_len, cdt=cdt)
  tap = _tap_plan(cfg, xt.shape[0], rois.shape[0], xt.shape[2], h, w_len, cdt)
  if tap is None:
    return general(xt, rois, b)
  return jax.lax.platform_dependent(xt, rois, b, cpu=tap, default=general)


def _tap_plan(cfg: _Config, n: int, num: int, c: int, h: int, w_len: int, cdt: Any) -> Any:
  """The tap plan as a function of ``(xt, rois, b)``, or None where it does not apply.

  A fixed sampling ratio whose bins read few enough (row, column) pairs runs the tap plan on
  chunks of rois. Adaptive counts sort the rois by the samples their bins need, and each chunk
  takes the tap plan sized for its largest box (a static ladder of sizes), or the general plan
  when its boxes need more.
  """
  if num * cfg.out_h * cfg.out_w * c < _MIN_ELEMENTS:
    return None
  chunk = max(1, min(num, _CHUNK_BYTES // (cfg.out_h * cfg.out_w * c * np.dtype(cdt).itemsize)))
  ky_max, kx_max = _samples_per_axis(cfg, h), _samples_per_axis(cfg, w_len)
  if cfg.sampling_ratio > 0:
    if (2 * ky_max) * (2 * kx_max) > _MAX_TAPS:
      return None
    body = functools.partial(_avg_taps, cfg=cfg, h=h, w_len=w_len, cdt=cdt, ky=ky_max,
                             kx=kx_max, merge=False)
    return lambda xt, rois, b: _chunked(functools.partial(body, xt), rois, b, chunk)
  merge = cfg.max_sampling_ratio is None
  ladder = _ladder(cfg, h, w_len)
  if not ladder:
    return None
  general = functools.partial(_avg_general, cfg=cfg, h=h, w_len=w_len, cdt=cdt)
  # the general plan's dense contraction holds (rois, N, H, Q, C) arrays: a chunk's boxes go
  # through it a few at a time
  dense_roi = n * h * max(cfg.out_h, cfg.out_w) * c * np.dtype(cdt).itemsize
  few = max(1, min(chunk, _CHUNK_BYTES // dense_roi))
  branches: list[Any] = [functools.partial(_avg_taps, cfg=cfg, h=h, w_len=w_len, cdt=cdt,
                                           ky=min(k, ky_max), kx=min(k, kx_max), merge=merge)
                         for k in ladder]
  branches.append(lambda xt, r, bi: _chunked(functools.partial(general, xt), r, bi, few))
  steps = np.asarray(ladder, cdt)

  # (boxes whose scaled extent is not finite were replaced by _roi_align_jit: counts are finite)
  def need(r: jax.Array) -> jax.Array:
    return jnp.maximum(_needed(cfg, r[:, 1], r[:, 3], cfg.out_h, h, cdt),
                       _needed(cfg, r[:, 0], r[:, 2], cfg.out_w, w_len, cdt))

  def ladder_plan(xt: jax.Array, rois: jax.Array, b: jax.Array) -> jax.Array:
    def body(r: jax.Array, bi: jax.Array) -> jax.Array:
      which = jnp.sum(jnp.max(need(r)) > steps).astype(jnp.int32)
      return jax.lax.switch(which, branches, xt, r, bi)

    order = jnp.argsort(need(rois))
    out = _chunked(body, rois[order], b[order], chunk)
    return out[jnp.argsort(order)]

  return ladder_plan


def _ladder(cfg: _Config, h: int, w_len: int) -> list[int]:
  """The adaptive tap plan's rungs (samples per bin and axis) on an ``h x w_len`` map: those of
  ``_RUNGS`` below the map's bound whose bins read at most ``_MAX_RUNG_TAPS`` (row, column)
  pairs, up to the first that serves every box inside the map. Such a box needs at most
  ceil(length / pooled) samples a bin on an axis (one more allows for rounding); each rung is
  compiled, so the bins of boxes far past the map's edges take the general plan instead of
  rungs that only they would use (on the benchmark's 50 x 68 map, rung 24 was about a fifth of
  the gradient's compile time: docs/PERFORMANCE.md)."""
  ky_max, kx_max = _samples_per_axis(cfg, h), _samples_per_axis(cfg, w_len)
  merge = cfg.max_sampling_ratio is None
  ladder = [k for k in _RUNGS if k < max(ky_max, kx_max)
            and _merged(min(k, ky_max), merge) * _merged(min(k, kx_max), merge) <= _MAX_RUNG_TAPS]
  inside = max(-(-h // cfg.out_h), -(-w_len // cfg.out_w)) + 1
  return [k for i, k in enumerate(ladder) if i == 0 or ladder[i - 1] < inside]


def _merged(k: int, merge: bool) -> int:
  """Rows an axis reads per bin in the tap plan with ``k`` samples (see ``_taps``)."""
  return min(2 * k, k + 2) if merge else 2 * k


def _chunked(body: Any, rois: jax.Array, b: jax.Array, chunk: int, *more: jax.Array,
             remat: bool = True) -> jax.Array:
  """``body(rois, b, *more)`` on chunks of ``chunk`` rois (``more``: other arrays with a leading
  roi axis, chunked alike) in a loop: each chunk's result is written once, in its own layout,
  instead of fusing the caller's transpose into the gathers. With ``remat`` the backward
  recomputes each chunk's taps rather than storing them."""
  num = rois.shape[0]
  steps = -(-num // chunk) if num else 1
  chunk = -(-num // steps) if num else chunk  # as even as the steps allow: the least padding
  pad = steps * chunk - num
  xs = tuple(jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)).reshape(steps, chunk, *a.shape[1:])
             for a in (rois, b, *more))
  out = jax.lax.map(jax.checkpoint(lambda t: body(*t)) if remat else lambda t: body(*t), xs)
  return jax.tree.map(lambda o: o.reshape(steps * chunk, *o.shape[2:])[:num], out)


def _avg_taps(xt: jax.Array, rois: jax.Array, b: jax.Array, *, cfg: _Config, h: int, w_len: int,
              cdt: Any, ky: int, kx: int, merge: bool) -> jax.Array:
  """The tap plan, ``(R, P, Q, C)``: for each pair of rows read on the two axes, one gather of
  channel vectors and a multiply-add, all in one fused loop (no (taps, C) intermediate)."""
  return _tap_sums(xt, rois, b, _TapSpec(cfg, h, w_len, np.dtype(cdt), ky, kx, merge))


@dataclasses.dataclass(frozen=True)
class _TapSpec:
  cfg: _Config
  h: int
  w_len: int
  cdt: np.dtype
  ky: int
  kx: int
  merge: bool

  def tables(self, rois: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Rows and weights per (roi, bin, tap) on each axis, the count folded into ``wy``."""
    (iy, wy, gy, _), (ix, wx, gx, _) = self.axes(rois)
    return iy, wy / jnp.maximum(gy * gx, 1.0)[:, None, None], ix, wx

  def reads(self, rois: jax.Array) -> tuple[jax.Array, ...]:
    """Per (roi, bin, tap) on each axis, whether a counted sample reads the row, and whether
    one reads it with weight 0 (``_taps``): y's two, then x's."""
    (*_, ry), (*_, rx) = self.axes(rois)
    return (*ry, *rx)

  def axes(self, rois: jax.Array) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``_taps`` of the y axis, then of the x axis."""
    return (_taps(self.cfg, rois[:, 1], rois[:, 3], self.cfg.out_h, self.h, self.cdt, self.ky,
                  self.merge),
            _taps(self.cfg, rois[:, 0], rois[:, 2], self.cfg.out_w, self.w_len, self.cdt,
                  self.kx, self.merge))


def _tap_apply(xt: jax.Array, b: jax.Array, iy: jax.Array, ix: jax.Array,
               pairs: list[tuple[jax.Array, jax.Array]], spec: _TapSpec,
               reads: tuple[jax.Array, ...] | None = None, remat: bool = False) -> jax.Array:
  """``(R, P, Q, C)``: the sum over taps of (the sum over ``pairs`` of wy * wx) times ``xt``'s
  row, one gather of channel vectors and a multiply-add per tap, in one fused loop (no (taps, C)
  intermediate). With ``reads`` (``_TapSpec.reads``), for maps that hold a non-finite pixel, a
  tap whose row or column no counted sample reads adds 0 whatever its pixel holds, and one
  that a counted sample reads with weight 0 adds NaN where its pixel is infinite (the sum over
  the samples has the term 0 * inf there, which the merged rows' summed weight does not). With
  ``remat`` the loop's transpose gathers each tap's rows again rather than storing them for
  every iteration."""
  w_len = spec.w_len
  flat = b[:, None, None] * (spec.h * w_len)
  table = xt.reshape(-1, xt.shape[2])

  # x taps in groups of at most _X_GROUP (the last one filled with taps of weight 0 that no
  # sample reads): each iteration of the loop is one y tap and one group, so that the loop's
  # body, compiled once per rung and pass, does not grow with the rung
  nx = ix.shape[2]
  group = min(nx, _X_GROUP)
  groups = -(-nx // group)
  if groups * group > nx:
    fill = [(0, 0)] * 2 + [(0, groups * group - nx)]
    ix = jnp.pad(ix, fill)
    pairs = [(wy, jnp.pad(wx, fill)) for wy, wx in pairs]
    if reads is not None:
      reads = (*reads[:2], *(jnp.pad(t, fill) for t in reads[2:]))

  def step(i: Any, acc: Any) -> Any:  # one y tap and a group of x taps: one fused loop
    ty, gx = (i // groups, (i % groups) * group) if groups > 1 else (i, 0)

    def at_y(t: jax.Array) -> jax.Array:
      return jax.lax.dynamic_index_in_dim(t, ty, axis=2, keepdims=False)[:, :, None]

    def at_x(t: jax.Array) -> jax.Array:
      return t if groups == 1 else jax.lax.dynamic_slice_in_dim(t, gx, group, axis=2)

    base = flat + at_y(iy) * w_len
    wy_t = [at_y(wy) for wy, _ in pairs]
    wx_g = [at_x(wx) for _, wx in pairs]
    ix_g = at_x(ix)
    if reads is not None:
      ry, zy = (at_y(t)[..., None] for t in reads[:2])
      rx_g, zx_g = (at_x(t) for t in reads[2:])
    for tx in range(group):
      wt = functools.reduce(operator.add, [a * wx[:, None, :, tx] for a, wx in zip(wy_t, wx_g)])
      pixel = table.at[base + ix_g[:, None, :, tx]].get(mode="promise_in_bounds")
      term = wt[..., None] * pixel
      if reads is not None:
        rx, zx = rx_g[:, None, :, tx, None], zx_g[:, None, :, tx, None]
        term = jnp.where(ry & rx, term + jnp.where(zy | zx, pixel - pixel, 0), 0)
      acc = acc + term
    return acc

  # (the first row in the loop too: peeled off, its weights were recomputed inside its fused
  # multiply-adds and, in the transpose, inside its scatters' operands)
  acc = jnp.zeros((*iy.shape[:2], ix.shape[1], xt.shape[2]), xt.dtype)
  return jax.lax.fori_loop(0, iy.shape[2] * groups, jax.checkpoint(step) if remat else step, acc)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _tap_sums(xt: jax.Array, rois: jax.Array, b: jax.Array, spec: _TapSpec) -> jax.Array:
  iy, wy, ix, wx = spec.tables(rois)
  return _tap_out(xt, rois, b, iy, wy, ix, wx, spec)


def _tap_out(xt: jax.Array, rois: jax.Array, b: jax.Array, iy: jax.Array, wy: jax.Array,
             ix: jax.Array, wx: jax.Array, spec: _TapSpec) -> jax.Array:
  """The tap plan's bins. With adaptive counts a bin reads rows and samples that it does not
  count, with weight 0, and 0 * inf is NaN: bins that come out non-finite are computed again
  with those taps masked (``_tap_apply``'s ``reads``), behind a conditional on there being
  any, so that on finite maps the loop runs as it is, outside a conditional's branch (with a
  fixed sampling_ratio every sample counts: DEVIATIONS RoiAlign 7)."""
  out = _tap_apply(xt, b, iy, ix, [(wy, wx)], spec)
  if spec.cfg.sampling_ratio > 0:
    return out
  finite = jnp.isfinite(out)

  def exact() -> jax.Array:
    return jnp.where(finite, out, _tap_apply(xt, b, iy, ix, [(wy, wx)], spec, spec.reads(rois)))

  return jax.lax.cond(_checks.any_true(~finite), exact, lambda: out)


def _tap_sums_jvp(spec: _TapSpec, primals: Any, tangents: Any) -> tuple[jax.Array, jax.Array]:
  # Two tangent loops. The map's transposes to one scatter of channel vectors per tap into the
  # map's cotangent, with the tap weights kept from the forward. The boxes' (through the tap
  # weights; the rows read are piecewise constant) transposes to reductions of the gathered rows
  # against the output's cotangent, then the small tables' own transpose; it gathers the rows
  # again there (checkpointed) rather than keeping every tap's (R, P, Q, C) rows. One loop
  # differentiated whole did one or the other for both: it kept those rows, or, checkpointed,
  # recomputed every weight inside every element of its scatters' operands.
  xt, rois, b = primals
  dxt, drois, _ = tangents
  boxes = type(drois) is not SymbolicZero
  (iy, wy, ix, wx), (_, dwy, _, dwx) = (jax.jvp(spec.tables, (rois,), (drois,)) if boxes else
                                        (spec.tables(rois), (None,) * 4))
  out = _tap_out(xt, rois, b, iy, wy, ix, wx, spec)
  dout = jnp.zeros_like(out)
  if boxes:
    if spec.cfg.sampling_ratio > 0:
      dout = _tap_apply(xt, b, iy, ix, [(dwy, wx), (wy, dwx)], spec, remat=True)
    else:  # as the dense plan's: of the finite pixels, none where the bin is not finite
      xt_finite = jnp.where(jnp.isfinite(xt), xt, 0)
      dout = _tap_apply(xt_finite, b, iy, ix, [(dwy, wx), (wy, dwx)], spec, remat=True)
      dout = jnp.where(jnp.isfinite(out), dout, 0)
  if type(dxt) is not SymbolicZero:
    # the transpose keeps every tap's weight and row number (8 bytes a tap and bin), unless
    # that is more than _KEPT_BYTES (rung 24's 676 taps on a chunk of 167 boxes of 64
    # channels: 44 MB): then it recomputes them, which took about twice as long
    kept = 8 * math.prod(iy.shape) * math.prod(ix.shape[1:])
    dout = dout + _tap_apply(dxt, b, iy, ix, [(wy, wx)], spec, remat=kept > _KEPT_BYTES)
  return out, dout


_tap_sums.defjvp(_tap_sums_jvp, symbolic_zeros=True)


def _avg_general(xt: jax.Array, rois: jax.Array, b: jax.Array, *, cfg: _Config, h: int,
                 w_len: int, cdt: Any) -> jax.Array:
  """Every sample the static bound allows, ``(R, P, Q, C)``: the gather of each bin's
  (2K x 2K) taps, or a dense separable contraction ``Ay[r] @ X[b_r] @ Ax[r]^T`` with per-axis
  weight matrices, whichever takes fewer multiply-adds."""
  n = xt.shape[0]
  c = xt.shape[2]
  num = rois.shape[0]
  iy, wy, _, _, gy = _axis(cfg, rois[:, 1], rois[:, 3], cfg.out_h, h, cdt)
  ix, wx, _, _, gx = _axis(cfg, rois[:, 0], rois[:, 2], cfg.out_w, w_len, cdt)
  ky, kx = iy.shape[2], ix.shape[2]
  count = jnp.maximum(gy * gx, 1.0)                                        # (R,)
  gather_cost = cfg.out_h * cfg.out_w * (2 * ky) * (2 * kx)
  dense_cost = n * cfg.out_h * h * w_len + cfg.out_h * w_len * cfg.out_w
  if gather_cost <= dense_cost:
    flat = (iy.reshape(num, cfg.out_h, 1, 2 * ky, 1, 1) * w_len
            + ix.reshape(num, 1, cfg.out_w, 1, 2 * kx, 1))[..., 0]         # (R, P, Q, 2K, 2K)
    wts = wy.reshape(num, cfg.out_h, 1, 2 * ky, 1) * wx.reshape(num, 1, cfg.out_w, 1, 2 * kx)
    rows = _rows(xt, b, flat.reshape(num, -1)).reshape(*flat.shape, c)
    terms = wts[..., None] * rows
    if cfg.sampling_ratio == 0:  # the samples past a bin's count, or outside the map, add 0
      read = (_counted(wy).reshape(num, cfg.out_h, 1, ky, 1, 1, 1, 1) &
              _counted(wx).reshape(num, 1, cfg.out_w, 1, 1, kx, 1, 1))
      terms = jnp.where(read, terms.reshape(*terms.shape[:3], ky, 2, kx, 2, c), 0)
      terms = terms.reshape(*flat.shape, c)
    out = jnp.sum(terms, axis=(3, 4))
  else:
    ay = _dense(iy, wy, h)                                                  # (R, P, H)
    ax = _dense(ix, wx, w_len)                                              # (R, Q, W)
    onehot = (b[:, None] == jnp.arange(n, dtype=b.dtype)[None, :]).astype(cdt)  # (R, N)

    # (the rule below reads every array from its arguments: a custom_jvp closes over none)
    out = _dense_avg(xt.reshape(n, h, w_len, c), ay, ax, onehot, iy, wy, ix, wx)
  return out / count[:, None, None, None]


def _contract(img: jax.Array, my: jax.Array, mx: jax.Array, onehot: jax.Array) -> jax.Array:
  """The dense plan's bins ``(R, P, Q, C)``: Z[n, h, r, q, c] = sum_w X[n, h, w, c] Ax[r, q, w];
  then the rows of each roi's own image, weighted by Ay."""
  hi = jax.lax.Precision.HIGHEST
  z = jnp.einsum("nhwc,rqw->rnhqc", img, mx, precision=hi)
  z = jnp.einsum("rnhqc,rn->rhqc", z, onehot, precision=hi)
  return jnp.einsum("rph,rhqc->rpqc", my, z, precision=hi)


def _dense_pooled(x4: jax.Array, my: jax.Array, mx: jax.Array, onehot: jax.Array,
                  iy: jax.Array, wy: jax.Array, ix: jax.Array, wx: jax.Array) -> jax.Array:
  """The dense plan's sums ``(R, P, Q, C)`` of the map ``x4`` (N, H, W, C) with the per-axis
  weight matrices ``my``, ``mx`` (``_dense`` of the taps ``iy, wy`` and ``ix, wx``)."""
  cdt = x4.dtype

  def non_finite() -> jax.Array:
    # The contraction multiplies every pixel of every image by a weight, mostly 0, and 0 * inf
    # is NaN: with a non-finite pixel anywhere, the finite pixels are contracted alone and each
    # bin takes the value the samples' own terms give (RoiAlign's sum of weight * corner over
    # the samples it uses): NaN where a term reads NaN, or reads +-inf with weight 0, or the
    # terms reach both infinities; else +-inf where a term of positive weight reads it.
    ty, zy, py = _touched(iy, wy, x4.shape[1], cdt)
    tx, zx, px = _touched(ix, wx, x4.shape[2], cdt)
    finite = _contract(jnp.where(jnp.isfinite(x4), x4, 0), my, mx, onehot)

    def hits(mask: jax.Array, hy: jax.Array, hx: jax.Array) -> jax.Array:
      return _contract(mask.astype(cdt), hy, hx, onehot) > 0

    inf = jnp.isinf(x4)
    pos = hits(x4 == jnp.inf, py, px)
    neg = hits(x4 == -jnp.inf, py, px)
    nan = (hits(jnp.isnan(x4), ty, tx) | hits(inf, zy, tx) | hits(inf, ty, zx) | (pos & neg))
    big = jnp.where(pos, jnp.inf, -jnp.inf).astype(cdt)
    return jnp.where(nan, jnp.nan, jnp.where(pos | neg, big, finite))

  return jax.lax.cond(_checks.any_true(~jnp.isfinite(x4)), non_finite,
                      lambda: _contract(x4, my, mx, onehot))


_dense_avg = jax.custom_jvp(_dense_pooled)


def _dense_avg_jvp(primals: Any, tangents: Any) -> tuple[jax.Array, jax.Array]:
  # Linear in the map: its tangent is the contraction of the map's tangent, whatever the map
  # holds (the branch for non-finite pixels masks them, and its wheres gave the bins that read
  # one no gradient at all). The weights' tangent as the branches give it: the contraction of
  # the finite pixels, none where the non-finite branch sets a bin to NaN or an infinity. The
  # taps (iy, wy, ix, wx) decide only which pixels are read, piecewise constant. (Written
  # without the branches' conditional: under vmap, with a batched predicate, JAX turns it
  # into a select whose operands, here tangents, go through stop_gradient, which has no
  # transpose, and reverse mode failed: the gradient in the boxes of a vmap over the maps.)
  x4, my, mx, onehot, *taps = primals
  dx4, dmy, dmx = tangents[:3]
  out = _dense_pooled(*primals)
  if type(dmy) is SymbolicZero and type(dmx) is SymbolicZero:
    dout = jnp.zeros((), x4.dtype)
  else:
    finite = jnp.isfinite(x4)
    dout = jax.jvp(lambda a, e: _contract(jnp.where(finite, x4, 0), a, e, onehot), (my, mx),
                   (_checks.dense_tangent(dmy), _checks.dense_tangent(dmx)))[1]
    dout = jnp.where(_checks.any_true(~finite) & ~jnp.isfinite(out), 0, dout)
  if type(dx4) is not SymbolicZero:
    dout = dout + _contract(dx4, my, mx, onehot)
  return out, jnp.broadcast_to(dout, out.shape)


_dense_avg.defjvp(_dense_avg_jvp, symbolic_zeros=True)


def _touched(idx: jax.Array, w: jax.Array, length: int, cdt: Any
             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(R, P, length) indicators (0 or 1, of ``cdt``) of the pixels that the used samples' two
  taps (``_axis``: an unused sample has both weights 0, a used one weights summing to 1) read:
  at all, with weight 0, and with a positive weight."""
  used = _counted(w)[..., None, None]                                     # (R, P, K, 1, 1)
  pixels = jnp.arange(length, dtype=idx.dtype).reshape((1,) * idx.ndim + (length,))
  hit = (idx[..., None] == pixels) & used                                # (R, P, K, 2, L)
  zero = (w == 0)[..., None]

  def rows(m: jax.Array) -> jax.Array:
    return jnp.any(m, axis=(2, 3)).astype(cdt)

  return rows(hit), rows(hit & zero), rows(hit & ~zero)


def _rows(xt: jax.Array, b: jax.Array, flat: jax.Array) -> jax.Array:
  """xt[b[r], flat[r, i], :] for every roi r: (R, I, C). On a mesh with explicit axes, from a
  replicated ``xt`` (any roi may read any image: an all-gather, as under automatic sharding)."""
  xt = _checks.replicated(xt)
  return jax.vmap(lambda bi, f: xt[bi].at[f].get(mode="promise_in_bounds"))(b, flat)


def _dense(idx: jax.Array, w: jax.Array, length: int) -> jax.Array:
  """(R, P, length): the weights of the (R, P, K, 2) taps summed per pixel."""
  onehot = idx[..., None] == jnp.arange(length, dtype=idx.dtype).reshape((1,) * idx.ndim + (-1,))
  return jnp.sum(jnp.where(onehot, w[..., None], 0.0), axis=(2, 3))
