"""Every docstring example in the package, and the README's tour, runs as a doctest.

(That every public function has an Examples: block is checked in tests/test_api.py.)

The examples run under JAX's default configuration, as in a user's session: 64-bit types off
(tests/conftest.py turns them on for the rest of the suite) and NumPy's default print options.
Modules under ``jaxops.onnx`` need the ``onnx`` package and are skipped without it.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pathlib
import pkgutil
import types

import jax
import numpy as np
import pytest

import jaxops

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
  """The package's modules that hold docstring examples (found from their source text, so that
  modules without examples are not collected as skipped tests)."""
  names = []
  for info in pkgutil.walk_packages(jaxops.__path__, prefix="jaxops."):
    spec = importlib.util.find_spec(info.name)
    if info.name.endswith("__main__") or spec is None or spec.origin is None:
      continue
    if ">>> " in pathlib.Path(spec.origin).read_text():
      names.append(info.name)
  return sorted(names)


def _import(name: str) -> types.ModuleType:
  if name.startswith("jaxops.onnx"):
    pytest.importorskip("onnx")
  return importlib.import_module(name)


def _doctests(module: types.ModuleType) -> list[doctest.DocTest]:
  finder = doctest.DocTestFinder(exclude_empty=True)
  tests = [t for t in finder.find(module, module.__name__) if t.examples]
  return sorted(tests, key=lambda t: t.name)


@pytest.mark.parametrize("name", _module_names())
def test_module_doctests(name):
  module = _import(name)
  tests = _doctests(module)
  assert tests, f"{name} lost its docstring examples"
  runner = doctest.DocTestRunner(optionflags=FLAGS)
  report: list[str] = []
  saved = np.get_printoptions()
  try:
    with jax.enable_x64(False):
      for test in tests:
        runner.run(test, out=report.append, clear_globs=True)
  finally:
    np.set_printoptions(**saved)
  failed, attempted = runner.failures, runner.tries
  assert failed == 0, f"{failed} of {attempted} examples failed in {name}:\n" + "".join(report)


def test_backend_has_runnable_example():
  onnx_mod = _import("jaxops.onnx")
  assert ">>>" in (onnx_mod.__doc__ or "")


def test_readme_examples():
  """The README's ``>>>`` blocks run as one doctest (code fences stripped), x64 off."""
  pytest.importorskip("onnx")
  pytest.importorskip("flax")
  readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
  lines = [("" if line.startswith("```") else line)
           for line in readme.read_text().splitlines()]
  test = doctest.DocTestParser().get_doctest("\n".join(lines), {}, "README.md", str(readme), 0)
  assert len(test.examples) >= 15, "README lost its tour"
  runner = doctest.DocTestRunner(optionflags=FLAGS)
  report: list[str] = []
  with jax.enable_x64(False):
    runner.run(test, out=report.append, clear_globs=True)
  assert runner.failures == 0, "".join(report)
