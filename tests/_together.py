"""A test helper: many calls compiled as one program. XLA's CPU compiler has a fixed cost per
program (docs/PERFORMANCE.md, "The suite's time, a twelfth look"), so a sweep that compiled one
program per configuration spent most of its time compiling."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax


def run_together(calls: Sequence[Callable[[Any], Any]], inputs: Sequence[Any],
                 size: int) -> list[Any]:
  """``calls[i](inputs[i])`` for every ``i``, ``size`` calls to one jitted program; the results
  as the calls return them (arrays, or tuples of arrays)."""
  out: list[Any] = []
  for i in range(0, len(calls), size):
    group = calls[i:i + size]
    out += jax.jit(lambda vs, group=group: [c(v) for c, v in zip(group, vs)])(
        list(inputs[i:i + size]))
  return out
