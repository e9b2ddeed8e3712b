"""Time jaxops against onnxruntime, PyTorch, jax.image, Flax and NumPy, in one process.

Usage::

  python -m benchmarks.run                       # everything; writes benchmarks/RESULTS.md + PNG
  python -m benchmarks.run --only resize,cast    # cases whose label contains one of the words
  python -m benchmarks.run --reps 3 --threads 4 --json out/bench.json
  python -m benchmarks.run --no-extras           # the main table only (about half the time)
  python benchmarks/run.py --list                # the case labels, nothing run

The main table is measured as a user who changes nothing gets it: glibc's allocator defaults and
JAX's default (asynchronous) CPU dispatch. Then, unless --no-extras, the same cases run again in a
child process started with the allocator settings of STEADY_ENV (the README's advice), the
GlobalAveragePool cases once more with synchronous JAX dispatch, and the backward cases with XLA's
memory-optimized instruction scheduler (``--xla-scheduler memory``); they become an extra column
and two extra tables.

On a machine with a CUDA GPU (jax with CUDA and/or torch with CUDA) the same cases also run on
the GPU against torch CUDA and jax.image, with the device's copy bandwidth measured in the same
run. The method is in ``benchmarks/_harness.py`` and in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/run.py`: make the repository importable
  sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HERE = Path(__file__).resolve().parent


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
  p.add_argument("--only", default="",
                 help="comma-separated words; run the cases whose label (e.g. 'Resize cubic x2 "
                      "bwd', 'Cast float32->bfloat16 16M fwd') contains one, case-insensitively")
  p.add_argument("--reps", type=int, default=5, help="timing blocks per case (default 5)")
  p.add_argument("--runs", type=int, default=5,
                 help="timed runs per system per block, after the untimed ones (default 5)")
  p.add_argument("--settle-ms", type=float, default=SETTLE_MS,
                 help="untimed runs of each system in each block before its timed runs, at "
                      "least one and until this many milliseconds have passed, so that the "
                      "worker threads of the system timed before it are asleep (PyTorch's spin "
                      "for about 8 ms after a call on the project's machine); 0: one untimed "
                      "run (default %(default)g)")
  p.add_argument("--threads", type=int, default=2,
                 help="CPU threads for every system: the process is pinned to this many CPUs, "
                      "torch.set_num_threads, onnxruntime intra-op threads (default 2)")
  p.add_argument("--json", type=Path, default=None, help="also write the raw results here")
  p.add_argument("--out", type=Path, default=HERE,
                 help="folder for RESULTS.md, ratios.png and results-<device>.json (default: "
                      "benchmarks/); RESULTS.md shows the latest run on each device found there")
  p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                 help="auto: CPU, plus GPU when one is present (default)")
  p.add_argument("--malloc", choices=("default", "steady"), default="default",
                 help="default: glibc as it is, what a user who changes nothing gets (default); "
                      "steady: glibc keeps freed memory for the next call (one arena, no mmap, "
                      "no trimming below 1 GiB), set before jax or torch start, so no system "
                      "faults its outputs in again on every call (see steady_malloc)")
  p.add_argument("--no-extras", dest="extras", action="store_false",
                 help="skip the extra columns: the same cases in a child process with the "
                      "steady allocator settings from the environment (STEADY_ENV), the "
                      f"cases matching {SYNC_WORDS!r} with --sync-dispatch, and the backward "
                      "cases with --xla-scheduler memory")
  p.add_argument("--sync-dispatch", action="store_true",
                 help="run JAX programs on the calling thread (jax_cpu_enable_async_dispatch "
                      "off). Default: JAX's default, async dispatch, which hands every program "
                      "of 1000 or more flops to a worker thread; on tiny cases that handoff, not "
                      "the computation, is most of the time")
  p.add_argument("--xla-scheduler", choices=("default", "memory"), default="default",
                 help="default: XLA's CPU instruction scheduler as a user gets it (default); "
                      "memory: every JAX system compiled with XLA's memory-optimized scheduler "
                      "(compiler option xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"
                      "), which keeps fewer temporaries alive at once")
  p.add_argument("--exact", default="", help=argparse.SUPPRESS)  # "|"-separated labels (extras)
  p.add_argument("--tiny", action="store_true", help="tiny sizes (the smoke test)")
  p.add_argument("--list", action="store_true", help="print the selected case labels and exit")
  args = p.parse_args(argv)
  require_positive(p, args, ("reps", "runs", "threads"))
  return args


def require_positive(p: argparse.ArgumentParser, args: argparse.Namespace,
                     names: Sequence[str]) -> None:
  """Exit with a usage error unless each of the integer options ``names`` is at least 1."""
  for name in names:
    if getattr(args, name) < 1:
      p.error(f"--{name} must be at least 1; got {getattr(args, name)}")


def pin_threads(threads: int) -> None:
  """Pin the process to ``threads`` CPUs before jax starts: XLA sizes its CPU pool from this."""
  if hasattr(os, "sched_setaffinity"):
    cpus = sorted(os.sched_getaffinity(0))
    if threads < len(cpus):
      os.sched_setaffinity(0, cpus[:threads])


# glibc's mallopt parameters (malloc.h); values are C ints.
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
_KEEP_BYTES = 1 << 30
# The same settings as environment variables, read by glibc when a process starts: what the
# README tells users to set, and what the extra "steady" column is measured with.
STEADY_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0",
              "MALLOC_TRIM_THRESHOLD_": str(_KEEP_BYTES)}
# Every environment variable through which glibc's malloc can be tuned.
MALLOC_ENV = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_",
              "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_TEST", "GLIBC_TUNABLES")
# Milliseconds of untimed runs of each system in each block before its timed runs (--settle-ms).
SETTLE_MS = 20.0
# Cases measured again with synchronous JAX dispatch (an extra column).
SYNC_WORDS = "GlobalAveragePool"


def malloc_env(environ: dict[str, str] | None = None) -> dict[str, str]:
  """The glibc malloc settings present in ``environ`` (default: this process's environment)."""
  environ = os.environ if environ is None else environ
  return {k: environ[k] for k in MALLOC_ENV if k in environ}


def steady_malloc(mode: str) -> str:
  """Make glibc keep freed memory for reuse (``mode == "steady"``); says what was done.

  Must run before any thread starts. Why: XLA's CPU runtime (and PyTorch on the CPU) allocate
  each call's outputs and temporaries with malloc and free them after. By default glibc gives
  blocks of 32 MiB and more straight back to the OS (mmap/munmap), trims heaps whose free top
  grows past a threshold, and gives each thread its own arena; a block given back is faulted in
  again, page by page, on the next call. Which calls paid that was a lottery: Resize linear 2x
  took 16-18 ms with 6452 page faults per call in some processes and 5-7 ms with ~1500 in
  others; a 16M-element float32 -> bfloat16 cast 4 ms or 15-18 ms (8192 faults per call, its
  32 MiB output). onnxruntime (its own arena) and NumPy (huge pages) did not pay it. "steady"
  (one arena, no mmap, trimming only past 1 GiB) keeps freed memory for the next call, as
  onnxruntime's arena and the GPU caching allocators of JAX and PyTorch do, for every system in
  the process alike. "default" leaves glibc as it is.
  """
  if mode == "default":
    env = malloc_env()
    if env:
      return "glibc, from the environment: " + " ".join(f"{k}={v}" for k, v in env.items())
    return "glibc default"
  try:
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
  except OSError:
    return "not glibc: allocator default"
  done = [libc.mallopt(M_ARENA_MAX, 1), libc.mallopt(M_MMAP_MAX, 0),
          libc.mallopt(M_TRIM_THRESHOLD, _KEEP_BYTES)]
  if done != [1, 1, 1]:
    return f"mallopt refused ({done}): glibc default"
  return "steady (glibc: one arena, no mmap, trim past 1 GiB)"


def gpu_status() -> tuple[str | None, str]:
  """(GPU name or None, why there is no GPU table when there is none).

  The GPU table needs jax on a CUDA device (jaxops is what it measures); torch without CUDA
  only takes the torch rows out of it.
  """
  import jax
  import torch
  try:
    jax_gpu = jax.devices("gpu")
  except RuntimeError:
    jax_gpu = []
  if jax_gpu:
    return str(jax_gpu[0].device_kind), ""
  return None, ("Not run here: no CUDA GPU was visible to jax in this run (jax backend: "
                f"{jax.default_backend()}; torch.cuda.is_available() = "
                f"{torch.cuda.is_available()}). Run the same command on a CUDA machine (jax with "
                "CUDA, torch with CUDA) to add this table: jaxops against torch CUDA and "
                "jax.image/flax on the device, synchronised, with the device's copy bandwidth "
                "measured in the same run.")


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse(argv)
  pin_threads(args.threads)
  malloc = steady_malloc(args.malloc)
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave room for torch CUDA

  if args.sync_dispatch:
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)

  from benchmarks import (_harness, _report, cast_cases, pool_cases, resample_cases, resize_cases,
                          torch_cases)
  if args.xla_scheduler == "memory":
    _harness.COMPILER_OPTIONS.update(_harness.MEMORY_SCHEDULER)

  specs = [*resize_cases.SPECS, *pool_cases.SPECS, *cast_cases.SPECS, *resample_cases.SPECS,
           *torch_cases.SPECS]
  words = [w.strip().lower() for w in args.only.split(",") if w.strip()]
  if words:
    specs = [s for s in specs if any(w in s.label.lower() for w in words)]
  if args.exact:
    exact = set(args.exact.split("|"))
    specs = [s for s in specs if s.label in exact]
  if args.list:
    print("\n".join(s.label for s in specs))
    return 0
  if not specs:
    print(f"no case matches --only {args.only!r}; see --list", file=sys.stderr)
    return 2

  import torch
  torch.set_num_threads(args.threads)
  gpu, gpu_reason = gpu_status()
  if args.device == "gpu" and not gpu:
    print(gpu_reason, file=sys.stderr)
    return 2
  devices = {"auto": ["cpu"] + (["gpu"] if gpu else []), "cpu": ["cpu"], "gpu": ["gpu"]}
  if args.extras and "cpu" in devices[args.device]:
    print(f"main run: malloc {malloc}; the extra columns follow in child processes", flush=True)
  results = []
  for device in devices[args.device]:
    ctx = _harness.Context(device, args.tiny, args.threads)
    for spec in specs:
      case = _harness.make_case(spec, ctx)
      if case.systems:
        _harness.check(case)
        _harness.measure(case, args.reps, args.runs, args.settle_ms / 1e3)
      r = _report.result(case)
      del case  # frees the inputs and compiled executables before the next case
      print(_report.case_text(r), flush=True)
      results.append(r)
  if args.device == "cpu" and gpu:
    gpu_reason = "Not run: --device cpu was given."
  meta = _report.machine(args.threads, argv, gpu)
  meta["malloc"] = malloc
  meta["jax_dispatch"] = "sync (calling thread)" if args.sync_dispatch else "async (JAX default)"
  meta["xla_scheduler"] = ("memory-optimized (compiler option)" if args.xla_scheduler == "memory"
                           else "XLA default")
  if "gpu" in devices[args.device] and not args.tiny:
    meta["device_copy_gbps"] = _harness.device_copy_gbps(_harness.Context(
        "gpu", False, args.threads).jax_device())
  if args.extras and "cpu" in devices[args.device]:
    labels = [r["label"] for r in results if r["device"] == "cpu"]
    steady = extra_run(args, labels, STEADY_ENV, [])
    sync = extra_run(args, [x for x in labels if SYNC_WORDS.lower() in x.lower()],
                     {}, ["--sync-dispatch"])
    memsched = extra_run(args, [x for x in labels if x.endswith(" bwd")], {},
                         ["--xla-scheduler", "memory"])
    meta["extras"] = {"steady": steady["meta"], "sync": sync["meta"],
                      "memsched": memsched["meta"]}
    _report.attach(results, "steady", steady["results"])
    _report.attach(results, "sync", sync["results"])
    _report.attach(results, "memsched", memsched["results"])
  _report.write(meta, results, devices[args.device], args.out, args.reps, args.runs, gpu_reason,
                args.json)
  print()
  for device in devices[args.device]:
    rows = [r for r in results if r["device"] == device]
    print(f"{device.upper()} (jaxops / best peer; < 1: jaxops faster)")
    print(_report.summary_table(rows, meta.get("device_copy_gbps") if device == "gpu" else None))
  print(f"\nwrote {args.out / 'RESULTS.md'} and {args.out / 'ratios.png'}")
  cpu_rows = [r for r in results if r["device"] == "cpu"]
  if cpu_rows:
    headline = _report.headline_table(cpu_rows)
    torch_rows = _report.torch_headline_table(cpu_rows)
    if torch_rows.count("\n") > 1:
      headline += ("\n\nThe `jaxops.torch` calls against torch (the fastest agreeing peer) and "
                   "against the jaxops operator each maps to (its overhead):\n\n" + torch_rows)
    print("\nREADME headline (jaxops / fastest agreeing peer)\n" + headline)
    full = not words and not args.exact and not args.tiny and args.extras
    if full and args.out.resolve() == HERE and args.malloc == "default":
      readme = HERE.parent / "README.md"
      if update_readme(readme, headline, meta):
        print(f"updated the headline table in {readme}")
  return 0


README_START = "<!-- bench:headline:start (written by python -m benchmarks.run) -->"
README_END = "<!-- bench:headline:end -->"


def update_readme(readme: Path, table: str, meta: dict[str, Any]) -> bool:
  """Replace the text between README_START and README_END in ``readme`` with ``table`` and the
  line that says where it was measured; False (nothing written) where the markers are missing."""
  if not readme.exists():
    return False
  text = readme.read_text()
  a, b = text.find(README_START), text.find(README_END)
  if a < 0 or b < a:
    return False
  where = (f"Measured by `{meta['command'].strip()}` on {meta['date']}: {meta['cpu']}, "
           f"{meta['threads']} threads, load average {meta['load']} at the end, malloc: "
           f"{meta['malloc']}, JAX CPU dispatch: {meta['jax_dispatch']}.")
  body = f"{README_START}\n{where}\n\n{table}\n"
  readme.write_text(text[:a] + body + text[b:])
  return True


def extra_run(args: argparse.Namespace, labels: Sequence[str], env: dict[str, str],
              flags: Sequence[str]) -> dict[str, Any]:
  """Run the cases ``labels`` (CPU) in a child process with ``env`` added to a copy of this
  environment whose glibc malloc settings are removed first, and ``flags``; its JSON record."""
  import subprocess
  import tempfile
  if not labels:
    return {"meta": None, "results": []}
  child_env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
  child_env.update(env)
  with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp)
    cmd = [sys.executable, "-m", "benchmarks.run", "--no-extras", "--device", "cpu",
           "--exact", "|".join(labels), "--reps", str(args.reps), "--runs", str(args.runs),
           "--settle-ms", str(args.settle_ms), "--threads", str(args.threads),
           "--out", str(out / "out"), "--json", str(out / "r.json"),
           *(["--tiny"] if args.tiny else []), *flags]
    what = " ".join([*(f"{k}={v}" for k, v in env.items()), *flags])
    print(f"\nextra run ({what}): {len(labels)} cases", flush=True)
    proc = subprocess.run(cmd, env=child_env, cwd=HERE.parent, check=False)
    if proc.returncode != 0:
      raise SystemExit(f"the extra run ({what}) failed with exit status {proc.returncode}")
    record = json.loads((out / "r.json").read_text())
  meta = record["machine"]
  meta["environment"] = env
  return {"meta": meta, "results": record["results"]}


if __name__ == "__main__":
  sys.exit(main())
