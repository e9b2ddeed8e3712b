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
from _ulps import compiled, half_pixel_grid

_FULL = int(os.environ.get("JAXOPS_TORCH_SWEEP", "0"))
DRAWS = 5
# float32 gradients: in the full sweep (each is one more compile per combination); float64
# gradients and float32 values always.
GRAD32 = bool(_FULL)
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
  cases = _gs_cases(_combos(9), 500)
  for x, g, kw in cases:
    msg = f"grid_sample x{x.shape} grid{g.shape} {kw}"
    f = lambda a, b, kw=kw: F.grid_sample(a, b, **kw)  # noqa: E731
    tf = lambda a, b, kw=kw: TF.grid_sample(a, b, **_torch_kw(kw))  # noqa: E731
    for dt, tol, gtol in ((np.float64, TOL64, dict(rtol=1e-11, atol=1e-11)),
                          (np.float32, TOL32, dict(rtol=1e-5, atol=1e-4))):
      xd, gd = x.astype(dt), g.astype(dt)
      ct = np.random.default_rng(xd.size).standard_normal(x.shape[:2] + g.shape[1:-1]).astype(dt)
      want, (wx, wg) = _torch_vjp(tf, (xd, gd), ct)
      if dt == np.float32 and not GRAD32:
        np.testing.assert_allclose(jax.jit(f)(xd, gd), want, **tol, err_msg=f"float32 {msg}")
        continue
      y, (gx, gg) = _vjp(f)((jnp.asarray(xd), jnp.asarray(gd)), jnp.asarray(ct))
      np.testing.assert_allclose(y, want, **tol, err_msg=f"{dt.__name__} {msg}")
      np.testing.assert_allclose(gx, wx, **gtol, err_msg=f"{dt.__name__} d/dinput {msg}")
      np.testing.assert_allclose(gg, wg, **gtol, err_msg=f"{dt.__name__} d/dgrid {msg}")
  assert len(cases) * DRAWS >= min(_FULL, 200)


# --- affine_grid ----------------------------------------------------------------------------------


def _affine_cases(count, seed):
  rng = np.random.default_rng(seed)
  cases = []
  for t in range(count):
    r = 2 + t % 2
    ac = (None, False, True, True)[(t // 2) % 4]
    spatial = tuple(int(rng.choice([1, int(rng.integers(2, 9 if r == 2 else 6))]))
                    for _ in range(r))
    size = (DRAWS, int(rng.integers(1, 4))) + spatial
    theta = rng.standard_normal((DRAWS, r, r + 1)) * rng.choice([0.5, 1.0, 4.0])
    theta[0] = np.eye(r, r + 1)  # the identity: the base grid itself
    cases.append((theta, list(size) if rng.random() < 0.5 else size, ac))
  return cases


@pytest.mark.slow
def test_affine_grid_matches_torch():
  """Values and gradients for theta (float64, float32) against torch, 2-D and 3-D, every
  align_corners (None: torch's default), length-1 and odd sizes; every combination in one
  compiled program per dtype."""
  cases = _affine_cases(_combos(20), 600)

  def run(thetas, cts):
    outs = []
    for a, ct, (_, size, ac) in zip(thetas, cts, cases):
      y, pullback = jax.vjp(lambda t, size=size, ac=ac: F.affine_grid(t, size, ac), a)
      outs.append((y, pullback(ct)[0]))
    return outs

  for dt, tol in ((np.float64, TOL64), (np.float32, TOL32)):
    wants, cts = [], []
    for theta, size, ac in cases:
      td = theta.astype(dt)
      ct = np.random.default_rng(td.size).standard_normal(
          (size[0],) + tuple(size[2:]) + (len(size) - 2,)).astype(dt)
      with pytest.warns(UserWarning) if ac and min(size[2:]) == 1 else _no_warning():
        # torch notes its unit-size behaviour with align_corners=True (the one jaxops has)
        wants.append(_torch_vjp(lambda a, size=size, ac=ac: TF.affine_grid(
            a, size, align_corners=bool(ac)), (td,), ct))
      cts.append(jnp.asarray(ct))
    got = jax.jit(run)([jnp.asarray(t.astype(dt)) for t, _, _ in cases], cts)
    for (theta, size, ac), (want, (wt,)), (y, gt) in zip(cases, wants, got):
      msg = f"{dt.__name__} affine_grid theta{theta.shape} size {size} align_corners={ac}"
      np.testing.assert_allclose(y, want, **tol, err_msg=msg)
      np.testing.assert_allclose(gt, wt, **tol, err_msg="d/dtheta " + msg)
  assert len(cases) * DRAWS >= min(_FULL, 200)


class _no_warning:
  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


# --- roi_align ------------------------------------------------------------------------------------


def _tv_axis(start, bin_size, grid, pooled, length, t):
  """Per (bin, sample) of one axis, as pre_calc_for_bilinear_interpolate computes it in type t:
  the sample's validity, low/high tap indices and their weights (hy, ly)."""
  p = np.arange(pooled).astype(t)[:, None]
  i = (np.arange(max(grid, 0)) + 0.5).astype(t)[None, :]
  y = start + p * bin_size + i * bin_size / t(grid)          # yy, as written in the kernel
  valid = (y >= -1.0) & (y <= length)
  y = np.where(y <= 0, t(0), y).astype(t)
  low = y.astype(np.int64)                                   # (int)y on y >= 0
  top = low >= length - 1
  low = np.where(top, length - 1, low)
  high = np.where(top, length - 1, low + 1)
  y = np.where(top, low.astype(t), y).astype(t)
  ly = (y - low.astype(t)).astype(t)
  hy = (t(1) - ly).astype(t)
  return valid, low, high, hy, ly


def _tv_box(row, scale, pooled_h, pooled_w, sampling_ratio, aligned, t):
  offset = t(0.5) if aligned else t(0)
  s = t(scale)
  sw, sh = row[1] * s - offset, row[2] * s - offset
  ew, eh = row[3] * s - offset, row[4] * s - offset
  rw, rh = t(ew - sw), t(eh - sh)
  if not aligned:  # "Force malformed ROIs to be 1x1"
    rw, rh = max(rw, t(1)), max(rh, t(1))
  bh, bw = t(rh / t(pooled_h)), t(rw / t(pooled_w))
  gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(t(rh / t(pooled_h))))
  gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(t(rw / t(pooled_w))))
  return sh, sw, bh, bw, gh, gw


def _tv_samples(x, row, scale, pooled_h, pooled_w, sampling_ratio, aligned):
  """The four (index, weight) corner taps of every sample of one box: (yi, xi, w) lists of
  arrays shaped (pooled_h, grid_h, pooled_w, grid_w), and the kernel's grid counts."""
  t = x.dtype.type
  _, _, h, w = x.shape
  sh, sw, bh, bw, gh, gw = _tv_box(row, scale, pooled_h, pooled_w, sampling_ratio, aligned, t)
  vy, yl, yh, hy, ly = _tv_axis(sh, bh, gh, pooled_h, h, t)
  vx, xl, xh, hx, lx = _tv_axis(sw, bw, gw, pooled_w, w, t)
  ok = vy[:, :, None, None] & vx[None, None, :, :]
  taps = []
  for yi, wy in ((yl, hy), (yh, ly)):
    for xi, wx in ((xl, hx), (xh, lx)):
      wt = (wy[:, :, None, None] * wx[None, None, :, :]).astype(t)  # w1 = hy * hx, ...
      ys, xs = np.broadcast_arrays(yi[:, :, None, None], xi[None, None, :, :])
      taps.append((ys, xs, np.where(ok, wt, t(0))))
  return taps, gh, gw


def _tv_forward(x, rois, scale, pooled_h, pooled_w, sampling_ratio, aligned):
  """torchvision's roi_align_forward_kernel_impl: per bin the sum of w1 v1 + ... + w4 v4 over
  its samples, divided by max(grid_h * grid_w, 1); in x's dtype."""
  t = x.dtype.type
  out = np.zeros((len(rois), x.shape[1], pooled_h, pooled_w), x.dtype)
  for n, row in enumerate(rois):
    b = int(row[0])  # (int) conversion of the batch index
    taps, gh, gw = _tv_samples(x, row, scale, pooled_h, pooled_w, sampling_ratio, aligned)
    count = t(max(gh * gw, 1))
    val = sum(wt[None] * x[b][:, yi, xi] for yi, xi, wt in taps)   # (C, ph, gh, pw, gw)
    out[n] = (val.sum(axis=(2, 4), dtype=x.dtype) / count).astype(x.dtype)
  return out


def _tv_backward(x, rois, grad, scale, pooled_h, pooled_w, sampling_ratio, aligned):
  """torchvision's roi_align_backward_kernel_impl: grad_output * w_i / (grid_h * grid_w) added
  at each corner of every sample (samples outside the map add nothing)."""
  t = x.dtype.type
  gi = np.zeros_like(x)
  for n, row in enumerate(rois):
    b = int(row[0])
    taps, gh, gw = _tv_samples(x, row, scale, pooled_h, pooled_w, sampling_ratio, aligned)
    count = t(gh * gw)
    if gh <= 0 or gw <= 0:
      continue  # no samples: the kernel's loops do not run
    g = grad[n][:, :, None, :, None]                                # (C, ph, 1, pw, 1)
    for yi, xi, wt in taps:
      contrib = (g * wt[None] / count).astype(x.dtype)
      np.add.at(gi[b], (slice(None), yi, xi), contrib)
  return gi


def _onnx_roi_align(x, rois, index, pooled_h, pooled_w, scale, sampling_ratio, aligned):
  """(onnxruntime, onnx.reference) RoiAlign-16 with torchvision's arguments mapped onto it."""
  node = helper.make_node(
      "RoiAlign", ["x", "r", "b"], ["y"], mode="avg", output_height=pooled_h,
      output_width=pooled_w, sampling_ratio=max(sampling_ratio, 0), spatial_scale=scale,
      coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel")
  elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.DOUBLE
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", elem, None),
                    helper.make_tensor_value_info("r", elem, None),
                    helper.make_tensor_value_info("b", TensorProto.INT64, None)],
      [helper.make_tensor_value_info("y", elem, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
  model.ir_version = 8
  feeds = {"x": x, "r": rois, "b": index.astype(np.int64)}
  options = ort.SessionOptions()
  options.log_severity_level = 4
  session = ort.InferenceSession(model.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
  return session.run(None, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0]


def _roi_cases(count, seed):
  rng = np.random.default_rng(seed)
  cases = []
  for t in range(count):
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    h, w = (int(rng.choice([1, int(rng.integers(2, 10))])) for _ in range(2))
    scale = float(rng.choice([1.0, 0.5, 0.25, 2.0]))
    out = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    kw = dict(output_size=out if out[0] != out[1] or rng.random() < 0.5 else out[0],
              spatial_scale=scale, sampling_ratio=int(rng.choice([-1, 0, 1, 2, 3])),
              aligned=bool(t % 2))
    as_list = (t // 2) % 2 == 1
    x = rng.standard_normal((DRAWS * n, c, h, w))
    rows = []
    for d in range(DRAWS):
      k = 3
      xs = rng.uniform(-3, (w + 3) / scale, (k, 2))
      ys = rng.uniform(-3, (h + 3) / scale, (k, 2))
      xs.sort(axis=1)
      ys.sort(axis=1)
      if d == 1:   # zero-size boxes (width, height, or both)
        xs[0, 1] = xs[0, 0]
        ys[1, 1] = ys[1, 0]
        xs[2, 1], ys[2, 1] = xs[2, 0], ys[2, 0]
      if d == 2:   # tiny boxes, below one pixel (aligned=False widens them to 1 x 1)
        xs[:, 1] = xs[:, 0] + rng.uniform(0, 0.8 / scale, k)
      index = d * n + rng.integers(0, n, k)
      rows.append(np.column_stack([index, xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]]))
    rois = np.concatenate(rows)
    rois = rois[np.argsort(rois[:, 0], kind="stable")] if as_list else rois
    cases.append((x, rois, as_list, kw))
  return cases


def _boxes_arg(rois, n_images, as_list, xp=np):
  if not as_list:
    return xp.asarray(rois)
  return [xp.asarray(rois[rois[:, 0] == i][:, 1:]) for i in range(n_images)]


@pytest.mark.slow
def test_roi_align_matches_torchvision_kernel_and_onnx():
  """Values against the transcribed torchvision kernel (float64 and float32), onnxruntime
  (float32) and onnx.reference (float64) through RoiAlign-16; the input gradient against the
  transcribed backward kernel; the box gradient against central differences (float64)."""
  cases = _roi_cases(_combos(5), 700)
  for x, rois, as_list, kw in cases:
    out = kw["output_size"]
    ph, pw = out if isinstance(out, tuple) else (out, out)
    args = (kw["spatial_scale"], ph, pw, kw["sampling_ratio"], kw["aligned"])
    msg = f"roi_align x{x.shape} {len(rois)} boxes list={as_list} {kw}"
    ct = np.random.default_rng(x.size).standard_normal((len(rois), x.shape[1], ph, pw))

    def f(a, boxes, kw=kw):
      return F.roi_align(a, boxes, **kw)

    for dt in (np.float64, np.float32):
      xd, rd = x.astype(dt), rois.astype(dt)
      boxes = _boxes_arg(rd, len(x), as_list, jnp)
      want = _tv_forward(xd, rd, *args)
      tol = TOL64 if dt == np.float64 else dict(rtol=1e-5, atol=1e-5)
      if dt == np.float64 or GRAD32:
        y, (gx, gb_dt) = _vjp(f)((jnp.asarray(xd), boxes), jnp.asarray(ct.astype(dt)))
        want_gx = _tv_backward(xd, rd, ct.astype(dt), *args)
        np.testing.assert_allclose(gx, want_gx, **tol, err_msg=f"{dt.__name__} d/dinput {msg}")
        if dt == np.float64:
          gb = gb_dt
      else:
        y = jax.jit(f)(jnp.asarray(xd), boxes)
      np.testing.assert_allclose(y, want, **tol, err_msg=f"{dt.__name__} torchvision {msg}")
      via_ort, via_reference = _onnx_roi_align(xd, rd[:, 1:], rd[:, 0], ph, pw, kw["spatial_scale"],
                                               kw["sampling_ratio"], kw["aligned"])
      if dt == np.float32:
        np.testing.assert_allclose(y, via_ort, rtol=1e-5, atol=1e-5, err_msg=f"onnxruntime {msg}")
      else:
        np.testing.assert_allclose(y, via_reference, **TOL64, err_msg=f"onnx.reference {msg}")
    # d/dboxes: the box columns' central differences of the float64 transcription
    if not as_list:  # the batch index column is an index: no gradient
      np.testing.assert_array_equal(np.asarray(gb)[:, 0], 0.0)
    gb = np.concatenate([np.asarray(v) for v in gb]) if as_list else np.asarray(gb)[:, 1:]
    checked = 0
    step = 1e-6

    def loss(r):
      return np.sum(_tv_forward(x, r, *args) * ct, axis=(1, 2, 3))   # one loss per box

    base = loss(rois)
    for j in range(4):
      up, down = rois.copy(), rois.copy()
      up[:, 1 + j] += step
      down[:, 1 + j] -= step
      lu, ld = loss(up), loss(down)
      fwd, bwd = (lu - base) / step, (base - ld) / step
      smooth = np.abs(fwd - bwd) <= 1e-5 * (1 + np.abs(fwd))   # no kink or count jump nearby
      np.testing.assert_allclose(gb[smooth, j], ((lu - ld) / (2 * step))[smooth], rtol=1e-6,
                                 atol=1e-6, err_msg=f"d/dbox[{j}] {msg}")
      checked += int(smooth.sum())
    assert checked >= len(rois) * 2, msg  # most box coordinates are away from the kinks
  assert len(cases) * DRAWS >= min(_FULL, 200)


# --- errors ---------------------------------------------------------------------------------------

_X4 = np.zeros((2, 1, 3, 4))
_G4 = np.zeros((2, 2, 2, 2))


@pytest.mark.parametrize("args,kw,torch_error,error,arg", [
    ((_X4, _G4), dict(mode="linear"), ValueError, ValueError, "mode"),
    ((_X4, _G4), dict(padding_mode="circular"), ValueError, ValueError, "padding_mode"),
    ((_X4, _G4.astype(np.float32)), {}, RuntimeError, TypeError, "grid"),
    ((_X4.astype(np.int64), _G4.astype(np.int64)), {}, RuntimeError, TypeError, "input"),
    ((_X4, _G4[:1]), {}, RuntimeError, ValueError, "grid"),
    ((_X4, np.zeros((2, 2, 2, 3))), {}, RuntimeError, ValueError, "grid"),
    ((_X4[:, 0], _G4), {}, RuntimeError, ValueError, "input"),
    ((_X4, _G4[:, None]), {}, RuntimeError, ValueError, "input"),
    ((np.zeros((2, 1, 0, 4)), _G4), {}, RuntimeError, ValueError, "input"),
    ((np.zeros((2, 1, 2, 3, 4)), np.zeros((2, 1, 2, 2, 3))), dict(mode="bicubic"), RuntimeError,
     ValueError, "mode"),
])
def test_grid_sample_errors_where_torch_raises(args, kw, torch_error, error, arg):
  with pytest.raises(torch_error):
    TF.grid_sample(*(torch.tensor(a) for a in args), **dict(kw, align_corners=False))
  with pytest.raises(error, match=f"jaxops.torch.grid_sample: argument `{arg}`"):
    F.grid_sample(*args, **kw)


_T2 = np.zeros((2, 2, 3))


@pytest.mark.parametrize("theta,size,ac,torch_error,error,match", [
    (_T2.astype(np.int64), (2, 1, 3, 4), False, ValueError, ValueError, "argument `theta`"),
    (_T2, (2, 1, 2, 3, 4), False, ValueError, ValueError, "argument `theta`"),
    (np.zeros((2, 3, 4)), (2, 1, 3, 4), False, ValueError, ValueError, "argument `theta`"),
    (_T2, (2, 1, 4), False, NotImplementedError, NotImplementedError, "argument `size`"),
    (_T2, (2, 1, 0, 4), False, ValueError, ValueError, "argument `size`"),
    (_T2, (2, 0, 3, 4), True, ValueError, ValueError, "argument `size`"),
    (_T2, (3, 1, 3, 4), False, RuntimeError, ValueError, "argument `theta`"),
])
def test_affine_grid_errors_where_torch_raises(theta, size, ac, torch_error, error, match):
  with pytest.raises(torch_error):
    TF.affine_grid(torch.tensor(theta), size, align_corners=ac)
  with pytest.raises(error, match=f"jaxops.torch.affine_grid: {match}"):
    F.affine_grid(theta, size, ac)


_XR = np.zeros((2, 1, 4, 4), np.float32)
_BOX = np.array([[0.0, 0.0, 0.0, 2.0, 2.0]], np.float32)


@pytest.mark.parametrize("args,kw,error,arg", [
    # torchvision's checks (torchvision/ops/_utils.py check_roi_boxes_shape, and the kernel's
    # "rois must have shape as Tensor[K, 5]" / "input should have the same type as rois")
    ((_XR, _BOX[:, 1:], 2), {}, ValueError, "boxes"),
    ((_XR, [_BOX], 2), {}, ValueError, "boxes"),
    ((_XR, _BOX.astype(np.float64), 2), {}, TypeError, "boxes"),
    ((_XR, [_BOX[:, 1:].astype(np.float64)], 2), {}, TypeError, "boxes"),
    ((_XR.astype(np.int32), _BOX.astype(np.int32), 2), {}, TypeError, "input"),
    ((_XR[0], _BOX, 2), {}, ValueError, "input"),
    ((_XR, _BOX, (1, 2, 3)), {}, ValueError, "output_size"),
    ((_XR, _BOX, -1), {}, ValueError, "output_size"),
    ((_XR, _BOX, 2.5), {}, TypeError, "output_size"),
    ((_XR, _BOX, 2), dict(sampling_ratio=1.5), TypeError, "sampling_ratio"),
    ((_XR, _BOX, 2), dict(aligned="yes"), TypeError, "aligned"),
])
def test_roi_align_errors(args, kw, error, arg):
  with pytest.raises(error, match=f"jaxops.torch.roi_align: argument `{arg}`"):
    F.roi_align(*args, **kw)


def test_shape_arguments_must_be_concrete_under_jit():
  with pytest.raises(TypeError, match="affine_grid: argument `size`"):
    jax.jit(lambda t, n: F.affine_grid(t, (1, 1, n, 2)))(np.zeros((1, 2, 3)), 3)
  with pytest.raises(TypeError, match="roi_align: argument `output_size`"):
    jax.jit(lambda x, b, n: F.roi_align(x, b, n))(_XR, _BOX, 2)
  with pytest.raises(TypeError, match="grid_sample: argument `align_corners`"):
    jax.jit(lambda x, g, a: F.grid_sample(x, g, align_corners=a))(_X4, _G4, True)


# --- jit, vmap, no retrace, edge cases ------------------------------------------------------------


class TransformsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_each_function_against_its_oracle(self):
    rng = np.random.default_rng(20)
    x = rng.standard_normal((2, 3, 5, 4))
    g = rng.uniform(-1.2, 1.2, (2, 3, 2, 2))
    want = TF.grid_sample(torch.tensor(x), torch.tensor(g), "bicubic", "reflection", True)
    got = self.variant(lambda a, b: F.grid_sample(a, b, "bicubic", "reflection", True))(x, g)
    np.testing.assert_allclose(got, want.numpy(), **TOL64)
    theta = rng.standard_normal((2, 3, 4))
    want = TF.affine_grid(torch.tensor(theta), [2, 1, 3, 2, 5], align_corners=True)
    got = self.variant(lambda t: F.affine_grid(t, [2, 1, 3, 2, 5], align_corners=True))(theta)
    np.testing.assert_allclose(got, want.numpy(), **TOL64)
    boxes = np.array([[1.0, 0.5, 0.2, 3.7, 4.1], [0.0, -1.0, 2.0, 1.5, 2.5]])
    want = _tv_forward(x, boxes, 0.5, 2, 3, -1, False)
    got = self.variant(lambda a, b: F.roi_align(a, b, (2, 3), 0.5))(x, boxes)
    np.testing.assert_allclose(got, want, **TOL64)

  def test_vmap_over_batches_of_grids_thetas_and_box_sets(self):
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 2, 2, 4, 5))                 # 3 batches of (2, 2, 4, 5)
    g = rng.uniform(-1.2, 1.2, (3, 2, 3, 3, 2))
    got = jax.vmap(lambda a, b: F.grid_sample(a, b, padding_mode="border"))(x, g)
    for i in range(3):
      want = TF.grid_sample(torch.tensor(x[i]), torch.tensor(g[i]), padding_mode="border",
                            align_corners=False)
      np.testing.assert_allclose(got[i], want.numpy(), **TOL64)
    theta = rng.standard_normal((3, 2, 2, 3))
    got = jax.vmap(lambda t: F.affine_grid(t, (2, 1, 3, 4), False))(theta)
    for i in range(3):
      want = TF.affine_grid(torch.tensor(theta[i]), (2, 1, 3, 4), align_corners=False)
      np.testing.assert_allclose(got[i], want.numpy(), **TOL64)
    sets = np.stack([np.column_stack([rng.integers(0, 2, 4), rng.uniform(-1, 2, (4, 2)),
                                      rng.uniform(2, 6, (4, 2))]) for _ in range(3)])
    got = jax.vmap(lambda b: F.roi_align(x[0], b, 2, aligned=True))(sets)
    for i in range(3):
      np.testing.assert_allclose(got[i], _tv_forward(x[0], sets[i], 1.0, 2, 2, -1, True), **TOL64)

  def test_no_retrace_on_repeated_calls(self):
    rng = np.random.default_rng(22)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(x, g, theta, boxes):
      grid = F.affine_grid(theta, (2, 1, 3, 3), align_corners=False)
      return (F.grid_sample(x, g, mode="nearest"), F.grid_sample(x, grid),
              F.roi_align(x, boxes, 2, sampling_ratio=2))

    for _ in range(3):
      run(rng.standard_normal((2, 1, 4, 4)), rng.uniform(-1, 1, (2, 3, 3, 2)),
          rng.standard_normal((2, 2, 3)), np.array([[1.0, 0.0, 0.0, 3.0, 2.0]]))

  def test_repeated_eager_calls_reuse_the_configuration(self):
    x, g = np.ones((1, 1, 2, 2)), np.zeros((1, 1, 1, 2))
    F.grid_sample(x, g)
    hits = F._GRID_SAMPLE.hits
    F.grid_sample(x, g)
    self.assertEqual(F._GRID_SAMPLE.hits, hits + 1)


def test_roi_align_empty_boxes_and_output():
  """torchvision returns zeros of shape (K, C, h, w) when that has no elements
  (roi_align_forward_kernel: ``if (output.numel() == 0) return output``); a list entry with no
  boxes adds none; a fractional batch index is truncated."""
  x = np.arange(32.0).reshape(2, 1, 4, 4)
  assert F.roi_align(x, np.zeros((0, 5)), 2).shape == (0, 1, 2, 2)
  assert F.roi_align(x, np.array([[0.0, 0.0, 0.0, 2.0, 2.0]]), (0, 3)).shape == (1, 1, 0, 3)
  boxes = [np.zeros((0, 4)), np.array([[0.0, 0.0, 2.0, 2.0]])]
  want = _tv_forward(x, np.array([[1.0, 0.0, 0.0, 2.0, 2.0]]), 1.0, 1, 1, 2, False)
  np.testing.assert_allclose(F.roi_align(x, boxes, 1, sampling_ratio=2), want, **TOL64)
  # the index column is converted as C's (int) does: 1.7 is image 1
  row = np.array([[1.7, 0.5, 0.0, 3.0, 2.5]])
  np.testing.assert_allclose(F.roi_align(x, row, 2), _tv_forward(x, row, 1.0, 2, 2, -1, False),
                             **TOL64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_half_pixel_ties_round_as_each_torch_kernel(dtype):
  """torch's 2-D kernel is vectorised and rounds the pixel coordinate (g + 1) * L - 1 once (a
  fused multiply-add); its 3-D kernel is scalar and rounds the product, then the difference.
  Within an ulp of a half-pixel, nearest sampling then reads different pixels: float64
  g = -1/3 on three pixels reads pixel 1 through the 2-D kernel and pixel 0 through the 3-D one.
  jaxops.torch follows each, whether or not XLA contracts its own arithmetic (its default
  backend optimization level does, level 0 does not; both are compiled here). Before,
  jaxops.torch read pixel 1 on both ranks at the default level and pixel 0 on both at level 0."""
  rng = np.random.default_rng(5403)
  for spatial in ((21, 31), (3, 7, 33)):
    x = np.arange(np.prod(spatial), dtype=dtype).reshape((1, 1) + spatial)
    grid = half_pixel_grid(spatial, dtype, rng)
    for pad in ("zeros", "border", "reflection"):
      want = TF.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode="nearest",
                            padding_mode=pad, align_corners=False).numpy()
      f = lambda a, g, pad=pad: F.grid_sample(a, g, "nearest", pad, False)  # noqa: E731
      for level in (0, 3):
        got = compiled(f, x, grid, level=level)(x, grid)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{spatial} {pad} {level}")
  # the cases found (torch 2-D / 3-D): pixels 1 / 0, 6 / 5, and 30 / 29 in float32
  for g, length, pad, want2, want3 in ((-1 / 3, 3, "zeros", 1, 0),
                                       (1.285714285714286, 7, "reflection", 6, 5),
                                       (1.064516305923462, 31, "reflection", 30, 29)):
    if dtype == np.float32 and length != 31 or dtype == np.float64 and length == 31:
      continue
    x3 = np.arange(length, dtype=dtype).reshape(1, 1, 1, 1, length)
    g3 = np.array([g, 0, 0], dtype).reshape(1, 1, 1, 1, 3)
    assert F.grid_sample(x3[0], g3[0, ..., :2], "nearest", pad, False).item() == want2
    assert F.grid_sample(x3, g3, "nearest", pad, False).item() == want3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_affine_grid_is_torchs_to_the_bit(dtype):
  """torch's base positions are ``linspace(-1, 1, L)`` (each entry a fused multiply-add), times
  ``(L - 1) / L`` without align_corners; its bmm takes a scalar loop (each product rounded,
  summed in order) below 400 multiplications per image, and the BLAS above. jaxops.torch's grid
  equals torch's bit for bit below that threshold, compiled at XLA's levels 0 and 3, and above
  it where torch's BLAS fuses each multiply-add as XLA's product does (MKL on the Intel Xeon
  these tests ran on); where it rounds each product instead (MKL on the AMD EPYC: torch's grid
  is then the scalar loop's, computed here in NumPy), apart by those roundings at most
  (docs/DEVIATIONS.md, jaxops.torch 13). Before, with the exact positions rounded once and
  XLA's product, grids of random thetas differed by an ulp below the threshold (float32: 96 of
  1,600 values on 4 x 5, 591 of 5,120 on 8 x 8, 273 of 3,240 on 3 x 3 x 3; none on 32 x 48),
  and nearest sampling of affine_grid's grids read the neighbouring pixel at half-pixels (542
  of 47,591 values over 300 random pipelines of scalings and shifts; 0 now)."""
  rng = np.random.default_rng(5408)
  for size in ((2, 1, 4, 5), (2, 1, 8, 8), (1, 1, 3, 3, 3), (1, 1, 20, 24), (1, 1, 7, 6, 9)):
    r = len(size) - 2
    blas = (r + 1) * r * int(np.prod(size[2:])) >= 400
    for ac in (False, True):
      theta = rng.standard_normal((size[0], r, r + 1)).astype(dtype)
      want = TF.affine_grid(torch.from_numpy(theta), list(size), align_corners=ac).numpy()
      # torch's base positions (its grid of the identity: products by 1 and 0 are exact), then
      # each product rounded and the products summed in order
      base = TF.affine_grid(torch.eye(r, r + 1, dtype=torch.from_numpy(theta).dtype)[None],
                            [1, 1, *size[2:]], align_corners=ac).numpy()[0]
      base = [base[..., k] for k in range(r)] + [np.ones(size[2:], dtype)]
      rounded = np.zeros(want.shape, dtype)
      size_of_terms = np.zeros(want.shape, dtype)
      for k in range(r + 1):
        term = base[k][None, ..., None] * theta[:, None, None, :, k].reshape(
            (size[0],) + (1,) * r + (r,))
        rounded += term
        size_of_terms += np.abs(term)
      # torch's BLAS rounded each product (its grid is the scalar loop's), or fused them
      unfused = blas and np.array_equal(rounded, want)
      f = lambda t, size=size, ac=ac: F.affine_grid(t, size, align_corners=ac)  # noqa: E731
      for level in (0, 3):
        got = np.asarray(compiled(f, theta, level=level)(theta))
        if unfused:  # apart by the products' roundings at most
          np.testing.assert_array_less(np.abs(got - want),
                                       (r + 1) * np.finfo(dtype).eps * size_of_terms)
        else:
          np.testing.assert_array_equal(got, want, err_msg=f"{size} {ac} {level}")
  # a scaling's grid sampled with nearest at half-pixels: 2x on 8 columns reads torch's pixels
  theta = np.array([[[2.0, 0, 0], [0, 2.0, 0]]], dtype)
  x = np.arange(8 * 6, dtype=dtype).reshape(1, 1, 6, 8)
  want = TF.grid_sample(torch.from_numpy(x), TF.affine_grid(torch.from_numpy(theta), [1, 1, 11, 23],
                                                            align_corners=True),
                        mode="nearest", padding_mode="border", align_corners=True).numpy()
  got = F.grid_sample(x, F.affine_grid(theta, (1, 1, 11, 23), align_corners=True), "nearest",
                      "border", True)
  np.testing.assert_array_equal(np.asarray(got), want)


def test_non_finite_grid_deviation_is_pinned():
  """torch's 4-D (vectorised) and 5-D kernels disagree on non-finite grid values: a NaN x with
  border padding reads pixel 1 in one and pixel 2 in the other of [[1, 2], [3, 4]]; so does
  +inf with reflection padding. jaxops.torch keeps jaxops.grid_sample's rule (NaN gives NaN,
  +-inf with reflection gives NaN). docs/DEVIATIONS.md, jaxops.torch 5."""
  x4 = torch.arange(1.0, 5.0, dtype=torch.float64).reshape(1, 1, 2, 2)
  for v, pad in ((float("nan"), "border"), (float("inf"), "reflection")):
    g4 = torch.tensor([[[[v, 0.0]]]], dtype=torch.float64)
    g5 = torch.tensor([[[[[v, 0.0, 0.0]]]]], dtype=torch.float64)
    y4 = TF.grid_sample(x4, g4, "bilinear", pad, False).item()
    y5 = TF.grid_sample(x4[:, :, None], g5, "bilinear", pad, False).item()
    assert (y4, y5) == (2.0, 3.0), (v, pad, y4, y5)
    assert np.isnan(F.grid_sample(x4.numpy(), g4.numpy(), "bilinear", pad, False)).all()
    assert np.isnan(F.grid_sample(x4[:, :, None].numpy(), g5.numpy(), "bilinear", pad,
                                  False)).all()
  # Finite float32 grid values past 2**31 pixels: torch's 4-D kernel reads pixel 0 (an int32
  # overflow), its 5-D kernel reflects the float32 coordinate, as jaxops.torch does
  x = np.arange(7, dtype=np.float32).reshape(1, 1, 1, 7)
  for v, ac in ((4.5e9, False), (8.5e9, True)):
    g = np.array([[[[v, 0.0]]]], np.float32)
    y4 = TF.grid_sample(torch.tensor(x), torch.tensor(g), "bilinear", "reflection", ac).item()
    g5 = torch.tensor(np.append(g, np.float32(0))).reshape(1, 1, 1, 1, 3)
    y5 = TF.grid_sample(torch.tensor(x)[:, :, None], g5, "bilinear", "reflection", ac).item()
    assert y4 == 0.0 and y5 != 0.0, (v, y4, y5)
    assert F.grid_sample(x, g, "bilinear", "reflection", ac).item() == y5


def test_signatures_are_torchs():
  import inspect

  def params(f):
    return [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]

  for name in ("grid_sample", "affine_grid"):
    assert params(getattr(F, name)) == params(getattr(TF, name)), name
    assert name in F.__all__
  # torchvision/ops/roi_align.py: roi_align(input, boxes, output_size, spatial_scale=1.0,
  # sampling_ratio=-1, aligned=False)
  empty, positional = inspect.Parameter.empty, inspect.Parameter.POSITIONAL_OR_KEYWORD
  assert params(F.roi_align) == [("input", empty, positional), ("boxes", empty, positional),
                                 ("output_size", empty, positional),
                                 ("spatial_scale", 1.0, positional),
                                 ("sampling_ratio", -1, positional),
                                 ("aligned", False, positional)]
  assert "roi_align" in F.__all__


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_grid_sample_deviation_is_pinned(dtype):
  """DEVIATIONS jaxops.torch 11: torch 2.13's CPU grid_sample on float16/bfloat16 computes in
  the half type (bfloat16 nearest can read the neighbouring pixel: the coordinate itself is
  rounded); jaxops.torch computes in float32 and rounds once. Oracle: torch's float32 result on
  the same half values, rounded to the half type (within one unit of the half type's rounding,
  the float32 sums being ordered differently, and a few float32 units of the input's size)."""
  import ml_dtypes

  dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
  tdt = getattr(torch, dtype)
  rng = np.random.default_rng(12)
  worst_torch = 0.0
  for shape, gshape, modes in (((2, 3, 5, 6), (2, 4, 7, 2), ("nearest", "bilinear", "bicubic")),
                               ((2, 3, 4, 5, 6), (2, 3, 4, 5, 3), ("nearest", "bilinear"))):
    x = (rng.standard_normal(shape) * 4).astype(dt)
    g = rng.uniform(-1.2, 1.2, gshape).astype(dt)
    xt, gt = torch.tensor(x.astype(np.float32)), torch.tensor(g.astype(np.float32))
    for mode in modes:
      for pad in ("zeros", "border", "reflection"):
        want = TF.grid_sample(xt, gt, mode, pad, False).to(tdt).float().numpy()
        got = F.grid_sample(jnp.asarray(x), jnp.asarray(g), mode, pad, False)
        assert got.dtype == np.dtype(dt)
        ulp = np.abs(want) * float(ml_dtypes.finfo(dt).eps) + 1e-30
        # (and a few float32 units of the input's size, where a small result cancels larger
        # terms: torch's float32 result itself is then several half-type units off)
        f32 = 16 * 2.0 ** -24 * float(np.abs(x.astype(np.float32)).max())
        assert np.all(np.abs(np.asarray(got, np.float32) - want) <= ulp + f32), (mode, pad)
        half = TF.grid_sample(xt.to(tdt), gt.to(tdt), mode, pad, False).float().numpy()
        worst_torch = max(worst_torch, float(np.abs(half - want).max()))
  assert worst_torch > 0.01  # torch's half-type arithmetic is further off than that


def test_integer_flags_and_float_sizes_are_type_errors_as_in_torch():
  """torch takes align_corners as a Python bool (or None) only, and sizes as ints only: 1, 0,
  np.True_ and 4.0 are its TypeErrors, and jaxops.torch's."""
  x, g, theta = _X4, _G4, _T2
  for ac in (1, 0):
    with pytest.raises(TypeError):
      TF.grid_sample(torch.tensor(x), torch.tensor(g), align_corners=ac)
    with pytest.raises(TypeError, match="grid_sample: argument `align_corners`.*Python bool"):
      F.grid_sample(x, g, align_corners=ac)
    with pytest.raises(TypeError):
      TF.interpolate(torch.tensor(x), size=3, mode="bilinear", align_corners=ac)
    with pytest.raises(TypeError, match="interpolate: argument `align_corners`.*Python bool"):
      F.interpolate(x, size=3, mode="bilinear", align_corners=ac)
    with pytest.raises(TypeError):
      TF.affine_grid(torch.tensor(theta), (2, 1, 3, 4), align_corners=ac)
    with pytest.raises(TypeError, match="affine_grid: argument `align_corners`.*Python bool"):
      F.affine_grid(theta, (2, 1, 3, 4), align_corners=ac)
  with pytest.raises(TypeError):
    TF.affine_grid(torch.tensor(theta), (2, 1, 3.0, 4), align_corners=False)
  with pytest.raises(TypeError, match="affine_grid: argument `size`.*not floats"):
    F.affine_grid(theta, (2, 1, 3.0, 4), align_corners=False)
  y, i = np.zeros((1, 1, 2)), np.array([[[0, 3]]])
  with pytest.raises(TypeError):
    TF.max_unpool1d(torch.tensor(y), torch.tensor(i), 2, output_size=[4.0])
  with pytest.raises(TypeError, match="max_unpool1d: argument `output_size`.*not floats"):
    F.max_unpool1d(y, i, 2, output_size=[4.0])
  with pytest.raises(TypeError):
    TF.grid_sample(torch.tensor(x), torch.tensor(g), align_corners=np.True_)
  with pytest.raises(TypeError, match="grid_sample: argument `align_corners`.*Python bool"):
    F.grid_sample(x, g, align_corners=np.True_)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_affine_grid_of_a_unit_axis_deviation_is_pinned(dtype):
  """DEVIATIONS jaxops.torch 11: torch 2.13's CPU affine_grid has no half-type kernel for a size
  with an axis of length 1 (NotImplementedError); jaxops.torch computes in float32 and rounds
  once. Oracle: torch's float32 grid from the same half-type theta, rounded to the half type."""
  import ml_dtypes

  dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
  tdt = getattr(torch, dtype)
  theta = (np.eye(2, 3)[None] + np.random.default_rng(5).uniform(-0.3, 0.3, (1, 2, 3))).astype(dt)
  for size in ((1, 1, 1, 4), (1, 2, 3, 1), (1, 1, 1, 1, 5)):
    th = theta if len(size) == 4 else np.eye(3, 4)[None].astype(dt)
    with pytest.raises(NotImplementedError):
      TF.affine_grid(torch.tensor(th.astype(np.float32)).to(tdt), size, False)
    want = TF.affine_grid(torch.tensor(th.astype(np.float32)), size, False).to(tdt).float()
    got = F.affine_grid(jnp.asarray(th), size, False)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(np.asarray(got, np.float32), want.numpy())
