"""A broadcast along a new last axis whose transpose is a sum that XLA's CPU fuses with its
producers.

XLA's CPU backend hands a sum over an axis (``reduce`` with an ``add`` combiner) to its YNNPACK
library, which reads the summed operand from memory, so a gather or a product feeding the sum is
materialised first: for grid_sample's gradient with respect to the grid, one sample-sized block
per tap. A ``reduce`` whose combiner is ``a - (-b)`` (the same IEEE value as ``a + b`` for every
pair of inputs, infinities, NaN and signed zeros included) is not handed over: it stays an XLA
loop fusion, which computes its producers element by element and allocates nothing for them.

``broadcast_last`` and ``sum_last`` are each other's transposes, as primitives with their own
rules: both are linear, so any order of jvp and transposition works, and they batch under vmap.
Should a later XLA read ``a - (-b)`` as an add, the sum is only slower, never different.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir

broadcast_last_p = Primitive("jaxops_broadcast_last")
sum_last_p = Primitive("jaxops_sum_last")


def broadcast_last(v: jax.Array, n: int) -> jax.Array:
  """``v`` (...) broadcast to (..., n); its transpose is ``sum_last``."""
  return broadcast_last_p.bind(v, n=n)


def sum_last(v: jax.Array) -> jax.Array:
  """The sum of ``v`` (..., n) over its last axis, in order, as one XLA loop fusion with the
  producers of ``v``; its transpose is ``broadcast_last``."""
  return sum_last_p.bind(v)


def _broadcast_impl(v: Any, *, n: int) -> Any:
  return jnp.broadcast_to(v[..., None], v.shape + (n,))


def _sum_impl(v: Any) -> Any:
  return jax.lax.reduce(v, np.zeros((), v.dtype), lambda a, b: a - (-b), (v.ndim - 1,))


broadcast_last_p.def_impl(_broadcast_impl)
sum_last_p.def_impl(_sum_impl)
broadcast_last_p.def_abstract_eval(lambda v, *, n: v.update(shape=v.shape + (n,)))
sum_last_p.def_abstract_eval(lambda v: v.update(shape=v.shape[:-1]))
mlir.register_lowering(broadcast_last_p, mlir.lower_fun(_broadcast_impl, multiple_results=False))


def partitioned(ctx: Any) -> bool:
  """Whether the program a lowering rule is called for is compiled for several devices (SPMD
  partitioning), from the lowering context."""
  context = ctx.module_context.axis_context
  return getattr(context, "num_devices", 1) > 1 or hasattr(context, "mesh")


def _sum_lowering(ctx: Any, v: Any) -> Any:
  # XLA's SPMD partitioner accepts only the reductions it knows (add, max, ...): a program
  # compiled for several devices sums with add, as jnp.sum does.
  impl = (lambda u: jnp.sum(u, axis=-1)) if partitioned(ctx) else _sum_impl
  return mlir.lower_fun(impl, multiple_results=False)(ctx, v)


mlir.register_lowering(sum_last_p, _sum_lowering)
ad.deflinear2(broadcast_last_p, lambda ct, v, *, n: [sum_last(ct)])
ad.deflinear2(sum_last_p, lambda ct, v: [broadcast_last(ct, v.aval.shape[-1])])


def _batch_broadcast(args: Any, dims: Any, *, n: int) -> tuple[Any, int]:
  (v,), (d,) = args, dims
  return broadcast_last(jnp.moveaxis(v, d, 0), n), 0


def _batch_sum(args: Any, dims: Any) -> tuple[Any, int]:
  (v,), (d,) = args, dims
  return sum_last(jnp.moveaxis(v, d, 0)), 0


batching.primitive_batchers[broadcast_last_p] = _batch_broadcast
batching.primitive_batchers[sum_last_p] = _batch_sum
