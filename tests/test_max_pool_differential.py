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
import jaxops
from jaxops.onnx import _registry

N_CONFIGS = 330
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


def configs(op, seed):
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < N_CONFIGS:
    cfg = random_config(rng, op)
    if cfg is not None:
      cfg["seed"] = seed + len(out)
      out.append(cfg)
  return out


MAX_CONFIGS = configs("MaxPool", 13000)
LP_CONFIGS = configs("LpPool", 14000)


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
  out = []
  for i in range(0, len(cfgs), 10):
    group = cfgs[i:i + 10]
    adapters = [_registry.ADAPTERS[(c["op"], onnx.defs.get_schema(c["op"], c["version"],
                                                                  "").since_version)]
                for c in group]

    def run(values, group=group, adapters=adapters):
      return [a.fn([v], dict(c["attrs"]))[:c["outputs"]]
              for a, v, c in zip(adapters, values, group)]

    out += [[np.asarray(o) for o in outs] for outs in jax.jit(run)(xs[i:i + 10])]
  return out


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
  """onnx.reference's LpPool averages the in-input |x| ** p and scales by the kernel size, so it
  is right only where no window reads padding."""
  a = cfg["attrs"]
  auto_pad, dil, ceil_mode, strides, nd = _args(cfg)
  kernel, strides, dil, plans = _windows(cfg)
  for i, (out, pb) in enumerate(plans):
    ext = dil[i] * (kernel[i] - 1) + 1
    if pb > 0 or (out - 1) * strides[i] + ext - pb > cfg["shape"][2 + i]:
      return "padding: mean of the inside times the kernel size"
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
    return "no LpPool-1/2 kernel"
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
  assert sum(max_reference_bug(c) is None for c in MAX_CONFIGS) >= 150
  assert sum(max_ort_deviation(c) is None for c in MAX_CONFIGS) >= 250
  assert sum(c["outputs"] == 2 for c in MAX_CONFIGS) >= 100
  assert sum(c["attrs"].get("storage_order", 0) == 1 and c["outputs"] == 2
             for c in MAX_CONFIGS) >= 25
  assert sum(bool(c["attrs"].get("ceil_mode")) for c in MAX_CONFIGS) >= 40
  assert sum(len(c["attrs"]["kernel_shape"]) == 3 for c in MAX_CONFIGS) >= 40


def test_lp_pool_sweep_covers_enough():
  assert sum(lp_reference_bug(c) is None for c in LP_CONFIGS) >= 100
  assert sum(lp_ort_deviation(c) is None for c in LP_CONFIGS) >= 150
  assert {c["attrs"]["p"] for c in LP_CONFIGS} == {1, 2, 3, 4}
