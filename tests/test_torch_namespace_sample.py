"""jaxops.torch's grid_sample, affine_grid and roi_align against independent oracles.

grid_sample and affine_grid: torch 2.13 CPU (torch.nn.functional), values in float64 and float32
and gradients with torch.autograd for input and grid / theta. roi_align has torchvision's
signature, but torchvision does not load on these machines, so its oracles are:

- onnx.reference and onnxruntime running RoiAlign-16 with the attributes torchvision's arguments
  map to (aligned=True: half_pixel, False: output_half_pixel; sampling_ratio <= 0: 0);
- ``_tv_forward`` / ``_tv_backward`` below, a NumPy transcription of torchvision's CPU kernel
  (torchvision/csrc/ops/cpu/roi_align_kernel.cpp, roi_align_forward_kernel_impl and
  roi_align_backward_kernel_impl, with detail::pre_calc_for_bilinear_interpolate from
  torchvision/csrc/ops/cpu/roi_align_common.h), vectorised over the samples of a box;
- for the gradient with respect to the boxes (torchvision's autograd gives none): central
  differences of that transcription in float64, where both one-sided differences agree (away
  from the kinks of bilinear sampling and the jumps of the adaptive count).

Sweep sizes: each static combination (options and shapes) costs XLA compiles (a float64 program
that returns values and gradients, and a float32 one), and every draw of a combination (data, grid,
theta or boxes) rides in the batch of the same call. A configuration is one draw of one combination,
as in tests/test_grid_sample_differential.py. By default the file runs a part of each sweep within
the suite's time budget; JAXOPS_TORCH_SWEEP=200 runs at least 200 configurations per function.
"""

from __future__ import annotations

import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jaxops.torch as F

_FULL = int(os.environ.get("JAXOPS_TORCH_SWEEP", "0"))
DRAWS = 5
TOL64 = dict(rtol=1e-12, atol=1e-12)
TOL32 = dict(rtol=1.3e-6, atol=1e-5)   # torch.testing's float32 default


def _combos(default: int) -> int:
  """Static combinations to run: ``default``, or enough for JAXOPS_TORCH_SWEEP configurations."""
  return max(default, -(-_FULL // DRAWS)) if _FULL else default


def _vjp(f):
  """One compiled program: f's value and its vector-Jacobian product with ``ct``."""
  def run(args, ct):
    y, pullback = jax.vjp(f, *args)
    return y, pullback(ct)
  return jax.jit(run)


def _torch_vjp(f, args, ct):
  ts = [torch.tensor(a, requires_grad=True) for a in args]
  y = f(*ts)
  y.backward(torch.tensor(ct))
  return y.detach().numpy(), [t.grad.numpy() for t in ts]


# --- grid_sample ----------------------------------------------------------------------------------

_GS_OPTIONS = [(r, mode, pad, ac)
               for ac in (False, True)
               for pad in ("zeros", "border", "reflection")
               for r in (2, 3)
               for mode in (("bilinear", "nearest", "bicubic") if r == 2 else ("bilinear",
                                                                               "nearest"))]


def _grid(rng, spatial, out_sp, ac, kind):
  """A (1, *out_sp, r) grid: ``kind`` "inside" ([-1, 1] and a little beyond), "far" (up to 6
  units outside), or "lattice": positions exactly on pixel centres and halfway between (the
  ties of nearest's rounding and the kinks of linear/cubic), in float64."""
  r = len(spatial)
  shape = (1,) + out_sp + (r,)
  if kind == "inside":
    return rng.uniform(-1.1, 1.1, shape)
  if kind == "far":
    return rng.uniform(-1, 1, shape) * rng.choice([2.5, 6.0])
  g = np.empty(shape)
  for a in range(r):
    n = spatial[r - 1 - a]  # grid[..., a] runs along spatial axis r - 1 - a
    u = rng.integers(-2, 2 * n + 1, out_sp) / 2.0   # -1, -0.5, ..., n: pixels and halves
    if ac:
      g[0, ..., a] = u * 2 / (n - 1) - 1 if n > 1 else rng.uniform(-1, 1, out_sp)
    else:
      g[0, ..., a] = (2 * u + 1) / n - 1
  return g


def _gs_cases(count, seed):
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(_GS_OPTIONS))
  cases = []
  for t in range(count):
    r, mode, pad, ac = _GS_OPTIONS[order[t % len(order)]]
    hi = 8 if r == 2 else 5
    spatial = tuple(int(rng.choice([1, int(rng.integers(2, hi))])) if rng.random() < 0.25
                    else int(rng.integers(1, hi)) for _ in range(r))
    out_sp = tuple(int(v) for v in rng.integers(1, 5, r))
    c = int(rng.integers(1, 4))
    kinds = ["inside", "inside", "far", "lattice", "lattice"]
    x = rng.standard_normal((DRAWS, c) + spatial)
    g = np.concatenate([_grid(rng, spatial, out_sp, ac, k) for k in kinds])
    kw = dict(mode=mode, padding_mode=pad, align_corners=ac)
    if not ac and rng.random() < 0.5:
      kw["align_corners"] = None  # torch's default (it warns; the oracle gets False)
    if mode == "bilinear" and pad == "zeros" and kw["align_corners"] is None and rng.random() < .5:
      del kw["mode"], kw["padding_mode"]  # every default
    cases.append((x, g, kw))
  return cases


def _torch_kw(kw):
  return dict(kw, align_corners=bool(kw.get("align_corners")))


@pytest.mark.slow
def test_grid_sample_matches_torch():
  """Values (float64, float32) and gradients for input and grid (float64, float32) against
  torch on every mode / padding / align_corners of 2-D and 3-D inputs; 1-pixel and odd shapes,
  grids far outside [-1, 1] and on the ties and kinks of the sampling."""
  cases = _gs_cases(_combos(12), 500)
  for x, g, kw in cases:
    msg = f"grid_sample x{x.shape} grid{g.shape} {kw}"
    f = lambda a, b, kw=kw: F.grid_sample(a, b, **kw)  # noqa: E731
    tf = lambda a, b, kw=kw: TF.grid_sample(a, b, **_torch_kw(kw))  # noqa: E731
    for dt, tol, gtol in ((np.float64, TOL64, dict(rtol=1e-11, atol=1e-11)),
                          (np.float32, TOL32, dict(rtol=1e-5, atol=1e-4))):
      xd, gd = x.astype(dt), g.astype(dt)
      ct = np.random.default_rng(xd.size).standard_normal(x.shape[:2] + g.shape[1:-1]).astype(dt)
      want, (wx, wg) = _torch_vjp(tf, (xd, gd), ct)
      y, (gx, gg) = _vjp(f)((jnp.asarray(xd), jnp.asarray(gd)), jnp.asarray(ct))
      np.testing.assert_allclose(y, want, **tol, err_msg=f"{dt.__name__} {msg}")
      np.testing.assert_allclose(gx, wx, **gtol, err_msg=f"{dt.__name__} d/dinput {msg}")
      np.testing.assert_allclose(gg, wg, **gtol, err_msg=f"{dt.__name__} d/dgrid {msg}")
  assert len(cases) * DRAWS >= min(_FULL, 200)
