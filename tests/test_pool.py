"""average_pool / global_average_pool: values derived by hand from the spec text, output
shapes, dtypes, errors, and the per-version ONNX adapters."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxops

# Tolerance of a result in each dtype against a float64 value (halves round once at the end).
TOL = {np.float16: 1e-3, jnp.bfloat16: 8e-3, np.float32: 1e-6, np.float64: 1e-13}
DTYPES = list(TOL)


def test_keyword_only_options():
  for fn, positional in ((jaxops.average_pool, {"x", "kernel_shape"}),
                         (jaxops.global_average_pool, {"x"})):
    for name, p in inspect.signature(fn).parameters.items():
      if name in positional:
        assert p.kind is p.POSITIONAL_OR_KEYWORD
      else:
        assert p.kind is p.KEYWORD_ONLY, name


# --- hand-derived values ------------------------------------------------------------------------


def row(*v):
  return np.array(v, np.float64).reshape(1, 1, -1)


X5 = row(1, 2, 3, 4, 5)


@pytest.mark.parametrize("kwargs, want", [
    # windows (1,2) (2,3) (3,4) (4,5)
    (dict(kernel_shape=(2,)), row(1.5, 2.5, 3.5, 4.5)),
    # stride 2: windows (1,2,3) (3,4,5)
    (dict(kernel_shape=(3,), strides=(2,)), row(2, 4)),
    # pads 1, 1: windows (p,1,2) (2,3,4) (4,5,p); padding not counted
    (dict(kernel_shape=(3,), strides=(2,), pads=(1, 1)), row(1.5, 3, 4.5)),
    # ... and counted: 3 / 3, 9 / 3, 9 / 3
    (dict(kernel_shape=(3,), strides=(2,), pads=(1, 1), count_include_pad=True), row(1, 3, 3)),
    # asymmetric pads 2, 0 with kernel 3: (p,p,1) (p,1,2) (1,2,3) (2,3,4) (3,4,5)
    (dict(kernel_shape=(3,), pads=(2, 0)), row(1, 1.5, 2, 3, 4)),
    (dict(kernel_shape=(3,), pads=(2, 0), count_include_pad=True), row(1 / 3, 1, 2, 3, 4)),
    # floor: (5 - 2) / 2 + 1 = 2.5 -> 2 windows (1,2) (3,4); ceil -> 3, the last (5, ext)
    (dict(kernel_shape=(2,), strides=(2,)), row(1.5, 3.5)),
    (dict(kernel_shape=(2,), strides=(2,), ceil_mode=True), row(1.5, 3.5, 5)),
    # the ceil-mode extension is never counted, even with count_include_pad
    (dict(kernel_shape=(2,), strides=(2,), ceil_mode=True, count_include_pad=True),
     row(1.5, 3.5, 5)),
    # dilation 2: taps o, o + 2: (1,3) (2,4) (3,5)
    (dict(kernel_shape=(2,), dilations=(2,)), row(2, 3, 4)),
    # dilation 2, pads 1, 1: taps o - 1, o + 1: (p,2) (1,3) (2,4) (3,5) (4,p)
    (dict(kernel_shape=(2,), dilations=(2,), pads=(1, 1)), row(2, 2, 3, 4, 4)),
    (dict(kernel_shape=(2,), dilations=(2,), pads=(1, 1), count_include_pad=True),
     row(1, 2, 3, 4, 2)),
    # VALID: floor((5 - 3) / 2) + 1 = 2
    (dict(kernel_shape=(3,), strides=(2,), auto_pad="VALID"), row(2, 4)),
    # SAME: ceil(5 / 2) = 3, total pad (3 - 1) * 2 + 2 - 5 = 1: at the end (UPPER) ...
    (dict(kernel_shape=(2,), strides=(2,), auto_pad="SAME_UPPER"), row(1.5, 3.5, 5)),
    (dict(kernel_shape=(2,), strides=(2,), auto_pad="SAME_UPPER", count_include_pad=True),
     row(1.5, 3.5, 2.5)),
    # ... or at the beginning (LOWER): (p,1) (2,3) (4,5)
    (dict(kernel_shape=(2,), strides=(2,), auto_pad="SAME_LOWER"), row(1, 2.5, 4.5)),
    # SAME with dilation: extent 3, out 5, total pad 4 + 3 - 5 = 2 -> (1, 1)
    (dict(kernel_shape=(2,), dilations=(2,), auto_pad="SAME_UPPER"), row(2, 2, 3, 4, 4)),
])
def test_1d_hand_values(kwargs, want):
  k = kwargs.pop("kernel_shape")
  got = jaxops.average_pool(X5, k, **kwargs)
  assert got.dtype == np.float64
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-15)


def test_ceil_mode_drops_window_starting_in_right_padding():
  # ONNX test case averagepool_2d_ceil_last_window_starts_on_pad, in 1-D: n = 2, k = 3, s = 3,
  # pads 1, 1: ceil((2 + 2 - 3) / 3) + 1 = 2, but window 1 starts at 3 - 1 = 2 >= n: dropped.
  got = jaxops.average_pool(row(1, 2), (3,), strides=(3,), pads=(1, 1), ceil_mode=True,
                            count_include_pad=True)
  np.testing.assert_array_equal(np.asarray(got), row(1.0))


def test_2d_divisor_is_product_of_axis_counts():
  x = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
  got = np.asarray(jaxops.average_pool(x, (2, 2), pads=(1, 1, 0, 0)))
  # windows of the padded 4x4 grid: corner sees x[0,0] only, edges two, the rest four.
  want = np.array([[1, 1.5, 2.5], [2.5, 3, 4], [5.5, 6, 7]])
  np.testing.assert_allclose(got[0, 0], want, rtol=1e-15)
  got = np.asarray(jaxops.average_pool(x, (2, 2), pads=(1, 1, 0, 0), count_include_pad=True))
  np.testing.assert_allclose(got[0, 0], want * np.array([[1, 2, 2], [2, 4, 4], [2, 4, 4]]) / 4,
                             rtol=1e-15)


def test_3d_and_leading_axes():
  x = np.arange(2 * 4 * 4 * 4, dtype=np.float64).reshape(2, 4, 4, 4)  # one leading axis
  got = np.asarray(jaxops.average_pool(x, (2, 2, 2), strides=(2, 2, 2)))
  want = x.reshape(2, 2, 2, 2, 2, 2, 2).mean(axis=(2, 4, 6))
  np.testing.assert_allclose(got, want, rtol=1e-15)
  assert jaxops.average_pool(x[0, 0, 0], (2,)).shape == (3,)  # no leading axes at all


@pytest.mark.parametrize("n, k, s, d, pads, ceil, want", [
    (32, 3, 2, 1, (1, 1), False, 16), (112, 3, 2, 1, (1, 1), False, 56),
    (7, 2, 2, 1, (0, 0), False, 3), (7, 2, 2, 1, (0, 0), True, 4),
    (4, 3, 2, 1, (0, 0), True, 2),  # ONNX averagepool_2d_ceil
    (32, 5, 3, 2, (0, 0), False, 8), (32, 5, 3, 2, (0, 0), True, 9),
    (4, 2, 1, 2, (0, 0), True, 2),  # ONNX averagepool_2d_dilations
])
def test_output_length(n, k, s, d, pads, ceil, want):
  x = np.zeros((1, 1, n))
  y = jaxops.average_pool(x, (k,), strides=(s,), dilations=(d,), pads=pads, ceil_mode=ceil)
  assert y.shape == (1, 1, want)


# --- dtypes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(dtype):
  rng = np.random.default_rng(3)
  x64 = rng.standard_normal((2, 3, 6, 5))
  x = jnp.asarray(x64).astype(dtype)
  want = np.asarray(jnp.asarray(x).astype(np.float64))  # the rounded input, in float64
  # 2x2 stride 1 pads (1, 0, 0, 1), counted: hand loop over windows
  padded = np.pad(want, ((0, 0), (0, 0), (1, 0), (0, 1)))
  hand = (padded[..., :-1, :-1] + padded[..., 1:, :-1] + padded[..., :-1, 1:]
          + padded[..., 1:, 1:]) / 4
  got = jaxops.average_pool(x, (2, 2), pads=(1, 0, 0, 1), count_include_pad=True)
  assert got.dtype == x.dtype
  np.testing.assert_allclose(np.asarray(got.astype(np.float64)), hand, rtol=TOL[dtype],
                             atol=TOL[dtype])
  g = jaxops.global_average_pool(x)
  assert g.dtype == x.dtype and g.shape == (2, 3, 1, 1)
  np.testing.assert_allclose(np.asarray(g.astype(np.float64)),
                             want.mean(axis=(2, 3), keepdims=True), rtol=TOL[dtype],
                             atol=TOL[dtype])


def test_half_types_accumulate_in_float32():
  # float16: the sum of two 60000s overflows float16 (max 65504), not float32.
  x = jnp.full((1, 1, 4, 4), 60000.0, np.float16)
  for y in (jaxops.average_pool(x, (2, 2), strides=(2, 2)),
            jaxops.average_pool(x, (3, 3), pads=(1, 1, 1, 1)), jaxops.global_average_pool(x)):
    assert y.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(y.astype(np.float64)), np.full(y.shape, 60000.0))
  # bfloat16 (8-bit significand): 256 + 1 rounds back to 256, so a bfloat16 sum of
  # 256, 1, 1, 1, 1, 1 is at most 260; in float32 it is 261, and 261 / 6 = 43.5 is a bfloat16.
  x = jnp.asarray([[[256.0, 1, 1, 1, 1, 1]]], jnp.bfloat16)
  for y in (jaxops.average_pool(x, (6,)), jaxops.average_pool(x, (6,), pads=(0, 5))[..., :1],
            jaxops.global_average_pool(x)):
    assert y.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(y.astype(np.float64)).ravel(), [43.5])


def test_global_average_pool_values():
  x = np.arange(24.0).reshape(2, 3, 4)
  np.testing.assert_allclose(np.asarray(jaxops.global_average_pool(x)),
                             (np.arange(6.0) * 4 + 1.5).reshape(2, 3, 1), rtol=1e-15)
  x3 = np.arange(16.0).reshape(1, 2, 2, 2, 2)
  np.testing.assert_allclose(np.asarray(jaxops.global_average_pool(x3)).ravel(), [3.5, 11.5])
  assert jaxops.global_average_pool(np.ones((2, 3))).shape == (2, 3)


def test_global_average_pool_float32_sums_of_long_rows_are_accurate():
  """Two planes of 2**21 values near 1000 in float32: the mean within a few float32 units of
  the float64 mean, as torch's float32 mean is (a float32 sum along the row, the matrix-vector
  product this pool used, was off by about 1e-3 relative here)."""
  torch = pytest.importorskip("torch")
  x = (1000 + np.random.default_rng(0).standard_normal((1, 2, 2048, 1024))).astype(np.float32)
  truth = x.astype(np.float64).mean(axis=(2, 3))
  ours = np.asarray(jaxops.global_average_pool(x), np.float64)[..., 0, 0]
  theirs = torch.tensor(x).mean(dim=(2, 3)).numpy().astype(np.float64)
  err, torch_err = np.max(np.abs(ours - truth)), np.max(np.abs(theirs - truth))
  assert err <= max(2 * torch_err, 4 * np.spacing(np.float32(1000))), (err, torch_err)


# --- errors -----------------------------------------------------------------------------------


X = np.zeros((1, 1, 4, 4), np.float32)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(kernel_shape=(6, 6)), ValueError, r"window along spatial axis 0 spans 6 .* padded "
     r"input has only 4 .* output length is -1"),
    (dict(kernel_shape=(3, 3), dilations=(3, 3), pads=(0, 0, 0, 0)), ValueError,
     r"spans 7 elements"),
    (dict(kernel_shape=(2, 2), pads=(2, 0, 0, 0)), ValueError,
     r"`pads` must be smaller than the kernel along its axis .*got \(2, 0, 0, 0\)"),
    (dict(kernel_shape=(2, 2), pads=(0, -1, 0, 0)), ValueError, r"`pads` must be integers >= 0"),
    (dict(kernel_shape=(2, 2), pads=(0, 0)), ValueError, r"`pads` must be a sequence of 4"),
    (dict(kernel_shape=(2, 2), strides=(0, 1)), ValueError,
     r"average_pool: argument `strides` must be integers >= 1 \(zero or negative"),
    (dict(kernel_shape=(2, 2), strides=(1, -2)), ValueError, r"`strides` must be integers >= 1"),
    (dict(kernel_shape=(2, 2), strides=(1,)), ValueError, r"`strides` must be a sequence of 2"),
    (dict(kernel_shape=(2, 2), dilations=(0, 1)), ValueError, r"`dilations` must be integers"),
    (dict(kernel_shape=(0, 2)), ValueError, r"`kernel_shape` must be integers >= 1"),
    (dict(kernel_shape=()), ValueError, r"`kernel_shape` must be a non-empty"),
    (dict(kernel_shape=(1.5, 2)), TypeError, r"`kernel_shape` must be a 1-D sequence of integers"),
    (dict(kernel_shape=(2, 2, 2, 2, 2)), ValueError, r"`x` must have at least 5 axes"),
    (dict(kernel_shape=(2, 2), auto_pad="SAME"), ValueError,
     r"`auto_pad` must be one of 'NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'; got 'SAME'"),
    (dict(kernel_shape=(2, 2), auto_pad="VALID", pads=(1, 0, 0, 0)), ValueError,
     r"`pads` must be omitted \(or zeros\) when auto_pad is 'VALID'"),
    # taps -1 and 4 of the only window lie outside the 4 input rows
    (dict(kernel_shape=(2, 1), dilations=(5, 1), pads=(1, 0, 1, 0)), ValueError,
     r"count_include_pad=False, output position 0 along spatial axis 0 .* covers no input"),
])
def test_errors(kwargs, exc, match):
  k = kwargs.pop("kernel_shape")
  with pytest.raises(exc, match=match):
    jaxops.average_pool(X, k, **kwargs)


def test_error_dtype():
  with pytest.raises(TypeError, match=r"average_pool: argument `x` must have dtype in "
                     r"\(float16, bfloat16, float32, float64\); got dtype int32"):
    jaxops.average_pool(np.zeros((1, 1, 4), np.int32), (2,))
  with pytest.raises(TypeError, match=r"global_average_pool: argument `x` must have dtype"):
    jaxops.global_average_pool(np.zeros((1, 1, 4), np.int32))
  with pytest.raises(ValueError, match=r"global_average_pool: argument `x` must have at least 2"):
    jaxops.global_average_pool(np.zeros((4,), np.float32))


def test_error_traced_kernel_shape():
  f = jax.jit(lambda x, k: jaxops.average_pool(x, k))
  with pytest.raises(TypeError, match=r"`kernel_shape` decides the output shape, so it must be "
                     r"concrete"):
    f(X, jnp.array([2, 2]))


# --- the ONNX adapters, one per version -------------------------------------------------------


def _run(version, x, **attrs):
  pytest.importorskip("onnx")
  from onnx import TensorProto, helper

  from jaxops.onnx import BackendRep

  node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
  graph = helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
      [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
  return BackendRep(model).run([x])[0]


def test_adapter_defaults_per_version():
  x = row(1, 2, 3)
  for v in (1, 7, 10, 11, 19, 22):  # count_include_pad absent: padding is not counted
    np.testing.assert_array_equal(_run(v, x, kernel_shape=[2], pads=[1, 1]), row(1, 1.5, 2.5, 3))
  for v in (7, 10, 11, 19, 22):
    np.testing.assert_array_equal(
        _run(v, x, kernel_shape=[2], pads=[1, 1], count_include_pad=1), row(0.5, 1.5, 2.5, 1.5))
  for v in (10, 11, 19, 22):
    np.testing.assert_array_equal(_run(v, x, kernel_shape=[2], strides=[2], ceil_mode=1),
                                  row(1.5, 3))
  for v in (19, 22):
    np.testing.assert_array_equal(_run(v, x, kernel_shape=[2], dilations=[2]), row(2))


@pytest.mark.parametrize("version, attr", [(1, "count_include_pad"), (7, "ceil_mode"),
                                           (11, "dilations")])
def test_adapter_rejects_later_attributes(version, attr):
  pytest.importorskip("onnx")
  from jaxops.onnx import _registry

  from onnx import helper

  from jaxops.onnx import run_node

  # The backend checks each version's attribute set against its schema when it prepares a node.
  assert ("AveragePool", version) in _registry.ADAPTERS
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2], **{attr: 1})
  with pytest.raises(ValueError, match=rf"\(AveragePool-{version}\): has no attribute `{attr}`"):
    run_node(node, [np.asarray(row(1, 2, 3))], opset_version=version)


def test_global_adapter_versions():
  pytest.importorskip("onnx")
  from jaxops.onnx import _registry

  for v in (1, 22):
    y = _registry.ADAPTERS[("GlobalAveragePool", v)].fn([np.ones((1, 2, 3, 3))], {})[0]
    assert y.shape == (1, 2, 1, 1)


# Every float type jaxops pools, by ONNX schema type string and element type name.
_SCHEMA_TYPES = {"tensor(float16)": np.float16, "tensor(bfloat16)": jnp.bfloat16,
                 "tensor(float)": np.float32, "tensor(double)": np.float64}
_TYPE_NAMES = {np.float16: "FLOAT16", jnp.bfloat16: "BFLOAT16", np.float32: "FLOAT",
               np.float64: "DOUBLE", np.int32: "INT32"}
_POOL_VERSIONS = ([("AveragePool", v) for v in (1, 7, 10, 11, 19, 22)]
                  + [("GlobalAveragePool", v) for v in (1, 22)])


@pytest.mark.parametrize("op, version", _POOL_VERSIONS)
def test_adapter_input_types_follow_the_schema(op, version):
  onnx_defs = pytest.importorskip("onnx.defs")
  from jaxops.onnx import _registry

  (constraint,) = onnx_defs.get_schema(op, version, "").type_constraints
  assert constraint.type_param_str == "T"
  allowed = {_SCHEMA_TYPES[t] for t in constraint.allowed_type_strs}
  # The schema's list, written out: float16, float, double; bfloat16 only from version 22.
  assert allowed == set(DTYPES) - (set() if version >= 22 else {jnp.bfloat16})
  names = ", ".join(sorted(_TYPE_NAMES[t] for t in allowed))
  adapter = _registry.ADAPTERS[(op, version)]
  attrs = {"kernel_shape": [2, 2], "strides": [2, 2]} if op == "AveragePool" else {}
  x64 = np.arange(16.0).reshape(1, 1, 4, 4)
  want = (x64.reshape(1, 1, 2, 2, 2, 2).mean(axis=(3, 5)) if op == "AveragePool"
          else np.full((1, 1, 1, 1), 7.5))
  for dtype in DTYPES + [np.int32]:
    x = jnp.asarray(x64).astype(dtype)
    if dtype in allowed:
      eager = adapter.fn([x], dict(attrs))[0]
      traced = jax.jit(lambda v: adapter.fn([v], dict(attrs))[0])(x)  # as the backend runs it
      for y in (eager, traced):
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(y.astype(np.float64)), want)
    else:
      # The backend's shared node check runs before every adapter.
      with pytest.raises(TypeError, match=rf"^jaxops.onnx: node 'n' \({op}-{version}\): input 0 "
                         rf"\(`X`\) has element type {_TYPE_NAMES[dtype]}; allowed: {names}$"):
        _registry.check_node("n", adapter, [x], dict(attrs))



# --- auto_pad="" (exporters write it; onnxruntime and onnx.reference read it as NOTSET) ----------


def test_empty_auto_pad_reads_as_notset():
  # pads 1, 1, kernel 2 over [1, 2, 3]: windows (p,1) (1,2) (2,3) (3,p), padding not counted.
  want = row(1, 1.5, 2.5, 3)
  for auto_pad in ("", b"", "NOTSET"):
    got = jaxops.average_pool(row(1, 2, 3), (2,), pads=(1, 1), auto_pad=auto_pad)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("version", [1, 7, 10, 11, 19, 22])
def test_empty_auto_pad_through_the_backend(version):
  # The same hand-derived windows as above, from an AveragePool node with auto_pad="".
  np.testing.assert_array_equal(
      _run(version, row(1, 2, 3), kernel_shape=[2], pads=[1, 1], auto_pad=""),
      row(1, 1.5, 2.5, 3))
  # auto_pad="" with no pads: no padding; kernel 2 stride 1 gives (1,2) (2,3).
  np.testing.assert_array_equal(_run(version, row(1, 2, 3), kernel_shape=[2], auto_pad=""),
                                row(1.5, 2.5))


def test_empty_auto_pad_matches_onnxruntime_and_reference():
  ort = pytest.importorskip("onnxruntime")
  from onnx import TensorProto, helper
  from onnx.reference import ReferenceEvaluator

  from jaxops.onnx import Backend

  x = np.arange(1.0, 26.0, dtype=np.float32).reshape(1, 1, 5, 5)
  node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1], auto_pad="")
  model = helper.make_model(helper.make_graph(
      [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])]),
      opset_imports=[helper.make_opsetid("", 22)])
  model.ir_version = 11
  got = Backend.run_model(model, [x])[0]
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-6)
  np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-6)


@pytest.mark.parametrize("arg", ["ceil_mode", "count_include_pad"])
@pytest.mark.parametrize("value", ["no", 0.5, None, 2])
def test_flags_must_be_bools(arg, value):
  # bool("no") is True: a string flag used to read as set, and count_include_pad="no" gave the
  # padded average silently
  with pytest.raises(TypeError, match=rf"jaxops.average_pool: argument `{arg}` must be a bool"):
    jaxops.average_pool(np.arange(10.0).reshape(1, 1, 10), (3,), pads=(1, 1), **{arg: value})


@pytest.mark.parametrize("fn", [jaxops.average_pool, jaxops.max_pool, jaxops.lp_pool])
def test_a_kernel_too_long_to_plan_is_an_error(fn):
  # auto_pad SAME pads any input to hold any kernel; 2**40 taps used to ask NumPy for 8 TiB
  with pytest.raises(ValueError, match=r"argument `kernel_shape` must be integers <= 16777216"):
    fn(np.zeros((1, 1, 8), np.float32), (2**40,), auto_pad="SAME_UPPER")
