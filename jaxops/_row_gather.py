"""A batched row gather that XLA's CPU runs as a gather with a single index.

``row_gather(xt, idx)`` is ``xt[n, idx[n, ...], :]`` for every image ``n`` of ``xt`` (N, P, C):
what ``jax.vmap(lambda a, i: a.at[i].get())`` computes. That form is a gather with a batch
axis, which XLA's CPU backend lowers with a two-part index (the image and the row) built for
every point. Compiled for one device, this primitive instead reads ``xt`` as one (N * P, C)
table at ``n * P + idx``: a one-part index, about 10% faster for grid_sample's bilinear forward
on 8x32x128x128 and 16% for its bicubic forward (interleaved in one process). Compiled for
several devices (SPMD partitioning), the flat index would hide that each image reads only its
own rows and the partitioner would gather the whole batch on every device, so there it lowers
to the batched form, which a batch-sharded input partitions without collectives.

The primitive is linear in ``xt``: its tangent is itself and its transpose the batched
scatter-add of the plain form. Under ``vmap`` a mapped table folds the mapped axis into the
images, and a table shared by mapped indices takes the mapped axis as one more index axis
(the table is not copied).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir

from jaxops import _checks
from jaxops import _fused_sum

row_gather_p = Primitive("jaxops_row_gather")


def row_gather(xt: jax.Array, idx: jax.Array) -> jax.Array:
  """(N, *idx.shape[1:], C): the rows of ``xt`` (N, P, C) at ``idx`` (N, ...), int32 offsets
  in [0, P) within each image (out-of-range offsets are undefined: the gathers promise to stay
  in bounds)."""
  return row_gather_p.bind(xt, idx)


def _batched(xt: Any, idx: Any) -> Any:
  return jax.vmap(lambda a, i: a.at[i].get(mode="promise_in_bounds"))(xt, idx)


def _flat(xt: Any, idx: Any) -> Any:
  n, p, c = xt.shape
  if n * p >= 2 ** 31:  # the flat offsets would not fit in int32
    return _batched(xt, idx)
  base = (jnp.arange(n, dtype=idx.dtype) * p).reshape((n,) + (1,) * (idx.ndim - 1))
  return xt.reshape(n * p, c).at[idx + base].get(mode="promise_in_bounds")


def _lowering(ctx: Any, xt: Any, idx: Any) -> Any:
  impl = _batched if _fused_sum.partitioned(ctx) else _flat
  return mlir.lower_fun(impl, multiple_results=False)(ctx, xt, idx)


def _abstract(xt: Any, idx: Any) -> Any:
  return xt.update(shape=idx.shape + xt.shape[-1:])


def _transpose(ct: Any, xt: Any, idx: Any) -> list[Any]:
  # linear in xt only: idx is an integer array, never an undefined primal
  if type(ct) is ad.Zero:
    return [ad.Zero(xt.aval), None]
  zeros = _checks.zeros_like_type(xt.aval)  # (of its sharding, on a mesh with explicit axes)
  return [jax.vmap(lambda z, i, c: z.at[i].add(c, mode="promise_in_bounds"))(zeros, idx, ct),
          None]


def _batch(args: Any, dims: Any) -> tuple[Any, int]:
  xt, idx = args
  dx, di = dims
  if dx is None:  # one table, several index sets: the mapped axis is one more index axis
    return row_gather(xt, jnp.moveaxis(idx, di, 1)), 1
  xt = jnp.moveaxis(xt, dx, 0)
  b = xt.shape[0]
  idx = jnp.moveaxis(idx, di, 0) if di is not None else jnp.broadcast_to(idx, (b,) + idx.shape)
  # several tables: the mapped axis folds into the images
  out = row_gather(xt.reshape((-1,) + xt.shape[2:]), idx.reshape((-1,) + idx.shape[2:]))
  return out.reshape((b, idx.shape[1]) + out.shape[1:]), 0


row_gather_p.def_impl(_batched)
row_gather_p.def_abstract_eval(_abstract)
mlir.register_lowering(row_gather_p, _lowering)
ad.defjvp(row_gather_p, lambda t, xt, idx: row_gather(t, idx), None)
ad.primitive_transposes[row_gather_p] = _transpose
batching.primitive_batchers[row_gather_p] = _batch
