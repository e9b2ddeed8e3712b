"""AveragePool and GlobalAveragePool cases: jaxops against onnxruntime, torch and flax.

flax.linen.avg_pool works on channels-last input: its input is transposed once before timing,
and its output back for the agreement check only. Peers that cannot express a configuration
(torch: asymmetric pads, dilations; flax: ceil_mode, dilations) are listed as missing, with why.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from benchmarks._harness import Builder, Context, Spec, grad_of_sum_of_squares
from benchmarks._peers import (ORT_NO_BACKWARD, ORT_NOT_ON_GPU, ort_system, torch_forward,
                              torch_grad)

POOL_OPSET = 22


@dataclasses.dataclass(frozen=True)
class PoolCase:
  """One AveragePool configuration; ``pads`` in ONNX order (all begins, then all ends)."""

  name: str
  shape: tuple[int, ...]
  kernel: tuple[int, ...]
  strides: tuple[int, ...] | None = None
  pads: tuple[int, ...] | None = None
  dilations: tuple[int, ...] | None = None
  ceil_mode: bool = False
  count_include_pad: bool = False
  backward: bool = True

  def input_shape(self, ctx: Context) -> tuple[int, ...]:
    return (1, 2) + (9,) * len(self.kernel) if ctx.tiny else ctx.sized(self.shape)

  @property
  def n(self) -> int:
    return len(self.kernel)

  def strides_(self) -> tuple[int, ...]:
    return self.strides or (1,) * self.n

  def pads_(self) -> tuple[int, ...]:
    return self.pads or (0,) * (2 * self.n)

  def dilations_(self) -> tuple[int, ...]:
    return self.dilations or (1,) * self.n

  def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The ONNX output shape (explicit pads), from the spec's formula."""
    rnd = math.ceil if self.ceil_mode else math.floor
    out = []
    for i, n in enumerate(shape[2:]):
      pad = self.pads_()[i] + self.pads_()[i + self.n]
      d, k, s = self.dilations_()[i], self.kernel[i], self.strides_()[i]
      o = rnd((n + pad - d * (k - 1) - 1) / s + 1)
      if self.ceil_mode and (o - 1) * s >= n + self.pads_()[i]:
        o -= 1  # a window may not start in the end padding
      out.append(o)
    return shape[:2] + tuple(out)


# The speed cases of the AveragePool issue, then two configurations only some peers can express.
CASES = (
    PoolCase("2d k3 s2 p1", (8, 64, 112, 112), (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
    PoolCase("2d k2 s2", (8, 128, 56, 56), (2, 2), strides=(2, 2)),
    PoolCase("3d k3 s1 p1", (2, 16, 32, 32, 32), (3, 3, 3), pads=(1,) * 6),
    PoolCase("2d k3 s2 p1 ceil count_include_pad", (8, 64, 112, 112), (3, 3), strides=(2, 2),
             pads=(1, 1, 1, 1), ceil_mode=True, count_include_pad=True, backward=False),
    PoolCase("2d k3 d2 p2", (8, 64, 56, 56), (3, 3), pads=(2, 2, 2, 2), dilations=(2, 2),
             backward=False),
)


def _input(shape: tuple[int, ...], ctx: Context) -> np.ndarray:
  return ctx.rng().standard_normal(shape, dtype=np.float32)


def _jaxops_fn(c: PoolCase) -> Any:
  import jaxops
  pool = jaxops.average_pool  # AttributeError (reported as missing) until it lands

  def f(x: jax.Array) -> jax.Array:
    return pool(x, c.kernel, strides=c.strides_(), pads=c.pads_(), dilations=c.dilations_(),
                ceil_mode=c.ceil_mode, count_include_pad=c.count_include_pad)

  return f


def _torch_op(c: PoolCase) -> tuple[Any, str]:
  """(op, "") for torch.nn.functional.avg_pool{1,2,3}d, or (None, why not)."""
  import torch
  begin, end = c.pads_()[:c.n], c.pads_()[c.n:]
  if begin != end:
    return None, "torch pads symmetrically only"
  if any(d != 1 for d in c.dilations_()):
    return None, "torch avg_pool has no dilations"
  if any(2 * p > k for p, k in zip(begin, c.kernel)):
    return None, "torch needs pad <= kernel / 2"
  fn = getattr(torch.nn.functional, f"avg_pool{c.n}d")

  def op(x: Any) -> Any:
    return fn(x, c.kernel, c.strides_(), begin, ceil_mode=c.ceil_mode,
              count_include_pad=c.count_include_pad)

  return op, ""


def _flax_fn(c: PoolCase) -> tuple[Any, str]:
  """(fn on channels-last input, "") for flax.linen.avg_pool, or (None, why not)."""
  import flax.linen as nn
  if c.ceil_mode:
    return None, "flax avg_pool has no ceil_mode"
  if any(d != 1 for d in c.dilations_()):
    return None, "flax avg_pool has no dilations"
  padding = tuple(zip(c.pads_()[:c.n], c.pads_()[c.n:]))

  def f(x: jax.Array) -> jax.Array:
    return nn.avg_pool(x, c.kernel, strides=c.strides_(), padding=padding,
                       count_include_pad=c.count_include_pad)

  return f, ""


def _channels_last(x: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def _channels_first(y: Any) -> np.ndarray:
  return np.moveaxis(np.asarray(y), -1, 1)


def _forward(c: PoolCase) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    x = _input(c.input_shape(ctx), ctx)
    b = Builder(ctx.jax_device(), x)
    b.add("jaxops", lambda: b.jax(_jaxops_fn(c), x))
    if ctx.device == "cpu":
      attrs: dict[str, Any] = {"kernel_shape": list(c.kernel), "strides": list(c.strides_()),
                               "pads": list(c.pads_()), "dilations": list(c.dilations_()),
                               "ceil_mode": int(c.ceil_mode),
                               "count_include_pad": int(c.count_include_pad)}
      b.add("onnxruntime", lambda: ort_system("AveragePool", {"x": x}, node_inputs=["x"],
                                              attrs=attrs, opset=POOL_OPSET,
                                              threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)
    op, why = _torch_op(c)
    b.add("torch", lambda: torch_forward(op, x, ctx) if op else None, note=why)
    _add_flax(b, c, x, lambda f: f)
    return b, (x.nbytes, int(np.prod(c.out_shape(x.shape))) * x.itemsize), x.dtype

  return build


def _backward(c: PoolCase) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    x = _input(c.input_shape(ctx), ctx)
    b = Builder(ctx.jax_device(), x)
    b.skip("onnxruntime", ORT_NO_BACKWARD)
    b.add("jaxops", lambda: b.jax(grad_of_sum_of_squares(_jaxops_fn(c)), x))
    op, why = _torch_op(c)
    b.add("torch", lambda: torch_grad(op, x, ctx) if op else None, note=why)
    _add_flax(b, c, x, grad_of_sum_of_squares)
    return b, (x.nbytes, x.nbytes), x.dtype

  return build


def _add_flax(b: Builder, c: PoolCase, x: Any, wrap: Any) -> None:
  """flax.linen.avg_pool (``wrap``ped: forward or gradient) on channels-last input."""
  f, why = _flax_fn(c)

  def flax_system() -> Any:
    if f is None:
      return None
    s = b.jax(wrap(f), _channels_last(x), note="channels-last input (transposed before timing)")
    s.view = _channels_first
    return s

  b.add("flax", flax_system, note=why)


GLOBAL_SHAPE = (8, 512, 7, 7)


def _global(backward: bool) -> Any:
  """GlobalAveragePool; flax has no global pool, so its row is avg_pool with the whole window."""

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    x = _input((1, 2, 7, 7) if ctx.tiny else ctx.sized(GLOBAL_SHAPE), ctx)
    b = Builder(ctx.jax_device(), x)
    wrap = grad_of_sum_of_squares if backward else (lambda f: f)
    b.add("jaxops", lambda: b.jax(wrap(jaxops.global_average_pool), x))
    if backward:
      b.skip("onnxruntime", ORT_NO_BACKWARD)
    elif ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system("GlobalAveragePool", {"x": x}, node_inputs=["x"],
                                              opset=POOL_OPSET, threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)

    def torch_op(t: Any) -> Any:
      import torch
      return torch.nn.functional.adaptive_avg_pool2d(t, 1)

    b.add("torch", lambda: (torch_grad if backward else torch_forward)(torch_op, x, ctx))

    def flax_system() -> Any:
      import flax.linen as nn
      window = x.shape[2:]
      s = b.jax(wrap(lambda a: nn.avg_pool(a, window)), _channels_last(x),
                note="avg_pool over the whole window, channels-last input")
      s.view = _channels_first
      return s

    b.add("flax", flax_system)

    def mean(a: jax.Array) -> jax.Array:
      return jax.numpy.mean(a, axis=(2, 3), keepdims=True)

    b.add("jnp.mean", lambda: b.jax(wrap(mean), x), peer=False,
          note="not a peer: XLA's own reduction on the same NCHW layout, what a JAX user "
               "writes without jaxops")
    out = x.nbytes if backward else x.shape[0] * x.shape[1] * x.itemsize
    return b, (x.nbytes, out), x.dtype

  return build


SPECS = tuple(
    [Spec("AveragePool", c.name, "fwd", _forward(c)) for c in CASES]
    + [Spec("AveragePool", c.name, "bwd", _backward(c)) for c in CASES if c.backward]
    + [Spec("GlobalAveragePool", "2d", p, _global(p == "bwd")) for p in ("fwd", "bwd")])
