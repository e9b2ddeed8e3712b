"""MaxPool, MaxUnpool, LpPool (and the global pools) against independent implementations on seeded
random configurations.

Oracles: a brute-force loop written here from the spec text (every configuration), onnx.reference
and onnxruntime (float32; every configuration where they have no known bug, listed in
docs/DEVIATIONS.md and pinned in tests/test_max_pool.py), and PyTorch's max_pool{1,2,3}d with
return_indices, max_unpool{1,2,3}d and lp_pool{1,2,3}d on what they can express. jaxops runs
through jaxops.onnx.Backend, so that every version adapter is exercised.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import jax
import jax.numpy as jnp
import jaxops
from jaxops.onnx import _registry
from _together import run_together

N_CHUNKS = 6
OPTIONS = ort.SessionOptions()
OPTIONS.log_severity_level = 4

# --- the spec text, as brute-force loops --------------------------------------------------------


def spec_lengths(n, k, s, d, auto_pad, ceil_mode, pb, pe):
  """(out, pad_begin) along one axis by the MaxPool-22 / LpPool-22 formulas."""
  ext = d * (k - 1) + 1
  if auto_pad == "VALID":
    return math.floor((n - ext) / s) + 1, 0
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = math.ceil(n / s)
    total = max(0, (out - 1) * s + ext - n)
    return out, (total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
  val = (n + pb + pe - ext) / s + 1
  out = math.ceil(val) if ceil_mode else math.floor(val)
  if ceil_mode and (out - 1) * s >= n + pb:  # windows that would start in the right padding
    out -= 1
  return out, pb


def _windows(cfg):
  a = cfg["attrs"]
  nd = len(a["kernel_shape"])
  pads = a.get("pads", [0] * 2 * nd)
  strides = a.get("strides", [1] * nd)
  dil = a.get("dilations", [1] * nd)
  plans = [spec_lengths(cfg["shape"][2 + i], a["kernel_shape"][i], strides[i], dil[i],
                        a.get("auto_pad", "NOTSET"), bool(a.get("ceil_mode", 0)), pads[i],
                        pads[nd + i]) for i in range(nd)]
  return a["kernel_shape"], strides, dil, plans


def spec_max_pool(x, cfg):
  """(Y, Indices): taps in window order; the first in the input starts, strictly greater wins."""
  kernel, strides, dil, plans = _windows(cfg)
  spatial = x.shape[2:]
  nd = len(kernel)
  order = cfg["attrs"].get("storage_order", 0)
  y = np.zeros(x.shape[:2] + tuple(p[0] for p in plans), x.dtype)
  idx = np.zeros(y.shape, np.int64)
  plane = math.prod(spatial)
  for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
    for o in itertools.product(*[range(p[0]) for p in plans]):
      best = where = None
      for j in itertools.product(*[range(k) for k in kernel]):
        pos = [o[i] * strides[i] - plans[i][1] + j[i] * dil[i] for i in range(nd)]
        if not all(0 <= pos[i] < spatial[i] for i in range(nd)):
          continue
        v = x[(n, c) + tuple(pos)]
        if best is None or v > best:
          best, where = v, pos
      if best is None:
        raise ZeroDivisionError("a window covers no input element")
      y[(n, c) + o] = best
      flat = 0
      for i in (range(nd) if order == 0 else reversed(range(nd))):
        flat = flat * spatial[i] + where[i]
      idx[(n, c) + o] = (n * x.shape[1] + c) * plane + flat
  return y, idx


def spec_lp_pool(x, cfg):
  kernel, strides, dil, plans = _windows(cfg)
  p = cfg["attrs"].get("p", 2)
  spatial = x.shape[2:]
  nd = len(kernel)
  y = np.zeros(x.shape[:2] + tuple(q[0] for q in plans))
  for o in itertools.product(*[range(q[0]) for q in plans]):
    total = np.zeros(x.shape[:2])
    for j in itertools.product(*[range(k) for k in kernel]):
      pos = [o[i] * strides[i] - plans[i][1] + j[i] * dil[i] for i in range(nd)]
      if all(0 <= pos[i] < spatial[i] for i in range(nd)):  # padding adds |0| ** p = 0
        total += np.abs(x[(slice(None), slice(None)) + tuple(pos)].astype(np.float64)) ** p
    y[(slice(None), slice(None)) + o] = total ** (1.0 / p)
  return y


# --- random configurations ----------------------------------------------------------------------


def random_config(rng, op):
  versions = {"MaxPool": (1, 8, 10, 11, 12, 22), "LpPool": (1, 2, 11, 18, 22)}[op]
  version = int(rng.choice(versions))
  with_dil = version >= (10 if op == "MaxPool" else 18)
  nd = int(rng.choice([1, 2, 2, 3]))
  kernel = [int(v) for v in rng.integers(1, 4, nd)]
  strides = [int(v) for v in rng.integers(1, 4, nd)]
  dilations = [int(v) for v in rng.integers(1, 3, nd)] if with_dil else [1] * nd
  auto_pad = str(rng.choice(["NOTSET"] * 5 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
  pads = [int(rng.integers(0, k)) for k in kernel * 2] if auto_pad == "NOTSET" else None
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + [
      int(v) for v in rng.integers(1, {1: 9, 2: 7, 3: 5}[nd] + 1, nd)]
  attrs = {"kernel_shape": kernel}
  if strides != [1] * nd or rng.integers(0, 2):
    attrs["strides"] = strides
  if auto_pad != "NOTSET" or rng.integers(0, 4) == 0:
    attrs["auto_pad"] = str(rng.choice(["NOTSET", ""])) if auto_pad == "NOTSET" else auto_pad
  if pads is not None and (any(pads) or rng.integers(0, 2)):
    attrs["pads"] = pads
  if with_dil:
    if dilations != [1] * nd or rng.integers(0, 2):
      attrs["dilations"] = dilations
    if rng.integers(0, 2):
      attrs["ceil_mode"] = int(rng.integers(0, 2))
  outputs = 1
  if op == "MaxPool" and version >= 8:
    outputs = int(rng.integers(1, 3))
    if rng.integers(0, 2):
      attrs["storage_order"] = int(rng.integers(0, 2))
  if op == "LpPool":
    attrs["p"] = float(rng.integers(1, 5)) if version == 1 else int(rng.integers(1, 5))
  cfg = dict(op=op, version=version, shape=shape, attrs=attrs, outputs=outputs)
  if any(d * (k - 1) + 1 > n + (pads or [0] * 2 * nd)[i] + (pads or [0] * 2 * nd)[nd + i]
         for i, (n, k, d) in enumerate(zip(shape[2:], kernel, dilations))):
    return None
  _, _, _, plans = _windows(cfg)
  if any(p[0] <= 0 for p in plans):
    return None
  if op == "MaxPool":
    try:
      spec_max_pool(np.zeros(shape), cfg)
    except ZeroDivisionError:
      return None
  return cfg


def configs(op, seed, count):
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < count:
    cfg = random_config(rng, op)
    if cfg is not None:
      cfg["seed"] = seed + len(out)
      out.append(cfg)
  return out


# enough that each oracle compares at least 300 (onnxruntime has no LpPool-1 kernel, and each
# oracle skips its known deviations)
MAX_CONFIGS = configs("MaxPool", 13000, 420)
LP_CONFIGS = configs("LpPool", 14000, 640)


def make_model(cfg, elem=TensorProto.FLOAT):
  names = ["y", "indices"][:cfg["outputs"]]
  node = helper.make_node(cfg["op"], ["x"], names, **cfg["attrs"])
  rank = len(cfg["shape"])
  outs = [helper.make_tensor_value_info("y", elem, [f"y{i}" for i in range(rank)])]
  if cfg["outputs"] == 2:
    outs.append(helper.make_tensor_value_info("indices", TensorProto.INT64,
                                              [f"y{i}" for i in range(rank)]))
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, cfg["shape"])],
                            outs)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg["version"])])
  model.ir_version = 10
  return model


def _args(cfg):
  a = cfg["attrs"]
  nd = len(a["kernel_shape"])
  return (a.get("auto_pad", "NOTSET") or "NOTSET", a.get("dilations", [1] * nd),
          bool(a.get("ceil_mode", 0)), a.get("strides", [1] * nd), nd)


def max_reference_bug(cfg):
  """Why onnx.reference is known to be wrong on this MaxPool ``cfg`` (docs/DEVIATIONS.md)."""
  auto_pad, dil, ceil_mode, strides, nd = _args(cfg)
  if all(d == 1 for d in dil) and all(s == 1 for s in strides):
    return "unstrided path: pads of 1-D/3-D ignored, NaN dropped, Indices in the output shape"
  if auto_pad == "SAME_LOWER":
    return "SAME_LOWER: floor(n / s) windows, the odd padding at the end"
  if auto_pad == "SAME_UPPER" and any(
      (math.ceil(n / s) - 1) * s + d * (k - 1) + 1 < n
      for n, k, s, d in zip(cfg["shape"][2:], cfg["attrs"]["kernel_shape"], strides, dil)):
    return "negative SAME padding"
  return None


def max_ort_deviation(cfg):
  """Why onnxruntime is known to differ from the spec text on this MaxPool ``cfg``."""
  auto_pad, dil, ceil_mode, strides, nd = _args(cfg)
  if auto_pad != "NOTSET" and (ceil_mode or any(d > 1 for d in dil)):
    return "auto_pad with ceil_mode or dilations"
  if auto_pad.startswith("SAME") and any(
      (math.ceil(n / s) - 1) * s + k < n
      for n, k, s in zip(cfg["shape"][2:], cfg["attrs"]["kernel_shape"], strides)):
    return "negative SAME padding: refused"
  return None


def run_adapters(cfgs, xs):
  """Each configuration through its version's adapter, ten to one jax.jit (compiles dominate)."""
  def call(c):
    adapter = _registry.ADAPTERS[(c["op"], onnx.defs.get_schema(c["op"], c["version"],
                                                               "").since_version)]
    return lambda v: adapter.fn([v], dict(c["attrs"]))[:c["outputs"]]

  return [[np.asarray(o) for o in outs]
          for outs in run_together([call(c) for c in cfgs], xs, 10)]


def _max_input(cfg):
  x = np.random.default_rng(cfg["seed"]).standard_normal(cfg["shape"]).astype(np.float32)
  return np.round(x * 2) if cfg["seed"] % 2 else x  # ties: the first maximum wins


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(N_CHUNKS))
def test_max_pool_sweep(chunk):
  cfgs = MAX_CONFIGS[chunk::N_CHUNKS]
  xs = [_max_input(c) for c in cfgs]
  for cfg, x, got in zip(cfgs, xs, run_adapters(cfgs, xs)):
    model = make_model(cfg)
    want = spec_max_pool(x, cfg)[:cfg["outputs"]]
    for g, w in zip(got, want):
      assert g.dtype == w.dtype, cfg
      np.testing.assert_array_equal(g, w, err_msg=str(cfg))
    if max_reference_bug(cfg) is None:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ReferenceEvaluator(model).run(None, {"x": x})
      for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r, err_msg=f"reference {cfg}")
    if max_ort_deviation(cfg) is None:
      sess = ort.InferenceSession(model.SerializeToString(), OPTIONS,
                                  providers=["CPUExecutionProvider"])
      for g, r in zip(got, sess.run(None, {"x": x})):
        np.testing.assert_array_equal(g, r, err_msg=f"onnxruntime {cfg}")


def lp_reference_bug(cfg):
  """Why onnx.reference is known to be wrong on this LpPool ``cfg`` (docs/DEVIATIONS.md)."""
  a = cfg["attrs"]
  auto_pad, dil, ceil_mode, strides, nd = _args(cfg)
  kernel, strides, dil, plans = _windows(cfg)
  pads = a.get("pads", [0] * 2 * nd)
  for i, (out, pb) in enumerate(plans):
    ext = dil[i] * (kernel[i] - 1) + 1
    if auto_pad == "NOTSET" and (out - 1) * strides[i] + ext > cfg["shape"][2 + i] + pb + \
        pads[nd + i]:
      return "ceil_mode window past the padded input: mean of the inside times the kernel size"
  if auto_pad != "NOTSET" and (ceil_mode or any(d > 1 for d in dil)):
    return "auto_pad with ceil_mode or dilations"
  if auto_pad.startswith("SAME") and any(
      (math.ceil(n / s) - 1) * s + k < n
      for n, k, s in zip(cfg["shape"][2:], a["kernel_shape"], strides)):
    return "negative SAME padding: refused"
  return None


def lp_ort_deviation(cfg):
  auto_pad, dil, ceil_mode, strides, nd = _args(cfg)
  if cfg["version"] < 11:
    return "no LpPool-1 kernel (LpPool-2 runs; the sweep compares 11+ only)"
  if auto_pad != "NOTSET" and (ceil_mode or any(d > 1 for d in dil)):
    return "auto_pad with ceil_mode or dilations"
  if auto_pad.startswith("SAME") and any(
      (math.ceil(n / s) - 1) * s + k < n
      for n, k, s in zip(cfg["shape"][2:], cfg["attrs"]["kernel_shape"], strides)):
    return "negative SAME padding: refused"
  return None


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(N_CHUNKS))
def test_lp_pool_sweep(chunk):
  cfgs = LP_CONFIGS[chunk::N_CHUNKS]
  xs = [np.random.default_rng(c["seed"]).standard_normal(c["shape"]).astype(np.float32)
        for c in cfgs]
  for cfg, x, got in zip(cfgs, xs, run_adapters(cfgs, xs)):
    (g,) = got
    assert g.dtype == np.float32
    model = make_model(cfg)
    np.testing.assert_allclose(g, spec_lp_pool(x, cfg), rtol=2e-5, atol=1e-6, err_msg=str(cfg))
    if lp_reference_bug(cfg) is None:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
      np.testing.assert_allclose(g, ref, rtol=2e-5, atol=1e-6, err_msg=f"reference {cfg}")
    if lp_ort_deviation(cfg) is None:
      sess = ort.InferenceSession(model.SerializeToString(), OPTIONS,
                                  providers=["CPUExecutionProvider"])
      np.testing.assert_allclose(g, sess.run(None, {"x": x})[0], rtol=2e-5, atol=1e-6,
                                 err_msg=f"onnxruntime {cfg}")


def test_max_pool_sweep_covers_enough():
  assert sum(max_reference_bug(c) is None for c in MAX_CONFIGS) >= 300
  assert sum(max_ort_deviation(c) is None for c in MAX_CONFIGS) >= 300
  assert sum(c["outputs"] == 2 for c in MAX_CONFIGS) >= 100
  assert sum(c["attrs"].get("storage_order", 0) == 1 and c["outputs"] == 2
             for c in MAX_CONFIGS) >= 25
  assert sum(bool(c["attrs"].get("ceil_mode")) for c in MAX_CONFIGS) >= 40
  assert sum(len(c["attrs"]["kernel_shape"]) == 3 for c in MAX_CONFIGS) >= 40


def test_lp_pool_sweep_covers_enough():
  assert sum(lp_reference_bug(c) is None for c in LP_CONFIGS) >= 300
  assert sum(lp_ort_deviation(c) is None for c in LP_CONFIGS) >= 300
  assert {c["attrs"]["p"] for c in LP_CONFIGS} == {1, 2, 3, 4}


# --- PyTorch: max_pool{1,2,3}d with return_indices, max_unpool{1,2,3}d, lp_pool{1,2,3}d ----------


def _torch_configs(seed, count):
  """Symmetric pads <= kernel / 2 (PyTorch's limit), strides, dilations, ceil_mode."""
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < count:
    nd = int(rng.integers(1, 4))
    kernel = [int(v) for v in rng.integers(1, 4, nd)]
    strides = [int(v) for v in rng.integers(1, 4, nd)]
    dil = [int(v) for v in rng.integers(1, 3, nd)]
    pad = [int(rng.integers(0, k // 2 + 1)) for k in kernel]
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + [
        int(d * (k - 1) + 1 + rng.integers(0, 4)) for k, d in zip(kernel, dil)]
    out.append((shape, kernel, strides, dil, pad, bool(rng.integers(0, 2))))
  return out


# Torch's sweep is on top of the 330 configurations against the spec loop, onnx.reference and
# onnxruntime above; 100 here (gradients on 40) keep the suite inside CI's time. The same tests
# on seeds 15001-15009 (1350 more configurations, gradients on 360 of them, with lp_pool's) agreed.
TORCH_CONFIGS = _torch_configs(15000, 100)


@pytest.mark.slow
def test_max_pool_against_torch():
  """Values, indices (torch's are per (n, c) plane: add the plane offset) and gradients."""
  for i in range(0, len(TORCH_CONFIGS), 10):
    group = TORCH_CONFIGS[i:i + 10]
    xs = [np.random.default_rng(i + j).standard_normal(c[0]) for j, c in enumerate(group)]

    with_grad = i < 40  # gradients on the first 40 configurations (compiling them dominates)

    def run(values, group=group, with_grad=with_grad):
      outs = []
      for v, (shape, kernel, strides, dil, pad, ceil) in zip(values, group):
        kw = dict(strides=strides, pads=pad + pad, dilations=dil, ceil_mode=ceil)
        y, idx = jaxops.max_pool(v, kernel, return_indices=True, **kw)
        w = jnp.cos(jnp.arange(y.size, dtype=v.dtype)).reshape(y.shape)
        grad = (jax.grad(lambda u: jnp.sum(jaxops.max_pool(u, kernel, **kw) * w))(v)
                if with_grad else None)
        outs.append((y, idx, grad))
      return outs

    for x, c, (y, idx, grad) in zip(xs, group, jax.jit(run)(xs)):
      shape, kernel, strides, dil, pad, ceil = c
      fn = getattr(torch.nn.functional, f"max_pool{len(kernel)}d")
      xt = torch.from_numpy(x).requires_grad_()
      ty, ti = fn(xt, kernel, strides, pad, dil, ceil_mode=ceil, return_indices=True)
      w = torch.cos(torch.arange(ty.numel(), dtype=torch.float64)).reshape(ty.shape)
      (ty * w).sum().backward()
      plane = math.prod(shape[2:])
      offset = (np.arange(shape[0] * shape[1]) * plane).reshape(shape[:2] + [1] * len(kernel))
      np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy(), err_msg=str(c))
      np.testing.assert_array_equal(np.asarray(idx), ti.numpy() + offset, err_msg=str(c))
      if with_grad:
        np.testing.assert_allclose(np.asarray(grad), xt.grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=str(c))


@pytest.mark.slow
def test_max_unpool_against_torch():
  """Indices from torch's max_pool (plus the plane offset), where the default output shape is
  the pooled input's (torch and onnxruntime read indices in a given output_size, jaxops and
  onnx.reference in the default shape: docs/DEVIATIONS.md)."""
  rng = np.random.default_rng(15500)
  usable = []
  while len(usable) < 60:  # 300 more against the ONNX oracles below
    nd = int(rng.integers(1, 4))
    kernel = [int(v) for v in rng.integers(1, 4, nd)]
    strides = [int(v) for v in rng.integers(1, 4, nd)]
    pad = [int(rng.integers(0, k // 2 + 1)) for k in kernel]
    pooled = [int(v) for v in rng.integers(1, 4, nd)]
    spatial = [(n - 1) * s - 2 * p + k for n, s, p, k in zip(pooled, strides, pad, kernel)]
    if min(spatial) >= 1:
      shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + spatial
      usable.append((shape, kernel, strides, [1] * nd, pad, False))
  for i in range(0, len(usable), 10):
    group = usable[i:i + 10]
    cases = []
    for j, (shape, kernel, strides, _, pad, _) in enumerate(group):
      x = torch.from_numpy(np.random.default_rng(i + j).standard_normal(shape))
      fn = getattr(torch.nn.functional, f"max_pool{len(kernel)}d")
      ty, ti = fn(x, kernel, strides, pad, return_indices=True)
      unfn = getattr(torch.nn.functional, f"max_unpool{len(kernel)}d")
      default = [(n - 1) * s - 2 * p + k for n, s, p, k in zip(ty.shape[2:], strides, pad,
                                                                 kernel)]
      want = unfn(ty, ti, kernel, strides, pad, output_size=default).numpy()
      plane = math.prod(default)
      offset = (np.arange(shape[0] * shape[1]) * plane).reshape(shape[:2] + [1] * len(kernel))
      cases.append((ty.numpy(), ti.numpy() + offset, kernel, strides, pad, want))

    def run(values, cases=cases):
      return [jaxops.max_unpool(v, ind, k, strides=s, pads=p + p)
              for (v, ind), (_, _, k, s, p, _) in zip(values, cases)]

    outs = jax.jit(run)([(c[0], c[1]) for c in cases])
    for got, c in zip(outs, cases):
      np.testing.assert_array_equal(np.asarray(got), c[5], err_msg=str(c[2:5]))


def test_lp_pool_against_torch():
  """lp_pool{1,2,3}d (no padding, no dilation in PyTorch); p from 1 to 4."""
  configs_ = [c for c in TORCH_CONFIGS if all(d == 1 for d in c[3])]
  for i in range(0, len(configs_), 10):
    group = configs_[i:i + 10]
    xs = [np.random.default_rng(i + j).standard_normal(c[0]) for j, c in enumerate(group)]
    ps = [1 + (i + j) % 4 for j in range(len(group))]

    def run(values, group=group, ps=ps):
      return [jaxops.lp_pool(v, c[1], p=p, strides=c[2], ceil_mode=c[5])
              for v, c, p in zip(values, group, ps)]

    for x, c, p, got in zip(xs, group, ps, jax.jit(run)(xs)):
      fn = getattr(torch.nn.functional, f"lp_pool{len(c[1])}d")
      k, st = (c[1][0], c[2][0]) if len(c[1]) == 1 else (tuple(c[1]), tuple(c[2]))
      want = fn(torch.from_numpy(x), float(p), k, st, ceil_mode=c[5]).numpy()
      # torch's lp_pool is (mean of x ** p * kernel size) ** (1 / p): signed x ** p for odd p
      # (it does not take |x|), so only p = 2 and p = 4 express ONNX's |x| ** p; and its
      # ceil_mode windows past the input are averaged over the smaller window, so no ceil_mode.
      if p % 2 == 0 and not c[5]:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12, err_msg=str(c))
      else:
        np.testing.assert_allclose(np.asarray(got), spec_lp_pool(x, {"shape": c[0], "attrs": {
            "kernel_shape": c[1], "strides": c[2], "ceil_mode": int(c[5]), "p": p}}),
            rtol=1e-10, atol=1e-12, err_msg=str(c))


# --- MaxUnpool against onnx.reference and onnxruntime -----------------------------------------


def _unpool_configs(seed, count):
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < count:
    nd = int(rng.integers(1, 4))
    kernel = [int(v) for v in rng.integers(1, 4, nd)]
    strides = [int(v) for v in rng.integers(1, 4, nd)]
    pads = [int(rng.integers(0, k)) for k in kernel * 2]
    pooled = [int(rng.integers(1, 4)) for _ in range(nd)]
    default = [(n - 1) * s - (pads[i] + pads[nd + i]) + k
               for i, (n, s, k) in enumerate(zip(pooled, strides, kernel))]
    if any(d < 1 for d in default):
      continue
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + pooled
    version = int(rng.choice([9, 11, 22]))
    out.append(dict(version=version, shape=shape, kernel=kernel, strides=strides, pads=pads,
                    default=default, seed=seed + len(out)))
  return out


UNPOOL_CONFIGS = _unpool_configs(16000, 300)


def _unpool_model(cfg):
  node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=cfg["kernel"],
                          strides=cfg["strides"], pads=cfg["pads"])
  rank = len(cfg["shape"])
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, cfg["shape"]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, cfg["shape"])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(rank)])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg["version"])])
  model.ir_version = 10
  return model


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(3))
def test_max_unpool_against_reference_and_onnxruntime(chunk):
  """Random indices in the default-shaped output (repeats included: the last writer wins)."""
  part = UNPOOL_CONFIGS[chunk::3]
  for i in range(0, len(part), 10):
    group = part[i:i + 10]
    data = []
    for c in group:
      rng = np.random.default_rng(c["seed"])
      size = c["shape"][0] * c["shape"][1] * math.prod(c["default"])
      x = rng.standard_normal(c["shape"]).astype(np.float32)
      ind = rng.integers(0, size, c["shape"]).astype(np.int64)
      data.append((x, ind))

    def run(values, group=group):
      outs = []
      for (x, ind), c in zip(values, group):
        adapter = _registry.ADAPTERS[("MaxUnpool", c["version"])]
        outs.append(adapter.fn([x, ind], {"kernel_shape": c["kernel"], "strides": c["strides"],
                                          "pads": c["pads"]})[0])
      return outs

    for (x, ind), c, got in zip(data, group, jax.jit(run)(data)):
      model = _unpool_model(c)
      got = np.asarray(got)
      # the spec loop: zeros, then y[I[j]] = X[j] in row-major order of X
      want = np.zeros(c["shape"][0] * c["shape"][1] * math.prod(c["default"]), np.float32)
      for j, v in zip(ind.reshape(-1), x.reshape(-1)):
        want[j] = v
      want = want.reshape(c["shape"][:2] + c["default"])
      np.testing.assert_array_equal(got, want, err_msg=str(c))
      ref = ReferenceEvaluator(model).run(None, {"x": x, "i": ind})[0]
      np.testing.assert_array_equal(got, ref, err_msg=f"reference {c}")
      sess = ort.InferenceSession(model.SerializeToString(), OPTIONS,
                                  providers=["CPUExecutionProvider"])
      np.testing.assert_array_equal(got, sess.run(None, {"x": x, "i": ind})[0],
                                    err_msg=f"onnxruntime {c}")


def _global_configs(op: str, count: int, draws: int = 2) -> list[dict]:
  """Seeded GlobalMaxPool / GlobalLpPool configurations: every version, ranks 3-5 with axes of
  1-6 (and a long one), float32 and float64, and for GlobalLpPool p of 1-4 (a float at
  version 1). ``count / draws`` static combinations (version, shape, p, dtype), each with
  ``draws`` random inputs (compiled once, one onnxruntime session: the sweep spent most of its
  time compiling a program and building a session per configuration)."""
  rng = np.random.default_rng(17 if op == "GlobalMaxPool" else 18)
  # onnxruntime runs GlobalLpPool-2 only: half the configurations
  versions = (1, 22) if op == "GlobalMaxPool" else (2, 1, 2, 22)
  out = []
  for i in range(count // draws):
    rank = int(rng.integers(3, 6))
    shape = [int(v) for v in rng.integers(1, 7, rank)]
    if i % 10 == 0:
      shape[-1] = 97
    version = int(versions[i % len(versions)])
    attrs: dict = {}
    if op == "GlobalLpPool":
      p = int(rng.integers(1, 5))
      attrs = {"p": float(p) if version == 1 else p}
    for d in range(draws):
      out.append(dict(op=op, version=version, shape=shape, attrs=attrs, seed=i * draws + d,
                      static=i, dtype=np.float64 if i % 5 == 4 else np.float32))
  return out


def _global_outputs(cfgs: list[dict], xs: list[np.ndarray], size: int = 30) -> list[np.ndarray]:
  """Each configuration through its version's adapter: ``size`` static combinations to one
  jax.jit, compiled once and run on each draw (the draws of a combination share its shapes),
  instead of one program per combination (compiling dominates the sweep)."""
  draws = [[i for i, c in enumerate(cfgs) if c["static"] == s]
           for s in dict.fromkeys(c["static"] for c in cfgs)]
  out: list = [None] * len(cfgs)
  for k in range(0, len(draws), size):
    chunk = draws[k:k + size]
    first = [cfgs[d[0]] for d in chunk]

    def run(values, first=first):
      return [_registry.ADAPTERS[(c["op"], c["version"])].fn([v], dict(c["attrs"]))[0]
              for v, c in zip(values, first)]

    fn = jax.jit(run)
    for j in range(len(chunk[0])):
      for d, y in zip(chunk, fn([xs[d[j]] for d in chunk])):
        out[d[j]] = np.asarray(y)
  return out


@pytest.mark.slow
@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalLpPool"])
def test_global_pools_against_reference_and_onnxruntime(op):
  """300 seeded configurations per op against NumPy's formula, onnxruntime (float32
  GlobalMaxPool, GlobalLpPool-2: its kernels) and onnx.reference (GlobalMaxPool on 4-D inputs: it
  has no GlobalLpPool, and reduces the wrong axes of other ranks, docs/DEVIATIONS.md)."""
  cfgs = _global_configs(op, 300)
  assert len(cfgs) == 300 and len({c["static"] for c in cfgs}) == 150
  compared = {"onnxruntime": 0, "reference": 0}
  sessions: dict = {}
  xs = [np.random.default_rng(c["seed"]).standard_normal(c["shape"]).astype(c["dtype"])
        for c in cfgs]
  for c, x, got in zip(cfgs, xs, _global_outputs(cfgs, xs)):
    shape, version, attrs = c["shape"], c["version"], c["attrs"]
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    out = shape[:2] + [1] * (len(shape) - 2)
    elem = TensorProto.FLOAT if c["dtype"] == np.float32 else TensorProto.DOUBLE
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, out)]),
        opset_imports=[helper.make_opsetid("", version)])
    model.ir_version = 10
    assert got.dtype == x.dtype and got.shape == tuple(out), c
    axes = tuple(range(2, len(shape)))
    if op == "GlobalMaxPool":
      want = np.max(x, axis=axes, keepdims=True)
    else:
      p = int(attrs["p"])
      want = np.sum(np.abs(x.astype(np.float64)) ** p, axis=axes, keepdims=True) ** (1 / p)
    tol = 1e-6 if c["dtype"] == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(c))
    runs_ort = c["dtype"] == np.float32 and (op == "GlobalMaxPool" or version == 2)
    if runs_ort:
      if c["static"] not in sessions:
        sessions[c["static"]] = ort.InferenceSession(model.SerializeToString(), OPTIONS,
                                                     providers=["CPUExecutionProvider"])
      np.testing.assert_allclose(got, sessions[c["static"]].run(None, {"x": x})[0], rtol=1e-5,
                                 atol=1e-6, err_msg=f"onnxruntime {c}")
      compared["onnxruntime"] += 1
    if op == "GlobalMaxPool" and len(shape) == 4:
      ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
      np.testing.assert_array_equal(got, ref, err_msg=f"reference {c}")
      compared["reference"] += 1
  assert compared["onnxruntime"] >= (200 if op == "GlobalMaxPool" else 100), compared
  if op == "GlobalMaxPool":
    assert compared["reference"] >= 80, compared
