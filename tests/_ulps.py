"""Test helpers for roundings that decide discrete results (tests/test_exact.py, the nearest
grid_sample tests): values beside a lattice, and programs compiled at a chosen XLA level."""

from __future__ import annotations

import jax
import numpy as np


def with_neighbours(values: np.ndarray, ulps: int) -> np.ndarray:
  """``values`` followed by their neighbours 1..``ulps`` ulps above, then 1..``ulps`` below."""
  dtype = values.dtype.type
  near = [values]
  for direction in (np.inf, -np.inf):
    v = values
    for _ in range(ulps):
      v = np.nextafter(v, dtype(direction))
      near.append(v)
  return np.concatenate(near)


def half_pixel_grid(spatial: tuple[int, ...], dtype, rng: np.random.Generator) -> np.ndarray:
  """(1, 1, ..., P, r) grid whose coordinates, axis by axis, are the normalised positions of
  every half-pixel of that axis (align_corners=False, from 1.5 pixels outside to 1.5 beyond)
  and their neighbours up to two ulps either side, each column shuffled."""
  cols = [with_neighbours(((np.arange(-2, 2 * length + 3) + 1) / length - 1).astype(dtype), 2)
          for length in reversed(spatial)]  # grid[..., 0] is the innermost axis
  size = max(c.size for c in cols)
  cols = [rng.permutation(np.resize(c, size)) for c in cols]
  return np.stack(cols, -1).reshape((1,) * len(spatial) + (size, len(spatial)))


def compiled(f, *args, level: int):
  """``jax.jit(f)`` compiled for ``args`` at XLA backend optimization level ``level`` (the
  suite's conftest sets 0; a user's default is 3, where LLVM contracts multiply-adds)."""
  return jax.jit(f).lower(*args).compile(
      compiler_options={"xla_backend_optimization_level": level})
