"""Resize cases: jaxops.resize against onnxruntime, torch.nn.functional.interpolate, jax.image.

Peers get the work mapped onto their own vocabulary; where that vocabulary cannot say the same
thing, the peer keeps its row with a label (written here, before any run) and the agreement check
says how far its output is from jaxops'.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._harness import Builder, Context, Spec, grad_of_sum_of_squares
from benchmarks._peers import (ORT_NO_BACKWARD, ORT_NOT_ON_GPU, ort_system, torch_forward,
                              torch_grad)

RESIZE_OPSET = 19
# torch's and jax.image's antialiased filters drop the taps past the border and renormalise the
# rest: ONNX's exclude_outside=1. With ONNX's default exclude_outside=0 the border rows differ.
ANTIALIAS_NOTE = "antialias drops out-of-range taps (= ONNX exclude_outside=1; case has 0)"


@dataclasses.dataclass(frozen=True)
class ResizeCase:
  """One Resize configuration, NC + spatial layout; ``scale`` applies to every spatial axis.

  With ``use_sizes`` the op gets ``sizes`` (floor(length * scale)) instead of ``scales``.
  """

  name: str
  shape: tuple[int, ...]
  scale: float
  mode: str = "linear"
  ctm: str = "half_pixel"
  nearest_mode: str = "round_prefer_floor"
  antialias: bool = False
  dtype: str = "float32"
  use_sizes: bool = False
  backward: bool = True

  def input_shape(self, ctx: Context) -> tuple[int, ...]:
    if not ctx.tiny:
      return ctx.sized(self.shape)
    return (1, 2) + (8,) * (len(self.shape) - 2)

  def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:2] + tuple(int(np.floor(n * self.scale)) for n in shape[2:])

  def scales(self, rank: int) -> np.ndarray:
    return np.array([1.0, 1.0] + [self.scale] * (rank - 2), np.float32)


# The speed cases of the Resize issue (float32), then the uint8 / bfloat16 variants and two
# configurations that show where peers' semantics part.
CASES = (
    ResizeCase("linear x2", (8, 3, 256, 256), 2.0),
    ResizeCase("cubic x2", (8, 3, 256, 256), 2.0, mode="cubic"),
    ResizeCase("nearest x2", (8, 3, 256, 256), 2.0, mode="nearest"),
    ResizeCase("linear 56->98 (sizes)", (4, 64, 56, 56), 1.75, use_sizes=True),
    ResizeCase("linear 256->224 (sizes)", (8, 3, 256, 256), 0.875, use_sizes=True),
    ResizeCase("linear x0.25 antialias", (8, 3, 512, 512), 0.25, antialias=True),
    ResizeCase("cubic x0.25 antialias", (8, 3, 512, 512), 0.25, mode="cubic", antialias=True),
    ResizeCase("linear x2 uint8", (8, 3, 256, 256), 2.0, dtype="uint8", backward=False),
    ResizeCase("linear x2 bfloat16", (8, 3, 256, 256), 2.0, dtype="bfloat16"),
    ResizeCase("linear x2 align_corners", (8, 3, 256, 256), 2.0, ctm="align_corners"),
    ResizeCase("trilinear x2", (2, 4, 32, 64, 64), 2.0, backward=False),
)


def _input(c: ResizeCase, ctx: Context) -> np.ndarray:
  rng = ctx.rng()
  shape = c.input_shape(ctx)
  if c.dtype == "uint8":
    return rng.integers(0, 256, shape, dtype=np.uint8)
  return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(c.dtype))


def _jaxops_fn(c: ResizeCase, rank: int) -> Any:
  import jaxops
  resize = jaxops.resize  # AttributeError (reported as missing) until resize lands
  scales = c.scales(rank)

  def f(x: jax.Array) -> jax.Array:
    how = ({"sizes": np.array(c.out_shape(x.shape), np.int64)} if c.use_sizes
           else {"scales": scales})
    return resize(x, **how, mode=c.mode, coordinate_transformation_mode=c.ctm,
                  nearest_mode=c.nearest_mode, antialias=c.antialias)

  return f


def _jax_image(c: ResizeCase, shape: tuple[int, ...]) -> tuple[Any, str]:
  """jax.image.resize with the closest method; the label says what differs."""
  notes = []
  if c.mode == "cubic":
    notes.append("cubic a=-0.5 (case: -0.75), border taps renormalised instead of clamped")
  if c.mode == "nearest" and (c.ctm, c.nearest_mode) != ("half_pixel", "round_prefer_ceil"):
    notes.append(f"nearest is half_pixel + round (case is {c.ctm} + {c.nearest_mode})")
  elif c.ctm != "half_pixel":
    notes.append(f"half_pixel only (case is {c.ctm})")
  if c.antialias:
    notes.append(ANTIALIAS_NOTE)
  if c.dtype == "uint8":
    notes.append("returns float32 (no rounding/saturation to uint8)")
  out = c.out_shape(shape)
  method = {"linear": "linear", "cubic": "cubic", "nearest": "nearest"}[c.mode]

  def f(x: jax.Array) -> jax.Array:
    return jax.image.resize(x, out, method, antialias=c.antialias)

  return f, "; ".join(notes)


def _torch_op(c: ResizeCase, rank: int) -> tuple[Any, str]:
  """(op, label) for torch.nn.functional.interpolate with the matching mode, or (None, why not)."""
  import torch
  spatial = rank - 2
  if c.mode == "linear":
    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[spatial]
  elif c.mode == "cubic":
    if spatial != 2:
      return None, "torch has bicubic for 4-D input only"
    mode = "bicubic"
  elif (c.ctm, c.nearest_mode) == ("asymmetric", "floor"):
    mode = "nearest"
  elif c.ctm == "half_pixel" and c.nearest_mode.startswith("round_prefer"):
    mode = "nearest-exact"
  else:
    return None, f"no torch nearest mode for {c.ctm} + {c.nearest_mode}"
  if c.ctm not in ("half_pixel", "align_corners", "asymmetric"):
    return None, f"torch has no coordinate_transformation_mode {c.ctm}"
  if c.ctm == "asymmetric" and c.mode != "nearest":
    return None, "torch has no asymmetric linear/cubic"
  kwargs: dict[str, Any] = {}
  notes = [ANTIALIAS_NOTE] if c.antialias else []
  if mode == "nearest-exact" and c.nearest_mode != "round_prefer_ceil":
    notes.append(f"nearest-exact rounds halves up (case: {c.nearest_mode})")
  if c.antialias and c.mode == "cubic":
    notes.append("antialiased bicubic uses a=-0.5 (case: -0.75)")
  if c.mode != "nearest":
    kwargs["align_corners"] = c.ctm == "align_corners"
    kwargs["antialias"] = c.antialias

  def op(x: Any) -> Any:
    return torch.nn.functional.interpolate(x, size=c.out_shape(tuple(x.shape))[2:], mode=mode,
                                           **kwargs)

  return op, "; ".join(notes)


def _ort(c: ResizeCase, x: np.ndarray, ctx: Context) -> Any:
  attrs: dict[str, Any] = {"mode": c.mode, "coordinate_transformation_mode": c.ctm}
  if c.mode == "nearest":
    attrs["nearest_mode"] = c.nearest_mode
  if c.antialias:
    attrs["antialias"] = 1
  if c.use_sizes:
    inputs = ["x", "", "", "sizes"]
    consts = {"sizes": np.array(c.out_shape(x.shape), np.int64)}
  else:
    inputs, consts = ["x", "", "scales"], {"scales": c.scales(x.ndim)}
  return ort_system("Resize", {"x": x}, node_inputs=inputs, consts=consts, attrs=attrs,
                    opset=RESIZE_OPSET, threads=ctx.threads)


def _forward(c: ResizeCase) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    x = _input(c, ctx)
    b = Builder(ctx.jax_device(), x)
    b.add("jaxops", lambda: b.jax(_jaxops_fn(c, x.ndim), x))
    if ctx.device == "cpu":
      b.add("onnxruntime", lambda: _ort(c, x, ctx))
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)
    op, note = _torch_op(c, x.ndim)
    b.add("torch", lambda: torch_forward(op, x, ctx) if op else None, note=note)
    f, note = _jax_image(c, x.shape)
    b.add("jax.image", lambda: b.jax(f, x, note=note))
    return b, (x.nbytes, int(np.prod(c.out_shape(x.shape))) * x.dtype.itemsize), x.dtype

  return build


def _backward(c: ResizeCase) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    x = _input(c, ctx)
    b = Builder(ctx.jax_device(), x)
    b.skip("onnxruntime", ORT_NO_BACKWARD)
    b.add("jaxops", lambda: b.jax(grad_of_sum_of_squares(_jaxops_fn(c, x.ndim)), x))
    op, note = _torch_op(c, x.ndim)
    b.add("torch", lambda: torch_grad(op, x, ctx) if op else None, note=note)
    f, note = _jax_image(c, x.shape)
    b.add("jax.image", lambda: b.jax(grad_of_sum_of_squares(f), x, note=note))
    return b, (x.nbytes, x.nbytes), x.dtype

  return build


SPECS = tuple(
    [Spec("Resize", c.name, "fwd", _forward(c)) for c in CASES]
    + [Spec("Resize", c.name, "bwd", _backward(c)) for c in CASES if c.backward])
