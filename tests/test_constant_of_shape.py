"""jaxops.constant_of_shape against NumPy (np.full: the spec's meaning) and onnx.reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxops

# Every dtype ConstantOfShape-25 allows for `value`.
DTYPES_25 = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
             np.uint16, np.uint32, np.uint64, ml_dtypes.uint4, ml_dtypes.int4, np.bool_,
             ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn,
             ml_dtypes.float8_e8m0fnu, ml_dtypes.uint2, ml_dtypes.int2]


def test_default_is_float32_zeros():
  y = jaxops.constant_of_shape([2, 3])
  assert y.dtype == np.float32
  np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))


def test_every_dtype_of_version_25():
  shape = np.array([2, 3], np.int64)
  for dtype in DTYPES_25:
    value = np.array([1], np.float32).astype(dtype)
    y = jaxops.constant_of_shape(shape, value)
    assert y.dtype == np.dtype(dtype), dtype
    np.testing.assert_array_equal(np.asarray(y).astype(np.float64), np.ones((2, 3)))


def test_shape_forms_scalar_and_empty():
  v = np.array([4.5], np.float64)
  for shape in ([2, 1, 3], (2, 1, 3), np.array([2, 1, 3], np.int64), np.array([2, 1, 3])):
    np.testing.assert_array_equal(jaxops.constant_of_shape(shape, v), np.full((2, 1, 3), 4.5))
  s = jaxops.constant_of_shape([], v)
  assert s.shape == () and float(s) == 4.5
  s = jaxops.constant_of_shape(np.zeros((0,), np.int64))
  assert s.shape == () and s.dtype == np.float32
  e = jaxops.constant_of_shape([3, 0, 2], np.array([7], np.int32))
  assert e.shape == (3, 0, 2) and e.dtype == np.int32
  # value may be any one-element shape; a Python scalar takes JAX's default dtype for it.
  np.testing.assert_array_equal(jaxops.constant_of_shape([2], np.array([[-3]], np.int8)),
                                np.array([-3, -3], np.int8))
  assert jaxops.constant_of_shape([2], 2.5).dtype == jnp.asarray(2.5).dtype


def test_matches_onnx_reference():
  onnx = pytest.importorskip("onnx")
  from onnx import helper
  from onnx.reference import ReferenceEvaluator

  for value in (np.array([2.5], np.float32), np.array([-7], np.int64), np.array([True]),
                np.array([3], np.uint16)):
    node = helper.make_node("ConstantOfShape", ["x"], ["y"],
                            value=onnx.numpy_helper.from_array(value, "value"))
    ref = ReferenceEvaluator(node)
    for shape in (np.array([2, 3], np.int64), np.array([0], np.int64), np.array([4], np.int64)):
      (want,) = ref.run(None, {"x": shape})
      got = np.asarray(jaxops.constant_of_shape(shape, value))
      assert got.dtype == want.dtype and got.shape == want.shape
      np.testing.assert_array_equal(got, want)


def test_under_jit_and_differentiable_in_value():
  f = jax.jit(lambda v: jaxops.constant_of_shape((2, 2), v))
  np.testing.assert_array_equal(f(jnp.float32(1.5)), np.full((2, 2), 1.5, np.float32))
  g = jax.grad(lambda v: jnp.sum(jaxops.constant_of_shape([3, 2], v) ** 2))(jnp.float32(2.0))
  assert float(g) == 24.0  # d/dv sum over 6 entries of v**2 = 12 v
  h = jax.jit(jaxops.constant_of_shape, static_argnums=0)
  assert h((4,), jnp.int32(3)).tolist() == [3, 3, 3, 3]


def test_errors():
  with pytest.raises(ValueError, match=r"jaxops.constant_of_shape: argument `shape` must be dims "
                     r">= 0; got \[2, -1\]"):
    jaxops.constant_of_shape([2, -1])
  with pytest.raises(TypeError, match=r"argument `shape` decides the output shape, so it must be "
                     r"concrete"):
    jax.jit(jaxops.constant_of_shape)(jnp.array([2, 3]))
  with pytest.raises(TypeError, match=r"argument `shape` must be a 1-D sequence of integers"):
    jaxops.constant_of_shape([1.5])
  with pytest.raises(TypeError, match=r"argument `shape` must be a 1-D sequence of integers"):
    jaxops.constant_of_shape(3)
  with pytest.raises(ValueError, match=r"argument `value` must be a one-element array; got array "
                     r"\[1.0, 2.0\]"):
    jaxops.constant_of_shape([2], np.array([1.0, 2.0]))
  with pytest.raises(TypeError, match=r"argument `value` must be a numeric or bool one-element "
                     r"array \(ConstantOfShape has no STRING output\)"):
    jaxops.constant_of_shape([2], np.array(["a"]))
  with pytest.raises(TypeError, match=r"argument `value` must be an array whose dtype is a real "
                     r"ONNX element type"):
    jaxops.constant_of_shape([2], np.array([1j]))
