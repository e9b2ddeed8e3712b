"""Static tap tables of a separable resampling pass: NumPy algebra only, no JAX.

A tap table maps an axis of length ``n_in`` to ``n_out`` outputs::

  y[j] = sum_k w[j, k] * x[idx[j, k]]

with ``idx`` (integers, shape (n_out, K), each in ``[0, n_in)``) and ``w`` (float64, same shape)
both static. This module holds what is computed about such a table once, at trace time:

- ``table(idx, w, n_in)``: the table, interned by content, so that equal tables are the same
  object (hashable and cheap to compare: the static parameter of ``jaxops._resize_kernel``'s
  primitive), and repeated traces reuse what was built for it;
- ``Table.transpose()``: the table of the transposed (adjoint) map, built once: for each input
  index, the outputs that read it and their weights (repeated pairs merged, zero weights dropped),
  padded to the largest count;
- ``Table.phases()``: the periodic form of a table (integer and rational upsampling), with which
  a pass along the minor axis is computed from strided slices instead of gathers.

Indices are per-axis positions (int64 here; the device kernel gathers with them one axis at a
time), never flat offsets into the whole array, so no index grows with the array's size.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np


class Table:
  """A static tap table: ``idx`` (out, K) into an axis of length ``n_in``, weights ``w`` (out, K).

  Instances are interned by ``table``: equal content gives the same object, so they hash fast
  and serve as static primitive parameters.

  Attributes:
    idx: int64 (n_out, K) tap indices in ``[0, n_in)``.
    w: float64 (n_out, K) tap weights.
    n_in, n_out, k: the input length, output length and taps per output.
    copy: whether the map is a pure copy (K == 1 and every weight exactly 1).
    live: (K,) bool: the tap columns that are not all zero (the ones the device plan reads).
    live_taps: the number of live columns.
  """

  def __init__(self, idx: np.ndarray, w: np.ndarray, n_in: int, key: tuple) -> None:
    self.idx = idx
    self.w = w
    self.n_in = n_in
    self.n_out, self.k = idx.shape
    self._key = key
    self._hash = hash(key)
    self._transpose: Table | None = None
    self._transpose_live: int | None = None
    self.copy = self.k == 1 and bool(np.all(w == 1.0))
    self.live = np.any(w != 0, axis=0)
    self.live_taps = int(np.count_nonzero(self.live))
    self._phases: Phases | None | bool = False  # False: not computed yet

  def phases(self) -> Phases | None:
    """The periodic (phase) form of this table, or None (see ``Phases``); built once."""
    if self._phases is False:
      self._phases = find_phases(self)
    return self._phases  # type: ignore[return-value]

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other: object) -> bool:
    return self is other or (isinstance(other, Table) and self._key == other._key)

  def __repr__(self) -> str:
    return f"Table({self.n_in}->{self.n_out}, K={self.k})"

  def transpose(self) -> Table:
    """The table of the transposed map (n_out -> n_in), built once."""
    if self._transpose is None:
      self._transpose = inverse(self)
    return self._transpose

  def transpose_live_taps(self) -> int:
    """``transpose().live_taps`` (the most outputs that read one input), without building the
    transposed table where it is not built yet (the forward's plan asks it; a long axis's
    table took seconds to transpose)."""
    if self._transpose is not None:
      return self._transpose.live_taps
    if self._transpose_live is None:  # (asked several times per trace: counted once)
      si = _pairs(self)[0]
      self._transpose_live = int(np.bincount(si).max()) if si.size else 0
    return self._transpose_live


@functools.lru_cache(maxsize=512)
def _intern(key: tuple) -> Table:
  n_in, shape, idx_bytes, w_bytes = key
  idx = np.frombuffer(idx_bytes, dtype=np.int64).reshape(shape)
  w = np.frombuffer(w_bytes, dtype=np.float64).reshape(shape)
  return Table(idx, w, n_in, key)


def table(idx: np.ndarray, w: np.ndarray, n_in: int) -> Table:
  """The interned ``Table`` of ``idx`` (cast to int64) and ``w`` (cast to float64)."""
  idx = np.ascontiguousarray(idx, dtype=np.int64)
  wb = np.ascontiguousarray(w, dtype=np.float64).tobytes()
  return _intern((int(n_in), idx.shape, idx.tobytes(), wb))


def _pairs(t: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The (input i, output j, weight) pairs of ``t``, repeated pairs merged (their weights summed
  in table order), zero weights dropped, ordered by (i, j)."""
  out, k = t.n_out, t.k
  # A stable sort of the keys orders the pairs; resampling tables are nearly sorted by (i, j)
  # already, where the stable sort (a merge sort for these integers) is fast.
  key = t.idx.reshape(-1) * out + np.repeat(np.arange(out, dtype=np.int64), k)
  order = np.argsort(key, kind="stable")
  key = key[order]
  starts_run = np.ones(key.size, dtype=bool)
  starts_run[1:] = key[1:] != key[:-1]
  uniq = key[starts_run]
  wsum = np.bincount(np.cumsum(starts_run) - 1, weights=t.w.reshape(-1)[order],
                     minlength=uniq.size)
  keep = wsum != 0.0
  return uniq[keep] // max(out, 1), uniq[keep] % max(out, 1), wsum[keep]


def inverse(t: Table) -> Table:
  """For each input index i, the (output index, weight) pairs that read it, padded."""
  out = t.n_out
  si, sj, wvals = _pairs(t)
  counts = np.bincount(si, minlength=t.n_in)
  m = max(int(counts.max()) if counts.size else 0, 1)
  starts = np.cumsum(counts) - counts
  slot = np.arange(si.size) - starts[si]
  idx_t = np.zeros((t.n_in, m), dtype=np.int64)
  idx_t[si, slot] = sj
  # Pad with the nearest real index so padded taps stay local (cheap to read).
  filled = np.zeros((t.n_in, m), dtype=bool)
  filled[si, slot] = True
  first = np.where(counts > 0, idx_t[:, 0], 0)
  idx_t = np.where(filled, idx_t, first[:, None])
  w_t = np.zeros((t.n_in, m))
  w_t[si, slot] = wvals
  return table(idx_t, w_t, out)


class Phases(NamedTuple):
  """A static table that repeats with a period: output ``a*q + p`` reads ``b*q + off[p, k]``.

  ``a / b`` is ``n_out / n_in`` in lowest terms. For every block ``q`` of ``a`` outputs except
  those in ``fix``, and every live tap column ``k``: ``idx[a*q + p, k]`` equals
  ``b*q + off[p, k]`` clamped to ``[0, n_in)``, and ``w[a*q + p, k]`` equals ``w_p[p, k]``
  (exactly, or within a few float64 units of rounding for rational periods, whose weights are
  computed per output: far below the float32 and float64 rounding of the sums), or, where
  ``w_q`` is not None, ``w_q[q, p, k]``: tables whose taps repeat but whose weights change from
  block to block (align_corners upsampling by an integer factor: output ``2q + 1`` of 256 -> 512
  reads inputs ``q`` and ``q + 1`` with weight ``(2q + 1) / 1022`` on the second). The blocks in
  ``fix`` (a few, at the edges) are computed from the table itself.
  """

  a: int
  b: int
  off: np.ndarray     # (a, K) integer offsets
  w_p: np.ndarray     # (a, K) weights of each phase
  live: np.ndarray    # (K,) bool: tap columns that are not all zero (the ones read)
  fix: tuple[int, ...]
  w_q: np.ndarray | None = None  # (blocks, a, K) per-block weights, where they vary


# The phase form is used for tables with at most this many phases, this many live taps, at least
# this many blocks, and at most this many blocks that break the pattern.
MAX_PHASES = 8
MAX_PHASE_TAPS = 2
MIN_BLOCKS = 8
MAX_FIX = 4
PHASE_WEIGHT_ULPS = 16


def find_phases(t: Table) -> Phases | None:
  """The periodic form of a static table (integer and rational upsampling), or None."""
  if t.n_in < 2 or t.n_out < 2:
    return None
  g = math.gcd(t.n_out, t.n_in)
  a, b = t.n_out // g, t.n_in // g
  blocks = t.n_out // a
  live = t.live
  if a > MAX_PHASES or blocks < MIN_BLOCKS or not 1 <= int(live.sum()) <= MAX_PHASE_TAPS:
    return None
  mid = blocks // 2
  off = t.idx[a * mid:a * mid + a] - b * mid
  w_p = t.w[a * mid:a * mid + a]
  q = np.arange(blocks)[:, None, None]
  want = np.clip(b * q + off[None], 0, t.n_in - 1)
  idx = t.idx.reshape(blocks, a, t.k)
  w = t.w.reshape(blocks, a, t.k)
  # Weights of a rational period are computed per output in float64 and may differ from block
  # to block in the last bits; up to PHASE_WEIGHT_ULPS units of rounding they count as equal.
  tol = PHASE_WEIGHT_ULPS * np.finfo(np.float64).eps * np.maximum(np.abs(w_p), 1.0)
  same_idx = idx == want
  same = same_idx & (np.abs(w - w_p[None]) <= tol[None])
  ok = np.all(same | ~live, axis=(1, 2))
  fix = tuple(int(i) for i in np.flatnonzero(~ok))
  if len(fix) <= MAX_FIX:
    return Phases(a, b, off, w_p, live, fix)
  # The taps repeat but the weights do not: each block takes its own weights.
  ok = np.all(same_idx | ~live, axis=(1, 2))
  fix = tuple(int(i) for i in np.flatnonzero(~ok))
  if len(fix) > MAX_FIX:
    return None
  w_q = w.copy()
  w_q.setflags(write=False)
  return Phases(a, b, off, w_p, live, fix, w_q)
