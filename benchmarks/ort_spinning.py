"""onnxruntime with its default session options against the benchmark's, beside jaxops.

Usage::

  python -m benchmarks.ort_spinning              # the benchmark's shapes
  python -m benchmarks.ort_spinning --tiny       # a smoke test at small shapes

``make bench`` runs onnxruntime with spinning off (``session.intra_op.allow_spinning = 0``):
with spinning on, its worker threads keep polling for work after each run, which on a 2-core
machine takes time from the other systems timed in the same process. A user who changes nothing
gets spinning on, and then a sub-millisecond operator run back to back is faster, as its threads
never go to sleep. This times a few of the benchmark's onnxruntime rows three ways, each system
in its own phase of one process (a pause after the spinning phase, so that its threads are
asleep when jaxops runs), three rounds (medians): jaxops (jitted, default dispatch),
onnxruntime as the benchmark configures it, and onnxruntime with default session options (2
intra-op threads in both). Nothing is asserted and nothing is written; docs/PERFORMANCE.md
quotes a run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _session(op: str, attrs: dict[str, Any], inputs: dict[str, np.ndarray],
             spinning: bool) -> Callable[[], Any]:
  import onnxruntime as ort
  from onnx import TensorProto, helper
  node = helper.make_node(op, list(inputs), ["y"], **attrs)
  infos = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
           for k, v in inputs.items()]
  graph = helper.make_graph([node], "g", infos,
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
  so = ort.SessionOptions()
  so.intra_op_num_threads = 2
  if not spinning:
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
  sess = ort.InferenceSession(model.SerializeToString(), so,
                              providers=["CPUExecutionProvider"])
  return lambda: sess.run(None, inputs)


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
  fn()
  times = []
  for _ in range(runs):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return float(np.median(times) * 1e3)


def main(argv: Sequence[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="python -m benchmarks.ort_spinning",
                              description=__doc__.split("\n")[0])
  p.add_argument("--tiny", action="store_true", help="small shapes (a smoke test)")
  p.add_argument("--runs", type=int, default=30, help="timed runs per phase (default 30)")
  args = p.parse_args(argv)
  import jax
  import jax.numpy as jnp

  import jaxops
  rng = np.random.default_rng(0)
  t = args.tiny

  def arr(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)

  x2 = arr(1, 2, 9, 9) if t else arr(8, 64, 112, 112)
  x3 = arr(1, 2, 6, 6, 6) if t else arr(2, 16, 32, 32, 32)
  xd = arr(1, 2, 9, 9) if t else arr(8, 64, 56, 56)
  xg = arr(1, 2, 5, 5) if t else arr(8, 32, 128, 128)
  gg = rng.uniform(-1.1, 1.1, (1, 4, 4, 2) if t else (8, 128, 128, 2)).astype(np.float32)
  cases = [
      ("MaxPool 3x3 s2 p1", lambda a: jaxops.max_pool(a, (3, 3), strides=(2, 2),
                                                      pads=(1, 1, 1, 1)),
       "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4), {"x": x2}),
      ("MaxPool 3x3x3 s2 p1", lambda a: jaxops.max_pool(a, (3, 3, 3), strides=(2, 2, 2),
                                                        pads=(1,) * 6),
       "MaxPool", dict(kernel_shape=[3] * 3, strides=[2] * 3, pads=[1] * 6), {"x": x3}),
      ("AveragePool 3x3 d2 p2", lambda a: jaxops.average_pool(
          a, (3, 3), strides=(1, 1), pads=(2, 2, 2, 2), dilations=(2, 2)),
       "AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[2] * 4, dilations=[2, 2]),
       {"x": xd}),
      ("GridSample bilinear zeros", lambda a, g: jaxops.grid_sample(a, g),
       "GridSample", dict(mode="linear", padding_mode="zeros", align_corners=0),
       {"x": xg, "g": gg}),
  ]
  print("| case | jaxops ms | onnxruntime, benchmark (no spinning) ms | jaxops / it | "
        "onnxruntime, defaults (spinning) ms | jaxops / it |")
  print("|---|---|---|---|---|---|")
  for name, fn, op, attrs, inputs in cases:
    f = jax.jit(fn)
    operands = [jnp.asarray(v) for v in inputs.values()]
    quiet = _session(op, attrs, inputs, spinning=False)
    spin = _session(op, attrs, inputs, spinning=True)
    rounds = []
    for _ in range(3):
      rounds.append((_median_ms(lambda: f(*operands).block_until_ready(), args.runs),
                     _median_ms(quiet, args.runs), _median_ms(spin, args.runs)))
      time.sleep(0.5)  # let the spinning threads go to sleep before the next jaxops phase
    j, q, s = np.median(np.array(rounds), axis=0)
    print(f"| {name} | {j:.3f} | {q:.3f} | {j / q:.2f} | {s:.3f} | {j / s:.2f} |", flush=True)


if __name__ == "__main__":
  main()
