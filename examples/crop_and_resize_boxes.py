"""Recover crop boxes by gradient descent through ONNX Resize's ``tf_crop_and_resize``.

``jaxops.resize(image, sizes=..., roi=box, coordinate_transformation_mode="tf_crop_and_resize")``
is TensorFlow's crop_and_resize as ONNX defines it: the output samples the region of interest
``box = [y1, x1, y2, x2]`` (normalised coordinates) of the input. ``roi`` may be a traced value,
and resize is differentiable with respect to it, so boxes can be *fitted*.

Here a smooth synthetic image is cropped at a few known boxes; starting from perturbed guesses,
Adam moves every guess (all at once, under ``jax.vmap`` over boxes) until its crop matches the
target crop. The printed box error (mean absolute corner error, in pixels) falls towards zero.

Run it::

  python examples/crop_and_resize_boxes.py            # 8 boxes, 200 steps
  python examples/crop_and_resize_boxes.py --steps 60
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxops

CROP = 24          # crops are CROP x CROP samples


def smooth_image(rng: np.random.Generator, size: int) -> np.ndarray:
  """A (size, size) float32 image: a sum of 40 random Gaussian bumps (smooth, no symmetries)."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) / (size - 1)
  img = np.zeros((size, size))
  for _ in range(40):
    cy, cx = rng.uniform(0, 1, 2)
    s = rng.uniform(0.04, 0.12)
    img += rng.uniform(-1, 1) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
  return img.astype(np.float32)


def crop(image: jax.Array, box: jax.Array) -> jax.Array:
  """The (CROP, CROP) bilinear crop of ``image`` at ``box = [y1, x1, y2, x2]`` (normalised)."""
  return jaxops.resize(image, sizes=(CROP, CROP), roi=box, mode="linear",
                       coordinate_transformation_mode="tf_crop_and_resize",
                       extrapolation_value=0.0)


def random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
  """``n`` boxes [y1, x1, y2, x2] with sides 0.25..0.45 inside [0.1, 0.9]."""
  side = rng.uniform(0.25, 0.45, (n, 2))
  start = rng.uniform(0.1, 0.9 - side)
  return np.concatenate([start, start + side], axis=1).astype(np.float32)


def fit(steps: int = 200, *, n_boxes: int = 8, size: int = 64, jitter: float = 0.08,
        learning_rate: float = 2e-3, seed: int = 0, report_every: int = 0) -> list[float]:
  """Fits ``n_boxes`` perturbed boxes to their target crops; returns the box error per step.

  The error is the mean absolute difference between fitted and true box coordinates, in pixels
  of the ``size`` x ``size`` image.
  """
  rng = np.random.default_rng(seed)
  image = jnp.asarray(smooth_image(rng, size))
  true_boxes = random_boxes(rng, n_boxes)
  boxes = jnp.asarray(true_boxes + rng.uniform(-jitter, jitter, true_boxes.shape)
                      .astype(np.float32))
  crops = jax.vmap(crop, in_axes=(None, 0))            # one image, a batch of boxes
  targets = crops(image, jnp.asarray(true_boxes))

  def loss_fn(b: jax.Array) -> jax.Array:
    return jnp.mean((crops(image, b) - targets) ** 2)

  opt = optax.adam(learning_rate)
  state = opt.init(boxes)

  @jax.jit
  def step(b: jax.Array, s: optax.OptState) -> tuple[jax.Array, optax.OptState, jax.Array]:
    loss, g = jax.value_and_grad(loss_fn)(b)
    updates, s = opt.update(g, s)
    return optax.apply_updates(b, updates), s, loss

  errors = [float(np.mean(np.abs(np.asarray(boxes) - true_boxes))) * (size - 1)]
  for i in range(steps):
    boxes, state, loss = step(boxes, state)
    errors.append(float(np.mean(np.abs(np.asarray(boxes) - true_boxes))) * (size - 1))
    if report_every and (i + 1) % report_every == 0:
      print(f"  step {i + 1:4d}  crop MSE {float(loss):.2e}  box error {errors[-1]:.4f} px")
  return errors


def main(argv: list[str] | None = None) -> list[float]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--boxes", type=int, default=8)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  t0 = time.perf_counter()
  print(f"fitting {args.boxes} boxes through jaxops.resize(tf_crop_and_resize) under jax.vmap")
  errors = fit(args.steps, n_boxes=args.boxes, seed=args.seed,
               report_every=max(1, args.steps // 10))
  print(f"box error {errors[0]:.3f} px -> {errors[-1]:.4f} px in {args.steps} steps "
        f"({time.perf_counter() - t0:.1f} s)")
  return errors


if __name__ == "__main__":
  main()
