"""jaxops in one minute: every operator on a procedurally drawn zone plate, in one PNG.

A zone plate (``cos(k * r**2)``: rings whose frequency grows with the radius) is the classic
test card for resampling, because every frequency is on it: aliasing shows as false rings.
This script runs every operator jaxops has on it and writes a labelled grid to
``out/quickstart.png``:

* ``jaxops.resize``: 4x down in every mode (nearest, linear, cubic), and with ``antialias``
  (linear, cubic); 4x up of the centre in every mode; a ``tf_crop_and_resize`` crop.
* ``jaxops.average_pool``: a 4x4 box downsample and a 5x5 "same" blur (``count_include_pad``
  off, so the border is not darkened); ``jaxops.global_average_pool``: the mean.
* ``jaxops.max_pool`` (with Indices), ``jaxops.lp_pool``, ``jaxops.max_unpool``,
  ``jaxops.global_max_pool``; ``jaxops.affine_grid`` + ``jaxops.grid_sample`` (a rotation) and
  ``jaxops.roi_align`` (a box).
* ``jaxops.cast``: to float16, bfloat16, float8 (E4M3FN, E5M2), int4 and uint8 and back,
  showing what each format keeps; ``jaxops.constant_of_shape``: a constant tile.

Run it with ``make demo`` or ``python examples/quickstart.py [--out DIR] [--size N]``.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxops


def zone_plate(size: int) -> np.ndarray:
  """A (size, size) float32 zone plate in [0, 1].

  Its local frequency grows linearly with the radius and reaches Nyquist (0.5 cycles/pixel)
  in the middle of each edge; the corners are beyond it.
  """
  c = (np.arange(size, dtype=np.float64) - (size - 1) / 2) / (size / 2)
  r2 = c[:, None] ** 2 + c[None, :] ** 2
  return (0.5 + 0.5 * np.cos(np.pi * size / 4 * r2)).astype(np.float32)


def run_all(size: int = 256) -> list[tuple[str, np.ndarray, str]]:
  """Runs every op on the zone plate; returns (label, image in [0, 1], note) for the grid."""
  img = zone_plate(size)
  x = jnp.asarray(img)[None, None]                # NCHW, as ONNX lays images out
  tiles: list[tuple[str, np.ndarray, str]] = [("zone plate (input)", img, f"{size}x{size} float32")]

  def show(label: str, y: jax.Array, note: str = "") -> None:
    arr = np.asarray(jnp.asarray(y, jnp.float32)).reshape(y.shape[-2:])
    tiles.append((label, arr, note or f"{'x'.join(map(str, y.shape[-2:]))} {y.dtype}"))

  # resize: every mode, 4x down, without and with antialias (antialias widens the filter by the
  # scale, so the high-frequency rings no longer alias into false low-frequency ones).
  # ONNX defines antialias for linear and cubic only (jaxops rejects it with nearest).
  for mode, antialias in (("nearest", False), ("linear", False), ("cubic", False),
                          ("linear", True), ("cubic", True)):
    y = jaxops.resize(x, scales=(1.0, 1.0, 0.25, 0.25), mode=mode, antialias=antialias)
    show(f"resize {mode} 1/4" + (" +antialias" if antialias else ""), y)
  # resize: every mode, 4x up of the centre (sizes + axes: only H and W are named).
  centre = x[..., size * 3 // 8: size * 5 // 8, size * 3 // 8: size * 5 // 8]
  for mode in ("nearest", "linear", "cubic"):
    smooth = jaxops.resize(centre, sizes=(size, size), axes=(2, 3), mode=mode)
    show(f"resize {mode} 4x up (centre)", smooth)
  # resize: crop-and-resize a region of interest (normalised [y1, x1, y2, x2]), as TF does.
  roi = np.array([0.6, 0.6, 0.95, 0.95], np.float32)
  y = jaxops.resize(x, sizes=(size // 2, size // 2), axes=(2, 3), roi=roi, mode="linear",
                    coordinate_transformation_mode="tf_crop_and_resize")
  show("resize tf_crop_and_resize", y, "roi [.6,.6,.95,.95]")

  # average_pool: a 4x4 box-filter downsample, and a 5x5 stride-1 blur padded to keep the size.
  show("average_pool 4x4 /4", jaxops.average_pool(x, kernel_shape=(4, 4), strides=(4, 4)))
  y = jaxops.average_pool(x, kernel_shape=(5, 5), pads=(2, 2, 2, 2), count_include_pad=False)
  show("average_pool 5x5 blur", y)
  g = jaxops.global_average_pool(x)
  show("global_average_pool", jnp.broadcast_to(g, (1, 1, 8, 8)), f"mean = {float(g[0, 0, 0, 0]):.4f}")

  # max_pool / lp_pool: a 4x4 max downsample (with ONNX's flat argmax Indices), a 4x4 L2 pool
  # (divided by 4, the L2 norm of a window of ones), max_unpool back to full size (the maxima at
  # their Indices, zeros elsewhere), and the global max.
  m, idx = jaxops.max_pool(x, (4, 4), strides=(4, 4), return_indices=True)
  show("max_pool 4x4 /4", m)
  show("lp_pool p=2 4x4 /4", jaxops.lp_pool(x, (4, 4), p=2, strides=(4, 4)) / 4)
  show("max_unpool 4x4", jaxops.max_unpool(m, idx, (4, 4), strides=(4, 4)))
  gm = jaxops.global_max_pool(x)
  show("global_max_pool", jnp.broadcast_to(gm, (1, 1, 8, 8)), f"max = {float(gm[0, 0, 0, 0]):.4f}")

  # affine_grid + grid_sample: rotate by 30 degrees about the centre (cubic, border padding);
  # roi_align: the 7x7 average of a box around the centre, enlarged for display.
  a = np.deg2rad(30.0)
  theta = jnp.asarray([[[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0]]], jnp.float32)
  grid = jaxops.affine_grid(theta, x.shape)
  show("grid_sample rotate 30", jaxops.grid_sample(x, grid, mode="cubic", padding_mode="border"))
  box = np.array([[0.4 * size, 0.4 * size, 0.6 * size, 0.6 * size]], np.float32)
  r = jaxops.roi_align(x, box, np.zeros(1, np.int32), output_height=7, output_width=7,
                       sampling_ratio=2)
  show("roi_align 7x7 (centre box)", jaxops.resize(r, sizes=(64, 64), axes=(2, 3)), "7x7 float32")

  # cast: quantise the smooth (cubic) enlargement and come back to float32 to show what each
  # format keeps; the coarse ones band.
  x = jnp.clip(smooth, 0.0, 1.0)
  for to, scale, offset in (("FLOAT16", 1.0, 0.0), ("BFLOAT16", 1.0, 0.0),
                            ("FLOAT8E4M3FN", 1.0, 0.0), ("FLOAT8E5M2", 1.0, 0.0),
                            ("INT4", 15.0, -8.0), ("UINT8", 255.0, 0.0)):
    q = jaxops.cast(x * scale + offset, to)
    back = (jaxops.cast(q, "FLOAT") - offset) / scale
    err = float(jnp.max(jnp.abs(back - x)))
    show(f"cast -> {to} -> FLOAT", back, f"{q.dtype}, max err {err:.2g}")

  # constant_of_shape: a constant tensor of the requested shape (default: float32 zeros).
  c = jaxops.constant_of_shape(np.array([1, 1, 64, 64]), np.array([0.5], np.float32))
  show("constant_of_shape 0.5", c)
  return tiles


def save_grid(tiles: list[tuple[str, np.ndarray, str]], path: pathlib.Path, cols: int = 5) -> None:
  """A labelled grid of grey images (nearest display, so resampling is what you see)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = -(-len(tiles) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 3.2 * rows), dpi=80)
  for ax in axes.ravel():
    ax.axis("off")
  for ax, (label, arr, note) in zip(axes.ravel(), tiles):
    ax.imshow(arr, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_title(f"{label}\n{note}", fontsize=9)
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path)
  plt.close(fig)


def main(argv: list[str] | None = None) -> pathlib.Path:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"))
  parser.add_argument("--size", type=int, default=256)
  args = parser.parse_args(argv)
  t0 = time.perf_counter()
  tiles = run_all(args.size)
  path = args.out / "quickstart.png"
  save_grid(tiles, path)
  for label, _, note in tiles:
    print(f"  {label:34s} {note}")
  print(f"{len(tiles) - 1} results from every jaxops op on a {args.size}x{args.size} zone plate in "
        f"{time.perf_counter() - t0:.1f} s; wrote {path}")
  return path


if __name__ == "__main__":
  main()
