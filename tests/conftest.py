"""Test configuration: 64-bit types on (the ops take float64/int64), strict rank promotion.

The oracles (onnx, onnxruntime, torch, ...) are the test extra's packages. Individual tests
``importorskip`` them so that a single file can run in a bare environment, but the suite as a
whole refuses to run without them: a skipped oracle must never pass for a checked result.
Set JAXOPS_ALLOW_MISSING_ORACLES=1 to run what can run anyway.

Most of the suite's time is XLA compiling thousands of small programs, and most of that is
LLVM optimising the generated code. The tests set ``--xla_backend_optimization_level=0`` (before
JAX starts its CPU backend; subprocesses inherit it): the unpool sweep's compile time fell by
about 40% and a mixed subset of the suite ran 26% faster, while the HLO, and so every fusion,
conditional and collective the tests inspect, stays as it is. Set
JAXOPS_TEST_XLA_OPT=1 to run the suite at XLA's default level, as a user's code compiles; both
pass.

JAXOPS_SEED_SHIFT=N (an integer other than 0) runs the seeded random sweeps on other seeds:
``np.random.default_rng(k)`` with an integer ``k`` becomes ``default_rng([k, N])``, in every
worker. A way to look for cases the suite's own seeds miss; the assertions that count how many
drawn configurations meet a condition (e.g. at least 300 compared) can then fall short.
"""

import importlib.util
import os

# PyTorch's OpenMP workers spin-wait after each parallel region under their default policy
# (docs/PERFORMANCE.md, "Runtimes that spin"); with two pytest workers on two cores, the spin of
# one worker's oracle calls takes the core the other is compiling on. Passive waiting, set before
# torch starts OpenMP (subprocesses inherit it): tests/test_grid_sample.py and
# tests/test_torch_namespace_pool.py ran in 211 s against 232 (user time 391 s against 425).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# JAX writes each equation's Python traceback (up to 100 frames) into the MLIR it lowers, as
# debug locations that no compiled instruction depends on. Without them, a compile-bound subset
# (the global pool sweeps, GridSample's order-two checks, RoiAlign's central differences) ran in
# 51.9 and 54.6 s against 56.1 and 57.7 (docs/PERFORMANCE.md, "The suite's time, a tenth look").
# setdefault: a session that wants them (debugging a lowering) sets the variables itself.
os.environ.setdefault("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "0")
os.environ.setdefault("JAX_TRACEBACK_IN_LOCATIONS_LIMIT", "0")

if not os.environ.get("JAXOPS_TEST_XLA_OPT"):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

if int(os.environ.get("JAXOPS_SEED_SHIFT") or 0):
  import numpy as np  # noqa: E402

  _SEED_SHIFT = int(os.environ["JAXOPS_SEED_SHIFT"])
  _default_rng = np.random.default_rng

  def _shifted_rng(seed=None, *args, **kwargs):
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
      seed = [int(seed), _SEED_SHIFT]
    return _default_rng(seed, *args, **kwargs)

  np.random.default_rng = _shifted_rng

ORACLES = ("onnx", "onnxruntime", "torch", "flax", "matplotlib", "mypy")


def pytest_collection_modifyitems(config, items):
  """Tests marked ``slow`` (the sweeps and the few others of 10 s or more) run first, in their
  collected order. pytest-xdist's worksteal hands each worker a contiguous share and lets an idle
  worker take the end of the other's queue, so a long test collected last could leave one core
  idle for its whole length at the end of the run; with the long ones first, the ends of both
  queues are short tests."""
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _quiet_onnxruntime():
  """onnxruntime's intra-op threads spin after each run by default, as PyTorch's do (above):
  every session the tests make waits passively instead (the same results; the threads only
  sleep sooner)."""
  try:
    import onnxruntime as ort
  except ImportError:
    return
  init = ort.InferenceSession.__init__

  def quiet_init(self, path_or_bytes, sess_options=None, *args, **kwargs):
    if sess_options is None:
      sess_options = ort.SessionOptions()
    sess_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess_options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    init(self, path_or_bytes, sess_options, *args, **kwargs)

  ort.InferenceSession.__init__ = quiet_init


_quiet_onnxruntime()


def pytest_sessionstart(session):
  missing = [m for m in ORACLES if importlib.util.find_spec(m) is None]
  if missing and not os.environ.get("JAXOPS_ALLOW_MISSING_ORACLES"):
    pytest.exit(f"the test extra is not installed (missing: {', '.join(missing)}); run "
                f"`make test` or `pip install -e '.[test]'`", returncode=3)
