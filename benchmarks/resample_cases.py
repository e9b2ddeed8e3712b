"""GridSample, AffineGrid + GridSample and RoiAlign cases: jaxops against torch, onnxruntime and
jax.scipy.ndimage.map_coordinates.

map_coordinates (order 1, mode "constant") computes the same samples as grid_sample linear with
zeros padding, given pixel coordinates: the grid is converted to pixel coordinates before timing
and the call is vmapped over batch and channel. The backward rows are the gradient of
``sum(out ** 2)`` with respect to every floating input (x and grid; theta for affine_grid),
returned as a user gets them (a tuple; flattened and concatenated only for the agreement check,
which is not timed).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._harness import Builder, Context, Spec
from benchmarks._peers import ORT_NO_BACKWARD, ORT_NOT_ON_GPU, ort_system, to_torch, torch_system

OPSET = 20
GRID_CASES = {
    # name: (x shape, grid shape, mode, padding)
    "bilinear zeros 2d": ((8, 32, 128, 128), (8, 128, 128, 2), "linear", "zeros"),
    "bicubic border 2d": ((8, 32, 128, 128), (8, 128, 128, 2), "cubic", "border"),
    "trilinear zeros 3d": ((2, 16, 32, 64, 64), (2, 32, 64, 64, 3), "linear", "zeros"),
}
TORCH_MODE = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


def _shapes(ctx: Context, x_shape: tuple[int, ...], g_shape: tuple[int, ...]):
  if ctx.tiny:
    r = len(x_shape) - 2
    return (1, 2) + (5,) * r, (1,) + (4,) * r + (r,)
  return ctx.sized(x_shape), ctx.sized(g_shape)


def _inputs(ctx: Context, x_shape, g_shape) -> tuple[np.ndarray, np.ndarray]:
  rng = ctx.rng()
  x = rng.standard_normal(x_shape, dtype=np.float32)
  g = rng.uniform(-1.1, 1.1, g_shape).astype(np.float32)
  return x, g


def _map_coordinates_fn(x_shape: tuple[int, ...]) -> Any:
  """grid (pixel coordinates, axis-major) -> samples, as grid_sample linear zeros."""
  from jax.scipy.ndimage import map_coordinates

  def per_plane(plane: jax.Array, coords: jax.Array) -> jax.Array:
    return map_coordinates(plane, list(coords), order=1, mode="constant", cval=0.0)

  def f(x: jax.Array, coords: jax.Array) -> jax.Array:
    # x (N, C, *S), coords (N, r, *O): vmap over channels, then over the batch
    over_c = jax.vmap(per_plane, in_axes=(0, None))
    return jax.vmap(over_c)(x, coords)

  del x_shape
  return f


def _pixel_coords(g: np.ndarray, spatial: tuple[int, ...]) -> np.ndarray:
  """align_corners=False pixel coordinates, axis-major: (N, r, *O)."""
  r = len(spatial)
  cols = [((g[..., r - 1 - a] + 1) * spatial[a] - 1) / 2 for a in range(r)]
  return np.stack(cols, axis=1).astype(np.float32)


def _grid_sample(name: str, backward: bool) -> Any:
  x_full, g_full, mode, pad = GRID_CASES[name]

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    x_shape, g_shape = _shapes(ctx, x_full, g_full)
    x, g = _inputs(ctx, x_shape, g_shape)
    b = Builder(ctx.jax_device(), x)
    out_n = x.shape[0] * x.shape[1] * int(np.prod(g.shape[1:-1]))

    def fwd(a: jax.Array, gr: jax.Array) -> jax.Array:
      return jaxops.grid_sample(a, gr, mode=mode, padding_mode=pad)

    def bwd(a: jax.Array, gr: jax.Array) -> tuple[jax.Array, jax.Array]:
      return jax.grad(lambda u, v: jnp.sum(jnp.square(fwd(u, v))), argnums=(0, 1))(a, gr)

    b.add("jaxops", lambda: b.jax(bwd if backward else fwd, x, g))
    _add_torch(b, ctx, x, g, mode, pad, backward)
    if backward:
      b.skip("onnxruntime", ORT_NO_BACKWARD)
    elif ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system(
          "GridSample", {"x": x, "g": g}, node_inputs=["x", "g"],
          attrs={"mode": mode, "padding_mode": pad, "align_corners": 0}, opset=OPSET,
          threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)
    if mode == "linear" and pad == "zeros":
      mc = _map_coordinates_fn(x.shape)
      coords = _pixel_coords(g, x.shape[2:])
      if backward:
        def mc_bwd(a: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
          da, dc = jax.grad(lambda u, v: jnp.sum(jnp.square(mc(u, v))), argnums=(0, 1))(a, c)
          # d/dgrid = d/dcoords * size / 2, and grid's layout is (N, *O, r), innermost first
          r = x.ndim - 2
          scale = jnp.asarray([x.shape[2 + a] / 2 for a in range(r)], dc.dtype)
          return da, jnp.moveaxis(dc * scale.reshape((1, r) + (1,) * r), 1, -1)[..., ::-1]

        b.add("map_coordinates", lambda: b.jax(mc_bwd, x, coords,
                                               note="pixel coordinates precomputed"))
      else:
        b.add("map_coordinates", lambda: b.jax(mc, x, coords,
                                               note="pixel coordinates precomputed"))
    else:
      b.skip("map_coordinates", "order 1 with constant padding only (no cubic, no border)")
    out = (x.nbytes + g.nbytes) if backward else out_n * 4
    return b, (x.nbytes + g.nbytes, out), x.dtype

  return build


def _add_torch(b: Builder, ctx: Context, x: np.ndarray, g: np.ndarray, mode: str, pad: str,
               backward: bool) -> None:
  def system() -> Any:
    import torch
    xt = to_torch(x, ctx, requires_grad=backward)
    gt = to_torch(g, ctx, requires_grad=backward)

    def fwd() -> Any:
      return torch.nn.functional.grid_sample(xt, gt, mode=TORCH_MODE[mode], padding_mode=pad,
                                             align_corners=False)

    if backward:
      def run() -> Any:
        y = fwd()
        return torch.autograd.grad((y * y).sum(), (xt, gt))
    else:
      def run() -> Any:
        with torch.inference_mode():
          return fwd()

    return torch_system(run, ctx)

  b.add("torch", system)


AFFINE_X = (8, 32, 128, 128)


def _affine(backward: bool) -> Any:
  """affine_grid + grid_sample (bilinear, zeros); backward: the gradient w.r.t. theta."""

  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    shape = (1, 2, 6, 6) if ctx.tiny else ctx.sized(AFFINE_X)
    rng = ctx.rng()
    x = rng.standard_normal(shape, dtype=np.float32)
    theta = (np.eye(2, 3)[None] + 0.1 * rng.standard_normal((shape[0], 2, 3))).astype(np.float32)
    b = Builder(ctx.jax_device(), x)

    def fwd(t: jax.Array, a: jax.Array) -> jax.Array:
      return jaxops.grid_sample(a, jaxops.affine_grid(t, a.shape))

    def bwd(t: jax.Array, a: jax.Array) -> jax.Array:
      return jax.grad(lambda u: jnp.sum(jnp.square(fwd(u, a))))(t)

    b.add("jaxops", lambda: b.jax(bwd if backward else fwd, theta, x))

    def torch_sys() -> Any:
      import torch
      tt = to_torch(theta, ctx, requires_grad=backward)
      xt = to_torch(x, ctx)

      def f() -> Any:
        grid = torch.nn.functional.affine_grid(tt, list(shape), align_corners=False)
        return torch.nn.functional.grid_sample(xt, grid, align_corners=False)

      if backward:
        def run() -> Any:
          y = f()
          return torch.autograd.grad((y * y).sum(), tt)[0]
      else:
        def run() -> Any:
          with torch.inference_mode():
            return f()

      return torch_system(run, ctx)

    b.add("torch", torch_sys)
    b.skip("onnxruntime", ORT_NO_BACKWARD if backward else "two nodes (AffineGrid, GridSample)")
    return b, (x.nbytes, theta.nbytes if backward else x.nbytes), x.dtype

  return build


ROI_X = (2, 256, 50, 68)
ROI_N = 512


def _rois(ctx: Context, n: int, batch: int, h: int, w: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
  """``n`` detection-like boxes in image coordinates (the map is ``scale`` of the image)."""
  rng = ctx.rng()
  img_h, img_w = h / scale, w / scale
  size = rng.uniform(0.05, 0.5, (n, 2)) * np.array([img_w, img_h])
  start = rng.uniform(0, 1, (n, 2)) * (np.array([img_w, img_h]) - size)
  rois = np.concatenate([start, start + size], axis=1).astype(np.float32)
  return rois, rng.integers(0, batch, n).astype(np.int64)


def _roi_align(sampling_ratio: int, mode: str = "avg") -> Any:
  """RoiAlign on a detection-like map. mode="max" times what the ONNX front end runs (the largest
  weighted corner value, as onnxruntime computes it; ``jaxops.roi_align``'s own max, the largest
  interpolated sample, is the same loop with a sum of the corners)."""
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    from jaxops import _roi_align
    shape = (1, 2, 6, 7) if ctx.tiny else ROI_X
    n = 4 if ctx.tiny else ROI_N
    scale = 0.0625
    x = ctx.rng().standard_normal(shape, dtype=np.float32)
    rois, bi = _rois(ctx, n, shape[0], shape[2], shape[3], scale)
    b = Builder(ctx.jax_device(), x)
    kw = dict(output_height=7, output_width=7, sampling_ratio=sampling_ratio,
              spatial_scale=scale)
    if mode == "avg":
      b.add("jaxops", lambda: b.jax(lambda a, r, i: jaxops.roi_align(a, r, i, **kw), x, rois,
                                    bi))
    else:
      cfg = _roi_align._config("max", 7, 7, sampling_ratio, scale, "half_pixel", None, True)
      b.add("jaxops", lambda: b.jax(lambda a, r, i: _roi_align._roi_align_checked(a, r, i, cfg),
                                    x, rois, bi))
    if ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system(
          "RoiAlign", {"x": x, "r": rois, "b": bi}, node_inputs=["x", "r", "b"],
          attrs=dict(kw, mode=mode, coordinate_transformation_mode="half_pixel"), opset=16,
          threads=ctx.threads))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)
    b.skip("torch", "torchvision does not load next to the CPU torch; torch ops composed by "
                    "hand are not a peer")
    return b, (x.nbytes, n * shape[1] * 49 * 4), x.dtype

  return build


SPECS = tuple(
    [Spec("GridSample", name, p, _grid_sample(name, p == "bwd"))
     for name in GRID_CASES for p in ("fwd", "bwd")]
    + [Spec("AffineGrid+GridSample", "2d bilinear theta", p, _affine(p == "bwd"))
       for p in ("fwd", "bwd")]
    + [Spec("RoiAlign", f"avg 7x7 sampling_ratio {sr}", "fwd", _roi_align(sr)) for sr in (2, 0)]
    + [Spec("RoiAlign", "max 7x7 sampling_ratio 2", "fwd", _roi_align(2, "max"))])
