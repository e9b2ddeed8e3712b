"""jaxops.torch.interpolate's static plans against torch 2.13 CPU: 200 random configurations per
mode, float64 and float32, forward and backward maps.

Oracle: torch.nn.functional.interpolate applied to one-hot inputs (its forward map) and
torch.autograd with one-hot cotangents (its backward map). The end-to-end runs of the public
function (values and jax.grad) are in tests/test_torch_namespace.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_torch_namespace import (TOL, _aa_backward_does_not_skip, _random_config,
                                        _torch_interpolate, _torch_nearest_generic)


def _torch_maps(shape: tuple[int, ...], mode: str, kw: dict, dtype: type) -> tuple:
  """torch's forward map (outputs x inputs, one plane) from one-hot inputs, and its backward map
  from one-hot cotangents (row q: the gradient of output q), both outputs x inputs."""
  spatial = shape[2:]
  p = int(np.prod(spatial))
  eye = torch.tensor(np.eye(p, dtype=dtype).reshape((p, 1) + spatial))
  y = _torch_interpolate(eye, mode, kw)
  q = int(np.prod(y.shape[2:]))
  fwd = y.reshape(p, q).numpy().T
  x = torch.zeros((q, 1) + spatial, dtype=eye.dtype, requires_grad=True)
  y = _torch_interpolate(x, mode, kw)
  y.backward(torch.tensor(np.eye(q, dtype=dtype).reshape(y.shape)))
  bwd = x.grad.reshape(q, p).numpy()
  return fwd, bwd, tuple(y.shape[2:])


def _jaxops_map(shape: tuple[int, ...], dtype: type, mode: str, kw: dict) -> np.ndarray:
  """The linear map jaxops.torch.interpolate applies to one plane: the Kronecker product of its
  static per-axis tap tables (rounded to the compute dtype, as the kernel uses them)."""
  from jaxops import torch as module
  args = dict(size=None, scale_factor=None, align_corners=None, recompute_scale_factor=None,
              antialias=False)
  args.update(kw)
  cfg = module._interp_config(shape, np.dtype(dtype), args["size"], args["scale_factor"], mode,
                              args["align_corners"], args["recompute_scale_factor"],
                              args["antialias"])
  dense = np.ones((1, 1))
  for (n_in, n_out, _), (idx, w) in zip(cfg.axes, module._interp_tables(cfg)):
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), idx.ravel()),
              w.astype(dtype).astype(np.float64).ravel())
    dense = np.kron(dense, m)
  return dense


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear", "bilinear", "bicubic",
                                  "trilinear", "area", "lanczos"])
def test_interpolate_plans_match_torch(mode):
  """200 random configurations per mode: the linear map jaxops applies (its static plan) equals
  torch's forward map and torch's backward map (the gradient jaxops takes is the transpose
  of the map it applies), in float64 (1e-12) and
  float32 (torch's tolerance). Cheap enough for many configurations: no XLA compile; that the
  device kernel applies exactly these maps is checked end to end below."""
  rng = np.random.default_rng(sum(map(ord, mode)))
  for _ in range(200):
    shape, kw = _random_config(rng, mode)
    for dt in (np.float64, np.float32):
      fwd, bwd, out = _torch_maps(shape, mode, kw, dt)
      mine = _jaxops_map(shape, dt, mode, kw)
      msg = f"{mode} {shape} {kw} {dt.__name__}"
      assert mine.shape == fwd.shape, msg
      np.testing.assert_allclose(mine, fwd, **TOL[dt], err_msg=msg)
      if (mode in ("nearest", "nearest-exact") and _torch_nearest_generic(shape, (1, 1) + out)
          and not np.allclose(fwd, bwd, **TOL[dt])):
        continue  # docs/DEVIATIONS.md, jaxops.torch 2
      if _aa_backward_does_not_skip(shape, kw):
        continue  # docs/DEVIATIONS.md, jaxops.torch 3
      if mode == "bicubic" and out == shape[2:] and not np.allclose(fwd, bwd, **TOL[dt]):
        continue  # docs/DEVIATIONS.md, jaxops.torch 7
      np.testing.assert_allclose(mine, bwd, **TOL[dt], err_msg="backward " + msg)


def _nearest_index_table(n_in: int, size: int | None, scale: float | None, mode: str,
                         dtype: type, rank: int) -> np.ndarray:
  """The source indices jaxops.torch.interpolate takes along the last axis of a (1, 1, ..., n_in)
  input, from its static plan."""
  from jaxops import torch as module
  shape = (1, 1) + (1,) * (rank - 1) + (n_in,)
  size_arg = None if size is None else (1,) * (rank - 1) + (size,)
  scale_arg = None if scale is None else (1.0,) * (rank - 1) + (scale,)
  cfg = module._interp_config(shape, np.dtype(dtype), size_arg, scale_arg, mode, None, None,
                              False)
  idx, _ = module._interp_tables(cfg)[-1]
  return idx[:, 0]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_indices_of_every_short_axis_match_torch(mode):
  """Every input length 1-40 to every output length 1-200 (and 12 scale factors), float32 and
  float64, in the generic kernel (1-D) and the 2-D vectorized one (outputs of height + width
  at most 128): torch's source index of each output, read from an iota. The generic
  nearest-exact took ``floor((o + 0.5) * s)`` in float32 where ATen computes the coordinate
  as one fused multiply-add and adds 0.5 after (2 -> 47: output 23 reads input 1, not 0); 23
  of the 1-D float32 tables here differed, from 2, 4, 6 and 8 inputs (found by a sweep on
  another seed)."""
  for tdt, dt in ((torch.float32, np.float32), (torch.float64, np.float64)):
    for n_in in range(1, 41):
      x = torch.arange(n_in, dtype=tdt)
      for rank, lengths in ((1, range(1, 201)), (2, range(1, 128))):
        xr = x.reshape((1, 1) + (1,) * (rank - 1) + (n_in,))
        for n_out in lengths:
          want = torch.nn.functional.interpolate(xr, size=(1,) * (rank - 1) + (n_out,),
                                                 mode=mode).reshape(-1).numpy()
          got = _nearest_index_table(n_in, n_out, None, mode, dt, rank)
          np.testing.assert_array_equal(got, want.astype(np.int64),
                                        err_msg=f"{mode} {rank}-D {n_in} -> {n_out} {dt}")
      for sf in (0.37, 0.5, 1.2, 1.3, 1.5, 1.64, 2.0, 2.5, 3.0, 3.7185, 4.0, 5.6506):
        if int(n_in * sf) < 1:
          continue
        want = torch.nn.functional.interpolate(x.reshape(1, 1, n_in), scale_factor=sf,
                                               mode=mode).reshape(-1).numpy()
        got = _nearest_index_table(n_in, None, sf, mode, dt, 1)
        np.testing.assert_array_equal(got, want.astype(np.int64),
                                      err_msg=f"{mode} {n_in} x{sf} {dt}")


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64])
def test_nearest_exact_two_to_forty_seven_end_to_end(dtype):
  """The case the sweep found, through the public function: output 23 of 47 reads input 1."""
  from jaxops import torch as F
  x = np.arange(2, dtype=dtype).reshape(1, 1, 2)
  want = torch.nn.functional.interpolate(torch.from_numpy(x), size=47,
                                         mode="nearest-exact").numpy()
  assert want[0, 0, 23] == 1
  np.testing.assert_array_equal(np.asarray(F.interpolate(x, size=47, mode="nearest-exact")),
                                want)
