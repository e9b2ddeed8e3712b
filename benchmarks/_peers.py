"""How each peer is set up and run: onnxruntime (one node, one session), torch (CPU or CUDA)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks._harness import Context, System
from jaxops._dtypes import BY_ENUM, of_dtype

ORT_NOT_ON_GPU = "the bench extra has the CPU build of onnxruntime only"
ORT_NO_BACKWARD = "no backward pass (inference runtime)"


def ort_system(op: str, feeds: dict[str, np.ndarray], *, node_inputs: Sequence[str],
               consts: dict[str, np.ndarray] | None = None, attrs: dict[str, Any] | None = None,
               out_type: int | None = None, opset: int, threads: int) -> System:
  """onnxruntime CPU: a graph of one ``op`` node, one session built once, intra-op threads set,
  spinning off; inputs and output bound with IO binding (no per-run feed conversion)."""
  import onnxruntime as ort
  from onnx import helper, numpy_helper

  consts = consts or {}
  ins = [helper.make_tensor_value_info(k, of_dtype(v.dtype).enum, list(v.shape))
         for k, v in feeds.items()]
  first = next(iter(feeds.values()))
  out_enum = of_dtype(first.dtype).enum if out_type is None else out_type
  out = helper.make_tensor_value_info("y", out_enum, None)
  node = helper.make_node(op, list(node_inputs), ["y"], **(attrs or {}))
  inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
  graph = helper.make_graph([node], op, ins, [out], initializer=inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
  so = ort.SessionOptions()
  so.intra_op_num_threads = threads
  so.inter_op_num_threads = 1
  so.add_session_config_entry("session.intra_op.allow_spinning", "0")
  so.add_session_config_entry("session.inter_op.allow_spinning", "0")
  t0 = time.perf_counter()
  sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
  setup_s = time.perf_counter() - t0
  binding = sess.io_binding()
  for k, v in feeds.items():
    binding.bind_cpu_input(k, np.ascontiguousarray(v))
  binding.bind_output("y", "cpu")
  out_dtype = np.dtype(BY_ENUM[out_enum].dtype)

  def run() -> np.ndarray:
    sess.run_with_iobinding(binding)
    value = binding.get_outputs()[0]
    shape = tuple(value.shape())
    # The Python binding has no NumPy type for bfloat16 and hands float8 back as uint8: read
    # the raw bytes in the output's own dtype (a copy, as .numpy() would make).
    nbytes = int(np.prod(shape)) * out_dtype.itemsize
    return np.frombuffer(ctypes.string_at(value.data_ptr(), nbytes), out_dtype).reshape(shape)

  return System("onnxruntime", run, compile_s=setup_s)


def torch_device(ctx: Context) -> str:
  return "cpu" if ctx.device == "cpu" else "cuda"


def to_torch(x: np.ndarray, ctx: Context, *, requires_grad: bool = False) -> Any:
  """A torch tensor on the context's device (bfloat16 through float32, which torch reads)."""
  import torch
  if x.dtype.name == "bfloat16":
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
  else:
    t = torch.from_numpy(np.ascontiguousarray(x))
  t = t.to(torch_device(ctx))
  return t.requires_grad_(True) if requires_grad else t


def torch_system(fn: Callable[[], Any], ctx: Context, *, note: str = "") -> System:
  """A torch system: ``fn`` under no-grad for forwards (it decides), synchronised on CUDA."""
  import torch
  if ctx.device == "cpu":
    return System("torch", fn, note=note)

  def run() -> Any:
    out = fn()
    torch.cuda.synchronize()
    return out

  return System("torch", run, note=note, launch=fn, sync=lambda _: torch.cuda.synchronize())


def torch_grad(op: Callable[[Any], Any], x: np.ndarray, ctx: Context) -> System:
  """torch autograd: the gradient of ``sum(op(x) ** 2)`` with respect to ``x`` (forward included,
  as in ``jax.grad``)."""
  import torch
  xt = to_torch(x, ctx, requires_grad=True)

  def run() -> Any:
    y = op(xt)
    (dx,) = torch.autograd.grad((y * y).sum(), xt)
    return dx

  return torch_system(run, ctx)


def torch_forward(op: Callable[[Any], Any], x: np.ndarray, ctx: Context) -> System:
  """torch forward under ``torch.inference_mode``."""
  import torch
  xt = to_torch(x, ctx)

  def run() -> Any:
    with torch.inference_mode():
      return op(xt)

  return torch_system(run, ctx)
