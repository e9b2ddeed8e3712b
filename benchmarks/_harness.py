"""The measuring method shared by every benchmark case.

A *case* is one piece of work (an op, a configuration, a pass, a device) and the *systems* that
can do it: jaxops and its peers. Each system is a zero-argument callable that runs the work once,
synchronised (JAX: ``block_until_ready``; torch CUDA: ``torch.cuda.synchronize``), and returns
its output. The method, applied to every case in the same way:

1. Warm-up: each system is built (JAX: lowered and compiled, the time reported as compile time;
   onnxruntime: the session is built once) and run once; outputs are compared with jaxops'
   (or, where jaxops cannot run the case, with the first peer's). A peer that disagrees keeps
   its row and gets a label.
2. Timing: ``reps`` blocks; in each block every system, and the memory floor, runs ``runs``
   times back to back after untimed runs: at least one, and as many as fit in ``settle_s``
   seconds (``python -m benchmarks.run --settle-ms``), so that the worker threads of the system
   timed before it, which may spin-wait for work after their last call (PyTorch's OpenMP
   workers do for about 8 ms here), are asleep and do not take a core from it. Systems are
   interleaved block by block (the order rotates), so slow drifts of a shared machine hit all
   of them alike. The median over all kept runs is reported. On a GPU a run is
   ``GPU_PIPELINE`` calls enqueued back to back and waited for once (``_timed``), so that a
   row times the device, not the host round trip of a synchronised call.
3. Memory floor: a jitted ``x + 1`` over uint8 that reads as many bytes as the op must read and
   writes as many as it must write (``floor_system``), on the same device, timed in the same
   blocks.
4. Counters that do not depend on the machine's load, recorded beside each time: the process's
   minor page faults per timed call (``getrusage``: every thread of the process, so XLA's and
   PyTorch's workers count too), and for JAX systems the bytes each call allocates (output +
   temporaries, from XLA's compiled memory analysis) and its largest single block. On glibc a
   block of 32 MiB or more is mapped afresh and faulted in page by page on every call under the
   default allocator settings (the page faults column shows it).
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass
class System:
  """One implementation of a case's work.

  Attributes:
    name: "jaxops", "onnxruntime", "torch", "jax.image", "flax", "numpy", ...
    run: runs the work once, synchronised, and returns the output.
    compile_s: JAX lower+compile time, or onnxruntime session build time; None where there is none.
    note: a label written before any run: where the peer's semantics differ from the case's.
    view: maps the output to the case's layout for the agreement check only (e.g. NHWC -> NCHW);
      it is not timed.
    peer: False for a reference that is not a peer (e.g. the plain XLA op that jaxops' program
      is made of): timed and shown, never the "best peer" of a ratio.
    launch, sync: on a GPU, ``launch()`` enqueues the work without waiting and ``sync(out)`` waits
      for it; the timing then enqueues ``GPU_PIPELINE`` calls back to back and waits once, so a
      row measures the device's time rather than one host round trip per call.
  """

  name: str
  run: Callable[[], Any]
  compile_s: float | None = None
  note: str = ""
  launch: Callable[[], Any] | None = None
  sync: Callable[[Any], Any] | None = None
  view: Callable[[Any], Any] | None = None
  agreement: str = ""
  agrees: bool | None = None
  median_s: float | None = None
  samples: int = 0
  faults: float | None = None
  alloc_bytes: int | None = None
  largest_block: int | None = None
  peer: bool = True


@dataclasses.dataclass
class Case:
  """One row of the results: the work, its byte count, and the systems that do it."""

  group: str
  name: str
  pass_: str
  device: str
  input: str
  bytes_moved: int
  systems: list[System]
  missing: list[tuple[str, str]]
  floor: System
  rtol: float
  atol: float

  @property
  def label(self) -> str:
    dev = "" if self.device == "cpu" else f" [{self.device}]"
    return f"{self.group} {self.name} {self.pass_}{dev}"

  def system(self, name: str) -> System | None:
    return next((s for s in self.systems if s.name == name), None)

  def best_peer(self, *, agreeing: bool = False) -> System | None:
    """The fastest peer (that agrees with jaxops' output, if ``agreeing``), or None."""
    peers = [s for s in self.systems if s.name != "jaxops" and s.peer
             and s.median_s is not None and (s.agrees or not agreeing)]
    return min(peers, key=lambda s: s.median_s or np.inf) if peers else None


# XLA options every JAX system (jaxops and the JAX peers alike) is compiled with, as a user passes
# them to ``jax.jit(...).lower(...).compile(compiler_options)``: empty (XLA's defaults) unless
# ``python -m benchmarks.run --xla-scheduler memory`` sets MEMORY_SCHEDULER.
COMPILER_OPTIONS: dict[str, Any] = {}
# XLA's memory-optimized instruction scheduler for the CPU, in place of its default
# (concurrency-optimized) one.
MEMORY_SCHEDULER = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


class Builder:
  """Collects the systems of one case; a system that cannot be built is listed as missing."""

  def __init__(self, device: Any, x: np.ndarray):
    self.device = device
    self.input = f"{'x'.join(map(str, x.shape))} {x.dtype}"
    self.systems: list[System] = []
    self.missing: list[tuple[str, str]] = []

  def add(self, name: str, factory: Callable[[], System | None], *, note: str = "",
          peer: bool = True) -> None:
    """Build a system with ``factory()``; record why where it raises or returns None."""
    try:
      system = factory()
    except Exception as e:  # noqa: BLE001 - a peer that cannot do the work is reported, not fatal
      self.missing.append((name, _first_line(e)))
      return
    if system is None:
      self.missing.append((name, note or "cannot do this work"))
      return
    system.name = name
    system.peer = peer
    if note and not system.note:
      system.note = note
    self.systems.append(system)

  def skip(self, name: str, reason: str) -> None:
    self.missing.append((name, reason))

  def jax(self, fn: Callable[..., Any], *args: Any, note: str = "") -> System:
    """A jitted JAX system on this builder's device, compiled with ``COMPILER_OPTIONS``;
    compile time measured separately."""
    args = tuple(jax.device_put(a, self.device) for a in args)
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile(dict(COMPILER_OPTIONS) or None)
    compile_s = time.perf_counter() - t0

    def run() -> Any:
      return jax.block_until_ready(compiled(*args))

    alloc, largest = allocation(compiled)
    return System("", run, compile_s=compile_s, note=note, alloc_bytes=alloc,
                  largest_block=largest, launch=lambda: compiled(*args),
                  sync=jax.block_until_ready)


def allocation(compiled: Any) -> tuple[int | None, int | None]:
  """(bytes a call of ``compiled`` allocates: output + temporaries, its largest block).

  From XLA's memory analysis and buffer assignment: parameters and constants are not allocated
  per call. (None, None) where the backend does not say.
  """
  try:
    ma = compiled.memory_analysis()
    total = int(ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes)
  except Exception:  # noqa: BLE001 - an optional counter
    return None, None
  try:
    blocks = [a.get(2, 0) for a in _buffer_allocations(ma.serialized_buffer_assignment_proto)
              if not a.get(5) and not a.get(12)]  # not an entry parameter, not a constant
  except Exception:  # noqa: BLE001
    blocks = []
  return total, (max(blocks) if blocks else None)


def _buffer_allocations(proto: bytes) -> list[dict[int, int]]:
  """The integer fields of each ``BufferAllocationProto`` in a serialised
  ``BufferAssignmentProto`` (field 3): 2 size, 5 is_entry_computation_parameter, 12 is_constant.
  A minimal protobuf wire-format reader, so that no XLA proto module is needed."""
  out = []
  for field, wire, value in _wire_fields(proto):
    if field == 3 and wire == 2:
      out.append({f: v for f, w, v in _wire_fields(value) if w == 0})
  return out


def _wire_fields(buf: bytes) -> list[tuple[int, int, Any]]:
  def varint(i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
      b = buf[i]
      i += 1
      v |= (b & 0x7F) << shift
      shift += 7
      if b < 0x80:
        return v, i

  fields, i = [], 0
  while i < len(buf):
    key, i = varint(i)
    field, wire = key >> 3, key & 7
    value: Any
    if wire == 0:
      value, i = varint(i)
    elif wire == 2:
      n, i = varint(i)
      value, i = buf[i:i + n], i + n
    elif wire in (1, 5):
      n = 8 if wire == 1 else 4
      value, i = buf[i:i + n], i + n
    else:
      raise ValueError(f"wire type {wire}")
    fields.append((field, wire, value))
  return fields


GPU_BATCH = 8


@dataclasses.dataclass(frozen=True)
class Context:
  """What every case builder needs: device ("cpu"/"gpu"), sizes, threads, a seeded RNG."""

  device: str
  tiny: bool
  threads: int
  seed: int = 0

  def rng(self) -> np.random.Generator:
    return np.random.default_rng(self.seed)

  def sized(self, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A case's full-size input shape here: the batch is GPU_BATCH times larger on a GPU, where
    the CPU sizes would take tens of microseconds and time the launch, not the op."""
    return (shape[0] * GPU_BATCH,) + shape[1:] if self.device == "gpu" else shape

  def jax_device(self) -> Any:
    import jax
    return jax.devices("cpu" if self.device == "cpu" else "gpu")[0]


@dataclasses.dataclass(frozen=True)
class Spec:
  """A case before it is built: ``build(ctx)`` returns its systems, the bytes the op must read
  and write (forward: input, output; backward: input, gradient), and the output dtype."""

  group: str
  name: str
  pass_: str
  build: Callable[[Context], tuple[Builder, tuple[int, int], Any]]

  @property
  def label(self) -> str:
    return f"{self.group} {self.name} {self.pass_}"


def make_case(spec: Spec, ctx: Context) -> Case:
  """Build the systems of ``spec`` on ``ctx``'s device, and the memory floor beside them."""
  b, (read, write), dtype = spec.build(ctx)
  rtol, atol = tolerance(dtype)
  return Case(spec.group, spec.name, spec.pass_, ctx.device, b.input, read + write, b.systems,
              b.missing, floor_system(read, write, ctx.jax_device()), rtol, atol)


def _first_line(e: BaseException) -> str:
  text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
  return text if len(text) <= 120 else text[:117] + "..."


_FLOORS: dict[tuple[int, int, str], Any] = {}


def floor_system(read: int, write: int, device: Any) -> System:
  """The memory floor: ``x + 1`` over uint8 that reads ``read`` bytes and writes ``write``.

  Reading more than it writes, it keeps every k-th byte (k = read // write < 64 in every case
  here, so every cache line is still read); writing more, it repeats each byte k = write // read
  times. Matching the op's input and output sizes (not only their sum) matters on the CPU, where
  a fresh output buffer over ~32 MB is mapped anew on every call and its page faults are part of
  any op's time. The executable is kept per (read, write, device).
  """
  read, write = max(read, 1), max(write, 1)
  if write <= read:
    k = read // write
    x = np.zeros(write * k, np.uint8)

    def f(a: jax.Array) -> jax.Array:
      return a.reshape(write, k)[:, 0] + jnp.uint8(1)
  else:
    k = write // read
    x = np.zeros(read, np.uint8)

    def f(a: jax.Array) -> jax.Array:
      return jnp.broadcast_to(a[:, None], (read, k)).reshape(read * k) + jnp.uint8(1)

  xd = jax.device_put(x, device)
  key = (read, write, str(device))
  if key not in _FLOORS:
    _FLOORS[key] = jax.jit(f).lower(xd).compile()
  compiled = _FLOORS[key]

  def run() -> Any:
    return jax.block_until_ready(compiled(xd))

  return System("copy floor", run, launch=lambda: compiled(xd), sync=jax.block_until_ready)


def device_copy_gbps(device: Any, nbytes: int = 1 << 30, calls: int = 20) -> float:
  """The device's copy bandwidth in GB/s, bytes read plus bytes written: the median over
  ``calls`` of a jitted float32 ``x + 1`` over ``nbytes`` (1 GiB: far past any cache), enqueued
  back to back and waited for once per call batch of five."""
  x = jax.device_put(np.zeros(nbytes // 4, np.float32), device)
  f = jax.jit(lambda a: a + 1.0).lower(x).compile()
  jax.block_until_ready(f(x))
  times = []
  for _ in range(calls):
    t0 = time.perf_counter()
    out = [f(x) for _ in range(5)]
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / 5)
  return 2 * nbytes / float(np.median(times)) / 1e9


def to_f64(out: Any) -> np.ndarray:
  """Any system's output (jax, torch, numpy, ml_dtypes) as a float64 NumPy array on the host; a
  tuple of outputs (the gradients of a backward case) flattened and concatenated in order."""
  if isinstance(out, (tuple, list)):
    return np.concatenate([to_f64(o).ravel() for o in out])
  if hasattr(out, "detach"):  # torch
    import torch
    out = out.detach().to("cpu")
    return (out.to(torch.float64) if out.dtype.is_floating_point else out).numpy().astype(
        np.float64)
  return np.asarray(out).astype(np.float64)


def compare(ref: Any, out: Any, rtol: float, atol: float) -> tuple[bool, str]:
  """(agrees, text): NaNs must sit at the same places; elsewhere |a-b| <= atol + rtol*max|ref|."""
  a, b = to_f64(ref), to_f64(out)
  if a.shape != b.shape:
    return False, f"shape {b.shape} vs {a.shape}"
  nan_a, nan_b = np.isnan(a), np.isnan(b)
  if (nan_a != nan_b).any():
    return False, f"NaN differs at {int((nan_a != nan_b).sum())} places"
  with np.errstate(invalid="ignore"):
    d = np.where((a == b) | nan_a, 0.0, np.abs(a - b))
  finite = np.abs(a[np.isfinite(a)])
  scale = float(finite.max()) if finite.size else 0.0
  maxd = float(d.max()) if d.size else 0.0
  ok = maxd <= atol + rtol * scale
  return ok, ("agrees" if ok else "DIFFERS") + f" (max|d| {maxd:.2g})"


def check(case: Case) -> None:
  """Warm every system up once and label its agreement with jaxops (or the first system); a
  system that raises is taken out of the case and listed as missing, with its error."""
  outs = {}
  for s in list(case.systems):
    try:
      outs[s.name] = (s.view or _identity)(s.run())
    except Exception as e:  # noqa: BLE001 - e.g. out of device memory: report, go on
      case.systems.remove(s)
      case.missing.append((s.name, f"failed when run: {_first_line(e)}"))
  case.floor.run()
  if not outs:
    return
  ref_name = "jaxops" if "jaxops" in outs else case.systems[0].name
  for s in case.systems:
    if s.name == ref_name:
      s.agrees, s.agreement = True, "reference"
      continue
    s.agrees, s.agreement = compare(outs[ref_name], outs[s.name], case.rtol, case.atol)
    if ref_name != "jaxops":
      s.agreement += f" vs {ref_name}"


def grad_of_sum_of_squares(f: Callable[..., jax.Array]) -> Callable[..., Any]:
  """``x, *rest -> jax.grad(sum(f(x, *rest) ** 2))(x, *rest)``: the backward rows' work (forward
  included), the gradient with respect to the first argument."""
  return jax.grad(lambda x, *rest: jnp.sum(jnp.square(f(x, *rest))))


def _identity(x: Any) -> Any:
  return x


def minor_faults() -> int:
  """Minor page faults of this process so far (all threads)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


GPU_PIPELINE = 10


def _timed(s: System, gpu: bool) -> float:
  """Seconds per call of ``s``: one synchronised call, or on a GPU (where the system can be
  launched without waiting) ``GPU_PIPELINE`` calls enqueued back to back and waited for once."""
  if gpu and s.launch is not None and s.sync is not None:
    t0 = time.perf_counter()
    outs = [s.launch() for _ in range(GPU_PIPELINE)]
    s.sync(outs)
    return (time.perf_counter() - t0) / GPU_PIPELINE
  t0 = time.perf_counter()
  s.run()
  return time.perf_counter() - t0


def measure(case: Case, reps: int, runs: int, settle_s: float) -> None:
  """Interleaved blocks: ``reps`` blocks; in each, per system, untimed runs (at least one, and
  until ``settle_s`` seconds have passed: runs, not a pause, since an idle JAX worker thread
  goes cold and its next call is slower) and then ``runs`` timed runs.

  Each system's median time, and its mean minor page faults per kept run. On a GPU each run is
  a pipeline of ``GPU_PIPELINE`` calls (see ``_timed``)."""
  gpu = case.device != "cpu"
  systems: Sequence[System] = [*case.systems, case.floor]
  samples: dict[int, list[float]] = {id(s): [] for s in systems}
  faults: dict[int, list[int]] = {id(s): [] for s in systems}
  for block in range(reps):
    k = block % len(systems)
    for s in [*systems[k:], *systems[:k]]:
      t0 = time.perf_counter()
      _timed(s, gpu)
      while time.perf_counter() - t0 < settle_s:
        _timed(s, gpu)
      for _ in range(runs):
        f0 = minor_faults()
        dt = _timed(s, gpu)
        df = minor_faults() - f0
        samples[id(s)].append(dt)
        faults[id(s)].append(df)
  for s in systems:
    s.median_s = float(np.median(samples[id(s)]))
    s.faults = float(np.mean(faults[id(s)]))
    s.samples = len(samples[id(s)])


TOLERANCES: dict[str, tuple[float, float]] = {
    # output dtype -> (rtol relative to max|ref|, atol)
    "float64": (1e-9, 0.0),
    "float32": (1e-4, 1e-6),
    "float16": (2e-3, 0.0),
    "bfloat16": (1.6e-2, 0.0),
    "uint8": (0.0, 1.0),
    "int8": (0.0, 1.0),
}


def tolerance(dtype: Any) -> tuple[float, float]:
  """(rtol, atol) for comparing outputs of ``dtype``: exact for types not in TOLERANCES."""
  return TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))
