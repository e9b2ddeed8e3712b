"""Eager (un-jitted) per-call cost of each public function, against jax.jit of the same call.

Usage::

  python -m benchmarks.eager                  # prints the table; nothing is written
  python -m benchmarks.eager --calls 500 --blocks 9 --threads 2

For small inputs the Python work of a public function (converting ``x``, checking the arguments,
planning) can cost more than the computation. Each row times, on the same input:

* eager: ``jaxops.f(x, ...)`` called as a notebook or a data pipeline calls it;
* jit: ``jax.jit(lambda x: jaxops.f(x, ...))`` compiled once, then called (JAX's C++ dispatch
  and the computation, no jaxops Python);
* overhead: eager - jit, what the public function's Python adds per call;
* torch: PyTorch's eager call for comparable work where it has one (interpolate, avg_pool2d,
  mean, ``Tensor.to``, full; CPU tensors, ``torch.set_num_threads(threads)``). Outputs are not
  compared here (benchmarks/run.py does that): antialiased bicubic, for one, is not ONNX's.

Method: ``blocks`` blocks, and in each block every system of the row runs ``calls`` times back
to back, the result of the last call waited for (``block_until_ready``); a block's time divided
by ``calls`` is one sample, and the median of the samples is printed. Systems are interleaved
block by block, so a slow drift of a shared machine hits them alike. Calls are not synchronised
one by one: JAX dispatches asynchronously, so for inputs this small a call costs its dispatch,
as it does in a loop that does not read each result. Nothing is asserted and nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/eager.py`: make the repository importable
  sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.run import pin_threads, require_positive  # noqa: E402

GLOBAL_SHAPE = (8, 512, 7, 7)  # GlobalAveragePool's benchmark case (benchmarks/pool_cases.py)
SMALL_SHAPE = (1, 3, 32, 32)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m benchmarks.eager",
                              description=__doc__.split("\n")[0])
  p.add_argument("--calls", type=int, default=300, help="calls per system per block (300)")
  p.add_argument("--blocks", type=int, default=9, help="timing blocks (default 9)")
  p.add_argument("--threads", type=int, default=2,
                 help="CPUs the process is pinned to, and torch's threads (default 2)")
  p.add_argument("--tiny", action="store_true", help="tiny inputs, few calls (the smoke test)")
  args = p.parse_args(argv)
  require_positive(p, args, ("calls", "blocks", "threads"))
  return args


def cases(tiny: bool) -> list[tuple[str, tuple[int, ...], Callable[..., Any], Any]]:
  """(label, input shape, jaxops call, torch call or None) of every row."""
  import jax.numpy as jnp
  import numpy as np
  import torch
  import torch.nn.functional as F

  import jaxops

  big = (1, 4, 7, 7) if tiny else GLOBAL_SHAPE
  small = (1, 2, 8, 8) if tiny else SMALL_SHAPE
  like = jnp.zeros((1,), jnp.bfloat16)
  value = np.array([7], np.int32)
  rng = np.random.default_rng(0)
  grid = rng.uniform(-1, 1, (small[0], small[2], small[3], 2)).astype(np.float32)
  theta = np.tile(np.eye(2, 3, dtype=np.float32), (small[0], 1, 1))
  rois = np.array([[0.5, 0.5, 5.5, 6.0], [1.0, 0.0, 7.0, 3.5]], np.float32)
  batch = np.zeros(2, np.int32)
  return [
      ("global_average_pool", big, jaxops.global_average_pool,
       lambda t: t.mean((2, 3), keepdim=True)),
      ("global_average_pool (small)", small, jaxops.global_average_pool,
       lambda t: t.mean((2, 3), keepdim=True)),
      ("resize nearest, scales 1", big,
       lambda x: jaxops.resize(x, scales=(1, 1, 1, 1), mode="nearest"), None),
      ("resize linear x2", small, lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), mode="linear"),
       lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)),
      ("resize cubic 1/2 antialias", small,
       lambda x: jaxops.resize(x, scales=(0.5, 0.5), axes=(2, 3), mode="cubic", antialias=True),
       lambda t: F.interpolate(t, scale_factor=0.5, mode="bicubic", antialias=True)),
      ("average_pool 3x3", big, lambda x: jaxops.average_pool(x, (3, 3)),
       lambda t: F.avg_pool2d(t, 3, stride=1)),
      ("average_pool 3x3 s2 p1", small,
       lambda x: jaxops.average_pool(x, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
       lambda t: F.avg_pool2d(t, 3, stride=2, padding=1, count_include_pad=False)),
      ("max_pool 3x3 s2 p1", small,
       lambda x: jaxops.max_pool(x, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
       lambda t: F.max_pool2d(t, 3, stride=2, padding=1)),
      ("max_unpool 2x2 s2", small,
       lambda x: jaxops.max_unpool(x, np.zeros(x.shape, np.int32), (2, 2), strides=(2, 2)),
       None),
      ("global_max_pool", big, jaxops.global_max_pool, lambda t: t.amax((2, 3), keepdim=True)),
      ("lp_pool p2 3x3 s2", small, lambda x: jaxops.lp_pool(x, (3, 3), strides=(2, 2)),
       lambda t: F.lp_pool2d(t, 2.0, 3, stride=2)),
      ("global_lp_pool p2", big, jaxops.global_lp_pool,
       lambda t: t.square().sum((2, 3), keepdim=True).sqrt()),
      ("grid_sample bilinear", small,
       lambda x: jaxops.grid_sample(x, grid), lambda t: F.grid_sample(t, torch.from_numpy(grid),
                                                                     align_corners=False)),
      ("affine_grid 2-D", small, lambda x: jaxops.affine_grid(theta, x.shape),
       lambda t: F.affine_grid(torch.from_numpy(theta), list(t.shape), align_corners=False)),
      ("roi_align 2x2", small,
       lambda x: jaxops.roi_align(x, rois, batch, output_height=2, output_width=2,
                                  sampling_ratio=2), None),
      ("cast float32->bfloat16", small, lambda x: jaxops.cast(x, "BFLOAT16"),
       lambda t: t.to(torch.bfloat16)),
      ("cast_like float32->bfloat16", small, lambda x: jaxops.cast_like(x, like),
       lambda t: t.to(torch.bfloat16)),
      ("constant_of_shape 2x3 int32", small,
       lambda x: jaxops.constant_of_shape((2, 3), value),
       lambda t: torch.full((2, 3), 7, dtype=torch.int32)),
  ]


def per_call(fn: Callable[[], Any], calls: int) -> float:
  """Seconds per call of ``calls`` back-to-back calls, the last result waited for."""
  import jax
  t0 = time.perf_counter()
  for _ in range(calls):
    out = fn()
  jax.block_until_ready(out)
  return (time.perf_counter() - t0) / calls


def main(argv: Sequence[str] | None = None) -> int:
  args = parse(argv)
  pin_threads(args.threads)
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch

  torch.set_num_threads(args.threads)
  calls, blocks = (5, 2) if args.tiny else (args.calls, args.blocks)
  rng = np.random.default_rng(0)
  print(f"median per call in microseconds ({blocks} blocks of {calls} calls; jax "
        f"{jax.__version__}, torch {torch.__version__}, {args.threads} threads)")
  header = f"{'call':30s} {'input':>11s} {'eager':>8s} {'jit':>8s} {'overhead':>9s} {'torch':>8s}"
  print(header)
  print("-" * len(header))
  for label, shape, op, torch_op in cases(args.tiny):
    x_np = rng.standard_normal(shape).astype(np.float32)
    x = jnp.asarray(x_np)
    jitted = jax.jit(op)
    systems = {"eager": lambda op=op: op(x), "jit": lambda jitted=jitted: jitted(x)}
    if torch_op is not None:
      t = torch.from_numpy(x_np)
      systems["torch"] = lambda torch_op=torch_op, t=t: torch_op(t)
    for fn in systems.values():  # compile, fill the caches
      jax.block_until_ready(fn())
      jax.block_until_ready(fn())
    samples: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for b in range(blocks):
      for name in names[b % len(names):] + names[:b % len(names)]:
        samples[name].append(per_call(systems[name], calls))
    us = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
    torch_us = f"{us['torch']:8.1f}" if "torch" in us else f"{'-':>8s}"
    print(f"{label:30s} {'x'.join(map(str, shape)):>11s} {us['eager']:8.1f} {us['jit']:8.1f} "
          f"{us['eager'] - us['jit']:9.1f} {torch_us}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
