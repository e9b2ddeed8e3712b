"""jaxops.torch's max_unpool{1,2,3}d and adaptive_max_pool{1,2,3}d against torch 2.13 CPU.

Oracle: torch.nn.functional on the same data (values; indices exactly) and torch.autograd
(gradients). torch's max_unpool runs with one intra-op thread here: with more, its CPU kernel
races on repeated indices within a single (N, C) plane (docs/DEVIATIONS.md, jaxops.torch 6).
The sweeps compile all of a function's configurations into one program (float64 values and
gradients, float32 values), so that hundreds of configurations cost one XLA compile.
"""

from __future__ import annotations

import contextlib
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxops.torch as F

# Configurations per function in the compiled end-to-end sweeps. Each costs XLA compiles (a
# float64 program with its gradient, a float32 one), so the default keeps the file within the
# suite's time budget; JAXOPS_TORCH_SWEEP=200 runs the full sweep. The plan sweeps (no compile)
# always run PLAN_SWEEP configurations per function.
SWEEP = int(os.environ.get("JAXOPS_TORCH_SWEEP", "8"))
PLAN_SWEEP = 200
GRAD_TOL = dict(rtol=1e-12, atol=1e-12)


@contextlib.contextmanager
def _one_torch_thread():
  old = torch.get_num_threads()
  torch.set_num_threads(1)
  try:
    yield
  finally:
    torch.set_num_threads(old)


def _spatial_arg(rng: np.random.Generator, values: list) -> object:
  """torch's int-or-tuple argument: an int when all entries are equal (sometimes), else a
  tuple."""
  if len(set(values)) == 1 and values[0] is not None and rng.random() < 0.5:
    return values[0]
  return tuple(values)


def _sweep(calls: list, xs: list[np.ndarray], auxs: list, cots: list[np.ndarray]) -> tuple:
  """One jitted program for all configurations: ``calls[i](x, aux) -> (values, extra)``.

  Returns the float64 values and extras, the float32 values and extras, and the float64
  gradients of ``sum(values_i * cots_i)`` with respect to every ``x``.
  """
  def f(vs, aux):
    outs = [c(v, a) for c, v, a in zip(calls, vs, aux)]
    return [o[0] for o in outs], [o[1] for o in outs]

  @jax.jit
  def program(x64, x32, aux, g):
    y64, vjp, e64 = jax.vjp(lambda vs: f(vs, aux), x64, has_aux=True)
    (grads,) = vjp(g)
    y32, e32 = f(x32, aux)
    return y64, e64, y32, e32, grads

  return program([jnp.asarray(x) for x in xs], [jnp.asarray(x.astype(np.float32)) for x in xs],
                 [jnp.asarray(a) for a in auxs], [jnp.asarray(g) for g in cots])


# --- max_unpool ---------------------------------------------------------------------------------


def _kept(idx: np.ndarray, nd: int) -> np.ndarray:
  """Which elements keep their position: per (N, C) plane, the last writer of each index
  (torch's loop ``out[idx[i]] = x[i]`` in row-major order; derived here, not read from torch)."""
  flat = idx.reshape(-1, int(np.prod(idx.shape[idx.ndim - nd:])))
  kept = np.zeros(flat.shape, bool)
  for p, row in enumerate(flat):
    last = {}
    for i, v in enumerate(row):
      last[int(v)] = i
    kept[p, list(last.values())] = True
  return kept.reshape(idx.shape)


def _own_window_indices(rng: np.random.Generator, shape: tuple, nd: int, k: list, s: list,
                        p: list, out: list) -> np.ndarray | None:
  """Per-plane indices that each name a position of their own pooling window
  ``[o * s - p, o * s - p + k)`` inside the output (None where a window has none)."""
  lead = shape[:len(shape) - nd]
  flat = np.zeros(shape, np.int64)
  for d in range(nd):
    o = np.arange(shape[len(lead) + d]) * s[d] - p[d]
    lo, hi = np.maximum(o, 0), np.minimum(o + k[d], out[d])
    if np.any(hi <= lo):
      return None
    u = rng.random(shape)
    axis = (1,) * (len(lead) + d) + (-1,) + (1,) * (nd - d - 1)
    coord = lo.reshape(axis) + np.floor(u * (hi - lo).reshape(axis)).astype(np.int64)
    flat = flat * out[d] + coord
  return flat


def _unpool_case(rng: np.random.Generator, nd: int) -> tuple | None:
  k = [int(v) for v in rng.integers(1, 4, nd)]
  s = [int(v) for v in rng.integers(1, 4, nd)] if rng.random() < 0.7 else None
  st = s or k
  p = [int(rng.integers(0, kv // 2 + 1)) for kv in k]
  spatial = [int(v) for v in rng.integers(1, 6 if nd < 3 else 4, nd)]
  default = [(n - 1) * sv + kv - 2 * pv for n, kv, sv, pv in zip(spatial, k, st, p)]
  kw: dict = dict(kernel_size=_spatial_arg(rng, k), padding=_spatial_arg(rng, p))
  if s is not None:
    kw["stride"] = _spatial_arg(rng, s)
  out = default
  if rng.random() < 0.5:
    out = [d + int(rng.integers(-(sv - 1), sv)) for d, sv in zip(default, st)]
    size: list = list(out)
    if rng.random() < 0.3:
      size = [int(rng.integers(1, 4)), int(rng.integers(1, 4))] + size  # ignored, as torch
    kw["output_size"] = size
  if min(out) < 1:
    return None
  batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
  shape = batch + (int(rng.integers(1, 4)),) + tuple(spatial)
  plane = int(np.prod(out))
  n_in = int(np.prod(spatial))
  local = _own_window_indices(rng, shape, nd, k, st, p, out) if rng.random() < 0.35 else None
  if local is not None:  # each index in its own pooling window, as max_pool's are
    idx = local
  elif rng.random() < 0.3 and plane >= n_in:  # distinct positions per plane
    planes = int(np.prod(shape[:len(shape) - nd]))
    idx = np.stack([rng.permutation(plane)[:n_in] for _ in range(planes)]).reshape(shape)
  else:  # repeats likely
    idx = rng.integers(0, plane, shape)
  args: tuple = ()
  if rng.random() < 0.3:  # torch's positional order
    args = (kw.pop("kernel_size"),)
  no_overlap = local is not None and all(kv <= sv for kv, sv in zip(k, st))
  return rng.standard_normal(shape), idx.astype(np.int64), args, kw, no_overlap


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_matches_torch(nd):
  """SWEEP random configurations: kernel, stride (and None), padding, output_size (None,
  spatial, or with the two leading entries torch ignores) anywhere in its allowed range,
  unbatched inputs, 1-pixel axes, indices with and without repeats. float64 and float32 values
  exactly; float64 gradients: torch's where every index of a plane is distinct, else torch's
  on the kept elements and zero on the overwritten ones (the gradient of the forward;
  docs/DEVIATIONS.md, jaxops.torch 6)."""
  rng = np.random.default_rng(700 + nd)
  name = f"max_unpool{nd}d"
  tf, jf = getattr(TF, name), getattr(F, name)
  cases = []
  while len(cases) < SWEEP:
    case = _unpool_case(rng, nd)
    if case is not None:
      cases.append(case)
  want = []
  with _one_torch_thread():
    for x, idx, args, kw, _ in cases:
      it = torch.tensor(idx)
      y32 = tf(torch.tensor(x.astype(np.float32)), it, *args, **kw).numpy()
      xt = torch.tensor(x, requires_grad=True)
      y = tf(xt, it, *args, **kw)
      g = rng.standard_normal(tuple(y.shape))
      y.backward(torch.tensor(g))
      want.append((y.detach().numpy(), y32, xt.grad.numpy() * _kept(idx, nd), g))
  calls = [lambda v, i, args=args, kw=kw: (jf(v, i, *args, **kw), ())
           for _, _, args, kw, _ in cases]
  y64, _, y32, _, grads = _sweep(calls, [c[0] for c in cases], [c[1] for c in cases],
                                 [w[3] for w in want])
  repeats = 0
  for n, ((x, idx, args, kw, _), (w64, w32, wg, _)) in enumerate(zip(cases, want)):
    msg = f"{name} {x.shape} {args} {kw}"
    repeats += not _kept(idx, nd).all()
    assert y64[n].dtype == np.float64 and y32[n].dtype == np.float32, msg
    np.testing.assert_array_equal(y64[n], w64, err_msg=msg)
    np.testing.assert_array_equal(y32[n], w32, err_msg=msg)
    np.testing.assert_allclose(grads[n], wg, **GRAD_TOL, err_msg="grad " + msg)
  # The sweep exercises repeated indices, and indices in their own windows of a pooling whose
  # windows do not overlap (the scatter-free path).
  assert repeats >= len(cases) // 5
  assert sum(c[4] for c in cases) >= len(cases) // 10


def test_max_unpool_of_overlapping_windows_matches_torch():
  """Overlapping pooling windows (kernel longer than stride), indices from torch's own
  max_pool with ties (a position that two windows share is named twice): the unpool pulls each
  position's candidate writers instead of scattering. Values exactly, float64 gradients
  torch's on the kept elements and zero on the overwritten ones (docs/DEVIATIONS.md,
  jaxops.torch 6), with and without an output_size that rounds up to whole strides."""
  from jaxops import _max_pool
  rng = np.random.default_rng(91)
  configs = [  # (input shape, kernel, stride, padding, output_size)
      ((2, 3, 9, 11), 3, 2, 1, None), ((2, 3, 10, 12), 3, 2, 1, (10, 12)),
      ((2, 3, 7, 8), 3, 1, 1, None), ((2, 3, 23), 3, 1, 1, None), ((2, 3, 22), 4, 2, 1, None),
      ((1, 2, 6, 6, 8), 3, 2, 1, (6, 6, 8)), ((1, 2, 6, 5, 8), (3, 2, 3), (2, 1, 2), 1, (6, 5, 8))]
  cases, want = [], []
  with _one_torch_thread():
    for shape, k, s, p, size in configs:
      nd = len(shape) - 2
      x = np.round(rng.standard_normal(shape) * 2) / 2  # ties: repeated indices
      y, idx = getattr(TF, f"max_pool{nd}d")(torch.tensor(x), k, s, p, return_indices=True)
      kw = dict(kernel_size=k, stride=s, padding=p, output_size=size)
      cfg = F._unpool_config(f"max_unpool{nd}d", nd, tuple(y.shape), tuple(y.shape), k, s, p,
                             size)
      assert _max_pool._unpool_overlaps(cfg) and _max_pool.unpool_windowed(cfg), cfg
      yt = y.clone().requires_grad_()
      out = getattr(TF, f"max_unpool{nd}d")(yt, idx, **kw)
      g = rng.standard_normal(tuple(out.shape))
      out.backward(torch.tensor(g))
      kept = _kept(idx.numpy(), nd)
      cases.append((y.detach().numpy(), idx.numpy(), kw, nd))
      want.append((out.detach().numpy(), yt.grad.numpy() * kept, g, kept))
  calls = [lambda v, i, kw=kw, nd=nd: (getattr(F, f"max_unpool{nd}d")(v, i, **kw), ())
           for _, _, kw, nd in cases]
  y64, _, y32, _, grads = _sweep(calls, [c[0] for c in cases], [c[1] for c in cases],
                                 [w[2] for w in want])
  overwritten = 0
  for n, ((y, idx, kw, nd), (w, wg, _, kept)) in enumerate(zip(cases, want)):
    msg = f"{y.shape} {kw}"
    overwritten += int((~kept).sum())
    np.testing.assert_array_equal(y64[n], w, err_msg=msg)
    with _one_torch_thread():
      w32 = getattr(TF, f"max_unpool{nd}d")(torch.tensor(y.astype(np.float32)),
                                            torch.tensor(idx), **kw).numpy()
    np.testing.assert_array_equal(y32[n], w32, err_msg=msg)
    np.testing.assert_array_equal(grads[n], wg, err_msg="grad " + msg)
  assert overwritten  # positions two windows share


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_output_sizes_and_errors_match_torch(nd):
  """PLAN_SWEEP random argument sets, impossible ones included (output_size at and beyond the
  ends of its range or of the wrong length, negative output lengths, zero kernels and
  strides): jaxops.torch raises exactly where torch raises, and otherwise gives torch's output
  shape. No XLA compile: the static plan only (the data path, which is the same for every
  plan, runs in the compiled sweep above)."""
  from jaxops import torch as module
  rng = np.random.default_rng(900 + nd)
  name = f"max_unpool{nd}d"
  raised = 0
  for _ in range(PLAN_SWEEP):
    k = [int(v) for v in rng.integers(0 if rng.random() < 0.1 else 1, 4, nd)]
    s = [int(v) for v in rng.integers(0 if rng.random() < 0.1 else 1, 4, nd)] if (
        rng.random() < 0.7) else None
    st = k if s is None else s
    p = [int(v) for v in rng.integers(0, 3 if rng.random() < 0.3 else 2, nd)]
    spatial = [int(v) for v in rng.integers(1, 6, nd)]
    default = [(n - 1) * sv + kv - 2 * pv for n, kv, sv, pv in zip(spatial, k, st, p)]
    kw: dict = dict(kernel_size=_spatial_arg(rng, k), padding=_spatial_arg(rng, p))
    if s is not None:
      kw["stride"] = _spatial_arg(rng, s)
    r = rng.random()
    if r < 0.5:
      size = [d + int(rng.integers(-sv, sv + 1)) for d, sv in zip(default, st)]
      kw["output_size"] = ([1, 1] + size) if rng.random() < 0.3 else size
    elif r < 0.55:
      kw["output_size"] = default + [1]
    batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
    shape = batch + (int(rng.integers(1, 3)),) + tuple(spatial)
    try:
      with _one_torch_thread():
        want = tuple(getattr(TF, name)(torch.zeros(shape), torch.zeros(shape, dtype=torch.long),
                                       **kw).shape)
    except (RuntimeError, ValueError, TypeError, IndexError):
      want = None
    try:
      got = module._unpool_config(name, nd, shape, shape, kw["kernel_size"], kw.get("stride"),
                                  kw["padding"], kw.get("output_size")).out
    except (ValueError, TypeError) as e:
      assert f"jaxops.torch.{name}: " in str(e)
      got = None
    assert got == want, f"{name} {shape} {kw}: torch {want}, jaxops.torch {got}"
    raised += want is None
  assert PLAN_SWEEP // 10 <= raised <= PLAN_SWEEP * 3 // 4, raised  # both outcomes represented


@pytest.mark.parametrize("window", [(3, 2, 1), (2, 2, 0), (2, 3, 1)])
def test_max_unpool_round_trip_from_max_pool_matches_torch(window):
  """The usual use: indices from max_pool{nd}d(return_indices=True), output_size the pooled
  input's size; overlapping windows (repeated indices of equal values) and windows that do not
  overlap, where every index lies in its own window (the scatter-free path, which then runs:
  its condition is checked here too, 2-D). Values; gradients (2-D) where no index repeats."""
  from jaxops import torch as module
  k, s, p = window
  rng = np.random.default_rng(11)
  for nd, shape in [(1, (2, 3, 9)), (2, (2, 3, 7, 8)), (3, (1, 2, 5, 6, 5))]:
    x = torch.tensor(rng.standard_normal(shape))
    pool, unpool = getattr(TF, f"max_pool{nd}d"), getattr(TF, f"max_unpool{nd}d")
    y, i = pool(x, k, s, p, return_indices=True)
    y.requires_grad_()
    with _one_torch_thread():
      u = unpool(y, i, k, s, p, output_size=shape[2:])
    g = rng.standard_normal(shape)
    u.backward(torch.tensor(g))
    jy, ji = getattr(F, f"max_pool{nd}d")(x.numpy(), k, s, p, return_indices=True)
    name = f"max_unpool{nd}d"
    got = getattr(F, name)(jy, ji, k, s, p, output_size=shape)
    np.testing.assert_array_equal(got, u.detach().numpy())
    if k <= s and nd == 2:
      cfg = module._unpool_config(name, nd, jy.shape, ji.shape, k, s, p, shape)
      assert bool(module._unpool_is_local(ji, cfg))
      grad = jax.grad(lambda v: jnp.sum(getattr(F, name)(v, ji, k, s, p, output_size=shape) * g))
      np.testing.assert_allclose(grad(np.asarray(jy, np.float64)), y.grad.numpy(), **GRAD_TOL)


def test_max_unpool_repeated_indices_deviation_is_pinned():
  """docs/DEVIATIONS.md, jaxops.torch 6. Repeated indices in one plane: with one thread torch
  keeps the last write (and so does jaxops.torch); torch's backward gathers the cotangent at
  every element's index, overwritten ones included, while jaxops.torch's gradient is that of
  its forward (zero for the overwritten elements). x = [1, 2, 3, 4] to positions [1, 1, 3, 1]:
  position 1 holds 4 (the last write), position 3 holds 3; with cotangent g = [0, 10, 0, 30,
  0, 0, 0, 0], torch's gradient is [10, 10, 30, 10] and the forward's is [0, 0, 30, 10]."""
  x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
  i = np.array([[[1, 1, 3, 1]]])
  g = np.array([[[0.0, 10.0, 0.0, 30.0, 0.0, 0.0, 0.0, 0.0]]])
  with _one_torch_thread():
    xt = torch.tensor(x, requires_grad=True)
    yt = TF.max_unpool1d(xt, torch.tensor(i), 2)
    yt.backward(torch.tensor(g))
  assert yt.detach().numpy().ravel().tolist() == [0, 4, 0, 3, 0, 0, 0, 0]
  assert xt.grad.numpy().ravel().tolist() == [10, 10, 30, 10]
  np.testing.assert_array_equal(F.max_unpool1d(x, i, 2), yt.detach().numpy())
  grad = jax.grad(lambda v: jnp.sum(F.max_unpool1d(v, i, 2) * g))(x)
  assert grad.ravel().tolist() == [0, 0, 30, 10]


def test_max_unpool_out_of_range_indices():
  """Concrete indices outside the output plane raise, as in torch; under jit (where they
  cannot be checked) those elements are dropped: the expected value is the last-writer loop
  over the in-range elements only (hand-derived)."""
  x = np.array([[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]])
  i = np.array([[[0, 8, 3, -1], [7, 2, 2, 9]]])
  with pytest.raises(RuntimeError, match="invalid max index"):
    TF.max_unpool1d(torch.tensor(x), torch.tensor(i), 2)
  with pytest.raises(ValueError, match=r"jaxops.torch.max_unpool1d: argument `indices`.*\[0, 8\)"):
    F.max_unpool1d(x, i, 2)
  with pytest.raises(ValueError, match="jaxops.torch.max_unpool1d: argument `indices`"):
    F.max_unpool1d(jnp.asarray(x), jnp.asarray(i), 2)
  got = jax.jit(lambda v, j: F.max_unpool1d(v, j, 2))(x, i)
  want = np.zeros((1, 2, 8))
  want[0, 0, [0, 3]] = [1.0, 3.0]
  want[0, 1, [7, 2]] = [5.0, 7.0]
  np.testing.assert_array_equal(got, want)


def test_max_unpool_64_bit_numpy_indices_without_64_bit_types():
  """With JAX's 64-bit types off, an int64 NumPy index past int32 wrapped into the plane (2**32
  + 3 became 3) and passed the range check; torch raises for it, and so does jaxops, naming the
  value received."""
  x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
  i = np.array([[[0, 2 ** 32 + 3, 5, 7]]], np.int64)
  with pytest.raises(RuntimeError, match="invalid max index"):
    TF.max_unpool1d(torch.tensor(x), torch.tensor(i), 2)
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match=r"max_unpool1d: argument `indices`.*got 4294967299"):
      F.max_unpool1d(x.astype(np.float32), i, 2)


def test_max_unpool_indices_closed_over_by_jit():
  """Indices that are a concrete array closed over by the caller's jit (not an argument of it):
  the range check runs traced there, so it cannot raise, and the call works (it raised
  TracerBoolConversionError). Values and gradient against torch."""
  rng = np.random.default_rng(5)
  x = torch.tensor(rng.standard_normal((2, 3, 8, 6)))
  y, i = TF.max_pool2d(x, 2, 2, return_indices=True)
  y.requires_grad_()
  with _one_torch_thread():
    u = TF.max_unpool2d(y, i, 2, 2)
  g = rng.standard_normal(u.shape)
  u.backward(torch.tensor(g))
  ji = jnp.asarray(i.numpy())
  got = jax.jit(lambda v: F.max_unpool2d(v, ji, 2, 2))(y.detach().numpy())
  np.testing.assert_array_equal(got, u.detach().numpy())
  grad = jax.jit(jax.grad(lambda v: jnp.sum(F.max_unpool2d(v, ji, 2, 2) * g)))
  np.testing.assert_allclose(grad(y.detach().numpy()), y.grad.numpy(), **GRAD_TOL)


# --- adaptive_max_pool --------------------------------------------------------------------------


def _adaptive_case(rng: np.random.Generator, nd: int) -> tuple:
  hi = 10 if nd < 3 else 6
  spatial = tuple(int(v) for v in rng.integers(1, hi, nd))
  if rng.random() < 0.1:  # long windows
    spatial = tuple(int(v) for v in rng.integers(10, 30 if nd < 3 else 12, nd))
  batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
  shape = batch + (int(rng.integers(1, 3)),) + spatial
  out: list = [int(v) for v in rng.integers(1, hi, nd)]
  if nd > 1 and rng.random() < 0.2:
    out[int(rng.integers(0, nd))] = None
  size = _spatial_arg(rng, out)
  kind = rng.random()
  if kind < 0.5:
    x = rng.standard_normal(shape)
  elif kind < 0.8:  # many ties
    x = rng.integers(-2, 3, shape).astype(np.float64)
  else:  # NaN, +-inf and ties
    x = rng.integers(-2, 3, shape).astype(np.float64)
    x[rng.random(shape) < 0.15] = np.nan
    x[rng.random(shape) < 0.1] = -np.inf
    x[rng.random(shape) < 0.05] = np.inf
  indices = bool(rng.random() < 0.8)
  args = (size, indices) if rng.random() < 0.3 else (size,)
  kw = {} if len(args) == 2 else dict(return_indices=indices)
  return x, args, kw, indices


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_max_pool_matches_torch(nd):
  """SWEEP random configurations: divisible and uneven windows, outputs larger than the
  input, long windows, 1-pixel axes, None entries, unbatched inputs, return_indices both ways
  (positional and keyword); normal data, data full of ties, data with NaN and +-inf. float64
  and float32 values and indices exactly; float64 gradients against torch.autograd."""
  rng = np.random.default_rng(800 + nd)
  name = f"adaptive_max_pool{nd}d"
  tf, jf = getattr(TF, name), getattr(F, name)
  cases = [_adaptive_case(rng, nd) for _ in range(SWEEP)]
  want = []
  for x, args, kw, indices in cases:
    out32 = tf(torch.tensor(x.astype(np.float32)), *args, **kw)
    xt = torch.tensor(x, requires_grad=True)
    out = tf(xt, *args, **kw)
    y = out[0] if indices else out
    g = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(g))
    want.append((y.detach().numpy(), out[1].numpy() if indices else None,
                 (out32[0] if indices else out32).numpy(),
                 out32[1].numpy() if indices else None, xt.grad.numpy(), g))

  def call(v, _, args, kw, indices):
    out = jf(v, *args, **kw)
    return (out[0], out[1]) if indices else (out, ())

  calls = [lambda v, a, args=args, kw=kw, ind=ind: call(v, a, args, kw, ind)
           for _, args, kw, ind in cases]
  y64, i64, y32, i32, grads = _sweep(calls, [c[0] for c in cases], [()] * len(cases),
                                     [w[5] for w in want])
  for n, ((x, args, kw, indices), (w64, wi64, w32, wi32, wg, _)) in enumerate(zip(cases, want)):
    msg = f"{name} {x.shape} {args} {kw}"
    assert y64[n].dtype == np.float64 and y32[n].dtype == np.float32, msg
    np.testing.assert_array_equal(y64[n], w64, err_msg=msg)
    np.testing.assert_array_equal(y32[n], w32, err_msg=msg)
    if indices:
      assert i64[n].dtype == np.int64, msg
      np.testing.assert_array_equal(i64[n], wi64, err_msg=msg)
      np.testing.assert_array_equal(i32[n], wi32, err_msg=msg)
    np.testing.assert_allclose(grads[n], wg, **GRAD_TOL, err_msg="grad " + msg)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_max_pool_plans_match_torch(nd):
  """PLAN_SWEEP random configurations, drawn as in the compiled sweep (ties, NaN, +-inf
  included): jaxops' static window tables, read with the rule its kernel applies (the window's
  maximum, NaN if it holds one; the index is the smallest plane position holding the maximum,
  or the largest holding NaN), give torch's values and indices exactly, float64 and float32.
  No XLA compile; the kernel that applies the tables runs end to end in the sweep above."""
  from jaxops import torch as module
  rng = np.random.default_rng(950 + nd)
  name = f"adaptive_max_pool{nd}d"
  for _ in range(PLAN_SWEEP):
    x, args, _, _ = _adaptive_case(rng, nd)
    cfg = module._amax_config(name, nd, x.shape, args[0], True)
    pos = module._amax_plan(cfg.axes)
    red = tuple(2 * d + 2 for d in range(nd))
    for dt in (np.float64, np.float32):
      v = x.astype(dt)
      yt, it = getattr(TF, name)(torch.tensor(v), args[0], True)
      g = v.reshape(-1, int(np.prod(x.shape[x.ndim - nd:])))[:, pos]
      best = g.max(axis=red)
      hit = g == np.expand_dims(best, red)
      first = np.where(hit, pos, np.iinfo(np.int64).max).min(axis=red)
      last_nan = np.where(np.isnan(g), pos, -1).max(axis=red)
      msg = f"{name} {x.shape} {args} {dt.__name__}"
      np.testing.assert_array_equal(best.reshape(yt.shape), yt.numpy(), err_msg=msg)
      np.testing.assert_array_equal(np.where(last_nan >= 0, last_nan, first).reshape(it.shape),
                                    it.numpy(), err_msg=msg)


def test_adaptive_max_pool_ties_and_nan_rule():
  """torch's scan (``val > max || isnan(val)``, row-major): ties go to the first maximum, a
  window holding NaN gives NaN at its last NaN, short and long windows. Hand-derived:
  [1, 3, 3, 2 | nan, 5, nan, 1]
  -> (3 at 1, nan at 6); the 2x2 window [[nan, 1], [nan, 5]] -> nan at 2 (the second NaN in
  row-major order); [[1, 5], [5, 5]] -> 5 at 1; all -inf -> -inf at 0."""
  nan, inf = np.nan, np.inf
  cases = [("adaptive_max_pool1d", [[[1.0, 3.0, 3.0, 2.0, nan, 5.0, nan, 1.0]]], 2,
            [3.0, nan], [1, 6]),
           ("adaptive_max_pool2d", [[[[nan, 1.0], [nan, 5.0]]]], 1, [nan], [2]),
           ("adaptive_max_pool2d", [[[[1.0, 5.0], [5.0, 5.0]]]], 1, [5.0], [1]),
           ("adaptive_max_pool3d", [[[[[-inf, -inf]], [[-inf, -inf]]]]], 1, [-inf], [0])]
  # A window too long to scan tap by tap (20 x 20), holding +inf and two NaN: NaN at the
  # second NaN, 15 * 20 + 2.
  big = np.zeros((1, 1, 20, 20))
  big[0, 0, 3, 4], big[0, 0, 5, 6], big[0, 0, 15, 2] = inf, nan, nan
  cases.append(("adaptive_max_pool2d", big, 1, [nan], [302]))
  for name, x, size, values, idx in cases:
    x = np.array(x)
    for out in (getattr(TF, name)(torch.tensor(x), size, True),
                getattr(F, name)(x, size, True)):
      np.testing.assert_array_equal(np.asarray(out[0]).ravel(), values, err_msg=name)
      assert np.asarray(out[1]).ravel().tolist() == idx, name
  # Long windows of data full of NaN and +-inf (XLA's max reduction alone drops some NaN
  # there): torch as the oracle.
  rng = np.random.default_rng(17)
  x = rng.integers(-2, 3, (2, 2, 11, 10, 10)).astype(np.float64)
  x[rng.random(x.shape) < 0.15] = nan
  x[rng.random(x.shape) < 0.1] = -inf
  x[rng.random(x.shape) < 0.05] = inf
  yt, it = TF.adaptive_max_pool3d(torch.tensor(x), 1, True)
  y, i = F.adaptive_max_pool3d(x, 1, True)
  np.testing.assert_array_equal(y, yt.numpy())
  np.testing.assert_array_equal(i, it.numpy())
  # A long window whose maximum is -0 (first, at 2 * 20 + 3) and +0: torch's -0 at 43.
  x = np.full((1, 1, 20, 20), -1.0)
  x[0, 0, 2, 3], x[0, 0, 9, 9] = -0.0, 0.0
  y, i = F.adaptive_max_pool2d(x, 1, True)
  yt, it = TF.adaptive_max_pool2d(torch.tensor(x), 1, True)
  assert np.signbit(yt.numpy()).all() and it.item() == 43
  assert np.signbit(np.asarray(y)).all() and int(i[0, 0, 0, 0]) == 43


def test_adaptive_max_pool_positions_of_large_planes_match_torch():
  """The scans carry plane positions (and tiled tap numbers) as float32 where it holds them
  exactly: positions far past 2**16 (per-axis scans of uneven windows, and the tiled offsets'
  digits) are still torch's indices, values and gradients exact."""
  rng = np.random.default_rng(31)
  for shape, size in (((1, 2, 257, 300), (9, 11)), ((1, 1, 1024, 1024), (512, 512)),
                      ((1, 1, 40, 50, 60), (3, 4, 7))):
    x = rng.standard_normal(shape)
    fn = getattr(F, f"adaptive_max_pool{len(size)}d")
    tfn = getattr(TF, f"adaptive_max_pool{len(size)}d")
    for dt in (np.float32, np.float64):
      y, i = fn(x.astype(dt), size, True)
      yt, it = tfn(torch.tensor(x.astype(dt)), size, True)
      np.testing.assert_array_equal(np.asarray(y), yt.numpy(), err_msg=str(shape))
      np.testing.assert_array_equal(np.asarray(i), it.numpy(), err_msg=str(shape))
    assert int(np.asarray(i).max()) > 1 << 16
    xt = torch.tensor(x, requires_grad=True)
    (tfn(xt, size) ** 2).sum().backward()
    g = jax.grad(lambda v: jnp.sum(fn(v, size) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 3, 100), (1, 2, 70, 9), (1, 2, 3, 4, 130), (2, 3, 7, 7),
                                   (1, 2, 3, 4, 5)])
def test_adaptive_max_pool_to_one_matches_torch(shape):
  """Output size 1 runs as jaxops.global_max_pool's maximum and rounds over the whole plane
  (torch's scan: a later element wins if greater or NaN; the positions carried through the
  rounds on planes of at most 56 elements, found after them on longer ones): planes with
  several NaN (torch's index: the last), ties and zeros of both signs, in float32 and float64;
  the value's bits, the indices and the gradient against torch."""
  rng = np.random.default_rng(len(shape))
  nd = len(shape) - 2
  fn, tfn = getattr(F, f"adaptive_max_pool{nd}d"), getattr(TF, f"adaptive_max_pool{nd}d")
  x = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf]), shape)
  x.reshape(-1, x.shape[-1])[::2] *= -1  # planes whose maximum is a zero
  planes = x.reshape(shape[0] * shape[1], -1)
  planes[0, [5, 40, 66 % planes.shape[1]]] = np.nan  # several NaN: torch names the last
  planes[-1, [1, -1]] = np.nan
  for dt, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
    y, i = fn(x.astype(dt), 1, True)
    yt, it = tfn(torch.tensor(x.astype(dt)), 1, True)
    np.testing.assert_array_equal(np.asarray(y).view(bits), yt.numpy().view(bits))
    np.testing.assert_array_equal(np.asarray(i), it.numpy())
  xt = torch.tensor(x, requires_grad=True)
  (tfn(xt, 1) * 3).sum().backward()
  g = jax.grad(lambda v: jnp.sum(fn(v, 1) * 3))(x)
  np.testing.assert_array_equal(np.asarray(g), xt.grad.numpy())


def test_adaptive_max_pool_half_precision_matches_torch():
  """float16 and bfloat16 keep their dtype and select the same elements as torch."""
  x = np.random.default_rng(12).integers(-8, 8, (2, 3, 7, 5)).astype(np.float32)
  for jdt, tdt in ((jnp.float16, torch.float16), (jnp.bfloat16, torch.bfloat16)):
    y, i = F.adaptive_max_pool2d(jnp.asarray(x, jdt), (3, 4), True)
    yt, it = TF.adaptive_max_pool2d(torch.tensor(x).to(tdt), (3, 4), True)
    assert y.dtype == jdt
    np.testing.assert_array_equal(np.asarray(y, np.float32), yt.float().numpy())
    np.testing.assert_array_equal(i, it.numpy())


class BehaviourTest(chex.TestCase):
  """Eager and jitted calls of the public functions against torch."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_unbatched_unpool_and_adaptive_max(self):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((3, 5, 6))
    y, i = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    with _one_torch_thread():
      want = TF.max_unpool2d(y, i, 2, output_size=(5, 6)).numpy()
    got = self.variant(lambda v, j: F.max_unpool2d(v, j, 2, output_size=(5, 6)))(
        y.numpy(), i.numpy())
    chex.assert_shape(got, (3, 5, 6))
    np.testing.assert_array_equal(got, want)
    yt, it = TF.adaptive_max_pool2d(torch.tensor(x), (2, None), True)
    yj, ij = self.variant(lambda v: F.adaptive_max_pool2d(v, (2, None), True))(x)
    np.testing.assert_array_equal(yj, yt.numpy())
    np.testing.assert_array_equal(ij, it.numpy())
    np.testing.assert_array_equal(self.variant(lambda v: F.adaptive_max_pool2d(v, 3))(x),
                                  TF.adaptive_max_pool2d(torch.tensor(x), 3).numpy())

  @chex.variants(with_jit=True, without_jit=True)
  def test_empty_batch_and_zero_output(self):
    y, i = self.variant(lambda v: F.adaptive_max_pool2d(v, 0, True))(np.ones((1, 2, 3, 3)))
    chex.assert_shape((y, i), (1, 2, 0, 0))
    want = TF.max_unpool2d(torch.ones(0, 2, 2, 2), torch.zeros(0, 2, 2, 2, dtype=torch.long), 2)
    got = self.variant(lambda v, j: F.max_unpool2d(v, j, 2))(np.ones((0, 2, 2, 2)),
                                                           np.zeros((0, 2, 2, 2), np.int64))
    chex.assert_shape(got, tuple(want.shape))


def test_vmap_matches_torch_per_example():
  rng = np.random.default_rng(14)
  x = rng.standard_normal((3, 2, 4, 7, 6))
  y, i = jax.jit(jax.vmap(lambda v: F.adaptive_max_pool2d(v, (3, 4), True)))(x)
  for n in range(3):
    yt, it = TF.adaptive_max_pool2d(torch.tensor(x[n]), (3, 4), True)
    np.testing.assert_array_equal(y[n], yt.numpy())
    np.testing.assert_array_equal(i[n], it.numpy())
  pooled = [TF.max_pool2d(torch.tensor(v), 2, return_indices=True) for v in x]
  u = jax.vmap(lambda v, j: F.max_unpool2d(v, j, 2, output_size=(7, 6)))(
      np.stack([p[0].numpy() for p in pooled]), np.stack([p[1].numpy() for p in pooled]))
  with _one_torch_thread():
    for n, (p, q) in enumerate(pooled):
      np.testing.assert_array_equal(u[n], TF.max_unpool2d(p, q, 2, output_size=(7, 6)).numpy())


def test_no_retrace():
  rng = np.random.default_rng(15)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def both(v, j):
    return F.max_unpool2d(v, j, 2, output_size=(5, 4)), F.adaptive_max_pool3d(v, (1, 2, 1), True)

  for _ in range(3):
    x = rng.standard_normal((2, 3, 2, 2))
    j = rng.integers(0, 20, (2, 3, 2, 2))
    both(x, j)
  chex.clear_trace_counter()
  # Repeated eager calls reuse their static plans (and so their compiled programs).
  from jaxops import torch as module
  for cache, call in ((module._UNPOOL, lambda: F.max_unpool2d(x, j, 2, output_size=(5, 4))),
                      (module._AMAX, lambda: F.adaptive_max_pool3d(x, (1, 2, 1), True))):
    call()
    hits, misses = cache.hits, cache.misses
    call()
    assert (cache.hits, cache.misses) == (hits + 1, misses)


@pytest.mark.parametrize("name, x, args, kw, match", [
    ("max_unpool2d", (2, 2), (2,), {}, "max_unpooling2d should be a 3d or 4d"),
    ("max_unpool1d", (2,), (2,), {}, "max_unpooling1d should be a 2d or 3d"),
    ("max_unpool3d", (1, 1, 1, 2, 2, 2), (2,), {}, "max_unpooling3d should be a 4d or 5d"),
    ("max_unpool2d", (1, 0, 2, 2), (2,), {}, "non-zero size"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(output_size=(6, 4)), "argument `output_size`"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(output_size=(2, 4)), "argument `output_size`"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(output_size=(4, 4, 4)), "argument `output_size`"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(output_size=4), "argument `output_size`"),
    ("max_unpool2d", (1, 1, 2, 2), (1,), dict(padding=2), "argument `output_size`"),
    ("max_unpool3d", (1, 1, 2, 2, 2), (2,), dict(stride=0), "argument `stride`"),
    ("max_unpool2d", (1, 1, 2, 2), ((2, 2, 2),), {}, "argument `kernel_size`"),
    # torch's max_unpool does not broadcast a one-element tuple as max_pool does (found by a
    # fuzzer): kernel_size a RuntimeError, stride and padding an IndexError
    ("max_unpool2d", (1, 1, 2, 2), ((2,),), {}, "argument `kernel_size`"),
    ("max_unpool2d", (1, 1, 2, 2), ([2],), {}, "argument `kernel_size`"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(stride=(2,)), "argument `stride`"),
    ("max_unpool2d", (1, 1, 2, 2), (2,), dict(stride=()), "argument `stride`"),
    ("max_unpool3d", (1, 1, 2, 2, 2), (2,), dict(padding=(0,)), "argument `padding`"),
    ("max_unpool3d", (1, 1, 2, 2, 2), ((2, 2),), {}, "argument `kernel_size`"),
    ("max_unpool1d", (1, 1, 2), ((2, 2),), {}, "argument `kernel_size`"),
    ("adaptive_max_pool2d", (1, 1, 3, 3), ((2, 2, 2),), {}, "argument `output_size`"),
    ("adaptive_max_pool2d", (1, 1, 3, 3), (-1,), {}, "argument `output_size`"),
    ("adaptive_max_pool2d", (1, 1, 3, 3), (2.0,), {}, "argument `output_size`"),
    ("adaptive_max_pool2d", (1, 1, 3, 3), ((2.0, 2),), {}, "argument `output_size`"),
    ("adaptive_max_pool1d", (1, 1, 3), (None,), {}, "argument `output_size`"),
    ("adaptive_max_pool2d", (3, 3), (2,), {}, "Expected 3D or 4D"),
    ("adaptive_max_pool1d", (3,), (2,), {}, "Expected 2D or 3D"),
    ("adaptive_max_pool3d", (2, 3, 3), (2,), {}, "Expected 4D or 5D"),
    ("adaptive_max_pool2d", (1, 1, 0, 3), (2,), {}, "non-zero size"),
])
def test_impossible_arguments_raise_where_torch_raises(name, x, args, kw, match):
  x = np.zeros(x)
  targs = list(args)
  if name.startswith("max_unpool"):
    i = np.zeros(x.shape, np.int64)
    with pytest.raises((RuntimeError, ValueError, TypeError, IndexError)):
      with _one_torch_thread():
        getattr(TF, name)(torch.tensor(x), torch.tensor(i), *targs, **kw)
    with pytest.raises((ValueError, TypeError), match=f"jaxops.torch.{name}: .*{match}"):
      getattr(F, name)(x, i, *args, **kw)
  else:
    with pytest.raises((RuntimeError, ValueError, TypeError)):
      getattr(TF, name)(torch.tensor(x), *targs, **kw)
    with pytest.raises((ValueError, TypeError), match=f"jaxops.torch.{name}: .*{match}"):
      getattr(F, name)(x, *args, **kw)


def test_max_unpool1d_takes_one_element_tuples_as_torch():
  """The one-element tuples that max_unpool2d/3d refuse are max_unpool1d's own spelling."""
  y, i = TF.max_pool1d(torch.arange(12.0).reshape(1, 2, 6), 2, return_indices=True)
  want = TF.max_unpool1d(y, i, (2,), stride=(2,), padding=(0,)).numpy()
  got = F.max_unpool1d(y.numpy(), i.numpy(), (2,), stride=(2,), padding=(0,))
  np.testing.assert_array_equal(np.asarray(got), want)


def test_wrong_dtypes_and_shapes_raise():
  x = np.zeros((1, 1, 2, 2))
  i = np.zeros((1, 1, 2, 2), np.int64)
  with pytest.raises(RuntimeError, match="int64"):
    TF.max_unpool2d(torch.tensor(x), torch.tensor(i.astype(np.float64)), 2)
  with pytest.raises(TypeError, match="jaxops.torch.max_unpool2d: argument `indices`"):
    F.max_unpool2d(x, i.astype(np.float64), 2)
  with pytest.raises(RuntimeError, match="shape of indices"):
    TF.max_unpool2d(torch.tensor(x), torch.zeros(1, 1, 2, 3, dtype=torch.long), 2)
  with pytest.raises(ValueError, match="jaxops.torch.max_unpool2d: argument `indices`"):
    F.max_unpool2d(x, np.zeros((1, 1, 2, 3), np.int64), 2)
  with pytest.raises(NotImplementedError):
    TF.max_unpool2d(torch.tensor(i), torch.tensor(i), 2)
  with pytest.raises(TypeError, match="jaxops.torch.max_unpool2d: argument `input`"):
    F.max_unpool2d(i, i, 2)
  with pytest.raises(NotImplementedError):
    TF.adaptive_max_pool2d(torch.tensor(i), 2)
  with pytest.raises(TypeError, match="jaxops.torch.adaptive_max_pool2d: argument `input`"):
    F.adaptive_max_pool2d(i, 2)
  with pytest.raises(TypeError, match="jaxops.torch.adaptive_max_pool2d: argument `output_size`"):
    jax.jit(lambda v, s: F.adaptive_max_pool2d(v, s))(x, 2)


def test_numerical_gradients_forward_and_reverse():
  """jax.test_util.check_grads (forward and reverse mode) through both max_unpool
  paths (windows that do not overlap; overlapping ones) and adaptive_max_pool."""
  from jax.test_util import check_grads
  rng = np.random.default_rng(16)
  x = rng.standard_normal((2, 3, 4, 5))
  for window in [(2, 2, 0), (3, 2, 1)]:
    y, i = TF.max_pool2d(torch.tensor(x), *window, return_indices=True)
    check_grads(lambda v, i=i, w=window: F.max_unpool2d(v, i.numpy(), *w, output_size=(4, 5)),
                (y.numpy(),), order=1, modes=("fwd", "rev"))
  check_grads(lambda v: F.adaptive_max_pool2d(v, (3, 2)), (x,), order=1, modes=("fwd", "rev"))
  # Windows scanned one axis at a time (16 x 8 taps), against torch.autograd as well.
  x = rng.standard_normal((1, 2, 16, 16))
  check_grads(lambda v: F.adaptive_max_pool2d(v, (1, 2)), (x,), order=1, modes=("fwd", "rev"))
  xt = torch.tensor(x, requires_grad=True)
  TF.adaptive_max_pool2d(xt, (1, 2)).sum().backward()
  np.testing.assert_array_equal(jax.grad(lambda v: jnp.sum(F.adaptive_max_pool2d(v, (1, 2))))(x),
                                xt.grad.numpy())


@pytest.mark.parametrize("size", [(3, 2), 9, (5, 7)])
def test_adaptive_max_pool_uneven_windows_split_scan_matches_torch(size):
  """Uneven windows gather their taps; the maximum and its position each come from a gather of
  their own (one shared gather ran 3 times slower). Data with ties, NaN and +-inf, windows of
  both sizes (more taps than one scan pass takes, and fewer), values, indices and gradients."""
  rng = np.random.default_rng(31)
  x = rng.integers(-2, 3, (2, 3, 56, 47)).astype(np.float64)
  x[rng.random(x.shape) < 0.01] = np.nan
  x[rng.random(x.shape) < 0.01] = -np.inf
  x[rng.random(x.shape) < 0.01] = np.inf
  yt, it = TF.adaptive_max_pool2d(torch.tensor(x), size, True)
  y, i = jax.jit(lambda a: F.adaptive_max_pool2d(a, size, True))(x)
  np.testing.assert_array_equal(np.asarray(y), yt.numpy())
  np.testing.assert_array_equal(np.asarray(i), it.numpy())
  xf = np.random.default_rng(32).standard_normal((2, 3, 56, 47))
  tx = torch.tensor(xf, requires_grad=True)
  (TF.adaptive_max_pool2d(tx, size) ** 2).sum().backward()
  g = jax.grad(lambda a: jnp.sum(F.adaptive_max_pool2d(a, size) ** 2))(xf)
  np.testing.assert_allclose(np.asarray(g), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,size", [((2, 3, 8, 12), (4, 3)), ((2, 2, 4, 6, 4), (2, 3, 2)),
                                        ((3, 2, 12), 4)])
def test_adaptive_max_pool_tiled_windows_match_torch(shape, size):
  """Windows that tile the input (kernel = stride) scan without the NaN test and fix the
  windows holding NaN afterwards, only when there is one: values, indices and gradients
  (NaN windows send theirs to the last NaN) against torch, both with NaN (several per window)
  and without, jitted and under vmap (the fix is a primitive with its own batching rule)."""
  nd = len(shape) - 2
  name = f"adaptive_max_pool{nd}d"
  from jaxops import torch as module
  assert module._amax_tiling(module._amax_config(name, nd, shape, size, True).axes)
  rng = np.random.default_rng(41 + nd)
  base = rng.integers(-2, 3, shape).astype(np.float64)
  nan = base.copy()
  nan[rng.random(shape) < 0.2] = np.nan
  nan[rng.random(shape) < 0.05] = np.inf
  tf, jf = getattr(TF, name), getattr(F, name)
  fwd = jax.jit(lambda a: jf(a, size, True))
  grad = jax.jit(jax.grad(lambda a, w: jnp.sum(jf(a, size) * w)))
  for x in (base, nan, rng.standard_normal(shape)):
    xt = torch.tensor(x, requires_grad=True)
    yt, it = tf(xt, size, True)
    w = rng.standard_normal(tuple(yt.shape))
    (yt * torch.tensor(w)).sum().backward()
    y, i = fwd(x)
    np.testing.assert_array_equal(np.asarray(y), yt.detach().numpy())
    np.testing.assert_array_equal(np.asarray(i), it.numpy())
    np.testing.assert_array_equal(np.asarray(grad(x, w)), xt.grad.numpy())
    yv, iv = jax.vmap(lambda a: jf(a, size, True))(x)
    np.testing.assert_array_equal(np.asarray(iv), it.numpy())
    gv = jax.vmap(grad)(x[:, None], w[:, None])[:, 0]
    np.testing.assert_array_equal(np.asarray(gv), xt.grad.numpy())
