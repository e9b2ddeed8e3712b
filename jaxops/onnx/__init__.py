"""ONNX front end: run ONNX models whose nodes are all jaxops operators, compiled by XLA.

This module imports the ``onnx`` package (``pip install jaxops[onnx]``); the core ``jaxops``
namespace never does.

Examples:
  >>> import numpy as np, onnx
  >>> from onnx import helper, TensorProto
  >>> from jaxops.onnx import Backend
  >>> node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)
  >>> graph = helper.make_graph(
  ...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
  ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
  >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
  >>> Backend.run_model(model, [np.array([1.5, 70000.0], np.float32)])[0]
  array([1.5, inf], dtype=float16)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import onnx
import onnx.defs
import onnx.shape_inference
from onnx import helper, numpy_helper
from onnx.backend.base import Backend as _BaseBackend
from onnx.backend.base import BackendRep as _BaseRep
from onnx.backend.base import Device, DeviceType

from jaxops import _dtypes
from jaxops.onnx import _registry

__all__ = ["Backend", "BackendRep", "run_node", "run_model", "prepare", "supports_device"]


def _attr_value(a: onnx.AttributeProto) -> Any:
  v = helper.get_attribute_value(a)
  if isinstance(v, bytes):
    return v.decode()
  if isinstance(v, onnx.TensorProto):
    return numpy_helper.to_array(v)
  if isinstance(v, list) and v and isinstance(v[0], bytes):
    return [s.decode() for s in v]
  return v


def _constant_value(node: onnx.NodeProto, attrs: dict[str, Any]) -> np.ndarray:
  """The value of a Constant node (every attribute form but sparse tensors)."""
  if "value" in attrs:
    return np.asarray(attrs["value"])
  for name, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                      ("value_int", np.int64), ("value_ints", np.int64)):
    if name in attrs:
      return np.asarray(attrs[name], dtype=dtype)
  for name in ("value_string", "value_strings"):
    if name in attrs:
      return np.asarray(attrs[name], dtype=object)
  raise NotImplementedError(f"jaxops.onnx: Constant node {node.name!r} with attributes "
                            f"{sorted(attrs)} is not supported (sparse tensors are not)")


def _initializer(t: onnx.TensorProto) -> np.ndarray:
  try:
    return numpy_helper.to_array(t)
  except Exception as e:  # noqa: BLE001 - onnx raises ValidationError, OSError, ValueError, ...
    raise ValueError(f"jaxops.onnx: initializer {t.name!r} cannot be read: {e}") from e


def _dense(t: onnx.SparseTensorProto) -> np.ndarray:
  """A sparse initializer as its dense array: ``indices`` are flat positions ``[NNZ]`` or
  coordinates ``[NNZ, rank]``."""
  values = _initializer(t.values)
  dims = tuple(t.dims)
  out = np.zeros(dims, values.dtype)
  if values.size:
    idx = numpy_helper.to_array(t.indices).astype(np.int64)
    # (as onnx.checker: an index outside the tensor would wrap or escape as IndexError)
    limit = np.array([math.prod(dims)] if idx.ndim == 1 else dims, np.int64)
    shape = (values.size,) if idx.ndim == 1 else (values.size, len(dims))
    if idx.shape != shape or np.any((idx < 0) | (idx >= limit)):
      bad = idx if idx.shape != shape else idx[np.any((idx < 0) | (idx >= limit), axis=-1)
                                               if idx.ndim > 1 else (idx < 0) | (idx >= limit)]
      raise ValueError(
          f"jaxops.onnx: sparse initializer {t.values.name!r} of dims {list(dims)}: its "
          f"indices must be {values.size} flat positions in [0, {math.prod(dims)}) or "
          f"{values.size} coordinates within the dims; got indices of shape {list(idx.shape)}"
          f" (first offending {bad.reshape(-1)[:len(dims) if idx.ndim > 1 else 1].tolist()})")
    flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), dims)
    out.reshape(-1)[flat] = values.reshape(-1)
  return out


def _device(device: str) -> jax.Device:
  try:
    kind = Device(device).type
  except Exception:  # noqa: BLE001 - onnx's parser raises AttributeError/ValueError/KeyError
    raise ValueError(f"jaxops.onnx: device {device!r} is not an ONNX device name; use 'CPU' or "
                     f"'CUDA' (optionally ':<index>')") from None
  platform = "gpu" if kind == DeviceType.CUDA else "cpu"
  try:
    devices = jax.devices(platform)
  except RuntimeError:
    raise ValueError(f"jaxops.onnx: device {device!r} is not available to JAX "
                     f"(available: {[d.platform for d in jax.devices()]})") from None
  index = Device(device).device_id
  if not 0 <= index < len(devices):
    raise ValueError(f"jaxops.onnx: device {device!r} names index {index}; JAX has "
                     f"{len(devices)} {platform} device(s), indices 0 to {len(devices) - 1}")
  return devices[index]


def _run_node(node: onnx.NodeProto, adapter: _registry.Adapter, attrs: dict[str, Any],
              env: Mapping[str, Any]) -> Sequence[Any]:
  """The node's outputs from the values ``env`` names; errors name the node and op version."""
  ins: list[Any] = []
  for i, name in enumerate(node.input):
    if not name:
      ins.append(None)
    elif i in adapter.static_inputs:
      ins.append(np.asarray(env[name]))
    else:
      ins.append(env[name])
  _registry.check_node(node.name, adapter, ins, attrs)
  try:
    return adapter.fn(ins, attrs)
  except (ValueError, TypeError, NotImplementedError) as e:
    # Errors of the adapter and the core function name the node and op version too.
    if type(e) not in (ValueError, TypeError, NotImplementedError) or str(e).startswith(
        "jaxops.onnx: node"):
      raise
    label = _registry.node_label(node.name, adapter.op_type, adapter.since_version)
    raise type(e)(f"{label}: {str(e).removeprefix('jaxops.onnx: ')}") from e


def _as_input(name: str, value: Any) -> Any:
  if isinstance(value, jax.Array):
    return value
  arr = np.asarray(value)
  if arr.dtype.kind in ("U", "S"):
    arr = arr.astype(object)
  return arr


class BackendRep(_BaseRep):
  """A prepared model: its nodes resolved to adapters, jit-compiled per static configuration.

  Inputs whose values decide output shapes (Resize's scales/sizes, ConstantOfShape's shape, ...)
  are taken as static: each distinct value compiles once and is cached. Models with STRING
  tensors run eagerly on the host (JAX arrays cannot hold strings).
  """

  def __init__(self, model: onnx.ModelProto, device: str = "CPU"):
    super().__init__()
    self.model = model
    self.device = _device(device)
    graph = model.graph
    domains = [("" if imp.domain == "ai.onnx" else imp.domain) for imp in model.opset_import]
    twice = sorted({d for d in domains if domains.count(d) > 1})
    if twice:  # (onnx.checker refuses it too; the last import would silently win)
      raise ValueError(f"jaxops.onnx: the model imports the domain(s) "
                       f"{[d or 'ai.onnx' for d in twice]} more than once "
                       f"({[(i.domain, i.version) for i in model.opset_import]}); import each "
                       f"domain once")
    opsets = {("" if imp.domain == "ai.onnx" else imp.domain): imp.version
              for imp in model.opset_import}
    if opsets.get("", 0) > onnx.defs.onnx_opset_version():  # as onnxruntime refuses it
      raise ValueError(f"jaxops.onnx: the model imports the default domain at opset "
                       f"{opsets['']}; the installed onnx {onnx.__version__} defines opsets up "
                       f"to {onnx.defs.onnx_opset_version()}")
    self._init = {t.name: _initializer(t) for t in graph.initializer}
    self._init.update((t.values.name, _dense(t)) for t in graph.sparse_initializer)
    self.input_names = [i.name for i in graph.input if i.name not in self._init]
    # Initializers listed among the graph inputs (IR 4+) are defaults that a feed may replace.
    self._overridable = [i.name for i in graph.input if i.name in self._init]
    self._declared = {i.name: i.type.tensor_type for i in graph.input
                      if i.type.HasField("tensor_type")}
    self.output_names = [o.name for o in graph.output]
    self._nodes: list[tuple[onnx.NodeProto, _registry.Adapter | None, dict[str, Any]]] = []
    known = set(self._init) | set(self.input_names)
    consts: dict[str, np.ndarray] = {}
    static: set[str] = set()
    constant_init = {n: v for n, v in self._init.items() if n not in self._overridable}
    producer = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    for index, node in enumerate(graph.node):
      attrs = {a.name: _attr_value(a) for a in node.attribute}
      domain = "" if node.domain == "ai.onnx" else node.domain
      if node.op_type == "Constant" and domain == "":
        consts[node.output[0]] = _constant_value(node, attrs)
        self._nodes.append((node, None, attrs))
        known.add(node.output[0])
        continue
      if domain not in opsets:
        raise NotImplementedError(f"jaxops.onnx: node {node.op_type} uses domain {domain!r}, "
                                  f"which the model does not import")
      try:
        adapter = _registry.lookup(node.op_type, domain, opsets[domain])
      except NotImplementedError as e:
        raise NotImplementedError(f"jaxops.onnx: node {node.name!r}: "
                                  f"{str(e).removeprefix('jaxops.onnx: ')}") from None
      _registry.check_signature(node, adapter)
      for i in adapter.static_inputs:
        if i < len(node.input) and node.input[i]:
          name = node.input[i]
          if name not in self._init and name not in consts and name not in self.input_names:
            if producer.get(name, -1) > index:
              raise ValueError(f"jaxops.onnx: input {i} ({name!r}) of node {node.name!r} "
                               f"({node.op_type}) is produced by a later node: ONNX graphs "
                               f"list their nodes in topological order")
            raise NotImplementedError(
                f"jaxops.onnx: input {i} ({name!r}) of {node.op_type} decides the output shape, "
                f"so jaxops needs it to be a graph input, an initializer, a Constant or the "
                f"output of a node whose inputs are all constants; here another node computes "
                f"it from a graph input")
          static.add(name)
      known.update(o for o in node.output if o)
      if all(n in consts or n in constant_init for n in node.input if n):
        # Every input a constant: computed now (constant folding, as onnxruntime does), so that
        # a shape input may come from such a node (ConstantOfShape or Cast of an initializer).
        with jax.enable_x64(True), jax.default_device(self.device):
          outs = _run_node(node, adapter, attrs, {**constant_init, **consts})
        consts.update((n, np.asarray(v)) for n, v in zip(node.output, outs) if n)
        self._nodes.append((node, None, attrs))
        continue
      self._nodes.append((node, adapter, attrs))
    missing = [n for n in self.output_names if n not in known]
    if missing:
      raise ValueError(f"jaxops.onnx: graph outputs {missing} are produced by no node")
    self._consts = consts
    self._static_names = static
    # The host path (eager NumPy) where a STRING tensor (JAX cannot hold one) reaches a node
    # that runs, or an output; those only folded constants read do not count.
    live = {n for node, adapter, _ in self._nodes if adapter is not None for n in node.input
            if n} | set(self.output_names)
    self._host = any(adapter.host(attrs) for _, adapter, attrs in self._nodes
                     if adapter is not None and adapter.host) or any(
        v.dtype == object for n, v in {**self._init, **consts}.items() if n in live)
    self._cache: dict[Any, Any] = {}

  def _check_types(self, model: onnx.ModelProto) -> None:
    """Each node's input element types, as onnx's shape inference (not strict) infers them,
    against the node's version (``_registry.check_node_types``): the TypeError that names the
    node, its version, the input and the allowed types, where strict inference failed."""
    try:
      inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except (onnx.shape_inference.InferenceError, ValueError):
      return
    g = inferred.graph
    types = {t.name: t.data_type for t in g.initializer}
    types.update((vi.name, vi.type.tensor_type.elem_type)
                 for vi in [*g.input, *g.value_info, *g.output]
                 if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type)
    for node, adapter, attrs in self._nodes:
      if adapter is None:  # a Constant, or folded: its adapter ran (and checked) when prepared
        continue
      names = [onnx.TensorProto.DataType.Name(types[n]) if n in types else None
               for n in node.input]
      _registry.check_node_types(node.name, adapter, names, attrs)

  def _execute(self, env: dict[str, Any]) -> list[Any]:
    for node, adapter, attrs in self._nodes:
      if adapter is None:  # a Constant, or a node of constants computed when prepared
        env.update((n, self._consts[n]) for n in node.output if n)
        continue
      for name, value in zip(node.output, _run_node(node, adapter, attrs, env)):
        if name:
          env[name] = value
    return [env[n] for n in self.output_names]

  def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
    """Runs the model on ``inputs`` (a sequence in graph-input order, or a name -> array map)."""
    if isinstance(inputs, Mapping):
      unknown = set(inputs) - set(self.input_names) - set(self._overridable)
      if unknown:
        raise ValueError(f"jaxops.onnx: unknown inputs {sorted(unknown)}; the graph takes "
                         f"{self.input_names}"
                         + (f" (and may replace the initializers {self._overridable})"
                            if self._overridable else ""))
      values = {n: self._fed(n, v) for n, v in inputs.items()}
    else:
      if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
      if len(inputs) > len(self.input_names):
        raise ValueError(f"jaxops.onnx: the graph takes {len(self.input_names)} inputs "
                         f"{self.input_names}; got {len(inputs)}")
      values = {n: self._fed(n, v) for n, v in zip(self.input_names, inputs)}
    absent = [n for n in self.input_names if n not in values]
    if absent:
      raise ValueError(f"jaxops.onnx: missing inputs {absent}")
    for n, v in values.items():
      self._check_declared(n, v)
    host = self._host or any(getattr(v, "dtype", None) == object for v in values.values())
    with jax.enable_x64(True), jax.default_device(self.device):
      if host:
        env = {**self._init, **values}
        outs = self._execute(env)
      else:
        outs = self._compiled(values)
    return tuple(np.asarray(o) for o in outs)

  def jax_function(self, static: Mapping[str, Any] | None = None) -> Any:
    """The model as a pure JAX function, for ``jax.jit``, ``jax.grad`` and ``jax.vmap``.

    The returned ``f(*inputs)`` takes the graph inputs in order, less those that decide an
    output shape (``static_inputs`` lists them): their concrete values are given here, by name.
    Initializers listed among the graph inputs (defaults a feed may replace) follow as optional
    arguments, in graph order (their stored values where left out; a static one may be given
    here).
    It returns the tuple of the graph outputs as JAX arrays. Unlike ``run``, which computes
    with JAX's 64-bit types on, ``f`` follows the caller's setting (``jax_enable_x64``): INT64
    or DOUBLE tensors are 32-bit without it, as any JAX function's. Models with STRING tensors
    run only through ``run`` (JAX arrays cannot hold strings).

    Examples:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> from onnx import TensorProto, helper
      >>> from jaxops.onnx import Backend
      >>> node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
      >>> graph = helper.make_graph(
      ...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
      ...                   helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
      ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])])
      >>> rep = Backend.prepare(helper.make_model(graph, opset_imports=[
      ...     helper.make_opsetid("", 19)]))
      >>> rep.static_inputs
      ['s']
      >>> f = rep.jax_function({"s": np.array([1, 1, 2, 2], np.float32)})
      >>> jax.grad(lambda x: jnp.sum(f(x)[0]))(jnp.ones((1, 1, 2, 2)))[0, 0]
      Array([[4., 4.],
             [4., 4.]], dtype=float32)
    """
    if self._host:
      raise ValueError("jaxops.onnx: the model holds STRING tensors, which JAX arrays cannot "
                       "hold; use run()")
    given = dict(static or {})
    unknown = sorted(set(given) - set(self.static_inputs))
    missing = [n for n in self.static_inputs if n not in given and n not in self._init]
    if unknown or missing:
      raise ValueError(f"jaxops.onnx: jax_function needs the concrete value of each input in "
                       f"{[n for n in self.static_inputs if n not in self._init]} (they decide "
                       f"output shapes; initializers among {self.static_inputs} keep theirs "
                       f"if not given); got {sorted(given)}")
    fixed = {n: self._fed(n, v) for n, v in given.items()}
    for n, v in fixed.items():
      self._check_declared(n, v)
    names = [n for n in self.input_names if n not in self._static_names]
    # Initializers listed as graph inputs (torch.onnx's keep_initializers_as_inputs): optional
    # arguments after the others, so that gradients may reach the weights.
    extra = [n for n in self._overridable if n not in self._static_names]

    def f(*inputs: Any) -> tuple[jax.Array, ...]:
      if not len(names) <= len(inputs) <= len(names) + len(extra):
        raise ValueError(f"jaxops.onnx: the function takes the {len(names)} inputs {names}"
                         + (f", then optionally the initializers {extra}" if extra else "")
                         + f"; got {len(inputs)}")
      env = {**self._init, **fixed, **dict(zip(names + extra, inputs))}
      return tuple(jax.numpy.asarray(o) for o in self._execute(env))

    return f

  @property
  def static_inputs(self) -> list[str]:
    """The graph inputs (initializers listed as inputs too) whose values decide output shapes
    (each value compiles once)."""
    return [n for n in self.input_names + self._overridable if n in self._static_names]

  def _fed(self, name: str, value: Any) -> Any:
    """A fed value as an array; a Python list or number (no dtype of its own) takes the graph
    input's declared element type."""
    arr = _as_input(name, value)
    t = self._declared.get(name)
    want = None if t is None or hasattr(value, "dtype") else _dtypes.BY_ENUM.get(t.elem_type)
    if want is not None and want.dtype is not None and arr.dtype != object:
      target = np.dtype(want.dtype)
      if target.kind in "iu" and arr.dtype.kind in "iuf" and arr.size:
        info = np.iinfo(target)  # (a NumPy cast would wrap 300 into UINT8 as 44)
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
          raise ValueError(f"jaxops.onnx: input {name!r} is declared {want.name}; the fed "
                           f"values hold {arr[~np.isfinite(arr)].reshape(-1)[0]}")
        # (as Python numbers: a float64 past 2**63 compares exactly)
        lo, hi = arr.min().item(), arr.max().item()
        if lo < info.min or hi > info.max:
          raise ValueError(f"jaxops.onnx: input {name!r} is declared {want.name}, whose range "
                           f"is [{info.min}, {info.max}]; the fed values reach "
                           f"{lo if lo < info.min else hi}")
      arr = np.asarray(arr, dtype=target)
    return arr

  def _check_declared(self, name: str, value: Any) -> None:
    """The fed ``value`` against the graph input's declared element type and fixed dims, as
    onnxruntime checks them (a wrong dtype would otherwise flow through: float64 fed to a FLOAT
    input came out float64)."""
    t = self._declared.get(name)
    if t is None or getattr(value, "dtype", None) is None:
      return
    want = _dtypes.BY_ENUM.get(t.elem_type)
    if want is not None:
      try:
        got = _dtypes.of_dtype(value.dtype).name
      except ValueError:
        got = str(value.dtype)
      if got != want.name:
        raise TypeError(f"jaxops.onnx: input {name!r} is declared {want.name}; got an array of "
                        f"dtype {value.dtype} ({got})")
    if t.HasField("shape"):
      dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
      shape = tuple(np.shape(value))
      if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape)):
        raise ValueError(f"jaxops.onnx: input {name!r} is declared with shape "
                         f"{tuple('?' if d is None else d for d in dims)}; got shape {shape}")

  def _compiled(self, values: dict[str, Any]) -> list[Any]:
    static = {n: np.asarray(v) for n, v in values.items() if n in self._static_names}
    key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in static.items())
    fn = self._cache.get(key)
    if fn is None:

      def run_graph(dynamic: dict[str, Any]) -> list[Any]:
        return self._execute({**self._init, **static, **dynamic})

      fn = self._cache[key] = jax.jit(run_graph)
    return fn({n: v for n, v in values.items() if n not in static})


def _for_checks(model: onnx.ModelProto) -> onnx.ModelProto:
  """``model``, or a copy as onnx's checker and shape inference read it as onnxruntime does:
  the default domain spelled "ai.onnx" spelled "" (the checker registers the default domain's
  ops under "" only), sparse initializers dense (strict shape inference mistypes them)."""
  if all(i.domain != "ai.onnx" for i in model.opset_import) and all(
      n.domain != "ai.onnx" for n in model.graph.node) and not model.graph.sparse_initializer:
    return model
  out = onnx.ModelProto()
  out.CopyFrom(model)
  for imp in out.opset_import:
    if imp.domain == "ai.onnx":
      imp.domain = ""
  for node in out.graph.node:
    if node.domain == "ai.onnx":
      node.domain = ""
  out.graph.initializer.extend(numpy_helper.from_array(_dense(t), t.values.name)
                               for t in out.graph.sparse_initializer)
  del out.graph.sparse_initializer[:]
  return out


def _shapes_declared(model: onnx.ModelProto) -> onnx.ModelProto:
  """``model``, or a copy for onnx's checker where the graph's inputs and outputs declared
  without a shape (``make_tensor_value_info(name, type, None)``: any rank) declare an empty one:
  the checker requires the field, onnxruntime and onnx.reference run such models."""
  def bare(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [vi for vi in [*g.input, *g.output]
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
  if not bare(model.graph):
    return model
  out = onnx.ModelProto()
  out.CopyFrom(model)
  for vi in bare(out.graph):
    vi.type.tensor_type.shape.SetInParent()
  return out


class Backend(_BaseBackend):
  """``onnx.backend.base.Backend`` for models whose nodes are all jaxops operators.

  Use it as ONNX's backend API: ``Backend.prepare(model).run(inputs)``,
  ``Backend.run_model(model, inputs)``, ``Backend.run_node(node, inputs)``.
  """

  @classmethod
  def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
    if not cls.supports_device(device):
      return False
    try:
      cls.prepare(model, device)  # (the same checks as prepare: constant folding runs nodes)
    except (NotImplementedError, ValueError, TypeError):
      return False
    return True

  @classmethod
  def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> BackendRep:
    """Checks ``model`` and resolves each node to a jaxops adapter.

    Raises:
      NotImplementedError: an op or opset version jaxops lacks (the message lists what is
        supported).
    """
    rep = BackendRep(model, device)  # jaxops' own checks first: they name node and version
    for vi in list(model.graph.output) + list(model.graph.value_info):
      if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == 0:
        raise ValueError(f"jaxops.onnx: {vi.name!r} is declared a tensor of element type "
                         f"UNDEFINED (0); onnxruntime refuses it (declare its type, or leave "
                         f"the type out)")
    checked = _for_checks(model)
    try:
      onnx.checker.check_model(_shapes_declared(checked))
    except onnx.checker.ValidationError as e:
      raise ValueError(f"jaxops.onnx: the model fails onnx.checker.check_model: {e}") from e
    # Declared element types (outputs, value_info, initializers as inputs) against the inferred
    # ones, as onnxruntime checks them. Declared output shapes are left out: where they differ
    # from what the nodes compute, onnxruntime warns and returns what it computes.
    typed = onnx.ModelProto()
    typed.CopyFrom(checked)
    for vi in list(typed.graph.output) + list(typed.graph.value_info):
      if vi.type.HasField("tensor_type"):
        vi.type.tensor_type.ClearField("shape")
    try:
      onnx.shape_inference.infer_shapes(typed, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
      rep._check_types(typed)  # a node's element types, in jaxops' words where it finds one
      raise ValueError(f"jaxops.onnx: the model's declared types contradict its nodes "
                       f"(onnx.shape_inference, as onnxruntime checks them): {e}") from e
    except ValueError as e:  # onnx's own, e.g. "Invalid tensor data type 0." for Cast's `to`
      raise ValueError(f"jaxops.onnx: onnx.shape_inference rejects the model: {e} (an "
                       f"attribute naming a data type holds a value no type has)") from e
    return rep

  @classmethod
  def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                **kwargs: Any) -> tuple[np.ndarray, ...]:
    return cls.prepare(model, device, **kwargs).run(inputs)

  @classmethod
  def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
               outputs_info: Sequence[tuple[Any, Any]] | None = None,
               **kwargs: Any) -> tuple[np.ndarray, ...]:
    """Runs one node. ``opset_version=`` picks the opset (default: the newest onnx knows).

    The node is checked by ONNX's shape inference (as :meth:`prepare` and onnxruntime check a
    model) but not by ``onnx.checker``, which refuses deprecated ops such as Upsample-10.
    """
    opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
    if isinstance(inputs, Mapping):  # by name, as BackendRep.run takes them
      unknown = set(inputs) - {n for n in node.input if n}
      if unknown:
        raise ValueError(f"jaxops.onnx: node {node.name!r} ({node.op_type}) has no inputs "
                         f"{sorted(unknown)}; its inputs are {list(node.input)}")
      absent = [n for n in node.input if n and n not in inputs]
      if absent:
        raise ValueError(f"jaxops.onnx: node {node.name!r} ({node.op_type}): missing inputs "
                         f"{absent}")
      inputs = [inputs.get(n) if n else None for n in node.input]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    named = [n for n in node.input if n]
    if len(inputs) != len(node.input):
      if len(inputs) != len(named):
        raise ValueError(f"jaxops.onnx: node {node.name!r} ({node.op_type}) takes the inputs "
                         f"{list(node.input)}: give one array per name (None for an empty "
                         f"name) or one per non-empty name; got {len(inputs)} arrays")
      it = iter(inputs)
      inputs = [next(it) if n else None for n in node.input]
    arrays = [_as_input(n, v) for n, v in zip(node.input, inputs)]
    graph_inputs = [
        helper.make_tensor_value_info(name, _dtypes.of_dtype(a.dtype).enum, list(a.shape))
        for name, a in zip(node.input, arrays) if name]
    graph_outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
                     for name in node.output if name]
    graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = [a for n, a in zip(node.input, arrays) if n]
    # ONNX's shape inference, as prepare and onnxruntime check a model, so that run_node refuses
    # what they refuse (found by an audit: it ran a Resize whose sizes were 2-D, an AffineGrid
    # whose size was 2-D, a ConstantOfShape value of shape (1, 1)). onnx.checker is left out:
    # it refuses deprecated ops (Upsample-10), which run_node is the way to run.
    try:
      onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
      # jaxops' own check of these inputs, where it has one, names the node, version and input
      BackendRep(model, device).run(feeds)
      raise ValueError(f"jaxops.onnx: node {node.name!r} ({node.op_type}-{opset}) fails ONNX's "
                       f"shape inference, as onnxruntime checks it: {e}") from e
    return BackendRep(model, device).run(feeds)

  @classmethod
  def supports_device(cls, device: str) -> bool:
    try:
      _device(device)
    except ValueError:
      return False
    return True


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
