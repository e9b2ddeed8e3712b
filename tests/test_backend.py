"""jaxops.onnx.Backend: models of several nodes, initializers, optional inputs, dispatch, errors.

Expected values come from onnx.reference.ReferenceEvaluator on the same model.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from jaxops.onnx import Backend, BackendRep, run_node


def assert_outputs_equal(expected, got):
  """This file's own judge: same dtypes and shapes, values equal to float32 rounding."""
  assert len(expected) == len(got)
  for e, g in zip(expected, got):
    e, g = np.asarray(e), np.asarray(g)
    assert (g.dtype, g.shape) == (e.dtype, e.shape)
    if e.dtype == object or e.dtype.kind in "biu":
      assert g.tolist() == e.tolist()
    else:
      np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-6,
                                 atol=1e-7)


def _model(nodes, inputs, outputs, initializers=(), opset=21):
  graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
  return helper.make_tensor_value_info(name, elem, shape)


def _against_reference(model, feeds):
  expected = ReferenceEvaluator(model).run(None, feeds)
  got = Backend.prepare(model).run(feeds)
  assert_outputs_equal(expected, got)
  return got


def test_several_nodes_with_initializer_and_constant():
  shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
  nodes = [
      helper.make_node("ConstantOfShape", ["shape"], ["c"],
                       value=numpy_helper.from_array(np.array([2.5], np.float32))),
      helper.make_node("Cast", ["c"], ["h"], to=TensorProto.FLOAT16),
      helper.make_node("Constant", [], ["k"], value_ints=[3, 1]),
      helper.make_node("ConstantOfShape", ["k"], ["z"],
                       value=numpy_helper.from_array(np.array([7], np.int32))),
      helper.make_node("CastLike", ["x", "h"], ["y"]),
  ]
  model = _model(nodes, [_vi("x", TensorProto.DOUBLE, [4])],
                 [_vi("h", TensorProto.FLOAT16, [2, 3]), _vi("z", TensorProto.INT32, [3, 1]),
                  _vi("y", TensorProto.FLOAT16, [4])], [shape])
  got = _against_reference(model, {"x": np.array([1.0, -2.5, 1e6, np.nan])})
  assert got[0].dtype == np.float16 and got[1].dtype == np.int32


def test_inputs_by_position_and_by_name():
  model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)],
                 [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.INT32, [3])])
  x = np.array([1.7, -2.2, 3.0], np.float32)
  rep = Backend.prepare(model)
  np.testing.assert_array_equal(rep.run([x])[0], rep.run({"x": x})[0])
  with pytest.raises(ValueError, match="missing inputs"):
    rep.run([])
  with pytest.raises(ValueError, match="unknown inputs"):
    rep.run({"x": x, "q": x})


def test_ml_dtypes_inputs():
  import ml_dtypes

  model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                 [_vi("x", TensorProto.FLOAT8E4M3FN, [4])], [_vi("y", TensorProto.FLOAT, [4])])
  x = np.array([0.5, -448, 3.25, np.nan], ml_dtypes.float8_e4m3fn)
  _against_reference(model, {"x": x})


def test_static_inputs_compile_once_per_value():
  model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])],
                 [_vi("s", TensorProto.INT64, [2])], [_vi("y", TensorProto.FLOAT, ["a", "b"])])
  rep = Backend.prepare(model)
  assert rep.run([np.array([2, 3])])[0].shape == (2, 3)
  rep.run([np.array([2, 3])])
  assert len(rep._cache) == 1
  assert rep.run([np.array([4, 1])])[0].shape == (4, 1)
  assert len(rep._cache) == 2


def test_static_input_from_another_node_is_rejected():
  nodes = [helper.make_node("Cast", ["s"], ["s64"], to=TensorProto.INT64),
           helper.make_node("ConstantOfShape", ["s64"], ["y"])]
  model = _model(nodes, [_vi("s", TensorProto.INT32, [2])],
                 [_vi("y", TensorProto.FLOAT, ["a", "b"])])
  with pytest.raises(NotImplementedError, match="ConstantOfShape.*decides the output shape"):
    Backend.prepare(model)


def test_unknown_op_names_op_and_support():
  model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2])],
                 [_vi("y", TensorProto.FLOAT, [2])])
  with pytest.raises(NotImplementedError, match=r"Relu version 14 .*Supported: .*Cast"):
    Backend.prepare(model)
  assert not Backend.is_compatible(model)


def test_unsupported_version_names_version():
  # Upsample-1 (opset 6) is experimental and not implemented; 7 and 9 are.
  node = helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 2.0], mode="nearest")
  model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 2])], [_vi("y", TensorProto.FLOAT, None)],
                 opset=6)
  with pytest.raises(NotImplementedError, match=r"Upsample version 1 \(model opset 6\)"):
    BackendRep(model)


def test_run_node_and_devices():
  node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.UINT8)
  x = np.array([1.0, 255.0, 3.5], np.float32)
  (y,) = run_node(node, [x], opset_version=21)
  (expected,) = ReferenceEvaluator(node).run(None, {"x": x})
  assert_outputs_equal([expected], [y])
  assert Backend.supports_device("CPU")


# --- the shared node check: every adapter's inputs against its version's schema -----------------


@pytest.mark.parametrize("shape, kernel", [((1, 2, 4, 4), [2, 2, 2]), ((4, 4), [2]),
                                           ((1, 1, 1, 4, 4), [2, 2])])
def test_pool_rank_must_match_kernel_shape(shape, kernel):
  # ONNX: X is (N, C, D1, ..., Dn) with n = len(kernel_shape); onnxruntime refuses the rest.
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, name="pool")
  want = len(kernel) + 2
  with pytest.raises(ValueError, match=rf"node 'pool' \(AveragePool-22\): input 0 \(`X`\) has "
                     rf"rank {len(shape)} .* it must have rank {want}"):
    run_node(node, [np.ones(shape, np.float32)], opset_version=22)


def test_input_element_type_is_checked_against_the_schema():
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], name="p")
  with pytest.raises(TypeError, match=r"node 'p' \(AveragePool-22\): input 0 \(`X`\) has element "
                     r"type INT32; allowed: BFLOAT16, DOUBLE, FLOAT, FLOAT16"):
    run_node(node, [np.ones((1, 1, 4, 4), np.int32)], opset_version=22)
  # bfloat16 arrives with AveragePool-22, not before.
  import ml_dtypes
  with pytest.raises(TypeError, match=r"\(AveragePool-19\): input 0 .* type BFLOAT16"):
    run_node(node, [np.ones((1, 1, 4, 4), ml_dtypes.bfloat16)], opset_version=19)


def test_fixed_type_inputs_are_checked():
  # Resize-19's `scales` is tensor(float): float64 scales are refused, as onnxruntime does.
  node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="r")
  with pytest.raises(TypeError, match=r"node 'r' \(Resize-19\): input 2 \(`scales`\) has element "
                     r"type DOUBLE; allowed: FLOAT"):
    run_node(node, [np.ones((1, 1, 2, 2), np.float32), np.array([], np.float32),
                    np.array([1, 1, 2, 2], np.float64)], opset_version=19)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(4,), (3, 4)])
def test_global_pool_needs_n_c_and_a_spatial_axis(op, shape):
  # X is (N x C x D1 x ... x Dn): onnxruntime refuses an (N, C) input ("Input dimension cannot
  # be less than 3"), which onnx.reference would return unchanged (the Python functions, which
  # pool the axes after the first two, accept it)
  x = np.ones(shape, np.float32)
  model = helper.make_model(helper.make_graph(
      [helper.make_node(op, ["x"], ["y"])], "g",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
      opset_imports=[helper.make_opsetid("", 2 if op == "GlobalLpPool" else 22)])
  model.ir_version = 10  # (onnxruntime has no GlobalLpPool-22 kernel: version 2 there)
  with pytest.raises(Exception, match="less than 3"):
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
  node = helper.make_node(op, ["x"], ["y"], name="g")
  with pytest.raises(ValueError, match=rf"node 'g' \({op}-22\): input 0 \(`X`\) has "
                     rf"rank {len(shape)} .* at least 3 axes"):
    run_node(node, [x], opset_version=22)


def test_attribute_types_and_names_are_checked_against_the_schema():
  x = np.ones((1, 1, 4, 4), np.float32)
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2.0, 2.0], name="p")
  with pytest.raises(TypeError, match=r"node 'p' \(AveragePool-22\): attribute `kernel_shape` "
                     r"must be of type INTS; got FLOATS"):
    run_node(node, [x], opset_version=22)
  # dilations arrive with AveragePool-19.
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[1, 1],
                          name="p")
  with pytest.raises(ValueError, match=r"\(AveragePool-11\): has no attribute `dilations`"):
    run_node(node, [x], opset_version=11)



@pytest.mark.parametrize("op, version, attrs, inputs", [
    ("MaxPool", 22, dict(kernel_shape=[2], strides=[2], ceil_mode=2), 1),
    ("AveragePool", 22, dict(kernel_shape=[2], count_include_pad=3), 1),
    ("AveragePool", 19, dict(kernel_shape=[2], ceil_mode=-1), 1),
    ("LpPool", 18, dict(kernel_shape=[2], ceil_mode=2), 1),
    ("Resize", 18, dict(mode="linear", antialias=2), 3),
    ("Resize", 13, dict(mode="cubic", exclude_outside=2), 3),
    ("GridSample", 20, dict(align_corners=5), 2),
    ("AffineGrid", 20, dict(align_corners=2), 2)])
def test_flag_attributes_other_than_0_and_1_are_refused(op, version, attrs, inputs):
  """A flag of 2 or -1 is a ValueError naming the version and the attribute: the oracles read
  one differently (MaxPool-22 ceil_mode=2 on a length of 5, kernel and stride 2: onnxruntime
  gives 2 windows, onnx.reference 3), and the Python functions refuse it as well."""
  x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
  feeds = {"MaxPool": [x], "AveragePool": [x], "LpPool": [x],
           "Resize": [np.ones((1, 1, 3, 3), np.float32), np.zeros(0, np.float32),
                      np.array([1, 1, 2, 2], np.float32)],
           "GridSample": [np.ones((1, 1, 3, 3), np.float32), np.zeros((1, 2, 2, 2), np.float32)],
           "AffineGrid": [np.zeros((1, 2, 3), np.float32), np.array([1, 1, 2, 2], np.int64)]}[op]
  assert len(feeds) == inputs
  names = [f"i{k}" for k in range(inputs)]
  node = helper.make_node(op, names, ["y"], **attrs)
  name, value = next((k, v) for k, v in attrs.items() if k not in ("kernel_shape", "strides",
                                                                    "mode"))
  with pytest.raises(ValueError, match=rf"{op}-{version} attribute `{name}` must be 0 or 1; "
                     rf"got {value}"):
    run_node(node, feeds, opset_version=version)
  if op == "MaxPool":  # the oracles' two readings
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)],
                   [_vi("x", TensorProto.FLOAT, [1, 1, 5])], [_vi("y", TensorProto.FLOAT, None)],
                   opset=version)
    assert ReferenceEvaluator(model).run(None, {"x": x})[0].shape == (1, 1, 3)
    session = ort.InferenceSession(model.SerializeToString())
    assert session.run(None, {"x": x})[0].shape == (1, 1, 2)

def test_constant_of_shape_takes_a_1d_shape():
  node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")
  with pytest.raises(ValueError, match=r"node 'c' \(ConstantOfShape-\d+\): input 0 \(`input`\) "
                     r"has rank 2 .* must have rank 1"):
    run_node(node, [np.array([[1, 2]], np.int64)])


# --- the front end's own edges (an adversarial audit) --------------------------------------------


def test_unsupported_op_error_names_the_node():
  model = _model([helper.make_node("Sigmoid", ["x"], ["y"], name="my_sigmoid")],
                 [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
  with pytest.raises(NotImplementedError, match=r"node 'my_sigmoid': Sigmoid version 13"):
    Backend.prepare(model)


def test_prepare_reports_later_attributes_as_jaxops_does():
  # onnx.checker would raise its ValidationError (not a ValueError) first; jaxops' own check
  # names the node, the version and the attributes the version takes
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2], count_include_pad=1)
  model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 4])],
                 [_vi("y", TensorProto.FLOAT, None)], opset=1)
  with pytest.raises(ValueError, match=r"AveragePool-1.*has no attribute `count_include_pad`"):
    Backend.run_model(model, [np.zeros((1, 1, 4), np.float32)])


def test_a_model_onnx_checker_refuses_is_a_value_error():
  node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)
  model = _model([node], [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
  model.ir_version = 10
  model.graph.node[0].output[0] = "x"  # a node writes a graph input: invalid SSA
  model.graph.output[0].name = "x"
  with pytest.raises(onnx.checker.ValidationError):
    onnx.checker.check_model(model)
  with pytest.raises(ValueError, match="fails onnx.checker.check_model"):
    Backend.prepare(model)


def test_an_initializer_listed_as_a_graph_input_can_be_fed():
  # IR 4+: such an initializer is a default; onnxruntime and onnx.reference use the fed value
  node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
  scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
  model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                          _vi("scales", TensorProto.FLOAT, [4])],
                 [_vi("y", TensorProto.FLOAT, [1, 1, None, None])], initializers=[scales],
                 opset=13)
  x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
  feeds = {"x": x, "scales": np.array([1, 1, 3, 3], np.float32)}
  got = _against_reference(model, feeds)
  assert got[0].shape == (1, 1, 6, 6)
  assert Backend.prepare(model).run({"x": x})[0].shape == (1, 1, 4, 4)  # the default


def test_fed_inputs_are_checked_against_their_declaration():
  import onnxruntime as ort

  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2])
  model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                 [_vi("y", TensorProto.FLOAT, [1, 1, 3, 3])], opset=19)
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  # Python lists and numbers have no dtype of their own: they take the declared one
  listed = np.arange(16.0).reshape(1, 1, 4, 4).tolist()
  (y,) = Backend.run_model(model, [listed])
  assert y.dtype == np.float32 and y.shape == (1, 1, 3, 3)
  for bad, exc in ((np.zeros((1, 1, 4, 4)), TypeError), (np.zeros((1, 1, 6, 6), np.float32),
                                                         ValueError)):
    with pytest.raises(Exception, match="INVALID_ARGUMENT|Unexpected input data type"):
      sess.run(None, {"x": bad})
    with pytest.raises(exc, match="jaxops.onnx: input 'x' is declared"):
      Backend.run_model(model, [bad])


def test_run_node_input_counts_and_devices():
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2])
  with pytest.raises(ValueError, match=r"takes the inputs \['x'\].*got 0 arrays"):
    run_node(node, [])
  resize = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
  x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
  s = np.array([1, 1, 2, 2], np.float32)
  compact = run_node(resize, [x, s], opset_version=13)[0]
  slotted = run_node(resize, [x, None, s], opset_version=13)[0]
  np.testing.assert_array_equal(compact, slotted)
  assert compact.shape == (1, 1, 4, 4)
  assert not Backend.supports_device("TPU")
  with pytest.raises(ValueError, match="not an ONNX device name"):
    Backend.prepare(_model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 4])],
                           [_vi("y", TensorProto.FLOAT, None)], opset=19), "TPU")


def _ort(model, feeds):
  import onnxruntime as ort

  options = ort.SessionOptions()
  options.log_severity_level = 4
  sess = ort.InferenceSession(model.SerializeToString(), options,
                              providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


def test_declared_types_that_contradict_the_nodes_are_refused_as_onnxruntime_refuses_them():
  """An output, intermediate value_info or initializer-as-input declared with another type than
  its nodes give: onnxruntime refuses the model; jaxops returned data of the other type."""
  x = np.ones((1, 1, 2, 2), np.float32)
  gap = helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")
  bad_output = _model([gap], [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                      [_vi("y", TensorProto.DOUBLE, [1, 1, 1, 1])])
  nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT32, name="cast"),
           helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT, name="back")]
  bad_cast = _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                    [_vi("y", TensorProto.FLOAT, [1, 1, 2, 2])])
  bad_cast.graph.value_info.append(_vi("c", TensorProto.FLOAT, [1, 1, 2, 2]))
  resize = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs")
  bad_init = _model([resize], [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                               _vi("s", TensorProto.DOUBLE, [4])],
                    [_vi("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                    [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
  for model in (bad_output, bad_cast, bad_init):
    with pytest.raises(Exception):
      _ort(model, {"x": x})
    with pytest.raises(ValueError, match="declared types contradict its nodes"):
      Backend.prepare(model)


def test_model_forms_onnxruntime_runs():
  """A sparse initializer (it raised KeyError at run time), a STRING Constant that is a graph
  output (a JAX error: it now runs on the host), and the default domain spelled "ai.onnx"
  (onnx.checker knows its ops only under ""): each as onnxruntime runs it."""
  sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([2, 5], np.int32), "w"),
                                     numpy_helper.from_array(np.array([1, 3], np.int64), "i"),
                                     [4])
  graph = helper.make_graph([helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT)], "g",
                            [], [_vi("y", TensorProto.FLOAT, [4])], sparse_initializer=[sparse])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
  assert_outputs_equal(_ort(model, {}), Backend.prepare(model).run([]))
  assert Backend.prepare(model).run([])[0].tolist() == [0, 2, 0, 5]

  const = helper.make_node("Constant", [], ["s"], value_strings=["a", "b"])
  model = _model([const], [], [_vi("s", TensorProto.STRING, [2])])
  assert_outputs_equal(_ort(model, {}), Backend.prepare(model).run([]))

  x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
  gap = helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")
  graph = helper.make_graph([gap], "g", [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                            [_vi("y", TensorProto.FLOAT, [1, 1, 1, 1])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 19)])
  assert_outputs_equal(_ort(model, {"x": x}), Backend.prepare(model).run([x]))


def test_models_onnxruntime_refuses_give_clear_errors():
  """Too many outputs through run_node (a KeyError), a static input produced by a later node
  (the message said another node computes it), an opset past the installed onnx's."""
  x = np.ones((1, 1, 4, 4), np.float32)
  node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
  with pytest.raises(ValueError, match=r"MaxPool-1\): has 1 output\(s\); got 2"):
    run_node(node, [x], opset_version=7)
  nodes = [helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs"),
           helper.make_node("Constant", [], ["s"], value_floats=[1.0, 1.0, 2.0, 2.0])]
  model = _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                 [_vi("y", TensorProto.FLOAT, [1, 1, 8, 8])])
  with pytest.raises(ValueError, match=r"'s'.*of node 'rs' \(Resize\) is produced by a later "
                     r"node.*topological order"):
    Backend.prepare(model)
  gmp = helper.make_node("GlobalMaxPool", ["x"], ["y"])
  model = _model([gmp], [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                 [_vi("y", TensorProto.FLOAT, [1, 1, 1, 1])], opset=40)
  with pytest.raises(Exception):
    _ort(model, {"x": x})
  with pytest.raises(ValueError, match="default domain at opset 40"):
    Backend.prepare(model)


def test_declared_output_shapes_are_not_checked():
  """A declared output shape that differs from the one the nodes give (2 where SAME_LOWER gives
  ceil(5 / 2) = 3 windows): onnxruntime runs the model and returns the 3 values (it warns);
  so does jaxops, whose type check leaves shapes out (strict shape inference refuses it)."""
  node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], strides=[2],
                          auto_pad="SAME_LOWER")
  model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 5])],
                 [_vi("y", TensorProto.FLOAT, [1, 1, 2])], opset=22)
  x = np.array([[[3.0, 1.0, 4.0, 1.0, 5.0]]], np.float32)
  assert Backend.prepare(model).run([x])[0].tolist() == [[[3.0, 4.0, 5.0]]]
  assert _ort(model, {"x": x})[0].tolist() == [[[3.0, 4.0, 5.0]]]
  with pytest.raises(onnx.shape_inference.InferenceError):
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def test_an_undefined_element_type_is_refused_as_onnxruntime_refuses_it():
  gap = helper.make_node("GlobalAveragePool", ["x"], ["y"])
  model = _model([gap], [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                 [_vi("y", TensorProto.UNDEFINED, [1, 1, 1, 1])])
  x = np.ones((1, 1, 2, 2), np.float32)
  with pytest.raises(Exception):
    _ort(model, {"x": x})
  with pytest.raises(ValueError, match=r"'y' is declared a tensor of element type UNDEFINED"):
    Backend.prepare(model)
  assert run_node(gap, [x])[0].tolist() == [[[[1.0]]]]  # (run_node's own outputs are untyped)


def test_shape_inputs_from_nodes_of_constants_are_folded():
  """A shape input computed by a node whose inputs are all constants (ConstantOfShape of an
  initializer, Cast of an initializer) is computed when the model is prepared, as onnxruntime
  folds it; from a graph input it stays refused (test above). Found by an audit of
  2026-11-25: prepare() raised NotImplementedError for both."""
  x = np.arange(8.0, dtype=np.float32).reshape(1, 2, 2, 2)
  sizes = helper.make_model(helper.make_graph(
      [helper.make_node("ConstantOfShape", ["four"], ["sz"],
                        value=numpy_helper.from_array(np.array([3], np.int64))),
       helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest")],
      "g", [_vi("x", TensorProto.FLOAT, [1, 2, 2, 2])], [_vi("y", TensorProto.FLOAT, list("abcd"))],
      initializer=[numpy_helper.from_array(np.array([4], np.int64), "four")]),
      opset_imports=[helper.make_opsetid("", 19)])
  scales = _model([helper.make_node("Cast", ["s32"], ["s"], to=TensorProto.FLOAT),
                   helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")],
                  [_vi("x", TensorProto.FLOAT, [1, 2, 2, 2])],
                  [_vi("y", TensorProto.FLOAT, list("abcd"))],
                  [numpy_helper.from_array(np.array([1, 1, 4, 4], np.int32), "s32")], opset=19)
  for model in (sizes, scales):
    (want,) = _ort(model, {"x": x})
    (got,) = Backend.prepare(model).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    _against_reference(model, {"x": x})


def test_backend_audit_errors():
  """Defects an audit of 2026-11-25 found in the backend path, each against what onnx.checker
  or onnxruntime does."""
  x = np.ones((1, 1, 2, 2), np.float32)
  xi = _vi("x", TensorProto.FLOAT, [1, 1, 2, 2])
  # sparse initializer indices outside the tensor: the checker refuses them (-1 wrapped, 10
  # escaped as IndexError)
  for idx in ([0, 1, 2, -1], [0, 1, 2, 10], [[0], [1], [2], [4]]):
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"),
        numpy_helper.from_array(np.array(idx, np.int64), "sc_i"), [4])
    graph = helper.make_graph([helper.make_node("Resize", ["x", "", "sc"], ["y"])], "g", [xi],
                              [_vi("y", TensorProto.FLOAT, None)], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(onnx.checker.ValidationError):
      onnx.checker.check_model(model)
    with pytest.raises(ValueError, match=r"sparse initializer 'sc' of dims \[4\]"):
      Backend.prepare(model)
  # a Python list past the declared integer type: NumPy's cast wrapped 300 into UINT8 as 44
  rep = Backend.prepare(_model([helper.make_node("Cast", ["u"], ["y"], to=TensorProto.INT32)],
                               [_vi("u", TensorProto.UINT8, [3])],
                               [_vi("y", TensorProto.INT32, [3])]))
  assert rep.run([[3, 0, 255]])[0].tolist() == [3, 0, 255]
  for bad in ([300, 1, 2], [-1, 1, 2]):
    with pytest.raises(ValueError, match=r"input 'u' is declared UINT8, whose range is \[0, 255\]"):
      rep.run([bad])
  # the device index: one past the last device is refused, not silently device 0
  import jax
  n = len(jax.devices("cpu"))
  assert Backend.supports_device(f"CPU:{n - 1}") and not Backend.supports_device(f"CPU:{n}")
  model = _model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], [xi],
                 [_vi("y", TensorProto.FLOAT, [1, 1, 1, 1])])
  assert Backend.prepare(model, f"CPU:{n - 1}").device == jax.devices("cpu")[n - 1]
  with pytest.raises(ValueError, match=rf"names index {n}; JAX has {n} cpu device"):
    Backend.prepare(model, f"CPU:{n}")
  # is_compatible answers False for a device JAX lacks (it raised ValueError)
  if not any(d.platform == "gpu" for d in jax.devices()):
    assert Backend.is_compatible(model, "CPU") and not Backend.is_compatible(model, "CUDA")
  # run_node takes inputs by name, as BackendRep.run does (a dict became a STRING array)
  node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
  assert run_node(node, {"x": x})[0].tolist() == run_node(node, [x])[0].tolist()
  with pytest.raises(ValueError, match=r"has no inputs \['z'\]"):
    run_node(node, {"z": x})
  # Cast's `to` of no type: onnx's bare ValueError now says where it comes from
  with pytest.raises(ValueError, match="jaxops.onnx: onnx.shape_inference rejects the model"):
    Backend.prepare(_model([helper.make_node("Cast", ["x"], ["y"], to=0)], [xi],
                           [_vi("y", TensorProto.FLOAT, [1, 1, 2, 2])]))
  # Resize-10 with an empty middle name: the message counted 2 of 2
  with pytest.raises(ValueError, match=r"takes 2 input\(s\), the first 2 named; got 3 input "
                                       r"slot\(s\) \['x', '', 'sc'\]"):
    Backend.prepare(_model([helper.make_node("Resize", ["x", "", "sc"], ["y"])], [xi],
                           [_vi("y", TensorProto.FLOAT, None)],
                           [numpy_helper.from_array(np.ones(4, np.float32), "sc")], opset=10))
  # an initializer whose external data file is missing: onnx's ValidationError escaped
  t = numpy_helper.from_array(np.ones(4, np.float32), "sc")
  onnx.external_data_helper.set_external_data(t, "no_such_file.bin")
  t.data_location = TensorProto.EXTERNAL
  t.ClearField("raw_data")
  with pytest.raises(ValueError, match="initializer 'sc' cannot be read"):
    Backend.prepare(_model([helper.make_node("Resize", ["x", "", "sc"], ["y"])], [xi],
                           [_vi("y", TensorProto.FLOAT, None)], [t], opset=19))


def test_jax_function_of_a_model_is_differentiable():
  """BackendRep.jax_function: the model (Resize linear -> MaxPool -> GridSample from AffineGrid)
  as a JAX function of its dynamic inputs, with the static one (the scales) given: equal to
  run(), under jit and vmap, and its gradients in x and theta against numerical ones."""
  import jax
  import jax.numpy as jnp
  from jax.test_util import check_grads

  nodes = [helper.make_node("Resize", ["x", "", "s"], ["r"], mode="linear"),
           helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[1, 1]),
           helper.make_node("AffineGrid", ["theta", "size"], ["g"]),
           helper.make_node("GridSample", ["m", "g"], ["y"])]
  model = _model(nodes, [_vi("x", TensorProto.DOUBLE, [1, 2, 3, 3]),
                         _vi("s", TensorProto.FLOAT, [4]),
                         _vi("theta", TensorProto.DOUBLE, [1, 2, 3])],
                 [_vi("y", TensorProto.DOUBLE, [1, 2, 4, 5])],
                 [numpy_helper.from_array(np.array([1, 2, 4, 5], np.int64), "size")], opset=22)
  rep = Backend.prepare(model)
  assert rep.static_inputs == ["s"]
  s = np.array([1, 1, 2, 2], np.float32)
  rng = np.random.default_rng(5)
  x = rng.standard_normal((1, 2, 3, 3))
  # (random: round values put grid points on pixel edges, where sampling has a kink)
  theta = (np.array([[[0.9, 0.2, 0.05], [-0.1, 0.8, 0.1]]])
           + 0.01 * rng.standard_normal((1, 2, 3)))
  f = rep.jax_function({"s": s})
  (want,) = rep.run({"x": x, "s": s, "theta": theta})
  np.testing.assert_allclose(np.asarray(f(x, theta)[0]), want, rtol=1e-12)
  np.testing.assert_allclose(np.asarray(jax.jit(f)(x, theta)[0]), want, rtol=1e-12)
  batched = jax.vmap(f)(np.stack([x, 2 * x]), np.stack([theta, theta]))[0]
  np.testing.assert_allclose(np.asarray(batched[1]), 2 * want, rtol=1e-12)
  check_grads(lambda a, t: jnp.sum(jnp.sin(f(a, t)[0])), (x, theta), order=1,
              modes=("rev",), eps=1e-6)
  with pytest.raises(ValueError, match=r"needs the concrete value of each input in \['s'\]"):
    rep.jax_function()
  with pytest.raises(ValueError, match=r"takes the 2 inputs \['x', 'theta'\]; got 1"):
    f(x)


def test_backend_review_mends():
  """A review of the audit's fixes found: float lists past an integer input's type still
  wrapped; is_compatible raised where constant folding failed; run_node by name reported a
  missing input as a STRING one; jax_function left out the initializers listed as inputs; a
  STRING tensor only folded constants read kept the model on the host path."""
  rep = Backend.prepare(_model([helper.make_node("Cast", ["u"], ["y"], to=TensorProto.INT32)],
                               [_vi("u", TensorProto.UINT8, [2])],
                               [_vi("y", TensorProto.INT32, [2])]))
  assert rep.run([[2.7, 255.0]])[0].tolist() == [2, 255]  # truncated, as onnxruntime
  for bad in ([300.0, 1.0], [np.nan, 1.0], [-1.0, 1.0]):
    with pytest.raises(ValueError, match="input 'u' is declared UINT8"):
      rep.run([bad])
  bad_shape = _model([helper.make_node("ConstantOfShape", ["sh"], ["z"])], [],
                     [_vi("z", TensorProto.FLOAT, [2, 3])],
                     [numpy_helper.from_array(np.array([2, -3], np.int64), "sh")])
  assert Backend.is_compatible(bad_shape) is False
  node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
  with pytest.raises(ValueError, match=r"missing inputs \['s'\]"):
    run_node(node, {"x": np.ones((1, 1, 2, 2), np.float32)})
  # a weight listed as a graph input: an optional argument of the JAX function
  x = np.full((1, 1, 1, 1), 2.0, np.float32)
  graph = helper.make_graph(
      [helper.make_node("CastLike", ["w", "x"], ["wc"]),
       helper.make_node("GlobalAveragePool", ["x"], ["m"]),
       helper.make_node("GlobalLpPool", ["wc"], ["y"], p=2)], "g",
      [_vi("x", TensorProto.FLOAT, [1, 1, 1, 1]), _vi("w", TensorProto.FLOAT, [1, 1, 1, 2])],
      [_vi("m", TensorProto.FLOAT, [1, 1, 1, 1]), _vi("y", TensorProto.FLOAT, [1, 1, 1, 1])],
      initializer=[numpy_helper.from_array(np.array([[[[3.0, 4.0]]]], np.float32), "w")])
  rep = Backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
  f = rep.jax_function()
  assert float(f(x)[1].ravel()[0]) == 5.0  # the stored weight
  w = np.array([[[[6.0, 8.0]]]], np.float32)
  assert float(f(x, w)[1].ravel()[0]) == rep.run({"x": x, "w": w})[1].ravel()[0] == 10.0
  import jax
  import jax.numpy as jnp
  g = jax.grad(lambda v: jnp.sum(f(x, v)[1]))(w)  # d|w|/dw = w / |w|
  np.testing.assert_allclose(np.asarray(g), w / 10.0, rtol=1e-6)
  with pytest.raises(ValueError, match=r"then optionally the initializers \['w'\]; got 3"):
    f(x, w, w)
  # STRING only inside a folded chain (Cast to STRING and back, feeding Resize's scales)
  strings = _model([helper.make_node("Cast", ["s0"], ["ss"], to=TensorProto.STRING),
                    helper.make_node("Cast", ["ss"], ["s"], to=TensorProto.FLOAT), node],
                   [_vi("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                   [_vi("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                   [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s0")], opset=19)
  rep = Backend.prepare(strings)
  xs = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
  (want,) = _ort(strings, {"x": xs})
  np.testing.assert_array_equal(np.asarray(rep.jax_function()(xs)[0]), want)
  np.testing.assert_array_equal(rep.run([xs])[0], want)
  assert not rep._host


def _one_node(node, x_type, y_type, opset, x_shape=(1, 1, 4, 4)):
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", x_type, x_shape)],
                            [helper.make_tensor_value_info("Y", y_type, None)])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_prepare_names_node_version_and_allowed_types():
  """A declared element type that the node's version forbids: prepare passed on onnx's shape
  inference message (no version, no allowed types; for Cast's `to`, not even the attribute),
  where run_node named them (found by a dtype fuzz). onnxruntime refuses both models too."""
  pool = _one_node(helper.make_node("AveragePool", ["X"], ["Y"], kernel_shape=[2, 2], name="p"),
                   TensorProto.INT32, TensorProto.INT32, 22)
  with pytest.raises(TypeError, match=r"^jaxops.onnx: node 'p' \(AveragePool-22\): input 0 "
                                      r"\(`X`\) has element type INT32; allowed: BFLOAT16, "
                                      r"DOUBLE, FLOAT, FLOAT16$"):
    Backend.prepare(pool)
  cast = _one_node(helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.FLOAT8E4M3FN),
                   TensorProto.FLOAT, TensorProto.FLOAT8E4M3FN, 13, (2,))
  with pytest.raises(TypeError, match=r"^jaxops.onnx: Cast version 13 does not allow `to` of "
                                      r"type FLOAT8E4M3FN; allowed: BFLOAT16, BOOL"):
    Backend.prepare(cast)
  with pytest.raises(Exception):
    ort.InferenceSession(pool.SerializeToString(), providers=["CPUExecutionProvider"])
  # onnxruntime runs Cast-13 to FLOAT8E4M3FN, a type Cast-19 added (docs/DEVIATIONS.md, Cast 16)
  sess = ort.InferenceSession(cast.SerializeToString(), providers=["CPUExecutionProvider"])
  assert sess.run(None, {"X": np.array([1.5, 300], np.float32)})[0].tolist() == [60, 121]
  assert not Backend.is_compatible(pool) and not Backend.is_compatible(cast)


def test_inputs_and_outputs_declared_without_a_shape_run_as_onnxruntime_runs_them():
  """make_tensor_value_info(name, type, None) declares any rank: onnx.checker requires the
  shape field on the main graph's inputs and outputs, and prepare refused such models, which
  onnxruntime and onnx.reference run (found by a graph fuzz)."""
  node = helper.make_node("MaxPool", ["X"], ["Y"], kernel_shape=[2, 2])
  model = _one_node(node, TensorProto.FLOAT, TensorProto.FLOAT, 22, None)
  x = np.random.default_rng(2).standard_normal((1, 2, 5, 4)).astype(np.float32)
  want = ort.InferenceSession(model.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
  assert Backend.is_compatible(model)
  np.testing.assert_array_equal(Backend.prepare(model).run([x])[0], want)


def test_a_domain_imported_twice_is_refused():
  """opset_import [("", 11), ("ai.onnx", 22)] imports the default domain twice: the last import
  silently won, so the order decided which Resize version ran (found by a graph fuzz);
  onnx.checker refuses the model too."""
  node = helper.make_node("MaxPool", ["X"], ["Y"], kernel_shape=[2, 2])
  model = _one_node(node, TensorProto.FLOAT, TensorProto.FLOAT, 22)
  model.opset_import.append(helper.make_opsetid("ai.onnx", 11))
  with pytest.raises(ValueError, match=r"^jaxops.onnx: the model imports the domain\(s\) "
                                       r"\['ai.onnx'\] more than once"):
    Backend.prepare(model)
  assert not Backend.is_compatible(model)


def test_is_compatible_agrees_with_prepare():
  """is_compatible built the model's nodes but skipped prepare's checks, so it answered True
  for a MaxPool whose output is declared DOUBLE, which prepare (and onnxruntime) refuse."""
  node = helper.make_node("MaxPool", ["X"], ["Y"], kernel_shape=[2, 2])
  model = _one_node(node, TensorProto.FLOAT, TensorProto.DOUBLE, 22)
  with pytest.raises(ValueError, match="declared types contradict its nodes"):
    Backend.prepare(model)
  assert not Backend.is_compatible(model)


@pytest.mark.parametrize("node, feeds, opset", [
    (helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"]),
     [np.zeros((1, 2, 6, 6), np.float32), np.array([], np.float32), None,
      np.array([[1, 2, 12, 12]], np.int64)], 19),
    (helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
     [np.zeros((1, 2, 3), np.float32), np.array([[1, 1, 4, 4]], np.int64)], 20),
    (helper.make_node("ConstantOfShape", ["shape"], ["y"],
                      value=helper.make_tensor("v", TensorProto.FLOAT, [1, 1], [1.0])),
     [np.array([2, 3], np.int64)], 21),
], ids=["Resize sizes 2-D", "AffineGrid size 2-D", "ConstantOfShape value (1, 1)"])
def test_run_node_refuses_what_shape_inference_and_onnxruntime_refuse(node, feeds, opset):
  """run_node built its one-node model and ran it without ONNX's shape inference, so it ran
  these nodes, which prepare and onnxruntime refuse (found by an error-handling audit)."""
  names = [n for n in node.input if n]
  arrays = [a for a in feeds if a is not None]
  model = _model([node], [_vi(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                          for n, a in zip(names, arrays)],
                 [_vi(node.output[0], TensorProto.FLOAT, None)], opset=opset)
  with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own exception types
    _ort(model, dict(zip(names, arrays)))
  with pytest.raises(ValueError, match=rf"\({node.op_type}-{opset}\) fails ONNX's shape "
                                       r"inference"):
    run_node(node, feeds, opset_version=opset)


@pytest.mark.parametrize("op, want", [("GlobalAveragePool", np.nan), ("GlobalMaxPool", None),
                                      ("GlobalLpPool", 0.0)])
def test_deviation_global_pools_of_an_empty_plane(op, want):
  """DEVIATIONS LpPool / GlobalLpPool / GlobalMaxPool 11: onnxruntime refuses a plane with no
  elements; jaxops gives each formula's value (the mean of nothing NaN, as onnx.reference;
  an empty sum's root 0) or, for the maximum over nothing, a ValueError (as onnx.reference)."""
  x = np.ones((1, 2, 0, 3), np.float32)
  version = 2 if op == "GlobalLpPool" else 22  # (onnxruntime has no GlobalLpPool-22 kernel)
  node = helper.make_node(op, ["x"], ["y"])
  model = _model([node], [_vi("x", TensorProto.FLOAT, list(x.shape))],
                 [_vi("y", TensorProto.FLOAT, None)], opset=version)
  model.ir_version = 10
  with pytest.raises(Exception, match="Only N can be zero"):
    _ort(model, {"x": x})
  if want is None:
    with pytest.raises(ValueError, match="zero-size array"):
      ReferenceEvaluator(model).run(None, {"x": x})
    with pytest.raises(ValueError, match=r"global_max_pool: argument `x` must have spatial axes "
                                         r"of length at least 1"):
      run_node(node, [x], opset_version=version)
    return
  (got,) = run_node(node, [x], opset_version=version)
  np.testing.assert_array_equal(got, np.full((1, 2, 1, 1), want, np.float32))
  if op == "GlobalAveragePool":
    with warnings.catch_warnings():  # NumPy's "Mean of empty slice" and its 0 / 0
      warnings.simplefilter("ignore", RuntimeWarning)
      ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ref, got)
