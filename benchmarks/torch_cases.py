"""jaxops.torch cases: each function against the jaxops operator it maps to and against torch.

A row's jaxops system is the ``jaxops.torch`` call, as a porter writes it; the jaxops operator
it maps to runs beside it as a reference that is not a peer (its column shows the namespace's
overhead: the issue's bar is the operator's time plus 5%), and torch 2.13 CPU (or CUDA on a
GPU) is the peer. Shapes are the underlying operators' benchmark shapes, plus
``adaptive_avg_pool2d`` 7x7 from 8x512x14x14 and ``interpolate(bicubic, scale_factor=2.5)``.
Backward rows time the gradients of ``sum(out ** 2)`` with respect to every floating input
(x; and grid, theta or boxes where the function has them), returned as a tuple as a user gets
them (flattened and concatenated only for the agreement check, which is not timed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._harness import Builder, Context, Spec
from benchmarks._peers import to_torch, torch_system


@dataclasses.dataclass(frozen=True)
class TorchCase:
  """One jaxops.torch call.

  Attributes:
    name: the row's name (the function and its configuration).
    inputs: ``ctx -> (jaxops.torch's inputs, the operator's inputs)`` as NumPy arrays (the
      operator may take its inputs in another form: flat indices, rois and batch indices).
    ours: ``(F, *inputs) -> output`` with ``F`` the jaxops.torch module.
    op: ``(jaxops, *op_inputs) -> output``: the operator the function maps to.
    theirs: ``(torch.nn.functional, *tensors) -> output``, or None where torch has no peer.
    grads: positions of the differentiable inputs (the same in all three); () for forward only.
    pick: which output the agreement check and the loss use, where the call returns a tuple.
  """

  name: str
  inputs: Callable[[Context], tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]]
  ours: Callable[..., Any]
  op: Callable[..., Any]
  theirs: Callable[..., Any] | None
  grads: tuple[int, ...] = (0,)
  pick: int | None = None
  no_torch: str = ""


def _normal(ctx: Context, shape: tuple[int, ...], tiny: tuple[int, ...]) -> np.ndarray:
  return ctx.rng().standard_normal(tiny if ctx.tiny else ctx.sized(shape), dtype=np.float32)


def _same(shape: tuple[int, ...], tiny: tuple[int, ...]) -> Callable[[Context], Any]:
  def make(ctx: Context) -> Any:
    x = _normal(ctx, shape, tiny)
    return (x,), (x,)

  return make


def _uint8_image(ctx: Context) -> Any:
  shape = (1, 2, 5, 5) if ctx.tiny else ctx.sized((8, 3, 256, 256))
  x = ctx.rng().integers(0, 256, shape, dtype=np.uint8)
  return (x,), (x,)


def _unpool_inputs(ctx: Context) -> Any:
  """max_pool2d k2 s2 of 8x128x56x56 (torch computes the per-plane indices): the unpool's
  input and indices; the operator gets the flat indices over the whole input."""
  import torch
  src = _normal(ctx, (8, 128, 56, 56), (1, 2, 6, 6))
  y, idx = torch.nn.functional.max_pool2d(torch.from_numpy(src), 2, 2, return_indices=True)
  idx = idx.numpy()
  plane = src.shape[2] * src.shape[3]
  flat = idx + (np.arange(idx.shape[0] * idx.shape[1]) * plane).reshape(idx.shape[:2] + (1, 1))
  return (y.numpy(), idx), (y.numpy(), flat)


def _grid_inputs(ctx: Context) -> Any:
  rng = ctx.rng()
  x = _normal(ctx, (8, 32, 128, 128), (1, 2, 5, 5))
  g = rng.uniform(-1.1, 1.1, (x.shape[0],) + ((4, 4) if ctx.tiny else (128, 128)) + (2,))
  return (x, g.astype(np.float32)), (x, g.astype(np.float32))


def _affine_inputs(ctx: Context) -> Any:
  rng = ctx.rng()
  x = _normal(ctx, (8, 32, 128, 128), (1, 2, 6, 6))
  theta = np.eye(2, 3)[None] + 0.1 * rng.standard_normal((x.shape[0], 2, 3))
  return (x, theta.astype(np.float32)), (x, theta.astype(np.float32))


ROI_X, ROI_N, ROI_SCALE = (2, 256, 50, 68), 512, 0.0625


def _roi_inputs(ctx: Context) -> Any:
  """Detection-like boxes (as benchmarks.resample_cases) and their batch indices; the
  jaxops.torch call joins them into torchvision's [K, 5] rows (batch index, box) inside the timed
  function, so that both systems' gradients are (x, boxes)."""
  rng = ctx.rng()
  shape = (1, 2, 6, 7) if ctx.tiny else ROI_X
  n = 4 if ctx.tiny else ROI_N
  x = rng.standard_normal(shape, dtype=np.float32)
  img = np.array([shape[3], shape[2]]) / ROI_SCALE
  size = rng.uniform(0.05, 0.5, (n, 2)) * img
  start = rng.uniform(0, 1, (n, 2)) * (img - size)
  rois = np.concatenate([start, start + size], axis=1).astype(np.float32)
  bi = rng.integers(0, shape[0], n)
  return (x, rois, bi.astype(np.int64)), (x, rois, bi.astype(np.int64))


NO_TORCHVISION = ("torchvision does not load next to the CPU torch; torch ops composed by hand "
                  "are not a peer")

CASES = (
    TorchCase("interpolate bilinear x2", _same((8, 3, 256, 256), (1, 2, 5, 5)),
              lambda F, x: F.interpolate(x, scale_factor=2, mode="bilinear"),
              lambda J, x: J.resize(x, scales=(1, 1, 2, 2), mode="linear"),
              lambda T, x: T.interpolate(x, scale_factor=2, mode="bilinear")),
    # torch's integer arithmetic on uint8 (jaxops._torch_uint8); the ONNX operator beside it
    # resizes uint8 in float and rounds once (within 1 of torch's per-pass rounding)
    TorchCase("interpolate bilinear x2 uint8", _uint8_image,
              lambda F, x: F.interpolate(x, scale_factor=2, mode="bilinear"),
              lambda J, x: J.resize(x, scales=(1, 1, 2, 2), mode="linear"),
              lambda T, x: T.interpolate(x, scale_factor=2, mode="bilinear"), grads=()),
    TorchCase("interpolate bicubic x2.5", _same((8, 3, 256, 256), (1, 2, 5, 5)),
              lambda F, x: F.interpolate(x, scale_factor=2.5, mode="bicubic"),
              lambda J, x: J.resize(x, scales=(1, 1, 2.5, 2.5), mode="cubic"),
              lambda T, x: T.interpolate(x, scale_factor=2.5, mode="bicubic")),
    TorchCase("interpolate nearest x2", _same((8, 3, 256, 256), (1, 2, 5, 5)),
              lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest"),
              lambda J, x: J.resize(x, scales=(1, 1, 2, 2), mode="nearest",
                                    coordinate_transformation_mode="asymmetric",
                                    nearest_mode="floor"),
              lambda T, x: T.interpolate(x, scale_factor=2, mode="nearest")),
    TorchCase("avg_pool2d k3 s2 p1", _same((8, 64, 112, 112), (1, 2, 9, 9)),
              lambda F, x: F.avg_pool2d(x, 3, 2, 1),
              lambda J, x: J.average_pool(x, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                          count_include_pad=True),
              lambda T, x: T.avg_pool2d(x, 3, 2, 1)),
    TorchCase("adaptive_avg_pool2d 14->7", _same((8, 512, 14, 14), (1, 2, 14, 14)),
              lambda F, x: F.adaptive_avg_pool2d(x, 7),
              lambda J, x: J.average_pool(x, (2, 2), strides=(2, 2)),
              lambda T, x: T.adaptive_avg_pool2d(x, 7)),
    TorchCase("max_pool2d k3 s2 p1", _same((8, 64, 112, 112), (1, 2, 9, 9)),
              lambda F, x: F.max_pool2d(x, 3, 2, 1),
              lambda J, x: J.max_pool(x, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
              lambda T, x: T.max_pool2d(x, 3, 2, 1)),
    TorchCase("max_pool2d k3 s2 p1 return_indices", _same((8, 64, 112, 112), (1, 2, 9, 9)),
              lambda F, x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
              lambda J, x: J.max_pool(x, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                      return_indices=True),
              lambda T, x: T.max_pool2d(x, 3, 2, 1, return_indices=True), grads=(), pick=0),
    TorchCase("lp_pool2d p2 k3 s2", _same((8, 64, 112, 112), (1, 2, 9, 9)),
              lambda F, x: F.lp_pool2d(x, 2, 3, 2),
              lambda J, x: J.lp_pool(x, (3, 3), p=2, strides=(2, 2)),
              lambda T, x: T.lp_pool2d(x, 2, 3, 2)),
    TorchCase("max_unpool2d k2 s2", _unpool_inputs,
              lambda F, x, i: F.max_unpool2d(x, i, 2, 2),
              lambda J, x, i: J.max_unpool(x, i, (2, 2), strides=(2, 2)),
              lambda T, x, i: T.max_unpool2d(x, i, 2, 2)),
    TorchCase("adaptive_max_pool2d 14->7", _same((8, 512, 14, 14), (1, 2, 14, 14)),
              lambda F, x: F.adaptive_max_pool2d(x, 7),
              lambda J, x: J.max_pool(x, (2, 2), strides=(2, 2)),
              lambda T, x: T.adaptive_max_pool2d(x, 7)),
    TorchCase("grid_sample bilinear zeros", _grid_inputs,
              lambda F, x, g: F.grid_sample(x, g, align_corners=False),
              lambda J, x, g: J.grid_sample(x, g),
              lambda T, x, g: T.grid_sample(x, g, align_corners=False), grads=(0, 1)),
    TorchCase("affine_grid+grid_sample", _affine_inputs,
              lambda F, x, t: F.grid_sample(
                  x, F.affine_grid(t, x.shape, align_corners=False), align_corners=False),
              lambda J, x, t: J.grid_sample(x, J.affine_grid(t, x.shape)),
              lambda T, x, t: T.grid_sample(
                  x, T.affine_grid(t, x.shape, align_corners=False), align_corners=False),
              grads=(0, 1)),
    TorchCase("roi_align 7x7 sampling_ratio 2 aligned", _roi_inputs,
              lambda F, x, r, i: F.roi_align(
                  x, jnp.concatenate([i[:, None].astype(r.dtype), r], axis=1), 7, ROI_SCALE, 2,
                  True),
              lambda J, x, r, i: J.roi_align(x, r, i, output_height=7, output_width=7,
                                             sampling_ratio=2, spatial_scale=ROI_SCALE),
              None, grads=(0, 1), no_torch=NO_TORCHVISION),
)


def _jax_fn(call: Callable[..., Any], module: Any, pick: int | None, grads: tuple[int, ...],
            backward: bool) -> Callable[..., Any]:
  """The forward (picked output) or the gradients of sum(out ** 2) w.r.t. ``grads`` (a tuple,
  as a user gets them)."""

  def fwd(*args: Any) -> Any:
    out = call(module, *args)
    return out if pick is None else out[pick]

  if not backward:
    return fwd

  def bwd(*args: Any) -> tuple[jax.Array, ...]:
    return jax.grad(lambda *a: jnp.sum(jnp.square(fwd(*a))), argnums=grads)(*args)

  return bwd


def _torch_fn(c: TorchCase, theirs: Callable[..., Any], tensors: tuple[Any, ...],
              backward: bool) -> Callable[[], Any]:
  import torch
  fn = torch.nn.functional

  def fwd() -> Any:
    out = theirs(fn, *tensors)
    return out if c.pick is None else out[c.pick]

  if not backward:
    def run() -> Any:
      with torch.inference_mode():
        return fwd()

    return run

  def run_bwd() -> Any:
    y = fwd()
    return torch.autograd.grad((y * y).sum(), [tensors[i] for i in c.grads])

  return run_bwd


def _build(c: TorchCase, backward: bool) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    import jaxops.torch as F
    ours_in, op_in = c.inputs(ctx)
    b = Builder(ctx.jax_device(), ours_in[0])
    b.add("jaxops", lambda: b.jax(_jax_fn(c.ours, F, c.pick, c.grads, backward), *ours_in))
    b.add("jaxops operator", lambda: b.jax(_jax_fn(c.op, jaxops, c.pick, c.grads, backward),
                                           *op_in), peer=False)
    theirs = c.theirs
    if theirs is None:
      b.skip("torch", c.no_torch)
    else:
      def torch_peer() -> Any:
        tensors = tuple(to_torch(a, ctx, requires_grad=backward and i in c.grads)
                        for i, a in enumerate(ours_in))
        return torch_system(_torch_fn(c, theirs, tensors, backward), ctx)

      b.add("torch", torch_peer)
    floats = [a for a in ours_in if a.dtype.kind == "f"]
    read = sum(a.nbytes for a in ours_in)
    if backward:
      write = sum(ours_in[i].nbytes for i in c.grads)
    else:
      out = jax.eval_shape(_jax_fn(c.op, jaxops, c.pick, c.grads, False), *op_in)
      write = int(np.prod(out.shape)) * out.dtype.itemsize
    return b, (read, write), (floats or ours_in)[0].dtype

  return build


SPECS = tuple(
    [Spec("jaxops.torch", c.name, "fwd", _build(c, False)) for c in CASES]
    + [Spec("jaxops.torch", c.name, "bwd", _build(c, True)) for c in CASES if c.grads])
