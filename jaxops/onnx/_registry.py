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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Adapt = Callable[[list[Any], dict[str, Any]], list[Any]]


@dataclasses.dataclass(frozen=True)
class Adapter:
  op_type: str
  since_version: int
  fn: Adapt
  static_inputs: tuple[int, ...] = ()
  host: Callable[[dict[str, Any]], bool] | None = None


ADAPTERS: dict[tuple[str, int], Adapter] = {}


def register(op_type: str, *since_versions: int, static_inputs: Sequence[int] = (),
             host: Callable[[dict[str, Any]], bool] | None = None) -> Callable[[Adapt], Adapt]:
  """Register ``fn`` as the adapter of ``op_type`` for each of ``since_versions``."""

  def deco(fn: Adapt) -> Adapt:
    for v in since_versions:
      ADAPTERS[(op_type, v)] = Adapter(op_type, v, fn, tuple(static_inputs), host)
    return fn

  return deco


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
  import onnx.defs

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


def attr(attrs: dict[str, Any], name: str, default: Any) -> Any:
  """``attrs[name]`` or ``default``."""
  return attrs.get(name, default)


def ints(value: Any) -> tuple[int, ...] | None:
  """A static integer input/attribute as a tuple, None when omitted."""
  return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))


# --- Constant ---------------------------------------------------------------------------------
# Constant is not one of jaxops' operators; the backend folds it into the graph's static values
# (see jaxops/onnx/__init__.py) so that shape inputs may come from Constant nodes.


# --- Cast / CastLike ----------------------------------------------------------------------------



# --- ConstantOfShape ----------------------------------------------------------------------------



# --- Resize / Upsample --------------------------------------------------------------------------



# --- AveragePool / GlobalAveragePool ------------------------------------------------------------
# Version differences are attribute sets only: count_include_pad from 7, ceil_mode from 10,
# dilations from 19, bfloat16 from 22. Every version's auto_pad output lengths equal the
# newest formulas (see docs/DEVIATIONS.md, AveragePool, for AveragePool-11's text).

_POOL_ATTRS = {1: ("auto_pad", "kernel_shape", "pads", "strides"),
               7: ("auto_pad", "kernel_shape", "pads", "strides", "count_include_pad"),
               10: ("auto_pad", "kernel_shape", "pads", "strides", "count_include_pad",
                    "ceil_mode")}
_POOL_ATTRS[11] = _POOL_ATTRS[10]
_POOL_ATTRS[19] = _POOL_ATTRS[22] = _POOL_ATTRS[10] + ("dilations",)


def _average_pool(version: int) -> Adapt:
  allowed = _POOL_ATTRS[version]

  def adapt(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
    from jaxops._pool import average_pool

    unknown = sorted(set(attrs) - set(allowed))
    if unknown:
      raise ValueError(f"jaxops.onnx: AveragePool-{version} has no attribute(s) {unknown}; it "
                       f"takes {sorted(allowed)}")
    if "kernel_shape" not in attrs:
      raise ValueError(f"jaxops.onnx: AveragePool-{version} requires attribute kernel_shape")
    return [average_pool(
        inputs[0], ints(attrs["kernel_shape"]), strides=ints(attrs.get("strides")),
        pads=ints(attrs.get("pads")), dilations=ints(attrs.get("dilations")),
        auto_pad=attr(attrs, "auto_pad", "NOTSET"),
        ceil_mode=bool(attr(attrs, "ceil_mode", 0)),
        count_include_pad=bool(attr(attrs, "count_include_pad", 0)))]

  return adapt


for _v in (1, 7, 10, 11, 19, 22):
  register("AveragePool", _v)(_average_pool(_v))


@register("GlobalAveragePool", 1, 22)
def _global_average_pool(inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
  from jaxops._pool import global_average_pool

  return [global_average_pool(inputs[0])]


