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


# --- MaxPool (with and without Indices), MaxUnpool, LpPool -----------------------------------
# Peers: torch (max_pool{2,3}d, max_unpool2d, lp_pool2d), onnxruntime (forward), flax
# nn.max_pool (channels-last) and lax.reduce_window max with JAX's own gradient
# (select-and-scatter), the two JAX baselines jaxops' custom JVP is measured against.


@dataclasses.dataclass(frozen=True)
class MaxCase:
  name: str
  shape: tuple[int, ...]
  kernel: tuple[int, ...]
  strides: tuple[int, ...]
  pad: tuple[int, ...]  # symmetric, per pooled axis

  @property
  def n(self) -> int:
    return len(self.kernel)

  def input_shape(self, ctx: Context) -> tuple[int, ...]:
    return (1, 2) + (9,) * self.n if ctx.tiny else ctx.sized(self.shape)

  def kw(self) -> dict[str, Any]:
    return dict(strides=self.strides, pads=self.pad + self.pad)


MAX_CASES = (
    MaxCase("max 2d k3 s2 p1", (8, 64, 112, 112), (3, 3), (2, 2), (1, 1)),
    MaxCase("max 2d k2 s2", (8, 128, 56, 56), (2, 2), (2, 2), (0, 0)),
    MaxCase("max 3d k3 s2 p1", (2, 16, 32, 32, 32), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
)


def _max_reduce_window(c: MaxCase) -> Any:
  from jax import lax

  def f(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, -np.inf, lax.max, (1, 1) + c.kernel, (1, 1) + c.strides,
                             ((0, 0), (0, 0)) + tuple((p, p) for p in c.pad))

  return f


def _max_peers(b: Builder, c: MaxCase, x: np.ndarray, ctx: Context, backward: bool) -> None:
  import flax.linen as nn
  import torch
  wrap = grad_of_sum_of_squares if backward else (lambda f: f)
  if backward:
    b.skip("onnxruntime", ORT_NO_BACKWARD)
  elif ctx.device == "cpu":
    attrs = {"kernel_shape": list(c.kernel), "strides": list(c.strides),
             "pads": list(c.pad + c.pad)}
    b.add("onnxruntime", lambda: ort_system("MaxPool", {"x": x}, node_inputs=["x"], attrs=attrs,
                                            opset=POOL_OPSET, threads=ctx.threads))
  else:
    b.skip("onnxruntime", ORT_NOT_ON_GPU)
  fn = getattr(torch.nn.functional, f"max_pool{c.n}d")

  def op(t: Any) -> Any:
    return fn(t, c.kernel, c.strides, c.pad)

  b.add("torch", lambda: (torch_grad if backward else torch_forward)(op, x, ctx))
  b.add("lax.reduce_window", lambda: b.jax(wrap(_max_reduce_window(c)), x,
                                           note="JAX's own gradient (select-and-scatter)"))

  def flax_system() -> Any:
    padding = tuple((p, p) for p in c.pad)
    s = b.jax(wrap(lambda a: nn.max_pool(a, c.kernel, strides=c.strides, padding=padding)),
              _channels_last(x), note="channels-last input (transposed before timing)")
    s.view = _channels_first
    return s

  b.add("flax", flax_system)


def _max(c: MaxCase, backward: bool) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    x = _input(c.input_shape(ctx), ctx)
    b = Builder(ctx.jax_device(), x)
    wrap = grad_of_sum_of_squares if backward else (lambda f: f)
    b.add("jaxops", lambda: b.jax(wrap(lambda v: jaxops.max_pool(v, c.kernel, **c.kw())), x))
    _max_peers(b, c, x, ctx, backward)
    y = jaxops.max_pool(np.zeros((1, 1) + x.shape[2:], x.dtype), c.kernel, **c.kw())
    out = x.nbytes if backward else x.shape[0] * x.shape[1] * y.size * x.itemsize
    return b, (x.nbytes, out), x.dtype

  return build


def _plane_offsets(shape: tuple[int, ...], nd: int) -> np.ndarray:
  plane = int(np.prod(shape[2:]))
  return (np.arange(shape[0] * shape[1]) * plane).reshape(shape[:2] + (1,) * nd)


def _max_indices(c: MaxCase) -> Any:
  """Forward with ONNX Indices; torch's per-plane indices are made global for the check."""

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    import torch
    x = _input(c.input_shape(ctx), ctx)
    b = Builder(ctx.jax_device(), x)
    b.add("jaxops", lambda: b.jax(lambda v: jaxops.max_pool(
        v, c.kernel, return_indices=True, **c.kw())[1], x, note="the indices output"))
    b.skip("onnxruntime", "the harness binds one output")
    fn = getattr(torch.nn.functional, f"max_pool{c.n}d")
    offsets = torch.from_numpy(_plane_offsets(x.shape, c.n))

    def op(t: Any) -> Any:
      return fn(t, c.kernel, c.strides, c.pad, return_indices=True)[1] + offsets

    b.add("torch", lambda: torch_forward(op, x, ctx))
    y = jaxops.max_pool(np.zeros((1, 1) + x.shape[2:], x.dtype), c.kernel, **c.kw())
    return b, (x.nbytes, x.shape[0] * x.shape[1] * y.size * 8), x.dtype

  return build


def _max_unpool(backward: bool) -> Any:
  """MaxUnpool of the 2x2 s2 case: the pooled values and their indices back to 8x128x56x56."""
  c = MAX_CASES[1]

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    import torch
    x0 = _input(c.input_shape(ctx), ctx)
    x0 = np.ascontiguousarray(x0[..., :x0.shape[2] // 2 * 2, :x0.shape[3] // 2 * 2])
    yt, it = torch.nn.functional.max_pool2d(torch.from_numpy(x0), c.kernel, c.strides,
                                            return_indices=True)
    y = yt.numpy()
    glob = it.numpy() + _plane_offsets(x0.shape, c.n)
    b = Builder(ctx.jax_device(), y)
    wrap = grad_of_sum_of_squares if backward else (lambda f: f)
    # The indices are an argument, as in a user's program (max_pool's output): closed over, they
    # would be a constant of the compiled program, which XLA may fold its work on.
    b.add("jaxops", lambda: b.jax(wrap(lambda v, k: jaxops.max_unpool(v, k, c.kernel,
                                                                      strides=c.strides)),
                                  y, glob.astype(np.int32)))
    if backward:
      b.skip("onnxruntime", ORT_NO_BACKWARD)
    elif ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system(
          "MaxUnpool", {"x": y, "i": glob.astype(np.int64)}, node_inputs=["x", "i"],
          attrs={"kernel_shape": list(c.kernel), "strides": list(c.strides)}, opset=POOL_OPSET,
          threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)

    def op(t: Any) -> Any:
      return torch.nn.functional.max_unpool2d(t, it.to(t.device), c.kernel, c.strides,
                                              output_size=x0.shape[2:])

    b.add("torch", lambda: (torch_grad if backward else torch_forward)(op, y, ctx))
    return b, (y.nbytes + glob.nbytes // 2, y.nbytes if backward else x0.nbytes), y.dtype

  return build


def _lp(backward: bool) -> Any:
  """LpPool p=2 3x3 s2 on 8x64x112x112 (no padding: torch's lp_pool has none)."""
  shape, kernel, strides = (8, 64, 112, 112), (3, 3), (2, 2)

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    import torch
    x = _input((1, 2, 9, 9) if ctx.tiny else ctx.sized(shape), ctx)
    b = Builder(ctx.jax_device(), x)
    wrap = grad_of_sum_of_squares if backward else (lambda f: f)
    b.add("jaxops", lambda: b.jax(wrap(lambda v: jaxops.lp_pool(v, kernel, p=2,
                                                                strides=strides)), x))
    if backward:
      b.skip("onnxruntime", ORT_NO_BACKWARD)
    elif ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system(
          "LpPool", {"x": x}, node_inputs=["x"],
          attrs={"kernel_shape": list(kernel), "strides": list(strides), "p": 2},
          opset=POOL_OPSET, threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)

    def op(t: Any) -> Any:
      return torch.nn.functional.lp_pool2d(t, 2.0, kernel, strides)

    b.add("torch", lambda: (torch_grad if backward else torch_forward)(op, x, ctx))
    y = jaxops.lp_pool(np.zeros((1, 1) + x.shape[2:], x.dtype), kernel, strides=strides)
    out = x.nbytes if backward else x.shape[0] * x.shape[1] * y.size * x.itemsize
    return b, (x.nbytes, out), x.dtype

  return build


SPECS = SPECS + tuple(
    [Spec("MaxPool", c.name, p, _max(c, p == "bwd")) for c in MAX_CASES for p in ("fwd", "bwd")]
    + [Spec("MaxPool", MAX_CASES[0].name + " indices", "fwd", _max_indices(MAX_CASES[0]))]
    + [Spec("MaxUnpool", "2d k2 s2", p, _max_unpool(p == "bwd")) for p in ("fwd", "bwd")]
    + [Spec("LpPool", "p2 2d k3 s2", p, _lp(p == "bwd")) for p in ("fwd", "bwd")])
