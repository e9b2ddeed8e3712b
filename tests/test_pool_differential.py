"""AveragePool against independent implementations on seeded random configurations.

Known differences from the spec text are pinned at the end (docs/DEVIATIONS.md, AveragePool).

Oracles: onnx.reference (its AveragePool_1/7/11/19 classes, which also serve opsets 10 and 22;
jaxops runs through jaxops.onnx.Backend so that every version adapter, 1/7/10/11/19/22, is
exercised too), onnxruntime (float32, where it accepts the model), PyTorch's
avg_pool{1,2,3}d (on what it can express) and, for the configurations where the reference has a
known bug (docs/DEVIATIONS.md, AveragePool), a brute-force loop written here from the spec text.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import jaxops  # noqa: E402
from jaxops.onnx import Backend  # noqa: E402

VERSIONS = (1, 7, 10, 11, 19, 22)
N_CONFIGS = 420
N_CHUNKS = 12


# --- the spec text, written as a brute-force loop -------------------------------------------------


def spec_lengths(n, k, s, d, auto_pad, ceil_mode, pb, pe):
  """(out, pb, pe) along one axis by the AveragePool-19/22 formulas."""
  ext = d * (k - 1) + 1
  if auto_pad == "VALID":
    return math.floor((n - ext) / s) + 1, 0, 0
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = math.floor((n - 1) / s) + 1
    total = max(0, (out - 1) * s + ext - n)
    half = total // 2
    return (out, half, total - half) if auto_pad == "SAME_UPPER" else (out, total - half, half)
  val = (n + pb + pe - ext) / s + 1
  if ceil_mode:
    out = math.ceil(val)
    if (out - 1) * s >= n + pb:  # sliding windows that would start in the right padding
      out -= 1
  else:
    out = math.floor(val)
  return out, pb, pe


def spec_pool(x, kernel, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad):
  """AveragePool of an (N, C, *spatial) float64 array, one window at a time."""
  nd = len(kernel)
  spatial = x.shape[2:]
  pads = pads or [0] * 2 * nd
  plans = [spec_lengths(spatial[i], kernel[i], strides[i], dilations[i], auto_pad, ceil_mode,
                        pads[i], pads[nd + i]) for i in range(nd)]
  y = np.zeros(x.shape[:2] + tuple(p[0] for p in plans))
  for o in itertools.product(*[range(p[0]) for p in plans]):
    total = np.zeros(x.shape[:2])
    count = 0
    for j in itertools.product(*[range(k) for k in kernel]):
      pos = [o[i] * strides[i] - plans[i][1] + j[i] * dilations[i] for i in range(nd)]
      inside = all(0 <= pos[i] < spatial[i] for i in range(nd))
      padded = all(-plans[i][1] <= pos[i] < spatial[i] + plans[i][2] for i in range(nd))
      if inside:
        total += x[(slice(None), slice(None)) + tuple(pos)]
      if inside or (count_include_pad and padded):
        count += 1
    if count == 0:
      raise ZeroDivisionError(f"window {o} covers no element the divisor counts")
    y[(slice(None), slice(None)) + o] = total / count
  return y


# --- random configurations --------------------------------------------------------------------


def random_config(rng):
  """A valid AveragePool configuration (version, shape, attributes), or None to draw again."""
  version = int(rng.choice(VERSIONS + (19,)))
  nd = int(rng.choice([1, 2, 2, 3]))
  limit = {1: 9, 2: 7, 3: 5}[nd]
  kernel = [int(v) for v in rng.integers(1, 4, nd)]
  strides = [int(v) for v in rng.integers(1, 4, nd)]
  dilations = [int(v) for v in rng.integers(1, 4, nd)] if version >= 19 else [1] * nd
  auto_pad = str(rng.choice(["NOTSET"] * 5 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
  pads = ([int(rng.integers(0, k)) for k in kernel * 2] if auto_pad == "NOTSET" else None)
  if version == 1 and pads is not None and rng.integers(0, 2):
    # onnx.reference counts padding at version 1 (reference_bug): half of the version-1
    # draws go unpadded, so that the reference, not only the spec loop, checks enough of them.
    pads = [0] * 2 * nd
  if version >= 19 and auto_pad != "NOTSET" and rng.integers(0, 2):
    # onnx.reference ignores dilations under auto_pad (reference_bug): half of these draws are
    # undilated, so that auto_pad at versions 19 and 22 meets the reference too.
    dilations = [1] * nd
  ceil_mode = bool(rng.integers(0, 2)) if version >= 10 else False
  cip = bool(rng.integers(0, 2)) if version >= 7 else False
  shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + [
      int(v) for v in rng.integers(1, limit + 1, nd)]
  attrs = {"kernel_shape": kernel}
  if auto_pad != "NOTSET" or rng.integers(0, 4) == 0:
    attrs["auto_pad"] = auto_pad
  if pads is not None and (any(pads) or rng.integers(0, 2)):
    attrs["pads"] = pads
  if strides != [1] * nd or rng.integers(0, 2):
    attrs["strides"] = strides
  if version >= 19 and (dilations != [1] * nd or rng.integers(0, 2)):
    attrs["dilations"] = dilations
  if version >= 10 and (ceil_mode or rng.integers(0, 2)):
    attrs["ceil_mode"] = int(ceil_mode)
  if version >= 7 and (cip or rng.integers(0, 2)):
    attrs["count_include_pad"] = int(cip)
  cfg = dict(version=version, shape=shape, attrs=attrs)
  # Keep only configurations the spec defines: every window fits the padded input and, without
  # count_include_pad, covers at least one input element.
  try:
    spec_pool(np.ones(shape), *_spec_args(cfg))
  except (ZeroDivisionError, ValueError):
    return None
  if any(v <= 0 for v in spec_output_shape(cfg)):
    return None
  p = pads or [0] * 2 * nd
  if any(d * (k - 1) + 1 > n + p[i] + p[nd + i]
         for i, (n, k, d) in enumerate(zip(shape[2:], kernel, dilations))):
    return None
  return cfg


def _spec_args(cfg):
  a = cfg["attrs"]
  nd = len(a["kernel_shape"])
  return (a["kernel_shape"], a.get("strides", [1] * nd), a.get("pads"),
          a.get("dilations", [1] * nd), a.get("auto_pad", "NOTSET"), bool(a.get("ceil_mode", 0)),
          bool(a.get("count_include_pad", 0)))


def spec_output_shape(cfg):
  kernel, strides, pads, dil, auto_pad, ceil_mode, _ = _spec_args(cfg)
  nd = len(kernel)
  pads = pads or [0] * 2 * nd
  return [spec_lengths(cfg["shape"][2 + i], kernel[i], strides[i], dil[i], auto_pad, ceil_mode,
                       pads[i], pads[nd + i])[0] for i in range(nd)]


def spec_padding(cfg):
  kernel, strides, pads, dil, auto_pad, ceil_mode, _ = _spec_args(cfg)
  nd = len(kernel)
  pads = pads or [0] * 2 * nd
  plans = [spec_lengths(cfg["shape"][2 + i], kernel[i], strides[i], dil[i], auto_pad, ceil_mode,
                        pads[i], pads[nd + i]) for i in range(nd)]
  return [p[1] for p in plans] + [p[2] for p in plans]


def reference_bug(cfg):
  """Why onnx.reference is known to be wrong on ``cfg`` (docs/DEVIATIONS.md), or None."""
  kernel, strides, pads, dil, auto_pad, ceil_mode, cip = _spec_args(cfg)
  nd = len(kernel)
  if cfg["version"] == 1 and any(spec_padding(cfg)):
    return "v1 counts the padding"
  if auto_pad != "NOTSET":
    return _auto_pad_trouble(cfg, ceil_mode_why="auto_pad with ceil_mode asserts")
  p = pads or [0] * 2 * nd
  out = spec_output_shape(cfg)
  for i in range(nd):
    ext = dil[i] * (kernel[i] - 1) + 1
    extra = (out[i] - 1) * strides[i] + ext - cfg["shape"][2 + i] - p[i] - p[nd + i]
    if extra >= 2:
      return "ceil-mode padding split over both sides"
  return None


def make_model(cfg, elem=TensorProto.DOUBLE):
  node = helper.make_node("AveragePool", ["x"], ["y"], **cfg["attrs"])
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, cfg["shape"])],
                            [helper.make_tensor_value_info(
                                "y", elem, cfg["shape"][:2] + spec_output_shape(cfg))])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg["version"])])


def configs():
  rng = np.random.default_rng(20261122)
  out = []
  while len(out) < N_CONFIGS:
    cfg = random_config(rng)
    if cfg is not None:
      cfg["seed"] = len(out)
      out.append(cfg)
  return out


CONFIGS = configs()


def test_sweep_covers_enough():
  to_reference = [c for c in CONFIGS if reference_bug(c) is None]
  assert len(to_reference) >= 300
  for version in VERSIONS:
    assert sum(c["version"] == version for c in to_reference) >= 30
  # what each newer version adds: ceil_mode at 10, dilations at 19 and 22, auto_pad at 19/22
  assert sum(c["version"] == 10 and bool(c["attrs"].get("ceil_mode")) for c in to_reference) >= 10
  for version in (19, 22):
    assert sum(c["version"] == version and any(d > 1 for d in c["attrs"].get("dilations", []))
               for c in to_reference) >= 10
  assert sum(c["version"] >= 19 and c["attrs"].get("auto_pad", "NOTSET") != "NOTSET"
             for c in to_reference) >= 10
  assert sum(len(c["attrs"]["kernel_shape"]) == 3 for c in to_reference) >= 40
  assert sum(bool(c["attrs"].get("ceil_mode")) for c in to_reference) >= 40
  assert sum(any(d > 1 for d in c["attrs"].get("dilations", [])) for c in to_reference) >= 30
  assert sum(c["attrs"].get("auto_pad", "NOTSET") != "NOTSET" for c in to_reference) >= 30
  assert sum(ort_deviation(c) is None for c in CONFIGS) >= 250


def ort_deviation(cfg):
  """Why onnxruntime is known to differ from the spec text on ``cfg``, or None."""
  if cfg["version"] == 1:
    return "no AveragePool-1 kernel"
  if _spec_args(cfg)[4] == "NOTSET":
    return None
  return _auto_pad_trouble(cfg, ceil_mode_why="auto_pad rounds up with ceil_mode")


def _auto_pad_trouble(cfg, *, ceil_mode_why):
  """What both oracles get wrong with auto_pad set (the spec text is followed), or None."""
  kernel, strides, _, dil, auto_pad, ceil_mode, _ = _spec_args(cfg)
  if any(d > 1 for d in dil):
    return "auto_pad ignores dilations"
  if ceil_mode:
    return ceil_mode_why
  if auto_pad != "VALID" and any(
      (math.ceil(n / s) - 1) * s + k < n for n, k, s in zip(cfg["shape"][2:], kernel, strides)):
    return "negative SAME padding"
  return None


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(N_CHUNKS))
def test_against_reference_and_onnxruntime(chunk):
  """Backend (all version adapters) in float64 vs onnx.reference (or the spec loop where the
  reference has a known bug) and vs onnxruntime in float32 where it implements the case."""
  ort = pytest.importorskip("onnxruntime")
  options = ort.SessionOptions()
  options.log_severity_level = 3
  for cfg in CONFIGS[chunk::N_CHUNKS]:
    # float32-representable data, so that one float64 run serves both oracles.
    x32 = np.random.default_rng(cfg["seed"]).standard_normal(cfg["shape"]).astype(np.float32)
    x = x32.astype(np.float64)
    model = make_model(cfg)
    got = Backend.run_model(model, [x])[0]
    if reference_bug(cfg) is None:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
      want = spec_pool(x, *_spec_args(cfg))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=str(cfg))
    if ort_deviation(cfg) is None:
      sess = ort.InferenceSession(make_model(cfg, TensorProto.FLOAT).SerializeToString(),
                                  options, providers=["CPUExecutionProvider"])
      np.testing.assert_allclose(got, sess.run(None, {"x": x32})[0], rtol=1e-5, atol=1e-6,
                                 err_msg=str(cfg))


@pytest.mark.parametrize("seed", range(3))
def test_against_torch(seed):
  """avg_pool{1,2,3}d: symmetric pads <= kernel / 2, ceil_mode, count_include_pad."""
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(1000 + seed)
  for _ in range(20):
    nd = int(rng.integers(1, 4))
    kernel = [int(v) for v in rng.integers(1, 5, nd)]
    strides = [int(v) for v in rng.integers(1, 4, nd)]
    pad = [int(rng.integers(0, k // 2 + 1)) for k in kernel]
    shape = [2, 3] + [int(k + rng.integers(0, 6)) for k in kernel]
    ceil_mode, cip = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    x = rng.standard_normal(shape)
    fn = {1: torch.nn.functional.avg_pool1d, 2: torch.nn.functional.avg_pool2d,
          3: torch.nn.functional.avg_pool3d}[nd]
    want = fn(torch.from_numpy(x), kernel, strides, pad, ceil_mode=ceil_mode,
              count_include_pad=cip).numpy()
    got = np.asarray(jaxops.average_pool(x, kernel, strides=strides, pads=pad + pad,
                                         ceil_mode=ceil_mode, count_include_pad=cip))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13,
                               err_msg=f"{shape} {kernel} {strides} {pad} {ceil_mode} {cip}")


def test_spec_loop_agrees_with_torch_divisor():
  """The spec loop itself against PyTorch on a ceil_mode + count_include_pad case."""
  torch = pytest.importorskip("torch")
  x = np.random.default_rng(7).standard_normal((1, 1, 6))
  want = torch.nn.functional.avg_pool1d(torch.from_numpy(x), 3, 2, 1, ceil_mode=True,
                                        count_include_pad=True).numpy()
  np.testing.assert_allclose(spec_pool(x, [3], [2], [1, 1], [1], "NOTSET", True, True), want,
                             rtol=1e-12)


# --- the reference's known bugs, pinned (docs/DEVIATIONS.md, AveragePool) -----------------------


def _ref(cfg, x):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    return ReferenceEvaluator(make_model(cfg)).run(None, {"x": x})[0]


def test_deviation_ceil_extra_padding_not_split():
  """Ceil-mode extension goes at the end; the reference splits it and shifts the windows."""
  cfg = dict(version=19, shape=[1, 1, 6],
             attrs={"kernel_shape": [5], "strides": [4], "ceil_mode": 1})
  x = np.arange(1.0, 7.0).reshape(1, 1, 6)
  # Spec: out = ceil((6 - 5) / 4) + 1 = 2 windows at 0 and 4: mean(1..5) = 3, mean(5, 6) = 5.5.
  want = np.array([[[3.0, 5.5]]])
  np.testing.assert_array_equal(Backend.run_model(make_model(cfg), [x])[0], want)
  assert not np.allclose(_ref(cfg, x), want)


def test_deviation_auto_pad_with_dilations():
  """SAME/VALID lengths and pads use the dilated extent d * (k - 1) + 1, as the spec writes."""
  x = np.arange(6.0).reshape(1, 1, 6)
  same = dict(version=19, shape=[1, 1, 6],
              attrs={"kernel_shape": [2], "dilations": [2], "auto_pad": "SAME_UPPER"})
  # ext = 3, out = ceil(6 / 1) = 6, total pad = 5 + 3 - 6 = 2 -> (1, 1); taps o - 1, o + 1.
  want = np.array([[[1.0, 1.0, 2.0, 3.0, 4.0, 4.0]]])
  np.testing.assert_array_equal(Backend.run_model(make_model(same), [x])[0], want)
  assert not np.allclose(_ref(same, x), want)
  valid = dict(version=19, shape=[1, 1, 6],
               attrs={"kernel_shape": [2], "dilations": [2], "auto_pad": "VALID"})
  # out = floor((6 - 3) / 1) + 1 = 4: means of (0, 2), (1, 3), (2, 4), (3, 5).
  want = np.array([[[1.0, 2.0, 3.0, 4.0]]])
  np.testing.assert_array_equal(Backend.run_model(make_model(valid), [x])[0], want)
  assert _ref(valid, x).shape != want.shape


def test_deviation_version_1_excludes_padding():
  """AveragePool-1: 'divided by the number of elements exclude pad'; the reference counts it."""
  cfg = dict(version=1, shape=[1, 1, 3], attrs={"kernel_shape": [2], "pads": [1, 1]})
  x = np.array([[[1.0, 2.0, 3.0]]])
  want = np.array([[[1.0, 1.5, 2.5, 3.0]]])
  np.testing.assert_array_equal(Backend.run_model(make_model(cfg), [x])[0], want)
  np.testing.assert_array_equal(_ref(cfg, x), [[[0.5, 1.5, 2.5, 1.5]]])


def test_deviation_same_padding_never_negative():
  """kernel < stride with SAME: the spec's pad formula is negative; jaxops pads 0 (as ORT)."""
  cfg = dict(version=19, shape=[1, 1, 5],
             attrs={"kernel_shape": [1], "strides": [3], "auto_pad": "SAME_UPPER"})
  x = np.arange(5.0).reshape(1, 1, 5)
  np.testing.assert_array_equal(Backend.run_model(make_model(cfg), [x])[0], [[[0.0, 3.0]]])
  with pytest.raises(ValueError):
    _ref(cfg, x)


def test_deviation_same_with_ceil_mode():
  """auto_pad with ceil_mode: the spec gives the same lengths; the reference refuses."""
  cfg = dict(version=19, shape=[1, 1, 5],
             attrs={"kernel_shape": [2], "strides": [2], "auto_pad": "SAME_LOWER", "ceil_mode": 1})
  x = np.arange(5.0).reshape(1, 1, 5)
  # out = ceil(5 / 2) = 3, total pad = 2 * 2 + 2 - 5 = 1 at the start: (0), (1, 2), (3, 4).
  np.testing.assert_array_equal(Backend.run_model(make_model(cfg), [x])[0],
                                [[[0.0, 1.5, 3.5]]])
  with pytest.raises(AssertionError):
    _ref(cfg, x)


def test_deviation_onnxruntime_valid_with_ceil_mode():
  """VALID with ceil_mode: AveragePool-11+ text gives ceil((n - e + 1) / s); ORT rounds up more."""
  ort = pytest.importorskip("onnxruntime")
  cfg = dict(version=19, shape=[1, 1, 7],
             attrs={"kernel_shape": [3], "strides": [3], "auto_pad": "VALID", "ceil_mode": 1})
  x = np.arange(7.0, dtype=np.float32).reshape(1, 1, 7)
  # ceil((7 - 3 + 1) / 3) = 2 windows: (0, 1, 2) and (3, 4, 5).
  got = Backend.run_model(make_model(cfg, TensorProto.FLOAT), [x])[0]
  np.testing.assert_array_equal(got, np.array([[[1.0, 4.0]]], np.float32))
  options = ort.SessionOptions()
  options.log_severity_level = 3
  sess = ort.InferenceSession(make_model(cfg, TensorProto.FLOAT).SerializeToString(), options,
                              providers=["CPUExecutionProvider"])
  assert sess.run(None, {"x": x})[0].shape == (1, 1, 3)


@pytest.mark.parametrize("version", [1, 22])
def test_global_average_pool_against_reference_and_onnxruntime(version):
  ort = pytest.importorskip("onnxruntime")
  rng = np.random.default_rng(version)
  for shape in ([2, 3, 5], [1, 4, 3, 6], [2, 2, 3, 2, 4]):
    x32 = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    out = shape[:2] + [1] * (len(shape) - 2)
    models = [helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, out)]),
        opset_imports=[helper.make_opsetid("", version)])
        for elem in (TensorProto.DOUBLE, TensorProto.FLOAT)]
    x = x32.astype(np.float64)
    got = Backend.run_model(models[0], [x])[0]
    want = ReferenceEvaluator(models[0]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(models[1].SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    got32 = Backend.run_model(models[1], [x32])[0]
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, sess.run(None, {"x": x32})[0], rtol=1e-5, atol=1e-6)
