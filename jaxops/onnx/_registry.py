"""(op_type, since_version) -> adapter: the only place in jaxops that knows opset versions.

An adapter maps one ONNX node's inputs and attributes onto a core jaxops call. It receives

* ``inputs``: one entry per node input; ``None`` for an omitted optional input (empty name or
  missing trailing input). Inputs listed in ``static_inputs`` arrive as NumPy arrays (their values
  decide output shapes, so they are known when the graph is traced); the others are jax Arrays
  (or NumPy object arrays for STRING tensors on the host path).
* ``attrs``: the node's attributes as Python values (ints, floats, str, lists, NumPy arrays for
  tensors). Attributes that are absent are absent: the adapter applies that version's defaults.

It returns the list of node outputs. ``host(attrs)``, when given, says that a node must run
eagerly on the host (STRING casts), which makes the whole model run without jit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.helper

from jaxops import _cast, _checks, _constant, _dtypes, _roi_align
from jaxops._grid_sample import affine_grid, grid_sample
from jaxops._lp_pool import _global_lp_pool_any_p, _lp_pool_any_p, _p_value
from jaxops._max_pool import global_max_pool, max_pool, max_unpool
from jaxops._pool import average_pool, global_average_pool
from jaxops._resize import resize_impl

Adapt = Callable[[list[Any], dict[str, Any]], list[Any]]
# A rank rule: (inputs, attrs) -> None when the ranks are valid, else (input index, what is wrong).
RankRule = Callable[[list[Any], dict[str, Any]], "tuple[int, str] | None"]


@dataclasses.dataclass(frozen=True)
class Adapter:
  op_type: str
  since_version: int
  fn: Adapt
  static_inputs: tuple[int, ...] = ()
  host: Callable[[dict[str, Any]], bool] | None = None
  rank: RankRule | None = None


ADAPTERS: dict[tuple[str, int], Adapter] = {}

# The operators jaxops sets out to cover, every version of each.
OPERATORS = ("Cast", "CastLike", "ConstantOfShape", "Resize", "Upsample", "AveragePool",
             "GlobalAveragePool", "MaxPool", "MaxUnpool", "GlobalMaxPool", "LpPool",
             "GlobalLpPool", "GridSample", "AffineGrid", "RoiAlign")


def register(op_type: str, *since_versions: int, static_inputs: Sequence[int] = (),
             host: Callable[[dict[str, Any]], bool] | None = None,
             rank: RankRule | None = None) -> Callable[[Adapt], Adapt]:
  """Register ``fn`` as the adapter of ``op_type`` for each of ``since_versions``.

  Every node is checked by ``check_node`` before its adapter runs: the element type of each
  input against that version's schema, and ``rank`` (a rule such as ``pool_rank``) when given.
  """

  def deco(fn: Adapt) -> Adapt:
    for v in since_versions:
      ADAPTERS[(op_type, v)] = Adapter(op_type, v, fn, tuple(static_inputs), host, rank)
    return fn

  return deco


# --- the shared node check ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _InputRule:
  name: str                 # the schema's name of the input ("X", "roi", ...)
  param: str | None         # its type parameter ("T"), None for a fixed type
  allowed: frozenset[str]   # ONNX element type names it accepts
  variadic: bool


@functools.cache
def _input_rules(op_type: str, since: int) -> tuple[_InputRule, ...]:
  """The schema's type rule of each formal input of ``op_type`` version ``since``."""
  schema = onnx.defs.get_schema(op_type, since, "")
  constraints = {c.type_param_str: _type_names(c.allowed_type_strs)
                 for c in schema.type_constraints}
  rules = []
  for formal in schema.inputs:
    param = formal.type_str if formal.type_str in constraints else None
    allowed = constraints[param] if param else _type_names([formal.type_str])
    rules.append(_InputRule(formal.name, param, allowed,
                            formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic))
  return tuple(rules)


_ONNX_TYPE_NAMES = {"float": "FLOAT", "double": "DOUBLE"}


def _type_names(type_strs: Sequence[str]) -> frozenset[str]:
  """'tensor(float)' -> 'FLOAT', as TensorProto names the element types."""
  inner = [t[len("tensor("):-1] for t in type_strs if t.startswith("tensor(")]
  return frozenset(_ONNX_TYPE_NAMES.get(t, t.upper()) for t in inner)


def _type_name(value: Any) -> str:
  return _dtypes.of_dtype(np.dtype(value.dtype)).name


def node_label(node_name: str, op_type: str, since: int) -> str:
  """How errors name a node: ``jaxops.onnx: node 'n' (AveragePool-22)``."""
  return f"jaxops.onnx: node {node_name!r} ({op_type}-{since})"


def check_node(node_name: str, adapter: Adapter, inputs: Sequence[Any],
               attrs: dict[str, Any]) -> None:
  """Checks a node's inputs against its version's schema before the adapter runs.

  Raises:
    TypeError: an input's element type is not one the schema allows, or two inputs bound to
      the same type parameter have different types.
    ValueError: the adapter's rank rule refuses the input ranks.
  """
  names: list[str | None] = []
  for value in inputs:
    if value is None:
      names.append(None)
      continue
    try:
      names.append(_type_name(value))
    except ValueError:
      names.append(str(np.dtype(value.dtype)))
  check_node_types(node_name, adapter, names)
  if adapter.rank is not None:
    label = node_label(node_name, adapter.op_type, adapter.since_version)
    rules = _input_rules(adapter.op_type, adapter.since_version)
    problem = adapter.rank(list(inputs), attrs)
    if problem is not None:
      i, what = problem
      formal = rules[min(i, len(rules) - 1)].name if rules else str(i)
      raise ValueError(f"{label}: input {i} (`{formal}`) {what}")


def check_node_types(node_name: str, adapter: Adapter, names: Sequence[str | None],
                     attrs: dict[str, Any] | None = None) -> None:
  """``check_node``'s element type rules on the ONNX type names of a node's inputs (None: an
  omitted or unknown input); with ``attrs``, also the type that Cast's `to` names (when the
  model is prepared, where onnx's shape inference would otherwise word the refusal)."""
  label = node_label(node_name, adapter.op_type, adapter.since_version)
  rules = _input_rules(adapter.op_type, adapter.since_version)
  bound: dict[str, tuple[int, str]] = {}
  for i, name in enumerate(names):
    if name is None or not rules:
      continue
    rule = rules[i] if i < len(rules) else rules[-1]
    if i >= len(rules) and not rule.variadic:
      raise ValueError(f"{label}: has {len(names)} inputs; the schema takes at most "
                       f"{len(rules)} ({', '.join(r.name for r in rules)})")
    if name not in rule.allowed:
      raise TypeError(f"{label}: input {i} (`{rule.name}`) has element type {name}; allowed: "
                      f"{', '.join(sorted(rule.allowed))}")
    if rule.param is not None:
      first = bound.setdefault(rule.param, (i, name))
      if first[1] != name:
        raise TypeError(f"{label}: input {i} (`{rule.name}`) has element type {name} but input "
                        f"{first[0]} has {first[1]}; both are of type {rule.param}, which must "
                        f"be one type")
  if attrs is not None and adapter.op_type == "Cast" and "to" in attrs:
    target = _dtypes.elem_type(f"jaxops.onnx: Cast version {adapter.since_version}", "to",
                               attrs["to"])
    _check_type("Cast", adapter.since_version, "T2", "`to`", target.name)


def check_signature(node: Any, adapter: Adapter) -> None:
  """Checks a node's input count and attributes against its version's schema when the model is
  prepared.

  Raises:
    ValueError: too few or too many inputs or outputs; an attribute the schema of that version
      does not have; a required attribute missing.
    TypeError: an attribute of another type than the schema's (e.g. FLOATS for INTS).
  """
  schema = onnx.defs.get_schema(adapter.op_type, adapter.since_version, "")
  label = node_label(node.name, adapter.op_type, adapter.since_version)
  names = list(node.input)
  while names and not names[-1]:
    names.pop()  # trailing empty names are omitted optional inputs
  lo, hi = schema.min_input, schema.max_input
  if len(names) > hi or len(names) < lo or any(not n for n in names[:lo]):
    want = f"{lo}" if lo == hi else f"{lo} to {hi}"
    raise ValueError(f"{label}: takes {want} input(s), the first {lo} named; got {len(names)} "
                     f"input slot(s) {names}")
  outs = list(node.output)
  while outs and not outs[-1]:
    outs.pop()  # trailing empty names are omitted optional outputs
  if len(outs) > schema.max_output or len(outs) < schema.min_output:
    lo, hi = schema.min_output, schema.max_output
    want = f"{lo}" if lo == hi else f"{lo} to {hi}"
    raise ValueError(f"{label}: has {want} output(s); got {len(outs)} ({outs})")
  given = {a.name for a in node.attribute}
  for name, spec in schema.attributes.items():
    if spec.required and name not in given:
      raise ValueError(f"{label}: needs the attribute `{name}`")
  for a in node.attribute:
    found = schema.attributes.get(a.name)
    if found is None:
      raise ValueError(f"{label}: has no attribute `{a.name}`; it takes "
                       f"{', '.join(sorted(schema.attributes)) or 'none'}")
    if a.type != found.type:
      got = onnx.AttributeProto.AttributeType.Name(a.type)
      want = onnx.AttributeProto.AttributeType.Name(found.type)
      raise TypeError(f"{label}: attribute `{a.name}` must be of type {want}; got {got} "
                      f"{_attr_repr(a)}")


def _attr_repr(a: Any) -> str:
  value = onnx.helper.get_attribute_value(a)
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


def exact_rank(rank: int, index: int = 0) -> RankRule:
  """A rule: input ``index`` has exactly ``rank`` axes."""

  def rule(inputs: list[Any], attrs: dict[str, Any]) -> tuple[int, str] | None:
    x = inputs[index] if index < len(inputs) else None
    if x is not None and np.ndim(x) != rank:
      return index, (f"has rank {np.ndim(x)} (shape {tuple(np.shape(x))}); it must have rank "
                     f"{rank}")
    return None

  return rule


def pool_rank(inputs: list[Any], attrs: dict[str, Any]) -> tuple[int, str] | None:
  """The pooling ops' rule: X is (N, C, D1, ..., Dn) with n = len(kernel_shape)."""
  kernel = attrs.get("kernel_shape")
  if kernel is None or inputs[0] is None:
    return None
  want = len(np.asarray(kernel).reshape(-1)) + 2
  if np.ndim(inputs[0]) != want:
    kernel_list = [int(k) for k in np.asarray(kernel).reshape(-1)]
    return 0, (f"has rank {np.ndim(inputs[0])} (shape {tuple(np.shape(inputs[0]))}); with "
               f"kernel_shape {kernel_list} it must have rank {want}: (N, C) and one axis per "
               f"kernel axis")
  return None


def min_rank(rank: int, index: int = 0) -> RankRule:
  """A rule: input ``index`` has at least ``rank`` axes."""

  def rule(inputs: list[Any], attrs: dict[str, Any]) -> tuple[int, str] | None:
    x = inputs[index] if index < len(inputs) else None
    if x is not None and np.ndim(x) < rank:
      return index, (f"has rank {np.ndim(x)} (shape {tuple(np.shape(x))}); it must have at "
                     f"least {rank} axes")
    return None

  return rule


def supported() -> dict[str, list[int]]:
  """op_type -> sorted since_versions that jaxops implements."""
  out: dict[str, list[int]] = {}
  for op, v in ADAPTERS:
    out.setdefault(op, []).append(v)
  return {op: sorted(vs) for op, vs in sorted(out.items())}


def lookup(op_type: str, domain: str, opset: int) -> Adapter:
  """The adapter for ``op_type`` as defined at ``opset`` of ``domain``.

  Raises:
    NotImplementedError: jaxops lacks the op or that version of it.
  """
  if domain not in ("", "ai.onnx"):
    raise NotImplementedError(
        f"jaxops.onnx: op {op_type} of domain {domain!r} is not implemented; jaxops implements "
        f"the default ONNX domain only: {_listing()}")
  try:
    since = onnx.defs.get_schema(op_type, opset, "").since_version
  except onnx.defs.SchemaError:
    raise NotImplementedError(
        f"jaxops.onnx: op {op_type} does not exist at opset {opset}; supported: "
        f"{_listing()}") from None
  adapter = ADAPTERS.get((op_type, since))
  if adapter is None:
    have = supported().get(op_type)
    what = (f"versions {have} of {op_type}" if have else f"no version of {op_type}")
    raise NotImplementedError(
        f"jaxops.onnx: {op_type} version {since} (model opset {opset}) is not implemented; "
        f"jaxops has {what}. Supported: {_listing()}")
  return adapter


def _listing() -> str:
  return "; ".join(f"{op} {vs}" for op, vs in supported().items())


def ints(value: Any) -> tuple[int, ...] | None:
  """A static integer input/attribute as a tuple, None when omitted."""
  return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))


# --- Constant ---------------------------------------------------------------------------------
# Constant is not one of jaxops' operators; the backend folds it into the graph's static values
# (see jaxops/onnx/__init__.py) so that shape inputs may come from Constant nodes.


# --- Cast / CastLike ----------------------------------------------------------------------------
# Each version's type constraints are read from onnx's schema; Cast-1's `to` is a type name.
# Cast-19/21/23 (and CastLike-19/21/23, which defer to Cast) send +-Inf to NaN for the FNUZ
# float8 types under saturate; Cast-24+ saturate them to +-max (jaxops' default): the adapters
# call the internal cast functions, which take that switch. check_node checks the inputs' types
# and check_attributes the attributes' names and types; the adapters check what those do not:
# that the inputs and `to` are there, and the types `to` and `value` (attributes) name.

def _allowed_types(op_type: str, since: int, param: str) -> frozenset[str]:
  """The ONNX element type names that ``param`` of ``op_type`` version ``since`` allows."""
  schema = onnx.defs.get_schema(op_type, since, "")
  for constraint in schema.type_constraints:
    if constraint.type_param_str == param:
      return _type_names(constraint.allowed_type_strs)
  raise KeyError(param)


def _check_type(op_type: str, since: int, param: str, what: str, name: str) -> None:
  allowed = _allowed_types(op_type, since, param)
  if name not in allowed:
    raise TypeError(f"jaxops.onnx: {op_type} version {since} does not allow {what} of type "
                    f"{name}; allowed: {', '.join(sorted(allowed))}")


def _cast_kwargs(since: int, attrs: dict[str, Any]) -> dict[str, Any]:
  """saturate (Cast-19+), round_mode (Cast-24+) and the Cast-19..23 FNUZ switch."""
  return {"saturate": attrs.get("saturate", 1) if since >= 19 else True,
          "round_mode": attrs.get("round_mode", "up") if since >= 24 else "up",
          "fnuz_inf_to_nan": 19 <= since <= 23}


def _casts_to_string(attrs: dict[str, Any]) -> bool:
  to = attrs.get("to", None)
  return to == 8 or (isinstance(to, str) and to.upper() == "STRING")


def _make_cast(since: int) -> Adapt:
  def cast_adapter(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    x = inputs[0]
    target = _dtypes.elem_type(f"jaxops.onnx: Cast version {since}", "to", attrs.get("to", None))
    _check_type("Cast", since, "T2", "`to`", target.name)
    return [_cast.cast_internal(inputs[0], target.enum, **_cast_kwargs(since, attrs))]

  return cast_adapter


def _make_cast_like(since: int) -> Adapt:
  def cast_like_adapter(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    x, like = inputs[0], inputs[1]
    return [_cast.cast_like_internal(x, like, **_cast_kwargs(since, attrs))]

  return cast_like_adapter


for _v in (1, 6, 9, 13, 19, 21, 23, 24, 25, 28):
  register("Cast", _v, host=_casts_to_string)(_make_cast(_v))
for _v in (15, 19, 21, 23, 24, 25):
  register("CastLike", _v)(_make_cast_like(_v))


# --- ConstantOfShape ----------------------------------------------------------------------------
# Input 0 (the shape) decides the output shape: a static input. The versions differ only in the
# dtypes `value` may have (read from onnx's schema).


def _make_constant_of_shape(since: int) -> Adapt:
  def constant_of_shape_adapter(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    value = attrs.get("value", None)
    if value is not None:
      if not isinstance(value, np.ndarray):
        raise TypeError(f"jaxops.onnx: ConstantOfShape version {since}: attribute `value` must "
                        f"be a one-element tensor; got {value!r}")
      _check_type("ConstantOfShape", since, "T2", "`value`", _type_name(value))
    # The shared rank rule checked that the shape is 1-D.
    return [_constant.constant_of_shape(np.asarray(inputs[0]), value)]

  return constant_of_shape_adapter


for _v in (9, 20, 21, 23, 24, 25):
  register("ConstantOfShape", _v, static_inputs=(0,), rank=exact_rank(1))(
      _make_constant_of_shape(_v))


# --- Resize / Upsample --------------------------------------------------------------------------
# Resize-10 and Upsample-7/9/10 run as onnxruntime runs them (asymmetric coordinates; nearest
# rounds down on upsampled axes and up on downsampled ones): resize_impl's `legacy_resize10`.
# Resize-11+ map their attributes onto jaxops.resize. scales/sizes decide the output shape, so
# they are static; roi is not: an initializer or Constant roi arrives as NumPy (static tables),
# a graph input is traced (the jnp table path). Absent attributes take their defaults through
# dict.get.

_RESIZE_COORD_MODES = {
    11: ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_half_pixel_for_nn", "tf_crop_and_resize"),
    13: ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"),
    18: ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"),
    19: ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_crop_and_resize"),
}


def _flag(op: str, version: int, attrs: dict[str, Any], name: str) -> bool:
  """A 0/1 attribute (ceil_mode, count_include_pad, antialias, exclude_outside, align_corners)
  as a bool. Any other integer is a ValueError, as the Python functions' flags are: the oracles
  read one differently (MaxPool-22 with ceil_mode=2: onnxruntime floors the output length, while
  onnx.reference and ONNX's shape inference take the ceiling)."""
  value = attrs.get(name, 0)
  if _checks.is_flag(value):
    return bool(value)
  raise ValueError(f"jaxops.onnx: {op}-{version} attribute `{name}` must be 0 or 1; got "
                   f"{value!r}")


def _optional(value: Any) -> Any:
  """None for an omitted or empty optional tensor input."""
  if value is None or getattr(value, "size", 1) == 0:
    return None
  return value


# The legacy versions: (op_type, version) -> (where `scales` comes from, whether it must be >= 1).
# Upsample-7 has a `scales` attribute; Upsample-9/10 and Resize-10 a static input 1. Upsample-10
# is deprecated: the same node as Resize-10.
_LEGACY = {("Upsample", 7): ("attribute", True), ("Upsample", 9): ("input", True),
           ("Upsample", 10): ("input", False), ("Resize", 10): ("input", False)}


def _legacy(op: str, version: int) -> Adapt:
  source, upsample_only = _LEGACY[(op, version)]

  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
      raise ValueError(f"{op}-{version}: attribute `mode` must be 'nearest' or 'linear'; got "
                       f"{mode!r}")
    scales = attrs.get("scales") if source == "attribute" else inputs[1]
    if scales is None:
      raise ValueError(f"{op}-{version}: needs `scales` (the {source})")
    s = np.asarray(scales, dtype=np.float32).reshape(-1)
    if upsample_only and np.any(s < 1):
      raise ValueError(f"{op}-{version}: `scales` must be >= 1 (Upsample only upsamples); got "
                       f"{s.tolist()}")
    return [resize_impl(inputs[0], scales=s, mode=mode,
                        coordinate_transformation_mode="asymmetric", legacy_resize10=True)]

  return adapt


for (_op, _v), (_source, _) in _LEGACY.items():
  register(_op, _v, static_inputs=() if _source == "attribute" else (1,))(_legacy(_op, _v))


def _resize_n(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    inputs = list(inputs) + [None] * (4 - len(inputs))
    x, roi, scales, sizes = inputs[:4]
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _RESIZE_COORD_MODES[version]:
      raise ValueError(f"Resize-{version}: attribute `coordinate_transformation_mode` must be "
                       f"one of {_RESIZE_COORD_MODES[version]}; got {coord!r}")
    scales, sizes = _optional(scales), _optional(sizes)
    kwargs: dict[str, Any] = {}
    if version >= 18:
      kwargs["antialias"] = _flag("Resize", version, attrs, "antialias")
      kwargs["keep_aspect_ratio_policy"] = attrs.get("keep_aspect_ratio_policy", "stretch")
      if "axes" in attrs:
        kwargs["axes"] = tuple(int(a) for a in attrs["axes"])
    roi = _optional(roi) if coord == "tf_crop_and_resize" else None
    y = resize_impl(
        x, sizes=None if sizes is None else np.asarray(sizes).reshape(-1),
        scales=None if scales is None else np.asarray(scales, np.float32).reshape(-1),
        roi=roi, mode=attrs.get("mode", "nearest"), coordinate_transformation_mode=coord,
        nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=attrs.get("cubic_coeff_a", -0.75),
        exclude_outside=_flag("Resize", version, attrs, "exclude_outside"),
        extrapolation_value=attrs.get("extrapolation_value", 0.0), **kwargs)
    return [y]

  return adapt


for _v in (11, 13, 18, 19):
  register("Resize", _v, static_inputs=(2, 3))(_resize_n(_v))


# --- AveragePool / GlobalAveragePool ------------------------------------------------------------
# Version differences are attribute sets: count_include_pad from 7, ceil_mode from 10,
# dilations from 19; and input types: bfloat16 from 22 (AveragePool and GlobalAveragePool); both
# are read from onnx's schema by the shared node check. Every version's auto_pad output lengths equal the newest
# formulas (see docs/DEVIATIONS.md, AveragePool, for AveragePool-11's text).

def _average_pool(version: int) -> Adapt:
  # The attribute set of each version, the required kernel_shape, the input type and rank are
  # checked by check_signature / check_node against the version's schema.
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    return [average_pool(
        inputs[0], ints(attrs["kernel_shape"]) or (), strides=ints(attrs.get("strides")),
        pads=ints(attrs.get("pads")), dilations=ints(attrs.get("dilations")),
        auto_pad=attrs.get("auto_pad", "NOTSET"),
        ceil_mode=_flag("AveragePool", version, attrs, "ceil_mode"),
        count_include_pad=_flag("AveragePool", version, attrs, "count_include_pad"))]

  return adapt


for _v in (1, 7, 10, 11, 19, 22):
  register("AveragePool", _v, rank=pool_rank)(_average_pool(_v))


def _global_average_pool(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    return [global_average_pool(inputs[0])]

  return adapt


for _v in (1, 22):
  register("GlobalAveragePool", _v, rank=min_rank(3))(_global_average_pool(_v))


# --- MaxPool / MaxUnpool / GlobalMaxPool / LpPool / GlobalLpPool --------------------------------
# Attribute sets per version: MaxPool-8 adds storage_order and the Indices output, MaxPool-10
# ceil_mode and dilations; LpPool-18 ceil_mode and dilations, LpPool-1's `p` (and GlobalLpPool-1's)
# is a float, an integer from version 2. Input types (int8/uint8 MaxPool from 12, bfloat16 from
# 22), attribute sets and the rank len(kernel_shape) + 2 are checked by the shared node check.

def _window_kwargs(op: str, version: int, attrs: dict[str, Any]) -> dict[str, Any]:
  return dict(strides=ints(attrs.get("strides")), pads=ints(attrs.get("pads")),
              dilations=ints(attrs.get("dilations")), auto_pad=attrs.get("auto_pad", "NOTSET"),
              ceil_mode=_flag(op, version, attrs, "ceil_mode"))


def _max_pool(version: int) -> Adapt:

  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    kernel = ints(attrs["kernel_shape"]) or ()
    if version < 8:
      return [max_pool(inputs[0], kernel, **_window_kwargs("MaxPool", version, attrs))]
    # Both outputs; XLA drops the indices where the node does not ask for them.
    y, indices = max_pool(inputs[0], kernel, storage_order=int(attrs.get("storage_order", 0)),
                          return_indices=True, **_window_kwargs("MaxPool", version, attrs))
    return [y, indices]

  return adapt


for _v in (1, 8, 10, 11, 12, 22):
  register("MaxPool", _v, rank=pool_rank)(_max_pool(_v))


def _max_unpool(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    inputs = list(inputs) + [None] * (3 - len(inputs))
    x, indices, output_shape = inputs[:3]
    if output_shape is not None:
      # the node's output shape, one length per axis of X (as ONNX's shape inference requires):
      # not jaxops.max_unpool's shorter form of the pooled axes alone, nor an empty tensor
      shape = np.shape(output_shape)
      if shape != (np.ndim(x),):
        raise ValueError(f"MaxUnpool-{version}: input `output_shape` must be a 1-D tensor of "
                         f"{np.ndim(x)} elements (one per axis of X, shape {np.shape(x)}); got "
                         f"a tensor of shape {shape}")
    return [max_unpool(x, indices, ints(attrs["kernel_shape"]) or (),
                       strides=ints(attrs.get("strides")), pads=ints(attrs.get("pads")),
                       output_shape=ints(output_shape))]

  return adapt


for _v in (9, 11, 22):
  register("MaxUnpool", _v, static_inputs=(2,), rank=pool_rank)(_max_unpool(_v))


def _global_max_pool(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    return [global_max_pool(inputs[0])]

  return adapt


for _v in (1, 22):
  register("GlobalMaxPool", _v, rank=min_rank(3))(_global_max_pool(_v))


def _lp_p(op: str, version: int, attrs: dict[str, Any]) -> float:
  where = f"jaxops.onnx: {op}-{version}"
  return _p_value(where, attrs.get("p", 2), integer=version >= 2)


def _lp_pool(version: int) -> Adapt:

  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    return [_lp_pool_any_p(inputs[0], ints(attrs["kernel_shape"]) or (),
                           _lp_p("LpPool", version, attrs),
                           **_window_kwargs("LpPool", version, attrs))]

  return adapt


for _v in (1, 2, 11, 18, 22):
  register("LpPool", _v, rank=pool_rank)(_lp_pool(_v))


def _global_lp_pool(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    return [_global_lp_pool_any_p(inputs[0], _lp_p("GlobalLpPool", version, attrs))]

  return adapt


for _v in (1, 2, 22):
  register("GlobalLpPool", _v, rank=min_rank(3))(_global_lp_pool(_v))


# --- GridSample / AffineGrid / RoiAlign ---------------------------------------------------------
# GridSample-16 spells the modes bilinear/nearest/bicubic and takes 4-D input only; 20 and 22
# spell linear/nearest/cubic and take any rank (22 adds bfloat16). AffineGrid-20's `size` decides
# the output shape: a static input. RoiAlign-10 has no coordinate_transformation_mode and behaves
# as output_half_pixel; 16 adds the attribute (default half_pixel); 22 adds bfloat16. Every
# version's mode="max" takes the largest weighted corner value of each sample, as ONNX's node
# case, onnx.reference and onnxruntime do (jaxops.roi_align takes the largest interpolated
# sample, as the spec text reads: docs/DEVIATIONS.md, RoiAlign).

_GRID_SAMPLE_MODES = {16: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
                      20: {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}}
_GRID_SAMPLE_MODES[22] = _GRID_SAMPLE_MODES[20]


def _str_attr(attrs: dict[str, Any], name: str, default: str) -> str:
  value = attrs.get(name, default)
  return value.decode() if isinstance(value, bytes) else value


def _grid_sample(version: int) -> Adapt:
  modes = _GRID_SAMPLE_MODES[version]

  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    x, grid = inputs[0], inputs[1]
    mode = _str_attr(attrs, "mode", "bilinear" if version == 16 else "linear")
    if mode not in modes:
      other = [v for v, m in _GRID_SAMPLE_MODES.items() if mode in m]
      hint = (f" ({mode!r} is the spelling of GridSample-{other[-1] if version == 16 else 16})"
              if other else "")
      raise ValueError(f"jaxops.onnx: GridSample-{version} attribute `mode` must be one of "
                       f"{sorted(modes)}; got {mode!r}{hint}")
    if version == 16 and np.ndim(x) != 4:
      raise ValueError(f"jaxops.onnx: GridSample-16 takes 4-D X (N, C, H, W) only; got rank "
                       f"{np.ndim(x)} (GridSample-20+ takes any rank)")
    if np.ndim(grid) != np.ndim(x):  # (N, D1_out, ..., Dr_out, r) for X (N, C, d1, ..., dr)
      raise ValueError(f"jaxops.onnx: GridSample-{version} input `grid` must have the rank of "
                       f"X ({np.ndim(x)}: (N, D1_out, ..., Dr_out, r)); got shape "
                       f"{tuple(np.shape(grid))}")
    return [grid_sample(x, grid, mode=modes[mode],
                        padding_mode=_str_attr(attrs, "padding_mode", "zeros"),
                        align_corners=_flag("GridSample", version, attrs, "align_corners"))]

  return adapt


for _v in (16, 20, 22):
  register("GridSample", _v)(_grid_sample(_v))


@register("AffineGrid", 20, static_inputs=(1,))
def _affine_grid_20(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
  return [affine_grid(inputs[0], np.asarray(inputs[1]).reshape(-1),
                      align_corners=_flag("AffineGrid", 20, attrs, "align_corners"))]


def _roi_align_adapter(version: int) -> Adapt:
  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    if version < 16 and "coordinate_transformation_mode" in attrs:
      raise ValueError("jaxops.onnx: RoiAlign-10 has no attribute coordinate_transformation_mode "
                       "(RoiAlign-16 added it); version 10 behaves as output_half_pixel")
    x, rois, batch_indices = inputs[:3]
    ctm = (_str_attr(attrs, "coordinate_transformation_mode", "half_pixel") if version >= 16
           else "output_half_pixel")
    mode = _str_attr(attrs, "mode", "avg")
    cfg = _roi_align._config(mode, attrs.get("output_height", 1),
                             attrs.get("output_width", 1), attrs.get("sampling_ratio", 0),
                             attrs.get("spatial_scale", 1.0), ctm, None, mode == "max")
    return [_roi_align._roi_align_checked(x, rois, batch_indices, cfg)]

  return adapt


for _v in (10, 16, 22):
  register("RoiAlign", _v)(_roi_align_adapter(_v))
