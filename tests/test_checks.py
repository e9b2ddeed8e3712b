"""The shared argument helpers in jaxops._checks: one spelling of each check for every op."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxops
from jaxops import _checks


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), (0, False), (1, True),
                                             (np.bool_(True), True), (np.int64(1), True)])
def test_static_bool_accepts_bools_and_onnx_integers(value, expected):
  assert _checks.static_bool("jaxops.op", "flag", value) is expected


@pytest.mark.parametrize("value", [2, -1, 0.5, "yes", None, [1]])
def test_static_bool_rejects_other_values_with_a_type_error(value):
  with pytest.raises(TypeError, match=r"jaxops\.op: argument `flag` must be a bool"):
    _checks.static_bool("jaxops.op", "flag", value)


def test_static_bool_rejects_tracers():
  def f(v):
    return _checks.static_bool("jaxops.op", "flag", v)

  with pytest.raises(TypeError, match=r"argument `flag` .*concrete under jax.jit.*traced"):
    jax.jit(f)(True)


def test_static_float():
  assert _checks.static_float("jaxops.op", "a", np.float32(0.5)) == 0.5
  assert _checks.static_float("jaxops.op", "a", 3) == 3.0
  with pytest.raises(TypeError, match=r"jaxops\.op: argument `a` must be a float"):
    _checks.static_float("jaxops.op", "a", "0.5")
  with pytest.raises(TypeError, match=r"argument `a` must be a float"):
    _checks.static_float("jaxops.op", "a", True)
  with pytest.raises(ValueError, match=r"argument `a` must be a finite float"):
    _checks.static_float("jaxops.op", "a", float("nan"))
  assert np.isinf(_checks.static_float("jaxops.op", "a", float("inf"), finite=False))


@pytest.mark.parametrize("dtype, expected", [(jnp.float16, np.float32), (jnp.bfloat16, np.float32),
                                             (jnp.float32, np.float32), (jnp.float64, np.float64)])
def test_compute_dtype(dtype, expected):
  assert _checks.compute_dtype(dtype) == np.dtype(expected)


def test_along_axis():
  v = np.arange(3)
  assert _checks.along_axis(v, 0, 1).shape == (3,)
  assert _checks.along_axis(v, 1, 4).shape == (1, 3, 1, 1)
  assert _checks.along_axis(v, 3, 4).shape == (1, 1, 1, 3)


def test_check_output_size_names_op_shape_and_bytes():
  # 2^40 float32 elements are 2^42 bytes (4 TiB): more than any machine here has. The product
  # is taken over Python integers, so it cannot wrap around as an int32/int64 product would.
  shape = (1, 1, 2**20, 2**20)
  with pytest.raises(ValueError, match=r"jaxops\.resize: the output would have shape "
                     r"\(1, 1, 1048576, 1048576\) and dtype float32: 1099511627776 elements, "
                     r"4398046511104 bytes"):
    _checks.check_output_size("jaxops.resize", shape, np.float32)
  # Past the int64 range, too.
  with pytest.raises(ValueError, match=r"\d{20,} bytes"):
    _checks.check_output_size("jaxops.resize", (2**40, 2**40), np.float64)
  _checks.check_output_size("jaxops.resize", (1024, 1024), np.float32)


@pytest.mark.parametrize("value", [None, "abc", {"a": 1}, object(), 2**70, [[1, 2], [3]]])
def test_as_array_names_op_and_argument(value):
  with pytest.raises(TypeError, match=r"jaxops\.op: argument `img` must be an array of numbers"):
    _checks.as_array(value, "jaxops.op", "img")


def test_mode_strings_name_the_allowed_values_even_for_undecodable_bytes():
  class Mode(_checks.StrEnum):
    A = "a"

  assert Mode.from_string("jaxops.op", "mode", b"a") is Mode.A
  with pytest.raises(ValueError, match=r"jaxops\.op: argument `mode` must be one of 'a'"):
    Mode.from_string("jaxops.op", "mode", b"\xff")


_X4 = np.ones((1, 1, 4, 4), np.float32)
_Y = np.ones((1, 1, 2, 2), np.float32)
_I = np.array([[[[0, 3], [8, 15]]]])


@pytest.mark.parametrize("call, error, match", [
    # complex numbers were read as integers (the imaginary part dropped with a warning)
    (lambda: jaxops.average_pool(_X4, (2 + 1j, 2)), TypeError,
     r"average_pool: argument `kernel_shape` must be a 1-D sequence of integers"),
    (lambda: jaxops.resize(_X4, sizes=(3 + 1j, 3), axes=(2, 3)), TypeError,
     r"resize: argument `sizes`"),
    (lambda: jaxops.roi_align(_X4, [[0, 0, 2, 2.0]], [0], output_height=1 + 2j), TypeError,
     r"roi_align: argument `output_height`"),
    # values past int64 raised OverflowError or JAX's own TypeError
    (lambda: jaxops.average_pool(_X4, (2, 2), strides=2 ** 63), ValueError,
     r"average_pool: argument `strides` must be integers that int64 holds"),
    (lambda: jaxops.lp_pool(_X4, (2, 2), strides=1e308), ValueError,
     r"lp_pool: argument `strides`"),
    (lambda: jaxops.roi_align(_X4, [[0, 0, 2, 2.0]], [0], max_sampling_ratio=2 ** 63),
     ValueError, r"roi_align: argument `max_sampling_ratio`"),
    (lambda: jaxops.constant_of_shape(np.array([2 ** 63, 0], np.uint64)), ValueError,
     r"constant_of_shape: argument `shape` must be integers that int64 holds"),
    # past uint64 NumPy keeps Python ints as objects: "a 1-D sequence of integers" before, and
    # lp_pool's p of 2**64 ran (found by an error-handling audit)
    (lambda: jaxops.roi_align(_X4, [[0, 0, 2, 2.0]], [0], output_height=2 ** 64), ValueError,
     r"roi_align: argument `output_height` must be integers that int64 holds"),
    (lambda: jaxops.max_pool(_X4, (2 ** 64, 2)), ValueError,
     r"max_pool: argument `kernel_shape` must be integers that int64 holds"),
    (lambda: jaxops.lp_pool(_X4, (2, 2), p=2 ** 64), ValueError,
     r"lp_pool: argument `p` must be a positive integer that int64 holds"),
    (lambda: jaxops.global_lp_pool(_X4, p=2 ** 63), ValueError,
     r"global_lp_pool: argument `p` must be a positive integer that int64 holds"),
    # ragged nesting raised NumPy's message, naming neither op nor argument
    (lambda: jaxops.average_pool(_X4, [[1], [2, 3]]), TypeError,
     r"average_pool: argument `kernel_shape` must be a number or a flat sequence"),
    # outputs past the device's memory: XLA aborted the process (2**62 elements) or ran out of it
    (lambda: jaxops.max_unpool(_Y, _I, (2, 2), strides=(2, 2),
                               output_shape=(1, 1, 2 ** 31, 2 ** 31)), ValueError,
     r"max_unpool: the output would have shape \(1, 1, 2147483648, 2147483648\)"),
    (lambda: jaxops.max_unpool(_Y, _I, (2, 2), strides=(2 ** 30, 2 ** 30)), ValueError,
     r"max_unpool: the output would have shape"),
    (lambda: jaxops.affine_grid(np.ones((1, 2, 3)), (1, 1, 2 ** 20, 2 ** 20)), ValueError,
     r"affine_grid: the output would have shape \(1, 1048576, 1048576, 2\)"),
    (lambda: jaxops.roi_align(_X4, [[0, 0, 2, 2.0]], [0], output_height=2 ** 40), ValueError,
     r"roi_align: the output would have shape"),
    (lambda: jaxops.max_pool(_X4, (2, 2), auto_pad=np.zeros(2)), ValueError,
     r"max_pool: argument `auto_pad` must be one of"),
    # a tuple read as a structured NumPy dtype: the cast ran (to STRING, or to float)
    (lambda: jaxops.cast(np.array([1.5]), ("a", "b")), TypeError, r"cast: argument `to`"),
    # NumPy's own message for a roi that is no numbers
    (lambda: jaxops.resize(_X4, sizes=(3, 3), axes=(2, 3), roi="abc",
                           coordinate_transformation_mode="tf_crop_and_resize"), TypeError,
     r"resize: argument `roi` must be a 1-D array of 4 real numbers"),
])
def test_fuzzed_arguments_give_named_errors(call, error, match):
  """Found by an argument fuzzer: each raised another exception type, aborted, or ran."""
  with pytest.raises(error, match=match):
    call()


@pytest.mark.parametrize("x64", [True, False])
def test_roi_align_max_sampling_ratio_past_int32_caps_nothing(x64):
  """(It overflowed JAX's int32 argument without 64-bit types.) Oracle: onnxruntime, whose
  adaptive count is uncapped: box 0..2 on [[0, 1, ...]] 4 x 4 gives the mean 2.5."""
  x = np.arange(16.0, dtype=np.float32).reshape(1, 1, 4, 4)
  with jax.enable_x64(x64):
    for cap in (2 ** 31, 2 ** 40):
      y = jaxops.roi_align(x, np.array([[0, 0, 2, 2.0]], np.float32), np.array([0]),
                           max_sampling_ratio=cap)
      assert float(np.asarray(y).ravel()[0]) == 2.5


def test_roi_align_sample_tables_past_memory_are_refused_before_xla_allocates():
  """sampling_ratio=2**31 on one 1 x 1 bin asked XLA for 318 GB of sample tables: the call
  returned, and reading the result raised XLA's RESOURCE_EXHAUSTED (found by an error-handling
  audit; onnxruntime aborts the process there and onnx.reference ran out of time). Now a
  ValueError naming the argument, before tracing, through every entry point."""
  import jaxops.torch as F
  from onnx import helper

  from jaxops.onnx import Backend

  x = np.zeros((1, 2, 6, 6), np.float32)
  rois = np.array([[0, 0, 3, 3]], np.float32)
  for ratio in (2 ** 31, 2 ** 28):
    with pytest.raises(ValueError, match=r"argument `sampling_ratio` .* one roi's sample tables"):
      jaxops.roi_align(x, rois, np.array([0]), sampling_ratio=ratio)
    with pytest.raises(ValueError, match=r"argument `sampling_ratio`"):
      jax.jit(lambda a, r=ratio: jaxops.roi_align(a, rois, np.array([0]), sampling_ratio=r))(x)
    with pytest.raises(ValueError, match=r"^jaxops\.torch\.roi_align: argument `sampling_ratio`"):
      F.roi_align(x, np.c_[np.zeros(1, np.float32), rois], 1, sampling_ratio=ratio)
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], sampling_ratio=ratio)
    with pytest.raises(ValueError, match=r"sampling_ratio"):
      Backend.run_node(node, [x, rois, np.array([0], np.int64)], opset_version=16)
  with pytest.raises(ValueError, match=r"argument `output_width`"):
    jaxops.roi_align(x, rois, np.array([0]), output_width=2 ** 30)
  # jaxops.torch.roi_align's checks name it and its arguments (they named jaxops.roi_align)
  boxes = np.c_[np.zeros(1, np.float32), rois]
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.roi_align: argument `output_size`"):
    F.roi_align(x, boxes, (2 ** 30, 1))
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.roi_align: the output would have"):
    F.roi_align(x, boxes, (2 ** 62, 2 ** 62))
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.roi_align: argument `sampling_ratio` "
                                       r"must be an integer that int64 holds"):
    F.roi_align(x, boxes, 2, sampling_ratio=2 ** 63)
  # a large but possible call still runs: 64 samples per bin and axis
  assert jaxops.roi_align(x, rois, np.array([0]), sampling_ratio=64, output_height=7,
                          output_width=7).shape == (1, 2, 7, 7)
