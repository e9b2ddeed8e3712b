"""The benchmark command at tiny sizes, one rep, so that it cannot rot; and its timing method.

No timing is asserted anywhere: only that the command runs, writes its files where it is told,
covers every case, and that the method drops and interleaves runs as documented.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("matplotlib")

from benchmarks import _harness  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OP_FUNCTIONS = {"Resize": "resize", "AveragePool": "average_pool",
                "GlobalAveragePool": "global_average_pool", "Cast": "cast",
                "MaxPool": "max_pool", "MaxUnpool": "max_unpool", "LpPool": "lp_pool"}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, check=False)


def test_whole_command_at_tiny_sizes(tmp_path: Path) -> None:
  committed = ROOT / "benchmarks" / "RESULTS.md"
  before = committed.read_bytes() if committed.exists() else None
  out = tmp_path / "out"
  proc = _run("-m", "benchmarks.run", "--tiny", "--reps", "1", "--runs", "1", "--threads", "1",
              "--device", "cpu", "--out", str(out), "--json", str(tmp_path / "r.json"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  listed = _run("benchmarks/run.py", "--list")  # the script entry point works too
  assert listed.returncode == 0, listed.stderr[-3000:]
  labels = listed.stdout.split("\n")
  results = json.loads((tmp_path / "r.json").read_text())["results"]
  assert [r["label"] for r in results] == [x for x in labels if x]
  assert {r["group"] for r in results} == {"Resize", "AveragePool", "GlobalAveragePool", "Cast",
                                           "MaxPool", "MaxUnpool", "LpPool"}
  assert {r["pass"] for r in results} == {"fwd", "bwd"}
  import jaxops
  for r in results:
    timed = [s for s in r["systems"] if s["median_s"] is not None]
    assert timed, r["label"]
    if hasattr(jaxops, OP_FUNCTIONS[r["group"]]):  # the harness calls the API as documented
      assert r["jaxops_s"] is not None, (r["label"], r["missing"])
      assert r["ratio_floor"] is not None
    assert r["floor_s"] is not None and r["bytes_moved"] > 0
    for s in r["systems"]:  # every peer was compared; one that differs must say why
      assert s["agreement"].startswith(("agrees", "DIFFERS", "reference")), (r["label"], s)
      assert s["agrees"] or s["note"], (r["label"], s["name"], s["agreement"])
  text = (out / "RESULTS.md").read_text()
  for heading in ("## Method", "## CPU", "## GPU", "load average", "ratios.png"):
    assert heading in text
  # The run says how memory and JAX dispatch were set up (both change CPU timings).
  assert "malloc: steady" in text or "malloc: not glibc" in text
  assert "JAX CPU dispatch: async (JAX default)" in text
  assert (out / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert json.loads((out / "results-cpu.json").read_text())["results"] == results
  after = committed.read_bytes() if committed.exists() else None
  assert before == after, "the smoke run must not write into the repository"


def test_eager_command_at_tiny_sizes() -> None:
  proc = _run("-m", "benchmarks.eager", "--tiny", "--threads", "1")
  assert proc.returncode == 0, proc.stderr[-3000:]
  import jaxops
  rows = proc.stdout.split("\n")[3:]
  for name in jaxops.__all__:  # every public function has a row, timed eagerly and under jit
    assert any(r.startswith(name) and len(r.split()) >= 5 for r in rows), (name, proc.stdout)


def test_steady_malloc_keeps_freed_memory() -> None:
  # In a fresh process: after --malloc steady's settings, a freed 32 MiB block is reused
  # without page faults; with glibc's defaults it is given back and faulted in again.
  code = (
      "import ctypes, resource, sys\n"
      "from benchmarks.run import steady_malloc\n"
      "said = steady_malloc(sys.argv[1])\n"
      "libc = ctypes.CDLL('libc.so.6')\n"
      "libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]\n"
      "n = 32 << 20\n"
      "for i in range(4):\n"
      "  if i == 2: f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
      "  p = libc.malloc(n); ctypes.memset(p, 1, n); libc.free(p)\n"
      "print(said, '|', (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // 2)\n")
  if sys.platform != "linux":
    pytest.skip("glibc's mallopt is Linux-only")  # never on CI (Linux)
  steady = _run("-c", code, "steady")
  default = _run("-c", code, "default")
  assert steady.returncode == 0 and default.returncode == 0, steady.stderr + default.stderr
  said, faults = steady.stdout.split("|")
  assert said.startswith("steady") and int(faults) < 100, steady.stdout
  said, faults = default.stdout.split("|")
  assert said.startswith("glibc default") and int(faults) > 4000, default.stdout


def test_unknown_only_word_is_an_error() -> None:
  proc = _run("-m", "benchmarks.run", "--only", "no-such-case")
  assert proc.returncode == 2
  assert "no case matches --only 'no-such-case'" in proc.stderr


def test_measure_drops_the_first_run_of_each_block_and_interleaves() -> None:
  calls: list[str] = []

  def system(name: str) -> _harness.System:
    return _harness.System(name, lambda: calls.append(name))

  case = _harness.Case("G", "n", "fwd", "cpu", "1 float32", 8, [system("a"), system("b")], [],
                       system("floor"), 0.0, 0.0)
  _harness.measure(case, reps=2, runs=3)
  # Block 0 runs a, b, floor; block 1 starts one later: b, floor, a. Each 3 + 1 times.
  assert calls == ["a"] * 4 + ["b"] * 4 + ["floor"] * 4 + ["b"] * 4 + ["floor"] * 4 + ["a"] * 4
  assert [s.samples for s in (*case.systems, case.floor)] == [6, 6, 6]


def test_compare_labels_nan_places_shapes_and_tolerance() -> None:
  ref = np.array([1.0, np.nan, np.inf, 4.0])
  assert _harness.compare(ref, ref.copy(), 0.0, 0.0) == (True, "agrees (max|d| 0)")
  ok, text = _harness.compare(ref, np.array([1.0, 2.0, np.inf, 4.0]), 0.0, 0.0)
  assert not ok and text == "NaN differs at 1 places"
  ok, text = _harness.compare(ref, np.array([1.0, np.nan, 448.0, 4.0]), 1.0, 0.0)
  assert not ok and text.startswith("DIFFERS (max|d| inf")
  # |d| = 0.03 <= atol 0 + rtol 0.01 * max|finite ref| (4.0)
  assert _harness.compare(ref, np.array([1.03, np.nan, np.inf, 4.0]), 0.01, 0.0)[0]
  assert not _harness.compare(ref, np.array([1.05, np.nan, np.inf, 4.0]), 0.01, 0.0)[0]
  assert _harness.compare(ref, ref[:3], 0.0, 0.0) == (False, "shape (3,) vs (4,)")


def test_check_lists_a_system_that_fails_when_run_as_missing() -> None:
  def boom() -> None:
    raise RuntimeError("out of memory")

  ok = _harness.System("jaxops", lambda: np.ones(3))
  case = _harness.Case("G", "n", "fwd", "cpu", "3 float64", 48,
                       [ok, _harness.System("torch", boom),
                        _harness.System("flax", lambda: np.array([1.0, 1.0, 2.0]))], [],
                       _harness.System("copy floor", lambda: None), 0.0, 0.0)
  _harness.check(case)
  assert [s.name for s in case.systems] == ["jaxops", "flax"]
  assert case.missing == [("torch", "failed when run: RuntimeError: out of memory")]
  assert (ok.agreement, case.systems[1].agrees) == ("reference", False)
