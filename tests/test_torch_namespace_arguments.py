"""jaxops.torch takes and refuses edge arguments as torch 2.13 does: bool arguments that torch
passes to its ATen operators (Python bools only) and flags it tests in Python (any truth value),
outputs of size 0, and lp_pool's special norm types. The oracle is torch itself, run on the
same arguments."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as TF
from onnx.reference import ReferenceEvaluator

import jaxops.torch as F

_X4 = np.random.default_rng(3).standard_normal((2, 3, 7, 6))


def _run(fn: Callable[[], Any]) -> Any:
  """The outputs as NumPy arrays, or the exception's type."""
  try:
    out = fn()
  except Exception as e:  # noqa: BLE001 - the class is what is compared
    return type(e)
  outs = out if isinstance(out, tuple) else (out,)
  return tuple(np.asarray(o.detach().numpy() if isinstance(o, torch.Tensor) else o)
               for o in outs)


def _same(theirs: Any, ours: Any, what: str) -> None:
  if isinstance(theirs, type):
    assert isinstance(ours, type) and issubclass(ours, theirs), (what, theirs, ours)
    return
  assert not isinstance(ours, type), (what, "torch accepts, jaxops.torch raised", ours)
  assert len(theirs) == len(ours), what
  for t, o in zip(theirs, ours):
    assert t.shape == o.shape, (what, t.shape, o.shape)
    if np.issubdtype(t.dtype, np.integer):
      np.testing.assert_array_equal(o, t, err_msg=what)
    else:
      np.testing.assert_allclose(o, t, rtol=1e-12, atol=1e-12, err_msg=what)


_ODD_FLAGS = [True, False, 1, 0, np.bool_(True), None, "x", 1.0]


@pytest.mark.parametrize("value", _ODD_FLAGS, ids=repr)
def test_bool_arguments_are_taken_as_torch_takes_them(value):
  """ceil_mode and count_include_pad reach ATen (a Python bool only, else torch's TypeError);
  return_indices, antialias and recompute_scale_factor are tested in Python (any truth value,
  None as False)."""
  tx = torch.tensor(_X4)
  cases = [
      ("avg_pool2d ceil_mode", lambda m: m.avg_pool2d(_in(m), 2, ceil_mode=value)),
      ("avg_pool1d count_include_pad",
       lambda m: m.avg_pool1d(_in(m)[0], 3, 2, 1, count_include_pad=value)),
      ("max_pool2d ceil_mode", lambda m: m.max_pool2d(_in(m), 2, ceil_mode=value)),
      ("max_pool3d ceil_mode", lambda m: m.max_pool3d(_in(m), 2, ceil_mode=value)),
      ("lp_pool2d ceil_mode", lambda m: m.lp_pool2d(_in(m), 2, 2, ceil_mode=value)),
      ("max_pool2d return_indices", lambda m: m.max_pool2d(_in(m), 2, return_indices=value)),
      ("max_pool1d return_indices",
       lambda m: m.max_pool1d(_in(m)[0], 2, return_indices=value)),
      ("adaptive_max_pool2d return_indices",
       lambda m: m.adaptive_max_pool2d(_in(m), 3, return_indices=value)),
      ("interpolate antialias",
       lambda m: m.interpolate(_in(m), size=3, mode="bilinear", antialias=value)),
      ("interpolate recompute_scale_factor",
       lambda m: m.interpolate(_in(m), scale_factor=1.5, mode="bilinear",
                               recompute_scale_factor=value)),
  ]

  def _in(m: Any) -> Any:
    return tx if m is TF else _X4

  for what, call in cases:
    _same(_run(lambda: call(TF)), _run(lambda: call(F)), f"{what}={value!r}")


def test_ceil_mode_error_names_the_argument():
  with pytest.raises(TypeError, match=r"avg_pool2d: argument `ceil_mode` must be a Python bool"):
    F.avg_pool2d(_X4, 2, ceil_mode=1)


@pytest.mark.parametrize("case", [
    ("adaptive_avg_pool2d", (2, 0)), ("adaptive_avg_pool2d", (0, 3)),
    ("adaptive_avg_pool2d", (3, 0)), ("adaptive_avg_pool1d", 0), ("adaptive_avg_pool3d", 0),
    ("adaptive_max_pool2d", (2, 0)), ("adaptive_max_pool1d", 0)], ids=str)
def test_adaptive_pools_to_size_zero_match_torch(case):
  """An output size of 0 gives torch's empty array (an uneven window on another axis or not),
  and a zero gradient."""
  name, size = case
  nd = int(name[-2])
  x = np.random.default_rng(5).standard_normal((2, 3) + (7, 6, 6)[:nd])
  theirs = _run(lambda: getattr(TF, name)(torch.tensor(x), size))
  _same(theirs, _run(lambda: getattr(F, name)(x, size)), name)
  g = jax.grad(lambda v: jnp.sum(jnp.asarray(getattr(F, name)(v, size)) ** 2))(x)
  np.testing.assert_array_equal(np.asarray(g), np.zeros_like(x))


@pytest.mark.parametrize("kw", [dict(size=0), dict(scale_factor=0.1), dict(size=(0, 3))],
                         ids=str)
def test_area_interpolate_to_size_zero_matches_torch(kw):
  x = _X4[:, :, :6, :6] if isinstance(kw.get("size"), tuple) else _X4[:, :, 0]
  _same(_run(lambda: TF.interpolate(torch.tensor(x), mode="area", **kw)),
        _run(lambda: F.interpolate(x, mode="area", **kw)), str(kw))


@pytest.mark.parametrize("kw", [
    dict(scale_factor=np.float32(0.7), mode="area"),
    dict(scale_factor=np.float32(0.7), mode="nearest", recompute_scale_factor=True),
    dict(scale_factor=(np.float32(0.7), 1.3), mode="bilinear", recompute_scale_factor=True),
    dict(scale_factor=np.float16(1.3), mode="linear", recompute_scale_factor=True),
    dict(scale_factor=-0.2, mode="area")], ids=str)
def test_recomputed_sizes_multiply_in_the_scale_type_and_truncate(kw):
  """torch computes recomputed (and area's) output sizes in Python, ``int(length *
  scale_factor)``: a NumPy float32 scale multiplies in float32 (10 * 0.7 is 7 there, 6 in
  double) and the result truncates toward zero (a length of 4 times -0.2 is an empty axis for
  area). jaxops.torch computed them in double and floored (found by a sweep)."""
  rng = np.random.default_rng(31)
  x = rng.standard_normal((2, 3, 4) if isinstance(kw["scale_factor"], float) else
                          (2, 3, 10) if np.ndim(kw["scale_factor"]) == 0 else (2, 3, 10, 10))
  _same(_run(lambda: TF.interpolate(torch.tensor(x), **kw)),
        _run(lambda: F.interpolate(x, **kw)), str(kw))


def test_scale_factor_true_is_one_as_in_torch():
  _same(_run(lambda: TF.interpolate(torch.tensor(_X4), scale_factor=True)),
        _run(lambda: F.interpolate(_X4, scale_factor=True)), "scale_factor=True")


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_lp_pool_bool_and_zero_norm_types_match_torch(nd):
  """norm_type True is p = 1 in torch; 0 (or False) is torch's ZeroDivisionError (1 / p),
  which jaxops.torch also raises as a ValueError naming the argument."""
  x = np.random.default_rng(nd).standard_normal((2, 2) + (6, 5, 4)[:nd])
  fn, tfn = getattr(F, f"lp_pool{nd}d"), getattr(TF, f"lp_pool{nd}d")
  _same(_run(lambda: tfn(torch.tensor(x), True, 2)), _run(lambda: fn(x, True, 2)), "True")
  for p in (0, 0.0, False):
    _same(_run(lambda: tfn(torch.tensor(x), p, 2)), _run(lambda: fn(x, p, 2)), repr(p))
    with pytest.raises(ValueError, match=f"lp_pool{nd}d: argument `norm_type` must be nonzero"):
      fn(x, p, 2)
  # NaN: x ** nan is NaN, but 1 ** nan is 1 (a kernel of 1 on ones keeps them), as torch's pow
  ones = np.ones_like(x)
  for a, k in ((x, 2), (ones, 1), (ones, 2)):
    _same(_run(lambda: tfn(torch.tensor(a), np.nan, k)), _run(lambda: fn(a, np.nan, k)),
          f"nan, kernel {k}")
  if nd == 1:  # torch's TypeError for a kernel tuple comes before its 1 / norm_type
    _same(_run(lambda: tfn(torch.tensor(x), 0, (2,))), _run(lambda: fn(x, 0, (2,))), "(2,)")


@pytest.mark.parametrize("call, message", [
    (lambda: F.lp_pool2d(np.zeros((1, 2, 5, 6)), 2, 7), r"lp_pool2d: Given input size"),
    (lambda: F.lp_pool1d(np.zeros((1, 2, 5)), 2, 3, stride=0),
     r"lp_pool1d: argument `stride` must be greater than zero; got 0"),
    (lambda: F.lp_pool1d(np.zeros((1, 2, 5)), 2, -3),
     r"lp_pool1d: argument `kernel_size` must be greater than zero; got -3"),
    (lambda: F.lp_pool3d(np.zeros((1, 1, 2, 5, 5)), 2, 3), r"lp_pool3d: input image")])
def test_lp_pool_errors_name_lp_pool(call, message):
  # (they named avg_pool{1,2,3}d, whose checks lp_pool runs; found by a random sweep)
  with pytest.raises(ValueError, match=message):
    call()


def test_roi_align_edge_arguments():
  """torchvision's roi_align: an empty output (no boxes) needs no non-empty input; its
  ``aligned`` reaches a registered operator, whose bool takes None and numbers; its
  ``output_size`` is an int (a float is a TypeError). torchvision does not load beside the CPU
  torch here: the expected behaviour is read from its source."""
  x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)
  none = np.zeros((0, 5), np.float32)
  assert F.roi_align(np.zeros((0, 3, 5, 5), np.float32), none, 2).shape == (0, 3, 2, 2)
  assert F.roi_align(np.zeros((2, 3, 0, 5), np.float32), none, 2).shape == (0, 3, 2, 2)
  with pytest.raises(ValueError, match="roi_align: argument `input`"):
    F.roi_align(np.zeros((0, 3, 5, 5), np.float32), np.zeros((1, 5), np.float32), 2)
  boxes = np.array([[1, 0.5, 1.0, 3.5, 4.0]], np.float32)
  # aligned None reads as False (output_half_pixel), 1 as True (half_pixel): ONNX RoiAlign-16 in
  # onnx.reference is the oracle for torchvision's values
  for aligned, mode in ((None, "output_half_pixel"), (1, "half_pixel")):
    node = onnx.helper.make_node("RoiAlign", ["X", "rois", "b"], ["Y"], output_height=2,
                                 output_width=2, sampling_ratio=0,  # torchvision's -1: adaptive
                                 coordinate_transformation_mode=mode)
    want = ReferenceEvaluator(node).run(None, {"X": x, "rois": boxes[:, 1:],
                                               "b": boxes[:, 0].astype(np.int64)})[0]
    np.testing.assert_allclose(np.asarray(F.roi_align(x, boxes, 2, aligned=aligned)), want,
                               rtol=1e-5, atol=1e-6)
  with pytest.raises(TypeError, match="roi_align: argument `aligned`"):
    F.roi_align(x, boxes, 2, aligned="yes")
  with pytest.raises(TypeError, match="roi_align: argument `output_size`"):
    F.roi_align(x, boxes, 2.0)
  # a list with boxes for more images than the input has: torchvision reads past the last
  # image (found by a fuzzer: jaxops clipped the batch index and pooled the last image); an
  # empty entry there reads nothing
  one = np.array([[0.0, 0.0, 4.0, 4.0]], np.float32)
  with pytest.raises(ValueError, match=r"roi_align: argument `boxes` .*\(N = 2\).*entry 2"):
    F.roi_align(x, [one, one, one], 2)
  assert F.roi_align(x, [one, one, np.zeros((0, 4), np.float32)], 2).shape == (2, 3, 2, 2)



_X3 = np.ones((1, 1, 4), np.float32)


@pytest.mark.parametrize("call, theirs", [
    (lambda m, x: m.interpolate(x, size=2 ** 63), TypeError),
    (lambda m, x: m.interpolate(x, size=(2 ** 63 + 5,)), TypeError),
    (lambda m, x: m.adaptive_avg_pool1d(x, 2 ** 63), ValueError),
    (lambda m, x: m.adaptive_max_pool1d(x, 2 ** 63), ValueError),
    (lambda m, x: m.adaptive_avg_pool2d(x[None], 2 ** 63), ValueError),
    (lambda m, x: m.avg_pool2d(x[None], (1, 2), divisor_override=2 ** 63), ValueError),
    (lambda m, x: m.avg_pool2d(x[None], (1, 2), divisor_override=2 ** 64), ValueError),
    (lambda m, x: m.pixel_unshuffle(x[None], 2 ** 63), ValueError),
])
def test_integers_past_int64_are_refused_as_torch_refuses_them(call, theirs):
  """An int argument outside int64 is torch's overflow error (a ValueError, or a TypeError for
  interpolate's size), not a wrapped result: interpolate(size=2**63) returned an empty axis,
  avg_pool2d's divisor_override=2**63 divided by it, and the adaptive pools raised OverflowError
  or MLIR's TypeError (found by a fuzz)."""
  assert _run(lambda: call(TF, torch.tensor(_X3))) is theirs
  with pytest.raises(theirs, match=r"^jaxops\.torch\.\w+: argument `\w+` must be an integer "
                                   r"that int64 holds"):
    call(F, jnp.asarray(_X3))


@pytest.mark.parametrize("call", [
    lambda: F.pixel_unshuffle(jnp.ones((1, 1, 0, 0)), 2 ** 32),
    lambda: F.pixel_unshuffle(jnp.ones((1, 4, 0, 0)), 2 ** 31),
    lambda: jax.jit(lambda x: F.pixel_unshuffle(x, 2 ** 32))(jnp.ones((1, 1, 0, 0))),
    lambda: F.pixel_shuffle(jnp.ones((1, 0, 2, 2)), 2 ** 31),
])
def test_shuffles_of_empty_inputs_by_huge_factors_are_refused(call):
  """Empty inputs whose rearranged shape overflows int64: torch wraps the shape (pixel_unshuffle
  by 2**32 of (1, 1, 0, 0) gives (1, 1, 0, 0)) or raises (pixel_shuffle: "Stride calculation
  overflowed"); XLA aborted the process on it (found by a fuzz). A ValueError naming the op
  (docs/DEVIATIONS.md, jaxops.torch 14)."""
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.pixel_(un)?shuffle: the output shape "
                                       r".* exceeds 2\*\*63 - 1"):
    call()


def test_outputs_and_tables_past_memory_are_refused_before_they_are_built():
  """A size whose output or static tables cannot fit in memory is a ValueError naming the op
  before anything is allocated: interpolate(scale_factor=1e10) raised NumPy's MemoryError for
  298 GiB of tables, adaptive_avg_pool1d to 2**31 a 16 GiB table, max_unpool1d past int32
  indices an OverflowError (found by a fuzz)."""
  x = jnp.ones((1, 1, 4))
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.interpolate: the output would have "
                                       r"shape \(1, 1, 40000000000\)"):
    F.interpolate(x, scale_factor=1e10)
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.adaptive_avg_pool1d: the output would "
                                       r"have shape \(1, 1, 2147483648\), and its static tap "
                                       r"tables"):
    F.adaptive_avg_pool1d(x, 2 ** 31)
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.max_unpool1d: the output would have "
                                       r"shape \(1, 1, 4398046511104\)"):
    F.max_unpool1d(x, np.zeros((1, 1, 4), np.int64), 2 ** 40)


@pytest.mark.parametrize("name", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
@pytest.mark.parametrize("output_size", [np.array([2, 3]), np.array([2, 3], np.int32),
                                         np.array([2, None], object), np.array([2.0, 2.0])])
def test_adaptive_pools_take_a_1d_numpy_output_size_as_torch_does(name, output_size):
  """torch reads a 1-D NumPy array as the sequence of sizes (None keeps an axis; floats are its
  TypeError); jaxops.torch raised a TypeError for every array (found by an argument fuzz)."""
  theirs = _run(lambda: getattr(TF, name)(torch.tensor(_X4), output_size))
  ours = _run(lambda: getattr(F, name)(jnp.asarray(_X4), output_size))
  _same(theirs, ours, name)


@pytest.mark.parametrize("name", ["adaptive_avg_pool2d", "adaptive_max_pool2d",
                                  "adaptive_avg_pool3d", "adaptive_max_pool3d"])
def test_deviation_numpy_integer_output_size_is_pinned(name):
  """DEVIATIONS jaxops.torch 15: torch 2.13's 2-D and 3-D adaptive pools call len() on a NumPy
  integer output_size (a TypeError), where its 1-D adaptive pools and every kernel_size take one
  as the int. jaxops.torch takes it as the int on every path: the result of torch's int call
  (found by an argument fuzz)."""
  x = _X4[:, :, None] if name.endswith("3d") else _X4
  with pytest.raises(TypeError, match="has no len"):
    getattr(TF, name)(torch.tensor(x), np.int64(2))
  theirs = _run(lambda: getattr(TF, name)(torch.tensor(x), 2))
  for size in (np.int64(2), np.int32(2)):
    _same(theirs, _run(lambda s=size: getattr(F, name)(jnp.asarray(x), s)), name)
  # torch's own 1-D path takes the NumPy integer
  _same(_run(lambda: TF.adaptive_avg_pool1d(torch.tensor(_X4[0]), 2)),
        _run(lambda: TF.adaptive_avg_pool1d(torch.tensor(_X4[0]), np.int64(2))), "torch 1-D")


def test_deviation_numpy_integers_torch_refuses_are_pinned():
  """DEVIATIONS jaxops.torch 15, the other two places: a 0-d NumPy array as kernel_size or
  output_size (torch's argument parser fails an internal assert) and max_unpool2d's NumPy
  integer kernel_size (its wrapper's TypeError). jaxops.torch gives torch's int result."""
  t = torch.tensor(_X4)
  for name, size in (("max_pool2d", np.array(2)), ("avg_pool2d", np.array(2)),
                     ("adaptive_avg_pool1d", np.array(2))):
    x, xt = (_X4[0], t[0]) if name.endswith("1d") else (_X4, t)
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT FAILED"):
      getattr(TF, name)(xt, size)
    _same(_run(lambda n=name, v=xt: getattr(TF, n)(v, 2)),
          _run(lambda n=name, v=x, s=size: getattr(F, n)(jnp.asarray(v), s)), name)
  y, i = TF.max_pool2d(t, 2, return_indices=True)
  with pytest.raises(TypeError, match="cond must be a bool"):
    TF.max_unpool2d(y, i, np.int64(2))
  _same(_run(lambda: TF.max_unpool2d(y, i, 2)),
        _run(lambda: F.max_unpool2d(jnp.asarray(y.numpy()), jnp.asarray(i.numpy()),
                                    np.int64(2))), "max_unpool2d")


@pytest.mark.parametrize("p", [2 ** 64, -(2 ** 64)])
def test_lp_pool_int_norm_type_past_64_bits_is_refused_as_torch_refuses_it(p):
  """torch converts an int norm_type in C++ and raises OverflowError past [-2**63, 2**64);
  jaxops.torch ran it (found by an error-handling audit) and now raises its ValueError. Inside
  that range and as a float torch pools, and so does jaxops.torch."""
  assert _run(lambda: TF.lp_pool2d(torch.tensor(_X4), p, 2)) is OverflowError
  with pytest.raises(ValueError, match=r"^jaxops\.torch\.lp_pool2d: argument `norm_type`"):
    F.lp_pool2d(jnp.asarray(_X4), p, 2)
  for q in (2 ** 63, float(p)):
    _same(_run(lambda q=q: TF.lp_pool2d(torch.tensor(_X4), q, 2)),
          _run(lambda q=q: F.lp_pool2d(jnp.asarray(_X4), q, 2)), repr(q))


@pytest.mark.parametrize("x64", [True, False])
def test_grid_and_boxes_of_another_float_dtype_are_refused_as_torch_refuses_them(x64):
  """torch requires the grid (grid_sample) and the boxes (torchvision's roi_align) in the
  input's dtype. With JAX's 64-bit types off a float64 NumPy grid beside a float32 input was
  converted to float32 before the check and ran (found by an error-handling audit)."""
  x = _X4.astype(np.float32)
  grid = np.zeros((2, 3, 3, 2))  # float64
  boxes = np.array([[0, 0, 0, 3, 3.0]])  # float64
  with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
    TF.grid_sample(torch.tensor(x), torch.tensor(grid), align_corners=False)
  with jax.enable_x64(x64):
    with pytest.raises(TypeError, match=r"grid_sample: argument `grid` must be of input's dtype "
                                        r"float32"):
      F.grid_sample(x, grid, align_corners=False)
    for b in (boxes, [boxes[:, 1:]]):
      with pytest.raises(TypeError, match=r"roi_align: argument `boxes` must be of input's "
                                          r"dtype float32"):
        F.roi_align(x, b, 2)
    assert F.grid_sample(x, grid.astype(np.float32), align_corners=False).shape == (2, 3, 3, 3)
