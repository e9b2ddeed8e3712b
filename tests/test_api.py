"""The public surface: every function keyword-only after its data arguments, and documented."""

from __future__ import annotations

import inspect
import re

import pytest

import jaxops

# Positional parameters each public function may take; everything else must be keyword-only.
POSITIONAL = {
    "resize": ("x",),
    "average_pool": ("x", "kernel_shape"),
    "global_average_pool": ("x",),
    "max_pool": ("x", "kernel_shape"),
    "max_unpool": ("x", "indices", "kernel_shape"),
    "global_max_pool": ("x",),
    "lp_pool": ("x", "kernel_shape"),
    "global_lp_pool": ("x",),
    "cast": ("x", "to"),
    "cast_like": ("x", "like"),
    "constant_of_shape": ("shape", "value"),
}

EXPECTED = set(POSITIONAL)


def test_all_is_the_designed_api():
  assert set(jaxops.__all__) == EXPECTED
  for name in jaxops.__all__:
    assert callable(getattr(jaxops, name)), name


def _public():
  return [getattr(jaxops, n) for n in sorted(jaxops.__all__)]


@pytest.mark.parametrize("fn", _public(), ids=lambda f: f.__name__)
def test_options_are_keyword_only(fn):
  params = list(inspect.signature(fn).parameters.values())
  allowed = POSITIONAL[fn.__name__]
  positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  assert tuple(positional) == allowed, (fn.__name__, positional)
  assert not any(p.kind == p.VAR_POSITIONAL for p in params)


@pytest.mark.parametrize("fn", _public(), ids=lambda f: f.__name__)
def test_docstring_sections(fn):
  doc = inspect.getdoc(fn) or ""
  for section in ("Args:", "Returns:", "Raises:", "Examples:"):
    assert re.search(rf"^{section}", doc, re.M), f"{fn.__name__} lacks {section}"
  assert ">>>" in doc, f"{fn.__name__} has no runnable example"


@pytest.mark.parametrize("fn", _public(), ids=lambda f: f.__name__)
def test_public_functions_are_annotated(fn):
  sig = inspect.signature(fn)
  assert sig.return_annotation is not inspect.Signature.empty, fn.__name__
  for p in sig.parameters.values():
    assert p.annotation is not inspect.Parameter.empty, (fn.__name__, p.name)


def test_core_does_not_import_onnx():
  import subprocess
  import sys

  code = ("import sys, jaxops; import jax.numpy as jnp; "
          "assert 'onnx' not in sys.modules, sorted(m for m in sys.modules if 'onnx' in m)")
  subprocess.run([sys.executable, "-c", code], check=True)
