"""ONNX's node test cases for jaxops' operators, and ONNX's criteria for judging them.

Used by ``tests/test_onnx_conformance.py`` and ``python -m jaxops conformance``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from jaxops import _dtypes

PREFIXES = ("test_cast_", "test_castlike_", "test_constantofshape_", "test_resize_",
            "test_upsample_", "test_averagepool_", "test_globalaveragepool", "test_maxpool_",
            "test_maxunpool_", "test_lppool_", "test_globalmaxpool", "test_gridsample",
            "test_affine_grid_", "test_roialign_")
# Function-expanded cases whose bodies use ops outside jaxops (Shape, Slice, If, ...): the
# expanded AffineGrid graphs test AffineGrid's ONNX function, not the operator.
EXCLUDED_SUFFIXES = {"test_affine_grid_": "_expanded"}


@functools.cache
def cases() -> tuple[Any, ...]:
  """Every ONNX node test case whose name starts with one of PREFIXES, sorted by name."""
  from onnx.backend.test.case.node import collect_testcases

  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the generators overflow on purpose (float8 data)
    found = collect_testcases()
  return tuple(sorted((c for c in found if c.name.startswith(PREFIXES) and not _excluded(c.name)),
                      key=lambda c: c.name))


def _excluded(name: str) -> bool:
  return any(name.startswith(p) and name.endswith(s) for p, s in EXCLUDED_SUFFIXES.items())


def op_of(name: str) -> str:
  """The op prefix of a case name ('test_cast_FLOAT_to_INT4' -> 'cast')."""
  for prefix in PREFIXES:
    if name.startswith(prefix):
      return prefix[len("test_"):].rstrip("_")
  raise ValueError(name)


def _array(t: Any) -> np.ndarray:
  return numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else np.asarray(t)


def check(case: Any) -> None:
  """Runs ``case`` through jaxops.onnx.Backend; raises AssertionError on any mismatch."""
  from jaxops.onnx import Backend

  rep = Backend.prepare(case.model)
  for inputs, expected in case.data_sets:
    got = rep.run([_array(t) for t in inputs])
    assert_outputs_equal([_array(t) for t in expected], got, rtol=case.rtol, atol=case.atol)


def assert_outputs_equal(expected: Sequence[np.ndarray], got: Sequence[np.ndarray], *,
                         rtol: float = 1e-3, atol: float = 1e-7) -> None:
  """ONNX's criteria: dtype and shape equal; exact for integer/bool/narrow types; else close."""
  # Explicit raises, not asserts: `python -O -m jaxops conformance` must still judge.
  if len(expected) != len(got):
    raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
  for i, (e, g) in enumerate(zip(expected, got)):
    if g.dtype != e.dtype:
      raise AssertionError(f"output {i}: dtype {g.dtype}, expected {e.dtype}")
    if g.shape != e.shape:
      raise AssertionError(f"output {i}: shape {g.shape}, expected {e.shape}")
    if e.dtype == object:
      if e.tolist() != g.tolist():
        raise AssertionError(f"output {i}: {g.tolist()} != {e.tolist()}")
    elif _dtypes.of_dtype(e.dtype).name in _dtypes.EXACT_NAMES:
      np.testing.assert_array_equal(g.astype(np.float64) if _narrow(e) else g,
                                    e.astype(np.float64) if _narrow(e) else e,
                                    err_msg=f"output {i}")
    else:
      np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                 atol=atol, err_msg=f"output {i}")


def _narrow(a: np.ndarray) -> bool:
  """ml_dtypes types, compared through float64 (NaN positions must match)."""
  return a.dtype.name.startswith(("float8", "float4", "float6", "int4", "uint4", "int2", "uint2"))


def summary(only: Sequence[str] = ()) -> dict[str, tuple[int, int]]:
  """op -> (passed, total) over the ONNX node cases (of the ops in ``only``, if given)."""
  out: dict[str, list[int]] = {}
  for case in cases():
    if only and op_of(case.name) not in only:
      continue
    tally = out.setdefault(op_of(case.name), [0, 0])
    tally[1] += 1
    try:
      check(case)
    except Exception:  # noqa: BLE001 - any failure counts as not passed
      continue
    tally[0] += 1
  return {op: (p, t) for op, (p, t) in out.items()}
