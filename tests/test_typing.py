"""The package type-checks: ``mypy jaxops`` passes (config in pyproject.toml), and it ships py.typed."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_py_typed_marker_ships():
  assert (ROOT / "jaxops" / "py.typed").is_file()
  text = (ROOT / "pyproject.toml").read_text()
  assert 'jaxops = ["py.typed"]' in text


def test_mypy_passes():
  pytest.importorskip("mypy")
  proc = subprocess.run(
      [sys.executable, "-m", "mypy", "jaxops", "--no-error-summary", "--hide-error-context"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, f"mypy jaxops failed:\n{proc.stdout}\n{proc.stderr}"
