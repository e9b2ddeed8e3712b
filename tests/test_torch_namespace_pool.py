"""jaxops.torch's pooling functions against torch 2.13 CPU itself: values, gradients, errors.

Oracle: ``torch.nn.functional.avg_pool{1,2,3}d`` / ``adaptive_avg_pool{1,2,3}d`` and
torch.autograd on the same data.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxops.torch as F
from tests.test_torch_namespace import batched_sweep

# Configurations per compiled sweep: each costs an XLA compile, so the default keeps the file
# within the suite's time budget; JAXOPS_TORCH_SWEEP=200 runs the full sweep.
SWEEP = int(os.environ.get("JAXOPS_TORCH_SWEEP", "20"))
END_TO_END = SWEEP if "JAXOPS_TORCH_SWEEP" in os.environ else 6  # adaptive pools, end to end
TOL = {np.float32: dict(rtol=1.3e-6, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _check_all(name: str, cases: list[tuple[np.ndarray, tuple, dict]],
               rng: np.random.Generator) -> None:
  """Values in float64 and float32 and float64 gradients of ``name`` against torch, for many
  configurations compiled as one program each (batched_sweep)."""
  tf, jf = getattr(TF, name), getattr(F, name)
  want64, want32, wantg, gs = [], [], [], []
  for x, args, kw in cases:
    want32.append(tf(torch.tensor(x.astype(np.float32)), *args, **kw).numpy())
    xt = torch.tensor(x, requires_grad=True)
    yt = tf(xt, *args, **kw)
    g = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(g))
    want64.append(yt.detach().numpy())
    wantg.append(xt.grad.numpy())
    gs.append(g)
  calls = [lambda v, args=args, kw=kw: jf(v, *args, **kw) for _, args, kw in cases]
  out64, out32, grads = batched_sweep(calls, [c[0] for c in cases], gs)
  for i, (x, args, kw) in enumerate(cases):
    msg = f"{name} {x.shape} {args} {kw}"
    assert out64[i].dtype == np.float64 and out32[i].dtype == np.float32, msg
    np.testing.assert_allclose(out64[i], want64[i], **TOL[np.float64], err_msg=msg)
    np.testing.assert_allclose(out32[i], want32[i], **TOL[np.float32], err_msg=msg)
    np.testing.assert_allclose(grads[i], wantg[i], **TOL[np.float64], err_msg="grad " + msg)


def _spatial_arg(rng: np.random.Generator, values: list[int], nd: int) -> object:
  """torch's int-or-tuple argument: an int when all equal (sometimes), else a tuple."""
  if len(set(values)) == 1 and rng.random() < 0.5:
    return values[0]
  return tuple(values)


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_avg_pool_matches_torch(nd):
  """SWEEP random configurations per rank (200 with JAXOPS_TORCH_SWEEP=200): kernel, stride
  (incl. None), padding up to half the kernel, ceil_mode, count_include_pad, divisor_override, unbatched inputs, 1-pixel axes."""
  rng = np.random.default_rng(100 + nd)
  name = f"avg_pool{nd}d"
  cases = []
  while len(cases) < SWEEP:
    k = [int(v) for v in rng.integers(1, 5, nd)]
    s = [int(v) for v in rng.integers(1, 4, nd)]
    p = [int(rng.integers(0, kv // 2 + 1)) for kv in k]
    # torch's 3-D pools need each unpadded axis at least the kernel; 1-D/2-D only the padded.
    spatial = [int(rng.integers(kv if nd == 3 else max(1, kv - 2 * pv), 9 if nd < 3 else 7))
               for kv, pv in zip(k, p)]
    batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
    shape = batch + (int(rng.integers(1, 3)),) + tuple(spatial)
    kw = dict(kernel_size=_spatial_arg(rng, k, nd), padding=_spatial_arg(rng, p, nd),
              ceil_mode=bool(rng.random() < 0.5), count_include_pad=bool(rng.random() < 0.5))
    if rng.random() < 0.8:
      kw["stride"] = _spatial_arg(rng, s, nd)
    if nd > 1 and rng.random() < 0.25:
      kw["divisor_override"] = int(rng.integers(1, 7))
    # Positional parameters as torch orders them, for some configurations.
    args: tuple = ()
    if rng.random() < 0.3:
      args = (kw.pop("kernel_size"),)
    cases.append((rng.standard_normal(shape), args, kw))
  _check_all(name, cases, rng)


def _adaptive_case(rng: np.random.Generator, nd: int) -> tuple[tuple[int, ...], object]:
  spatial = tuple(int(v) for v in rng.integers(1, 10 if nd < 3 else 7, nd))
  batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
  shape = batch + (int(rng.integers(1, 3)),) + spatial
  out = [int(v) for v in rng.integers(1, 10 if nd < 3 else 7, nd)]
  if nd > 1 and rng.random() < 0.2:
    out[int(rng.integers(0, nd))] = None
  size = out[0] if (len(set(out)) == 1 and out[0] is not None and rng.random() < 0.5) else (
      tuple(out))
  return shape, size


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_avg_pool_plans_match_torch(nd):
  """200 random configurations per rank (divisible and uneven windows, outputs larger than the
  input, 1-pixel axes, None entries, unbatched inputs): the linear map of jaxops' static
  summing tables and window sizes equals torch's forward map (one-hot inputs) and backward map
  (one-hot cotangents), float64 and float32. No XLA compile; the kernel runs end to end below."""
  from jaxops import torch as module
  rng = np.random.default_rng(200 + nd)
  name = f"adaptive_avg_pool{nd}d"
  for _ in range(200):
    shape, size = _adaptive_case(rng, nd)
    spatial = shape[-nd:]
    p = int(np.prod(spatial))
    cfg = module._adaptive_config(name, nd, shape, size)
    dense = np.ones((1, 1))
    for (n_in, n_out), (idx, w) in zip(cfg.axes, module._adaptive_tables(cfg)):
      m = np.zeros((n_out, n_in))
      np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), idx.ravel()), w.ravel())
      dense = np.kron(dense, m)
    # the summing tables' sums, each divided by its window's size
    div = np.broadcast_to(np.asarray(module._adaptive_divisor(cfg, 0, np.float64)),
                          tuple(o for _, o in cfg.axes))
    dense = dense / div.reshape(-1, 1)
    for dt in (np.float64, np.float32):
      eye = torch.tensor(np.eye(p, dtype=dt).reshape((p, 1) + spatial))
      y = getattr(TF, name)(eye, size)
      q = int(np.prod(y.shape[2:]))
      fwd = y.reshape(p, q).numpy().T
      xt = torch.zeros((q, 1) + spatial, dtype=eye.dtype, requires_grad=True)
      y = getattr(TF, name)(xt, size)
      y.backward(torch.tensor(np.eye(q, dtype=dt).reshape(y.shape)))
      msg = f"{name} {shape} {size} {dt.__name__}"
      np.testing.assert_allclose(dense.astype(dt), fwd, **TOL[dt], err_msg=msg)
      np.testing.assert_allclose(dense.astype(dt), xt.grad.reshape(q, p).numpy(), **TOL[dt],
                                 err_msg="backward " + msg)


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_avg_pool_matches_torch_end_to_end(nd):
  """Random configurations through the public function under jit: values and jax.grad."""
  rng = np.random.default_rng(300 + nd)
  cases = []
  for _ in range(END_TO_END):
    shape, size = _adaptive_case(rng, nd)
    cases.append((rng.standard_normal(shape), (size,), {}))
  _check_all(f"adaptive_avg_pool{nd}d", cases, rng)


def test_adaptive_avg_pool2d_benchmark_shape_matches_torch():
  x = np.random.default_rng(5).standard_normal((8, 512, 14, 14)).astype(np.float32)
  want = TF.adaptive_avg_pool2d(torch.tensor(x), 7).numpy()
  np.testing.assert_allclose(F.adaptive_avg_pool2d(x, 7), want, **TOL[np.float32])


@pytest.mark.parametrize("nd, shape", [(1, (2, 3, 17)), (2, (2, 3, 9, 11)), (2, (3, 9, 11)),
                                       (2, (2, 3, 64, 64)), (3, (2, 2, 4, 5, 6)),
                                       (3, (2, 4, 5, 6))])
def test_adaptive_avg_pool_to_size_one_matches_torch(nd, shape):
  """Output size 1 on every axis (torch's mean; jaxops takes GlobalAveragePool's row sums):
  values in float64, float32 and the half types, and float64 gradients, batched or not."""
  rng = np.random.default_rng(23 + nd)
  x = rng.standard_normal(shape)
  f, tf = getattr(F, f"adaptive_avg_pool{nd}d"), getattr(TF, f"adaptive_avg_pool{nd}d")
  for dt, tol in [(np.float64, TOL[np.float64]), (np.float32, TOL[np.float32])]:
    np.testing.assert_allclose(f(x.astype(dt), 1), tf(torch.tensor(x.astype(dt)), 1).numpy(),
                               **tol)
  for jdt, tdt in [(jnp.bfloat16, torch.bfloat16), (jnp.float16, torch.float16)]:
    got = f(jnp.asarray(x, jdt), 1)
    want = tf(torch.tensor(x).to(tdt), 1).float().numpy()
    assert got.dtype == jdt
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=1e-2, atol=1e-3)
  xt = torch.tensor(x, requires_grad=True)
  ct = rng.standard_normal(shape[:len(shape) - nd] + (1,) * nd)
  tf(xt, 1).backward(torch.tensor(ct))
  _, vjp = jax.vjp(lambda v: f(v, 1), x)
  np.testing.assert_allclose(vjp(ct)[0], xt.grad.numpy(), **TOL[np.float64])


@pytest.mark.parametrize("nd, shape, size", [(1, (2, 3, 301), 4), (2, (2, 3, 150, 9), (2, 4)),
                                             (2, (2, 2, 70, 130), (1, 3)),
                                             (3, (1, 2, 5, 140, 6), (2, 1, 4)),
                                             (1, (1, 2, 6501), 65)])
def test_uneven_adaptive_avg_pool_long_windows_match_torch(nd, shape, size):
  """Windows longer than the resize kernel unrolls (summed slice by slice, alone or with a
  short axis' taps; past 64 windows, the kernel's loop): values with +inf, -inf and NaN in
  some windows, float64 gradients, and float32 values, against torch."""
  rng = np.random.default_rng(31 + nd)
  f, tf = getattr(F, f"adaptive_avg_pool{nd}d"), getattr(TF, f"adaptive_avg_pool{nd}d")
  x = rng.standard_normal(shape)
  xs = x.copy().reshape(-1)
  xs[[3, 70, 71, 400, 401, 402]] = [np.inf, -np.inf, np.inf, np.nan, np.inf, -np.inf]
  xs = xs.reshape(shape)
  for a in (x, xs):
    np.testing.assert_allclose(f(a, size), tf(torch.tensor(a), size).numpy(), **TOL[np.float64])
    a32 = a.astype(np.float32)
    np.testing.assert_allclose(f(a32, size), tf(torch.tensor(a32), size).numpy(),
                               **TOL[np.float32])
  xt = torch.tensor(x, requires_grad=True)
  y = tf(xt, size)
  ct = rng.standard_normal(tuple(y.shape))
  y.backward(torch.tensor(ct))
  _, vjp = jax.vjp(lambda v: f(v, size), x)
  np.testing.assert_allclose(vjp(ct)[0], xt.grad.numpy(), **TOL[np.float64])
  got = jax.jit(jax.vmap(lambda v: f(v, size)))(xs[None])[0]
  np.testing.assert_allclose(got, tf(torch.tensor(xs), size).numpy(), **TOL[np.float64])


def test_area_is_adaptive_avg_pool():
  x = np.random.default_rng(6).standard_normal((2, 3, 7, 5))
  want = TF.interpolate(torch.tensor(x), size=(3, 4), mode="area").numpy()
  np.testing.assert_allclose(F.interpolate(x, size=(3, 4), mode="area"), want, rtol=1e-12)
  np.testing.assert_allclose(F.adaptive_avg_pool2d(x, (3, 4)), want, rtol=1e-12)


def test_vmap_and_jit():
  x = np.random.default_rng(8).standard_normal((3, 2, 4, 7, 6))
  want = np.stack([TF.avg_pool2d(torch.tensor(v), 3, 2, 1, True, False, None).numpy()
                   for v in x])
  f = jax.jit(jax.vmap(lambda v: F.avg_pool2d(v, 3, 2, 1, True, False, None)))
  np.testing.assert_allclose(f(x), want, rtol=1e-12, atol=1e-12)
  want = np.stack([TF.adaptive_avg_pool2d(torch.tensor(v), (3, 4)).numpy() for v in x])
  f = jax.jit(jax.vmap(lambda v: F.adaptive_avg_pool2d(v, (3, 4))))
  np.testing.assert_allclose(f(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, args, kw, match", [
    ("avg_pool2d", (0,), {}, "kernel_size"),
    ("avg_pool2d", (2,), dict(stride=0), "stride"),
    ("avg_pool2d", (2,), dict(padding=2), "padding"),
    ("avg_pool2d", (2,), dict(divisor_override=0), "divisor_override"),
    ("avg_pool2d", ((2, 2, 2),), {}, "kernel_size"),
    ("avg_pool2d", (5,), {}, "too small"),
    ("avg_pool1d", (2,), {}, "Expected 2D or 3D"),
    ("adaptive_avg_pool2d", ((2, 2, 2),), {}, "output_size"),
    ("avg_pool3d", (2,), {}, "smaller than kernel size"),
    ("adaptive_avg_pool3d", (2,), {}, "Expected 4D or 5D"),
    # torch's lp_pool multiplies by kernel_size: an int only in 1-D, no one-element list in 2-D
    ("lp_pool1d", (2, [2]), {}, "kernel_size.*must be an int"),
    ("lp_pool1d", (2, (2,)), {}, "kernel_size.*must be an int"),
    ("lp_pool2d", (2, [2]), {}, "kernel_size.*tuple of 2 ints"),
    ("lp_pool3d", (2, (1, 2)), {}, "kernel_size.*tuple of 3 ints"),
    # floats, even integral ones, are torch's TypeError
    ("avg_pool2d", (2.0,), {}, "kernel_size.*not floats"),
    ("avg_pool2d", (2,), dict(stride=(1, 1.0)), "stride.*not floats"),
    ("avg_pool2d", (2,), dict(padding=1.0), "padding.*not floats"),
    ("lp_pool2d", (2, (2.0, 2)), {}, "kernel_size.*not floats"),
    # an output_size of None (torch: "object of type 'NoneType' has no len()")
    ("adaptive_avg_pool2d", (None,), {}, "output_size.*None only as an entry"),
    ("adaptive_max_pool2d", (None,), {}, "output_size.*None only as an entry"),
])
def test_impossible_arguments_raise_where_torch_raises(name, args, kw, match):
  # avg_pool1d and adaptive_avg_pool3d get an input of the wrong rank
  x = np.zeros({"adaptive_avg_pool3d": (3, 3, 3), "avg_pool3d": (1, 1, 1, 3, 3),
                "lp_pool3d": (1, 1, 1, 3, 3), "lp_pool1d": (1, 1, 3)}.get(name, (1, 1, 3, 3)))
  with pytest.raises((RuntimeError, ValueError, TypeError)):
    getattr(TF, name)(torch.tensor(x), *args, **kw)
  with pytest.raises((ValueError, TypeError), match=f"jaxops.torch.{name}: .*{match}"):
    getattr(F, name)(x, *args, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_lp_pool_matches_torch(nd):
  """Random configurations per rank (norm_type 1, 2, 3 and fractional; ceil_mode; unbatched):
  float64/float32 values and float64 gradients against torch. Inputs are positive, where every
  norm_type has a real value (torch and jaxops both give NaN for fractional powers of negative
  window sums)."""
  rng = np.random.default_rng(500 + nd)
  name = f"lp_pool{nd}d"
  cases = []
  while len(cases) < max(SWEEP // 4, 8):
    k = [int(v) for v in rng.integers(1, 4, nd)]
    spatial = tuple(int(rng.integers(kv, 7)) for kv in k)
    batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
    shape = batch + (int(rng.integers(1, 3)),) + spatial
    p = float(rng.choice([1.0, 2.0, 3.0, 1.5]))
    # torch's lp_pool1d multiplies by kernel_size itself, so it takes an int only.
    args = (p, k[0] if nd == 1 else _spatial_arg(rng, k, nd))
    kw = dict(ceil_mode=bool(rng.random() < 0.5))
    if rng.random() < 0.7:
      kw["stride"] = _spatial_arg(rng, [int(v) for v in rng.integers(1, 4, nd)], nd)
    cases.append((rng.uniform(0.1, 2.0, shape), args, kw))
  _check_all(name, cases, rng)


@pytest.mark.parametrize("name, args, kw", [
    ("avg_pool2d", ((2, 2), (2, 3)), dict(count_include_pad=True)),
    ("avg_pool2d", ((2, 2), (2, 3)), dict(count_include_pad=False)),
    ("avg_pool2d", ((2, 3), (2, 3), (0, 1)), dict(divisor_override=3)),
    ("avg_pool1d", (4, 3, 2), dict(count_include_pad=True)),
    ("lp_pool2d", (3.0, (2, 2), (2, 3)), {}),
    ("lp_pool2d", (2.0, 2), {}),
])
def test_ceil_mode_window_past_the_padded_input_matches_torch(name, args, kw):
  """torch's ceil_mode keeps a last window that reaches past the padded input (kernel 2 on a
  1-row image): its average divides by what torch counts, the input and its padding, and so
  does jaxops.torch (through jaxops.average_pool, which raised there before; found by a random
  sweep beyond the ones above)."""
  shape = (2, 2, 1, 7) if name.endswith("2d") else (2, 2, 3)
  x = np.random.default_rng(7).uniform(0.1, 2.0, shape)
  fn, tfn = getattr(F, name), getattr(TF, name)
  xt = torch.tensor(x, requires_grad=True)
  ty = tfn(xt, *args, ceil_mode=True, **kw)
  w = np.cos(np.arange(ty.numel())).reshape(tuple(ty.shape))
  (ty * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(np.asarray(fn(x, *args, ceil_mode=True, **kw)), ty.detach().numpy(),
                             rtol=1e-12, atol=1e-12)
  g = jax.grad(lambda v: jnp.sum(fn(v, *args, ceil_mode=True, **kw) * w))(x)
  np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_uneven_adaptive_avg_pool_backward_with_non_finite_cotangents_matches_torch(nd):
  """The uneven windows' backward multiplies the cotangent by dense pooling matrices when it is
  finite and takes the transposed taps otherwise, so that an inf or NaN cotangent reaches only
  its own window's inputs (0 * inf would reach every input of its rows and columns)."""
  rng = np.random.default_rng(40 + nd)
  shape = (2, 3) + (11, 7, 5)[:nd]
  out = (4, 3, 2)[:nd]
  x = rng.standard_normal(shape)
  f = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[nd]
  tf = {1: TF.adaptive_avg_pool1d, 2: TF.adaptive_avg_pool2d, 3: TF.adaptive_avg_pool3d}[nd]
  for poison in (None, np.inf, -np.inf, np.nan):
    ct = rng.standard_normal((2, 3) + out)
    if poison is not None:
      ct.reshape(-1)[[1, 7]] = poison
    _, vjp = jax.vjp(jax.jit(lambda a: f(a, out)), x)
    tx = torch.tensor(x, requires_grad=True)
    tf(tx, out).backward(torch.tensor(ct))
    want = tx.grad.numpy()
    got = np.asarray(vjp(ct)[0])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_uneven_adaptive_avg_pool_and_area_with_infinite_inputs_match_torch(nd):
  """A window holding +inf averages to +inf, one holding both infinities or a NaN to NaN, and
  no other window changes, as torch's window sums give it (the taps' zero-weight padding of the
  short windows would make 0 * inf = NaN)."""
  rng = np.random.default_rng(60 + nd)
  shape = (2, 3) + (7, 6, 5)[:nd]
  out = (4, 4, 3)[:nd]
  x = rng.standard_normal(shape)
  flat = x.reshape(-1)
  flat[rng.choice(flat.size, 12, replace=False)] = [np.inf] * 6 + [-np.inf] * 4 + [np.nan] * 2
  flat[0] = np.inf  # the first element of its window, where the padding taps read
  f = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[nd]
  tf = {1: TF.adaptive_avg_pool1d, 2: TF.adaptive_avg_pool2d, 3: TF.adaptive_avg_pool3d}[nd]
  want = tf(torch.tensor(x), out).numpy()
  assert np.isposinf(want).any() and np.isneginf(want).any()
  np.testing.assert_allclose(np.asarray(f(x, out)), want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(np.asarray(jax.jit(lambda v: f(v, out))(x)), want, rtol=1e-12,
                             atol=1e-12)
  area = TF.interpolate(torch.tensor(x), size=out, mode="area").numpy()
  np.testing.assert_allclose(np.asarray(F.interpolate(x, size=out, mode="area")), area,
                             rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_uneven_adaptive_avg_pool_forward_mode_and_second_order_match_torch(nd):
  """Uneven windows are a linear primitive with its own transpose, not a custom_vjp (which
  refuses jax.jvp): the tangent equals torch's forward-mode jvp, jacfwd equals jacrev, a
  Hessian of a cubic loss equals torch's, and vmap batches the jvp."""
  rng = np.random.default_rng(80 + nd)
  shape = (2, 3) + (10, 7, 5)[:nd]
  out = (3, 4, 2)[:nd]
  x, t = rng.standard_normal(shape), rng.standard_normal(shape)
  f = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[nd]
  tf = {1: TF.adaptive_avg_pool1d, 2: TF.adaptive_avg_pool2d, 3: TF.adaptive_avg_pool3d}[nd]
  _, got = jax.jvp(lambda a: f(a, out), (x,), (t,))
  _, want = torch.autograd.functional.jvp(lambda a: tf(a, out), torch.tensor(x), torch.tensor(t))
  np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-12, atol=1e-12)
  _, got_b = jax.vmap(lambda a, b: jax.jvp(lambda v: f(v, out), (a,), (b,)))(x, t)
  np.testing.assert_allclose(np.asarray(got_b), want.numpy(), rtol=1e-12, atol=1e-12)
  small = x[:1, :1]

  def loss(a):
    return jnp.sum(f(a, out) ** 3)

  np.testing.assert_allclose(np.asarray(jax.jacfwd(loss)(small)), np.asarray(jax.grad(loss)(small)),
                             rtol=1e-12, atol=1e-12)
  hess = torch.autograd.functional.hessian(lambda a: torch.sum(tf(a, out) ** 3),
                                           torch.tensor(small)).numpy()
  np.testing.assert_allclose(np.asarray(jax.hessian(loss)(small)), hess, rtol=1e-12, atol=1e-12)


def test_area_on_an_empty_axis_raises_as_torch():
  x = np.zeros((1, 2, 0, 4))
  with pytest.raises(RuntimeError, match="non-zero size for non-batch dimensions"):
    TF.interpolate(torch.tensor(x), size=(3, 3), mode="area")
  with pytest.raises(ValueError, match="adaptive_avg_pool2d: .*non-zero size for non-batch"):
    F.interpolate(x, size=(3, 3), mode="area")


def _shape_or_refusal(fn, also=()):
  try:
    y = fn()
  except (RuntimeError, ValueError, *also):  # torch's RuntimeError is jaxops' ValueError
    return "refused"
  return tuple((y[0] if isinstance(y, tuple) else y).shape)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_avg_to_size_one_takes_any_rank_as_torch(nd):
  """torch 2.13's adaptive_avg_pool2d/3d to size 1 on every axis is a mean over the last nd
  axes of an input of any rank (from nd axes with an int output_size, nd + 1 with a sequence);
  other sizes, and adaptive_avg_pool1d, ask nd + 1 or nd + 2 axes. jaxops refused the other
  ranks (found by a fuzzer). Shapes or refusals, and the values, against torch."""
  rng = np.random.default_rng(3)
  for rank in range(1, 8):
    for size in (1, (1,) * nd, (None,) * nd, (1,) * (nd - 1) + (None,), 2):
      shape = (2, 3, 1, 4, 5, 3, 2)[:rank]
      x = rng.standard_normal(shape)
      name = f"adaptive_avg_pool{nd}d"
      want = _shape_or_refusal(lambda: getattr(TF, name)(torch.tensor(x), size),
                               (IndexError, TypeError))
      got = _shape_or_refusal(lambda: getattr(F, name)(x, size), (TypeError,))
      assert got == want, (rank, size, got, want)
      if want != "refused":
        # atol: a mean of standard normals near 0 (cancellation) differs from torch's in its
        # last bits relative to itself (2e-17 at 1.1e-6 on another seed), not to the inputs
        np.testing.assert_allclose(np.asarray(getattr(F, name)(x, size)),
                                   getattr(TF, name)(torch.tensor(x), size).numpy(), rtol=1e-12,
                                   atol=1e-15)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_empty_axes_accepted_and_refused_as_torch(nd):
  """Which empty axes torch 2.13 takes differs by function: adaptive_avg_pool1d/2d (and area)
  take empty channels, adaptive_avg_pool3d and adaptive_max_pool only an empty batch (or
  unbatched, empty channels), interpolate's other modes only an empty batch. jaxops refused
  empty channels everywhere and took them in interpolate's other modes. Values of empty
  results are empty; the gradient of an empty result is zeros of the input's shape."""
  shapes = [(2, 0) + (6,) * nd, (0,) + (6,) * nd, (0, 3) + (6,) * nd, (0, 0) + (6,) * nd,
            (2, 3, 0) + (6,) * (nd - 1), (3, 0) + (6,) * (nd - 1)]
  calls = [(f"adaptive_avg_pool{nd}d", {}), (f"adaptive_max_pool{nd}d", {}),
           (f"adaptive_max_pool{nd}d", {"return_indices": True})]
  for shape in shapes:
    for name, kw in calls:
      for size in (2, 1, (1,) * nd):  # size 1 everywhere: torch's mean takes any empty axis
        want = _shape_or_refusal(lambda: getattr(TF, name)(torch.zeros(shape), size, **kw))
        got = _shape_or_refusal(lambda: getattr(F, name)(np.zeros(shape), size, **kw))
        assert got == want, (name, shape, size, got, want)
        if want != "refused" and "avg" in name:
          np.testing.assert_array_equal(  # NaN where an empty axis is averaged
              np.asarray(getattr(F, name)(np.zeros(shape), size)),
              getattr(TF, name)(torch.zeros(shape), size).numpy())
          g = jax.grad(lambda v: jnp.sum(getattr(F, name)(v, size)))(jnp.zeros(shape))
          np.testing.assert_array_equal(g, np.zeros(shape))
    if len(shape) != nd + 2:
      continue
    modes = ["nearest", "nearest-exact", "area", {1: "linear", 2: "bilinear", 3: "trilinear"}[nd]]
    for mode in modes + (["bicubic"] if nd == 2 else []):
      size = (3,) * nd
      want = _shape_or_refusal(lambda: TF.interpolate(torch.zeros(shape), size, mode=mode))
      got = _shape_or_refusal(lambda: F.interpolate(np.zeros(shape), size, mode=mode))
      assert got == want, (mode, shape, got, want)
  assert _shape_or_refusal(lambda: F.interpolate(np.zeros((2, 0, 6, 6)), 3)) == "refused"
  assert _shape_or_refusal(lambda: F.adaptive_avg_pool2d(np.zeros((2, 0, 6, 6)), 2)) == (
      2, 0, 2, 2)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("norm_type", [np.inf, -np.inf])
def test_lp_pool_infinite_norm_type_matches_torch(nd, norm_type):
  """torch 2.13's lp_pool with norm_type +-inf: the max_pool of |x| (the largest |x| of each
  window), or minus the max_pool of -|x| (the smallest)."""
  rng = np.random.default_rng(70 + nd)
  x = rng.standard_normal((2, 3) + (7, 6, 5)[:nd])
  x[0, 1] = 0.0  # whole windows of zeros: torch's |x| has the derivative sign(x), 0 there
  x[1, 0, :2] = -0.0
  fn, tfn = getattr(F, f"lp_pool{nd}d"), getattr(TF, f"lp_pool{nd}d")
  cases = []
  for stride, ceil_mode in ((None, False), (2, True)):
    xt = torch.tensor(x, requires_grad=True)
    ty = tfn(xt, norm_type, 3, stride, ceil_mode)
    w = np.cos(np.arange(ty.numel())).reshape(tuple(ty.shape))
    (ty * torch.tensor(w)).sum().backward()
    cases.append((stride, ceil_mode, w, ty.detach().numpy(), xt.grad.numpy()))
  # NaN: torch's x ** nan, NaN everywhere (values and the gradient), not an error
  xt = torch.tensor(x, requires_grad=True)
  ty = tfn(xt, np.nan, 3, 2, True)
  ty.sum().backward()

  def run(v):  # one program (eager, every step of the gradient would compile on its own)
    return ([(fn(v, norm_type, 3, s, c), jax.grad(
        lambda u, s=s, c=c, w=w: jnp.sum(fn(u, norm_type, 3, s, c) * w))(v))
             for s, c, w, _, _ in cases],
            fn(v, np.nan, 3, 2, True), jax.grad(lambda u: jnp.sum(fn(u, np.nan, 3, 2, True)))(v))

  outs, y_nan, g_nan = jax.jit(run)(x)
  for (_, _, _, want, want_grad), (y, g) in zip(cases, outs):
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_allclose(np.asarray(g), want_grad, rtol=1e-12, atol=1e-12)
  np.testing.assert_array_equal(np.asarray(y_nan), ty.detach().numpy())
  np.testing.assert_array_equal(np.asarray(g_nan), xt.grad.numpy())
  if nd == 1:  # torch's lp_pool1d is then its max_pool1d, which takes a one-element kernel list
    np.testing.assert_array_equal(np.asarray(fn(x, norm_type, [3])),
                                  tfn(torch.tensor(x), norm_type, [3]).numpy())


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_lp_pool_gradient_of_a_nan_window_matches_torch(nd):
  """A fractional norm_type over negative inputs makes x ** p NaN: the window's output is NaN,
  and torch's relu passes the NaN cotangent back to every element of the window (its derivative
  is 0 only where its input is <= 0); jax.nn.relu's stopped it, giving the window's other
  elements 0 (found by a random sweep)."""
  rng = np.random.default_rng(90 + nd)
  x = np.abs(rng.standard_normal((2, 2) + (6, 5, 4)[:nd])) + 0.1
  x[0, 0].reshape(-1)[0] = -1.0
  x[1, 1].reshape(-1)[-1] = -0.5
  fn, tfn = getattr(F, f"lp_pool{nd}d"), getattr(TF, f"lp_pool{nd}d")
  for p in (1.5, 0.7, -0.5):
    xt = torch.tensor(x, requires_grad=True)
    ty = tfn(xt, p, 2, None, True)
    w = np.cos(np.arange(ty.numel())).reshape(tuple(ty.shape))
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(np.asarray(fn(x, p, 2, None, True)), ty.detach().numpy(),
                               rtol=1e-12)
    g = jax.grad(lambda v: jnp.sum(fn(v, p, 2, None, True) * w))(x)
    assert np.isnan(xt.grad.numpy()).sum() >= 2
    np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_half_precision_lp_pool_overflow_deviation_is_pinned():
  """torch's float16 lp_pool overflows in avg * prod(kernel) (4 * 200 ** 2 / 4 * 4 = 160000, past
  65504) and gives inf; jaxops.torch computes in float32 and rounds once: 400, the float64
  result. docs/DEVIATIONS.md, jaxops.torch 11."""
  x = np.full((1, 1, 2, 2), 200.0)
  assert torch.isinf(TF.lp_pool2d(torch.tensor(x).half(), 2, 2)).all()
  assert TF.lp_pool2d(torch.tensor(x), 2, 2).item() == 400.0
  y = F.lp_pool2d(jnp.asarray(x, jnp.float16), 2, 2)
  assert y.dtype == jnp.float16 and float(y.ravel()[0]) == 400.0


def test_interpolate_infinite_input_deviation_is_pinned():
  """docs/DEVIATIONS.md, jaxops.torch 9: an inf (or NaN) among zeros reaches only the outputs
  that weigh it in jaxops.torch; torch's zero-weight taps (and its pass over the kept height)
  give NaN."""
  x = np.zeros((1, 1, 1, 7))
  x[..., 3] = np.inf
  inf, nan = np.inf, np.nan
  for kw, ours, theirs in [
      (dict(mode="bilinear"), [0, inf, inf, 0], [0, nan, nan, 0]),
      (dict(mode="bilinear", align_corners=True), [0, 0, 0, 0], [0, nan, 0, 0]),
      (dict(mode="bicubic"), [0, inf, inf, 0], [0, nan, nan, 0]),
      (dict(mode="bicubic", antialias=True), [-inf, inf, inf, nan], [-inf, inf, inf, -inf]),
      (dict(mode="bilinear", antialias=True), [0, inf, inf, 0], [0, inf, inf, 0])]:
    np.testing.assert_array_equal(
        TF.interpolate(torch.tensor(x), size=(1, 4), **kw).numpy().ravel(), theirs)
    np.testing.assert_array_equal(np.asarray(F.interpolate(x, size=(1, 4), **kw)).ravel(), ours)
  # a NaN as well (found by a sweep): it reaches the outputs that weigh it, in both
  x[..., 3] = nan
  for kw, ours, theirs in [
      (dict(mode="bilinear"), [0, nan, nan, 0], [0, nan, nan, 0]),
      (dict(mode="bilinear", align_corners=True), [0, 0, 0, 0], [0, nan, 0, 0]),
      (dict(mode="bicubic"), [0, nan, nan, 0], [0, nan, nan, 0])]:
    np.testing.assert_array_equal(
        TF.interpolate(torch.tensor(x), size=(1, 4), **kw).numpy().ravel(), theirs)
    np.testing.assert_array_equal(np.asarray(F.interpolate(x, size=(1, 4), **kw)).ravel(), ours)
  row = np.array([[[1.0, nan, 3.0]]])
  kw = dict(size=2, mode="linear", align_corners=True)
  np.testing.assert_array_equal(TF.interpolate(torch.tensor(row), **kw).numpy().ravel(), [nan, 3])
  np.testing.assert_array_equal(np.asarray(F.interpolate(row, **kw)).ravel(), [1, 3])


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_types_compute_in_float32_and_round_once(dtype):
  """interpolate, uneven adaptive average pooling and lp_pool on float16/bfloat16 inputs give
  torch's float64 result on the same inputs rounded once to the half type (but where float32's
  own rounding crosses a half-type rounding boundary: one unit, rarely; or where a small
  result cancels larger terms: a few float32 units of the input's size), and jit equals eager.
  Rounding after each separable pass was up to 10 units off on a fifth of the outputs."""
  rng = np.random.default_rng(90)
  x = jnp.asarray(rng.standard_normal((2, 3, 9, 11)) * 3).astype(dtype)
  x3 = jnp.asarray(rng.standard_normal((1, 2, 5, 6, 7)) * 3).astype(dtype)
  cases = [
      (x, lambda m: m.interpolate, dict(size=(13, 7), mode="bilinear")),
      (x, lambda m: m.interpolate, dict(size=(13, 7), mode="bilinear", align_corners=True)),
      (x, lambda m: m.interpolate, dict(size=(13, 7), mode="bicubic")),
      (x, lambda m: m.interpolate, dict(size=(4, 5), mode="bilinear", antialias=True)),
      (x, lambda m: m.interpolate, dict(size=(4, 5), mode="area")),
      (x3, lambda m: m.interpolate, dict(size=(7, 8, 9), mode="trilinear")),
      (x, lambda m: m.adaptive_avg_pool2d, dict(output_size=(4, 5))),
      (x3, lambda m: m.adaptive_avg_pool3d, dict(output_size=(3, 4, 5))),
      (abs(x), lambda m: m.lp_pool2d, dict(norm_type=2, kernel_size=3, stride=2)),
      (abs(x), lambda m: m.lp_pool2d, dict(norm_type=3, kernel_size=2)),
  ]
  for v, fn, kw in cases:
    got = fn(F)(v, **kw)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: fn(F)(a, **kw))(v)),
                                  np.asarray(got))
    exact = fn(TF)(torch.tensor(np.asarray(v.astype(jnp.float32), np.float64)), **kw).numpy()
    want = np.asarray(exact.astype(dtype), np.float64)
    g = np.asarray(got, np.float64)
    info = jnp.finfo(dtype)
    big = np.maximum(np.maximum(np.abs(want), np.abs(g)), float(info.smallest_normal))
    unit = 2.0 ** (np.floor(np.log2(big)) - info.nmant)  # one unit of the half type there
    # and float32's own rounding, which decides the half type's only near a rounding boundary
    # or where a small result cancels larger terms (a few float32 units of the input's size)
    f32 = 16 * 2.0 ** -24 * float(np.max(np.abs(np.asarray(v, np.float64))))
    assert np.all(np.abs(g - want) <= unit + f32), kw
    # against torch's float32 result rounded once (where float32 decides the rounding, as
    # often as not torch's float32 disagrees with its float64 there too)
    t32 = fn(TF)(torch.tensor(np.asarray(v.astype(jnp.float32))), **kw).numpy()
    assert np.mean(g != np.asarray(jnp.asarray(t32).astype(dtype), np.float64)) < 0.03, kw


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_uneven_adaptive_avg_half_types_round_as_torch(dtype):
  """Uneven adaptive average pooling sums each window and divides by its size once, as torch:
  on float16/bfloat16 inputs its 2-D result is torch's native half-type result exactly, ties
  included (a mean halfway between two half-type values: per-axis weights of 1 / size put the
  float32 value one unit off it, and it rounded the other way on 0.3-0.8% of these outputs)."""
  rng = np.random.default_rng(61)
  tdt = {jnp.float16: torch.float16, jnp.bfloat16: torch.bfloat16}[dtype]
  for shape, size in (((4, 8, 9, 11), (4, 5)), ((4, 8, 10, 7), (3, 3)), ((2, 4, 23, 6), (5, 4))):
    x = jnp.asarray(rng.standard_normal(shape) * 3).astype(dtype)
    want = TF.adaptive_avg_pool2d(torch.tensor(np.asarray(x.astype(jnp.float32))).to(tdt), size)
    got = F.adaptive_avg_pool2d(x, size)
    np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)), want.float().numpy())
