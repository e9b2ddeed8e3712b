"""jaxops.constant_of_shape against NumPy (np.full: the spec's meaning) and onnx.reference."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import jaxops
from jaxops import _checks

# Every dtype ConstantOfShape-25 allows for `value` (test_cast_versions.py reads each version's
# list from onnx.defs and checks the adapters against it).
DTYPES_25 = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
             np.uint16, np.uint32, np.uint64, ml_dtypes.uint4, ml_dtypes.int4, np.bool_,
             ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn,
             ml_dtypes.float8_e8m0fnu, ml_dtypes.uint2, ml_dtypes.int2]


class ConstantOfShapeTest(chex.TestCase):
  """Behaviour, eagerly and under jax.jit (the shape closed over: it must be static)."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_default_is_float32_zeros(self):
    y = self.variant(lambda: jaxops.constant_of_shape([2, 3]))()
    chex.assert_trees_all_equal(y, np.zeros((2, 3), np.float32), strict=True)

  @chex.variants(with_jit=True, without_jit=True)
  def test_every_dtype_of_version_25(self):
    shape = np.array([2, 3], np.int64)
    values = [np.array([1], np.float32).astype(d) for d in DTYPES_25]
    got = self.variant(lambda *v: [jaxops.constant_of_shape(shape, a) for a in v])(*values)
    for dtype, y in zip(DTYPES_25, got):
      # np.full is the spec's meaning: every element is `value`, of `value`'s type.
      chex.assert_trees_all_equal(y, np.full((2, 3), 1, dtype), strict=True)

  @chex.variants(with_jit=True, without_jit=True)
  def test_shape_forms_scalar_and_empty(self):
    v = np.array([4.5], np.float64)
    for shape in ([2, 1, 3], (2, 1, 3), np.array([2, 1, 3], np.int64), np.array([2, 1, 3])):
      y = self.variant(lambda a, s=shape: jaxops.constant_of_shape(s, a))(v)
      chex.assert_trees_all_equal(y, np.full((2, 1, 3), 4.5), strict=True)
    s = self.variant(lambda a: jaxops.constant_of_shape([], a))(v)
    chex.assert_trees_all_equal(s, np.float64(4.5), strict=True)
    s = self.variant(lambda: jaxops.constant_of_shape(np.zeros((0,), np.int64)))()
    chex.assert_trees_all_equal(s, np.float32(0), strict=True)
    e = self.variant(lambda a: jaxops.constant_of_shape([3, 0, 2], a))(np.array([7], np.int32))
    chex.assert_trees_all_equal(e, np.zeros((3, 0, 2), np.int32), strict=True)
    # value may be any one-element shape.
    y = self.variant(lambda a: jaxops.constant_of_shape([2], a))(np.array([[-3]], np.int8))
    chex.assert_trees_all_equal(y, np.array([-3, -3], np.int8), strict=True)

  @chex.variants(with_jit=True, without_jit=True)
  def test_matches_onnx_reference(self):
    values = (np.array([2.5], np.float32), np.array([-7], np.int64), np.array([True]),
              np.array([3], np.uint16))
    shapes = (np.array([2, 3], np.int64), np.array([0], np.int64), np.array([4], np.int64))
    got = self.variant(lambda *v: [[jaxops.constant_of_shape(s, a) for s in shapes] for a in v])(
        *values)
    for value, row in zip(values, got):
      node = helper.make_node("ConstantOfShape", ["x"], ["y"],
                              value=onnx.numpy_helper.from_array(value, "value"))
      ref = ReferenceEvaluator(node)
      for shape, y in zip(shapes, row):
        (want,) = ref.run(None, {"x": shape})
        chex.assert_trees_all_equal(y, want, strict=True)


def test_python_scalar_value_takes_jax_default_dtype():
  assert jaxops.constant_of_shape([2], 2.5).dtype == jnp.asarray(2.5).dtype


def test_under_jit_differentiable_in_value_and_no_retrace():
  chex.clear_trace_counter()
  f = jax.jit(chex.assert_max_traces(lambda v: jaxops.constant_of_shape((2, 2), v), n=1))
  for v in (1.5, 2.5, -1.0):  # same shape and dtype: one trace
    chex.assert_trees_all_equal(f(jnp.float32(v)), np.full((2, 2), v, np.float32), strict=True)
  g = jax.grad(lambda v: jnp.sum(jaxops.constant_of_shape([3, 2], v) ** 2))(jnp.float32(2.0))
  assert float(g) == 24.0  # d/dv sum over 6 entries of v**2 = 12 v
  h = jax.jit(jaxops.constant_of_shape, static_argnums=0)
  chex.assert_trees_all_equal(h((4,), jnp.int32(3)), np.full(4, 3, np.int32), strict=True)


def test_errors():
  with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: argument `shape` must be dims "
                     r">= 0; got \[2, -1\]"):
    jaxops.constant_of_shape([2, -1])
  with pytest.raises(TypeError, match=r"argument `shape` decides the output shape, so it must be "
                     r"concrete"):
    jax.jit(jaxops.constant_of_shape)(jnp.array([2, 3]))
  with pytest.raises(ValueError, match=r"argument `value` must be a one-element array; got array "
                     r"\[1.0, 2.0\]"):
    jaxops.constant_of_shape([2], np.array([1.0, 2.0]))
  with pytest.raises(TypeError, match=r"argument `value` must be a numeric or bool one-element "
                     r"array \(ConstantOfShape has no STRING output\)"):
    jaxops.constant_of_shape([2], np.array(["a"]))
  with pytest.raises(TypeError, match=r"argument `value` must be an array whose dtype is a real "
                     r"ONNX element type"):
    jaxops.constant_of_shape([2], np.array([1j]))


# Malformed calls: each is refused with the op and the argument named.
_SHAPE_MSG = r"jaxops.constant_of_shape: argument `shape` must be a 1-D sequence of integers"
_BAD_CALLS = [
    # (shape, value, exception, message pattern)
    ([1.5], None, TypeError, _SHAPE_MSG),
    ([2.0], None, TypeError, _SHAPE_MSG),  # ONNX's shape is an int64 tensor
    (np.array([2.0]), None, TypeError, _SHAPE_MSG),
    ([True], None, TypeError, _SHAPE_MSG),
    (3, None, TypeError, _SHAPE_MSG),
    (None, None, TypeError, _SHAPE_MSG),
    ("ab", None, TypeError, _SHAPE_MSG),
    (["1", "2"], None, TypeError, _SHAPE_MSG),
    ([[1], [2, 3]], None, TypeError, _SHAPE_MSG),
    ([[1, 2]], None, TypeError, _SHAPE_MSG),
    ([2**70], None, TypeError, _SHAPE_MSG),
    ([np.nan], None, TypeError, _SHAPE_MSG),
    (np.array([1j]), None, TypeError, _SHAPE_MSG),
    ([-1], None, ValueError, r"jaxops.constant_of_shape: argument `shape` must be dims >= 0"),
    ([2], np.array([]), ValueError, r"argument `value` must be a one-element array"),
    ([2], [1, 2], ValueError, r"argument `value` must be a one-element array"),
    ([2], "a", TypeError, r"argument `value` must be a numeric or bool one-element array"),
    ([2], b"a", TypeError, r"argument `value` must be a numeric or bool one-element array"),
    ([2], np.array([1], object), TypeError, r"argument `value` must be a numeric or bool"),
    ([2], {}, TypeError, r"argument `value` must be an array of numbers or bools"),
    ([2], [None], TypeError, r"argument `value` must be an array of numbers or bools"),
    ([2], [[1], [2, 3]], TypeError, r"argument `value` must be an array of numbers or bools"),
    ([2], [2**70], TypeError, r"argument `value` must be an array of numbers or bools"),
    ([2], 1j, TypeError, r"argument `value` must be an array whose dtype is a real ONNX"),
    ([2], np.zeros(1, "V4"), TypeError, r"argument `value` must be an array whose dtype is a"),
    ([2], np.zeros(1, "M8[D]"), TypeError, r"argument `value` must be an array whose dtype is"),
    ([2], np.ones(1, np.longdouble), TypeError, r"argument `value` must be an array whose dtype"),
    ([2], np.ones(1, ml_dtypes.float6_e2m3fn), TypeError,
     r"argument `value` must be an array of a type the installed JAX/XLA can hold"),
]


@pytest.mark.parametrize("shape, value, exc, match", _BAD_CALLS, ids=range(len(_BAD_CALLS)))
def test_malformed_calls_name_op_and_argument(shape, value, exc, match):
  with pytest.raises(exc, match=match) as info:
    jaxops.constant_of_shape(shape, value)
  assert str(info.value).startswith("jaxops.constant_of_shape: argument `")


def test_traced_value_with_two_elements_is_refused():
  with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: argument `value` must be a "
                     r"one-element array; got a traced value"):
    jax.jit(lambda v: jaxops.constant_of_shape([2], v))(jnp.ones(2))


def test_an_output_that_cannot_fit_is_refused_before_allocating():
  # 2**40 * 2**40 float32 elements: 2**82 bytes, far beyond any device. The error names the op,
  # the shape and the bytes, and comes before XLA is asked for the buffer.
  limit = _checks.memory_limit()
  for shape, value, itemsize in (([2**40, 2**40], None, 4),
                                 ([2**62], np.array([1], np.int8), 1),
                                 (np.array([2**63 - 1], np.int64), np.array([1.0]), 8)):
    nbytes = int(np.prod(np.array(shape, dtype=object))) * itemsize
    assert nbytes > limit
    with pytest.raises(ValueError, match=rf"jaxops.constant_of_shape: the output would have shape "
                       rf"\({shape[0]}, ?.*{nbytes} bytes"):
      jaxops.constant_of_shape(shape, value)
  # Under jit too (the shape is static, so the check runs when tracing).
  with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: the output would have shape"):
    jax.jit(lambda v: jaxops.constant_of_shape([2**40, 2**40], v))(jnp.float32(1))


def test_an_empty_output_whose_other_dims_overflow_is_an_error_not_an_abort():
  # XLA multiplies the dims (and the element size) in int64 even with a zero dim and aborts the
  # process where that overflows; onnx.reference refuses such a shape too ("array is too big").
  from onnx import helper
  from onnx.reference import ReferenceEvaluator

  node = helper.make_node("ConstantOfShape", ["s"], ["y"])
  for shape in ([2**40, 2**40, 0], [2**62, 2**62, 0], [0, 2**62]):
    with pytest.raises(ValueError):
      ReferenceEvaluator(node).run(None, {"s": np.array(shape, np.int64)})
    with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: the output shape .* "
                                         r"exceeds 2\*\*63 - 1"):
      jaxops.constant_of_shape(shape)
  assert jaxops.constant_of_shape([2**62, 0], np.array([1], np.int8)).shape == (2**62, 0)


def test_64_bit_values_without_64_bit_types():
  """With JAX's 64-bit types off an int64 value is held as int32: one that int32 cannot hold
  (JAX would wrap 2**40 to 0) is a ValueError; one it can is kept. Oracle: onnx.reference."""
  node = helper.make_node("ConstantOfShape", ["s"], ["y"],
                          value=helper.make_tensor("v", onnx.TensorProto.INT64, [1], [2 ** 40]))
  assert ReferenceEvaluator(node).run(None, {"s": np.array([2], np.int64)})[0].tolist() == [
      2 ** 40] * 2
  assert jaxops.constant_of_shape([2], np.array([2 ** 40], np.int64)).tolist() == [2 ** 40] * 2
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: argument `value` must be "
                       r"within int32's range"):
      jaxops.constant_of_shape([2], np.array([2 ** 40], np.int64))
    assert jaxops.constant_of_shape([2], np.array([-7], np.int64)).tolist() == [-7, -7]
