"""torch.nn.functional's other names for resampling and pooling calls, against torch 2.13 CPU:
the deprecated ``upsample*`` functions, the ``*_with_indices`` pools, and ``pixel_shuffle`` /
``pixel_unshuffle`` (values, indices, gradients, errors)."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxops.torch as F


def _torch(fn, *args, **kw):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch's deprecation warnings for upsample*
    return fn(*args, **kw)


@pytest.mark.parametrize("name, kw", [
    ("upsample", dict(scale_factor=2)),
    ("upsample", dict(size=(5, 7), mode="bilinear", align_corners=False)),
    ("upsample", dict(size=(5, 7), mode="bicubic", align_corners=True)),
    ("upsample_nearest", dict(size=(9, 4))),
    ("upsample_nearest", dict(scale_factor=1.5)),
    ("upsample_bilinear", dict(size=(9, 4))),
    ("upsample_bilinear", dict(scale_factor=2)),
])
def test_upsample_names_match_torch(name, kw):
  x = np.random.default_rng(0).standard_normal((2, 3, 6, 5))
  want = _torch(getattr(TF, name), torch.tensor(x), **kw).numpy()
  np.testing.assert_allclose(np.asarray(getattr(F, name)(x, **kw)), want, rtol=1e-12,
                             atol=1e-12)


def test_upsample_bilinear_is_align_corners_true():
  """The trap: upsample_bilinear aligns corners, interpolate's bilinear does not by default."""
  x = np.arange(4.0).reshape(1, 1, 1, 4)
  got = np.asarray(F.upsample_bilinear(x, size=(1, 7)))
  np.testing.assert_allclose(got.ravel(), [0, 0.5, 1, 1.5, 2, 2.5, 3])
  assert not np.allclose(np.asarray(F.interpolate(x, size=(1, 7), mode="bilinear")), got)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_with_indices_pools_match_torch(nd):
  rng = np.random.default_rng(nd)
  x = rng.standard_normal((2, 3) + (7,) * nd)
  for kw in (dict(kernel_size=3), dict(kernel_size=2, stride=1, padding=1, ceil_mode=True),
             dict(kernel_size=3, stride=2, dilation=2, return_indices=False)):
    y, i = getattr(F, f"max_pool{nd}d_with_indices")(x, **kw)
    yt, it = getattr(TF, f"max_pool{nd}d_with_indices")(torch.tensor(x), **kw)
    np.testing.assert_array_equal(np.asarray(y), yt.numpy())
    np.testing.assert_array_equal(np.asarray(i), it.numpy())
  for size in (3, 4):
    y, i = getattr(F, f"adaptive_max_pool{nd}d_with_indices")(x, size)
    yt, it = getattr(TF, f"adaptive_max_pool{nd}d_with_indices")(torch.tensor(x), size)
    np.testing.assert_array_equal(np.asarray(y), yt.numpy())
    np.testing.assert_array_equal(np.asarray(i), it.numpy())


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
@pytest.mark.parametrize("r", [1, 2, 3])
def test_pixel_shuffle_and_unshuffle_match_torch(lead, r):
  rng = np.random.default_rng(r + len(lead))
  xs, wants = [], []
  for dtype in (np.float64, np.int32, np.bool_):
    x = (rng.standard_normal(lead + (2 * r * r, 3, 4)) > 0).astype(dtype) if dtype == np.bool_ \
        else (rng.standard_normal(lead + (2 * r * r, 3, 4)) * 10).astype(dtype)
    xs.append(x)
    wants.append(TF.pixel_shuffle(torch.from_numpy(x), r).numpy())
  y = rng.standard_normal(lead + (2, 3 * r, 2 * r))

  def run(xs, wants, y):  # one program (eager, each reshape and transpose compiles on its own)
    return ([(F.pixel_shuffle(x, r), F.pixel_unshuffle(w, r), F.pixel_unshuffle(x, 1))
             for x, w in zip(xs, wants)], F.pixel_unshuffle(y, r))

  outs, got_y = jax.jit(run)(xs, wants, y)
  for x, want, (got, back, same) in zip(xs, wants, outs):
    got = np.asarray(got)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(back), x)
    np.testing.assert_array_equal(
        np.asarray(same), TF.pixel_unshuffle(torch.from_numpy(x), 1).numpy())
  np.testing.assert_array_equal(np.asarray(got_y),
                                TF.pixel_unshuffle(torch.from_numpy(y), r).numpy())


def test_deviation_pixel_unshuffle_of_an_empty_input_is_pinned():
  """docs/DEVIATIONS.md, jaxops.torch 12 (found by a fuzzer): torch 2.13's pixel_unshuffle
  returns an input with no elements unchanged, shape and all; jaxops.torch gives the shape of
  the operation, as torch's pixel_shuffle does for empty inputs."""
  for shape, want in (((1, 0, 2, 2), (1, 0, 1, 1)), ((0, 1, 4, 6), (0, 4, 2, 3)),
                      ((0, 4, 2, 2), (0, 16, 1, 1))):
    x = np.zeros(shape, np.float32)
    assert F.pixel_unshuffle(x, 2).shape == want
    assert tuple(TF.pixel_unshuffle(torch.from_numpy(x), 2).shape) == shape  # torch: unchanged
  assert F.pixel_shuffle(np.zeros((0, 4, 2, 2)), 2).shape == (0, 1, 4, 4)
  assert tuple(TF.pixel_shuffle(torch.zeros(0, 4, 2, 2), 2).shape) == (0, 1, 4, 4)


def test_pixel_shuffle_gradient_matches_torch():
  rng = np.random.default_rng(7)
  x = rng.standard_normal((2, 8, 3, 5))
  ct = rng.standard_normal((2, 2, 6, 10))
  xt = torch.tensor(x, requires_grad=True)
  (TF.pixel_shuffle(xt, 2) * torch.tensor(ct)).sum().backward()
  g = jax.grad(lambda v: (F.pixel_shuffle(v, 2) * ct).sum())(x)
  np.testing.assert_array_equal(np.asarray(g), xt.grad.numpy())
  g = jax.jit(jax.grad(lambda v: (F.pixel_unshuffle(v, 2) * x).sum()))(ct)
  ctt = torch.tensor(ct, requires_grad=True)
  (TF.pixel_unshuffle(ctt, 2) * torch.tensor(x)).sum().backward()
  np.testing.assert_array_equal(np.asarray(g), ctt.grad.numpy())


@pytest.mark.parametrize("name, shape, factor, exc, match", [
    ("pixel_shuffle", (1, 5, 2, 2), 2, ValueError,
     r"divisible by the square of upscale_factor, but input.size\(-3\)=5 is not divisible by 4"),
    ("pixel_shuffle", (2, 2), 2, ValueError,
     r"at least 3 dimensions, but got input with 2 dimension\(s\)"),
    ("pixel_shuffle", (1, 4, 2, 2), 0, ValueError, "expects a positive upscale_factor, but got 0"),
    ("pixel_shuffle", (1, 4, 2, 2), 2.0, TypeError, "argument `upscale_factor` must be an int"),
    ("pixel_unshuffle", (1, 1, 3, 4), 2, ValueError,
     r"expects height to be divisible by downscale_factor, but input.size\(-2\)=3"),
    ("pixel_unshuffle", (1, 1, 4, 3), 2, ValueError,
     r"expects width to be divisible by downscale_factor, but input.size\(-1\)=3"),
    ("pixel_unshuffle", (1, 1, 4, 4), -1, ValueError, "expects a positive downscale_factor"),
])
def test_pixel_shuffle_errors_as_torch(name, shape, factor, exc, match):
  x = np.zeros(shape, np.float32)
  with pytest.raises(TypeError if exc is TypeError else RuntimeError):
    getattr(TF, name)(torch.from_numpy(x), factor)
  with pytest.raises(exc, match=f"jaxops.torch.{name}: .*{match}"):
    getattr(F, name)(x, factor)


def test_signatures_are_torchs():
  import inspect

  def params(f):
    return [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]

  names = ["upsample", "upsample_nearest", "upsample_bilinear"] + [
      f"{kind}{nd}d_with_indices" for kind in ("max_pool", "adaptive_max_pool") for nd in (1, 2, 3)]
  for name in names:
    assert params(getattr(F, name)) == params(getattr(TF, name)), name
    assert name in F.__all__
  assert {"pixel_shuffle", "pixel_unshuffle"} <= set(F.__all__)
