"""jaxops.cast / jaxops.cast_like against independent oracles.

Oracles: ml_dtypes/NumPy ``astype`` where it equals ONNX's rule, the rules of ONNX's Cast text
(tables written out here), exact rounding computed with Python fractions, onnxruntime (float32
inputs, through a Cast -> Cast model, since its Python API cannot return the narrow types) and
numerical gradients.
"""

from __future__ import annotations

from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from jax.test_util import check_grads
from onnx import TensorProto, helper

import jaxops

F8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
      ml_dtypes.float8_e5m2fnuz]
FNUZ = [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz]
NARROW_INT = {ml_dtypes.int4: (4, True), ml_dtypes.uint4: (4, False),
              ml_dtypes.int2: (2, True), ml_dtypes.uint2: (2, False)}
STD_INT = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
E8M0 = ml_dtypes.float8_e8m0fnu


@pytest.fixture(autouse=True)
def _quiet_numpy():
  # The oracles' own astype calls overflow on purpose (NaN/Inf bit patterns, saturation).
  with np.errstate(over="ignore", invalid="ignore"):
    yield


def _f64(a):
  return np.asarray(a).astype(np.float64)


def assert_same(got, want):
  """Same dtype and shape; equal values with equal signs of zero; NaN where NaN."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape
  g, w = _f64(got), _f64(want)
  both_nan = np.isnan(g) & np.isnan(w)
  ok = both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
  assert ok.all(), f"{(~ok).sum()} mismatches, e.g. got {g[~ok][:5]} want {w[~ok][:5]}"


def cast_all(x, dsts, **kw):
  """Casts ``x`` to each of ``dsts`` in one jitted computation (one compile, not one per pair)."""
  return jax.jit(lambda v: tuple(jaxops.cast(v, np.dtype(d), **kw) for d in dsts))(x)


def _random_f32_bits(n, seed):
  rng = np.random.default_rng(seed)
  return rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _random_f64(n, seed, lo=-160, hi=140):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(n) * np.exp2(rng.integers(lo, hi, n).astype(np.float64))
  return np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan]])


# --- float -> float ------------------------------------------------------------------------------


@pytest.mark.parametrize("dst", F8, ids=lambda t: np.dtype(t).name)
def test_float8_without_saturate_is_ml_dtypes_astype(dst):
  # saturate=0 is IEEE-style rounding with NaN/Inf on overflow: what ml_dtypes' astype does.
  x = _random_f32_bits(20000, 0)
  for src in (x, x.astype(np.float16)):
    with np.errstate(over="ignore", invalid="ignore"):
      want = src.astype(dst)
    got = jaxops.cast(src, np.dtype(dst), saturate=False)
    g, w = _f64(got), _f64(want)
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dst", F8 + [ml_dtypes.float4_e2m1fn], ids=lambda t: np.dtype(t).name)
def test_saturating_float8_and_float4_clamp_before_rounding(dst):
  # Cast-24+ table: [x] > FLT_MAX -> FLT_MAX, +-Inf -> +-FLT_MAX, NaN -> NaN (float4: no NaN,
  # ONNX's node cases give 0); otherwise round to nearest even.
  fmax = float(ml_dtypes.finfo(dst).max)
  x32 = _random_f32_bits(20000, 1)
  for src in (x32, _random_f64(20000, 2, -20, 20), x32.astype(np.float16),
              x32.astype(ml_dtypes.bfloat16)):
    wide = _f64(src)
    with np.errstate(over="ignore", invalid="ignore"):
      want = np.clip(wide, -fmax, fmax).astype(dst)
    if dst == ml_dtypes.float4_e2m1fn:
      want = np.where(np.isnan(wide), 0.0, _f64(want)).astype(dst)
    got = jaxops.cast(src, np.dtype(dst))
    g, w = _f64(got), _f64(want)
    np.testing.assert_array_equal(g, w)


def _nearest_even(x: float, dtype) -> float:
  """Round-to-nearest-even of x into dtype, found exactly with fractions among neighbours."""
  utype = np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint32
  approx = np.array([x]).astype(np.float32).astype(dtype)  # within a few ulps
  bits = int(approx.view(utype)[0])
  best = None
  for d in (-2, -1, 0, 1, 2):
    b = bits + d
    if not 0 <= b < 1 << (8 * np.dtype(utype).itemsize):
      continue
    v = float(np.array([b], utype).view(dtype)[0])
    if not np.isfinite(v):
      continue
    key = (abs(Fraction(v) - Fraction(x)), b & 1)
    if best is None or key < best[0]:
      best = (key, v)
  return best[1]


@pytest.mark.parametrize("dst", [np.float32, np.float16, ml_dtypes.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_float64_rounds_once(dst):
  # XLA on CPU goes float64 -> float32 -> dst (two roundings) and flushes float32 subnormals;
  # jaxops rounds float64 exactly once. Oracle: the nearest value, chosen with fractions.
  rng = np.random.default_rng(3)
  fmax = float(ml_dtypes.finfo(dst).max)
  tiny = float(ml_dtypes.finfo(dst).smallest_subnormal)
  mags = np.exp2(rng.uniform(np.log2(tiny), np.log2(fmax) - 1, 1500))
  x = mags * rng.choice([-1.0, 1.0], 1500)
  # Halfway points between neighbours of dst, nudged by one float64 ulp: double rounding traps.
  y = np.asarray(x).astype(dst)
  nxt = (y.view(np.uint16 if np.dtype(dst).itemsize == 2 else np.uint32) + 1).view(dst)
  mid = (_f64(y) + _f64(nxt)) / 2
  traps = np.concatenate([np.nextafter(mid, 0), np.nextafter(mid, np.inf)])
  traps = traps[np.isfinite(traps)]
  x = np.concatenate([x, traps])
  want = np.array([_nearest_even(float(v), dst) for v in x]).astype(dst)
  assert_same(jaxops.cast(x, np.dtype(dst)), want)


def test_float_overflow_gives_inf_and_widening_is_exact():
  assert_same(jaxops.cast(np.array([1e300, -1e300, 70000.0]), "FLOAT16"),
              np.array([np.inf, -np.inf, np.inf], np.float16))
  assert_same(jaxops.cast(np.array([1e300, -1e39]), "FLOAT"),
              np.array([np.inf, -np.inf], np.float32))
  # Every value of each narrower float type widens exactly (subnormals too: XLA on CPU flushes
  # float32/bfloat16 subnormals when it converts to float64).
  for src in F8 + [ml_dtypes.float4_e2m1fn, E8M0, ml_dtypes.bfloat16, np.float16]:
    n = 256 if np.dtype(src).itemsize == 1 else 65536
    vals = np.arange(n).astype(np.uint8 if n == 256 else np.uint16).view(src)
    if src == ml_dtypes.float4_e2m1fn:
      vals = np.arange(-6, 6.5, 0.5).astype(src)
    wide = cast_all(vals, [np.float64, np.float32])
    assert_same(wide[0], _f64(vals))
    assert_same(wide[1], vals.astype(np.float32))
  sub = np.array([1e-40, -3e-45, 1.1e-38], np.float32)
  assert_same(jaxops.cast(sub, "DOUBLE"), sub.astype(np.float64))


# --- float8e8m0 ----------------------------------------------------------------------------------

# Hand-derived from Cast-24's text: 2**e results, round_mode on the mantissa; saturate clamps
# to [2**-127, 2**127], without it out of range is NaN; range is judged on x itself.
_E8M0_X = np.array([1.0, 1.25, 1.5, 1.75, 3.0, 0.75, 2.0**127, 1.5 * 2.0**127, np.inf, 0.0,
                    2.0**-127, 2.0**-128, np.nan, -2.0], np.float32)
_E8M0_WANT = {
    ("up", True): [1, 2, 2, 2, 4, 1, 2**127, 2**127, 2**127, 2**-127, 2**-127, 2**-127, "nan",
                   2**-127],
    ("down", True): [1, 1, 1, 1, 2, 0.5, 2**127, 2**127, 2**127, 2**-127, 2**-127, 2**-127,
                     "nan", 2**-127],
    ("nearest", True): [1, 1, 2, 2, 4, 1, 2**127, 2**127, 2**127, 2**-127, 2**-127, 2**-127,
                        "nan", 2**-127],
    ("up", False): [1, 2, 2, 2, 4, 1, 2**127, "nan", "nan", "nan", 2**-127, "nan", "nan", "nan"],
    ("down", False): [1, 1, 1, 1, 2, 0.5, 2**127, "nan", "nan", "nan", 2**-127, "nan", "nan",
                      "nan"],
    ("nearest", False): [1, 1, 2, 2, 4, 1, 2**127, "nan", "nan", "nan", 2**-127, "nan", "nan",
                         "nan"],
}


def test_e8m0_float32_subnormals_and_float64_agree():
  # A float32 subnormal x in [2**-127, 2**-126) is in range; rounding up gives 2**-126.
  x = np.array([2.0**-127, 1.5 * 2.0**-127, 2.0**-126 - 2.0**-140], np.float32)
  got = _f64(jaxops.cast(x, "FLOAT8E8M0", round_mode="up"))
  np.testing.assert_array_equal(got, [2.0**-127, 2.0**-126, 2.0**-126])
  got = _f64(jaxops.cast(x, "FLOAT8E8M0", round_mode="down"))
  np.testing.assert_array_equal(got, [2.0**-127, 2.0**-127, 2.0**-127])
  # float64 inputs are read exactly: just above a power of two still rounds up.
  got = _f64(jaxops.cast(np.array([1.0 + 2.0**-40]), "FLOAT8E8M0", round_mode="up"))
  np.testing.assert_array_equal(got, [2.0])


# --- integers and bool ---------------------------------------------------------------------------


def _wrap(v: np.ndarray, bits: int, signed: bool) -> np.ndarray:
  """Keep the low ``bits`` bits of int64 ``v`` (two's complement): the spec's OOR rule."""
  m = v & ((1 << bits) - 1)
  if signed:
    m = np.where(m >= (1 << (bits - 1)), m - (1 << bits), m)
  return m


def test_int_to_int_keeps_low_bits():
  rng = np.random.default_rng(4)
  v = np.concatenate([rng.integers(-2**62, 2**62, 3000), [0, -1, 200, -56, 2**31, -2**31]])
  dsts = STD_INT + list(NARROW_INT)
  for src in (np.int64, np.uint16):
    s = v.astype(src)
    s64 = s.astype(np.int64)
    for dst, got in zip(dsts, cast_all(s, dsts)):
      if dst in NARROW_INT:
        want = _wrap(s64, *NARROW_INT[dst]).astype(dst)
      elif np.dtype(dst).itemsize == 8:
        want = s64.astype(np.uint64).astype(dst)
      else:
        want = _wrap(s64, 8 * np.dtype(dst).itemsize, np.dtype(dst).kind == "i").astype(dst)
      assert_same(got, want)
  assert_same(jaxops.cast(np.array([200], np.int16), "INT8"), np.array([-56], np.int8))


def test_narrow_ints_widen_exactly():
  dsts = [np.int8, np.int64, np.uint8, np.float32, np.float16, ml_dtypes.bfloat16,
          ml_dtypes.float8_e4m3fn]
  ranges = {src: (np.arange(-(1 << (b - 1)), 1 << (b - 1)) if signed else np.arange(1 << b))
            for src, (b, signed) in NARROW_INT.items()}
  got = jax.jit(lambda *a: [[jaxops.cast(v, np.dtype(d)) for d in dsts] for v in a])(
      *[vals.astype(src) for src, vals in ranges.items()])
  for vals, row in zip(ranges.values(), got):
    for dst, g in zip(dsts, row):
      assert_same(g, _wrap(vals, 8, False).astype(dst) if dst == np.uint8 else vals.astype(dst))


def test_bool_rules():
  f = np.array([0.0, -0.0, np.nan, np.inf, 0.5, -3.0], np.float32)
  want = np.array([False, False, True, True, True, True])
  srcs = (np.float32, np.float64, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2)
  got = jax.jit(lambda *a: tuple(jaxops.cast(v, "BOOL") for v in a))(*[f.astype(t) for t in srcs])
  for g in got:
    assert_same(g, want)
  assert_same(jaxops.cast(np.array([0, 36, -1, 256], np.int32), "BOOL"),
              np.array([False, True, True, True]))
  assert_same(jaxops.cast(np.array([0, -1, 1], ml_dtypes.int2), "BOOL"),
              np.array([False, True, True]))
  b = np.array([True, False])
  dsts = [np.float32, np.float16, np.int8, np.uint64, ml_dtypes.int4, ml_dtypes.uint2,
          ml_dtypes.float8_e4m3fnuz, ml_dtypes.float4_e2m1fn, E8M0]
  for dst, g in zip(dsts, cast_all(b, dsts)):
    assert_same(g, np.array([1, 0 if dst != E8M0 else 2.0**-127]).astype(dst))


# --- onnxruntime ----------------------------------------------------------------------------------


def _ort_roundtrip(x: np.ndarray, to: int, opset: int, **attrs) -> np.ndarray:
  """onnxruntime's Cast(x, to) then Cast back to FLOAT (its Python API lacks narrow types)."""
  nodes = [helper.make_node("Cast", ["x"], ["m"], to=to, **attrs),
           helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)]
  graph = helper.make_graph(
      nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 11
  sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                      providers=["CPUExecutionProvider"])
  return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_e8m0_matches_onnxruntime(mode):
  x = np.concatenate([_random_f32_bits(20000, 5), _E8M0_X])
  for saturate in (0, 1):
    want = _ort_roundtrip(x, 24, 24, saturate=saturate, round_mode=mode)
    got = jaxops.cast(x, "FLOAT8E8M0", saturate=bool(saturate), round_mode=mode)
    np.testing.assert_array_equal(_f64(got), _f64(want))


def test_float8_matches_onnxruntime():
  x = _random_f32_bits(20000, 6)
  for to, dst in ((17, ml_dtypes.float8_e4m3fn), (18, ml_dtypes.float8_e4m3fnuz),
                  (19, ml_dtypes.float8_e5m2), (20, ml_dtypes.float8_e5m2fnuz)):
    fmax = float(ml_dtypes.finfo(dst).max)
    for saturate in (0, 1):
      want = _f64(_ort_roundtrip(x, to, 24, saturate=saturate))
      got = _f64(jaxops.cast(x, np.dtype(dst), saturate=bool(saturate)))
      if not saturate:
        # onnxruntime departs from the table between max and the next binade (see
        # docs/DEVIATIONS.md and test_cast_versions.py); compare outside that band.
        band = (np.abs(x) > fmax) & (np.abs(x) < 2 * fmax)
        got, want = got[~band], want[~band]
      np.testing.assert_array_equal(got, want)


# --- STRING ---------------------------------------------------------------------------------------


def test_numbers_to_string_shortest_round_trip():
  x = np.array([0.1, 1e20, np.nan, -np.inf, np.inf, 1.0, 3.14159265, 1e-7, 100.0, -0.0, 1e15],
               np.float32)
  want = ["0.1", "1e+20", "NaN", "-INF", "INF", "1", "3.1415927", "1e-07", "100", "-0",
          "1e+15"]
  got = jaxops.cast(x, "STRING")
  assert isinstance(got, np.ndarray) and got.dtype == object
  assert got.tolist() == want
  assert jaxops.cast(np.array([0.1, 1 / 3]), 8).tolist() == ["0.1", "0.3333333333333333"]
  assert jaxops.cast(np.array([0.1], np.float16), "STRING").tolist() == ["0.1"]
  assert jaxops.cast(np.array([0.1], ml_dtypes.bfloat16), "STRING").tolist() == ["0.1"]
  assert jaxops.cast(np.array([[True], [False]]), "STRING").tolist() == [["1"], ["0"]]
  assert jaxops.cast(np.array([-5, 2**62]), np.str_).tolist() == ["-5", "4611686018427387904"]
  assert jaxops.cast(np.array([-8, 7], ml_dtypes.int4), "STRING").tolist() == ["-8", "7"]


def test_string_texts_read_back_to_the_same_value():
  x = _random_f32_bits(300, 7)
  texts = jaxops.cast(x, "STRING")
  back = np.asarray(jaxops.cast(texts, "FLOAT"))
  assert_same(back, x)


def test_float_to_string_matches_onnxruntime():
  x = np.concatenate([_random_f32_bits(200, 8),
                      np.array([0.1, 1e20, np.nan, -np.inf, 100.0, 1e-7], np.float32)])
  node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
      [helper.make_tensor_value_info("y", TensorProto.STRING, [x.size])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
  model.ir_version = 10
  sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                      providers=["CPUExecutionProvider"])
  want = sess.run(None, {"x": x})[0]
  got = jaxops.cast(x, "STRING")
  # onnxruntime prints at most 8 significant digits, which does not always read back to the
  # same float32; where its text does, jaxops' reads back to the same value and is no longer.
  ort_ok = np.array([np.float32(float(s)) == v for s, v in zip(want, x)]) | np.isnan(x)
  assert ort_ok.mean() > 0.9
  for ours, theirs in zip(got[ort_ok], want[ort_ok]):
    assert np.float32(float(ours)) == np.float32(float(theirs)) or ours == theirs == "NaN"
    assert len(ours) <= len(theirs)
  assert got[-6:].tolist() == want[-6:].tolist()


def test_strings_to_numbers():
  s = np.array(["1.5", "INF", "+INF", "-inf", "nAn", "+inf", "  2 ", "1e3", "-1E-5", "Infinity"])
  want = np.array([1.5, np.inf, np.inf, -np.inf, np.nan, np.inf, 2, 1000, -1e-5, np.inf],
                  np.float32)
  assert_same(jaxops.cast(s, "FLOAT"), want)
  assert_same(jaxops.cast(s.astype(object), np.float64), np.array([float(t) for t in s]))
  assert_same(jaxops.cast(np.array([b"448", b"-1e9"], object), "FLOAT8E4M3FN"),
              np.array([448, -448], np.float32).astype(ml_dtypes.float8_e4m3fn))
  assert_same(jaxops.cast(np.array(["100.5", "-7", "300", "1e3"]), "INT8"),
              np.array([100, -7, 44, -24], np.int8))
  assert_same(jaxops.cast(np.array(["9", "-9"]), "INT4"), np.array([-7, 7], ml_dtypes.int4))
  assert_same(jaxops.cast(np.array(["1", "0", "0.0", "nan", "true", "False"]), "BOOL"),
              np.array([True, False, False, True, True, False]))
  assert jaxops.cast(np.array(["a", "b"]), "STRING").tolist() == ["a", "b"]
  assert jaxops.cast_like(np.array([3.5]), np.array(["x"])).tolist() == ["3.5"]


# Decimal texts, ties among them, into the four narrow integer types (DEVIATIONS Cast #4).
_NARROW_TEXTS = ["6.8", "-10.7", "2.5", "-2.5", "3.5", "-3.5", "0.5", "-0.5", "1.5", "-1.5",
                 "7.5", "-8.5", "15.5", "-6.2", "9", "-9", "1e1", " -2.5e0 ", "0.49999", "-17.5"]


def test_strings_to_narrow_ints_round_half_even_then_wrap():
  # A string casts as its number does: ONNX's Int4/Int2 notes round to the nearest integer, ties
  # to even, then keep the low bits. The nearest integer is found exactly with fractions
  # (round() of a Fraction rounds ties to even), then wrapped.
  nearest = np.array([round(Fraction(t.strip())) for t in _NARROW_TEXTS])
  # By hand, for INT4: 6.8 -> 7; -10.7 -> -11 = 0b...10101 -> low bits 0101 = 5; 2.5 -> 2
  # (even); -2.5 -> -2; 3.5 -> 4; -3.5 -> -4; +-0.5 -> 0; +-1.5 -> +-2; 7.5 -> 8 -> -8;
  # -8.5 -> -8; 15.5 -> 16 -> 0; -6.2 -> -6; 9 -> -7; -9 -> 7; 1e1 -> 10 -> -6; -2.5 -> -2;
  # 0.49999 -> 0; -17.5 -> -18 = -18 + 32 = 14 -> -2.
  int4 = [7, 5, 2, -2, 4, -4, 0, 0, 2, -2, -8, -8, 0, -6, -7, 7, -6, -2, 0, -2]
  np.testing.assert_array_equal(_wrap(nearest, 4, True), int4)
  texts = np.array(_NARROW_TEXTS)
  for dst, (bits, signed) in NARROW_INT.items():
    want = _wrap(nearest, bits, signed).astype(dst)
    assert_same(jaxops.cast(texts, np.dtype(dst)), want)
    assert_same(jaxops.cast(texts.astype(object), np.dtype(dst)), want)
    # The same numbers as floats cast the same way (the float rule, pinned above).
    floats = np.array([float(t) for t in _NARROW_TEXTS])
    assert_same(jaxops.cast(floats, np.dtype(dst)), want)


def test_strings_to_narrow_ints_match_onnxruntime_off_ties():
  # onnxruntime rounds ties away from zero (DEVIATIONS Cast #4); elsewhere it is an oracle.
  ties = np.array([Fraction(t.strip()).denominator == 2 for t in _NARROW_TEXTS])
  texts = np.array(_NARROW_TEXTS, object)[~ties]
  for to in (TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2):
    nodes = [helper.make_node("Cast", ["x"], ["m"], to=to),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT32)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.STRING, [texts.size])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [texts.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model.ir_version = 11
    sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": texts})[0]
    got = jaxops.cast(texts, helper.tensor_dtype_to_np_dtype(to))
    np.testing.assert_array_equal(np.asarray(got).astype(np.int32), want)


def test_string_errors():
  with pytest.raises(ValueError, match=r"jaxops.cast: argument `x`: the string 'Hello' is not a"):
    jaxops.cast(np.array(["Hello"]), "FLOAT")
  with pytest.raises(ValueError, match="has no integer value"):
    jaxops.cast(np.array(["inf"]), "INT32")
  with pytest.raises(TypeError, match=r"casting to STRING runs on the host .* cannot run under "
                     r"jax.jit"):
    jax.jit(lambda v: jaxops.cast(v, "STRING"))(jnp.ones(2))
  with pytest.raises(TypeError, match="cannot run under jax.jit"):
    jax.jit(lambda v: jaxops.cast_like(v, np.array(["s"])))(jnp.ones(2))


# --- transformations -----------------------------------------------------------------------------


def _e8m0_nearest_saturate(x):
  """Cast-24, float8e8m0, nearest (ties up), saturate, for finite x > 0: x = m * 2**e with m in
  [1, 2) gives 2**e, or 2**(e + 1) when m >= 1.5; then clamped to [2**-127, 2**127]."""
  m, e = np.frexp(_f64(x))  # m in [0.5, 1)
  return np.clip(np.exp2(e - 1 + (m >= 0.75)), 2.0**-127, 2.0**127).astype(E8M0)


class CastVariantsTest(chex.TestCase):
  """Per-op behaviour, each test run eagerly and under jax.jit (chex.variants); each variant
  builds one function that returns all its casts, so that the jit variant compiles once."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_float8_special_values_table_cast24(self):
    # The rows of ONNX Cast-24's tables, written out.
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e6, -1e6], np.float32)
    nan = np.nan
    sat = {ml_dtypes.float8_e4m3fn: [0, -0.0, nan, 448, -448, 448, -448],
           ml_dtypes.float8_e4m3fnuz: [0, 0, nan, 240, -240, 240, -240],
           ml_dtypes.float8_e5m2: [0, -0.0, nan, 57344, -57344, 57344, -57344],
           ml_dtypes.float8_e5m2fnuz: [0, 0, nan, 57344, -57344, 57344, -57344]}
    nosat = {ml_dtypes.float8_e4m3fn: [0, -0.0, nan, nan, nan, nan, nan],
             ml_dtypes.float8_e4m3fnuz: [0, 0, nan, nan, nan, nan, nan],
             ml_dtypes.float8_e5m2: [0, -0.0, nan, np.inf, -np.inf, np.inf, -np.inf],
             ml_dtypes.float8_e5m2fnuz: [0, 0, nan, nan, nan, nan, nan]}
    cases = [(dst, saturate) for dst in F8 for saturate in (True, False)]
    run = self.variant(lambda v: [jaxops.cast(v, np.dtype(d), saturate=s) for d, s in cases])
    for (dst, saturate), got in zip(cases, run(x)):
      want = (sat if saturate else nosat)[dst]
      assert_same(got, np.array(want, np.float64).astype(dst))
    # -NaN keeps its sign for E4M3FN / E5M2 without saturate (table row "-NaN").
    neg = self.variant(lambda v: [jaxops.cast(v, np.dtype(d), saturate=False)
                                  for d in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)])
    for got in neg(np.array([-np.nan], np.float32)):
      assert np.asarray(got).view(np.uint8)[0] & 0x80

  @chex.variants(with_jit=True, without_jit=True)
  def test_e8m0_table(self):
    cases = sorted(_E8M0_WANT)
    run = self.variant(lambda v: [jaxops.cast(v, "FLOAT8E8M0", saturate=s, round_mode=m)
                                  for m, s in cases])
    for src in (_E8M0_X, _E8M0_X.astype(np.float64)):
      for (mode, saturate), got in zip(cases, run(src)):
        want = [np.nan if w == "nan" else float(w) for w in _E8M0_WANT[mode, saturate]]
        assert got.dtype == np.dtype(E8M0)
        np.testing.assert_array_equal(_f64(got), want, err_msg=f"{mode} {saturate}")

  @chex.variants(with_jit=True, without_jit=True)
  def test_float_to_narrow_int_rounds_half_even_then_wraps(self):
    # ONNX's Int4/Int2 notes: round to the nearest integer (ties to even), then truncate bits.
    x = np.array([-9.5, -8.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 7.4, 8.0, 8.7, 17.0, 15.5],
                 np.float32)
    r = np.round(x).astype(np.int64)  # numpy rounds half to even
    run = self.variant(lambda v: [jaxops.cast(v, np.dtype(d)) for d in NARROW_INT])
    for (dst, (bits, signed)), got in zip(NARROW_INT.items(), run(x)):
      chex.assert_trees_all_equal(got, _wrap(r, bits, signed).astype(dst), strict=True)
    # ONNX's node-case data: -9..15 as float into INT4 / UINT4.
    ints = np.arange(-9, 16).astype(np.float32)
    chex.assert_trees_all_equal(self.variant(lambda v: jaxops.cast(v, "INT4"))(ints),
                                _wrap(np.arange(-9, 16), 4, True).astype(ml_dtypes.int4),
                                strict=True)

  @chex.variants(with_jit=True, without_jit=True)
  def test_float_to_int_truncates_toward_zero(self):
    x = np.array([2.9, -2.9, 0.5, -0.5, 100.5, 127.0], np.float64)
    dsts = (np.int8, np.int32, np.int64, np.uint8)
    run = self.variant(lambda v, a, f8: [jaxops.cast(a if np.dtype(d).kind == "u" else v,
                                                     np.dtype(d)) for d in dsts]
                       + [jaxops.cast(f8, "INT32")])
    got = run(x, np.abs(x), np.array([3.75, -3.75], ml_dtypes.float8_e4m3fn))
    for dst, g in zip(dsts, got):
      want = np.trunc(np.abs(x) if np.dtype(dst).kind == "u" else x).astype(dst)
      chex.assert_trees_all_equal(g, want, strict=True)
    chex.assert_trees_all_equal(got[-1], np.array([3, -3], np.int32), strict=True)

  @chex.variants(with_jit=True, without_jit=True)
  def test_int_to_float_rounds_and_overflows_to_inf(self):
    run = self.variant(lambda a, b, c: (
        jaxops.cast(a, "FLOAT16"), jaxops.cast(b, "FLOAT"), jaxops.cast(c, "FLOAT8E4M3FN"),
        jaxops.cast(c, "FLOAT8E4M3FN", saturate=False), jaxops.cast(c, "FLOAT8E8M0")))
    f16, f32, e4, e4_nosat, e8 = run(np.array([65520, 65519, -70000], np.int32),
                                     np.array([2**64 - 1], np.uint64),
                                     np.array([300, 1000, -1000, 3, 0], np.int32))
    # float16: 65520 is halfway between 65504 (odd mantissa) and the would-be 65536 -> Inf.
    assert_same(f16, np.array([np.inf, 65504, -np.inf], np.float16))
    assert_same(f32, np.array([2.0**64], np.float32))
    # Integers into float8 follow the float8 table: 300 -> 288 (spacing 32), saturate -> 448;
    # without saturate -> NaN; float8e8m0 `up`: 3 -> 4, 0 -> 2**-127 (saturate).
    assert_same(e4, np.array([288, 448, -448, 3, 0], np.float32).astype(ml_dtypes.float8_e4m3fn))
    assert np.isnan(_f64(e4_nosat)[1:3]).all()
    assert_same(e8[3:], np.array([4, 2.0**-127]).astype(E8M0))
    assert_same(self.variant(lambda v: jaxops.cast(v, "FLOAT8E8M0"))(np.array([2**40])),
                np.array([2.0**40]).astype(E8M0))

  @chex.variants(with_jit=True, without_jit=True)
  def test_cast_like_reads_only_the_dtype(self):
    like = np.zeros((5, 5), ml_dtypes.float8_e5m2)
    x = np.array([1e6, 0.3], np.float32)
    want = np.clip(_f64(x), -57344.0, 57344.0).astype(like.dtype)  # saturate: 1e6 -> max
    want_nosat = np.array([np.inf, 0.3]).astype(like.dtype)
    run = self.variant(lambda a, b: (jaxops.cast_like(a, b),
                                     jaxops.cast_like(a, b, saturate=False)))
    for f in (run, jax.vmap(run, in_axes=(0, None))):
      sat, nosat = f(x, like)
      assert_same(sat, want)
      assert_same(nosat, want_nosat)
    h = self.variant(jaxops.cast_like)  # float -> int truncates toward zero
    a, b = np.array([1.7, -2.7]), np.zeros(3, np.int32)
    for f in (h, jax.vmap(h, in_axes=(0, None))):
      chex.assert_trees_all_equal(f(a, b), np.array([1, -2], np.int32), strict=True)
    chex.assert_trees_all_equal(jaxops.cast_like([1, 2], np.zeros(1, np.float16)),
                                np.array([1, 2], np.float16), strict=True)


def test_jit_vmap_eager_against_oracles_and_jit_does_not_retrace():
  x = _random_f32_bits(512, 9).reshape(8, 64)
  fnuz = ml_dtypes.float8_e4m3fnuz
  want_fnuz = np.clip(_f64(x), -240.0, 240.0).astype(fnuz)  # Cast-24: clamp, then round
  pos = np.abs(_random_f32_bits(800, 19))
  pos = pos[np.isfinite(pos) & (pos > 0)][:8 * 50].reshape(8, 50)
  table = np.array([np.nan if w == "nan" else float(w) for w in _E8M0_WANT["nearest", True]])
  e = np.concatenate([np.tile(_E8M0_X, (8, 1)), pos], axis=1)
  want_e8m0 = np.concatenate([np.tile(table, (8, 1)).astype(E8M0), _e8m0_nearest_saturate(pos)],
                             axis=1)

  def f(v, w):
    return jaxops.cast(v, "FLOAT8E4M3FNUZ"), jaxops.cast(w, "FLOAT8E8M0", round_mode="nearest")

  chex.clear_trace_counter()
  jitted = jax.jit(chex.assert_max_traces(f, n=1))
  for _ in range(3):  # three calls with the same shapes and options: one trace
    got = jitted(x, e)
  for results in (f(x, e), got, jax.vmap(f)(x, e), jax.jit(jax.vmap(f))(x, e)):
    assert_same(results[0], want_fnuz)
    assert_same(results[1], want_e8m0)
  ints = np.arange(-9, 7.0).reshape(4, 4)
  want = _wrap(np.arange(-9, 7), 4, True).reshape(4, 4).astype(ml_dtypes.int4)
  g = lambda v: jaxops.cast(v, "INT4")  # noqa: E731
  for got in (g(ints), jax.jit(g)(ints), jax.vmap(g)(ints)):
    assert_same(got, want)


# --- gradients ------------------------------------------------------------------------------------


def test_float_to_float_gradients_numerically():
  x = np.random.default_rng(10).standard_normal((3, 4))
  f = jax.jit(lambda v: jnp.sin(jaxops.cast(jaxops.cast(v, "FLOAT"), "DOUBLE")))
  check_grads(f, (x,), order=2, modes=("fwd", "rev"), atol=1e-3, rtol=1e-3)


def test_gradient_is_the_cotangent_cast_back():
  x = np.array([0.3, 1e6, -np.inf, 500.0], np.float32)  # saturation does not stop gradients
  ct = np.array([0.1, 2.0, -3.0, 1.0])
  for dst in ("FLOAT8E4M3FN", "BFLOAT16", "FLOAT16", "FLOAT4E2M1"):
    y, vjp = jax.vjp(lambda v, d=dst: jaxops.cast(v, d), x)
    (g,) = vjp(np.asarray(ct).astype(y.dtype))
    assert_same(g, np.asarray(ct).astype(y.dtype).astype(np.float32))
  # A positive power-of-two cotangent survives float8e8m0 (no sign, no zero).
  y, vjp = jax.vjp(lambda v: jaxops.cast(v, "FLOAT8E8M0"), np.array([3.0], np.float32))
  assert_same(vjp(np.array([2.0]).astype(y.dtype))[0], np.array([2.0], np.float32))


def test_non_float_casts_have_zero_or_no_gradient():
  x = np.array([1.5, -2.5, 0.0], np.float32)

  def f(v):  # d/dv sum(cast(cast(u, d), float) * v) = cast(cast(u, d), float): the cast adds 0
    return sum(jnp.sum(jaxops.cast(jaxops.cast(u, d), "FLOAT") * v)
               for u, d in ((v, "INT32"), (v, "INT4"), (v, "BOOL"), (jnp.abs(v), "UINT8")))

  # by hand: INT32 truncates [1, -2, 0]; INT4 rounds half to even [2, -2, 0]; BOOL [1, 1, 0];
  # UINT8 of |x| (negative -> unsigned is undefined in ONNX) truncates [1, 2, 0].
  want = np.array([1 + 2 + 1 + 1, -2 - 2 + 1 + 2, 0], np.float32)
  for grad in (jax.grad(f), jax.jit(jax.grad(f))):
    np.testing.assert_array_equal(grad(x), want)
  with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
    jax.grad(lambda v: jnp.sum(jaxops.cast(v, "FLOAT")))(np.array([1, 2], np.int32))


# --- errors ---------------------------------------------------------------------------------------


def test_argument_errors():
  x = np.ones(2, np.float32)
  with pytest.raises(ValueError, match=r"jaxops.cast: argument `to` must be an ONNX type name"):
    jaxops.cast(x, "FLOAT9")
  with pytest.raises(ValueError, match=r"argument `to` must be an ONNX TensorProto enum value in"):
    jaxops.cast(x, 99)
  with pytest.raises(TypeError, match=r"argument `to` must be an ONNX TensorProto enum value, its"):
    jaxops.cast(x, True)
  with pytest.raises(ValueError, match=r"argument `round_mode` must be one of 'up', 'down', "
                     r"'nearest'; got 'ceil'"):
    jaxops.cast(x, "FLOAT8E8M0", round_mode="ceil")
  with pytest.raises(TypeError, match=r"argument `saturate` must be a bool"):
    jaxops.cast(x, "FLOAT8E4M3FN", saturate="yes")
  with pytest.raises(TypeError, match=r"argument `saturate` must be a Python bool .* concrete"):
    jax.jit(lambda s: jaxops.cast(x, "FLOAT8E4M3FN", saturate=s))(True)
  with pytest.raises(TypeError, match=r"argument `x` has complex dtype complex64; ONNX Cast has"):
    jaxops.cast(np.ones(2, np.complex64), "FLOAT")
  with pytest.raises(TypeError, match=r"argument `to` must be a real ONNX element type"):
    jaxops.cast(x, "COMPLEX64")
  with pytest.raises(TypeError, match=r"jaxops.cast_like: argument `like` must be an array whose "
                     r"dtype is an ONNX element type"):
    jaxops.cast_like(x, np.ones(1, np.complex128))
  for name in ("FLOAT6E2M3", "FLOAT6E3M2"):
    with pytest.raises(TypeError, match=rf"argument `to`: {name} .* installed JAX/XLA cannot "
                       r"convert"):
      jaxops.cast(x, name)
  with pytest.raises(TypeError, match=r"argument `x`: FLOAT6E2M3 .* installed JAX/XLA cannot"):
    jaxops.cast(np.ones(2, ml_dtypes.float6_e2m3fn), "FLOAT")


def test_to_accepts_enum_name_and_dtype():
  x = np.array([1.25, -3.0])
  for to in (10, "FLOAT16", "float16", np.float16, jnp.float16, np.dtype("float16")):
    assert_same(jaxops.cast(x, to), x.astype(np.float16))
  assert_same(jaxops.cast(x, jnp.bfloat16), x.astype(ml_dtypes.bfloat16))


def test_subnormals_to_bool_are_true():
  # only +-0 become False; XLA's CPU comparisons read subnormals as zero, jaxops reads the bits
  from onnx.reference import ReferenceEvaluator

  for x in (np.array([1e-45, -1e-39, 0.0, -0.0, np.nan, np.inf], np.float32),
            np.array([5e-324, -2.2e-308, 0.0, -0.0, np.nan], np.float64)):
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BOOL)
    want = ReferenceEvaluator(node).run(None, {"x": x})[0]
    np.testing.assert_array_equal(want[:2], [True, True])
    np.testing.assert_array_equal(np.asarray(jaxops.cast(x, "BOOL")), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: jaxops.cast(a, "BOOL"))(x)), want)


def _int_nearest_even(n: int, dst) -> float:
  """The value of ``dst`` nearest to the integer ``n`` (ties to even), from Python integers."""
  m = ml_dtypes.finfo(dst).nmant + 1  # significant bits
  a = abs(n)
  e = a.bit_length() - m
  if e <= 0:
    return float(n)
  q, r = divmod(a, 1 << e)
  if r > (1 << (e - 1)) or (r == (1 << (e - 1)) and q & 1):
    q += 1
  return float(-(q << e) if n < 0 else q << e)


@pytest.mark.parametrize("src", [np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("dst", [ml_dtypes.bfloat16, np.float16])
def test_integers_round_once(src, dst):
  # XLA converts int32 (int64) to float32 (float64) and then to dst: two roundings. int32
  # 33685505 -> bfloat16: 2**25 + 131073, past the midpoint 2**25 + 131072, is 33816576;
  # through float32 (and in onnx.reference, whose ml_dtypes rounds the same way) 33554432.
  info = np.iinfo(src)
  rng = np.random.default_rng(8)
  lo, hi = max(int(info.min), -2 ** 62), min(int(info.max), 2 ** 62)
  v = [int(a) for a in rng.integers(lo, hi, 3000, dtype=np.int64)]
  v += [int(info.max), int(info.min), 33685505, 16777217, 2 ** 24 + 2 ** 16 + 1]
  # halfway points plus one between neighbours of dst at many magnitudes (the traps)
  m = ml_dtypes.finfo(dst).nmant + 1
  v += [(1 << k) + (1 << (k - m)) + 1 for k in range(m + 2, 8 * np.dtype(src).itemsize - 1)]
  v = [a for a in v if info.min <= a <= info.max]
  with np.errstate(over="ignore"):
    want = np.array([_int_nearest_even(a, dst) for a in v]).astype(dst)
  x = np.array(v, src)
  assert_same(jaxops.cast(x, np.dtype(dst)), want)
  if src == np.int32 and dst == ml_dtypes.bfloat16:
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)
    ref = ReferenceEvaluator(node).run(None, {"x": np.array([33685505], np.int32)})[0]
    assert float(np.asarray(ref, np.float32)[0]) == 33554432.0  # the double rounding
    assert float(np.asarray(jaxops.cast(np.array([33685505], np.int32), "BFLOAT16"),
                            np.float32)[0]) == 33816576.0


def test_64_bit_numpy_inputs_without_64_bit_types():
  # JAX narrows a 64-bit NumPy array when it takes it with 64-bit types off (int64 wraps:
  # 2**40 + 5 would become 5; float64 rounds to float32 and the cast rounds again); jaxops casts
  # such inputs as their 64-bit values.
  with jax.enable_x64(False):
    assert_same(jaxops.cast(np.array([2 ** 40 + 5, -(2 ** 40)], np.int64), "FLOAT"),
                np.array([2 ** 40 + 5, -(2 ** 40)], np.int64).astype(np.float32))
    assert_same(jaxops.cast(np.array([1.0625 + 2 ** -40]), ml_dtypes.float8_e4m3fn),
                np.array([1.125], ml_dtypes.float8_e4m3fn))
    assert_same(jaxops.cast(np.array([1 + 2 ** -8 + 2 ** -30]), ml_dtypes.bfloat16),
                np.array([_int_nearest_even(2 ** 30 + 2 ** 22 + 1, ml_dtypes.bfloat16)
                          / 2 ** 30], ml_dtypes.bfloat16))
    assert_same(jaxops.cast(np.array([2 ** 40, 0], np.int64), "BOOL"), np.array([True, False]))
    assert_same(jaxops.cast(np.array([2 ** 40 + 3, -1], np.int64), "INT8"),
                np.array([3, -1], np.int8))  # the low bits, as ONNX keeps them
    assert_same(jaxops.cast(np.array([2.9999999999, -2.9999999999]), "INT32"),
                np.array([2, -2], np.int32))  # truncated, not rounded to 3 by float32 first
    assert_same(jaxops.cast(np.array([16777217.0, -16777217.9, 1e10, np.nan]), "INT32"),
                np.array([16777217, -16777217, 2 ** 31 - 1, 0], np.int32))  # as XLA converts
    assert_same(jaxops.cast(np.array([2.0 ** 40 + 5, -(2.0 ** 40) - 3]), "INT4"),
                np.array([5, -3], ml_dtypes.int4))  # the low bits of the 64-bit value
    # DOUBLE is float32 here (JAX warns so): the one rounding is to float32, to nearest
    with pytest.warns(UserWarning, match="float64"):
      assert_same(jaxops.cast(np.array([16777217, -16777217], np.int32), "DOUBLE"),
                  np.array([16777216, -16777216], np.float32))
    with pytest.warns(UserWarning, match="float64"):
      assert_same(jaxops.cast(np.array([1 + 2 ** -23 + 2 ** -24]), "DOUBLE"),
                  np.array([1 + 2 ** -22], np.float32))
    # INT64 and UINT64 are int32 and uint32 here (JAX warns so): values past them come out as
    # the cast to INT32 / UINT32 gives them (floats saturate, integers keep their low 32 bits),
    # not as ONNX's 64-bit results (found by an audit of the default mode)
    f32 = np.array([3e9, -3e9, 5.5, -7.5], np.float32)
    u32 = np.array([3_000_000_000, 5], np.uint32)
    i32 = np.array([-1, 7], np.int32)
    for x, to, want in ((f32, "INT64", np.array([2 ** 31 - 1, -(2 ** 31), 5, -7], np.int32)),
                        (u32, "INT64", u32.astype(np.int32)),
                        (f32[2:], "UINT64", np.array([5, 0], np.uint32)),
                        (i32, "UINT64", i32.astype(np.uint32)),
                        (np.array([2 ** 40 + 5], np.int64), "INT64", np.array([5], np.int32))):
      with pytest.warns(UserWarning, match="int64"):
        assert_same(jaxops.cast(x, to), want)
      assert_same(jaxops.cast(x, to.replace("64", "32")), want)
    # NumPy scalars as 0-d arrays (JAX took them as 32-bit: np.int64(2**40 + 5) cast as 5)
    assert_same(jaxops.cast(np.int64(2 ** 40 + 5), "FLOAT"), np.float32(2 ** 40 + 5))
    assert_same(jaxops.cast(np.float64(16777217.0), "INT32"), np.int32(16777217))
    assert_same(jaxops.cast(np.float64(1 + 2 ** -8 + 2 ** -40), ml_dtypes.bfloat16),
                np.array(1 + 2 ** -7, ml_dtypes.bfloat16))
    assert_same(jaxops.cast_like(np.float64(16777217.0), np.zeros(1, np.int32)),
                np.int32(16777217))
    assert jaxops.constant_of_shape(np.array([2 ** 60, 0]),
                                    np.array([0.0])).shape == (2 ** 60, 0)  # a float32 output


def test_subnormals_to_double_without_64_bit_types_keep_their_value():
  # DOUBLE is float32 without 64-bit types; the exact widening to float64 rebuilt subnormals
  # in float arithmetic, which XLA's CPU flushed to zero in float32.
  f32 = np.array([1e-40, -1.4e-45, 1.1754942e-38, 0.5], np.float32)
  bf16 = np.array([9.18e-41, -3e-39, 1.0], ml_dtypes.bfloat16)
  with jax.enable_x64(False):
    with pytest.warns(UserWarning, match="float64"):
      assert_same(jaxops.cast(f32, "DOUBLE"), f32)
    with pytest.warns(UserWarning, match="float64"):
      assert_same(jax.jit(lambda v: jaxops.cast(v, "DOUBLE"))(bf16), bf16.astype(np.float32))
    assert_same(jaxops.cast_like(f32, np.zeros(1)), f32)  # `like` is float32 here


def test_out_of_range_floats_to_integers_saturate():
  # ONNX leaves a float outside the integer type's range undefined; jaxops saturates (XLA's
  # convert) and sends NaN to 0, where onnx.reference and onnxruntime wrap (300.0 -> uint8 44):
  # docs/DEVIATIONS.md, Cast 11.
  x = np.array([300.0, -300.0, 2.0 ** 31, -(2.0 ** 33), 1e30, -np.inf, np.inf, np.nan, -1.0])
  for dst in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
    info = np.iinfo(dst)
    want = np.clip(np.nan_to_num(np.trunc(x), nan=0.0), float(info.min), float(info.max))
    want = np.array([info.max if w >= float(info.max) else int(w) for w in want], dst)
    for src in (np.float32, np.float64):
      assert_same(jaxops.cast(x.astype(src), np.dtype(dst)), want)


@pytest.mark.parametrize("x64", [True, False])
def test_large_floats_to_narrow_ints_keep_their_own_low_bits(x64):
  # "round to the nearest integer (ties to even) and truncate": the low bits of the integer
  # itself, however large; a conversion through int32 first saturated 3e9 (and 1e20 in int64)
  vals = np.array([3e9, -3e9, 2.0 ** 31, 1e20, -1e20, 2.0 ** 24 + 3, 1e30, 12345678.0, -2.5,
                   7.5, -17.0], np.float32)

  def low_bits(v: float, bits: int, signed: bool) -> int:
    n = int(Fraction(float(v)).limit_denominator(1) if float(v).is_integer() else round(v))
    n %= 1 << bits
    return n - (1 << bits) if signed and n >= 1 << (bits - 1) else n

  with jax.enable_x64(x64):
    for name, bits, signed, dt in (("INT4", 4, True, ml_dtypes.int4),
                                   ("UINT4", 4, False, ml_dtypes.uint4),
                                   ("INT2", 2, True, ml_dtypes.int2)):
      want = np.array([low_bits(v, bits, signed) for v in vals]).astype(dt)
      assert_same(jaxops.cast(vals, name), want)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_text_reads_back_in_every_round_mode(round_mode, saturate):
  # the shortest text that reads back to nearest ("5e-38" for 2**-124) rounds up to 2**-123;
  # e8m0's text is the power of two itself, which every round mode reads back
  vals = np.arange(255, dtype=np.uint8).view(E8M0)
  text = np.asarray(jaxops.cast(vals, "STRING"))
  assert all(float(t) == float(v) for t, v in zip(text, vals.astype(np.float64)))
  back = jaxops.cast(text, E8M0, round_mode=round_mode, saturate=saturate)
  np.testing.assert_array_equal(np.asarray(back).view(np.uint8), vals.view(np.uint8))
