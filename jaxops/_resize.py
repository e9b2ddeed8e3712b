"""resize(): ONNX Resize (and Upsample) as a separable gather, exact to the specification.

Everything that depends only on static arguments (output lengths, source coordinates, tap
indices, tap weights, extrapolation masks) is computed once per static configuration in NumPy
float64, exactly as the specification writes it, and cached; it enters the graph as constants.
The device work per resized axis is ``jaxops._resize_kernel.apply_taps``: a gather of K taps
along that axis and a weighted sum. A traced ``roi`` (tf_crop_and_resize) takes a path that
computes the same tables with jnp, so gradients flow to the roi; its source coordinates are
formed from NumPy float64 factors and snapped to a nearby integer or half-integer, so that
XLA's rewrites (division by a constant becomes a multiplication by its reciprocal) cannot move
an exact coordinate across the extrapolation edge or a nearest-rounding tie.
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
from jax.typing import ArrayLike

from jaxops import _checks
from jaxops import _exact
from jaxops import _interp
from jaxops import _resize_kernel
from jaxops._interp import Mode

_OP = "jaxops.resize"


class CoordinateTransformationMode(_checks.StrEnum):
  """How an output coordinate maps to an input coordinate (one axis at a time)."""

  HALF_PIXEL = "half_pixel"
  HALF_PIXEL_SYMMETRIC = "half_pixel_symmetric"
  PYTORCH_HALF_PIXEL = "pytorch_half_pixel"
  ALIGN_CORNERS = "align_corners"
  ASYMMETRIC = "asymmetric"
  TF_CROP_AND_RESIZE = "tf_crop_and_resize"
  TF_HALF_PIXEL_FOR_NN = "tf_half_pixel_for_nn"  # Resize-11 only (removed in Resize-13)


class NearestMode(_checks.StrEnum):
  """How mode="nearest" rounds a fractional source coordinate."""

  ROUND_PREFER_FLOOR = "round_prefer_floor"
  ROUND_PREFER_CEIL = "round_prefer_ceil"
  FLOOR = "floor"
  CEIL = "ceil"


class KeepAspectRatioPolicy(_checks.StrEnum):
  """How ``sizes`` is read (Resize-18+)."""

  STRETCH = "stretch"
  NOT_LARGER = "not_larger"
  NOT_SMALLER = "not_smaller"


@dataclasses.dataclass(frozen=True)
class _Axis:
  """The static plan of one resized axis (hashable: part of the jit cache key)."""

  axis: int            # axis of x
  slot: int            # position in `axes` (selects roi[slot], roi[n + slot])
  in_len: int
  out_len: int
  scale: float         # the scale of the coordinate formulas
  target_len: float    # output_width: scale * in_len, fractional when it comes from `scales`
  resized_len: float   # length_resized of align_corners / tf_crop_and_resize / pytorch_half_pixel
  roi: tuple[float, float] | None  # static roi (start, end), tf_crop_and_resize only


@dataclasses.dataclass(frozen=True)
class _Config:
  plans: tuple[_Axis, ...]
  out_shape: tuple[int, ...]
  mode: Mode
  coord: CoordinateTransformationMode
  nearest: NearestMode
  cubic_coeff_a: float
  exclude_outside: bool
  extrapolation_value: float
  antialias: bool
  resize10: bool
  # the fill's sign bit: -0.0 == 0.0, so without it the two fills share a jit cache entry
  extrapolation_signbit: bool = False


def resize(x: ArrayLike, *, sizes: Sequence[int] | None = None,
           scales: Sequence[float] | None = None, roi: ArrayLike | None = None,
           axes: Sequence[int] | None = None, mode: str = "nearest",
           coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False, extrapolation_value: float = 0.0,
           keep_aspect_ratio_policy: str = "stretch", antialias: bool = False) -> jax.Array:
  """Resizes ``x`` as ONNX Resize-19 does: nearest, N-linear or N-cubic, on any axes.

  Each resized axis is resampled separately. For output index ``x_resized`` on an axis of input
  length ``length_original``, the source coordinate ``x_original`` is (``scale`` is the axis'
  scale; ``output_width`` = ``scale * length_original``, fractional when it comes from
  ``scales``; ``output_width_int`` the output length; ``length_resized`` is ``output_width``
  when ``scales`` is given and the output length when ``sizes`` is)::

    half_pixel            (x_resized + 0.5) / scale - 0.5
    half_pixel_symmetric  offset + (x_resized + 0.5) / scale - 0.5, where
                          offset = length_original / 2 * (1 - output_width_int / output_width)
    pytorch_half_pixel    length_resized > 1 ? (x_resized + 0.5) / scale - 0.5 : 0
    align_corners         x_resized * (length_original - 1) / (length_resized - 1)  (0 if 1)
    asymmetric            x_resized / scale
    tf_crop_and_resize    length_resized > 1
                          ? start * (length_original - 1)
                            + x_resized * (end - start) * (length_original - 1) / (length_resized - 1)
                          : 0.5 * (start + end) * (length_original - 1)
                          and ``extrapolation_value`` where x_original < 0 or > length_original - 1
    tf_half_pixel_for_nn  (x_resized + 0.5) / scale          (Resize-11 only; an axis with
                          scale 1 and unchanged length is left unchanged)

  ``nearest`` takes the pixel at ``x_original`` rounded by ``nearest_mode``; ``linear`` weights
  the two neighbours by ``1 - |d|``; ``cubic`` the four neighbours by Keys' kernel with
  ``a = cubic_coeff_a``: ``(a+2)|d|^3 - (a+3)|d|^2 + 1`` for ``|d| <= 1``, ``a|d|^3 - 5a|d|^2
  + 8a|d| - 4a`` for ``1 < |d| < 2``. Taps outside the input repeat the edge pixel, or get weight
  0 (the rest renormalised to sum 1) with ``exclude_outside``. With ``antialias`` and
  ``scale < 1`` the linear/cubic kernel is stretched by ``1 / scale`` (more taps, normalised).

  Output lengths: from ``scales``, ``floor(float32(scale) * length_original)`` (computed in
  float64 from the float32 scale, as the reference and ONNX shape inference do); from ``sizes``,
  ``sizes[i]``, or with ``keep_aspect_ratio_policy`` "not_larger"/"not_smaller" the min/max of
  ``sizes[i] / length`` over ``axes`` as the scale of every axis and
  ``floor(scale * length + 0.5)`` as the length.

  Static and traced arguments: ``sizes``, ``scales``, ``axes`` and the modes decide shapes and
  tables, so they must be concrete (Python or NumPy values) under ``jax.jit``/``vmap``/``grad``;
  a tracer there is a TypeError. ``x`` may be traced, and so may ``roi``: a traced roi takes a
  path that builds the tap tables with jnp, so ``resize`` is differentiable with respect to it
  (and ``jax.vmap`` over roi boxes gives a batched crop-and-resize). A concrete roi is static.
  The traced path computes source coordinates in float64 when x64 is enabled and in float32
  otherwise, and takes a coordinate within 4 units of rounding of an integer or half-integer as
  that value (so the full box [0, 1] never extrapolates its last sample, and nearest ties round
  as in exact arithmetic).
  Each static configuration is checked, planned, traced and compiled once: a repeated eager
  call with the same shape, dtype and static arguments is a dict lookup and the compiled call.

  Args:
    x: the input, any rank >= 1.
    sizes: the output length of each axis in ``axes`` (integers >= 0). Exactly one of
      ``sizes`` and ``scales``.
    scales: the scale of each axis in ``axes`` (> 0; < 1 downsamples).
    roi: ``[start_1, ..., start_n, end_1, ..., end_n]`` over ``axes``, normalised to [0, 1]
      input coordinates; used by tf_crop_and_resize only, where None (the default) is the
      full box ``[0, ..., 0, 1, ..., 1]`` (as onnx.reference and onnxruntime read a missing
      roi).
    axes: the axes that ``sizes``/``scales``/``roi`` refer to (negative counts from the back,
      any order, no repeats); default all axes.
    mode: "nearest", "linear" or "cubic".
    coordinate_transformation_mode: one of the modes listed above.
    nearest_mode: "round_prefer_floor", "round_prefer_ceil", "floor" or "ceil".
    cubic_coeff_a: the ``a`` of the cubic kernel (-0.75 as PyTorch, -0.5 as TensorFlow).
    exclude_outside: give taps outside the input weight 0 and renormalise (linear/cubic).
    extrapolation_value: the output value outside the roi's valid range (tf_crop_and_resize).
    keep_aspect_ratio_policy: "stretch", "not_larger" or "not_smaller" (``sizes`` only).
    antialias: widen the linear/cubic kernel when downsampling.

  Returns:
    The resized array, of ``x``'s dtype. float16/bfloat16 compute in float32; integer inputs
    to linear/cubic compute in floating point (float32 up to 16-bit types, float64 for wider
    types when x64 is enabled), then round half to even and saturate to the input type. float32
    holds about 7 significant digits, and a float32 result within 4 units of rounding of a half
    is taken as the half (so exact halves round to even), so a result whose exact value lies
    within about 8 units of a half (2.4e-4 near 255) can round to the other neighbour: a 5-D uint8
    cubic resize whose exact value 190.50011 rounds to 191 gives 190. bool and other
    non-numeric-float types take mode="nearest" only (an exact copy).

  Raises:
    TypeError: a shape-deciding argument or a static option is traced; a non-numeric dtype
      with linear/cubic; ``exclude_outside``/``antialias`` not a bool (or 0/1);
      ``cubic_coeff_a``/``extrapolation_value`` not a number (``extrapolation_value`` may be
      NaN or infinite).
    ValueError: both or neither of ``sizes``/``scales``; wrong lengths; non-positive scales;
      negative sizes; bad or repeated axes; an unknown mode string; a ``roi`` of the wrong
      length; ``antialias`` with mode="nearest"; a non-finite float option; an output that
      cannot fit in the device's memory (named with its shape and size in bytes, before
      anything is allocated).

  Examples:
    >>> import jax.numpy as jnp, jaxops
    >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> jaxops.resize(x, scales=[1, 2], mode="linear")
    Array([[1.  , 1.25, 1.75, 2.  ],
           [3.  , 3.25, 3.75, 4.  ]], dtype=float32)
    >>> jaxops.resize(x, sizes=[3], axes=[-1], mode="nearest").tolist()
    [[1.0, 1.0, 2.0], [3.0, 3.0, 4.0]]
    >>> jaxops.resize(jnp.arange(4.0), sizes=[2], roi=[0.25, 0.75], mode="linear",
    ...               coordinate_transformation_mode="tf_crop_and_resize").tolist()
    [0.75, 2.25]
  """
  return resize_impl(x, sizes=sizes, scales=scales, roi=roi, axes=axes, mode=mode,
                     coordinate_transformation_mode=coordinate_transformation_mode,
                     nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a,
                     exclude_outside=exclude_outside, extrapolation_value=extrapolation_value,
                     keep_aspect_ratio_policy=keep_aspect_ratio_policy, antialias=antialias)


def resize_impl(x: ArrayLike, *, sizes: Any = None, scales: Any = None, roi: Any = None,
                axes: Any = None, mode: Any = "nearest",
                coordinate_transformation_mode: Any = "half_pixel",
                nearest_mode: Any = "round_prefer_floor", cubic_coeff_a: Any = -0.75,
                exclude_outside: Any = False, extrapolation_value: Any = 0.0,
                keep_aspect_ratio_policy: Any = "stretch", antialias: Any = False,
                legacy_resize10: bool = False) -> jax.Array:
  """``resize``, plus the behaviour of the versions that no attribute of Resize-19 expresses.

  The ONNX front end (jaxops/onnx/_registry.py) calls this. Arguments as ``resize``, and
  ``legacy_resize10``: Resize-10 and Upsample-7/9/10 as onnxruntime runs them: asymmetric
  coordinates computed in float32, and mode="nearest" rounds down (truncates) on an axis whose
  scale is >= 1 and up (ceil) on an axis whose scale is < 1.
  """
  x = _checks.as_array(x, _OP, "x")
  static = (sizes, scales, roi, axes, mode, coordinate_transformation_mode, nearest_mode,
            cubic_coeff_a, exclude_outside, extrapolation_value, keep_aspect_ratio_policy,
            antialias, legacy_resize10)
  # A traced roi (or a jax.Array one) has no key: its configuration is built on every call.
  cfg, roi_traced = _CONFIGS(_checks.cache_key(x.shape, x.dtype, *static), x, *static)
  return _resize_jit(x, roi_traced, cfg)


def _config(x: jax.Array, sizes: Any, scales: Any, roi: Any, axes: Any, mode: Any,
            coordinate_transformation_mode: Any, nearest_mode: Any, cubic_coeff_a: Any,
            exclude_outside: Any, extrapolation_value: Any, keep_aspect_ratio_policy: Any,
            antialias: Any, legacy_resize10: Any) -> tuple[_Config, jax.Array | None]:
  """Checks resize()'s arguments; its static configuration, and the roi if it is traced."""
  opts = _parse_options(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                        exclude_outside, extrapolation_value, keep_aspect_ratio_policy, antialias)
  ax = _resized_axes(x, axes)
  if (sizes is None) == (scales is None):
    raise ValueError(f"{_OP}: exactly one of `sizes` and `scales` must be given; got "
                     f"{'both' if sizes is not None else 'neither'}")
  if scales is not None and opts.policy is not KeepAspectRatioPolicy.STRETCH:
    # the spec: "not applicable when the scales input is used"; onnx's shape inference and
    # onnxruntime refuse the pair, and jaxops would otherwise ignore the policy silently
    raise _checks.value_error(_OP, "keep_aspect_ratio_policy", keep_aspect_ratio_policy,
                              '"stretch" with `scales` (the policy applies to `sizes` only)')
  _checks.concrete_shape(_OP, "x", x)
  shape = tuple(int(d) for d in x.shape)
  plans = _plan(shape, ax, sizes, scales, opts.policy)
  roi_static, roi_traced = _roi(roi, opts.coord, len(ax))
  plans = _with_roi(plans, roi_static)
  out_shape = _output_shape(shape, plans)
  if roi_traced is None:  # a traced roi may move any axis, even one of scale 1
    plans = [p for p in plans if not _is_identity(p, opts.coord)]
  _checks.check_output_size(_OP, out_shape, x.dtype, taps=_table_taps(plans, opts))
  _check_dtype(x.dtype, opts.mode)
  return _canonical_config(opts, tuple(plans), out_shape, bool(legacy_resize10)), roi_traced


# Eager calls with a configuration seen before (same shape, dtype and static arguments) skip the
# argument checks and the planning: a dict lookup, then the jitted call.
_CONFIGS = _checks.ConfigCache(_config)


@dataclasses.dataclass(frozen=True)
class _Options:
  """resize()'s mode strings and scalar options, checked."""

  mode: Mode
  coord: CoordinateTransformationMode
  nearest: NearestMode
  policy: KeepAspectRatioPolicy
  cubic_coeff_a: float
  exclude_outside: bool
  extrapolation_value: float
  antialias: bool


def _parse_options(mode: Any, coord: Any, nearest_mode: Any, cubic_coeff_a: Any,
                   exclude_outside: Any, extrapolation_value: Any, policy: Any,
                   antialias: Any) -> _Options:
  """Step 1: the mode strings as enums, the scalar options as Python values."""
  m = Mode.from_string(_OP, "mode", mode)
  opts = _Options(
      mode=m,
      coord=CoordinateTransformationMode.from_string(_OP, "coordinate_transformation_mode", coord),
      nearest=NearestMode.from_string(_OP, "nearest_mode", nearest_mode),
      policy=KeepAspectRatioPolicy.from_string(_OP, "keep_aspect_ratio_policy", policy),
      cubic_coeff_a=_checks.static_float(_OP, "cubic_coeff_a", cubic_coeff_a),
      exclude_outside=_checks.static_bool(_OP, "exclude_outside", exclude_outside),
      extrapolation_value=_checks.static_float(_OP, "extrapolation_value", extrapolation_value,
                                               finite=False),
      antialias=_checks.static_bool(_OP, "antialias", antialias))
  if opts.antialias and m is Mode.NEAREST:
    raise _checks.value_error(_OP, "antialias", antialias,
                              'False with mode="nearest" (antialias applies to linear and cubic)')
  return opts


def _resized_axes(x: jax.Array, axes: Any) -> tuple[int, ...]:
  """Step 2: the axes that sizes/scales/roi refer to, normalised (default: all)."""
  if x.ndim == 0:
    raise _checks.value_error(_OP, "x", x, "an array of rank >= 1")
  if axes is None:
    return tuple(range(x.ndim))
  return _checks.normalize_axes(_OP, "axes", _checks.int_tuple(_OP, "axes", axes), x.ndim)


def _roi(roi: Any, coord: CoordinateTransformationMode,
         n: int) -> tuple[Any, Any]:
  """Step 4: (static roi, traced roi), at most one of them; both None unless tf_crop_and_resize.

  A missing roi is the full box, as onnx.reference and onnxruntime read it.
  """
  if coord is not CoordinateTransformationMode.TF_CROP_AND_RESIZE:
    return None, None
  if roi is None:
    roi = [0.0] * n + [1.0] * n
  traced = _checks.is_traced(roi)
  try:
    arr = jnp.asarray(roi) if traced else np.asarray(roi, dtype=np.float64)
  except (TypeError, ValueError) as e:  # text, ragged nesting, complex numbers, objects
    raise _checks.type_error(_OP, "roi", roi, f"a 1-D array of {2 * n} real numbers "
                             f"({e})") from None
  if arr.shape != (2 * n,):
    raise _checks.value_error(_OP, "roi", roi, f"a 1-D array of {2 * n} values (starts then "
                              f"ends of the {n} resized axes)")
  if not traced:
    if not np.all(np.isfinite(arr)):
      raise _checks.value_error(_OP, "roi", roi, "finite values (a traced roi's NaN gives "
                                "extrapolation_value)")
    return arr, None
  if not jnp.issubdtype(arr.dtype, jnp.floating):
    arr = arr.astype(jnp.result_type(float))
  return None, arr


def _with_roi(plans: list[_Axis], roi: np.ndarray | None) -> list[_Axis]:
  """Step 5: each axis' (start, end) from a static roi."""
  if roi is None:
    return plans
  n = roi.size // 2
  return [dataclasses.replace(p, roi=(float(roi[p.slot]), float(roi[n + p.slot]))) for p in plans]


def _output_shape(shape: tuple[int, ...], plans: list[_Axis]) -> tuple[int, ...]:
  """Step 6: the output shape (every planned axis, identity or not)."""
  out = list(shape)
  for p in plans:
    out[p.axis] = p.out_len
  return tuple(out)


def _canonical_config(opts: _Options, plans: tuple[_Axis, ...], out_shape: tuple[int, ...],
                      legacy_resize10: bool) -> _Config:
  """Step 8: the hashable configuration; options a mode does not read take one value, so that
  they do not split the jit cache."""
  nearest = opts.mode is Mode.NEAREST
  crop = opts.coord is CoordinateTransformationMode.TF_CROP_AND_RESIZE
  return _Config(
      plans, out_shape, opts.mode, opts.coord,
      opts.nearest if nearest else NearestMode.ROUND_PREFER_FLOOR,
      opts.cubic_coeff_a if opts.mode is Mode.CUBIC else -0.75,
      opts.exclude_outside and not nearest,
      opts.extrapolation_value if crop else 0.0,
      opts.antialias, legacy_resize10,
      crop and math.copysign(1.0, opts.extrapolation_value) < 0)


def _check_dtype(dtype: Any, mode: Mode) -> None:
  if mode is Mode.NEAREST:
    return
  if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
          or jnp.issubdtype(dtype, jnp.complexfloating)) or dtype == jnp.bool_:
    raise TypeError(f"{_OP}: mode={mode.value!r} needs a floating, complex or integer `x`; got "
                    f"dtype {np.dtype(dtype).name} (use mode='nearest', which copies any dtype)")


def _plan(shape: tuple[int, ...], axes: tuple[int, ...], sizes: Any, scales: Any,
          policy: KeepAspectRatioPolicy) -> list[_Axis]:
  """Step 3: output length, scale and target lengths of every axis in ``axes`` (spec +
  reference)."""
  n = len(axes)
  plans = []
  if scales is not None:
    s = _checks.concrete(_OP, "scales", scales)
    if s.ndim != 1 or s.size != n or not np.issubdtype(s.dtype, np.number) or s.dtype == bool:
      raise _checks.value_error(_OP, "scales", scales, f"a 1-D sequence of {n} numbers (one "
                                f"per resized axis)")
    s32 = s.astype(np.float32)
    if not np.all(np.isfinite(s32)) or np.any(s32 <= 0):
      raise _checks.value_error(_OP, "scales", scales, "finite numbers > 0")
    for i, d in enumerate(axes):
      sc = float(s32[i])
      target = sc * shape[d]
      plans.append(_Axis(d, i, shape[d], int(math.floor(target)), sc, target, target, None))
    return plans
  z = _checks.concrete(_OP, "sizes", sizes)
  if z.ndim != 1 or z.size != n:
    raise _checks.value_error(_OP, "sizes", sizes, f"a 1-D sequence of {n} integers (one per "
                              f"resized axis)")
  size = _checks.int_tuple(_OP, "sizes", z, minimum=0)
  for i, d in enumerate(axes):
    if shape[d] == 0 and size[i] != 0:
      raise _checks.value_error(_OP, "sizes", sizes, f"0 on axis {d}, whose input length is 0")
  ratios = [size[i] / shape[d] if shape[d] else 1.0 for i, d in enumerate(axes)]
  if policy is KeepAspectRatioPolicy.STRETCH:
    for i, d in enumerate(axes):
      plans.append(_Axis(d, i, shape[d], size[i], ratios[i], float(size[i]), float(size[i]),
                         None))
    return plans
  scale = min(ratios) if policy is KeepAspectRatioPolicy.NOT_LARGER else max(ratios)
  for i, d in enumerate(axes):
    target = scale * shape[d]
    out = int(math.floor(target + 0.5))
    plans.append(_Axis(d, i, shape[d], out, scale, target, float(out), None))
  return plans


def _table_taps(plans: list[_Axis], opts: _Options) -> int:
  """How many (output position, tap) entries the static tables of ``plans`` hold (``_num_taps``
  per output position)."""
  return sum(p.out_len * _num_taps(opts.mode, p.scale, opts.antialias)[0] for p in plans)


def _is_identity(p: _Axis, coord: CoordinateTransformationMode) -> bool:
  """Step 7: whether an axis is left unchanged: same length, scale 1 (and the full roi box).

  tf_half_pixel_for_nn's ``(x + 0.5) / 1`` would shift an axis with scale 1 by half a pixel
  (one pixel with nearest_mode ceil); the axis is kept unchanged, as onnxruntime does and as
  TensorFlow, where the mode comes from, resizes only the spatial axes (docs/DEVIATIONS.md).
  """
  if p.out_len != p.in_len or p.scale != 1.0:
    return False
  if coord is CoordinateTransformationMode.TF_CROP_AND_RESIZE:
    return p.roi == (0.0, 1.0)
  return True


# --- tables -------------------------------------------------------------------------------------


def _coords(xp: Any, p: _Axis, coord: CoordinateTransformationMode, y: Any,
            roi: tuple[Any, Any] | None) -> Any:
  """x_original for output indices ``y`` (float array), as the specification writes it."""
  s, n_in = p.scale, p.in_len
  C = CoordinateTransformationMode
  if coord is C.HALF_PIXEL:
    return (y + 0.5) / s - 0.5
  if coord is C.HALF_PIXEL_SYMMETRIC:
    adjustment = p.out_len / p.target_len
    center = n_in / 2
    offset = center * (1 - adjustment)
    return offset + (y + 0.5) / s - 0.5
  if coord is C.PYTORCH_HALF_PIXEL:
    if p.resized_len > 1:
      return (y + 0.5) / s - 0.5
    return y * 0.0
  if coord is C.ALIGN_CORNERS:
    if p.resized_len == 1:
      return y * 0.0
    return y * (n_in - 1) / (p.resized_len - 1)
  if coord is C.ASYMMETRIC:
    return y / s
  if coord is C.TF_HALF_PIXEL_FOR_NN:
    return (y + 0.5) / s
  start, end = roi if roi is not None else (0.0, 1.0)  # _config fills a missing roi in
  if p.resized_len > 1:
    return y * (end - start) * (n_in - 1) / (p.resized_len - 1) + start * (n_in - 1)
  return y * 0.0 + 0.5 * (start + end) * (n_in - 1)


def _num_taps(mode: Mode, scale: float, antialias: bool) -> tuple[int, float]:
  """(K, kernel scale): taps per output and the factor applied to distances."""
  if mode is Mode.NEAREST:
    return 1, 1.0
  if antialias and scale < 1:
    support = 1 if mode is Mode.LINEAR else 2
    start = int(np.floor(-support / scale) + 1)
    return 2 - 2 * start, scale
  return (2 if mode is Mode.LINEAR else 4), 1.0


def _taps(xp: Any, cfg: _Config, p: _Axis, x_ori: Any) -> tuple[Any, Any, Any]:
  """(indices (out, K) clamped into the input, weights (out, K), extrapolated mask or None)."""
  n_in = p.in_len
  mask = None
  if cfg.coord is CoordinateTransformationMode.TF_CROP_AND_RESIZE:
    mask = ~((x_ori >= 0) & (x_ori <= n_in - 1))  # a NaN coordinate (traced roi) extrapolates
  c = xp.ceil(x_ori)
  r = x_ori - (c - 1)  # in (0, 1]: the reference prefers the left pixel at integers
  if cfg.mode is Mode.NEAREST:
    if cfg.resize10:
      idx = xp.ceil(x_ori) if p.scale < 1 else xp.trunc(x_ori)
    else:
      nm = cfg.nearest
      if nm is NearestMode.ROUND_PREFER_FLOOR:
        up = r > 0.5
      elif nm is NearestMode.ROUND_PREFER_CEIL:
        up = r >= 0.5
      elif nm is NearestMode.FLOOR:
        up = r == 1
      else:
        up = r > 0
      idx = xp.where(up, c, c - 1)
    idx = xp.clip(idx, 0, n_in - 1).astype(_index_dtype(n_in))[:, None]
    w = xp.ones(idx.shape, x_ori.dtype)
    return idx, w, mask
  k, kscale = _num_taps(cfg.mode, p.scale, cfg.antialias)
  offsets = xp.arange(k) - (k // 2 - 1)  # taps ceil(x) - K/2 ... ceil(x) + K/2 - 1
  taps = (c - 1)[:, None] + offsets[None, :]
  d = offsets[None, :] - r[:, None]
  w = _interp.kernel(xp, cfg.mode, d * kscale, cfg.cubic_coeff_a)
  if cfg.antialias and p.scale < 1:
    w = w / xp.sum(w, axis=1, keepdims=True)
  if cfg.exclude_outside:
    w = xp.where((taps < 0) | (taps > n_in - 1), 0.0, w)
    total = xp.sum(w, axis=1, keepdims=True)
    w = w / xp.where(total == 0, 1.0, total)
  idx = xp.clip(taps, 0, n_in - 1).astype(_index_dtype(n_in))
  return idx, w, mask


def _index_dtype(n_in: int) -> Any:
  """Tap indices are positions along one axis (gathers run one axis at a time, and no flat
  index into the whole array is ever formed): int32 unless the axis itself is longer."""
  return np.int32 if n_in <= np.iinfo(np.int32).max else np.int64


@functools.lru_cache(maxsize=512)
def _static_table(cfg: _Config, p: _Axis) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """The tables of one axis in NumPy float64 (float32 coordinates for the legacy versions)."""
  if cfg.resize10:
    y32 = np.arange(p.out_len, dtype=np.float32)
    x_ori = (y32 / np.float32(p.scale)).astype(np.float64)
  else:
    x_ori = _coords(np, p, cfg.coord, np.arange(p.out_len, dtype=np.float64), p.roi)
    x_ori = np.asarray(x_ori, dtype=np.float64)
  idx, w, mask = _taps(np, cfg, p, x_ori)
  if w.shape[1] == 2:
    # Linear taps past an edge, both clamped to the edge pixel with weights (1 - r, r): the
    # output is that pixel, but (1 - r) * v + r * v in the input's float type is not always v
    # (an ulp off for 0.25 * v + 0.75 * v); 0.5 and 0.5 give v exactly, infinities included,
    # as onnxruntime (which clamps the coordinate) and onnx.reference (float64) give it.
    same = (idx[:, 0] == idx[:, 1]) & (w[:, 0] != 0) & (w[:, 1] != 0)
    w = np.where(same[:, None], 0.5, w)
  for arr in (idx, w, mask):
    if arr is not None:
      arr.setflags(write=False)
  return idx, w, mask


# --- device work --------------------------------------------------------------------------------


def _interp_dtype(dtype: Any) -> Any:
  """The dtype linear/cubic passes compute in: ``_checks.compute_dtype`` for floating types;
  float32 for integers of up to 16 bits, the default float type for wider ones."""
  if jnp.issubdtype(dtype, jnp.floating):
    return _checks.compute_dtype(dtype)
  if np.dtype(dtype).itemsize <= 2:
    return jnp.float32
  return jnp.result_type(float)  # float64 with x64 enabled, else float32


@functools.partial(jax.jit, static_argnames=("cfg",))
def _resize_jit(x: jax.Array, roi: jax.Array | None, cfg: _Config) -> jax.Array:
  if any(d == 0 for d in cfg.out_shape) or x.size == 0:
    return jnp.zeros(cfg.out_shape, x.dtype)
  in_dtype = x.dtype
  nearest = cfg.mode is Mode.NEAREST
  if not nearest and jnp.issubdtype(in_dtype, jnp.complexfloating):
    # the same weights on the real and imaginary parts (the map is real-linear); the fill of
    # tf_crop_and_resize is extrapolation_value + 0j
    im_cfg = dataclasses.replace(cfg, extrapolation_value=0.0, extrapolation_signbit=False)
    return lax.complex(_resize_jit(jnp.real(x), roi, cfg), _resize_jit(jnp.imag(x), roi, im_cfg))
  y = x if nearest else x.astype(_interp_dtype(in_dtype))
  if roi is None:
    y = _static_passes(y, cfg)
  else:
    for p in cfg.plans:
      y = _traced_pass(y, p, cfg, roi)
  if not nearest and jnp.issubdtype(in_dtype, jnp.integer):
    # bounds in y's float type (Python ints past the default integer type fail to trace: uint32
    # without x64, uint64 with it); the conversion saturates what rounds past the largest value
    info = jnp.iinfo(in_dtype)
    lo, hi = (np.asarray(b, y.dtype) for b in (info.min, info.max))
    y = jnp.clip(_round_half_even(y), lo, hi)
  return y.astype(in_dtype)


# A result this many units of rounding (relative to its magnitude, at least 1), and at most
# _TIE_MAX, from a multiple of 1/2 is taken as exactly that value before rounding to an integer.
_TIE_ULPS = {np.dtype(np.float32): 4, np.dtype(np.float64): 64}
_TIE_MAX = 2.0**-12


def _round_half_even(y: jax.Array) -> jax.Array:
  """Rounds half to even as in exact arithmetic: near-halves are snapped onto the half first.

  The tables' weights are float64 roundings of rational numbers, so a result that is exactly
  ``k + 1/2`` in exact arithmetic can come out a few units of rounding below or above it (more
  where positive and negative cubic taps cancel) and would round the wrong way. A value within
  ``_TIE_ULPS`` units of rounding of a multiple of 1/2 is moved onto it, as the traced-roi path
  snaps its coordinates. float64 results get a wide band (the spacing of exact results is far
  larger); float32 results (integers of up to 16 bits) a narrow one, capped at ``_TIE_MAX``:
  their units of rounding approach the spacing of exact results, and a wider band would move
  results that are not halves.
  """
  ulps = _TIE_ULPS.get(np.dtype(y.dtype), 4)
  half = jnp.round(2 * y) / 2
  tol = jnp.minimum(ulps * jnp.finfo(y.dtype).eps * jnp.maximum(jnp.abs(y), 1), _TIE_MAX)
  return jnp.round(jnp.where(jnp.abs(y - half) <= tol, half, y))


def _static_passes(y: jax.Array, cfg: _Config) -> jax.Array:
  """All resized axes with static tables: the kernel's separable passes, then extrapolation.

  Masking every extrapolated position after all passes equals masking after each pass: a pass
  along one axis never mixes positions of another axis.
  """
  tables = [(p, *_static_table(cfg, p)) for p in cfg.plans]
  if jnp.issubdtype(y.dtype, jnp.floating):
    y = _resize_kernel.apply_separable(y, [(p.axis, idx, w) for p, idx, w, _ in tables])
  else:  # mode="nearest" on integers, bool, complex: an exact gather
    for p, idx, _, _ in tables:
      y = jnp.take(y, jnp.asarray(idx[:, 0]), axis=p.axis, mode="clip")
  for p, _, _, mask in tables:
    if mask is not None and mask.any():
      y = _extrapolate(y, p.axis, mask, cfg.extrapolation_value)
  return y


def _extrapolate(y: jax.Array, axis: int, mask: Any, value: float) -> jax.Array:
  m = _checks.along_axis(jnp.asarray(mask), axis, y.ndim)
  return jnp.where(m, _fill_value(value, y.dtype), y)


def _fill_value(value: float, dtype: Any) -> Any:
  """extrapolation_value in ``dtype``: integers round half to even and saturate (as outputs)."""
  if dtype == jnp.bool_:
    return np.bool_(value != 0)
  if jnp.issubdtype(dtype, jnp.integer):  # (NaN gives 0, as Cast's float -> integer does)
    info = np.iinfo(np.dtype(dtype))
    value = 0.0 if math.isnan(value) else min(max(np.round(value), info.min), info.max)
    return np.array(value).astype(np.dtype(dtype))
  return jnp.asarray(value, dtype)


def _traced_pass(y: jax.Array, p: _Axis, cfg: _Config, roi: jax.Array) -> jax.Array:
  """One axis with a traced roi: tables from jnp, a take-and-sum gather (grads reach roi)."""
  idx, w, mask = _traced_table(cfg, p, roi)
  if cfg.mode is Mode.NEAREST:
    y = jnp.take(y, idx[:, 0], axis=p.axis, mode="clip")
  else:
    out, k = idx.shape
    taps = jnp.take(y, idx.reshape(-1), axis=p.axis, mode="clip")
    shape = list(y.shape)
    shape[p.axis:p.axis + 1] = [out, k]
    taps = taps.reshape(shape)
    wshape = (1,) * p.axis + (out, k) + (1,) * (y.ndim - p.axis - 1)
    # weight 0 at the extrapolated outputs: a NaN roi gives NaN weights there, and their
    # product with the masked cotangent (0 * NaN) made the input's gradient NaN
    w = jnp.where(_checks.along_axis(jnp.asarray(mask), 0, 2), jnp.zeros((), w.dtype), w)
    y = jnp.sum(taps * w.astype(y.dtype).reshape(wshape), axis=p.axis + 1)
  return _extrapolate(y, p.axis, mask, cfg.extrapolation_value)


def _traced_table(cfg: _Config, p: _Axis, roi: jax.Array) -> tuple[Any, Any, Any]:
  """The tables of one axis computed with jnp from a traced roi (differentiable in roi).

  Coordinates are computed in the default float type (float64 with x64 enabled, else float32),
  whatever ``x``'s dtype: the reference computes them in float64.
  """
  dtype = jnp.result_type(float)
  n = roi.shape[0] // 2
  r = roi.astype(dtype)
  x_ori = _traced_crop_coords(p, r[p.slot], r[n + p.slot], dtype)
  return _taps(jnp, cfg, p, x_ori)


# A computed coordinate this many units of rounding (relative to its terms) from an integer or
# half-integer is taken as exactly that value (float64 coordinates). The traced formula rounds up
# to 5 times (the float64 factor, its cast, end - start, the product, the sum): at most 2.5
# units in all.
_SNAP_ULPS = 4


def _traced_crop_coords(p: _Axis, start: Any, end: Any, dtype: Any) -> Any:
  """tf_crop_and_resize's x_original from a traced (start, end), as exact values.

  The spec's ``start * (n - 1) + x_resized * (end - start) * (n - 1) / (length_resized - 1)`` is
  formed as ``base + g * (end - start)`` with ``g = x_resized * (n - 1) / (length_resized - 1)``
  computed in NumPy float64 (jit would turn a division by a constant into a multiplication by
  its reciprocal: for roi [0, 1], 4 -> 8, 7 * 3 * float32(1 / 7) is 3.0000002 > 3, extrapolated).
  In float32 (axes shorter than 2**24 + 1) the value is computed with error-free sums and
  products (``_compensated``), so it is the float64 formula's result rounded once: half a unit
  of rounding, where the float32 formula is off by a few units and exact coordinates (the
  reference's float64 lands on them) would miss. In float64, a result within ``_SNAP_ULPS``
  units of rounding of a multiple of 1/2 is moved onto it, as exact arithmetic has it. The
  gradient is that of the plain formula.
  """
  n1 = p.in_len - 1
  base = start * n1
  if p.resized_len > 1:
    g = np.arange(p.out_len, dtype=np.float64) * n1 / (p.resized_len - 1)
  else:  # 0.5 * (start + end) * (n - 1) = base + 0.5 * (n - 1) * (end - start)
    g = np.full(p.out_len, 0.5 * n1)
  span = jnp.asarray(g, dtype) * (end - start)
  x_ori = base + span
  if np.dtype(dtype) == np.float32 and n1 < 2 ** 24:  # (n - 1 exact in float32)
    exact = _compensated(g, n1, start, end)
    # where the split overflows (a roi past about 8e34), the plain formula's value
    fix = jnp.where(jnp.isfinite(exact), exact - x_ori, jnp.zeros_like(x_ori))
    return x_ori + jax.lax.stop_gradient(fix)
  tol = _SNAP_ULPS * jnp.finfo(dtype).eps * (jnp.abs(span) + jnp.abs(base))
  half = jnp.round(2 * x_ori) / 2
  snap = jnp.where(jnp.abs(x_ori - half) <= tol, half - x_ori, jnp.zeros_like(x_ori))
  return x_ori + jax.lax.stop_gradient(snap)


def _compensated(g: np.ndarray, n1: int, start: Any, end: Any) -> Any:
  """float32 ``start * n1 + g * (end - start)`` (``g`` float64, ``n1`` an integer below 2**24)
  rounded once: the products and sums are split into their float32 result and its exact
  rounding error (Dekker's and Knuth's error-free transformations), ``g`` into two float32
  parts, and the error terms are added before the last rounding."""
  hi = g.astype(np.float32)
  g_lo = jnp.asarray((g - hi.astype(np.float64)).astype(np.float32))
  g_hi = jnp.asarray(hi)
  d, d_err = _exact.two_sum(end, -start)
  prod, prod_err = _two_product(g_hi, d)
  b, b_err = _two_product(start, jnp.float32(n1))
  total, total_err = _exact.two_sum(b, prod)
  return total + (total_err + b_err + prod_err + g_hi * d_err + g_lo * d)


def _two_product(a: Any, b: Any) -> tuple[Any, Any]:
  """(a * b rounded, its rounding error): Dekker's product of float32 halves split by 4097."""
  prod = a * b
  a_hi, a_lo = _split(a)
  b_hi, b_lo = _split(b)
  return prod, ((a_hi * b_hi - prod) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def _split(a: Any) -> tuple[Any, Any]:
  c = jnp.float32(4097) * a
  hi = c - (c - a)
  return hi, a - hi
