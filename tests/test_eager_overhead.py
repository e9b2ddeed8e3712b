"""What keeps repeated eager calls cheap, checked without timing anything.

A jax.Array (or tracer) input is used as it is (no ``jnp.asarray``); the argument checks and the
static plan of resize, average_pool and constant_of_shape are built once per configuration
(``jaxops._checks.ConfigCache``, keyed by ``cache_key``); cast checks each dtype once. Results,
errors and behaviour under jit/vmap/grad are those of building everything on every call.
"""

from __future__ import annotations

import gc
import math
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxops
from jaxops import _cast, _checks, _constant, _pool, _resize

RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)


def _same(got, want):
  """Same type of result, dtype, weak type, shape and bits."""
  assert type(got) is type(want)
  assert got.dtype == want.dtype and got.shape == want.shape
  assert getattr(got, "weak_type", None) == getattr(want, "weak_type", None)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.fixture
def builds(monkeypatch):
  """Counts the configuration builds of resize, average_pool and constant_of_shape."""
  counts = {"resize": 0, "average_pool": 0, "constant_of_shape": 0}
  for name, cache in (("resize", _resize._CONFIGS), ("average_pool", _pool._PLANS),
                      ("constant_of_shape", _constant._DIMS)):
    def counting(*args, _build=cache.build, _name=name):
      counts[_name] += 1
      return _build(*args)
    monkeypatch.setattr(cache, "build", counting)
  return counts


# --- the configuration is built once per static configuration ----------------------------------


def test_repeated_resize_builds_its_configuration_once(builds):
  x = jnp.asarray(RNG.standard_normal((1, 2, 7, 9)).astype(np.float32))  # a shape of its own
  first = jaxops.resize(x, scales=(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.5)
  assert builds["resize"] == 1
  for _ in range(3):
    _same(jaxops.resize(x, scales=(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.5), first)
  assert builds["resize"] == 1
  # A NumPy array of another dtype is another key, built once, with the same result.
  for _ in range(2):
    _same(jaxops.resize(x, scales=np.array([1, 1, 2, 0.5]), mode="cubic", cubic_coeff_a=-0.5),
          first)
  assert builds["resize"] == 2
  # Another shape, dtype or option is another configuration.
  jaxops.resize(x[:, :1], scales=(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.5)
  jaxops.resize(x.astype(jnp.float16), scales=(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.5)
  jaxops.resize(x, scales=(1, 1, 2, 0.5), mode="cubic", cubic_coeff_a=-0.75)
  assert builds["resize"] == 5


def test_repeated_average_pool_builds_its_plan_once(builds):
  x = jnp.asarray(RNG.standard_normal((1, 2, 9, 8)).astype(np.float32))
  kw = dict(strides=[2, 1], pads=(1, 0, 1, 2), count_include_pad=True)
  first = jaxops.average_pool(x, (3, 3), **kw)
  for _ in range(3):
    _same(jaxops.average_pool(x, (3, 3), **kw), first)
  assert builds["average_pool"] == 1
  _same(jaxops.average_pool(x, [3, 3], **kw), first)  # a list is another key
  assert builds["average_pool"] == 2


def test_repeated_constant_of_shape_checks_its_shape_once(builds):
  first = jaxops.constant_of_shape([4, 1, 3], np.array([2.5], np.float32))
  for _ in range(3):
    _same(jaxops.constant_of_shape([4, 1, 3], np.array([2.5], np.float32)), first)
  assert builds["constant_of_shape"] == 1


def test_traced_roi_is_never_cached(builds):
  x = jnp.asarray(X)
  kw = dict(sizes=(4, 9), axes=(2, 3), mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=3.0)
  f = jax.jit(lambda r: jaxops.resize(x, roi=r, **kw))
  traced = f(jnp.array([0.1, 0.2, 0.9, 1.1]))
  f(jnp.array([0.0, 0.0, 1.0, 1.0]))  # no retrace: built once
  assert builds["resize"] == 1
  jax.vmap(lambda r: jaxops.resize(x, roi=r, **kw))(jnp.array([[0.1, 0.2, 0.9, 1.1]]))
  assert builds["resize"] == 2
  static = jaxops.resize(x, roi=[0.1, 0.2, 0.9, 1.1], **kw)  # a static roi is keyed
  jaxops.resize(x, roi=[0.1, 0.2, 0.9, 1.1], **kw)
  assert builds["resize"] == 3
  np.testing.assert_allclose(np.asarray(traced), np.asarray(static), rtol=1e-6, atol=1e-6)


def test_a_configuration_built_under_jit_serves_eager_calls(builds):
  x = jnp.asarray(RNG.standard_normal((3, 2, 11)).astype(np.float32))
  jitted = jax.jit(lambda v: jaxops.average_pool(v, (4,), strides=(3,), ceil_mode=True))(x)
  eager = jaxops.average_pool(x, (4,), strides=(3,), ceil_mode=True)
  assert builds["average_pool"] == 1
  np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-6)


# --- a jax.Array input is used as it is ---------------------------------------------------------


@pytest.fixture
def asarray_calls(monkeypatch):
  calls = []
  original = jnp.asarray

  def counting(*args, **kwargs):
    calls.append(args[0])
    return original(*args, **kwargs)

  monkeypatch.setattr(jnp, "asarray", counting)
  return calls


CALLS = {
    "resize": lambda x: jaxops.resize(x, scales=(1, 1, 2, 0.5), mode="linear"),
    "average_pool": lambda x: jaxops.average_pool(x, (2, 3), pads=(1, 1, 0, 1)),
    "global_average_pool": jaxops.global_average_pool,
    "cast": lambda x: jaxops.cast(x, "FLOAT8E4M3FN"),
    "cast_like": lambda x: jaxops.cast_like(x, jnp.zeros(1, jnp.int4)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_jax_array_is_not_converted(name, asarray_calls):
  x = jnp.asarray(X)
  tracers = []

  def traced(v):
    tracers.append(v)
    return CALLS[name](v)

  CALLS[name](x)
  jax.jit(traced)(x)
  assert not any(a is x or a is tracers[0] for a in asarray_calls)
  CALLS[name](X)  # a NumPy array still goes through jnp.asarray
  assert any(a is X for a in asarray_calls)


INNER = {  # what each public function computes, called on jnp.asarray(x) as before
    "resize": lambda x: _resize._resize_jit(
        x, None, _resize._config(x, None, (1, 1, 2, 0.5), None, None, "linear", "half_pixel",
                                 "round_prefer_floor", -0.75, False, 0.0, "stretch", False,
                                 False)[0]),
    "average_pool": lambda x: _pool._average_pool(
        x, _pool._plan(x.shape, (2, 3), None, (1, 1, 0, 1), None, "NOTSET", False, False)),
    "global_average_pool": _pool._global_average_pool,
    "cast": lambda x: _cast._convert_jit(x, np.dtype(jnp.float8_e4m3fn), True,
                                         _cast.RoundMode.UP, False),
    "cast_like": lambda x: _cast._convert_jit(x, np.dtype(jnp.int4), True, _cast.RoundMode.UP,
                                              False),
}


@pytest.mark.parametrize("kind", ["jax", "jax_float16", "numpy", "numpy_float64", "list"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_input_kind_gives_the_result_of_converting_first(name, kind):
  x = {"jax": jnp.asarray(X), "jax_float16": jnp.asarray(X, jnp.float16), "numpy": X,
       "numpy_float64": X.astype(np.float64), "list": X.tolist()}[kind]
  want = INNER[name](jnp.asarray(x))
  for _ in range(2):  # the second call finds its configuration cached
    _same(CALLS[name](x), want)
  if kind != "list":  # jax.jit would take a list apart into scalars
    _same(jax.jit(CALLS[name])(x), want)


def test_scalar_inputs_give_the_result_of_converting_first():
  for value in (3.7, -2, True, np.float32(-1.5)):
    for _ in range(2):
      _same(jaxops.cast(value, "INT8"), _cast._convert_jit(
          jnp.asarray(value), np.dtype(np.int8), True, _cast.RoundMode.UP, False))
  weak = jnp.asarray(2.5)  # a weakly typed jax.Array is passed on as it is
  _same(jaxops.cast(weak, "FLOAT"), _cast._convert_jit(
      weak, np.dtype(np.float32), True, _cast.RoundMode.UP, False))
  _same(jaxops.constant_of_shape((2,), 1.5), jnp.broadcast_to(jnp.asarray(1.5), (2,)))
  _same(jaxops.resize(jnp.arange(4.0), sizes=[2]), jaxops.resize([0.0, 1.0, 2.0, 3.0], sizes=[2]))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_vmap_traces_through_the_fast_path(name):
  x = jnp.asarray(X)
  want = np.asarray(CALLS[name](x)).astype(np.float64)
  for _ in range(2):
    got = jax.vmap(CALLS[name])(x[:, None])[:, 0]
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=1e-6)


def test_grad_traces_through_the_fast_path():
  x = jnp.asarray(X)
  loss = lambda v: jnp.sum(jaxops.resize(v, scales=(1, 1, 2, 2), mode="cubic") ** 2)
  _same(jax.grad(loss)(x), jax.grad(loss)(x))
  _same(jax.grad(loss)(x), jax.jit(jax.grad(loss))(x))
  gp = jax.grad(lambda v: jnp.sum(jaxops.global_average_pool(v) ** 2))(x)
  np.testing.assert_allclose(np.asarray(gp), np.broadcast_to(
      2 * X.mean(axis=(2, 3), keepdims=True) / 30, X.shape), rtol=1e-5)


# --- bad input still raises, every time, after a good configuration was cached ------------------


@pytest.mark.parametrize("call,error,match", [
    (lambda x: jaxops.resize(x, scales=(True, True, True, True)), ValueError,
     r"resize: argument `scales` must be a 1-D sequence of 4 numbers .*; got "
     r"\(True, True, True, True\)"),
    (lambda x: jaxops.resize(x, scales=np.array([1, 1, 2, 2], bool)), ValueError,
     r"`scales` must be a 1-D sequence of 4 numbers .*; got array \[True, True, True, True\] "
     r"\(dtype bool\)"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 0, 2)), ValueError,
     r"`scales` must be finite numbers > 0; got \(1, 1, 0, 2\)"),
    (lambda x: jaxops.resize(x, sizes=[7, 7], axes=(True, True)), TypeError,
     r"resize: argument `axes` must be a 1-D sequence of integers; got \(True, True\)"),
    (lambda x: jaxops.resize(x, sizes=[7, 7], axes=(2, 2)), ValueError,
     r"resize: argument `axes` must be axes without repeats; got \(2, 2\)"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), mode="Linear"), ValueError,
     r"argument `mode` must be one of 'nearest', 'linear', 'cubic'; got 'Linear'"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), mode=["linear"]), ValueError,
     r"argument `mode` must be one of"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), antialias=2), TypeError,
     r"argument `antialias` must be a bool \(or the ONNX integers 0/1\); got 2"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), cubic_coeff_a=math.nan), ValueError,
     r"argument `cubic_coeff_a` must be a finite float; got nan"),
    (lambda x: jaxops.resize(x.astype(bool), scales=(1, 1, 2, 2), mode="linear"), TypeError,
     r"resize: mode='linear' needs a floating, complex or integer `x`; got dtype bool"),
    (lambda x: jaxops.resize(x, scales=(1, 1, 2, 2), roi=[0, 1],
                             coordinate_transformation_mode="tf_crop_and_resize"), ValueError,
     r"argument `roi` must be a 1-D array of 8 values"),
    (lambda x: jaxops.average_pool(x, (True, True)), TypeError,
     r"average_pool: argument `kernel_shape` must be a 1-D sequence of integers; got "
     r"\(True, True\)"),
    (lambda x: jaxops.average_pool(x, (3, 3), strides=(0, 1)), ValueError,
     r"argument `strides` must be integers >= 1"),
    (lambda x: jaxops.average_pool(x, (3, 3), pads=(3, 0, 0, 0)), ValueError,
     r"argument `pads` must be smaller than the kernel"),
    (lambda x: jaxops.average_pool(x, (3, 3), auto_pad="same"), ValueError,
     r"argument `auto_pad` must be one of 'NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'; "
     r"got 'same'"),
    (lambda x: jaxops.average_pool(x.astype(jnp.int32), (3, 3)), TypeError,
     r"average_pool: argument `x` must have dtype in \(float16, bfloat16, float32, float64\); "
     r"got dtype int32"),
    (lambda x: jaxops.global_average_pool(x[0, 0, 0]), ValueError,
     r"global_average_pool: argument `x` must have at least 2 axes"),
    (lambda x: jaxops.cast(x, "FLOAT8E4M3FN", saturate=2), TypeError,
     r"jaxops.cast: argument `saturate` must be a bool \(or the ONNX integers 0/1\); got 2"),
    (lambda x: jaxops.cast(x, "FLOAT8E8M0", round_mode="sideways"), ValueError,
     r"argument `round_mode` must be one of 'up', 'down', 'nearest'; got 'sideways'"),
    (lambda x: jaxops.cast(x.astype(jnp.complex64), "FLOAT"), TypeError,
     r"jaxops.cast: argument `x` has complex dtype complex64"),
    (lambda x: jaxops.cast(np.zeros(2, jnp.float6_e2m3fn), "FLOAT"), TypeError,
     r"jaxops.cast: argument `x`: FLOAT6E2M3 .* is an ONNX type that the installed JAX/XLA "
     r"cannot convert"),
    (lambda x: jaxops.constant_of_shape([2.5]), TypeError,
     r"constant_of_shape: argument `shape` must be a 1-D sequence of integers; got \[2.5\]"),
    (lambda x: jaxops.constant_of_shape([2, -3]), ValueError,
     r"argument `shape` must be dims >= 0; got \[2, -3\]"),
    (lambda x: jaxops.constant_of_shape([2, 3], np.zeros(1, np.complex64)), TypeError,
     r"argument `value` must be an array whose dtype is a real ONNX element type"),
])
def test_bad_input_raises_every_time_after_a_good_call(call, error, match):
  x = jnp.asarray(X)
  jaxops.resize(x, scales=(1, 1, 2, 2))  # the good configurations the bad ones resemble
  jaxops.resize(x, scales=(1, 1, 2, 2), mode="linear")
  jaxops.average_pool(x, (3, 3))
  jaxops.cast(x, "FLOAT8E4M3FN")
  jaxops.constant_of_shape([2, 3])
  for _ in range(2):
    with pytest.raises(error, match=match):
      call(x)


def test_traced_static_arguments_still_raise():
  x = jnp.asarray(X)
  with pytest.raises(TypeError, match=r"resize: argument `scales` decides the output shape"):
    jax.jit(lambda v, s: jaxops.resize(v, scales=s))(x, jnp.ones(4))
  with pytest.raises(TypeError, match=r"average_pool: argument `kernel_shape` decides the output"):
    jax.jit(lambda v, k: jaxops.average_pool(v, k))(x, jnp.array([2, 2]))
  with pytest.raises(TypeError, match=r"argument `cubic_coeff_a` must be a Python or NumPy float"):
    jax.jit(lambda v, a: jaxops.resize(v, scales=(1, 1, 2, 2), mode="cubic",
                                       cubic_coeff_a=a))(x, -0.5)
  with pytest.raises(TypeError, match=r"jaxops.cast: argument `saturate` must be a Python bool"):
    jax.jit(lambda v, s: jaxops.cast(v, "FLOAT8E4M3FN", saturate=s))(x, True)


# --- the cache's key and bookkeeping ------------------------------------------------------------


def test_cache_key_equal_only_for_interchangeable_values():
  key = _checks.cache_key
  assert key((1, 2)) == key((1, 2)) and key([1, 2]) == key([1, 2])
  assert key(np.array([1, 2])) == key(np.array([1, 2]))
  assert key("linear", None, 2.5) == key("linear", None, 2.5)
  assert key((3, 4), np.dtype(np.float32), [1]) == key((3, 4), jnp.ones(1, jnp.float32).dtype, [1])
  different = [(1, 2), [1, 2], (True, 2), (1.0, 2), (np.int64(1), 2), np.array([1, 2]),
               np.array([1, 2], np.int32), np.array([1.0, 2.0]), np.array([[1, 2]]), "1", 1, 1.0,
               True, np.float32(1), np.array([0.0]), np.array([-0.0]), _resize.Mode.LINEAR,
               "linear", None, (), []]
  keys = [key(v) for v in different]
  assert all(k is not None for k in keys)
  assert len(set(keys)) == len(different)
  assert key(1, (2, 3)) != key((1, 2), 3) and key(1, 2) != key((1, 2))


def test_cache_key_none_for_traced_arrays_and_unfamiliar_values():
  key = _checks.cache_key
  for value in (jnp.ones(2), [jnp.ones(())], [[1, 2]], [np.array(1)], object(), {1: 2},
                np.array([object()]), [object()], range(3)):
    assert key(value) is None, value
    assert key((1,), "linear", value) is None, value
  seen = []
  jax.jit(lambda t: seen.append((key(t), key([t]), key(1, t))) or t)(1.0)
  assert seen == [(None, None, None)]


def test_config_cache_keeps_results_only():
  built = []

  def build(arg):
    built.append(1)
    if arg.sum() < 0:
      raise ValueError("negative")
    return int(arg.sum())

  cache = _checks.ConfigCache(build, maxsize=3)
  arg = np.array([1, 2])
  ref = weakref.ref(arg)
  assert cache(_checks.cache_key(arg), arg) == 3
  assert cache(_checks.cache_key(np.array([1, 2])), np.array([1, 2])) == 3
  assert (len(built), cache.hits, cache.misses) == (1, 1, 1)
  del arg
  gc.collect()
  assert ref() is None  # the argument is not retained
  for _ in range(2):  # an error is raised on every call, never cached
    with pytest.raises(ValueError, match="negative"):
      cache(_checks.cache_key(np.array([-1])), np.array([-1]))
  assert len(built) == 3
  assert cache(None, np.array([5])) == 5 and cache(None, np.array([5])) == 5  # no key: built
  assert len(built) == 5
  for i in range(4):  # bounded: cleared when full
    cache(("k", i), np.array([i]))
  assert len(cache._results) <= 3
  cache.clear()
  assert (cache.hits, cache.misses, len(cache._results)) == (0, 0, 0)


def test_cast_checks_each_dtype_once_and_bad_dtypes_every_time(monkeypatch):
  seen = []
  original = _cast._dtypes.of_dtype
  monkeypatch.setattr(_cast._dtypes, "of_dtype", lambda d: seen.append(d) or original(d))
  monkeypatch.setattr(_cast, "_CHECKED_DTYPES", set())
  x = jnp.asarray(X)
  for _ in range(3):
    jaxops.cast(x, "BFLOAT16")
  assert seen.count(np.dtype(np.float32)) == 1 and seen.count(np.dtype(jnp.bfloat16)) == 1
  for _ in range(2):
    with pytest.raises(TypeError, match=r"argument `x` has complex dtype complex64"):
      jaxops.cast(x.astype(jnp.complex64), "FLOAT")
  assert np.dtype(np.complex64) not in _cast._CHECKED_DTYPES


def test_numpy_inputs_reach_the_device_without_a_compile_of_their_own(monkeypatch):
  """A NumPy input goes to the device through jax.device_put: jnp.asarray would run a jitted
  copy (``lax.stage``), compiled once per new shape, before the operator's own program. The
  result is jnp.asarray's (dtype canonicalised, not weak, errors alike), also for NumPy
  scalars and views."""
  from jax._src import compiler
  compiled = []
  real = compiler.backend_compile_and_load
  monkeypatch.setattr(compiler, "backend_compile_and_load",
                      lambda *a, **k: compiled.append(1) or real(*a, **k))
  x = RNG.standard_normal((2, 3, 4, 131)).astype(np.float32)  # a shape no other test uses
  y = jaxops.global_max_pool(x)
  assert len(compiled) == 1  # the operator's program alone (two with jnp.asarray's copy)
  np.testing.assert_array_equal(np.asarray(y), x.max(axis=(2, 3), keepdims=True))
  for value in (x, x[:, :, ::2, ::3], np.asfortranarray(x[0, 0]), np.float32(2.5), np.int64(7),
                np.arange(6.0), np.arange(3, dtype=np.uint8)):
    _same(_checks.as_array(value), jnp.asarray(value))
  for bad in (np.array(["a"]), np.array([1, "a"], dtype=object)):
    with pytest.raises(TypeError, match=r"jaxops: argument `x` must be an array of numbers"):
      _checks.as_array(bad)
