"""Cast cases: 16M float32 to bfloat16, float16 and float8e4m3fn (saturate), jaxops against
onnxruntime, NumPy/ml_dtypes ``astype`` and torch ``.to``.

The input holds +-inf, NaN and values past every target's range, so that the saturation and
overflow rules are part of the agreement check. ml_dtypes and torch do not saturate float8: their
rows clip to +-448 first, and say so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from benchmarks._harness import Builder, Context, Spec, System
from benchmarks._peers import ORT_NOT_ON_GPU, ort_system, to_torch, torch_system
from jaxops._dtypes import BY_NAME

CAST_OPSET = 21
N_FULL = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class CastCase:
  to: str  # ONNX element type name
  torch_dtype: str
  clip: float | None = None  # saturation bound the peers must apply by hand


CASES = (
    CastCase("BFLOAT16", "bfloat16"),
    CastCase("FLOAT16", "float16"),
    CastCase("FLOAT8E4M3FN", "float8_e4m3fn", clip=448.0),
)


def _input(ctx: Context) -> np.ndarray:
  n = 1024 if ctx.tiny else N_FULL
  x = (ctx.rng().standard_normal(n, dtype=np.float32) * 200.0).astype(np.float32)
  x[:6] = [np.inf, -np.inf, np.nan, 1e6, -1e6, 70000.0]
  return x


def _build(c: CastCase) -> Any:
  def build(ctx: Context) -> tuple[Builder, tuple[int, int], Any]:
    import jaxops
    x = _input(ctx)
    target = np.dtype(BY_NAME[c.to].dtype)
    b = Builder(ctx.jax_device(), x)
    b.add("jaxops", lambda: b.jax(lambda a: jaxops.cast(a, c.to, saturate=True), x))
    clip_note = f"clips to +-{c.clip:g} first (no saturating cast)" if c.clip else ""
    if ctx.device == "cpu":
      b.add("onnxruntime", lambda: ort_system(
          "Cast", {"x": x}, node_inputs=["x"], attrs={"to": BY_NAME[c.to].enum, "saturate": 1},
          out_type=BY_NAME[c.to].enum, opset=CAST_OPSET, threads=ctx.threads))

      def numpy_run() -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
          return (x if c.clip is None else np.clip(x, -c.clip, c.clip)).astype(target)

      b.add("numpy", lambda: System("numpy", numpy_run), note=clip_note)
    else:
      b.skip("onnxruntime", ORT_NOT_ON_GPU)
      b.skip("numpy", "host only")
    b.add("torch", lambda: _torch(c, x, ctx), note=clip_note)
    b.add(XLA_CONVERT, lambda: b.jax(_xla_convert(c, target), x), peer=False,
          note="not a peer: XLA's own convert (after a clip where ONNX saturates), what a JAX "
               "user writes without jaxops")
    return b, (x.nbytes, x.size * target.itemsize), target

  return build


XLA_CONVERT = "jax astype"


def _xla_convert(c: CastCase, target: Any) -> Any:
  import jax.numpy as jnp
  if c.clip is None:
    return lambda a: a.astype(target)
  bound = c.clip
  return lambda a: jnp.clip(a, -bound, bound).astype(target)


def _torch(c: CastCase, x: np.ndarray, ctx: Context) -> Any:
  import torch
  dtype = getattr(torch, c.torch_dtype)
  xt = to_torch(x, ctx)
  if c.clip is None:
    return torch_system(lambda: xt.to(dtype), ctx)
  bound = c.clip
  return torch_system(lambda: torch.clamp(xt, -bound, bound).to(dtype), ctx)


SPECS = tuple(Spec("Cast", f"float32->{c.to.lower()}", "fwd", _build(c)) for c in CASES)
