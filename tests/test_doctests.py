"""Every docstring example in the package runs as a doctest, and every public function has one.

The examples run under JAX's default configuration, as in a user's session: 64-bit types off
(tests/conftest.py turns them on for the rest of the suite) and NumPy's default print options.
Modules under ``jaxops.onnx`` need the ``onnx`` package and are skipped without it.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import types

import jax
import numpy as np
import pytest

import jaxops

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
  names = ["jaxops"]
  for info in pkgutil.walk_packages(jaxops.__path__, prefix="jaxops."):
    if info.name.endswith("__main__"):
      continue
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
  if not tests:
    pytest.skip(f"{name} has no docstring examples")
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


def _public_functions() -> list[tuple[str, object]]:
  out = []
  for name in jaxops.__all__:
    obj = getattr(jaxops, name)
    if inspect.isfunction(obj) or (callable(obj) and not inspect.isclass(obj)):
      out.append((name, obj))
  return out


def test_public_namespace_is_not_empty_once_ops_land():
  # The ops land on their own branches; this records what this checkout exports.
  assert isinstance(jaxops.__all__, list)


@pytest.mark.parametrize("name,fn", _public_functions() or [pytest.param(None, None,
                                                                           marks=pytest.mark.skip)])
def test_public_function_has_runnable_example(name, fn):
  doc = inspect.getdoc(fn) or ""
  assert "Examples:" in doc, f"jaxops.{name}: docstring has no Examples: block"
  assert ">>>" in doc, f"jaxops.{name}: Examples: block has no >>> lines"
  for section in ("Args:", "Returns:"):
    assert section in doc, f"jaxops.{name}: docstring has no {section} section"


def test_backend_has_runnable_example():
  onnx_mod = _import("jaxops.onnx")
  assert ">>>" in (onnx_mod.__doc__ or "")
