"""The benchmark command at tiny sizes, one rep, so that it cannot rot; and its timing method.

No timing is asserted anywhere: only that the command runs, writes its files where it is told,
covers every case, and that the method drops and interleaves runs as documented.
"""

from __future__ import annotations

import json
from typing import Any
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("flax")
pytest.importorskip("matplotlib")

from benchmarks import _harness  # noqa: E402
from benchmarks.run import MALLOC_ENV, STEADY_ENV, malloc_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OP_FUNCTIONS = {"Resize": "resize", "AveragePool": "average_pool",
                "GlobalAveragePool": "global_average_pool", "Cast": "cast",
                "MaxPool": "max_pool", "MaxUnpool": "max_unpool", "LpPool": "lp_pool",
                "GridSample": "grid_sample", "AffineGrid+GridSample": "affine_grid",
                "RoiAlign": "roi_align", "jaxops.torch": "torch"}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, check=False)


@pytest.mark.slow
def test_whole_command_at_tiny_sizes(tmp_path: Path) -> None:
  committed = ROOT / "benchmarks" / "RESULTS.md"
  before = committed.read_bytes() if committed.exists() else None
  out = tmp_path / "out"
  proc = _run("-m", "benchmarks.run", "--tiny", "--reps", "1", "--runs", "1", "--settle-ms", "1",
              "--threads", "1",
              "--device", "cpu", "--no-extras", "--out", str(out), "--json",
              str(tmp_path / "r.json"), timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  listed = _run("benchmarks/run.py", "--list")  # the script entry point works too
  assert listed.returncode == 0, listed.stderr[-3000:]
  labels = listed.stdout.split("\n")
  results = json.loads((tmp_path / "r.json").read_text())["results"]
  assert [r["label"] for r in results] == [x for x in labels if x]
  assert {r["group"] for r in results} == set(OP_FUNCTIONS)
  assert {r["pass"] for r in results} == {"fwd", "bwd"}
  import jaxops
  for r in results:
    timed = [s for s in r["systems"] if s["median_s"] is not None]
    assert timed, r["label"]
    if hasattr(jaxops, OP_FUNCTIONS[r["group"]]):  # the harness calls the API as documented
      assert r["jaxops_s"] is not None, (r["label"], r["missing"])
      assert r["ratio_floor"] is not None
    assert r["floor_s"] is not None and r["bytes_moved"] > 0
    assert r["jaxops_faults"] is None or r["jaxops_faults"] >= 0
    if r["jaxops_s"] is not None:  # XLA's memory analysis: the output is allocated per call
      assert r["jaxops_alloc_bytes"] > 0 and 0 < r["jaxops_largest_block"] <= r[
          "jaxops_alloc_bytes"], r["label"]
    for s in r["systems"]:  # every peer was compared; one that differs must say why
      assert s["agreement"].startswith(("agrees", "DIFFERS", "reference")), (r["label"], s)
      assert s["agrees"] or s["note"], (r["label"], s["name"], s["agreement"])
  text = (out / "RESULTS.md").read_text()
  for heading in ("## Method", "## CPU", "## GPU", "load average", "ratios.png"):
    assert heading in text
  # The run says how memory and JAX dispatch were set up (both change CPU timings); the main
  # table is glibc's allocator as the process started (defaults unless the environment says).
  assert "malloc: glibc" in text
  assert "JAX CPU dispatch: async (JAX default)" in text
  assert "jaxops faults / call" in text and "jaxops MiB / call" in text
  assert "best agreeing peer, steady malloc" not in text  # --no-extras: no child runs
  assert (out / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert json.loads((out / "results-cpu.json").read_text())["results"] == results
  after = committed.read_bytes() if committed.exists() else None
  assert before == after, "the smoke run must not write into the repository"


@pytest.mark.slow
def test_extra_runs_add_the_steady_column_and_the_sync_and_scheduler_tables(
    tmp_path: Path) -> None:
  out = tmp_path / "out"
  proc = _run("-m", "benchmarks.run", "--tiny", "--reps", "1", "--runs", "1", "--settle-ms", "1",
              "--threads", "1",
              "--device", "cpu", "--only", "GlobalAveragePool 2d", "--out", str(out),
              "--json", str(tmp_path / "r.json"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  fwd, bwd = json.loads((tmp_path / "r.json").read_text())["results"]
  assert (fwd["label"], bwd["label"]) == ("GlobalAveragePool 2d fwd", "GlobalAveragePool 2d bwd")
  for r, extras in ((fwd, ("steady", "sync")), (bwd, ("steady", "sync", "memsched"))):
    for extra in extras:
      assert r[extra]["jaxops_s"] > 0 and r[extra]["ratio_best_agreeing_peer"] > 0, r
  assert "memsched" not in fwd  # the scheduler's extra run takes the backward cases only
  text = (out / "RESULTS.md").read_text()
  assert "jaxops / best agreeing peer, steady malloc" in text
  assert "MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824" in text
  assert "### CPU: synchronous JAX dispatch" in text and "sync (calling thread)" in text
  assert "### CPU: XLA's memory-optimized scheduler" in text
  assert "jaxops / best agreeing peer, memsched" in text


def test_builder_compiles_with_the_compiler_options(monkeypatch: pytest.MonkeyPatch) -> None:
  # --xla-scheduler memory reaches XLA through COMPILER_OPTIONS: a value XLA rejects proves that
  # the option is passed, and the real one compiles and computes the same values.
  import jax.numpy as jnp
  ctx = _harness.Context("cpu", True, 1)
  b = _harness.Builder(ctx.jax_device(), np.ones(3, np.float32))
  monkeypatch.setattr(_harness, "COMPILER_OPTIONS", {"xla_cpu_scheduler_type": "NO_SUCH_TYPE"})
  with pytest.raises(Exception, match="xla_cpu_scheduler_type"):
    b.jax(lambda a: jnp.sin(a), np.ones(3, np.float32))
  monkeypatch.setattr(_harness, "COMPILER_OPTIONS", dict(_harness.MEMORY_SCHEDULER))
  system = b.jax(lambda a: jnp.sin(a), np.ones(3, np.float32))
  np.testing.assert_allclose(np.asarray(system.run()), np.sin(np.ones(3)), rtol=1e-6)


def test_eager_command_at_tiny_sizes() -> None:
  proc = _run("-m", "benchmarks.eager", "--tiny", "--threads", "1")
  assert proc.returncode == 0, proc.stderr[-3000:]
  import jaxops
  rows = proc.stdout.split("\n")[3:]
  for name in jaxops.__all__:  # every public function has a row, timed eagerly and under jit
    assert any(r.startswith(name) and len(r.split()) >= 5 for r in rows), (name, proc.stdout)


def _fault_probe(mode: str, env: dict[str, str]) -> tuple[str, int]:
  """In a fresh process whose environment has no glibc malloc settings but ``env``: after
  ``steady_malloc(mode)``, the page faults per malloc/memset/free of a 32 MiB block."""
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
  child = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
  child.update(env)
  proc = subprocess.run([sys.executable, "-c", code, mode], cwd=ROOT, capture_output=True,
                        text=True, timeout=120, check=False, env=child)
  assert proc.returncode == 0, proc.stderr
  said, faults = proc.stdout.split("|")
  return said.strip(), int(faults)


def test_steady_malloc_keeps_freed_memory() -> None:
  # A freed 32 MiB block (8192 pages) is reused without page faults under --malloc steady's
  # settings and under the environment variables the README gives users (STEADY_ENV); with
  # glibc's defaults it is given back and faulted in again. Each probe runs in a child process
  # whose environment is controlled here, so the caller's MALLOC_* settings change nothing.
  if sys.platform != "linux":
    pytest.skip("glibc's mallopt is Linux-only")  # never on CI (Linux)
  said, faults = _fault_probe("steady", {})
  assert said.startswith("steady") and faults < 100, (said, faults)
  said, faults = _fault_probe("default", {})
  assert said == "glibc default" and faults > 4000, (said, faults)
  said, faults = _fault_probe("default", STEADY_ENV)
  assert said.startswith("glibc, from the environment: MALLOC_ARENA_MAX=1") and faults < 100, (
      said, faults)


def test_malloc_env_lists_only_glibc_settings() -> None:
  env = {"MALLOC_ARENA_MAX": "2", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "PATH": "/bin"}
  assert malloc_env(env) == {"MALLOC_ARENA_MAX": "2", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
  assert set(STEADY_ENV) <= set(MALLOC_ENV)


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
  _harness.measure(case, reps=2, runs=3, settle_s=0.0)
  # Block 0 runs a, b, floor; block 1 starts one later: b, floor, a. Each 3 + 1 times.
  assert calls == ["a"] * 4 + ["b"] * 4 + ["floor"] * 4 + ["b"] * 4 + ["floor"] * 4 + ["a"] * 4
  assert [s.samples for s in (*case.systems, case.floor)] == [6, 6, 6]


def test_measure_settles_each_system_for_settle_s_before_timing_it() -> None:
  """Untimed runs until settle_s has passed since the system's first run of the block (PyTorch's
  spinning workers from the system before go to sleep meanwhile), then runs timed ones."""
  calls: list[tuple[str, float]] = []

  def system(name: str) -> _harness.System:
    def run() -> None:
      calls.append((name, time.perf_counter()))
      time.sleep(0.002)
    return _harness.System(name, run)

  case = _harness.Case("G", "n", "fwd", "cpu", "1 float32", 8, [system("a"), system("b")], [],
                       system("floor"), 0.0, 0.0)
  _harness.measure(case, reps=1, runs=2, settle_s=0.03)
  names = [n for n, _ in calls]
  for name in ("a", "b", "floor"):
    mine = [t for n, t in calls if n == name]
    assert names[names.index(name):][:len(mine)] == [name] * len(mine)  # back to back
    assert 2 + 1 <= len(mine) <= 2 + 16  # at least one untimed run, then 2 timed
    assert mine[-2] - mine[0] >= 0.029  # the timed runs start after settle_s (t0 < mine[0])
  assert [s.samples for s in (*case.systems, case.floor)] == [2, 2, 2]


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


def test_headline_table_and_readme_update(tmp_path: Path) -> None:
  from benchmarks import _report
  from benchmarks.run import README_END, README_START, update_readme

  def row(label: str, ratio: float, peer: str, **extra: Any) -> dict[str, Any]:
    return {"label": label, "device": "cpu", "ratio_best_agreeing_peer": ratio,
            "best_agreeing_peer": peer, "ratio_best_peer": ratio, "best_peer": peer, **extra}

  rows = [row("Resize linear x2 fwd", 0.5, "torch",
              steady={"ratio_best_agreeing_peer": 0.4, "best_agreeing_peer": "torch"}),
          row("GlobalAveragePool 2d fwd", 1.5, "torch",
              sync={"ratio_best_agreeing_peer": 0.7, "best_agreeing_peer": "torch"}),
          {"label": "Resize linear x0.25 antialias bwd", "device": "cpu",
           "ratio_best_agreeing_peer": None, "best_agreeing_peer": None,
           "ratio_best_peer": 0.35, "best_peer": "torch"}]
  table = _report.headline_table(rows)
  lines = table.split("\n")
  assert lines[0] == ("| work | forward | backward | forward, steady malloc | backward, "
                      "steady malloc |")
  # A pass without a row here (e.g. not selected with --only) is left empty.
  assert "| Resize linear 2x, 8x3x256x256 | 0.50 vs torch |  | 0.40 vs torch |  |" in lines
  assert ("| GlobalAveragePool, 8x512x7x7 | 1.50 vs torch (sync dispatch: 0.70 vs torch) |  | — "
          "|  |") in lines
  assert any("no peer agrees (0.35 vs torch, differs)" in x for x in lines)
  readme = tmp_path / "README.md"
  readme.write_text(f"intro\n{README_START}\nold\n{README_END}\nrest\n")
  meta = {"command": "python -m benchmarks.run ", "date": "D", "cpu": "C", "threads": 2,
          "load": "L", "malloc": "glibc default", "jax_dispatch": "async (JAX default)"}
  assert update_readme(readme, table, meta)
  text = readme.read_text()
  assert text.startswith(
      f"intro\n{README_START}\nMeasured by `python -m benchmarks.run` on D") and "old" not in text
  assert text.endswith(f"{table}\n{README_END}\nrest\n")
  readme.write_text("no markers\n")
  assert not update_readme(readme, table, meta) and readme.read_text() == "no markers\n"


def test_grid_sample_parts_command_at_tiny_sizes() -> None:
  proc = _run("-m", "benchmarks.grid_sample_parts", "--tiny", "--threads", "1", "--blocks", "1",
              "--runs", "1")
  assert proc.returncode == 0, proc.stderr
  rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "ms" not in line]
  assert [r.split(" | ")[0][2:] for r in rows] == [
      "torch forward + backward", "jaxops jax.grad (x, grid)", "jaxops jax.grad, x alone",
      "jaxops jax.grad, grid alone", "XLA scatter-add of the x cotangent"]


def test_ort_spinning_command_at_tiny_sizes() -> None:
  proc = _run("-m", "benchmarks.ort_spinning", "--tiny", "--runs", "1")
  assert proc.returncode == 0, proc.stderr
  rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "ms" not in line]
  assert [r.split(" | ")[0][2:] for r in rows] == [
      "MaxPool 3x3 s2 p1", "MaxPool 3x3x3 s2 p1", "AveragePool 3x3 d2 p2",
      "GridSample bilinear zeros"]
  assert all(len(r.split(" | ")) == 6 for r in rows)


def test_torch_survey_command_at_tiny_sizes() -> None:
  # two cases only (every case at tiny sizes takes about 20 s of the suite's time)
  proc = _run("-m", "benchmarks.torch_survey", "--tiny", "--threads", "1", "--only",
              "adaptive_avg_pool2d")
  assert proc.returncode == 0, proc.stderr
  rows = proc.stdout.splitlines()[1:]
  assert [r[:52].strip() for r in rows] == ["adaptive_avg_pool2d 64 -> 7",
                                            "adaptive_avg_pool2d 64 -> 1"]
  assert all(len(r.split(" = ")) == 3 for r in rows) and not any("differ" in r for r in rows)
