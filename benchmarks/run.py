"""Time jaxops against onnxruntime, PyTorch, jax.image, Flax and NumPy, in one process.

Usage::

  python -m benchmarks.run                       # everything; writes benchmarks/RESULTS.md + PNG
  python -m benchmarks.run --only resize,cast    # cases whose label contains one of the words
  python -m benchmarks.run --reps 3 --threads 4 --json out/bench.json
  python benchmarks/run.py --list                # the case labels, nothing run

On a machine with a CUDA GPU (jax with CUDA and/or torch with CUDA) the same cases also run on
the GPU against torch CUDA and jax.image, with the device's copy bandwidth measured in the same
run. The method is in ``benchmarks/_harness.py`` and in RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

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
                 help="timed runs per system per block, after one dropped run (default 5)")
  p.add_argument("--threads", type=int, default=2,
                 help="CPU threads for every system: the process is pinned to this many CPUs, "
                      "torch.set_num_threads, onnxruntime intra-op threads (default 2)")
  p.add_argument("--json", type=Path, default=None, help="also write the raw results here")
  p.add_argument("--out", type=Path, default=HERE,
                 help="folder for RESULTS.md, ratios.png and results-<device>.json (default: "
                      "benchmarks/); RESULTS.md shows the latest run on each device found there")
  p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                 help="auto: CPU, plus GPU when one is present (default)")
  p.add_argument("--malloc", choices=("steady", "default"), default="steady",
                 help="steady: glibc keeps freed memory for the next call (one arena, no mmap, "
                      "no trimming below 1 GiB), set before jax or torch start, so no system "
                      "faults its outputs in again on every call; default: glibc as it is "
                      "(default: steady; see steady_malloc)")
  p.add_argument("--sync-dispatch", action="store_true",
                 help="run JAX programs on the calling thread (jax_cpu_enable_async_dispatch "
                      "off). Default: JAX's default, async dispatch, which hands every program "
                      "of 1000 or more flops to a worker thread; on tiny cases that handoff, not "
                      "the computation, is most of the time")
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

  from benchmarks import _harness, _report, cast_cases, pool_cases, resample_cases, resize_cases

  specs = [*resize_cases.SPECS, *pool_cases.SPECS, *cast_cases.SPECS, *resample_cases.SPECS]
  words = [w.strip().lower() for w in args.only.split(",") if w.strip()]
  if words:
    specs = [s for s in specs if any(w in s.label.lower() for w in words)]
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
  results = []
  for device in devices[args.device]:
    ctx = _harness.Context(device, args.tiny, args.threads)
    for spec in specs:
      case = _harness.make_case(spec, ctx)
      if case.systems:
        _harness.check(case)
        _harness.measure(case, args.reps, args.runs)
      r = _report.result(case)
      del case  # frees the inputs and compiled executables before the next case
      print(_report.case_text(r), flush=True)
      results.append(r)
  if args.device == "cpu" and gpu:
    gpu_reason = "Not run: --device cpu was given."
  meta = _report.machine(args.threads, argv, gpu)
  meta["malloc"] = malloc
  meta["jax_dispatch"] = "sync (calling thread)" if args.sync_dispatch else "async (JAX default)"
  _report.write(meta, results, devices[args.device], args.out, args.reps, args.runs, gpu_reason,
                args.json)
  print()
  for device in devices[args.device]:
    rows = [r for r in results if r["device"] == device]
    print(f"{device.upper()} (jaxops / best peer; < 1: jaxops faster)")
    print(_report.summary_table(rows))
  print(f"\nwrote {args.out / 'RESULTS.md'} and {args.out / 'ratios.png'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
