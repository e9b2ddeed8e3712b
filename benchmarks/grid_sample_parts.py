"""Where the time of grid_sample's backward pass goes on the CPU, part by part, beside torch.

Usage::

  python -m benchmarks.grid_sample_parts                 # the benchmark's bilinear case
  python -m benchmarks.grid_sample_parts --threads 2 --blocks 7
  python -m benchmarks.grid_sample_parts --tiny        # a smoke test at 2x3x8x8

The backward pass of bilinear grid_sample (the gradient with respect to ``x`` and the grid) is
made of work that XLA's CPU backend does with general gathers and scatters, where PyTorch runs a
hand-written loop. This times, on the benchmark's case (x 8x32x128x128, grid 8x128x128x2, zeros
padding, float32), in one process, each system in its own phase (torch first):

* torch: ``grid_sample`` forward and ``backward()`` (the benchmark's peer);
* jaxops: ``jax.grad`` of the sum of squares with respect to x and the grid (the benchmark's
  row), and the same with respect to each alone: x alone is the input's part of the tangent
  (its transpose the blocks' scatter-add), the grid alone is the grid's part (one pass of row
  gathers for the samples, then per point one loop that gathers each tap's row again and takes
  its dot product with the cotangent); the joint gradient runs both;
* the scatter-add of every tap's weighted cotangent row into a channels-last image as a bare
  XLA op, its operands already in memory (so no page faults of their own for inputs): the floor
  of the x part in XLA's general scatter (4 taps x 131072 points x 32 channels);
* the minor page faults per call of the jaxops row (``getrusage``), which glibc's default
  allocator adds to every call whose temporaries it maps afresh.

Nothing is asserted and nothing is written; docs/PERFORMANCE.md quotes a
run.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/grid_sample_parts.py`
  sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import pin_threads, require_positive  # noqa: E402


def _time(fn: Callable[[], Any], blocks: int, runs: int) -> tuple[float, float]:
  """(median seconds per call, minor page faults per call) over ``blocks`` x ``runs`` calls,
  after one call that is not timed."""
  fn()
  samples, faults = [], 0
  for _ in range(blocks):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(runs):
      t0 = time.perf_counter()
      fn()
      samples.append(time.perf_counter() - t0)
    faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
  return statistics.median(samples), faults / (blocks * runs)


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--threads", type=int, default=2, help="CPU threads for XLA and torch")
  p.add_argument("--blocks", type=int, default=5, help="timing blocks (default 5)")
  p.add_argument("--runs", type=int, default=5, help="timed calls per block (default 5)")
  p.add_argument("--tiny", action="store_true", help="a 2x3x8x8 input (a smoke test)")
  args = p.parse_args(argv)
  require_positive(p, args, ("threads", "blocks", "runs"))
  pin_threads(args.threads)

  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch

  import jaxops
  from jaxops import _grid_sample

  torch.set_num_threads(args.threads)
  rng = np.random.default_rng(0)
  n, c, h, w = (2, 3, 8, 8) if args.tiny else (8, 32, 128, 128)
  x = rng.standard_normal((n, c, h, w), dtype=np.float32)
  g = rng.uniform(-1.1, 1.1, (n, h, w, 2)).astype(np.float32)

  tx = torch.from_numpy(x).requires_grad_()
  tg = torch.from_numpy(g).requires_grad_()

  def torch_bwd() -> Any:
    y = torch.nn.functional.grid_sample(tx, tg, align_corners=False)
    return torch.autograd.grad((y * y).sum(), (tx, tg))

  def loss(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.sum(jnp.square(jaxops.grid_sample(a, b)))

  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  grad_x = jax.jit(jax.grad(loss, argnums=0))
  grad_g = jax.jit(jax.grad(loss, argnums=1))
  xd, gd = jax.device_put(x), jax.device_put(g)

  # the scatter's operands, computed once: each tap's flat pixel index and the weighted
  # cotangent rows (channels-last)
  cfg = _grid_sample._Config(_grid_sample.Mode.LINEAR, _grid_sample.PaddingMode.ZEROS, False)
  flat, weight, _ = jax.jit(lambda b: _grid_sample._tap_table(
      (n, c, h, w), b.reshape(n, -1, 2), cfg, jnp.float32))(gd)
  base = (jnp.arange(n, dtype=jnp.int32) * h * w)[:, None]
  index = [jax.device_put((flat[..., t] + base).reshape(-1)) for t in range(4)]
  ct = jax.device_put(rng.standard_normal((n * h * w, c), dtype=np.float32))
  rows_of = [jax.device_put((weight[..., t].reshape(-1, 1) * ct)) for t in range(4)]

  @jax.jit
  def scatter(index: list[jax.Array], rows: list[jax.Array]) -> jax.Array:
    out = jnp.zeros((n * h * w, c), jnp.float32)
    for i, r in zip(index, rows):
      out = out.at[i].add(r, mode="promise_in_bounds")
    return out

  systems = {
      "torch forward + backward": torch_bwd,
      "jaxops jax.grad (x, grid)": lambda: jax.block_until_ready(grad(xd, gd)),
      "jaxops jax.grad, x alone": lambda: grad_x(xd, gd).block_until_ready(),
      "jaxops jax.grad, grid alone": lambda: grad_g(xd, gd).block_until_ready(),
      "XLA scatter-add of the x cotangent": lambda: scatter(index, rows_of).block_until_ready(),
  }
  # each system in its own phase, torch first: a system that faults heavily leaves glibc's heap
  # in a state that changes the next system's page faults, so interleaving would mix them
  results = {name: _time(fn, args.blocks, args.runs) for name, fn in systems.items()}
  ref = results["torch forward + backward"][0]
  print(f"grid_sample bilinear zeros, x {n}x{c}x{h}x{w}, grid {n}x{h}x{w}x2, float32, "
        f"{args.threads} threads")
  print("| part | ms | / torch | minor faults per call |")
  print("|---|---|---|---|")
  for name, (sec, faults) in results.items():
    print(f"| {name} | {sec * 1e3:.1f} | {sec / ref:.2f} | {faults:.0f} |")


if __name__ == "__main__":
  main()
