"""grid_sample() and affine_grid(): ONNX GridSample and AffineGrid (PyTorch's semantics).

Everything that depends only on static arguments (the spatial shapes, the mode, the padding, the
normalised base grid of affine_grid) is fixed at trace time. The device work of grid_sample is
gathers and a weighted sum over the taps. Trilinear sampling, and bilinear sampling with few
channels or from large planes, run as one loop over the output that gathers each element's taps
straight from the input (``_fused_linear``, ``_uses_fused_linear``). Otherwise the forward pass
gathers, for each tap of each point, the C contiguous values of its pixel from a channels-last
copy of the input; on the CPU these row gathers run as the branch of a conditional, which
keeps XLA from fusing the transposes and the tap arithmetic into them (see ``_materialised``),
and the samples of NaN coordinates are masked in that branch, before the transposition back to
channels first (see ``_nan_at``). Under differentiation (a custom_jvp
with the same values) the linear modes and cubic zeros/border take the tangent of the block
formulation, each point's taps read as one K**r block of a channels-last input (padded only
where an axis is shorter than the kernel), so the transpose (the gradient with respect to
``x``) is one block scatter-add per point rather than one scatter per tap; cubic reflection,
whose taps do not form blocks, takes a loop over the taps whose transpose scatters each tap's
rows into one accumulator (``_tap_rows``). Where both ``x``
and the grid vary, the two parts of the tangent are one primitive whose transpose computes the
grid's part before the input's, so that XLA's CPU scheduler does not keep both parts'
temporaries alive at once (``_tangent_p``). The blocks are
gathered in chunks of points by a rematerialised ``lax.map``: the backward pass gathers a chunk
again rather than keeping every block as a residual, so a call's temporaries stay about the
size of the input and the output. The weights are jnp functions of the grid, so gradients flow
to the grid (and through affine_grid to theta): the grid's gradient gathers each tap's row
again and takes its dot product with the cotangent over the channels in the same XLA loop
(``_grid_jvp``, ``jaxops._fused_sum``), without sample-sized intermediates.
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import itertools
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir
from jax.typing import ArrayLike

from jaxops import _checks
from jaxops import _exact
from jaxops import _fused_sum
from jaxops import _interp
from jaxops._interp import Mode
from jaxops._row_gather import row_gather

_OP = "jaxops.grid_sample"
_OP_AFFINE = "jaxops.affine_grid"

_FLOATS = tuple(np.dtype(d) for d in (jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64))
_EXACT = tuple(np.dtype(d) for d in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                     np.uint16, np.uint32, np.uint64))
# A zeros-padded coordinate this far outside the input reads no pixel with any kernel; clipping
# to it keeps infinities out of the tap arithmetic without changing a result.
_FAR = 8.0


class PaddingMode(_checks.StrEnum):
  """What a tap outside the input reads."""

  ZEROS = "zeros"
  BORDER = "border"
  REFLECTION = "reflection"


@dataclasses.dataclass(frozen=True)
class _Config:
  mode: Mode
  padding: PaddingMode
  align_corners: bool
  # nearest without align_corners: round ``(g + 1) * L - 1`` once (True: ATen's vectorized 2-D
  # kernel, jaxops.torch) rather than the product and then the difference (see _denormalize)
  fused: bool = False


def grid_sample(x: ArrayLike, grid: ArrayLike, *, mode: str = "linear",
                padding_mode: str = "zeros", align_corners: bool = False) -> jax.Array:
  """Samples ``x`` at the normalised positions of ``grid``, as ONNX GridSample-22 does.

  ``x`` has shape ``(N, C, D1, ..., Dr)`` and ``grid`` ``(N, O1, ..., Om, r)``; the output has
  shape ``(N, C, O1, ..., Om)``. ``grid[n, o..., :]`` lists a position from the innermost axis to
  the outermost (x, y[, z]), each in ``[-1, 1]`` over the input. A normalised coordinate ``g``
  on an axis of length ``L`` is the pixel coordinate::

    align_corners=True    u = (g + 1) / 2 * (L - 1)     (-1 and 1: centres of the corner pixels)
    align_corners=False   u = ((g + 1) * L - 1) / 2     (-1 and 1: outer edges of the corners)

  ``mode="nearest"`` reads pixel ``round(u)`` (halves to even), ``"linear"`` the N-linear
  interpolation of the 2**r surrounding pixels, ``"cubic"`` the N-cubic (Keys, a = -0.75)
  interpolation of the 4**r surrounding pixels. ``padding_mode`` decides what a position outside
  the input reads, as ``torch.nn.functional.grid_sample`` does:

  * ``"zeros"``: taps outside the input read 0.
  * ``"border"``: nearest/linear clip ``u`` to ``[0, L - 1]``; cubic clips each tap index (the
    input is extended by its edge pixels, so the 4-tap neighbourhood is taken before clipping).
  * ``"reflection"``: nearest/linear reflect ``u`` about the borders (``0`` and ``L - 1`` with
    align_corners, ``-0.5`` and ``L - 0.5`` without) until it is inside, then clip it to
    ``[0, L - 1]``; cubic reflects each tap index the same way.

  Gradients with respect to ``grid`` are PyTorch's, also where a coordinate lands exactly on a
  border that border/reflection padding clips to: the derivative of the clipped coordinate is
  0 there (the border counts as out of bounds).

  Non-finite grid values: a NaN coordinate gives NaN (for floating ``x``; 0 for integer ``x``)
  and passes no gradient (0 to ``x`` and to that point of ``grid``, whatever the cotangent);
  +-inf reads 0 with zeros padding and the edge pixel with border padding, and gives NaN with
  reflection (an infinite position has no reflection). See docs/DEVIATIONS.md, GridSample.

  Args:
    x: input of rank ``r + 2`` (r >= 1). Floating types for every mode; integer and bool
      types with ``mode="nearest"``.
    grid: floating array of shape ``(N, O1, ..., Om, r)``; may be traced (differentiable).
    mode: "nearest", "linear" (default) or "cubic".
    padding_mode: "zeros" (default), "border" or "reflection".
    align_corners: see above.

  Returns:
    Array of shape ``(N, C, O1, ..., Om)`` and the dtype of ``x`` (float16/bfloat16 compute in
    float32).

  Raises:
    ValueError: bad mode/padding strings, mismatched shapes, images of 2**31 pixels or more.
    TypeError: unsupported dtypes, or a traced static option.

  Examples:
    >>> import jax.numpy as jnp
    >>> import jaxops
    >>> x = jnp.arange(4.0).reshape(1, 1, 2, 2)
    >>> grid = jnp.array([[[[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]]])  # (1, 1, 3, 2)
    >>> jaxops.grid_sample(x, grid, align_corners=True)
    Array([[[[0. , 1.5, 3. ]]]], dtype=float32)
    >>> jaxops.grid_sample(x, grid, mode="nearest", padding_mode="border").shape
    (1, 1, 1, 3)
  """
  return sample(x, grid, mode, padding_mode, align_corners, fused=False)


def sample(x: ArrayLike, grid: ArrayLike, mode: str, padding_mode: str, align_corners: bool, *,
           fused: bool) -> jax.Array:
  """``grid_sample``, whose nearest mode rounds ``(g + 1) * L - 1`` once where ``fused``
  (jaxops.torch on 4-D inputs; see ``_denormalize``)."""
  cfg = _Config(Mode.from_string(_OP, "mode", mode),
                PaddingMode.from_string(_OP, "padding_mode", padding_mode),
                _checks.static_bool(_OP, "align_corners", align_corners), fused)
  x = _checks.as_array(x, _OP, "x")
  grid = _checks.as_array(grid, _OP, "grid")
  _checks.concrete_shape(_OP, "x", x)
  _checks.concrete_shape(_OP, "grid", grid)
  allowed = _FLOATS + (_EXACT if cfg.mode is Mode.NEAREST else ())
  if x.dtype not in allowed:
    raise _checks.type_error(_OP, "x", f"dtype {x.dtype}",
                             f"of dtype in ({', '.join(d.name for d in allowed)}) with mode "
                             f"{cfg.mode.value!r}")
  if grid.dtype not in _FLOATS:
    raise _checks.type_error(_OP, "grid", f"dtype {grid.dtype}",
                             f"floating ({', '.join(d.name for d in _FLOATS)})")
  if x.ndim < 3:
    raise _checks.value_error(_OP, "x", f"shape {x.shape}",
                              "of rank >= 3: (N, C, D1, ..., Dr)")
  r = x.ndim - 2
  if grid.ndim < 2 or grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
    raise _checks.value_error(
        _OP, "grid", f"shape {grid.shape}",
        f"of shape (N, O1, ..., Om, {r}) with N = {x.shape[0]} for x of shape {x.shape}")
  if any(d == 0 for d in x.shape[2:]):
    raise _checks.value_error(_OP, "x", f"shape {x.shape}", "spatial dimensions of at least 1")
  if math.prod(x.shape[2:]) >= 2 ** 31:  # a pixel's offset in its image is int32
    raise _checks.value_error(_OP, "x", f"shape {x.shape}",
                              "fewer than 2**31 pixels per image (the product of D1, ..., Dr)")
  return _grid_sample_jit(x, grid, cfg)


def _one_pixel(length: int, cfg: _Config) -> bool:
  """Whether an axis has no span: one pixel under align_corners, where every grid value but NaN,
  +-inf included, is its pixel 0 (``_denormalize``; the product would make +-inf NaN)."""
  return cfg.align_corners and length == 1


def _denormalize(g: Any, length: int, cfg: _Config) -> Any:
  """The pixel coordinate of ``g``: ``(g + 1) / 2 * (L - 1)`` with align_corners, else
  ``((g + 1) * L - 1) / 2``. Nearest sampling rounds the latter as C does, whatever XLA's
  compiler does (see ``jaxops._exact``): the product and then the difference, as
  onnx.reference, onnxruntime and ATen's scalar (3-D) kernel compute it, or with ``cfg.fused``
  the two at once, as ATen's vectorized 2-D kernel does (float32 axes longer than
  ``_exact.exact_limit`` are left to XLA, which fuses them at its default optimization level;
  so are axes past 65535 pixels in float32 without ``fused``). Where the coordinate lies within
  an ulp of a half-pixel the two read different pixels: on three pixels, float64
  ``g = -1/3`` is 0.5 (pixel 0) or 0.5000000000000001 (pixel 1). On an axis of one pixel
  (``_one_pixel``) every value but NaN is 0."""
  if _one_pixel(length, cfg):
    return jnp.where(jnp.isnan(g), g, jnp.zeros_like(g))
  if cfg.align_corners:
    return (g + 1) / 2 * (length - 1)
  if cfg.mode is Mode.NEAREST and cfg.fused and length <= _exact.exact_limit(g.dtype):
    return _exact.fused(g + 1, length, -1.0) / 2
  if cfg.mode is Mode.NEAREST and not cfg.fused and length <= _exact.exact_limit(g.dtype, 3):
    return _exact.separate(g + 1, length, -1.0) / 2
  return ((g + 1) * length - 1) / 2


def _to_reflect(g: Any, u: Any, length: int, cfg: _Config) -> Any:
  """The pixel coordinate ``u`` of ``g`` made ready for ``_reflect``: NaN where ``g`` is not
  finite, and where ``g`` is finite but so far outside that ``u`` overflowed (1e38 on five
  pixels), the coordinate of ``fmod(g, 4)``: the reflection's period is 4 in normalised units
  (two spans) and fmod is exact, so that point reads what the exact ``g`` reflects to."""
  far = jnp.isfinite(g) & ~jnp.isfinite(u)
  u = jnp.where(far, _denormalize(jnp.fmod(g, 4), length, cfg), u)
  return jnp.where(jnp.isfinite(u), u, jnp.nan)


def _reflect(u: Any, length: int, align_corners: bool) -> Any:
  """``u`` reflected about the borders until inside them (PyTorch's reflect_coordinates)."""
  lo, hi = (0.0, length - 1.0) if align_corners else (-0.5, length - 0.5)
  span = hi - lo
  if span <= 0:  # one pixel under align_corners: every coordinate but NaN reads it
    return jnp.where(jnp.isnan(u), u, jnp.zeros_like(u))
  v = jnp.abs(u - lo)
  extra = jnp.fmod(v, span)
  flips = jnp.floor(_interp.divide(v, span))  # an exact multiple of span reflects as torch does
  return jnp.where(jnp.fmod(flips, 2) == 0, lo + extra, hi - extra)


def _clip_to_axis(u: Any, length: int) -> Any:
  """``u`` clipped into ``[0, L - 1]`` (border and reflection padding). Its derivative is 1
  strictly inside and 0 on the borders and beyond: PyTorch's clip_coordinates_set_grad counts
  the borders as out of bounds (``jnp.clip`` would split the derivative there)."""
  inside = (u > 0) & (u < length - 1)
  return jnp.where(inside, u, jax.lax.stop_gradient(jnp.clip(u, 0, length - 1)))


def _axis_coordinate(g: Any, length: int, cfg: _Config) -> Any:
  """The pixel coordinate of ``g`` on one axis, padded as the mode reads it: clipped (zeros
  padding, cubic) or clipped/reflected into the input (nearest and linear with border or
  reflection padding); NaN where the sample is NaN."""
  u = _denormalize(g, length, cfg)
  pad = cfg.padding
  if pad is PaddingMode.REFLECTION:
    u = _to_reflect(g, u, length, cfg)
  elif pad is PaddingMode.ZEROS or cfg.mode is Mode.CUBIC:
    u = jnp.clip(u, -_FAR, length - 1 + _FAR)
  if cfg.mode is not Mode.CUBIC:
    if pad is PaddingMode.BORDER:
      u = _clip_to_axis(u, length)
    elif pad is PaddingMode.REFLECTION:
      u = _clip_to_axis(_reflect(u, length, cfg.align_corners), length)
  return u


def _reads_outside(cfg: _Config) -> bool:
  """Whether a tap may fall outside the input (every mode but cubic with border or reflection
  padding, whose taps are clipped or reflected into it)."""
  return not (cfg.mode is Mode.CUBIC and cfg.padding is not PaddingMode.ZEROS)


def _axis_taps(g: Any, length: int, cfg: _Config) -> tuple[Any, Any, Any]:
  """(int32 indices (..., K) inside [0, L), -1 for a tap outside the input or of a NaN point
  where ``_reads_outside``; weights (..., K), 0 for those taps; NaN flag (...)) of one axis."""
  u = _axis_coordinate(g, length, cfg)
  pad = cfg.padding
  bad = jnp.isnan(u)
  u = jnp.where(bad, 0, u)
  if cfg.mode is Mode.NEAREST:
    idx = jnp.round(u)[..., None]
    w = jnp.ones_like(idx)
  else:
    first, w = _interp.taps(jnp, cfg.mode.value, u)
    idx = first[..., None] + jnp.arange(w.shape[-1], dtype=u.dtype).reshape(
        (1,) * first.ndim + (-1,))
    if cfg.mode is Mode.CUBIC and pad is PaddingMode.BORDER:
      idx = jnp.clip(idx, 0, length - 1)
    elif cfg.mode is Mode.CUBIC and pad is PaddingMode.REFLECTION:
      idx = jnp.clip(jnp.round(_reflect(idx, length, cfg.align_corners)), 0, length - 1)
  inside = (idx >= 0) & (idx <= length - 1) & ~bad[..., None]
  w = jnp.where(inside, w, 0)
  idx = jnp.where(inside, idx, -1) if _reads_outside(cfg) else jnp.clip(idx, 0, length - 1)
  return idx.astype(jnp.int32), w, bad


def _uses_blocks(cfg: _Config) -> bool:
  """Whether each point's taps form one contiguous block of a padded input (the fast path)."""
  return cfg.mode is Mode.LINEAR or (cfg.mode is Mode.CUBIC
                                     and cfg.padding is not PaddingMode.REFLECTION)


def _block_axis(g: Any, length: int, cfg: _Config, p: int) -> tuple[Any, Any, Any]:
  """(block start in the input padded by ``p``, weights (..., K), NaN flag) of one axis.

  Linear: the coordinate is clipped/reflected as in ``_axis_taps``. Cubic with border padding:
  the input is padded with its edge values, and a coordinate beyond two pixels outside reads
  the edge pixel with every tap, so it is clipped to ``[-2, L + 1]`` (same value, zero
  gradient). A block whose start falls outside the padded input has every tap outside the
  input; those weights are zero (zeros padding), so clipping the start changes nothing.
  """
  u = _denormalize(g, length, cfg)
  pad = cfg.padding
  if cfg.mode is Mode.LINEAR and pad is PaddingMode.BORDER:
    u = _clip_to_axis(u, length)
  elif cfg.mode is Mode.LINEAR and pad is PaddingMode.REFLECTION:
    u = _to_reflect(g, u, length, cfg)
    u = _clip_to_axis(_reflect(u, length, cfg.align_corners), length)
  elif pad is PaddingMode.BORDER:
    u = jnp.clip(u, -2.0, length + 1.0)
  else:
    u = jnp.clip(u, -_FAR, length - 1 + _FAR)
  bad = jnp.isnan(u)
  u = jnp.where(bad, 0, u)
  first, w = _interp.taps(jnp, cfg.mode.value, u)
  k = w.shape[-1]
  taps = first[..., None] + jnp.arange(k, dtype=u.dtype).reshape((1,) * first.ndim + (-1,))
  keep = ~bad[..., None]
  if not (cfg.mode is Mode.CUBIC and pad is PaddingMode.BORDER):
    keep = keep & (taps >= 0) & (taps <= length - 1)
  w = jnp.where(keep, w, 0)
  if p:
    return (jnp.clip(first, -p, length + p - k) + p).astype(jnp.int32), w, bad
  # unpadded (length >= K): the block starts inside the input, and each of its K slots takes
  # the weights of the taps that read it (a clipped tap reads the edge pixel with border
  # padding; a tap outside the input has weight 0 with the other paddings)
  start = jnp.clip(first, 0, length - k)
  if cfg.mode is Mode.CUBIC and pad is PaddingMode.BORDER:
    taps = jnp.clip(taps, 0, length - 1)
  slots = start[..., None] + jnp.arange(k, dtype=u.dtype).reshape((1,) * start.ndim + (-1,))
  # summed with _fused_sum.sum_last: a jnp.sum here would send the fusion that multiplies these
  # weights by the cotangent's rows (in the input's gradient) to XLA's YNNPACK path
  w = _fused_sum.sum_last(jnp.where(taps[..., None, :] == slots[..., :, None], w[..., None, :], 0))
  return start.astype(jnp.int32), w, bad


# Bytes of gathered blocks per chunk of points: a chunk's blocks (and under differentiation
# their cotangents) stay small, so a call's temporaries do not grow with the number of points.
_CHUNK_BYTES = 1 << 21


def _block_chunk(xp: jax.Array, g: jax.Array, cfg: _Config, spatial: tuple[int, ...],
                 k: int, p: int, c: int) -> jax.Array:
  """(N, M, C) samples of the points ``g`` (N, M, r) from the padded channels-last input
  ``xp``, its innermost axis and the C channels merged into one axis (N, *S[:-1], S[-1] * C)."""
  r = len(spatial)
  starts: list[Any] = []
  weight: Any = jnp.ones(g.shape[:2], xp.dtype)
  for a in range(r):  # axis order: grid[..., r - 1 - a] is axis a
    start, w, _ = _block_axis(g[..., r - 1 - a], spatial[a], cfg, p)
    starts.append(start)
    weight = weight[..., None] * w.reshape(w.shape[:2] + (1,) * a + (k,))
  st = jnp.stack(starts, axis=-1)                                           # (N, M, r)

  def one(xi: jax.Array, s: jax.Array) -> jax.Array:
    start = tuple(s[a] for a in range(r - 1)) + (s[r - 1] * c,)
    return jax.lax.dynamic_slice(xi, start, (k,) * (r - 1) + (k * c,))

  blk = jax.vmap(jax.vmap(one, in_axes=(None, 0)))(xp, st)                  # (N, M, K.., K*C)
  blk = blk.reshape(blk.shape[:-1] + (k, c))                                # (N, M, K.., C)
  return jnp.sum(weight[..., None] * blk, axis=tuple(range(2, 2 + r)))


def _blocks(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, C, M) samples from one K**r block gather per point of a padded channels-last input
  (``_block_rows``), NaN where ``bad`` (N, M)."""
  return _nan_at(bad, _block_rows(x, g, cfg, cdt)).transpose(0, 2, 1)


@dataclasses.dataclass(frozen=True)
class _BlockLayout:
  """How ``_block_rows`` reads an input: blocks of ``k`` taps per axis from the input padded by
  ``p``, as ``xm_shape`` (its innermost axis and the channels merged), in ``chunks`` chunks of
  ``mc`` points."""
  k: int
  p: int
  mc: int
  chunks: int
  xm_shape: tuple[int, ...]


def _block_layout(x_shape: tuple[int, ...], m: int, cfg: _Config, cdt: Any) -> _BlockLayout:
  n, c, *spatial = x_shape
  r = len(spatial)
  k = 2 if cfg.mode is Mode.LINEAR else 4
  # an input with every axis at least K long is read unpadded (see _block_axis)
  p = 0 if min(spatial) >= k else 1 if cfg.mode is Mode.LINEAR else 4
  mc = max(1, min(m, _CHUNK_BYTES // max(1, n * k ** r * c * jnp.dtype(cdt).itemsize)))
  padded = [s + 2 * p for s in spatial]
  return _BlockLayout(k, p, mc, -(-m // mc), (n, *padded[:-1], padded[-1] * c))


def _block_input(x: jax.Array, cfg: _Config, cdt: Any, lay: _BlockLayout) -> jax.Array:
  """``x`` (N, C, *S) channels-last, padded by ``lay.p``, in the layout ``lay.xm_shape``. The
  innermost axis and the channels read as one axis (a block's K * C contiguous values), so that
  the transpose is a scatter-add with one window axis fewer, which XLA's CPU runs faster (32
  chunks of the benchmark's bilinear backward: 11.4 ms against 17.6). The merge is outside the
  chunks' loop, so that the cotangent the loop carries has the scatter's shape and XLA adds
  each chunk into it in place."""
  r = x.ndim - 2
  edge = cfg.mode is Mode.CUBIC and cfg.padding is PaddingMode.BORDER
  xp = jnp.moveaxis(x, 1, -1).astype(cdt)                                   # (N, *S, C)
  if lay.p:
    xp = jnp.pad(xp, [(0, 0)] + [(lay.p, lay.p)] * r + [(0, 0)],
                 mode="edge" if edge else "constant")
  return xp.reshape(lay.xm_shape)


def _block_rows(x: jax.Array, g: jax.Array, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, M, C) samples from one K**r block gather per point of a padded channels-last input.

  The points are taken in chunks (every batch element in each, so a batch-sharded input needs
  no collective) by a ``lax.map`` whose body is rematerialised: the backward pass gathers each
  chunk's blocks again instead of keeping every point's block as a residual, and adds the
  chunk's block cotangents into one padded input cotangent.
  """
  n, c, *spatial = x.shape
  m = g.shape[1]
  lay = _block_layout(tuple(x.shape), m, cfg, cdt)
  xm = _block_input(x, cfg, cdt, lay)
  body = jax.checkpoint(lambda gc: _block_chunk(xm, gc, cfg, tuple(spatial), lay.k, lay.p, c))
  if lay.chunks == 1:
    return body(g)                                                          # (N, M, C)
  gs = _chunked_points(g, lay)
  out = jax.lax.map(body, gs.transpose(1, 0, 2, 3))                         # (T, N, Mc, C)
  return out.transpose(1, 0, 2, 3).reshape(n, lay.chunks * lay.mc, c)[:, :m]


def _chunked_points(a: jax.Array, lay: _BlockLayout) -> jax.Array:
  """``a`` (N, M, ...) padded to whole chunks, as (N, chunks, Mc, ...)."""
  n, m = a.shape[:2]
  pad = [(0, 0), (0, lay.chunks * lay.mc - m)] + [(0, 0)] * (a.ndim - 2)
  return jnp.pad(a, pad).reshape((n, lay.chunks, lay.mc) + a.shape[2:])


def _rows(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, C, M) samples as one row gather per tap from a channels-last input: each tap of each
  point reads the C contiguous values of its pixel. The fastest forward of every mode on
  XLA's CPU, when the gathers read materialised operands (see ``_materialised``). The taps
  enter as per-axis tables, combined in the gathers' loop: for r axes they take r * K values
  per point instead of K**r, which keeps a 3-D call's temporaries smaller."""
  index, weight, _ = _axis_tables(tuple(x.shape), g, cfg, cdt)
  return _samples(cdt, _reads_outside(cfg), _pixel_rows(x, cdt), index, weight, bad)


def _tap_rows(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config,
              cdt: Any) -> jax.Array:
  """(N, C, M) samples as a loop over the taps, each a row gather of the channels-last input:
  the input's tangent of cubic sampling with reflection padding, whose taps do not form blocks.
  Its transpose is a loop of row scatter-adds into one accumulator, one tap at a time, where
  the gathers' own transpose (``_rows``) scatters every tap into zeros of its own and adds
  them up, and one scatter per tap on the (n, c) planes scatters single values. Gradient of
  sum(y ** 2) in x and grid, bicubic reflection on 8x32x128x128: 109 ms against 182-208 for
  the row gathers' transpose and 435 for the planes' (PyTorch 128-136); on 8x32x64x64, 11-12
  ms against 40-44 and 108 (PyTorch 28-30; docs/PERFORMANCE.md)."""
  flat, weight, _ = _tap_table(tuple(x.shape), g, cfg, cdt)
  xt = _pixel_rows(x, cdt)

  def tap(acc: Any, tables: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
    index, w = tables
    v = w[..., None] * row_gather(xt, index)
    return v if acc is None else acc + v, None

  # The first tap starts the sum (zeros would not vary over shard_map's manual axes as the
  # loop's result does)
  index, w = jnp.moveaxis(flat, -1, 0), jnp.moveaxis(weight, -1, 0)
  out = jax.lax.scan(tap, tap(None, (index[0], w[0]))[0], (index[1:], w[1:]))[0]
  return _nan_at(bad, out).transpose(0, 2, 1)


def _samples(cdt: Any, outside: bool, xt: jax.Array, index: list[jax.Array],
             weight: list[jax.Array], bad: jax.Array) -> jax.Array:
  """(N, C, M): the row gathers of channels-last ``xt`` (N, P, C) at the per-axis tables
  ``index`` and ``weight`` (``_axis_tables``; taps outside the input read zeros where
  ``outside``), NaN where ``bad`` (N, M), as the samples' channels-first layout."""
  return _gather_rows(functools.partial(_weighted_axis_rows, cdt, outside), xt, bad, *index,
                      *weight).transpose(0, 2, 1)


def _nan_at(bad: jax.Array, rows: jax.Array) -> jax.Array:
  """``rows`` (N, M, C) with NaN at the points where ``bad`` (N, M).

  Samples are masked in this channels-last layout, before their transposition to channels
  first: a select fused into XLA's CPU transposition makes it a general loop, about 3 ms slower
  on the benchmark's 8x32x128x128 bilinear forward (10.9 ms against 7.6) than a plain
  transposition of samples masked inside the gathers' loop.
  """
  return jnp.where(bad[..., None], jnp.asarray(jnp.nan, rows.dtype), rows)


def _pixel_rows(x: jax.Array, dtype: Any) -> jax.Array:
  """``x`` (N, C, *S) as (N, P, C) of ``dtype``: one row of C contiguous values per pixel."""
  return jnp.moveaxis(x, 1, -1).astype(dtype).reshape(x.shape[0], math.prod(x.shape[2:]),
                                                     x.shape[1])


def _tap_combinations(tables: list[list[list[Any]]], ops: list[Any]) -> Iterator[tuple[Any, ...]]:
  """For every combination of one tap per axis (the first axis outermost), one value per table
  of ``tables`` (each per axis one array per tap, e.g. the axes' offsets, weights or flags):
  the axes' values combined by that table's op of ``ops`` (e.g. the offsets' addition of
  ``_offset_rule``, ``operator.mul`` for the weights)."""
  for taps in itertools.product(*[range(len(i)) for i in tables[0]]):
    yield tuple(functools.reduce(op, [a[t] for a, t in zip(table, taps)])
                for table, op in zip(tables, ops))


def _offset_rule(p: int, r: int) -> tuple[int, Any]:
  """How a tap outside the input is marked in the flat offsets of images of ``p`` pixels and
  ``r`` axes: (the offset of one axis' tap outside, how two axes' offsets combine), so that a
  tap's combined offset is negative exactly where one of its axes' taps is outside. A plain
  sum where a large negative mark keeps it so without overflowing int32 (images of up to
  2**31 / r pixels); else the mark -1, kept by the combination. A negative offset reads zeros
  (``_tap_rows_at``)."""
  mark = (2 ** 31 - 1) // max(r, 1)
  if p <= mark:
    return -mark, operator.add
  return -1, _add_offsets


def _add_offsets(a: Any, b: Any) -> Any:
  """Two axes' offsets of a tap combined: their sum, or -1 (outside the input) where either is
  negative."""
  return jnp.where((a | b) < 0, -1, a + b)


def _tap_rows_at(xt: jax.Array, flat: jax.Array, outside: bool) -> jax.Array:
  """(N, M..., C): the rows of channels-last ``xt`` (N, P, C) at the taps' flat offsets ``flat``
  (N, M...), and zeros where ``outside`` (``_reads_outside``) for a tap outside the input (a
  negative offset). A tap outside reads no pixel, as in PyTorch, onnxruntime and the
  reference: a weight of 0 on a clipped edge pixel would give 0 * inf = NaN beside an infinite
  pixel, and NaN for a point far outside an image with an infinite edge."""
  if not outside:
    return row_gather(xt, flat)
  rows = row_gather(xt, jnp.maximum(flat, 0))
  return jnp.where(flat[..., None] >= 0, rows, jnp.zeros((), xt.dtype))


def _weighted_axis_rows(cdt: Any, outside: bool, xt: jax.Array, bad: jax.Array,
                        *tables: jax.Array) -> jax.Array:
  """(N, M, C) from per-axis tables (each axis' flat offsets (N, M, K), then each axis'
  weights): for every combination of one tap per axis, the product of the weights times the
  row of ``xt`` (N, P, C) at the combined offset (``_tap_rows_at``); NaN at the points where
  ``bad``."""
  r = len(tables) // 2
  out = jnp.zeros(tables[0].shape[:2] + xt.shape[-1:], cdt)
  per_tap = [[a[..., t] for t in range(a.shape[-1])] for a in tables]
  add = _offset_rule(xt.shape[1], r)[1]
  for flat, w in _tap_combinations([per_tap[:r], per_tap[r:]], [add, operator.mul]):
    out = out + w[..., None] * _tap_rows_at(xt, flat, outside)
  return _nan_at(bad, out)


def _weighted_taps(xt: jax.Array, flat: jax.Array, coef: jax.Array, outside: bool) -> jax.Array:
  """(N, M, C): for every point, the rows of channels-last ``xt`` (N, P, C) at its taps' flat
  offsets ``flat`` (N, M, T), weighted by ``coef`` (N, M, T) and summed over the taps. Linear
  in ``coef``; its transpose (``coef``'s cotangent, (N, M, T)) is each tap's row times the
  cotangent summed over the channels, a ``_fused_sum`` sum that XLA computes with the row
  gather inside its loop."""
  rows = _tap_rows_at(xt, flat, outside)
  return jnp.sum(_fused_sum.broadcast_last(coef, xt.shape[-1]) * rows, axis=2)


def _gather_rows(gather: Any, xt: jax.Array, *tables: jax.Array) -> jax.Array:
  """``gather(xt, *tables)``, the row gathers of channels-last ``xt`` (N, P, C) at the taps
  that ``tables`` (each (N, M, ...)) describe, giving (N, M, C): behind ``_materialised`` on
  the CPU when there is enough work to pay for it."""
  n, m = tables[0].shape[:2]
  return _cpu_materialised(gather, n * m * xt.shape[-1], xt, *tables)


def _cpu_materialised(fn: Any, work: int, *args: jax.Array) -> Any:
  """``fn(*args)``, behind ``_materialised`` on the CPU where ``work`` (elements) pays for the
  conditional's fixed cost."""
  if work < _MATERIALISE_MIN:
    return fn(*args)
  return jax.lax.platform_dependent(*args, cpu=functools.partial(_materialised, fn), default=fn)


# Samples (points x channels) from which the row gathers run behind ``_materialised``: below it
# the conditional's fixed cost outweighs the gain.
_MATERIALISE_MIN = 1 << 16


def _materialised(fn: Any, *args: jax.Array) -> Any:
  """``fn(*args)`` with its operands and results materialised, for XLA's CPU fusion.

  Left to itself, XLA fuses the producers of a gather's operands into the gather (the
  channels-last transpose of the input, so that every gathered value is read across the
  channel planes, and the tap arithmetic, recomputed for every channel) and the gather into
  its consumer (the transpose back to channels-first), which is several times slower than the
  gather alone. The branches of a conditional take materialised operands and give materialised
  results, so ``fn`` runs as the branch of a conditional whose predicate is true but hidden
  from XLA's simplifier by an optimization barrier; the other branch gives zeros and never
  runs. The predicate is a constant, not data: under ``vmap`` it stays unbatched (the
  conditional stays a conditional), and under SPMD sharding it needs no collective. Should a
  later XLA fold it, the result is the same, only slower.
  """
  shapes = jax.eval_shape(fn, *args)
  return jax.lax.cond(_hidden_true(), fn,
                      lambda *_: jax.tree.map(_checks.zeros_like_type, shapes),
                      *args)


def _hidden_true() -> jax.Array:
  """A predicate that is true, hidden from XLA's simplifier (``_materialised``): a conditional
  on it stays a conditional, whose branch runs only once its operands exist."""
  return jax.lax.optimization_barrier(np.int32(1)) > 0


def _axis_tables(x_shape: tuple[int, ...], g: jax.Array, cfg: _Config,
                 cdt: Any) -> tuple[list[jax.Array], list[jax.Array], jax.Array]:
  """The taps of every point of ``g`` (N, M, r) along each axis, innermost first: (per axis,
  its taps' offsets (N, M, K) in the flat image, int32: index times the axis' stride, or the
  mark of ``_offset_rule`` for a tap outside the input; per axis, their weights (N, M, K), 0
  for a tap outside the input; the NaN flag (N, M))."""
  n, _, *spatial = x_shape
  r = len(spatial)
  mark = _offset_rule(math.prod(spatial), r)[0]
  index, weight = [], []
  bad = jnp.zeros((n, g.shape[1]), bool)
  stride = 1
  for a in range(r - 1, -1, -1):  # innermost axis first: grid[..., 0] is the innermost axis
    idx, w, nan_a = _axis_taps(g[..., r - 1 - a], spatial[a], cfg)
    index.append(jnp.where(idx < 0, mark, idx * stride))
    weight.append(w.astype(cdt))
    bad = bad | nan_a
    stride *= spatial[a]
  return index, weight, bad


def _tap_table(x_shape: tuple[int, ...], g: jax.Array, cfg: _Config,
               cdt: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Every tap of every point of ``g`` (N, M, r): (its pixel's flat index (N, M, T) within its
  image, int32, negative for a tap outside the input; its weight (N, M, T), 0 for a tap
  outside; the NaN flag (N, M))."""
  index, weight, bad = _axis_tables(x_shape, g, cfg, cdt)
  add = _offset_rule(math.prod(x_shape[2:]), len(x_shape) - 2)[1]
  return _over_taps(index, add), _over_taps(weight, operator.mul), bad


def _over_taps(tables: list[jax.Array], op: Any) -> jax.Array:
  """(N, M, T): ``op`` over the axes of one value per axis from ``tables`` (each (N, M, K)),
  for every combination of one tap per axis, the first axis outermost (flat offsets with
  ``_offset_rule``'s addition, weights with ``operator.mul``)."""
  out = tables[0]
  for t in tables[1:]:
    taps = out.shape[-1] * t.shape[-1]  # explicit: a -1 cannot be inferred from zero size
    out = op(out[..., :, None], t[..., None, :]).reshape(out.shape[:2] + (taps,))
  return out


def _linear_axis_taps(u: Any, length: int,
                      cdt: Any) -> tuple[list[Any], list[Any], list[Any]]:
  """(int32 indices clipped into [0, L), weights, whether the tap is inside the input (and its
  coordinate not NaN)) of the two linear taps of one axis at the coordinates ``u`` of
  ``_axis_coordinate``, one array per tap: ``_axis_taps``' taps for linear sampling (there a
  tap outside has weight 0; here the flag says so), computed tap by tap with integer indices so
  that XLA fuses them into ``_fused_linear``'s loop (stacked as ``_axis_taps`` stacks them, and
  in floating point, the trilinear forward took 2.2 to 3.8 times as long as with these: every
  slice of a stack recomputes the stack's whole arithmetic inside the loop). ``u`` is finite
  or NaN, and within ``_FAR`` pixels of the input, so its floor fits in int32."""
  bad = jnp.isnan(u)
  u = jnp.where(bad, 0, u)
  first = jnp.floor(u)
  frac = u - first
  base = first.astype(jnp.int32)
  index, weight, inside = [], [], []
  for t, w in enumerate((1 - frac, frac)):
    idx = base + t
    inside.append((idx >= 0) & (idx <= length - 1) & ~bad)
    index.append(jnp.clip(idx, 0, length - 1))
    weight.append(w.astype(cdt))
  return index, weight, inside


# Bilinear sampling runs as _fused_linear with at most _FUSED_CHANNELS channels, with at least
# _FUSED_TABLE_CHANNELS (the loop then reads per-point tap tables) or from planes of at least
# _FUSED_PLANE pixels; else as row gathers (_uses_fused_linear). As the primal of the gradient
# in x alone, from planes of at least _FUSED_PLANE_JVP pixels: on 8x32x128x128 that gradient
# took 1.6-1.8 times as long with the fused loop's primal as with the row gathers' (the same
# with an optimization barrier on it; docs/PERFORMANCE.md).
_FUSED_CHANNELS = 4
_FUSED_TABLE_CHANNELS = 8
_FUSED_PLANE = 96 * 96
_FUSED_PLANE_JVP = 256 * 256


def _uses_fused_linear(cfg: _Config, x_shape: tuple[int, ...], jvp_primal: bool = False) -> bool:
  """Whether the forward is ``_fused_linear`` rather than the row gathers (``_rows``), as
  measured on the CPU (interleaved in one process, docs/PERFORMANCE.md): trilinear sampling
  always (0.74-0.85 of the row gathers' time on 2x16x32x64x64); bilinear with few channels,
  where the rows are short (8x1x128x128 0.51, 8x3x128x128 0.72, 8x3x512x512 0.41,
  8x4x256x256 0.63); with ``_FUSED_TABLE_CHANNELS`` channels or more from any plane, where
  the loop reads per-point tap tables (0.64-0.98 of the row gathers' time, two threads, on
  8x8x64x64, 8x16x32x32, 8x16x64x64, 8x32x64x64, 4x32x48x48, 4x32x80x80, 8x32x80x80,
  8x64x64x64, 16x64x32x32, 4x128x32x32, 8x256x16x16 and 2x512x8x8; the loop without tables
  took 1.5-1.9 of their time on 4x32x80x80); or from planes of 96 x 96 pixels or more (the
  loop without tables 0.54-0.94 of the row gathers' time on 8x16x128x128, 8x64x128x128,
  2x128x128x128, 8x8x128x128, 8x16x96x96, 8x64x96x96 and 2x256x96x96). As the primal of the
  gradient in x alone (``jvp_primal``), only with few channels or from planes of 256 x 256
  (``_FUSED_PLANE_JVP``). One axis or more than three: not measured, the row gathers."""
  _, c, *spatial = x_shape
  if cfg.mode is not Mode.LINEAR:
    return False
  if len(spatial) == 3:
    return True
  if len(spatial) != 2:
    return False
  if c <= _FUSED_CHANNELS:
    return True
  if jvp_primal:
    return math.prod(spatial) >= _FUSED_PLANE_JVP
  return c >= _FUSED_TABLE_CHANNELS or math.prod(spatial) >= _FUSED_PLANE


def _fused_linear(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config,
                  cdt: Any) -> jax.Array:
  """(N, C, M) linear samples as one XLA loop fusion over the channels-first output, as
  ``jax.scipy.ndimage.map_coordinates`` compiles: every output element computes its taps'
  indices and weights from its point's per-axis coordinates and gathers each tap straight from
  the input, so there is no channels-last copy of the input, no transposition of the samples
  and no sample-sized temporary. The per-axis coordinates (``_axis_coordinate``, the clipping
  and reflection) are materialised first (behind ``_materialised`` on the CPU): inside the loop
  they would be computed again for every channel. The sum runs over the taps in the order of
  ``_weighted_axis_rows`` (innermost axis first), with the same weights and indices, so that the
  samples are those of ``_rows``: a tap outside the input reads 0 in place of its clipped pixel (so
  does a tap of an axis whose coordinate is NaN; this select replaces the one that zeroed the
  weight, so the loop does no more work for it), and the samples are NaN where ``bad`` (N, M)
  (``_nan_points``). The gathers are batched over the images (operand batching dimensions), so that
  a batch-sharded input needs no collective. Bilinear sampling of ``_FUSED_TABLE_CHANNELS`` or more
  channels reads each point's four taps from tables computed once per point and materialised,
  instead of computing them again for every channel inside the loop: the flat offset, negative for a
  tap outside the input as ``_offset_rule`` marks it, and the weight. The same samples, bitwise (the
  same weights, products and order of the sum). On the CPU, interleaved in one process against the
  loop without tables (docs/PERFORMANCE.md): 0.81-0.87 on 8x32x128x128 (two threads, three runs;
  0.90 on one thread), 0.78-1.12 on 2x128x128x128 and 0.82-1.04 on 8x16x96x96 (mixed); with few
  channels the tables cost more than they save (8x3x128x128 1.4, 8x1x256x256 2.1 on one thread;
  8x6x128x128 1.16), and trilinear's eight taps too (2x16x32x64x64 1.3-1.4)."""
  n, c, *spatial = x.shape
  r = len(spatial)
  m = g.shape[1]

  def axis_taps(us: list[jax.Array]) -> list[list[list[jax.Array]]]:
    # per axis (innermost first, as the grid's) and tap: flat offsets, weights, inside flags
    index: list[list[jax.Array]] = []
    weight: list[list[jax.Array]] = []
    inside: list[list[jax.Array]] = []
    stride = 1
    for j, u in enumerate(us):
      length = spatial[r - 1 - j]
      idx, ws, ins = _linear_axis_taps(u, length, cdt)
      index.append([i * stride for i in idx])
      weight.append(ws)
      inside.append(ins)
      stride *= length
    return [index, weight, inside]

  def coordinates(b: jax.Array) -> list[jax.Array]:
    return [_axis_coordinate(b[..., j], spatial[r - 1 - j], cfg) for j in range(r)]

  taps: Iterable[tuple[Any, ...]]
  if r == 2 and c >= _FUSED_TABLE_CHANNELS:
    mark, add = _offset_rule(math.prod(spatial), r)

    def tables(b: jax.Array, nan: jax.Array) -> tuple[list[Any], list[Any], jax.Array]:
      index, weight, inside = axis_taps(coordinates(b))
      marked = [[jnp.where(ok, i, mark) for i, ok in zip(ix, ins)]
                for ix, ins in zip(index, inside)]
      flats, wts = zip(*_tap_combinations([marked, weight], [add, operator.mul]))
      return list(flats), list(wts), nan

    flats, wts, bad = _cpu_materialised(tables, n * m * c, g, bad)
    taps = [(jnp.maximum(f, 0), w, f >= 0) for f, w in zip(flats, wts)]
  else:
    # the coordinates materialised; the flags pass through, so that the loop reads them rather
    # than the grid's three coordinates
    us, bad = _cpu_materialised(lambda b, nan: (coordinates(b), nan), n * m * c, g, bad)
    taps = _tap_combinations(axis_taps(us), [operator.add, operator.mul, operator.and_])
  xf = x.astype(cdt).reshape(n, c, math.prod(spatial))
  out = jnp.zeros((n, c, m), cdt)
  for flat, w, ok in taps:
    rows = _gather_planes(xf, flat)
    out = out + w[:, None, :] * jnp.where(ok[:, None, :], rows, jnp.zeros((), cdt))
  return jnp.where(bad[:, None, :], jnp.asarray(jnp.nan, cdt), out)


def _gather_planes(xf: jax.Array, flat: jax.Array) -> jax.Array:
  """(N, C, M): ``xf`` (N, C, P) at the flat offsets ``flat`` (N, M), in [0, P), of every
  channel's plane; batched over the images (operand batching dimensions), so that a
  batch-sharded input needs no collective."""
  dims = jax.lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(2,),
                                        start_index_map=(2,), operand_batching_dims=(0,),
                                        start_indices_batching_dims=(0,))
  return jax.lax.gather(xf, flat[..., None], dims, (1, xf.shape[1], 1),
                        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _forward(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config, cdt: Any,
             jvp_primal: bool = False) -> jax.Array:
  """(N, C, M) linear/cubic samples: ``_fused_linear`` where it is faster (``_uses_fused_linear``;
  ``jvp_primal``: as the primal of the gradient in x alone), else ``_rows``."""
  if _uses_fused_linear(cfg, tuple(x.shape), jvp_primal):
    return _fused_linear(x, g, bad, cfg, cdt)
  return _rows(x, g, bad, cfg, cdt)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _interpolate(x: jax.Array, g: jax.Array, bad: jax.Array, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, C, M) linear/cubic samples: row gathers, or the fused loop (``_forward``).
  Under jvp (and so under grad) the tangent is a sum of two parts, each present only when its
  input varies: the grid's from row gathers that also give the samples (``_grid_jvp``), the
  input's from the block formulation (or the row gathers), whose transpose is the faster scatter.
  The samples are NaN at the points where ``bad`` (N, M); there the tangent is 0."""
  return _forward(x, g, bad, cfg, cdt)


def _interpolate_jvp(cfg: _Config, cdt: Any, primals: Any, tangents: Any) -> Any:
  x, g, bad = primals
  tx, tg, _ = tangents

  def x_part() -> jax.Array:  # the input's part: its transpose is the scatter
    if _uses_blocks(cfg):
      return _input_tangent_p.bind(*_vary_alike(tx, g), cfg=cfg, cdt=np.dtype(cdt))
    return jax.jvp(lambda a: _tap_rows(a, g, bad, cfg, cdt), (x,), (tx,))[1]

  # JAX calls the rule only when some tangent is nonzero
  if isinstance(tg, SymbolicZero):
    return _forward(x, g, bad, cfg, cdt, jvp_primal=True), x_part()
  if isinstance(tx, SymbolicZero):
    return _grid_jvp(x, g, bad, tg, cfg, cdt)  # the grid's part: row gathers, no scatter
  if _uses_blocks(cfg):  # both parts, as one primitive whose transpose orders them
    out, xt, flat, coef = _grid_parts(x, g, bad, tg, cfg, cdt)
    return out, _tangent_p.bind(*_vary_alike(tx, coef, xt, flat, g), cfg=cfg,
                                cdt=np.dtype(cdt))
  out, tangent = _grid_jvp(x, g, bad, tg, cfg, cdt)
  return out, tangent + x_part()


_interpolate.defjvp(_interpolate_jvp, symbolic_zeros=True)


def _grid_jvp(x: jax.Array, g: jax.Array, bad: jax.Array, tg: jax.Array, cfg: _Config,
              cdt: Any) -> tuple[jax.Array, jax.Array]:
  """(samples, their tangent with respect to the grid), both (N, C, M) (``_grid_parts``)."""
  out, xt, flat, coef = _grid_parts(x, g, bad, tg, cfg, cdt)
  weighted = functools.partial(_weighted_taps, outside=_reads_outside(cfg))
  tangent = jax.checkpoint(weighted)(xt, flat, coef)
  # 0 where the samples are NaN (whatever the grid's tangent there), masked channels-last
  return out, jnp.where(bad[..., None], jnp.zeros((), cdt), tangent).transpose(0, 2, 1)


def _grid_parts(x: jax.Array, g: jax.Array, bad: jax.Array, tg: jax.Array, cfg: _Config,
                cdt: Any) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """(samples (N, C, M); the channels-last input (N, P, C); the taps' flat offsets (N, M, T);
  the taps' coefficients (N, M, T), linear in the grid's tangent ``tg``): the samples and
  what their tangent with respect to the grid is made of. A tap's weight is the
  product of its axes' weights, so its tangent is a sum over the axes of that product with one
  axis' weight replaced by its derivative, times that axis' grid tangent: per point and tap, a
  coefficient (N, M, T) linear in the grid's tangent. The tangent is the taps' rows weighted by
  those coefficients (``_weighted_taps``, rematerialised). Its transpose, the gradient with
  respect to the grid (e.g. a spatial transformer's theta), is per tap the cotangent's dot
  product with the tap's row: one loop over the points that gathers each row again and sums
  over the channels as it goes, with no sample-sized residual and no scatter. The
  channels-last copy of ``x`` comes from a conditional on the CPU (``_materialised``), so that
  the gathers read its contiguous rows rather than the transposition fused into them.
  """
  # Each axis' weights depend on its own coordinate alone, so one tangent of ones gives every
  # axis' derivative.
  (index, weight, _), (_, slope, _) = jax.jvp(
      lambda b: _axis_tables(tuple(x.shape), b, cfg, cdt), (g,), (jnp.ones_like(g),))
  xt = _cpu_materialised(lambda a: _pixel_rows(a, cdt), x.size, x)
  out = _samples(cdt, _reads_outside(cfg), xt, index, weight, bad)
  # the tables run innermost axis first, as the grid's coordinates do
  parts = [_over_taps(weight[:j] + [d] + weight[j + 1:], operator.mul)
           for j, d in enumerate(slope)]
  if cfg.mode is Mode.LINEAR:
    # tg[..., j] spread over the taps by broadcast_last, whose transpose is a sum over them
    # that XLA keeps in one loop fusion with its producers: a broadcast tg[..., j, None]
    # transposes to a reduction that XLA's CPU backend hands to its YNNPACK fusion, about
    # 5 ms per axis on the benchmark's 8x128x128 grid, on the path to the scatter (jax.profiler).
    # Cubic's 16 taps run no faster that way.
    k = parts[0].shape[-1]
    spread = [_fused_sum.broadcast_last(tg[..., j], k) for j in range(len(parts))]
  else:
    spread = [tg[..., j, None] for j in range(len(parts))]
  coef = functools.reduce(operator.add, [a * t for a, t in zip(parts, spread)])
  # The taps' flat offsets materialised (behind the CPU's conditional): fused into the loop of
  # the transpose, they would be computed again from the grid for every channel of every tap.
  add = _offset_rule(math.prod(x.shape[2:]), x.ndim - 2)[1]
  flat = _cpu_materialised(lambda *i: _over_taps(list(i), add), x.size, *index)
  return out, xt, flat, coef


# --- the tangent with respect to both the input and the grid ------------------------------------
#
# Under differentiation in both, the samples' tangent is the grid's part (``_weighted_taps``)
# plus the input's (``_block_rows``). Left to JAX, their transposes are independent, and XLA's
# default (concurrency-optimized) CPU scheduler starts both early: the input gradient's
# accumulator and a copy of the cotangent in the chunks' layout were alive during the grid's
# dot-product loop, with the channels-last input and the samples, a 57 MiB block of temporaries
# on the benchmark's 8x32x128x128 bilinear backward (docs/PERFORMANCE.md). As one primitive its
# transpose is written here: the grid's part first; then, behind a conditional that takes its
# result (on the CPU, as in ``_materialised``), the input's scatter loop, whose cotangent is
# scaled by a one that the conditional gives, so that XLA's scheduler cannot start it before
# the grid's loop ends; its accumulator starts from zeros that a second conditional gives
# after the cotangent's copy (``_block_rows_transpose``): 25 MiB.

_tangent_p = Primitive("jaxops_grid_sample_tangent")


def _nan_points(g: jax.Array, cfg: _Config, spatial: Sequence[int]) -> jax.Array:
  """(N, M): the points whose samples are NaN (a NaN coordinate; with reflection padding, an
  infinite one too, except on an axis of one pixel, ``_one_pixel``), as an elementwise or over
  the grid's axes that XLA fuses into its consumers. ``spatial``: the input's spatial lengths."""
  r = g.shape[-1]
  flags = [jnp.isnan(g[..., j]) for j in range(r)]
  if cfg.padding is PaddingMode.REFLECTION:
    flags += [jnp.isinf(g[..., j]) for j in range(r) if not _one_pixel(spatial[r - 1 - j], cfg)]
  return functools.reduce(operator.or_, flags)


def _spatial(a: Any) -> tuple[int, ...]:
  """The spatial lengths of ``a`` (N, C, *spatial), an array or a transpose's undefined primal."""
  return tuple((a.aval if ad.is_undefined_primal(a) else jax.typeof(a)).shape[2:])


def _zero_at_nan_points(v: jax.Array, g: jax.Array, cfg: _Config, cdt: Any,
                        spatial: Sequence[int]) -> jax.Array:
  """``v`` (N, M, C) with 0 at the points of ``g`` whose samples are NaN (``_nan_points``)."""
  return jnp.where(_nan_points(g, cfg, spatial)[..., None], jnp.zeros((), cdt), v)


def _tangent_impl(tx: jax.Array, coef: jax.Array, xt: jax.Array, flat: jax.Array, g: jax.Array,
                  *, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, C, M): the grid's part (taps' rows of ``xt`` weighted by ``coef``) plus the input's
  (``_block_rows`` of ``tx``), 0 at the points whose samples are NaN."""
  rows = _weighted_taps(xt, flat, coef, _reads_outside(cfg)) + _block_rows(tx, g, cfg, cdt)
  return _zero_at_nan_points(rows, g, cfg, cdt, _spatial(tx)).transpose(0, 2, 1)


def _tangent_abstract(tx: Any, coef: Any, xt: Any, flat: Any, g: Any, *, cfg: _Config,
                      cdt: Any) -> Any:
  return _tangent_aval(tx, (tx.shape[0], tx.shape[1], g.shape[1]), cdt)


def _vary_alike(*arrays: jax.Array) -> list[jax.Array]:
  """``arrays``, in ``shard_map``, each cast to vary over every manual mesh axis that one of
  them varies over (JAX's own operations do this to their operands): a primitive's operands
  then vary alike, and the transpose of the cast sums an operand's cotangent over the axes it
  did not vary over (x replicated where the grid is not)."""
  axes: list[frozenset[Any]] = [
      getattr(getattr(jax.typeof(a), "manual_axis_type", None), "varying", frozenset())
      for a in arrays]
  union = frozenset().union(*axes)
  return [a if not union - v else jax.lax.pcast(a, tuple(sorted(union - v)), to="varying")
          for a, v in zip(arrays, axes)]


def _tangent_aval(aval: Any, shape: tuple[int, ...], dtype: Any) -> Any:
  """The aval of a tangent primitive's result, of ``shape`` and ``dtype``, from one of its
  operands' ``aval``: the operands vary alike in ``shard_map`` (``_vary_alike``), so the result
  varies over that operand's manual mesh axes."""
  return aval.update(shape=shape, dtype=dtype, weak_type=False)


def _tangent_jvp(primals: Any, tangents: Any, *, cfg: _Config, cdt: Any) -> Any:
  # (second order) the plain formulation's own derivative
  tx, coef, xt, flat, g = primals
  float_tangents = tuple(ad.instantiate_zeros(t) for i, t in enumerate(tangents) if i != 3)
  return jax.jvp(lambda a, b, c, e: _tangent_impl(a, b, c, flat, e, cfg=cfg, cdt=cdt),
                 (tx, coef, xt, g), float_tangents)


def _tangent_transpose(ct: Any, tx: Any, coef: Any, xt: Any, flat: Any, g: Any, *,
                       cfg: _Config, cdt: Any) -> list[Any]:
  x_undefined, coef_undefined = ad.is_undefined_primal(tx), ad.is_undefined_primal(coef)
  if type(ct) is ad.Zero:
    return [ad.Zero(tx.aval) if x_undefined else None,
            ad.Zero(coef.aval) if coef_undefined else None, None, None, None]
  ctm = _zero_at_nan_points(ct.transpose(0, 2, 1), g, cfg, cdt, _spatial(tx))
  coef_ct, one = None, jnp.ones((), cdt)
  if coef_undefined:
    aval = coef.aval.update(weak_type=False)  # (with its varying mesh axes, in shard_map)
    coef_ct = jax.linear_transpose(lambda c: _weighted_taps(xt, flat, c, _reads_outside(cfg)),
                                   aval)(ctm)[0]
    # (coef_ct, 1), on the CPU from a conditional's branch: what is computed from the one can
    # be scheduled only once coef_ct exists

    def with_one(a: jax.Array) -> tuple[jax.Array, jax.Array]:
      return a, jnp.ones((), cdt)

    coef_ct, one = jax.lax.platform_dependent(
        coef_ct, cpu=functools.partial(_materialised, with_one), default=with_one)
  tx_ct = _block_rows_transpose(ctm * one, g, cfg, cdt, tx.aval) if x_undefined else None
  return [tx_ct, coef_ct, None, None, None]


def _then_zeros(cdt: Any, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(``v`` (T, N, ...), a +0 per image (N,)) from the branch of ``_materialised``'s conditional:
  what is computed from the zeros can be scheduled only once ``v`` exists. The branch reads one
  element of each image (an operand that no branch read would be dropped; one element per
  image, so that a batch-sharded call needs no collective) into a +0 for every value it may
  hold, and returns ``v``, which XLA copies into the conditional's result in the layout the
  loop reads (taking a transposed ``v`` as it is, the branch copied it for its one read)."""
  n = v.shape[1]
  if v.size == 0:
    return v, jnp.zeros((n,), cdt)

  def read(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    e = jnp.sum(jax.lax.slice(a, (0,) * a.ndim, (1, n) + (1,) * (a.ndim - 2)),
                axis=(0,) + tuple(range(2, a.ndim)))
    return a, jnp.where(jnp.isfinite(e), jnp.abs(e * 0), 0).astype(cdt)

  return _materialised(read, v)


def _block_rows_transpose(ctm: jax.Array, g: jax.Array, cfg: _Config, cdt: Any,
                          x_aval: Any) -> jax.Array:
  """The transpose of ``_block_rows`` (the input's gradient) at the cotangent ``ctm``
  (N, M, C): one loop over the chunks of points that adds each chunk's block cotangents into
  accumulators of zeros (``_chunk_loop_p``)."""
  n, c, *spatial = x_aval.shape
  lay = _block_layout(tuple(x_aval.shape), g.shape[1], cfg, cdt)
  # chunk-major, as ``_block_rows``' map stacks them, and through the conditional of
  # ``_then_zeros``, which the accumulators' zeros come from: XLA then keeps the cotangent in
  # the samples' layout in the output's block and makes its chunk-major copy in the
  # conditional, and starts the accumulators only after both (25 MiB of temporaries on the
  # benchmark's bilinear backward, against 33 with the zeros from a conditional after the copy
  # and 39 with the zeros from the grid's conditional)
  gs, cs = (_chunked_points(a, lay).transpose(1, 0, 2, 3) for a in (g, ctm))   # (T, N, Mc, ...)
  cs, zeros = jax.lax.platform_dependent(cs, cpu=functools.partial(_then_zeros, cdt),
                                         default=lambda a: (a, _checks.zeros_like_type(
                                             jax.typeof(a), (n,), cdt)))
  if lay.chunks:
    acc = _chunk_loop_p.bind(*_vary_alike(gs, cs, zeros), cfg=cfg, cdt=np.dtype(cdt),
                             spatial=tuple(spatial), k=lay.k, p=lay.p, rest=lay.xm_shape[1:])
  else:  # no points: nothing to add
    acc = jnp.broadcast_to(zeros.reshape((n,) + (1,) * (len(lay.xm_shape) - 1)), lay.xm_shape)
  return jax.linear_transpose(lambda a: _block_input(a, cfg, cdt, lay),
                              x_aval.update(weak_type=False))(acc)[0]


# --- the chunks' loop of the input's gradient ---------------------------------------------------
#
# XLA's CPU runtime runs a program's (and a loop body's) independent operations on both cores
# only when it has more than 8 of them; below that it runs them one after another
# (``ThunkExecutor``'s ``execute_sequential_num_thunks_threshold``). One scatter-add per chunk
# into one accumulator keeps the loop's body under it, on one core; with one accumulator per
# group of images (image i in group i % 2) the two groups' scatters run side by side.
# Gradient of sum(y ** 2) in x and grid on 8x32x128x128, one process interleaved: bilinear
# 0.84-0.90 of one accumulator's time, bicubic border 0.94 (docs/PERFORMANCE.md). The loop is a
# primitive so that its lowering knows whether the program is compiled for several devices:
# there it keeps one accumulator, since the groups would split a device's images between
# devices wherever a device holds an odd number of them (the partitioner then gathers the
# whole gradient).

_chunk_loop_p = Primitive("jaxops_grid_sample_chunk_loop")

# Groups of images, each with an accumulator of its own, on one device.
_GROUPS = 2


def _chunk_loop(gs: jax.Array, cs: jax.Array, zeros: jax.Array, *, cfg: _Config, cdt: Any,
                spatial: tuple[int, ...], k: int, p: int, rest: tuple[int, ...],
                groups: int = 1) -> jax.Array:
  """(N, *rest): the zeros (N,) plus, for every chunk of points (``gs`` (T, N, Mc, r) and their
  cotangents ``cs`` (T, N, Mc, C)), the transpose of ``_block_chunk`` at its cotangents, added
  into one accumulator per group of ``groups`` images (image i in group i % groups; ``groups``
  divides N)."""
  n, c = cs.shape[1], cs.shape[-1]
  gs, cs, zeros = _vary_alike(gs, cs, zeros)
  xm_aval = _tangent_aval(jax.typeof(cs), (n // groups,) + rest, cdt)
  zg = zeros.reshape(n // groups, groups)
  accs = tuple(jnp.broadcast_to(zg[:, j].reshape((n // groups,) + (1,) * len(rest)),
                                xm_aval.shape) for j in range(groups))

  def body(i: jax.Array, accs: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    gc, cc = (jax.lax.dynamic_index_in_dim(a, i, keepdims=False) for a in (gs, cs))
    gc, cc = (a.reshape((n // groups, groups) + a.shape[1:]) for a in (gc, cc))
    out = []
    for j, acc in enumerate(accs):
      chunk = functools.partial(_block_chunk, g=gc[:, j], cfg=cfg, spatial=spatial, k=k, p=p,
                                c=c)
      out.append(acc + jax.linear_transpose(chunk, xm_aval)(cc[:, j])[0])
    return tuple(out)

  accs = jax.lax.fori_loop(0, gs.shape[0], body, accs)
  return jnp.stack(accs, axis=1).reshape((n,) + rest)


def _image_groups(n: int) -> int:
  """How many accumulators ``_chunk_loop`` adds into on one device: ``_GROUPS`` where they
  divide the N images, else 1."""
  return _GROUPS if n % _GROUPS == 0 else 1


def _chunk_loop_lowering(ctx: Any, gs: Any, cs: Any, zeros: Any, **params: Any) -> Any:
  n = ctx.avals_in[1].shape[1]
  groups = 1 if _fused_sum.partitioned(ctx) else _image_groups(n)
  return mlir.lower_fun(functools.partial(_chunk_loop, groups=groups),
                        multiple_results=False)(ctx, gs, cs, zeros, **params)


def _chunk_loop_abstract(gs: Any, cs: Any, zeros: Any, *, cdt: Any, rest: tuple[int, ...],
                         **_: Any) -> Any:
  return _tangent_aval(cs, (cs.shape[1],) + rest, cdt)


def _chunk_loop_jvp(primals: Any, tangents: Any, **params: Any) -> Any:
  # (second order) the one-accumulator loop's own derivative
  return jax.jvp(functools.partial(_chunk_loop, **params), primals,
                 tuple(ad.instantiate_zeros(t) for t in tangents))


def _chunk_loop_transpose(ct: Any, gs: Any, cs: Any, zeros: Any, **params: Any) -> list[Any]:
  # linear in the cotangents and the zeros; the points are data
  linear = [ad.is_undefined_primal(a) for a in (cs, zeros)]
  if type(ct) is ad.Zero:
    return [None] + [ad.Zero(a.aval) if u else None for a, u in zip((cs, zeros), linear)]
  avals = [a.aval if u else jax.typeof(a) for a, u in zip((cs, zeros), linear)]
  cts = jax.linear_transpose(lambda c, z: _chunk_loop(gs, c, z, **params), *avals)(ct)
  return [None] + [t if u else None for t, u in zip(cts, linear)]


def _chunk_loop_batch(args: Any, dims: Any, **params: Any) -> tuple[jax.Array, int]:
  # the mapped axis folds into the images: axis 1 of the chunks, axis 0 of the zeros
  gs, cs, zeros = _checks.batch_first(args, dims)
  b = zeros.shape[0]
  gs, cs = (jnp.moveaxis(a, 0, 1).reshape((a.shape[1], -1) + a.shape[3:]) for a in (gs, cs))
  out = _chunk_loop_p.bind(gs, cs, zeros.reshape(-1), **params)
  return out.reshape((b, -1) + out.shape[1:]), 0


_chunk_loop_p.def_impl(_chunk_loop)
_chunk_loop_p.def_abstract_eval(_chunk_loop_abstract)
mlir.register_lowering(_chunk_loop_p, _chunk_loop_lowering)
ad.primitive_jvps[_chunk_loop_p] = _chunk_loop_jvp
ad.primitive_transposes[_chunk_loop_p] = _chunk_loop_transpose
batching.primitive_batchers[_chunk_loop_p] = _chunk_loop_batch


_tangent_p.def_impl(_tangent_impl)
_tangent_p.def_abstract_eval(_tangent_abstract)
mlir.register_lowering(_tangent_p, mlir.lower_fun(_tangent_impl, multiple_results=False))
ad.primitive_jvps[_tangent_p] = _tangent_jvp
ad.primitive_transposes[_tangent_p] = _tangent_transpose


def _batch_rule(prim: Primitive) -> Any:
  """The batching rule of ``prim`` (``_tangent_p`` or ``_input_tangent_p``), whose operands
  all lead with the images: the mapped axis folds into them."""

  def rule(args: Any, dims: Any, *, cfg: _Config, cdt: Any) -> tuple[jax.Array, int]:
    moved = _checks.batch_first(args, dims)
    out = prim.bind(*[a.reshape((-1,) + a.shape[2:]) for a in moved], cfg=cfg, cdt=cdt)
    return out.reshape((moved[0].shape[0], -1) + out.shape[1:]), 0

  return rule


batching.primitive_batchers[_tangent_p] = _batch_rule(_tangent_p)


# --- the tangent with respect to the input alone ------------------------------------------------
#
# Differentiated in ``x`` alone (the grid a constant), the samples' tangent is the input's part
# of ``_tangent_p``: the block rows of the input's tangent. As a primitive its transpose is
# ``_block_rows_transpose``, the chunks' loop into accumulators per group of images, where JAX's
# own transpose of ``_block_rows``' rematerialised ``lax.map`` scans the chunks into one
# accumulator: gradient of sum(y ** 2) in x on the benchmark's 8x32x128x128 bilinear zeros,
# one process interleaved, 0.53-0.80 of that scan's time (docs/PERFORMANCE.md).

_input_tangent_p = Primitive("jaxops_grid_sample_input_tangent")


def _input_tangent_impl(tx: jax.Array, g: jax.Array, *, cfg: _Config, cdt: Any) -> jax.Array:
  """(N, C, M): the block rows of ``tx`` at the points ``g``, 0 where the samples are NaN."""
  rows = _block_rows(tx, g, cfg, cdt)
  return _zero_at_nan_points(rows, g, cfg, cdt, _spatial(tx)).transpose(0, 2, 1)


def _input_tangent_abstract(tx: Any, g: Any, *, cfg: _Config, cdt: Any) -> Any:
  return _tangent_aval(tx, (tx.shape[0], tx.shape[1], g.shape[1]), cdt)


def _input_tangent_jvp(primals: Any, tangents: Any, *, cfg: _Config, cdt: Any) -> Any:
  # (second order) the plain formulation's own derivative
  return jax.jvp(functools.partial(_input_tangent_impl, cfg=cfg, cdt=cdt), primals,
                 tuple(ad.instantiate_zeros(t) for t in tangents))


def _input_tangent_transpose(ct: Any, tx: Any, g: Any, *, cfg: _Config, cdt: Any) -> list[Any]:
  if type(ct) is ad.Zero:
    return [ad.Zero(tx.aval), None]
  ctm = _zero_at_nan_points(ct.transpose(0, 2, 1), g, cfg, cdt, _spatial(tx))
  return [_block_rows_transpose(ctm, g, cfg, cdt, tx.aval), None]


_input_tangent_p.def_impl(_input_tangent_impl)
_input_tangent_p.def_abstract_eval(_input_tangent_abstract)
mlir.register_lowering(_input_tangent_p,
                       mlir.lower_fun(_input_tangent_impl, multiple_results=False))
ad.primitive_jvps[_input_tangent_p] = _input_tangent_jvp
ad.primitive_transposes[_input_tangent_p] = _input_tangent_transpose
batching.primitive_batchers[_input_tangent_p] = _batch_rule(_input_tangent_p)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _grid_sample_jit(x: jax.Array, grid: jax.Array, cfg: _Config) -> jax.Array:
  n, c, *spatial = x.shape
  r = len(spatial)
  out_spatial = grid.shape[1:-1]
  m = math.prod(out_spatial)
  cdt = jnp.promote_types(_checks.compute_dtype(grid.dtype),
                          _checks.compute_dtype(x.dtype) if x.dtype in _FLOATS else grid.dtype)
  g = grid.astype(cdt).reshape(n, m, r)
  if cfg.mode is not Mode.NEAREST:
    bad = _nan_points(g, cfg, spatial)
    out = _interpolate(x, g, bad, cfg, cdt)
    return out.astype(x.dtype).reshape(n, c, *out_spatial)
  flat, weight, bad = _tap_table(tuple(x.shape), g, cfg, cdt)
  xt = _pixel_rows(x, x.dtype)

  def nearest(xt: jax.Array, flat: jax.Array, weight: jax.Array, bad: jax.Array) -> jax.Array:
    rows = _tap_rows_at(xt, flat[..., 0], outside=True)
    return _nan_at(bad, rows) if x.dtype in _FLOATS else rows

  out = _gather_rows(nearest, xt, flat, weight, bad)
  return out.transpose(0, 2, 1).reshape(n, c, *out_spatial)


# --- affine_grid ---------------------------------------------------------------------------------


def affine_grid(theta: ArrayLike, size: Any, *, align_corners: bool = False) -> jax.Array:
  """The sampling grid of a batch of affine maps, as ONNX AffineGrid-20 does.

  For ``size = (N, C, H, W)`` and ``theta`` of shape ``(N, 2, 3)`` (or ``(N, C, D, H, W)`` and
  ``(N, 3, 4)``), ``grid[n, h, w] = theta[n] @ (x_w, y_h, 1)`` where the base positions are
  evenly spaced in ``[-1, 1]``::

    align_corners=True    x_w = -1 + 2 w / (W - 1)           (0 when W = 1)
    align_corners=False   x_w = -1 + (2 w + 1) / W           (pixel centres)

  The output is the ``grid`` argument of ``grid_sample``: positions listed innermost axis first.

  Args:
    theta: floating array ``(N, 2, 3)`` (2-D) or ``(N, 3, 4)`` (3-D); may be traced.
    size: the target shape ``(N, C, H, W)`` or ``(N, C, D, H, W)``; static (Python or NumPy
      integers), since it decides the output shape.
    align_corners: see above.

  Returns:
    Array ``(N, H, W, 2)`` or ``(N, D, H, W, 3)`` of theta's dtype (float16/bfloat16 compute in
    float32).

  Raises:
    ValueError: size/theta shapes that do not match.
    TypeError: a traced ``size``, a non-floating theta.

  Examples:
    >>> import jax.numpy as jnp
    >>> import jaxops
    >>> theta = jnp.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> jaxops.affine_grid(theta, (1, 1, 2, 2))[0, :, :, 0]
    Array([[-0.5,  0.5],
           [-0.5,  0.5]], dtype=float32)
  """
  size_t = _checks.int_tuple(_OP_AFFINE, "size", size, minimum=0)
  ac = _checks.static_bool(_OP_AFFINE, "align_corners", align_corners)
  theta = _checks.as_array(theta, _OP_AFFINE, "theta")
  if theta.dtype not in _FLOATS:
    raise _checks.type_error(_OP_AFFINE, "theta", f"dtype {theta.dtype}",
                             f"floating ({', '.join(d.name for d in _FLOATS)})")
  if len(size_t) not in (4, 5):
    raise _checks.value_error(_OP_AFFINE, "size", size_t,
                              "(N, C, H, W) for 2-D or (N, C, D, H, W) for 3-D")
  r = len(size_t) - 2
  if theta.shape != (size_t[0], r, r + 1):
    raise _checks.value_error(_OP_AFFINE, "theta", f"shape {theta.shape}",
                              f"of shape ({size_t[0]}, {r}, {r + 1}) for size {size_t}")
  _checks.check_output_size(_OP_AFFINE, (size_t[0],) + size_t[2:] + (r,), theta.dtype)
  return _affine_grid_jit(theta, size_t[2:], ac)


def _torch_linspace(length: int, align_corners: bool, dtype: Any) -> np.ndarray:
  """torch's base positions of an axis in ``dtype`` (float32 or float64), as float64 values:
  ``linspace(-1, 1, L)``, whose entry ``i`` ATen computes as ``-1 + step * i`` (``1 -
  step * (L - 1 - i)`` from the middle on) rounded once (a fused multiply-add), with ``step =
  2 / (L - 1)`` rounded; without align_corners then times ``L - 1`` and divided by ``L``, each
  rounded (affine_grid's linspace_from_neg_one). 0 when ``L = 1``."""
  if length <= 1:
    return np.zeros(length)
  dt = np.dtype(dtype).type
  step = dt(2) / dt(length - 1)
  i = np.arange(length)
  near_end = i >= length // 2
  k = np.where(near_end, length - 1 - i, i)
  if dt is np.float32:  # the product and the sum are exact in float64
    exact = np.where(near_end, 1.0, -1.0) + np.where(near_end, -1.0, 1.0) * (float(step) * k)
    r = exact.astype(np.float32)
  else:
    f = fractions.Fraction(float(step))
    r = np.array([float((1 - f * int(j)) if e else (f * int(j) - 1)) for j, e in zip(k, near_end)])
  if not align_corners:
    r = (r * dt(length - 1)) / dt(length)
  return r.astype(np.float64)


def _base_axes(spatial: tuple[int, ...], align_corners: bool,
               torch_dtype: Any = None) -> list[np.ndarray]:
  """The base positions along each spatial axis, computed in float64 (rounded once to the
  compute dtype by the caller), or torch's (``_torch_linspace``) in ``torch_dtype``."""
  if torch_dtype is not None:
    return [_torch_linspace(length, align_corners, torch_dtype) for length in spatial]
  axes = []
  for length in spatial:
    i = np.arange(length, dtype=np.float64)
    if align_corners:
      axes.append(np.zeros(length) if length <= 1 else -1 + 2 * i / (length - 1))
    else:
      axes.append(-1 + (2 * i + 1) / max(length, 1))
  return axes


def _base_grid(spatial: tuple[int, ...], align_corners: bool, dtype: Any,
               torch_base: bool = False) -> jax.Array:
  """(r + 1, prod(spatial)) homogeneous base positions, innermost axis first: each axis' float64
  positions rounded once to ``dtype``, broadcast on the device (a constant of the whole grid
  took 12.6 MB of a 1024 x 1024 program and seconds to build at 8192 x 8192). Rows, as the
  CPU's matrix product reads them (XLA had laid the constant out so)."""
  axes = _base_axes(spatial, align_corners, dtype if torch_base else None)
  r = len(spatial)
  cols = [jnp.broadcast_to(jnp.asarray(v.astype(dtype)).reshape(
      (1,) * d + (-1,) + (1,) * (r - d - 1)), spatial).reshape(-1)
          for d, v in reversed(list(enumerate(axes)))]
  cols.append(jnp.ones((math.prod(spatial),), dtype))
  return jnp.stack(cols, axis=0)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _affine_grid_jit(theta: jax.Array, spatial: tuple[int, ...], align_corners: bool,
                     torch_base: bool = False) -> jax.Array:
  """The grid; ``torch_base``: as torch computes it (jaxops.torch.affine_grid): on torch's base
  positions, and where ATen's bmm takes its small-matrix loop (fewer than 400 multiplications
  per image) with that loop's rounding, each product rounded and summed in order."""
  cdt = _checks.compute_dtype(theta.dtype)
  base = _base_grid(spatial, align_corners, cdt, torch_base)
  t = theta.astype(cdt)
  r = len(spatial)
  if torch_base and (r + 1) * r * math.prod(spatial) < 400:
    grid = _exact.rounded(base[0][None, :, None] * t[:, None, :, 0])
    for k in range(1, r + 1):
      grid = grid + _exact.rounded(base[k][None, :, None] * t[:, None, :, k])
  else:
    grid = jnp.einsum("kp,njk->npj", base, t, precision=jax.lax.Precision.HIGHEST)
  return grid.reshape(theta.shape[0], *spatial, r).astype(theta.dtype)
