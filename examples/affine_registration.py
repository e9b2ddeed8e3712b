"""Recover an unknown affine warp between two images through affine_grid + grid_sample.

``jaxops.affine_grid(theta, size)`` turns a batch of 2x3 affine matrices into sampling grids
and ``jaxops.grid_sample(image, grid)`` reads the image there (ONNX AffineGrid / GridSample, the
spatial transformer of Jaderberg et al.). Both are differentiable with respect to theta, so a
warp can be *fitted*: here a smooth synthetic "moving" image is warped by a known random affine
matrix into the "fixed" image; starting from the identity, Adam moves theta until the warped
moving image matches the fixed one. The printed matrix error (largest absolute entry of
``theta - theta_true``) falls towards zero. The picture (moving, fixed, warped, difference)
goes to ``out/affine_registration.png``.

Run it::

  python examples/affine_registration.py               # 400 steps
  python examples/affine_registration.py --steps 80    # the short version the tests run
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxops

SIZE = 96


def smooth_image(rng: np.random.Generator, size: int) -> np.ndarray:
  """A (size, size) float32 image: a sum of random Gaussian bumps (smooth, no symmetries)."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) / (size - 1)
  img = np.zeros((size, size))
  for _ in range(30):
    cy, cx = rng.uniform(0.2, 0.8, 2)
    s = rng.uniform(0.06, 0.14)
    img += rng.uniform(-1, 1) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
  return img.astype(np.float32)


def warp(image: jax.Array, theta: jax.Array) -> jax.Array:
  """``image`` (H, W) sampled on the grid of the affine map ``theta`` (2, 3), bicubic, zeros."""
  size = (1, 1) + image.shape
  grid = jaxops.affine_grid(theta[None], size, align_corners=False)
  return jaxops.grid_sample(image[None, None], grid, mode="cubic", padding_mode="zeros")[0, 0]


def register(steps: int = 400, *, seed: int = 0, learning_rate: float = 1e-2,
             report_every: int = 0) -> dict[str, np.ndarray | list[float]]:
  """Fits theta so that warp(moving, theta) matches fixed; returns the errors and images."""
  rng = np.random.default_rng(seed)
  moving = jnp.asarray(smooth_image(rng, SIZE))
  angle, scale = rng.uniform(-0.25, 0.25), rng.uniform(0.85, 1.15)
  shear, shift = rng.uniform(-0.1, 0.1), rng.uniform(-0.12, 0.12, 2)
  rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
  true = np.concatenate([scale * rot @ np.array([[1, shear], [0, 1]]), shift[:, None]], axis=1)
  true = jnp.asarray(true, jnp.float32)
  fixed = warp(moving, true)

  def loss_fn(theta: jax.Array) -> jax.Array:
    return jnp.mean((warp(moving, theta) - fixed) ** 2)

  opt = optax.adam(optax.cosine_decay_schedule(learning_rate, max(steps, 1), alpha=0.05))
  theta = jnp.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], jnp.float32)
  state = opt.init(theta)

  @jax.jit
  def step(t: jax.Array, s: optax.OptState) -> tuple[jax.Array, optax.OptState, jax.Array]:
    loss, g = jax.value_and_grad(loss_fn)(t)
    updates, s = opt.update(g, s)
    return optax.apply_updates(t, updates), s, loss

  errors = [float(jnp.max(jnp.abs(theta - true)))]
  for i in range(steps):
    theta, state, loss = step(theta, state)
    errors.append(float(jnp.max(jnp.abs(theta - true))))
    if report_every and (i + 1) % report_every == 0:
      print(f"  step {i + 1:4d}  image MSE {float(loss):.2e}  matrix error {errors[-1]:.5f}")
  warped = warp(moving, theta)
  return {"errors": errors, "theta": np.asarray(theta), "true": np.asarray(true),
          "moving": np.asarray(moving), "fixed": np.asarray(fixed), "warped": np.asarray(warped)}


def save_picture(result: dict, path: pathlib.Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
  diff = result["warped"] - result["fixed"]
  panels = (("moving", result["moving"]), ("fixed", result["fixed"]),
            ("warped moving (fitted theta)", result["warped"]), ("warped - fixed", diff))
  for ax, (title, img) in zip(axes, panels):
    ax.imshow(img, cmap="RdBu_r" if title.startswith("warped -") else "viridis")
    ax.set_title(title)
    ax.axis("off")
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=80)
  plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=400)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default="out/affine_registration.png")
  args = parser.parse_args(argv)
  t0 = time.perf_counter()
  print("registering two images through jaxops.affine_grid + jaxops.grid_sample (cubic)")
  result = register(args.steps, seed=args.seed, report_every=max(1, args.steps // 8))
  errors = result["errors"]
  print(f"matrix error {errors[0]:.4f} -> {errors[-1]:.6f} in {args.steps} steps "
        f"({time.perf_counter() - t0:.1f} s)")
  print("recovered theta:\n", np.round(result["theta"], 4), "\ntrue theta:\n",
        np.round(result["true"], 4))
  save_picture(result, pathlib.Path(args.out))
  print(f"wrote {args.out}")
  return result


if __name__ == "__main__":
  main()
