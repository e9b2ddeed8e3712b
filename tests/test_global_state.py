"""jaxops under JAX's global settings, cached configurations and jax.export.

Defects an audit of 2026-11-25 found, each against an independent oracle: the same call with
JIT on (for jax_disable_jit), with default promotion (for strict promotion), in a process that
never saw the other setting or value (for the caches), and plain JAX's own export.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxops
import jaxops.torch as F


def test_disable_jit_runs_the_resize_kernel():
  """jax_disable_jit=True: the resize primitive's eager impl jitted the primitive itself, and
  with JIT off that recursed until RecursionError (resize, interpolate, uneven adaptive
  average pools)."""
  x = np.random.default_rng(0).standard_normal((1, 2, 5, 6))
  calls = {
      "resize": lambda v: jaxops.resize(v, scales=(1, 1, 1.5, 0.5), mode="cubic",
                                        antialias=True),
      "interpolate": lambda v: F.interpolate(v, size=(3, 5), mode="bilinear"),
      "adaptive_avg_pool2d": lambda v: F.adaptive_avg_pool2d(v, (3, 4)),
  }
  for name, f in calls.items():
    want = np.asarray(f(x))
    want_grad = np.asarray(jax.grad(lambda v: jnp.sum(f(v) ** 2))(x))
    with jax.disable_jit():
      got = np.asarray(f(x))
      got_grad = np.asarray(jax.grad(lambda v: jnp.sum(f(v) ** 2))(x))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-12, err_msg=name)


def test_strict_dtype_promotion():
  """jax_numpy_dtype_promotion='strict': roi_align compared an integer count with a float one,
  and (with x64) int32 with int64 indices, and raised TypePromotionError."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
  rois = np.array([[0.5, 1, 6, 7.5], [2, 0, 7, 4]], np.float32)
  b = np.array([0, 1], np.int32)
  want = np.asarray(jaxops.roi_align(x, rois, b, output_height=2, output_width=3))
  want_t = np.asarray(F.roi_align(x, np.c_[b.astype(np.float32), rois], (2, 3)))
  with jax.numpy_dtype_promotion("strict"):
    got = np.asarray(jaxops.roi_align(x, rois, b, output_height=2, output_width=3))
    got_t = np.asarray(F.roi_align(x, np.c_[b.astype(np.float32), rois], (2, 3)))
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(got_t, want_t)


def test_index_type_check_follows_x64_at_each_call():
  """The check that a plane's indices fit int32 ran inside the cached configuration: after a
  call with x64 on, the same configuration with x64 off returned int32 indices unchecked.
  (An empty batch: a plane of 2.5e9 elements costs nothing.) jaxops.torch.max_pool2d raised a
  bare OverflowError there."""
  x = np.zeros((0, 1, 50_000, 50_000), np.float32)
  call = lambda: F.adaptive_max_pool2d(x, (2, 2), return_indices=True)  # noqa: E731
  assert call()[1].dtype == np.int64  # the suite runs with x64 on
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match="more than int32 indices can address"):
      call()
    with pytest.raises(ValueError, match="max_pool2d: an input plane of 2500000000 elements"):
      F.max_pool2d(x, 2, return_indices=True)


def test_fill_sign_does_not_depend_on_earlier_calls():
  """tf_crop_and_resize's extrapolation_value -0.0 and 0.0 shared one cached configuration and
  one jit cache entry (-0.0 == 0.0): the first call's sign filled every later call's."""
  x = np.ones((1, 4), np.float32)
  kw = dict(sizes=[3], axes=[1], mode="linear", roi=[1.5, 2.5],
            coordinate_transformation_mode="tf_crop_and_resize")  # every output is the fill
  for order in ((-0.0, 0.0, -0.0), (0.0, -0.0, 0.0)):
    for v in order:
      y = np.asarray(jaxops.resize(x, extrapolation_value=v, **kw))
      assert np.all(np.signbit(y) == np.signbit(v)) and np.all(y == 0)
      y = np.asarray(jax.jit(lambda a, v=v: jaxops.resize(a, extrapolation_value=v, **kw))(x))
      assert np.all(np.signbit(y) == np.signbit(v))


def test_symbolic_shapes_under_export():
  """jax.export with a symbolic batch size: ops whose plans read every dimension raise a
  TypeError naming the op (JAX's InconclusiveDimensionOperation escaped from inside the plans);
  max_pool's gradient, whose index type read the batch size, now exports and runs; the pools
  that never needed the batch size still export (plain jax.image.resize is the check that the
  symbolic shape itself is fine)."""
  from jax import export

  (b,) = export.symbolic_shape("b")
  spec = jax.ShapeDtypeStruct((b, 3, 8, 8), jnp.float32)
  export.export(jax.jit(lambda v: jax.image.resize(v, (v.shape[0], 3, 16, 16), "linear")))(spec)
  refused = {
      "jaxops.resize": lambda v: jaxops.resize(v, scales=(1, 1, 2, 2), mode="linear"),
      "jaxops.torch.interpolate": lambda v: F.interpolate(v, scale_factor=2, mode="bilinear"),
      "jaxops.torch.adaptive_avg_pool2d": lambda v: F.adaptive_avg_pool2d(v, (3, 5)),
      "jaxops.max_pool": lambda v: jaxops.max_pool(v, (2, 2), return_indices=True),
      "jaxops.grid_sample": lambda v: jaxops.grid_sample(v, jnp.zeros((v.shape[0], 2, 2, 2))),
      "jaxops.roi_align": lambda v: jaxops.roi_align(v, np.array([[0, 0, 4, 4]], np.float32),
                                                     np.array([0], np.int32)),
  }
  for op, f in refused.items():
    with pytest.raises(TypeError, match=rf"{op}: argument `\w+` has the symbolic shape"):
      export.export(jax.jit(f))(spec)
  x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
  works = {
      "max_pool gradient": jax.grad(lambda v: jnp.sum(jaxops.max_pool(
          v, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)) ** 2)),
      "average_pool": lambda v: jaxops.average_pool(v, (3, 3), strides=(2, 2)),
      "even adaptive_avg_pool2d": lambda v: F.adaptive_avg_pool2d(v, (4, 4)),
  }
  for name, f in works.items():
    exported = export.export(jax.jit(f))(spec)
    np.testing.assert_allclose(np.asarray(exported.call(x)), np.asarray(f(x)), rtol=1e-6,
                               err_msg=name)


def test_affine_grid_base_is_not_a_constant_of_the_whole_grid():
  """affine_grid built its base grid in NumPy at trace time and embedded it: a 1024 x 1024
  export held a 12.6 MB constant (8192 x 8192 took 3.3 GB and 5 s to trace). The base is now
  broadcast on the device from one row per axis; the values are as before (the test files of
  affine_grid compare them with PyTorch and onnx.reference)."""
  from jax import export

  spec = jax.ShapeDtypeStruct((1, 2, 3), jnp.float32)
  exported = export.export(jax.jit(lambda t: jaxops.affine_grid(t, (1, 1, 1024, 1024))))(spec)
  assert len(exported.serialize()) < 100_000
  out = jax.eval_shape(lambda t: jaxops.affine_grid(t, (1, 1, 8192, 8192)), spec)
  assert out.shape == (1, 8192, 8192, 2)


def test_max_pool_window_starts_past_the_table_size(monkeypatch):
  """max_pool's indices (and its gradient's gathers) take the window starts of large output
  planes as a sum of one row per axis on the device, not a trace-time table of the plane (a
  2048 x 2048 export held 4.2 MB of it). Forced for small planes here, against torch's indices
  (per plane, offset by the plane) and torch's gradient; a 2048 x 2048 export is small."""
  import torch

  from jaxops import _max_pool

  monkeypatch.setattr(_max_pool, "_BASE_TABLE_MAX", 0)
  jax.clear_caches()
  rng = np.random.default_rng(11)
  for nd, shape, kw in [(2, (2, 3, 13, 11), dict(kernel_size=3, stride=2, padding=1)),
                        (1, (2, 2, 17), dict(kernel_size=2, stride=1, dilation=2, padding=1)),
                        (3, (1, 2, 5, 6, 7), dict(kernel_size=2, stride=(1, 2, 3)))]:
    x = rng.standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    ty, ti = getattr(torch.nn.functional, f"max_pool{nd}d")(xt, return_indices=True, **kw)
    ty.pow(2).sum().backward()
    k = [kw["kernel_size"]] * nd
    s = list(kw["stride"]) if isinstance(kw["stride"], tuple) else [kw["stride"]] * nd
    p = [kw.get("padding", 0)] * nd
    d = [kw.get("dilation", 1)] * nd
    y, i = jaxops.max_pool(x, k, strides=s, pads=p + p, dilations=d, return_indices=True)
    plane = int(np.prod(shape[2:]))
    offsets = (np.arange(shape[0] * shape[1]) * plane).reshape(shape[:2] + (1,) * nd)
    np.testing.assert_array_equal(np.asarray(i), ti.numpy() + offsets)
    g = jax.grad(lambda v: jnp.sum(jaxops.max_pool(v, k, strides=s, pads=p + p,
                                                   dilations=d) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12)
  jax.clear_caches()
  monkeypatch.undo()
  from jax import export

  spec = jax.ShapeDtypeStruct((1, 1, 2048, 2048), jnp.float32)  # a 1024 x 1024 output plane
  exported = export.export(jax.jit(lambda v: jaxops.max_pool(
      v, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1), return_indices=True)))(spec)
  assert len(exported.serialize()) < 100_000


def test_average_pool_divisor_past_the_table_size(monkeypatch):
  """average_pool's divisor of a large 2-D output plane (windows cut by padding or ceil_mode)
  is the product of one row of counts per axis on the device, not a trace-time table (4096 x
  4096 took 0.4 s to trace). Forced for small planes here, against torch."""
  import torch

  from jaxops import _pool

  monkeypatch.setattr(_pool, "_DIVISOR_TABLE_MAX", 0)
  jax.clear_caches()
  rng = np.random.default_rng(12)
  for shape, k, s, p, ceil in [((2, 3, 13, 11), 3, 2, 1, False), ((1, 2, 9, 10), 4, 3, 2, True),
                               ((2, 2, 17), 3, 2, 1, True)]:
    x = rng.standard_normal(shape)
    nd = len(shape) - 2
    xt = torch.tensor(x, requires_grad=True)
    ty = getattr(torch.nn.functional, f"avg_pool{nd}d")(xt, k, s, p, ceil_mode=ceil,
                                                       count_include_pad=False)
    ty.pow(2).sum().backward()
    f = lambda v, nd=nd, k=k, s=s, p=p, ceil=ceil: jaxops.average_pool(  # noqa: E731
        v, (k,) * nd, strides=(s,) * nd, pads=(p,) * 2 * nd, ceil_mode=ceil)
    np.testing.assert_allclose(np.asarray(f(x)), ty.detach().numpy(), rtol=1e-12)
    g = jax.grad(lambda v: jnp.sum(f(v) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-12)
  jax.clear_caches()
  monkeypatch.undo()
  from jax import export

  spec = jax.ShapeDtypeStruct((1, 1, 2048, 2048), jnp.float32)
  exported = export.export(jax.jit(lambda v: jaxops.average_pool(
      v, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1))))(spec)
  assert len(exported.serialize()) < 100_000


def test_unpool_outputs_past_the_index_type_are_refused():
  """max_unpool's indices are flat positions in its output: without x64 an output of more than
  2**31 - 1 elements cannot be addressed (JAX raised OverflowError while the program was
  traced; found by a fuzz). A ValueError naming the op and the output shape (float16, so that
  the 4.3 GB output passes the memory check on small machines)."""
  x = np.ones((1, 1, 4, 1), np.float16)
  i = np.zeros((1, 1, 4, 1), np.int64)
  with jax.enable_x64(False):
    with pytest.raises(ValueError, match=r"^jaxops.max_unpool: an output of shape \(1, 1, "
                                         r"1073741830, 2\) has more elements than int32"):
      jaxops.max_unpool(x, i, (2 ** 30, 2), strides=(2, 2))
    with pytest.raises(ValueError, match=r"^jaxops.torch.max_unpool2d: an output plane of "
                                         r"2147483660 elements"):
      F.max_unpool2d(jnp.asarray(x), i, (2 ** 30, 2), stride=2)
