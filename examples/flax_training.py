"""Train a small Flax NNX encoder-decoder whose resampling layers are jaxops operators.

The encoder downsamples with ``jaxops.average_pool`` (ONNX AveragePool, 2x2 stride 2); the
decoder upsamples with ``jaxops.resize`` (ONNX Resize, ``mode="linear"`` then ``mode="cubic"``).
Gradients flow through both. The task is denoising synthetic images made here (random Gaussian
blobs and rectangles plus noise), so the script needs no download.

Run it (CPU, a few hundred steps, well under two minutes)::

  python examples/flax_training.py               # 300 steps, plot in out/flax_training.png
  python examples/flax_training.py --steps 50    # a quick look

It prints the loss at the start and the end and saves a plot of the loss curve.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jaxops


def make_images(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
  """``n`` clean images (n, size, size, 1) in [0, 1]: Gaussian blobs and axis-aligned boxes."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
  out = np.zeros((n, size, size), np.float32)
  for i in range(n):
    for _ in range(rng.integers(1, 4)):
      cy, cx = rng.uniform(0.15, 0.85, 2)
      s = rng.uniform(0.04, 0.15)
      out[i] += rng.uniform(0.5, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    y0, x0 = rng.uniform(0.0, 0.7, 2)
    h, w = rng.uniform(0.1, 0.3, 2)
    out[i][(yy >= y0) & (yy < y0 + h) & (xx >= x0) & (xx < x0 + w)] += rng.uniform(0.3, 0.8)
  return np.clip(out, 0.0, 1.0)[..., None]


def avg_pool_nhwc(x: jax.Array) -> jax.Array:
  """2x2 / stride-2 ONNX AveragePool on an NHWC activation (ONNX pools NCHW: transpose)."""
  y = jaxops.average_pool(jnp.transpose(x, (0, 3, 1, 2)), kernel_shape=(2, 2), strides=(2, 2))
  return jnp.transpose(y, (0, 2, 3, 1))


class EncoderDecoder(nnx.Module):
  """Conv encoder (jaxops.average_pool down) and decoder (jaxops.resize up), NHWC."""

  def __init__(self, width: int, *, rngs: nnx.Rngs):
    conv = lambda i, o: nnx.Conv(i, o, (3, 3), rngs=rngs)  # noqa: E731
    self.enc1, self.enc2, self.mid = conv(1, width), conv(width, 2 * width), conv(2 * width,
                                                                                  2 * width)
    self.dec1, self.dec2, self.out = conv(2 * width, width), conv(width, width), conv(width, 1)

  def __call__(self, x: jax.Array) -> jax.Array:
    h = avg_pool_nhwc(nnx.relu(self.enc1(x)))              # size/2
    h = avg_pool_nhwc(nnx.relu(self.enc2(h)))              # size/4
    h = nnx.relu(self.mid(h))
    # Resize along H and W only (axes=(1, 2) of NHWC); scales must be static under jit.
    h = jaxops.resize(h, scales=(2.0, 2.0), axes=(1, 2), mode="linear")   # size/2
    h = nnx.relu(self.dec1(h))
    h = jaxops.resize(h, scales=(2.0, 2.0), axes=(1, 2), mode="cubic")    # size
    return self.out(nnx.relu(self.dec2(h)))


def train(steps: int = 300, *, batch: int = 16, size: int = 32, width: int = 16,
          noise: float = 0.3, learning_rate: float = 3e-3, seed: int = 0) -> list[float]:
  """Trains the denoiser for ``steps`` Adam steps; returns the loss (MSE) of every step."""
  rng = np.random.default_rng(seed)
  clean = make_images(rng, 256, size)
  # The "rbg" PRNG (XLA's RngBitGenerator) compiles much faster than the default threefry on
  # CPU; with threefry, compiling one initializer per layer shape is most of the start-up.
  model = EncoderDecoder(width, rngs=nnx.Rngs(jax.random.key(seed, impl="rbg")))
  optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)

  @nnx.jit
  def step(model: EncoderDecoder, optimizer: nnx.Optimizer, noisy: jax.Array,
           target: jax.Array) -> jax.Array:
    def loss_fn(model: EncoderDecoder) -> jax.Array:
      return jnp.mean((model(noisy) - target) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss

  losses = []
  for _ in range(steps):
    target = clean[rng.integers(0, len(clean), batch)]
    noisy = (target + noise * rng.standard_normal(target.shape)).astype(np.float32)
    losses.append(float(step(model, optimizer, jnp.asarray(noisy), jnp.asarray(target))))
  return losses


def plot(losses: list[float], path: pathlib.Path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
  ax.semilogy(np.arange(1, len(losses) + 1), losses, lw=1)
  ax.set_xlabel("step")
  ax.set_ylabel("MSE (log scale)")
  ax.set_title("Flax NNX denoiser: jaxops.average_pool down, jaxops.resize up", fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path)
  plt.close(fig)


def main(argv: list[str] | None = None) -> list[float]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out/flax_training.png"))
  args = parser.parse_args(argv)
  t0 = time.perf_counter()
  losses = train(args.steps, batch=args.batch, seed=args.seed)
  seconds = time.perf_counter() - t0
  head = float(np.mean(losses[:5]))
  tail = float(np.mean(losses[-5:]))
  print(f"trained {args.steps} steps (batch {args.batch}) in {seconds:.1f} s on "
        f"{jax.devices()[0].platform}")
  print(f"loss: first 5 steps {head:.4f} -> last 5 steps {tail:.4f} ({head / tail:.1f}x lower)")
  plot(losses, args.out)
  print(f"loss curve saved to {args.out}")
  return losses


if __name__ == "__main__":
  main()
