"""``jaxops.torch`` beside PyTorch on shapes and options outside the benchmark rows.

Usage::

  python -m benchmarks.torch_survey                  # every case
  python -m benchmarks.torch_survey --only adaptive  # the cases whose name contains a string
  python -m benchmarks.torch_survey --tiny           # a smoke test at small shapes, one round

Each case is one ``jaxops.torch`` call and the same ``torch.nn.functional`` call, on the same
float32 data in one process: the forward pass, and the gradient of sum(y ** 2) (``jax.grad``
under jit against ``torch.autograd.grad``). Every round times each of the four back to back
(a call to warm up, then ``--calls`` calls); medians over ``--rounds`` rounds. Values and
gradients are compared with PyTorch's (NaN equal to NaN) and a difference is printed beside the
times. The make bench rows are the headline; this is the wider look that docs/PERFORMANCE.md
("A survey of ``jaxops.torch`` outside the benchmark rows") quotes. Nothing is asserted and
nothing is written.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

if __package__ in (None, ""):  # `python benchmarks/torch_survey.py`
  import sys
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases(tiny: bool) -> list[tuple[str, np.ndarray, Callable[[Any, Any, Any], Any]]]:
  """(name, input, op(F, x, extra)) where F is ``jaxops.torch`` or ``torch.nn.functional``
  and ``extra`` converts a NumPy array to that library's array."""
  rng = np.random.default_rng(0)
  s = 4 if tiny else 1  # spatial sizes divided by s, batch and channels by s too

  def arr(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)

  x4 = arr(8 // s, 32 // s, 64 // s, 64 // s)
  x5 = arr(2, 16 // s, 16 // s, 32 // s, 32 // s)
  x3 = arr(8 // s, 64 // s, 1024 // s)
  rgb = arr(8 // s, 3, 256 // s, 256 // s)
  grid = rng.uniform(-1.1, 1.1, (8 // s, 64 // s, 64 // s, 2)).astype(np.float32)
  theta = (np.eye(2, 3)[None] + 0.1 * rng.standard_normal((8 // s, 2, 3))).astype(np.float32)
  size5 = (2, 16 // s, 16 // s, 32 // s, 32 // s)
  grid5 = rng.uniform(-1.1, 1.1, size5[:1] + size5[2:] + (3,)).astype(np.float32)
  cases = [
      ("interpolate bicubic align_corners x2", x4, lambda F, x, a: F.interpolate(
          x, scale_factor=2, mode="bicubic", align_corners=True)),
      ("interpolate bicubic x0.5 antialias", x4, lambda F, x, a: F.interpolate(
          x, scale_factor=0.5, mode="bicubic", antialias=True)),
      ("interpolate bilinear x0.37 antialias", x4, lambda F, x, a: F.interpolate(
          x, scale_factor=0.37, mode="bilinear", antialias=True)),
      ("interpolate bilinear 64 -> 17", x4, lambda F, x, a: F.interpolate(
          x, size=(17 // s + 1, 17 // s + 1), mode="bilinear")),
      ("interpolate bilinear 256 -> 224 (8x3)", rgb, lambda F, x, a: F.interpolate(
          x, size=(224 // s, 224 // s), mode="bilinear")),
      ("interpolate bilinear 256 -> 100 (8x3)", rgb, lambda F, x, a: F.interpolate(
          x, size=(100 // s, 100 // s), mode="bilinear")),
      ("interpolate bicubic 64 -> 40", x4, lambda F, x, a: F.interpolate(
          x, size=(40 // s, 40 // s), mode="bicubic")),
      ("interpolate nearest x2", x4, lambda F, x, a: F.interpolate(x, scale_factor=2)),
      ("interpolate nearest-exact to 48", x4, lambda F, x, a: F.interpolate(
          x, size=(48 // s, 48 // s), mode="nearest-exact")),
      ("interpolate area 64 -> 24", x4, lambda F, x, a: F.interpolate(
          x, size=(24 // s, 24 // s), mode="area")),
      ("interpolate linear 1-D x3", x3, lambda F, x, a: F.interpolate(
          x, scale_factor=3, mode="linear")),
      ("interpolate trilinear x2", x5, lambda F, x, a: F.interpolate(
          x, scale_factor=2, mode="trilinear")),
      ("max_pool2d 3 s2 p1 ceil_mode", x4, lambda F, x, a: F.max_pool2d(x, 3, 2, 1,
                                                                       ceil_mode=True)),
      ("max_pool2d 3 s1 p1", x4, lambda F, x, a: F.max_pool2d(x, 3, 1, 1)),
      ("max_pool3d 2", x5, lambda F, x, a: F.max_pool3d(x, 2)),
      ("max_pool1d 3 s2", x3, lambda F, x, a: F.max_pool1d(x, 3, 2)),
      ("avg_pool2d 3 s1 p1 divisor_override", x4, lambda F, x, a: F.avg_pool2d(
          x, 3, 1, 1, divisor_override=7)),
      ("avg_pool3d 3 s2 p1 ceil_mode", x5, lambda F, x, a: F.avg_pool3d(x, 3, 2, 1,
                                                                       ceil_mode=True)),
      ("lp_pool2d p=2 3 s2", x4, lambda F, x, a: F.lp_pool2d(x, 2, 3, 2)),
      ("lp_pool3d p=2 2", x5, lambda F, x, a: F.lp_pool3d(x, 2, 2)),
      ("adaptive_avg_pool2d 64 -> 7", x4, lambda F, x, a: F.adaptive_avg_pool2d(x, 7)),
      ("adaptive_avg_pool2d 64 -> 1", x4, lambda F, x, a: F.adaptive_avg_pool2d(x, 1)),
      ("adaptive_avg_pool1d 1024 -> 7", x3, lambda F, x, a: F.adaptive_avg_pool1d(x, 7)),
      ("adaptive_avg_pool3d -> 5", x5, lambda F, x, a: F.adaptive_avg_pool3d(x, 5)),
      ("adaptive_max_pool2d 64 -> 7", x4, lambda F, x, a: F.adaptive_max_pool2d(x, 7)),
      ("adaptive_max_pool2d 64 -> 8", x4, lambda F, x, a: F.adaptive_max_pool2d(x, 8)),
      ("adaptive_max_pool1d 1024 -> 10", x3, lambda F, x, a: F.adaptive_max_pool1d(x, 10)),
      ("adaptive_max_pool3d -> 2", x5, lambda F, x, a: F.adaptive_max_pool3d(x, 2)),
      ("pixel_shuffle 2", x4, lambda F, x, a: F.pixel_shuffle(x, 2)),
  ]
  def sample(mode: str, pad: str, ac: bool) -> Callable[[Any, Any, Any], Any]:
    return lambda F, x, a: F.grid_sample(x, a(grid), mode=mode, padding_mode=pad,
                                         align_corners=ac)

  for mode in ("bilinear", "bicubic", "nearest"):
    for pad, ac in (("zeros", False), ("border", True), ("reflection", False)):
      cases.append((f"grid_sample {mode} {pad} align_corners={ac}", x4, sample(mode, pad, ac)))
  # max_unpool of overlapping windows: the pooled values and torch's indices of x4's 3x3 s2 p1
  # max pooling, unpooled back to x4's size. Windows that share their maximum name it twice, and
  # torch's gradient then reaches the overwritten element too ("gradients differ":
  # docs/DEVIATIONS.md, jaxops.torch 6)
  import torch
  y4, i4 = torch.nn.functional.max_pool2d(torch.from_numpy(x4), 3, 2, 1, return_indices=True)
  idx4 = i4.numpy()
  cases += [
      ("max_unpool2d 3 s2 p1 (overlapping windows)", y4.numpy(), lambda F, x, a: F.max_unpool2d(
          x, a(idx4), 3, 2, 1, output_size=x4.shape[2:])),
      ("affine_grid + grid_sample", x4, lambda F, x, a: F.grid_sample(
          x, F.affine_grid(a(theta), x.shape, align_corners=False), align_corners=False)),
      ("grid_sample trilinear border 3-D", x5, lambda F, x, a: F.grid_sample(
          x, a(grid5), padding_mode="border", align_corners=True)),
  ]
  return cases


def _median_ms(fn: Callable[[], Any], calls: int, rounds: list[float]) -> None:
  fn()
  t = time.perf_counter()
  for _ in range(calls):
    fn()
  rounds.append((time.perf_counter() - t) / calls * 1e3)


def main(argv: Sequence[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="python -m benchmarks.torch_survey")
  p.add_argument("--only", default="", help="run the cases whose name contains this")
  p.add_argument("--rounds", type=int, default=9)
  p.add_argument("--calls", type=int, default=3)
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--tiny", action="store_true", help="small shapes, one round of one call")
  args = p.parse_args(argv)
  if args.tiny:
    args.rounds, args.calls = 1, 1
  os.sched_setaffinity(0, range(min(args.threads, os.cpu_count() or 1)))
  import jax
  import jax.numpy as jnp
  import torch
  import torch.nn.functional as TF

  import jaxops.torch as JF
  torch.set_num_threads(args.threads)
  print(f"{'case':52s} {'forward ms: jaxops / torch = ratio':>34s}   "
        f"{'backward ms: jaxops / torch = ratio':>35s}")
  for name, x, op in _cases(args.tiny):
    if args.only not in name:
      continue
    xj, xt = jnp.asarray(x), torch.from_numpy(x)
    fj = jax.jit(lambda v, op=op: op(JF, v, jnp.asarray))
    gj = jax.jit(jax.grad(lambda v, op=op: jnp.sum(op(JF, v, jnp.asarray) ** 2)))

    def ft(op: Any = op) -> Any:
      with torch.no_grad():
        return op(TF, xt, torch.from_numpy)

    def gt(op: Any = op) -> Any:
      a = xt.clone().requires_grad_()
      return torch.autograd.grad((op(TF, a, torch.from_numpy) ** 2).sum(), a)[0]

    same = np.allclose(np.asarray(fj(xj)), ft().numpy(), rtol=1e-4, atol=1e-4, equal_nan=True)
    same_g = np.allclose(np.asarray(gj(xj)), gt().numpy(), rtol=1e-3, atol=1e-3, equal_nan=True)
    fns = {"jf": lambda fj=fj: jax.block_until_ready(fj(xj)), "tf": ft,
           "jb": lambda gj=gj: jax.block_until_ready(gj(xj)), "tb": gt}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.rounds):
      for k, fn in fns.items():
        _median_ms(fn, args.calls, times[k])
    m = {k: float(np.median(v)) for k, v in times.items()}
    note = ("" if same else " values differ") + ("" if same_g else " gradients differ")
    print(f"{name:52s} {m['jf']:9.3f} / {m['tf']:9.3f} = {m['jf'] / m['tf']:5.2f}   "
          f"{m['jb']:9.3f} / {m['tb']:9.3f} = {m['jb'] / m['tb']:5.2f}{note}", flush=True)


if __name__ == "__main__":
  main()
