"""Test configuration: 64-bit types on (the ops take float64/int64), strict rank promotion.

The oracles (onnx, onnxruntime, torch, ...) are the test extra's packages. Individual tests
``importorskip`` them so that a single file can run in a bare environment, but the suite as a
whole refuses to run without them: a skipped oracle must never pass for a checked result.
Set JAXOPS_ALLOW_MISSING_ORACLES=1 to run what can run anyway.
"""

import importlib.util
import os

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

ORACLES = ("onnx", "onnxruntime", "torch", "flax", "matplotlib", "mypy")


def pytest_sessionstart(session):
  missing = [m for m in ORACLES if importlib.util.find_spec(m) is None]
  if missing and not os.environ.get("JAXOPS_ALLOW_MISSING_ORACLES"):
    pytest.exit(f"the test extra is not installed (missing: {', '.join(missing)}); run "
                f"`make test` or `pip install -e '.[test]'`", returncode=3)
