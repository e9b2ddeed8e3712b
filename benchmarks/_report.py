"""Results: plain records, the stdout tables, RESULTS.md, the ratio chart and the JSON dump."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._harness import GPU_BATCH, GPU_PIPELINE, Case
from benchmarks.run import SETTLE_MS

PACKAGES = ("jax", "jaxlib", "numpy", "ml_dtypes", "onnx", "onnxruntime", "torch", "flax",
            "matplotlib")


def result(case: Case) -> dict[str, Any]:
  """A measured case as a plain record (the arrays the systems hold can then be freed)."""
  systems = [{"name": s.name, "median_s": s.median_s, "compile_s": s.compile_s,
              "agrees": s.agrees, "agreement": s.agreement, "note": s.note,
              "samples": s.samples, "faults": s.faults, "alloc_bytes": s.alloc_bytes,
              "largest_block": s.largest_block, "peer": s.peer} for s in case.systems]
  jaxops = case.system("jaxops")
  best = case.best_peer()
  same = case.best_peer(agreeing=True) if jaxops else None
  t = jaxops.median_s if jaxops else None
  floor = case.floor.median_s
  ref = next((s for s in case.systems if not s.peer and s.median_s), None)
  return {
      "group": case.group, "name": case.name, "pass": case.pass_, "device": case.device,
      "label": case.label, "input": case.input, "bytes_moved": case.bytes_moved, "floor_s": floor,
      "systems": systems, "missing": [{"name": n, "reason": r} for n, r in case.missing],
      "jaxops_s": t, "jaxops_compile_s": jaxops.compile_s if jaxops else None,
      "best_peer": best.name if best else None,
      "best_peer_s": best.median_s if best else None,
      "best_peer_agrees": bool(best.agrees) if best else None,
      "ratio_best_peer": t / best.median_s if t and best and best.median_s else None,
      "best_agreeing_peer": same.name if same else None,
      "ratio_best_agreeing_peer": t / same.median_s if t and same and same.median_s else None,
      "ratio_floor": t / floor if t and floor else None,
      "jaxops_gbps": case.bytes_moved / t / 1e9 if t else None,
      "copy_gbps": case.bytes_moved / floor / 1e9 if floor else None,
      "jaxops_faults": jaxops.faults if jaxops else None,
      "peer_faults": same.faults if same else None,
      "jaxops_alloc_bytes": jaxops.alloc_bytes if jaxops else None,
      "jaxops_largest_block": jaxops.largest_block if jaxops else None,
      "reference": ref.name if ref else None,
      "ratio_reference": t / ref.median_s if t and ref and ref.median_s else None,
  }


EXTRA_KEYS = ("jaxops_s", "best_agreeing_peer", "ratio_best_agreeing_peer", "jaxops_faults",
              "peer_faults", "jaxops_largest_block")


def attach(results: Sequence[dict[str, Any]], name: str,
           extra: Sequence[dict[str, Any]]) -> None:
  """Adds ``r[name]`` (time, agreeing peer, ratio, faults) from the extra run's row of the same
  label to each CPU row of ``results`` that has one."""
  by_label = {e["label"]: e for e in extra if e["device"] == "cpu"}
  for r in results:
    e = by_label.get(r["label"]) if r["device"] == "cpu" else None
    if e is not None:
      r[name] = {k: e.get(k) for k in EXTRA_KEYS}


def _ms(s: float | None) -> str:
  return "—" if s is None else f"{s * 1e3:.3g}"


def _x(r: float | None) -> str:
  return "—" if r is None else f"{r:.2f}"


def _gb(r: float | None) -> str:
  return "—" if r is None else f"{r:.3g}"


def _n(v: float | None) -> str:
  return "—" if v is None else f"{v:.0f}"


def _mb(v: int | None) -> str:
  return "—" if v is None else f"{v / 2**20:.3g}"


def _extra_ratio(r: dict[str, Any], name: str) -> str:
  e = r.get(name)
  if not e or e["ratio_best_agreeing_peer"] is None:
    return "—"
  return f"{_x(e['ratio_best_agreeing_peer'])} ({e['best_agreeing_peer']})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(r) + " |" for r in rows]
  return "\n".join(lines)


def summary_table(results: Sequence[dict[str, Any]], device_copy_gbps: float | None = None) -> str:
  """One row per case: jaxops, the best peer, the ratio, the memory floor, bandwidths, the
  allocation counters, and the ratio with the steady allocator where an extra run gave one.
  With ``device_copy_gbps`` (a GPU run), jaxops' bandwidth as a share of the device's."""
  rows = []
  steady = any("steady" in r for r in results)
  refs = any(r.get("reference") for r in results)
  for r in results:
    best = "—"
    if r["best_peer"]:
      best = f"{r['best_peer']} {_ms(r['best_peer_s'])}"
      if not r["best_peer_agrees"]:
        best += " (differs)"
    same = "—"
    if r["best_agreeing_peer"]:
      same = f"{_x(r['ratio_best_agreeing_peer'])} ({r['best_agreeing_peer']})"
    row = [r["label"], r["input"], _ms(r["jaxops_s"]), best, _x(r["ratio_best_peer"]), same,
           _n(r.get("jaxops_faults")), _n(r.get("peer_faults")),
           _mb(r.get("jaxops_alloc_bytes")), _mb(r.get("jaxops_largest_block"))]
    if steady:
      row.append(_extra_ratio(r, "steady"))
    if refs:
      row.append(f"{_x(r['ratio_reference'])} ({r['reference']})" if r.get("reference") else "—")
    row += [_ms(r["floor_s"]), _x(r["ratio_floor"]), _gb(r["jaxops_gbps"]),
            _gb(r["copy_gbps"]), _ms(r["jaxops_compile_s"])]
    if device_copy_gbps:
      share = r["jaxops_gbps"] / device_copy_gbps if r["jaxops_gbps"] else None
      row.append(f"{share:.0%}" if share is not None else "—")
    rows.append(row)
  header = ["case", "input", "jaxops ms", "best peer ms", "jaxops / best peer",
            "jaxops / best agreeing peer", "jaxops faults / call",
            "agreeing peer faults / call", "jaxops MiB / call", "jaxops largest block MiB"]
  if steady:
    header.append("jaxops / best agreeing peer, steady malloc")
  if refs:
    header.append("jaxops / reference (not a peer)")
  header += ["copy floor ms", "jaxops / floor", "jaxops GB/s", "copy GB/s", "jaxops compile ms"]
  if device_copy_gbps:
    header.append("jaxops GB/s / device copy GB/s")
  return _table(header, rows)


# The README's headline rows: (work, forward case label, backward case label or None).
HEADLINE = (
    ("Resize linear 2x, 8x3x256x256", "Resize linear x2 fwd", "Resize linear x2 bwd"),
    ("Resize cubic 2x", "Resize cubic x2 fwd", "Resize cubic x2 bwd"),
    ("Resize nearest 2x", "Resize nearest x2 fwd", "Resize nearest x2 bwd"),
    ("Resize linear 56->98, 4x64x56x56", "Resize linear 56->98 (sizes) fwd",
     "Resize linear 56->98 (sizes) bwd"),
    ("Resize linear 256->224, 8x3x256x256", "Resize linear 256->224 (sizes) fwd",
     "Resize linear 256->224 (sizes) bwd"),
    ("Resize linear antialias 1/4x, 8x3x512x512", "Resize linear x0.25 antialias fwd",
     "Resize linear x0.25 antialias bwd"),
    ("Resize cubic antialias 1/4x", "Resize cubic x0.25 antialias fwd",
     "Resize cubic x0.25 antialias bwd"),
    ("AveragePool 3x3 s2 p1, 8x64x112x112", "AveragePool 2d k3 s2 p1 fwd",
     "AveragePool 2d k3 s2 p1 bwd"),
    ("AveragePool 2x2 s2, 8x128x56x56", "AveragePool 2d k2 s2 fwd", "AveragePool 2d k2 s2 bwd"),
    ("AveragePool 3x3x3 s1 p1, 2x16x32^3", "AveragePool 3d k3 s1 p1 fwd",
     "AveragePool 3d k3 s1 p1 bwd"),
    ("GlobalAveragePool, 8x512x7x7", "GlobalAveragePool 2d fwd", "GlobalAveragePool 2d bwd"),
    ("Cast float32 -> bfloat16, 16M", "Cast float32->bfloat16 fwd", None),
    ("Cast float32 -> float16, 16M", "Cast float32->float16 fwd", None),
    ("Cast float32 -> float8e4m3fn, 16M", "Cast float32->float8e4m3fn fwd", None),
    ("MaxPool 3x3 s2 p1, 8x64x112x112", "MaxPool max 2d k3 s2 p1 fwd",
     "MaxPool max 2d k3 s2 p1 bwd"),
    ("MaxPool 2x2 s2, 8x128x56x56", "MaxPool max 2d k2 s2 fwd", "MaxPool max 2d k2 s2 bwd"),
    ("MaxPool 3x3x3 s2 p1, 2x16x32^3", "MaxPool max 3d k3 s2 p1 fwd",
     "MaxPool max 3d k3 s2 p1 bwd"),
    ("MaxPool 3x3 s2 p1 with Indices", "MaxPool max 2d k3 s2 p1 indices fwd", None),
    ("MaxUnpool 2x2 s2, to 8x128x56x56", "MaxUnpool 2d k2 s2 fwd", "MaxUnpool 2d k2 s2 bwd"),
    ("LpPool p=2 3x3 s2, 8x64x112x112", "LpPool p2 2d k3 s2 fwd", "LpPool p2 2d k3 s2 bwd"),
    ("GridSample bilinear zeros, 8x32x128x128", "GridSample bilinear zeros 2d fwd",
     "GridSample bilinear zeros 2d bwd"),
    ("GridSample bicubic border", "GridSample bicubic border 2d fwd",
     "GridSample bicubic border 2d bwd"),
    ("GridSample trilinear zeros, 2x16x32x64x64", "GridSample trilinear zeros 3d fwd",
     "GridSample trilinear zeros 3d bwd"),
    ("AffineGrid + GridSample (theta)", "AffineGrid+GridSample 2d bilinear theta fwd",
     "AffineGrid+GridSample 2d bilinear theta bwd"),
    ("RoiAlign 7x7 sampling_ratio 2, 512 boxes", "RoiAlign avg 7x7 sampling_ratio 2 fwd", None),
    ("RoiAlign 7x7 sampling_ratio 0 (adaptive)", "RoiAlign avg 7x7 sampling_ratio 0 fwd", None),
    ("RoiAlign max 7x7 sampling_ratio 2 (ONNX front end)", "RoiAlign max 7x7 sampling_ratio 2 fwd",
     None),
)

# The jaxops.torch rows: (work, forward label, backward label or None); their table also shows
# each call against the jaxops operator it maps to.
TORCH_HEADLINE = tuple(
    (name, f"jaxops.torch {name} fwd",
     None if name.endswith("return_indices") else f"jaxops.torch {name} bwd")
    for name in ("interpolate bilinear x2", "interpolate bicubic x2.5", "interpolate nearest x2",
                 "avg_pool2d k3 s2 p1", "adaptive_avg_pool2d 14->7", "max_pool2d k3 s2 p1",
                 "max_pool2d k3 s2 p1 return_indices", "lp_pool2d p2 k3 s2",
                 "max_unpool2d k2 s2", "adaptive_max_pool2d 14->7", "grid_sample bilinear zeros",
                 "affine_grid+grid_sample", "roi_align 7x7 sampling_ratio 2 aligned"))


def _cell(r: dict[str, Any] | None, extra: str | None = None) -> str:
  """"0.69 vs torch" (jaxops / fastest agreeing peer), from the main run or an extra run."""
  if r is None:
    return ""
  e = r if extra is None else r.get(extra)
  if not e:
    return "—"
  if e.get("ratio_best_agreeing_peer") is not None:
    return f"{_x(e['ratio_best_agreeing_peer'])} vs {e['best_agreeing_peer']}"
  if extra is None and r.get("ratio_best_peer") is not None:
    return f"no peer agrees ({_x(r['ratio_best_peer'])} vs {r['best_peer']}, differs)"
  return "—"


def headline_table(results: Sequence[dict[str, Any]]) -> str:
  """The README's headline table: jaxops / fastest agreeing peer per row and pass, glibc's
  default allocator first, then the steady allocator (extra run), GlobalAveragePool's forward
  also with synchronous dispatch."""
  by_label = {r["label"]: r for r in results if r["device"] == "cpu"}
  rows = []
  for work, fwd, bwd in HEADLINE:
    f, b = by_label.get(fwd), by_label.get(bwd) if bwd else None
    if f is None and b is None:
      continue
    cell_f = _cell(f)
    if f is not None and f.get("sync"):
      cell_f += f" (sync dispatch: {_cell(f, 'sync')})"
    rows.append([work, cell_f, _cell(b) if bwd else "", _cell(f, "steady") if f else "",
                 _cell(b, "steady") if b else ""])
  return _table(["work", "forward", "backward", "forward, steady malloc",
                 "backward, steady malloc"], rows)


def _over_operator(r: dict[str, Any] | None) -> str:
  if r is None:
    return ""
  if r.get("ratio_reference") is None:
    return "—"
  return f"{_x(r['ratio_reference'])}"


def torch_headline_table(results: Sequence[dict[str, Any]]) -> str:
  """The README's jaxops.torch table: each call against the fastest agreeing peer (torch), and
  against the jaxops operator it maps to (the namespace's overhead), forward and backward."""
  by_label = {r["label"]: r for r in results if r["device"] == "cpu"}
  rows = []
  for work, fwd, bwd in TORCH_HEADLINE:
    f, b = by_label.get(fwd), by_label.get(bwd) if bwd else None
    if f is None and b is None:
      continue
    rows.append([f"`{work}`", _cell(f), _over_operator(f), _cell(b) if bwd else "",
                 _over_operator(b) if bwd else ""])
  return _table(["jaxops.torch call", "forward", "forward / operator", "backward",
                 "backward / operator"], rows)


def extra_table(results: Sequence[dict[str, Any]], name: str) -> str:
  """The rows an extra run measured: the main run's ratio beside the extra run's."""
  rows = []
  for r in results:
    e = r.get(name)
    if not e:
      continue
    rows.append([r["label"], _ms(r["jaxops_s"]),
                 f"{_x(r['ratio_best_agreeing_peer'])} ({r['best_agreeing_peer']})",
                 _n(r.get("jaxops_faults")), _mb(r.get("jaxops_largest_block")),
                 _ms(e["jaxops_s"]), _extra_ratio(r, name), _n(e["jaxops_faults"]),
                 _mb(e.get("jaxops_largest_block"))])
  return _table(["case", "jaxops ms, main run", "jaxops / best agreeing peer, main run",
                 "jaxops faults / call, main run", "jaxops largest block MiB, main run",
                 f"jaxops ms, {name}", f"jaxops / best agreeing peer, {name}",
                 f"jaxops faults / call, {name}", f"jaxops largest block MiB, {name}"], rows)


def detail_table(results: Sequence[dict[str, Any]]) -> str:
  """Every system of every case: median, compile/setup time, agreement with jaxops, label."""
  rows = []
  for r in results:
    t = r["jaxops_s"]
    for s in r["systems"]:
      vs = _x(s["median_s"] / t) if t and s["median_s"] else "—"
      rows.append([r["label"], s["name"], _ms(s["median_s"]), _ms(s["compile_s"]), vs,
                   _n(s.get("faults")), _mb(s.get("alloc_bytes")), s["agreement"], s["note"]])
    for m in r["missing"]:
      rows.append([r["label"], m["name"], *["—"] * 5, "not run", m["reason"]])
  return _table(["case", "system", "median ms", "compile/setup ms", "time / jaxops",
                 "faults / call", "MiB / call (JAX)", "agreement", "label"], rows)


def case_text(r: dict[str, Any]) -> str:
  """The lines printed on stdout as soon as a case is measured."""
  lines = [f"== {r['label']}  ({r['input']}; copy floor {_ms(r['floor_s'])} ms, "
           f"{r['bytes_moved'] / 1e6:.3g} MB)"]
  for s in r["systems"]:
    extra = f"  [{s['note']}]" if s["note"] else ""
    comp = f"  compile/setup {_ms(s['compile_s'])} ms" if s["compile_s"] is not None else ""
    lines.append(f"   {s['name']:<12} {_ms(s['median_s']):>9} ms{comp}  {s['agreement']}{extra}")
  for m in r["missing"]:
    lines.append(f"   {m['name']:<12} {'—':>9}     not run: {m['reason']}")
  return "\n".join(lines)


def _git_commit() -> str:
  try:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent, timeout=10, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=Path(__file__).parent, timeout=10,
                           check=False)
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
  except OSError:
    return "unknown"


def _cpu_model() -> str:
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def machine(threads: int, argv: Sequence[str], gpu: str | None) -> dict[str, Any]:
  """Where and how the run happened: machine, versions, threads, date, command."""
  versions = {}
  for p in PACKAGES:
    try:
      versions[p] = importlib.metadata.version(p)
    except importlib.metadata.PackageNotFoundError:
      versions[p] = "not installed"
  import jaxops
  versions["jaxops"] = f"{jaxops.__version__} @ {_git_commit()}"
  affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  return {
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      "command": "python -m benchmarks.run " + " ".join(argv),
      "platform": platform.platform(), "cpu": _cpu_model(), "logical_cpus": os.cpu_count(),
      "cpus_used": affinity, "threads": threads, "python": sys.version.split()[0],
      "versions": versions, "gpu": gpu,
      "load": " / ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?",
  }


def chart(results: Sequence[dict[str, Any]], path: Path) -> None:
  """Horizontal bars of jaxops time / best peer time, log scale; < 1 means jaxops is faster."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = [r for r in results if r["ratio_best_peer"]]
  fig, ax = plt.subplots(figsize=(9, 0.32 * max(len(rows), 1) + 1.6))
  colors = {"Resize": "tab:blue", "AveragePool": "tab:orange", "GlobalAveragePool": "tab:green",
            "Cast": "tab:purple"}
  labels = [f"{r['label']} (vs {r['best_peer']}{'' if r['best_peer_agrees'] else ', differs'})"
            for r in rows]
  bars = ax.barh(range(len(rows)), [r["ratio_best_peer"] for r in rows],
                 color=[colors.get(r["group"], "tab:gray") for r in rows])
  ax.set_yticks(range(len(rows)), labels, fontsize=7)
  ax.invert_yaxis()
  ax.set_xscale("log")
  ax.axvline(1.0, color="black", linewidth=0.8)
  ax.set_xlabel("jaxops time / best peer time (log; < 1: jaxops faster)")
  ax.bar_label(bars, labels=[f"{r['ratio_best_peer']:.2f}" for r in rows], fontsize=7, padding=2)
  ax.set_title("jaxops against the fastest peer")
  if not rows:
    ax.text(0.5, 0.5, "no case had both jaxops and a peer", ha="center", transform=ax.transAxes)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


METHOD = """\
Each case is built once (JAX: lowered and compiled, reported as compile time; onnxruntime: one
session, CPU execution provider, intra-op threads = --threads, spinning off, IO binding), run once
to warm up and to check every peer's output against jaxops' (the tolerance depends on the output
dtype; a peer whose semantics differ keeps its row, labelled). Then --reps blocks: in each block
every system, and the copy floor, runs untimed (at least once, and for --settle-ms
milliseconds, {settle_ms:g} unless the command line says otherwise) and then --runs times timed,
back to back; systems are interleaved block by block (rotating order). Medians are reported. JAX
results are synchronised with `block_until_ready`, torch CUDA with `torch.cuda.synchronize`; on
a GPU one timed run is {gpu_pipeline} calls enqueued back to back and waited for once (the time
per call is the device's, not one host round trip per call), for every system alike. Backward rows
time the gradient of sum(op(x) ** 2) with respect to x, forward included: `jax.grad` under jit
for jaxops, jax.image and flax; `torch.autograd.grad` of the same loss for torch.
The copy floor is a jitted `x + 1` over uint8 that reads as many bytes as the op must read and
writes as many as it must write (forward: input, output; backward: input, gradient), on the same
device and in the same blocks: the time to move those bytes once. GB/s columns are those bytes
(read + write) over the median time.
On a GPU the resize and pool inputs have a batch {gpu_batch} times larger than on the CPU.
The process is pinned to --threads CPUs (sched_setaffinity), which sizes XLA's CPU thread pool;
torch uses torch.set_num_threads(--threads).
The main table is what a user who changes nothing gets: glibc's allocator as it starts (unless
the environment of `make bench` sets MALLOC_* variables; the run lines below say) and JAX's
default, asynchronous, CPU dispatch. Under glibc's defaults a block of 32 MiB or more is mapped
afresh on every call and faulted in page by page (4 KiB each), and per-thread arenas give freed
heap memory back to the OS; the "faults / call" columns count the minor page faults of the whole
process during each timed call (getrusage), and "MiB / call" and "largest block" are what XLA
allocates per call (output + temporaries, from its compiled memory analysis; XLA on the CPU
allocates all of a call's temporaries as one block). Both counters do not depend on the load.
The "steady malloc" column comes from the same cases run again in a child process started with
`MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824` (one arena, no mmap,
no trimming below 1 GiB: freed memory is kept for the next call, as onnxruntime's arena and the
GPU caching allocators do); the setting applies to every system in that process alike.
`--malloc steady` sets the same with mallopt in the main process; `--no-extras` skips the
child runs.
Some rows also time the plain XLA op that a JAX user would write without jaxops, as a
reference that is never a peer: `x.astype(dtype)` (after a clip where ONNX saturates) for the
casts, `jnp.mean` over H and W on the same NCHW input for GlobalAveragePool. jaxops' bfloat16
and float16 casts are that same single XLA convert, so "jaxops / reference" near 1 with a
ratio to PyTorch above 1 is XLA's convert kernel (and allocation), not jaxops; likewise
GlobalAveragePool's backward against flax, which pools channels-last, where the gradient's
broadcast runs along the long contiguous axis instead of ONNX's 7x7 minor axes.
The jaxops.torch rows time the `jaxops.torch` call (the row's jaxops) beside the jaxops operator
it maps to (the reference, not a peer): "jaxops / reference" is the namespace's overhead.
JAX programs are dispatched as JAX does by default (asynchronously: a program of 1000 flops or
more runs on a worker thread, and each timed call waits for it). The GlobalAveragePool cases
also run in a child process with `--sync-dispatch` (`jax.config.update(
"jax_cpu_enable_async_dispatch", False)`: programs run on the calling thread), in their own
table. The backward cases also run in a child process with `--xla-scheduler memory` (every JAX
system compiled with XLA's memory-optimized instruction scheduler instead of its default,
concurrency-optimized one), in their own table.
PyTorch runs with its default OpenMP policy, whose worker threads spin-wait after each call
(about 8 ms on the project's machine): on a 2-core machine they take a core from whatever runs
next in the process, every JAX system alike (the JAX copy floor included). The untimed runs of
--settle-ms let them go to sleep before the next system's timed runs, as they would in a
program that does not call PyTorch between its JAX calls; a program that does gets slower JAX
calls for those milliseconds unless `OMP_WAIT_POLICY=PASSIVE` is in its environment
(docs/PERFORMANCE.md, "Runtimes that spin")."""


DEVICES = (("cpu", "CPU"), ("gpu", "GPU"))


def _run_lines(run: dict[str, Any]) -> list[str]:
  """Where and how one device's table was measured."""
  meta = run["machine"]
  v = meta["versions"]
  return [
      f"- written by `{meta['command']}` on {meta['date']}; {run['reps']} blocks of "
      f"{run['runs']} + 1 runs per system",
      f"- {meta['cpu']}, {meta['logical_cpus']} logical CPUs, {meta['cpus_used']} used; "
      f"{meta['platform']}; Python {meta['python']}; GPU: {meta['gpu'] or 'none'}",
      f"- threads: {meta['threads']} (XLA CPU pool via CPU affinity, torch, onnxruntime intra-op); "
      f"malloc: {meta.get('malloc', 'glibc default')}; JAX CPU dispatch: "
      f"{meta.get('jax_dispatch', 'async (JAX default)')}; XLA CPU scheduler: "
      f"{meta.get('xla_scheduler', 'XLA default')}",
      f"- load average (1/5/15 min) at the end of the run: {meta['load']} (a busy machine "
      "inflates every time, most of all torch's OpenMP regions on tiny inputs)",
      "- versions: " + ", ".join(f"{k} {v[k]}" for k in v),
      *([f"- device copy bandwidth: {meta['device_copy_gbps']:.0f} GB/s (bytes read + written by "
         "a jitted float32 `x + 1` over 1 GiB, median of 20 batches of 5 calls); the last "
         "column is each row's jaxops GB/s (the bytes the op must move / its time) against it"]
        if meta.get("device_copy_gbps") else []),
  ]


def _extra_lines(run: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[str]:
  """The extra runs' settings and the synchronous-dispatch table, where they ran."""
  extras = run["machine"].get("extras") or {}
  lines = []
  if extras.get("steady"):
    m = extras["steady"]
    env = " ".join(f"{k}={v}" for k, v in m.get("environment", {}).items())
    lines += ["", f"The steady malloc column: the same cases in a child process started with "
              f"`{env}` (malloc: {m.get('malloc')}); load average at its end: {m.get('load')}."]
  if extras.get("sync"):
    m = extras["sync"]
    lines += _extra_section(
        "synchronous JAX dispatch", rows, "sync",
        "The cases below again, in a child process with `--sync-dispatch` "
        f"(JAX CPU dispatch: {m.get('jax_dispatch')}; malloc: {m.get('malloc')}; load "
        f"average at its end: {m.get('load')}). A user gets this with "
        "`jax.config.update(\"jax_cpu_enable_async_dispatch\", False)` before the first "
        "computation.")
  if extras.get("memsched"):
    m = extras["memsched"]
    lines += _extra_section(
        "XLA's memory-optimized scheduler", rows, "memsched",
        "The backward cases again, in a child process with `--xla-scheduler memory` "
        "(every JAX system, jaxops and the JAX peers alike, compiled with XLA's "
        f"memory-optimized instruction scheduler; malloc: {m.get('malloc')}; load average "
        f"at its end: {m.get('load')}). XLA's default CPU scheduler orders a program for "
        "concurrency and keeps more temporaries alive at once: a larger block, mapped and "
        "faulted in afresh on every call once it passes glibc's 32 MiB threshold. A user "
        "gets this with `jax.jit(f, compiler_options={\"xla_cpu_scheduler_type\": "
        "\"CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED\"})` (or the same option in `XLA_FLAGS`).")
  return lines


def _extra_section(title: str, rows: Sequence[dict[str, Any]], name: str, intro: str) -> list[str]:
  """An extra run's section of RESULTS.md: its heading, what it ran, its table."""
  return ["", f"### CPU: {title}", "", intro, "", extra_table(rows, name)]


def markdown(runs: dict[str, dict[str, Any]], gpu_reason: str) -> str:
  """The whole of RESULTS.md, from the latest run on each device (``runs[device]``)."""
  parts = [
      "# jaxops benchmarks",
      "",
      "Written by `python -m benchmarks.run` (`make bench`); do not edit by hand. Each device's "
      "table comes from the latest run on that device (kept in results-<device>.json beside "
      "this file), so a run on a CUDA machine with `--device gpu` adds the GPU table and keeps "
      "the CPU one.",
      "",
      "## Method",
      "",
      METHOD.format(gpu_batch=GPU_BATCH, gpu_pipeline=GPU_PIPELINE, settle_ms=SETTLE_MS),
  ]
  for dev, title in DEVICES:
    parts += ["", f"## {title}", ""]
    if dev not in runs:
      parts.append(gpu_reason if dev == "gpu" else "Not run (--device gpu).")
      continue
    rows = runs[dev]["results"]
    parts += [
        *_run_lines(runs[dev]),
        "",
        "Ratios are jaxops time / peer time (< 1: jaxops faster). \"best peer\" is the fastest "
        "peer that ran, marked \"(differs)\" where its output is not jaxops' (see the labels "
        "below); \"best agreeing peer\" is the fastest whose output agrees with jaxops'.",
        "",
        summary_table(rows, runs[dev]["machine"].get("device_copy_gbps")),
        *_extra_lines(runs[dev], rows),
        *(["", "### CPU: the README's headline", "", headline_table(rows), "",
           torch_headline_table(rows)] if dev == "cpu" else []),
        "",
        f"### {title}: every system",
        "",
        detail_table(rows),
    ]
  parts += ["", "## Chart", "", "![jaxops / best peer](ratios.png)", ""]
  return "\n".join(parts)


def write(meta: dict[str, Any], results: Sequence[dict[str, Any]], devices: Sequence[str],
          out_dir: Path, reps: int, runs: int, gpu_reason: str, json_path: Path | None) -> None:
  """Save this run's results per device, then RESULTS.md and ratios.png from the latest run on
  every device found in ``out_dir``; the raw records of this run also to ``json_path``."""
  out_dir.mkdir(parents=True, exist_ok=True)
  for dev in devices:
    record = {"machine": meta, "reps": reps, "runs": runs,
              "results": [r for r in results if r["device"] == dev]}
    (out_dir / f"results-{dev}.json").write_text(json.dumps(record, indent=1) + "\n")
  latest = {dev: json.loads((out_dir / f"results-{dev}.json").read_text())
            for dev, _ in DEVICES if (out_dir / f"results-{dev}.json").exists()}
  chart([r for run in latest.values() for r in run["results"]], out_dir / "ratios.png")
  (out_dir / "RESULTS.md").write_text(markdown(latest, gpu_reason))
  if json_path is not None:
    json_path.write_text(json.dumps({"machine": meta, "reps": reps, "runs": runs,
                                     "results": list(results)}, indent=1))
