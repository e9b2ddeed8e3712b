"""jaxops.torch's max pooling against torch 2.13 CPU: values, indices exactly, gradients.

Oracle: torch.nn.functional.max_pool{1,2,3}d (return_indices=True) and torch.autograd.
Random normal data has no ties and no NaN; ``test_nan_and_ties_match_torch`` covers both
(torch lets any NaN in a window win, where jaxops.max_pool keeps ONNX's rule).
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

# Configurations per compiled sweep: each costs an XLA compile, so the default keeps the file
# within the suite's time budget; JAXOPS_TORCH_SWEEP=200 runs the full sweep.
SWEEP = int(os.environ.get("JAXOPS_TORCH_SWEEP", "20"))
TOL = {np.float32: dict(rtol=1.3e-6, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _arg(rng: np.random.Generator, values: list[int]) -> object:
  if len(set(values)) == 1 and rng.random() < 0.5:
    return values[0]
  return tuple(values)


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_matches_torch(nd):
  """SWEEP random configurations per rank (200 with JAXOPS_TORCH_SWEEP=200), compiled as one
  program per check: float64 and float32 values, indices exactly, float64 gradients."""
  rng = np.random.default_rng(400 + nd)
  name = f"max_pool{nd}d"
  cases = []
  while len(cases) < SWEEP:
    k = [int(v) for v in rng.integers(1, 4, nd)]
    d = [int(v) for v in rng.integers(1, 3, nd)] if rng.random() < 0.4 else [1] * nd
    s = [int(v) for v in rng.integers(1, 4, nd)]
    p = [int(rng.integers(0, min(kv - 1, (dv * (kv - 1) + 1) // 2) + 1))
         for kv, dv in zip(k, d)]
    ext = [dv * (kv - 1) + 1 for kv, dv in zip(k, d)]
    spatial = [int(rng.integers(max(1, e - 2 * pv), 8 if nd < 3 else 6))
               for e, pv in zip(ext, p)]
    batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
    shape = batch + (int(rng.integers(1, 3)),) + tuple(spatial)
    kw = dict(kernel_size=_arg(rng, k), padding=_arg(rng, p), dilation=_arg(rng, d),
              ceil_mode=bool(rng.random() < 0.5), return_indices=True)
    if rng.random() < 0.8:
      kw["stride"] = _arg(rng, s)
    try:
      y, _ = getattr(TF, name)(torch.zeros(shape), **kw)
    except RuntimeError:
      continue  # an impossible configuration (checked in the error test)
    if torch.isinf(y).any():
      continue  # a window of padding only: docs/DEVIATIONS.md, jaxops.torch 4
    cases.append((rng.standard_normal(shape), kw))
  tf, jf = getattr(TF, name), getattr(F, name)
  want = []
  for x, kw in cases:
    y32, i32 = tf(torch.tensor(x.astype(np.float32)), **kw)
    xt = torch.tensor(x, requires_grad=True)
    y, i = tf(xt, **kw)
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    want.append((y.detach().numpy(), i.numpy(), y32.numpy(), i32.numpy(), xt.grad.numpy(), g))

  def fwd(vs):
    return [jf(v, **kw) for v, (_, kw) in zip(vs, cases)]

  def loss(vs):
    return sum(jnp.sum(jf(v, **kw)[0] * w[5]) for v, (_, kw), w in zip(vs, cases, want))

  out64 = jax.jit(fwd)([jnp.asarray(x) for x, _ in cases])
  out32 = jax.jit(fwd)([jnp.asarray(x.astype(np.float32)) for x, _ in cases])
  grads = jax.jit(jax.grad(loss))([jnp.asarray(x) for x, _ in cases])
  for (x, kw), (y, i, y32, i32, gx, _), o64, o32, gr in zip(cases, want, out64, out32, grads):
    msg = f"{name} {x.shape} {kw}"
    np.testing.assert_allclose(o64[0], y, **TOL[np.float64], err_msg=msg)
    np.testing.assert_array_equal(o64[1], i, err_msg=msg)
    np.testing.assert_allclose(o32[0], y32, **TOL[np.float32], err_msg=msg)
    np.testing.assert_array_equal(o32[1], i32, err_msg=msg)
    np.testing.assert_allclose(gr, gx, **TOL[np.float64], err_msg="grad " + msg)


def test_max_pool_without_indices_and_errors():
  x = np.random.default_rng(9).standard_normal((2, 3, 7, 6))
  want = TF.max_pool2d(torch.tensor(x), 3, 2, 1, 1, True).numpy()
  np.testing.assert_allclose(F.max_pool2d(x, 3, 2, 1, 1, True), want, rtol=1e-12)
  with pytest.raises(RuntimeError):
    TF.max_pool2d(torch.tensor(x), 2, padding=2)
  with pytest.raises(ValueError, match="jaxops.torch.max_pool2d: argument `padding`"):
    F.max_pool2d(x, 2, padding=2)
  for kw in (dict(kernel_size=2.0), dict(kernel_size=2, dilation=(1.0, 1))):
    with pytest.raises(TypeError):
      TF.max_pool2d(torch.tensor(x), **kw)
    with pytest.raises(TypeError, match="jaxops.torch.max_pool2d: argument .* not floats"):
      F.max_pool2d(x, **kw)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_padding_limit_is_half_the_undilated_kernel_as_torch(nd):
  # torch checks padding <= kernel_size // 2 whatever the dilation (3 // 2 = 1)
  x = np.random.default_rng(11).standard_normal((1, 2) + (9,) * nd)
  fn, tfn = getattr(F, f"max_pool{nd}d"), getattr(TF, f"max_pool{nd}d")
  with pytest.raises(RuntimeError, match="half of kernel size"):
    tfn(torch.tensor(x), 3, 1, 2, 2)
  with pytest.raises(ValueError, match=f"max_pool{nd}d: argument `padding` must be at most half"):
    fn(x, 3, 1, 2, 2)
  np.testing.assert_array_equal(np.asarray(fn(x, 3, 1, 1, 2)),
                                tfn(torch.tensor(x), 3, 1, 1, 2).numpy())


def test_window_of_padding_only_deviation_is_pinned():
  """A dilated window can cover only padding (kernel 2, dilation 2, padding 1, length 1: taps
  at -1 and 1). torch returns -inf with the out-of-range index 1; jaxops.torch raises.
  docs/DEVIATIONS.md, jaxops.torch 4."""
  y, i = TF.max_pool1d(torch.tensor([[[3.0]]]), 2, 1, 1, 2, return_indices=True)
  assert y.item() == -np.inf and i.item() == 1
  with pytest.raises(ValueError, match=r"max_pool1d: with padding \(1,\) and dilation \(2,\), the "
                     r"window of output position 0 .* covers only padding"):
    F.max_pool1d(np.array([[[3.0]]]), 2, 1, 1, 2, return_indices=True)
  # a ceil_mode window past the input's end, and 2-D (the message named jaxops.max_pool and
  # neither argument; found by a random sweep)
  with pytest.raises(ValueError, match=r"max_pool1d: with padding \(1,\) and dilation \(3,\)"):
    F.max_pool1d(np.zeros((2, 2)), 2, 3, 1, 3, ceil_mode=True)
  with pytest.raises(ValueError, match=r"max_pool2d: with padding \(1, 1\) and dilation \(2, 2\)"):
    F.max_pool2d(np.zeros((1, 1, 1, 4)), 2, 1, 1, dilation=2)


# (rank, input spatial shape, kernel, stride, padding, dilation, ceil_mode, the path of
# jaxops._max_pool it exercises: _argmax's path, how many passes the maxima alone take)
_NAN_CASES = [
    (2, (9, 11), 3, 2, 1, 1, False, ("one", 1)),          # overlapping: ONNX's scan + conditional
    (2, (8, 9), 2, 2, 0, 1, True, ("one", 1)),            # tiling: the NaN test in the scan
    (1, (13,), 3, 1, 1, 1, False, ("one", 1)),            # stride 1: the maxima's conditional
    (1, (12,), 4, 3, 1, 2, True, ("one", 1)),             # dilated, ceil_mode
    (3, (6, 7, 6), 3, 2, 1, 1, True, ("one", 2)),          # two passes (the NaN-taking maxima)
    (3, (6, 6, 7), 3, 1, 1, 1, False, ("one", 3)),        # one axis at a time (27 taps)
    (2, (12, 13), (7, 3), (1, 2), (3, 1), 1, False, ("one", 2)),  # two passes, strided last axis
    (2, (20, 21), 17, 2, 0, 1, False, ("by_axis", 1)),    # more than 256 taps
    (1, (300,), 260, 20, 0, 1, True, ("reduce_window", 1)),  # one axis past 256 taps
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(_NAN_CASES)))
def test_nan_and_ties_match_torch(case, dtype):
  """Torch scans a window in order and takes a tap that is greater than the running maximum or
  NaN, so a window holding a NaN gives NaN, indexed at its last NaN; ties go to the first
  maximum. Inputs of rounded values (many ties), about 1.5 NaN per window (at most a fifth of
  the values) and some -inf: values,
  indices exactly and the float64 gradient through torch autograd, with and without
  return_indices (different programs), on each path of jaxops' max pooling."""
  from jaxops import _max_pool
  nd, spatial, k, s, p, d, ceil, path = _NAN_CASES[case]
  rng = np.random.default_rng(700 + case)
  rep = lambda v: (v,) * nd if isinstance(v, int) else v  # noqa: E731
  x = np.round(rng.standard_normal((2, 3) + spatial) * 2).astype(dtype)
  taps = np.prod(rep(k))
  x[rng.random(x.shape) < min(0.2, 1.5 / taps)] = np.nan
  x[rng.random(x.shape) < 0.05] = -np.inf
  name = f"max_pool{nd}d"
  kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
  plan = _max_pool._plan(x.shape, rep(k), rep(s), [*rep(p), *rep(p)], rep(d), "NOTSET", ceil,
                         True)
  assert (_max_pool._argmax_path(plan), len(_max_pool._passes(plan))) == path
  ty, ti = getattr(TF, name)(torch.tensor(x), return_indices=True, **kw)
  assert torch.isnan(ty).any() and not torch.isnan(ty).all()
  fn = getattr(F, name)
  ct = rng.standard_normal(tuple(ty.shape))

  def run(a):  # one program: compiling dominates
    g = jax.grad(lambda b: jnp.sum(fn(b, **kw) * ct))(a) if dtype is np.float64 else None
    return fn(a, return_indices=True, **kw), fn(a, **kw), g

  (y, i), y_alone, g = jax.jit(run)(x)
  np.testing.assert_array_equal(np.asarray(y), ty.numpy())
  np.testing.assert_array_equal(np.asarray(i), ti.numpy())
  np.testing.assert_array_equal(np.asarray(y_alone), ty.numpy())
  if dtype is np.float64:
    tx = torch.tensor(x, requires_grad=True)
    (getattr(TF, name)(tx, **kw) * torch.tensor(ct)).sum().backward()
    np.testing.assert_array_equal(np.asarray(g), tx.grad.numpy())


def test_nan_rule_under_vmap_and_the_predicates_false_alarm():
  """The conditional that chooses torch's scan stays one under vmap (each image alike), and a
  plane that holds +inf and -inf but no NaN (its sum is NaN, so the conditional takes torch's
  scan) comes out as torch's."""
  rng = np.random.default_rng(7)
  x = np.round(rng.standard_normal((4, 2, 3, 9, 10)) * 2).astype(np.float32)
  x[1, 0, 2, 3, 4] = np.nan
  x[2, 1, 0, 5, 5] = np.nan
  y, i = jax.vmap(lambda a: F.max_pool2d(a, 3, 2, 1, return_indices=True))(x)
  ty, ti = TF.max_pool2d(torch.tensor(x.reshape(8, 3, 9, 10)), 3, 2, 1, return_indices=True)
  np.testing.assert_array_equal(np.asarray(y).reshape(ty.shape), ty.numpy())
  np.testing.assert_array_equal(np.asarray(i).reshape(ti.shape), ti.numpy())
  y = jax.vmap(lambda a: F.max_pool2d(a, 3, 2, 1))(x)  # the maxima alone: their own conditional
  np.testing.assert_array_equal(np.asarray(y).reshape(ty.shape), ty.numpy())
  z = x[0].copy()
  z[0, 0, 1, 2:4] = [np.inf, -np.inf]
  y, i = F.max_pool2d(z, 3, 2, 1, return_indices=True)
  ty, ti = TF.max_pool2d(torch.tensor(z), 3, 2, 1, return_indices=True)
  np.testing.assert_array_equal(np.asarray(y), ty.numpy())
  np.testing.assert_array_equal(np.asarray(i), ti.numpy())


@pytest.mark.parametrize("shape, kw", [
    ((1, 1, 3), dict(kernel_size=3, stride=3, dilation=2)),          # taps 0, 2 and 4 (past)
    ((2, 1, 1, 1), dict(kernel_size=2)),                            # a 1-pixel image
    ((1, 2, 6, 7, 2), dict(kernel_size=2, stride=(3, 2, 3), dilation=(1, 2, 2))),
    ((2, 2, 8, 5, 4), dict(kernel_size=(3, 4, 3), stride=3, padding=(1, 0, 0),
                           dilation=(1, 2, 1))),
])
def test_ceil_mode_window_past_the_padded_input_matches_torch(shape, kw):
  """With ceil_mode torch keeps a last window that reaches past the padded input and takes its
  maximum over the taps inside, and so does jaxops.torch (through jaxops.max_pool, which
  raised there before; found by a random sweep beyond the one above)."""
  x = np.random.default_rng(len(shape)).standard_normal(shape)
  nd = len(shape) - 2
  fn, tfn = getattr(F, f"max_pool{nd}d"), getattr(TF, f"max_pool{nd}d")
  xt = torch.tensor(x, requires_grad=True)
  ty, ti = tfn(xt, ceil_mode=True, return_indices=True, **kw)
  w = np.cos(np.arange(ty.numel())).reshape(tuple(ty.shape))
  (ty * torch.tensor(w)).sum().backward()
  y, i = fn(x, ceil_mode=True, return_indices=True, **kw)
  np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy())
  np.testing.assert_array_equal(np.asarray(i), ti.numpy())
  g = jax.grad(lambda v: jnp.sum(fn(v, ceil_mode=True, **kw) * w))(x)
  np.testing.assert_array_equal(np.asarray(g), xt.grad.numpy())


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_integer_inputs_of_max_pool2d_and_3d_match_torch(dtype):
  """torch 2.13's max_pool2d and max_pool3d take every integer type; padding never wins, even
  over the type's smallest value."""
  info = np.iinfo(dtype)
  rng = np.random.default_rng(12)
  for nd, shape in ((2, (2, 3, 9, 8)), (3, (1, 2, 5, 6, 7))):
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    x[0, 0] = info.min
    fn, tfn = getattr(F, f"max_pool{nd}d"), getattr(TF, f"max_pool{nd}d")
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True),
               dict(kernel_size=3, stride=1, padding=1, dilation=2)):
      y, i = fn(x, return_indices=True, **kw)
      ty, ti = tfn(torch.tensor(x), return_indices=True, **kw)
      assert y.dtype == np.dtype(dtype)
      np.testing.assert_array_equal(np.asarray(y), ty.numpy())
      np.testing.assert_array_equal(np.asarray(i), ti.numpy())
  with pytest.raises(TypeError, match="jaxops.torch.max_pool2d: argument `input` must have dtype"):
    F.max_pool2d(np.zeros((1, 1, 4, 4), bool), 2)


def test_integer_dtype_deviations_are_pinned():
  """docs/DEVIATIONS.md, jaxops.torch 10."""
  x = np.array([[[3, -7, 5, 1, -2, 6]]], np.int64)
  with pytest.raises(NotImplementedError):
    TF.max_pool1d(torch.tensor(x), 2)
  np.testing.assert_array_equal(np.asarray(F.max_pool1d(x, 2)),
                                TF.max_pool1d(torch.tensor(x, dtype=torch.float64), 2).numpy())
  assert TF.avg_pool1d(torch.tensor(x), 2).tolist() == [[[-2, 3, 2]]]  # truncated toward zero
  with pytest.raises(TypeError, match="jaxops.torch.avg_pool1d: argument `input` must have dtype"):
    F.avg_pool1d(x, 2)
  # lp_pool: torch takes integers (a float norm_type in float32, an integer one through the
  # truncating integer average: [3, 4] with p = 2 gives sqrt(2 * (25 // 2)), not 5); jaxops.torch
  # refuses them
  assert TF.lp_pool1d(torch.tensor([[[3, 4]]]), 2, 2).item() == pytest.approx(24 ** 0.5)
  assert TF.lp_pool1d(torch.tensor(x), 2.0, 2).dtype == torch.float32
  for p in (2, 2.0):
    with pytest.raises(TypeError, match="jaxops.torch.lp_pool1d: argument `input`"):
      F.lp_pool1d(x, p, 2)
  xi = np.arange(6, dtype=np.int32).reshape(1, 1, 6)
  with pytest.raises(NotImplementedError):
    TF.interpolate(torch.tensor(xi), size=3)
  np.testing.assert_array_equal(np.asarray(F.interpolate(xi, size=3)), [[[0, 2, 4]]])
  # max_unpool's indices: torch takes int64 only; jaxops.torch any integer type (same result)
  y = np.array([[[5.0, 7.0]]])
  i64 = np.array([[[1, 2]]], np.int64)
  with pytest.raises(RuntimeError, match="int64"):
    TF.max_unpool1d(torch.tensor(y), torch.tensor(i64.astype(np.int32)), 2)
  want = TF.max_unpool1d(torch.tensor(y), torch.tensor(i64), 2).numpy()
  for dt in (np.int8, np.uint8, np.int16, np.int32, np.uint32):
    np.testing.assert_array_equal(np.asarray(F.max_unpool1d(y, i64.astype(dt), 2)), want)
