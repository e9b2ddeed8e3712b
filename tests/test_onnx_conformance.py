"""ONNX's own node test cases for jaxops' operators, run through jaxops.onnx.Backend.

The cases are taken in memory from ``onnx.backend.test.case.node.collect_testcases`` (the
reference implementation generated their expected outputs) and judged by ONNX's criteria: same
dtype and shape, rtol 1e-3 / atol 1e-7, and exact equality for integer, bool and float8 types.
"""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

from jaxops.onnx import conformance  # noqa: E402

# Op prefixes whose cases are expected to fail until the issue named here lands; strict, so a
# case that starts passing fails the suite until its mark is removed.
PENDING: dict[str, str] = {
}


def _params():
  out = []
  for case in conformance.cases():
    marks = [pytest.mark.xfail(reason=why, strict=True)
             for prefix, why in PENDING.items() if case.name.startswith(prefix)]
    out.append(pytest.param(case, id=case.name, marks=marks))
  return out


@pytest.mark.parametrize("case", _params())
def test_node_case(case):
  conformance.check(case)


# The number of cases onnx 1.23.2 has per op: a shrinking count would hide lost coverage.
# (affine_grid: the four *_expanded cases are left out, see conformance.EXCLUDED_SUFFIXES.)
CASE_COUNTS = {"cast": 60, "castlike": 112, "constantofshape": 3, "resize": 39, "upsample": 1,
               "averagepool": 20, "globalaveragepool": 1, "gridsample": 18, "affine_grid": 4,
               "roialign": 3}


def test_case_counts():
  counts: dict[str, int] = {}
  for case in conformance.cases():
    op = conformance.op_of(case.name)
    counts[op] = counts.get(op, 0) + 1
  assert counts == CASE_COUNTS
