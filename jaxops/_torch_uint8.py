"""torch's bilinear, bicubic and lanczos ``interpolate`` of uint8 images, in its integer
arithmetic.

ATen resizes uint8 NCHW images separably, one pass per axis whose length changes (the width
first, then the height), each pass rounding back to uint8. A pass's weights are computed in
double (the same taps as its float kernels, but with Keys' a = -0.75 for bicubic without
antialias and Pillow's a = -0.5 with it; out-of-range taps folded onto the edge pixels instead
of clamped indices; lanczos is always antialiased), then scaled to int16 with a per-axis precision ``p`` (the largest that keeps
the largest weight below 2**15) and rounded half away from zero. An output pixel is
``clamp((2**(p-1) + sum_j w16_j * x_j) >> p, 0, 255)`` in int32 (HelperInterpBase::
_compute_index_ranges_int16_weights, basic_loop_aa_horizontal/vertical<uint8_t> and
separable_upsample_generic_Nd_kernel_impl in ATen's UpSampleKernel.cpp; its AVX2 kernel for
up to 4 channels computes the same integers).

The tables are built here once per configuration, in Python floats (IEEE double, in ATen's
order of operations); the device work is per pass one gather per tap, an int32
multiply-accumulate, a shift and a clamp.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxops import _resize_kernel
from jaxops._aten import _INTERP_SIZE, _area_scale, _cubic_far, _cubic_near, _floorf

# ATen's precision search stops at 22 bits
_MAX_PRECISION = 22


def _sinc(x: float) -> float:
  """HelperInterpLanczos::sinc_filter<double> (``math.sin`` is the C library's ``sin``, as
  ATen's ``std::sin``; NumPy's own vectorised ``sin``, which jaxops.torch's float tables use,
  may differ in the last bit, enough to move an int16 weight's rounding)."""
  if x == 0.0:
    return 1.0
  x *= math.pi
  return math.sin(x) / x


def _filter(kind: str, a: float, x: float) -> float:
  """HelperInterpLinear / HelperInterpCubic / HelperInterpLanczos ``aa_filter<double>``
  (``kind``: "linear", "cubic", "lanczos"; ``a``: Keys' coefficient for cubic)."""
  x = abs(x)
  if kind == "linear":
    return 1.0 - x if x < 1.0 else 0.0
  if kind == "lanczos":  # Lanczos-3
    return _sinc(x) * _sinc(x / 3.0) if x < 3.0 else 0.0
  if x < 1.0:
    return float(_cubic_near(np.float64, x, a))
  if x < 2.0:
    return float(_cubic_far(np.float64, x, a))
  return 0.0


def _aa_weights(n_in: int, n_out: int, s: float, kind: str
                ) -> tuple[list[int], list[list[float]], float]:
  """_compute_indices_min_size_weights_aa for every output position: (first taps, weights,
  the largest weight)."""
  interp = _INTERP_SIZE[kind]
  support = interp * 0.5 * s if s >= 1.0 else interp * 0.5
  k_max = math.ceil(support) * 2 + 1
  invscale = 1.0 / s if s >= 1.0 else 1.0
  starts, weights, wt_max = [], [], 0.0
  for i in range(n_out):
    center = s * (i + 0.5)
    xmin = max(int(center - support + 0.5), 0)  # C's truncation toward zero
    xsize = min(max(min(int(center + support + 0.5), n_in) - xmin, 0), k_max)
    w = [_filter(kind, -0.5, (j + xmin - center + 0.5) * invscale) for j in range(xsize)]
    total = 0.0
    for v in w:
      total += v
    if total != 0.0:
      w = [v / total for v in w]
      wt_max = max([wt_max] + w)
    starts.append(xmin)
    weights.append(w + [0.0] * (k_max - xsize))
  return starts, weights, wt_max


def _weights(n_in: int, n_out: int, s: float, align: bool, kind: str
             ) -> tuple[list[int], list[list[float]], float]:
  """_compute_indices_min_size_weights (no antialias: linear or cubic) for every output
  position: taps that fall outside the input add their weight to the edge tap."""
  cubic = kind == "cubic"
  interp = _INTERP_SIZE[kind]
  support = interp // 2
  starts, weights, wt_max = [], [], 0.0
  for i in range(n_out):
    if align:
      real = s * i
    else:
      real = s * (i + 0.5) - 0.5
      if not cubic and real < 0:
        real = 0.0
    # guard_index_and_lambda: floorf (a float32 floor) and a lambda clamped to [0, 1]
    index = min(int(_floorf(real)), n_in - 1)
    lam = min(max(real - index, 0.0), 1.0)
    lo = index - support + 1
    xmin = max(lo, 0)
    xsize = min(max(min(index + support + 1, n_in) - xmin, 0), interp)
    w = [0.0] * interp
    at = 0
    for j in range(interp):
      v = _filter(kind, -0.75, (j + 1 - support) - lam)
      if lo + j <= 0:
        at = 0
      elif lo + j >= n_in - 1:
        at = xsize - 1
      w[at] += v
      wt_max = max(wt_max, w[at])
      at += 1
    starts.append(xmin)
    weights.append([v if j < xsize else 0.0 for j, v in enumerate(w)])
  return starts, weights, wt_max


@functools.lru_cache(maxsize=256)
def axis_table(n_in: int, n_out: int, scale: float | None, align: bool, kind: str,
               antialias: bool) -> tuple[np.ndarray, np.ndarray, int]:
  """(each output position's tap positions (n_out, K), their int16 weights as int32 (n_out, K),
  zero past the taps that exist; the precision p)."""
  s = float(_area_scale(np.float64, n_in, n_out, align, scale))
  if antialias:
    starts, weights, wt_max = _aa_weights(n_in, n_out, s, kind)
  else:
    starts, weights, wt_max = _weights(n_in, n_out, s, align, kind)
  precision = _MAX_PRECISION
  for p in range(_MAX_PRECISION):
    if int(0.5 + wt_max * (1 << (p + 1))) >= 1 << 15:
      precision = p
      break
  k = len(weights[0])
  w16 = np.zeros((n_out, k), np.int32)
  for i, row in enumerate(weights):
    for j, v in enumerate(row):
      v *= 1 << precision
      w16[i, j] = int(-0.5 + v) if v < 0 else int(0.5 + v)
  taps = np.minimum(np.asarray(starts, np.int64)[:, None] + np.arange(k)[None, :], n_in - 1)
  for a in (taps, w16):
    a.setflags(write=False)
  return taps, w16, precision


# Taps per output above which a pass loops over them (``lax.fori_loop``) instead of unrolling
# one gather per tap: heavy antialiased downsampling reads hundreds of taps (1000 -> 13 with
# lanczos: 463), which unrolled took 8.5 s to compile and ran slower (17 ms against 11); below
# it the unrolled gathers fuse into one loop and run about twice as fast as the loop's.
_LOOP_TAPS = 48


def _pass(x: jax.Array, axis: int, taps: np.ndarray, w16: np.ndarray,
          precision: int) -> jax.Array:
  """One axis: ``clamp((2**(p-1) + sum_j w16_j * x_j) >> p, 0, 255)`` as uint8."""
  live = w16.any(axis=0)  # taps that no output reads with a nonzero weight are skipped
  taps, w16 = taps[:, live], w16[:, live]
  shape = [1] * x.ndim
  shape[axis] = taps.shape[0]
  out_shape = x.shape[:axis] + (taps.shape[0],) + x.shape[axis + 1:]
  acc = jnp.full(out_shape, 1 << (precision - 1), jnp.int32)

  def tap(acc: jax.Array, index: jax.Array, weight: jax.Array) -> jax.Array:
    v = jnp.take(x, index, axis=axis, mode="clip").astype(jnp.int32)  # in range
    return acc + v * weight.reshape(shape)

  if taps.shape[1] > _LOOP_TAPS:
    index, weight = jnp.asarray(taps.T.astype(np.int32)), jnp.asarray(w16.T)
    acc = jax.lax.fori_loop(0, taps.shape[1], lambda j, a: tap(a, index[j], weight[j]), acc)
  else:
    for j in range(taps.shape[1]):
      acc = tap(acc, jnp.asarray(taps[:, j].astype(np.int32)), jnp.asarray(w16[:, j]))
  return jnp.clip(acc >> precision, 0, 255).astype(jnp.uint8)


def resize(x: jax.Array, axes: tuple[tuple[int, int, float | None], ...], align: bool,
           kind: str, antialias: bool) -> jax.Array:
  """``x`` (uint8, the spatial axes last) resized per ``axes`` ((in, out, scale factor or
  None) per spatial axis): the last axis first, then the others from the last inward, each
  only where its length changes."""
  lead = x.ndim - len(axes)
  todo = [d for d in range(len(axes) - 1, -1, -1) if axes[d][0] != axes[d][1]]
  for n, d in enumerate(todo):
    n_in, n_out, scale = axes[d]
    taps, w16, precision = axis_table(n_in, n_out, scale, align, kind, antialias)
    if n < len(todo) - 1 and n_out > n_in:
      # An upsampling pass that another follows is computed as two halves joined along the
      # axis: XLA never fuses such a concatenation into its consumer (see
      # jaxops._resize_kernel.joined_halves), which would otherwise recompute every tap of this
      # pass for each tap of the next (bicubic x2.5 on 8x3x256x256: 29-41 ms against 9-10).
      # A downsampling pass fused into the next runs faster than materialised (antialiased
      # bicubic 256 -> 64: 1.4 ms against 3.0).
      x = _resize_kernel.joined_halves(
          lambda r: _pass(x, lead + d, taps[r], w16[r], precision), n_out, lead + d)
    else:
      x = _pass(x, lead + d, taps, w16, precision)
  return x
