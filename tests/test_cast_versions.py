"""What differs between the versions of Cast, CastLike and ConstantOfShape, through the Backend.

Expected values come from the spec text of each version (the tables are written out here) and,
where it runs the model, from onnxruntime.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.defs
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from jaxops.onnx import Backend, _registry

T = TensorProto
NAN = np.nan


def _f64(a):
  return np.asarray(a).astype(np.float64)


def _model(op, opset, x_type, attrs, *, y_type=None, extra_inputs=(), shape=(5,)):
  """One-node model: input x (x_type, ``shape``), more inputs as initializers, output y."""
  names = ["x"] + [f"in{i}" for i in range(len(extra_inputs))]
  node = helper.make_node(op, names, ["y"], **attrs)
  inits = [onnx.numpy_helper.from_array(a, f"in{i}") for i, a in enumerate(extra_inputs)]
  if y_type is None:
    y_type = attrs["to"] if "to" in attrs else helper.np_dtype_to_tensor_dtype(
        extra_inputs[0].dtype)
  if isinstance(y_type, str):
    y_type = getattr(T, y_type)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", x_type, list(shape))],
      [helper.make_tensor_value_info("y", y_type, list(shape))], initializer=inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 11 if opset >= 24 else (10 if opset >= 7 else 3)
  return model


def _cast_node_run(opset, x, **attrs):
  """Cast through jaxops.onnx.Backend.run_node (no model checker: type errors are ours)."""
  node = helper.make_node("Cast", ["x"], ["y"], **attrs)
  return Backend.run_node(node, [x], opset_version=opset)[0]


def _ort(model, feeds):
  sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


# --- Cast-19/21/23 vs Cast-24+: +-Inf into the FNUZ float8 types with saturate -------------------

_INF_X = np.array([np.inf, -np.inf, 1e6, -1e6, 0.3], np.float32)
# Cast-19's table: Inf -> NaN (E4M3FNUZ, E5M2FNUZ), FLT_MAX (E4M3FN, E5M2); Cast-24's: FLT_MAX.
_CAST19 = {T.FLOAT8E4M3FN: [448, -448, 448, -448, 0.3125],
           T.FLOAT8E4M3FNUZ: [NAN, NAN, 240, -240, 0.3125],
           T.FLOAT8E5M2: [57344, -57344, 57344, -57344, 0.3125],
           T.FLOAT8E5M2FNUZ: [NAN, NAN, 57344, -57344, 0.3125]}
_CAST24 = {T.FLOAT8E4M3FN: [448, -448, 448, -448, 0.3125],
           T.FLOAT8E4M3FNUZ: [240, -240, 240, -240, 0.3125],
           T.FLOAT8E5M2: [57344, -57344, 57344, -57344, 0.3125],
           T.FLOAT8E5M2FNUZ: [57344, -57344, 57344, -57344, 0.3125]}


@pytest.mark.parametrize("opset", [19, 21, 23, 24, 25, 28])
def test_float8_saturation_of_inf_per_version(opset):
  table = _CAST19 if opset < 24 else _CAST24
  for to, want in table.items():
    for op, attrs, extra in (("Cast", {"to": to}, ()),
                             ("CastLike", {}, (np.zeros(1, helper.tensor_dtype_to_np_dtype(to)),))):
      if op == "CastLike" and opset == 28:
        continue  # CastLike-25 serves opset 28
      (y,) = Backend.run_model(_model(op, opset, T.FLOAT, attrs, extra_inputs=extra), [_INF_X])
      assert y.dtype == helper.tensor_dtype_to_np_dtype(to)
      np.testing.assert_array_equal(_f64(y), np.array(want), err_msg=f"{op}-{opset} to {to}")


@pytest.mark.parametrize("opset", [19, 21, 23, 24, 25])
def test_float8e5m2_to_itself_saturates_its_infinities(opset):
  # The saturate table (Inf -> FLT_MAX for E5M2) has no same-type exception: onnx.reference
  # applies it, onnxruntime 1.32 treats the cast as an identity (docs/DEVIATIONS.md, Cast 10).
  x = np.array([np.inf, -np.inf, np.nan, 3.0, -57344.0], np.float32)
  for saturate in (1, 0):
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=T.FLOAT8E5M2, saturate=0),
             helper.make_node("Cast", ["a"], ["b"], to=T.FLOAT8E5M2, saturate=saturate),
             helper.make_node("CastLike", ["a", "a"], ["c"], saturate=saturate),
             helper.make_node("Cast", ["b"], ["y"], to=T.FLOAT),
             helper.make_node("Cast", ["c"], ["z"], to=T.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [5])],
                              [helper.make_tensor_value_info(n, T.FLOAT, [5]) for n in "yz"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11 if opset >= 24 else 10
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = Backend.run_model(model, [x])
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)
    big = 57344.0 if saturate else np.inf
    np.testing.assert_array_equal(got[0], np.array([big, -big, np.nan, 3.0, -57344.0]))
    np.testing.assert_array_equal(_ort(model, {"x": x})[0], x)  # onnxruntime: an identity


def test_onnxruntime_agrees_except_the_fnuz_inf_rows():
  # onnxruntime applies Cast-24's row (Inf -> FLT_MAX) at opsets 19-23 too: a recorded
  # deviation (docs/DEVIATIONS.md). Every other value agrees.
  for opset in (19, 21, 23):
    for to in _CAST19:
      nodes = [helper.make_node("Cast", ["x"], ["m"], to=to),
               helper.make_node("Cast", ["m"], ["y"], to=T.FLOAT)]
      graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [5])],
                                [helper.make_tensor_value_info("y", T.FLOAT, [5])])
      model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
      model.ir_version = 10
      (ort_y,) = _ort(model, {"x": _INF_X})
      (y,) = Backend.run_model(model, [_INF_X])
      fnuz = to in (T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2FNUZ)
      keep = ~np.isinf(_INF_X) if fnuz else np.ones(5, bool)
      np.testing.assert_array_equal(y[keep], ort_y[keep])
      if fnuz:
        assert np.isnan(y[~keep]).all() and np.isfinite(ort_y[~keep]).all()


def test_no_saturate_overflow_band_follows_the_table_not_onnxruntime():
  # Cast-19+/24+ tables without saturate: [x] > FLT_MAX -> NaN (E4M3FN), Inf (E5M2), where [x]
  # is x rounded to the target's mantissa. onnxruntime gives 448 for 490 (which rounds to 480)
  # and NaN for 65186 (which rounds to 65536): recorded in docs/DEVIATIONS.md.
  x = np.array([490.0, 460.0, 65186.0, -65519.0, 60000.0], np.float32)
  (a,) = Backend.run_model(_model("Cast", 24, T.FLOAT, {"to": T.FLOAT8E4M3FN, "saturate": 0}),
                           [x])
  np.testing.assert_array_equal(_f64(a)[:2], [NAN, 448])
  (b,) = Backend.run_model(_model("Cast", 24, T.FLOAT, {"to": T.FLOAT8E5M2, "saturate": 0}), [x])
  np.testing.assert_array_equal(_f64(b)[2:], [np.inf, -np.inf, 57344])


# --- Cast-1: `to` is a string; Cast-6..: an enum; STRING from Cast-9 ------------------------------


def test_cast1_takes_a_type_name():
  x = np.array([1.5, 70000.0, -2.7], np.float32)
  for opset in (1, 5):
    (y,) = Backend.run_model(_model("Cast", opset, T.FLOAT, {"to": "FLOAT16"}, y_type="FLOAT16",
                                    shape=(3,)), [x])
    np.testing.assert_array_equal(y, np.array([1.5, np.inf, -2.69921875], np.float16))
    (z,) = Backend.run_model(_model("Cast", opset, T.FLOAT, {"to": "INT32"}, y_type="INT32",
                                    shape=(3,)), [x])
    np.testing.assert_array_equal(z, np.array([1, 70000, -2], np.int32))
  with pytest.raises(TypeError, match="Cast version 1 does not allow `to` of type BFLOAT16"):
    _cast_node_run(1, x, to="BFLOAT16")


def test_cast6_matches_onnxruntime():
  x = np.array([1.5, -2.7, 300.0, 0.0], np.float32)
  for to in (T.INT8, T.UINT8, T.BOOL, T.DOUBLE, T.FLOAT16):
    xs = {T.INT8: x[:2], T.UINT8: np.abs(x[:2])}.get(to, x)  # out of range is undefined
    model = _model("Cast", 7, T.FLOAT, {"to": to}, shape=xs.shape)
    (y,) = Backend.run_model(model, [xs])
    (want,) = _ort(model, {"x": xs})
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)


def test_string_from_cast9():
  x = np.array([0.5, -1e20, np.nan], np.float32)
  with pytest.raises(TypeError, match="Cast version 6 does not allow `to` of type STRING"):
    _cast_node_run(6, x, to=T.STRING)
  model = _model("Cast", 9, T.FLOAT, {"to": T.STRING}, shape=(3,))
  (y,) = Backend.run_model(model, [x])
  assert y.tolist() == ["0.5", "-1e+20", "NaN"]
  s = np.array(["3.25", "-INF", "nan", "1E3"], object)
  back = _model("Cast", 13, T.STRING, {"to": T.FLOAT}, shape=(4,))
  (z,) = Backend.run_model(back, [s])
  (want,) = _ort(back, {"x": s})
  np.testing.assert_array_equal(z, want)


# --- each version's element types, read from onnx.defs ----------------------------------------

# Every element type a JAX array holds and XLA converts (the float6 types: see the test below).
_HELD = [t for t in range(1, 27) if t not in (T.STRING, T.COMPLEX64, T.COMPLEX128)]


def _schema_types(op, version, param):
  """The TensorProto enums that type parameter ``param`` of ``op``-``version`` allows, from
  onnx.defs (the schema's strings are "tensor(float)", "tensor(float8e4m3fn)", ...)."""
  spelled = {"float": "FLOAT", "double": "DOUBLE"}
  for constraint in onnx.defs.get_schema(op, version, "").type_constraints:
    if constraint.type_param_str == param:
      names = [t[len("tensor("):-1] for t in constraint.allowed_type_strs]
      return {getattr(T, spelled.get(n, n.upper())) for n in names}
  raise KeyError(param)


def test_the_schema_reading_finds_each_types_first_version():
  # The versions in ONNX's Changelog that bring each type to Cast's output.
  first = {T.BFLOAT16: 13, T.FLOAT8E4M3FN: 19, T.INT4: 21, T.FLOAT4E2M1: 23, T.FLOAT8E8M0: 24,
           T.UINT2: 25, T.FLOAT6E2M3: 28, T.FLOAT: 1, T.STRING: 9}
  for to, v in first.items():
    have = [u for u in _CAST_VERSIONS if to in _schema_types("Cast", u, "T2")]
    assert have[0] == v, (T.DataType.Name(to), have)


_CAST_VERSIONS = (1, 6, 9, 13, 19, 21, 23, 24, 25, 28)


def _runner(op, version):
  """The node as the backend runs it: the shared input check, then the adapter (no model)."""
  adapter = _registry.ADAPTERS[(op, version)]

  def run(inputs, attrs):
    _registry.check_node("n", adapter, inputs, attrs)
    return adapter.fn(inputs, attrs)

  return run


@pytest.mark.parametrize("version", _CAST_VERSIONS)
def test_cast_types_follow_the_schema(version):
  # Each held type as `to` (from float32) and as the input (to FLOAT, which every version has):
  # allowed by that version's schema -> the value 1 casts exactly; else a TypeError naming it.
  # Over the versions this is also the dtype contract of jaxops.cast for every type a JAX array
  # holds, to and from float32 (the adapter calls the function behind jaxops.cast).
  adapter = _runner("Cast", version)
  to_allowed, in_allowed = (_schema_types("Cast", version, p) for p in ("T2", "T1"))
  one = np.ones(2, np.float32)
  for t in _HELD:
    name = T.DataType.Name(t)
    to = name if version == 1 else t  # Cast-1's `to` is a type name
    if t in to_allowed:
      (y,) = adapter([one], {"to": to})
      assert y.dtype == helper.tensor_dtype_to_np_dtype(t)
      np.testing.assert_array_equal(_f64(y), [1.0, 1.0], err_msg=name)
    else:
      with pytest.raises(TypeError, match=f"Cast version {version} does not allow `to` of type "
                         f"{name};"):
        adapter([one], {"to": to})
    x = one.astype(helper.tensor_dtype_to_np_dtype(t))
    float_name = "FLOAT" if version == 1 else T.FLOAT
    if t in in_allowed:
      np.testing.assert_array_equal(adapter([x], {"to": float_name})[0], one, err_msg=name)
    else:
      with pytest.raises(TypeError, match=rf"\(Cast-{version}\): input 0 \(`input`\) has element "
                         f"type {name};"):
        adapter([x], {"to": float_name})


@pytest.mark.parametrize("version", (15, 19, 21, 23, 24, 25))
def test_cast_like_types_follow_the_schema(version):
  adapter = _runner("CastLike", version)
  to_allowed, in_allowed = (_schema_types("CastLike", version, p) for p in ("T2", "T1"))
  one = np.ones(2, np.float32)
  for t in _HELD:
    name = T.DataType.Name(t)
    like = np.zeros(1, helper.tensor_dtype_to_np_dtype(t))
    if t in to_allowed:
      (y,) = adapter([one, like], {})
      assert y.dtype == like.dtype
      np.testing.assert_array_equal(_f64(y), [1.0, 1.0], err_msg=name)
    else:
      with pytest.raises(TypeError, match=rf"\(CastLike-{version}\): input 1 \(`target_type`\) "
                         f"has element type {name};"):
        adapter([one, like], {})
    if t not in in_allowed:
      with pytest.raises(TypeError, match=rf"\(CastLike-{version}\): input 0 \(`input`\) has "
                         f"element type {name};"):
        adapter([one.astype(like.dtype), np.zeros(1, np.float32)], {})


def test_cast28_float6_is_a_clear_error():
  with pytest.raises(TypeError, match=r"FLOAT6E2M3 .* installed JAX/XLA cannot convert"):
    _cast_node_run(28, np.ones(2, np.float32), to=T.FLOAT6E2M3)
  with pytest.raises(TypeError, match="Cast version 25 does not allow `to` of type FLOAT6E3M2"):
    _cast_node_run(25, np.ones(2, np.float32), to=T.FLOAT6E3M2)


def test_round_mode_and_saturate_attributes_of_cast24():
  # Cast-24's FLOAT8E8M0 rules: round_mode on the mantissa; without saturate out of range is NaN.
  x = np.array([1.5, 3.0, 0.0, 1e-39, 2.0**127 * 1.5], np.float32)
  want = {("up", 1): [2, 4, 2.0**-127, 2.0**-127, 2.0**127],
          ("down", 0): [1, 2, NAN, NAN, NAN],
          ("nearest", 0): [2, 4, NAN, NAN, NAN]}
  for (mode, sat), w in want.items():
    attrs = {"to": T.FLOAT8E8M0, "round_mode": mode, "saturate": sat}
    (y,) = Backend.run_model(_model("Cast", 24, T.FLOAT, attrs), [x])
    np.testing.assert_array_equal(_f64(y), w)
  # CastLike-24 passes them on too; CastLike-23 has no FLOAT8E8M0.
  like = np.zeros(1, ml_dtypes.float8_e8m0fnu)
  (y,) = Backend.run_model(_model("CastLike", 24, T.FLOAT, {"round_mode": "down"},
                                  extra_inputs=(like,)), [x])
  np.testing.assert_array_equal(_f64(y)[:2], [1, 2])
  node = helper.make_node("CastLike", ["x", "like"], ["y"])
  with pytest.raises(TypeError, match=r"CastLike-23\): input 1 \(`target_type`\) has element type "
                     "FLOAT8E8M0"):
    Backend.run_node(node, [x, like], opset_version=23)


def test_castlike_saturate_from_version_19():
  x = np.array([1e6, np.inf], np.float32)
  like = np.zeros(1, ml_dtypes.float8_e4m3fn)
  (y,) = Backend.run_model(_model("CastLike", 19, T.FLOAT, {"saturate": 0},
                                  extra_inputs=(like,), shape=x.shape), [x])
  assert np.isnan(_f64(y)).all()
  node = helper.make_node("CastLike", ["x", "like"], ["y"])
  with pytest.raises(TypeError, match=r"CastLike-15\): input 1 \(`target_type`\) has element type "
                     "FLOAT8E4M3FN"):
    Backend.run_node(node, [x, like], opset_version=15)
  (z,) = Backend.run_node(node, [np.array([2.5, -1.0]), np.zeros(2, np.int16)], opset_version=15)
  np.testing.assert_array_equal(z, np.array([2, -1], np.int16))


# --- ConstantOfShape-9 .. 25: the dtypes of `value` ---------------------------------------------

_VERSIONS = [9, 20, 21, 23, 24, 25]


def _cos_model(opset, value):
  node = helper.make_node("ConstantOfShape", ["x"], ["y"],
                          value=onnx.numpy_helper.from_array(value, "value"))
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", T.INT64, [2])],
      [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(value.dtype),
                                     [None, None])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 11 if opset >= 24 else 10
  return model


@pytest.mark.parametrize("version", _VERSIONS)
def test_constant_of_shape_dtypes_follow_the_schema(version):
  # `value` of each held type: allowed by that version's schema -> filled with it; else a
  # TypeError naming the type. Through the model path for the first version that allows a type.
  allowed = _schema_types("ConstantOfShape", version, "T2")
  adapter = _runner("ConstantOfShape", version)
  shape = np.array([2, 3], np.int64)
  earlier = set().union(*[_schema_types("ConstantOfShape", v, "T2") for v in _VERSIONS
                          if v < version])
  for t in _HELD:
    name = T.DataType.Name(t)
    value = np.array([1], np.float32).astype(helper.tensor_dtype_to_np_dtype(t))
    if t in allowed:
      (y,) = adapter([shape], {"value": value})
      if t not in earlier:  # new in this version: the whole model path too
        (y,) = Backend.run_model(_cos_model(version, value), [shape])
      assert y.dtype == value.dtype and y.shape == (2, 3)
      np.testing.assert_array_equal(_f64(y), np.ones((2, 3)), err_msg=name)
    else:
      with pytest.raises(TypeError, match=f"ConstantOfShape version {version} does not allow "
                         f"`value` of type {name};"):
        adapter([shape], {"value": value})


def test_constant_of_shape_matches_onnxruntime():
  shape = np.array([3, 0], np.int64), np.array([2, 4], np.int64)
  for opset in (9, 20):
    for value in (np.array([2.5], np.float32), np.array([-7], np.int64), np.array([True])):
      model = _cos_model(opset, value)
      for s in shape:
        (y,) = Backend.run_model(model, [s])
        (want,) = _ort(model, {"x": s})
        assert y.dtype == want.dtype and y.shape == want.shape
        np.testing.assert_array_equal(y, want)
  # No value: float32 zeros (every version).
  node = helper.make_node("ConstantOfShape", ["x"], ["y"])
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.INT64, [1])],
                            [helper.make_tensor_value_info("y", T.FLOAT, [3])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
  model.ir_version = 10
  (y,) = Backend.run_model(model, [np.array([3], np.int64)])
  np.testing.assert_array_equal(y, np.zeros(3, np.float32))
  np.testing.assert_array_equal(_ort(model, {"x": np.array([3], np.int64)})[0], y)


# --- oracle departures found by a random fuzz (2026-12-07): docs/DEVIATIONS.md, Cast 3, 4 and
# --- 12-15 ------------------------------------------------------------------------------------


def _cast_model(nodes, inputs, output, opset, inits=()):
  model = helper.make_model(helper.make_graph(nodes, "g", inputs, [output],
                                              initializer=list(inits)),
                            opset_imports=[helper.make_opsetid("", opset)])
  model.ir_version = 11 if opset >= 24 else 10
  return model


def _oracles(model, feeds):
  """(onnx.reference's result or its exception, onnxruntime's result or its exception)."""
  out = []
  for run in (lambda: ReferenceEvaluator(model).run(None, feeds)[0],
              lambda: onnxruntime.InferenceSession(
                  model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                      None, feeds)[0]):
    try:
      out.append(np.asarray(run()))
    except Exception as e:  # noqa: BLE001 (an oracle that refuses the model)
      out.append(e)
  return out


def test_deviation_huge_floats_to_narrow_ints_keep_low_bits_where_the_oracles_give_0():
  """Past 2**31 a float keeps the low bits of its integer into INT4/UINT4/INT2/UINT2 (the
  Int4/Int2 notes); onnx.reference and onnxruntime give 0 there (ml_dtypes 0.6 too)."""
  x = np.array([-2147483649.0, 2.0 ** 40 + 3, 100.0])
  for to, want in (("INT4", [-1, 3, 4]), ("UINT4", [15, 3, 4]), ("UINT2", [3, 3, 0])):
    model = _cast_model([helper.make_node("Cast", ["x"], ["m"], to=getattr(TensorProto, to)),
                         helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT32)],
                        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])],
                        helper.make_tensor_value_info("y", TensorProto.INT32, [3]), 25)
    np.testing.assert_array_equal(Backend.run_model(model, [x])[0], want, err_msg=to)
    for oracle in _oracles(model, {"x": x}):
      np.testing.assert_array_equal(oracle[:2], [0, 0], err_msg=to)


def test_deviation_castlike_24_takes_round_mode():
  """CastLike-24 has `round_mode` and defers to Cast: x = [3.5, 5, 0.75] into FLOAT8E8M0 with
  "down" gives [2, 4, 0.5], as Cast-24 gives it in all three implementations. onnxruntime's
  CastLike ignores the attribute (the "up" result [4, 8, 1]); onnx.reference runs CastLike-19,
  which has no round_mode (a TypeError)."""
  x = np.array([3.5, 5.0, 0.75], np.float32)
  like = onnx.numpy_helper.from_array(np.zeros(1, ml_dtypes.float8_e8m0fnu), "like")
  io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]), 24)
  back = helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)
  cast = _cast_model([helper.make_node("Cast", ["x"], ["m"], to=TensorProto.FLOAT8E8M0,
                                       round_mode="down"), back], *io)
  like_model = _cast_model([helper.make_node("CastLike", ["x", "like"], ["m"],
                                             round_mode="down"), back], *io, inits=[like])
  for oracle in _oracles(cast, {"x": x}):
    np.testing.assert_array_equal(oracle, [2, 4, 0.5])
  np.testing.assert_array_equal(Backend.run_model(like_model, [x])[0], [2, 4, 0.5])
  ref, ours = _oracles(like_model, {"x": x})
  assert isinstance(ref, Exception)
  np.testing.assert_array_equal(ours, [4, 8, 1])


def test_deviation_onnxruntime_float8_to_bool():
  """+-0 gives False and every other value True (the spec): FLOAT8E4M3FN and E5M2 -0 give True
  in onnxruntime, and FLOAT8E8M0's 2**-127 (bits 0x00, not a zero) False. onnx.reference
  agrees with jaxops."""
  for elem, bits, want in ((TensorProto.FLOAT8E4M3FN, [0x80, 0x00, 0x01], [False, False, True]),
                           (TensorProto.FLOAT8E5M2, [0x80, 0x00, 0x01], [False, False, True]),
                           (TensorProto.FLOAT8E8M0, [0x00, 0x7F, 0x01], [True, True, True])):
    x = np.array(bits, np.uint8).view(helper.tensor_dtype_to_np_dtype(elem))
    model = _cast_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BOOL)], [],
                        helper.make_tensor_value_info("y", TensorProto.BOOL, [3]), 25,
                        [onnx.numpy_helper.from_array(x, "x")])
    np.testing.assert_array_equal(Backend.run_model(model, [])[0], want)
    ref, ours = _oracles(model, {})
    np.testing.assert_array_equal(ref, want)
    assert ours.tolist() != want


def test_deviation_onnxruntime_e8m0_rounds_wide_inputs_through_float32():
  """float64 and int32 into FLOAT8E8M0 round once from the exact value; onnxruntime converts
  them to float32 first: 2147483648.5 with "up" is 2**32 (onnxruntime 2**31), int32 16777217
  with "up" is 2**25 (onnxruntime 2**24)."""
  for elem, x, want in ((TensorProto.DOUBLE, np.array([2147483648.5]), 2.0 ** 32),
                        (TensorProto.INT32, np.array([16777217], np.int32), 2.0 ** 25)):
    model = _cast_model([helper.make_node("Cast", ["x"], ["m"], to=TensorProto.FLOAT8E8M0,
                                          round_mode="up"),
                         helper.make_node("Cast", ["m"], ["y"], to=TensorProto.DOUBLE)],
                        [helper.make_tensor_value_info("x", elem, [1])],
                        helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1]), 25)
    np.testing.assert_array_equal(Backend.run_model(model, [x])[0], [want])
    assert _oracles(model, {"x": x})[1].tolist() == [want / 2]


def test_undefined_e5m2_infinities_to_narrow_ints_and_strings_to_bool():
  """Two casts the spec leaves undefined, as jaxops defines them: FLOAT8E5M2 +-inf into
  INT4/UINT4/INT2/UINT2 is 0 (as NaN; out of range for float -> integer saturates, but these
  types keep low bits, and an infinity has none), where onnx.reference gives -1/15/-1/3 for
  +inf; a STRING into BOOL is its number != 0 ("0.5" True, "-0" False), where onnxruntime
  parses an integer ("0.5" False) and onnx.reference tests the text for emptiness ("0" True)."""
  x = np.array([np.inf, -np.inf, np.nan], np.float32).astype(ml_dtypes.float8_e5m2)
  model = _cast_model([helper.make_node("Cast", ["x"], ["m"], to=TensorProto.UINT4),
                       helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT32)], [],
                      helper.make_tensor_value_info("y", TensorProto.INT32, [3]), 25,
                      [onnx.numpy_helper.from_array(x, "x")])
  np.testing.assert_array_equal(Backend.run_model(model, [])[0], [0, 0, 0])
  assert _oracles(model, {})[0].tolist()[0] == 15
  texts = np.array(["0.5", "-0", "0", "2"], object)
  model = _cast_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BOOL)],
                      [helper.make_tensor_value_info("x", TensorProto.STRING, [4])],
                      helper.make_tensor_value_info("y", TensorProto.BOOL, [4]), 25)
  np.testing.assert_array_equal(Backend.run_model(model, [texts])[0], [True, False, False, True])
  ref, ours = _oracles(model, {"x": texts})
  assert ref.tolist() == [True, True, True, True] and ours.tolist()[0] is False
