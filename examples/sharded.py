"""jaxops past one device: jit on arrays sharded with NamedSharding, no communication needed.

JAX's SPMD partitioner splits a jitted computation over a device mesh according to the
shardings of its inputs. jaxops ops are plain JAX (gathers, weighted sums, reduce_window,
convert_element_type) that treat each (batch, channel) plane independently, so a batch- or
channel-sharded input runs with every device working on its own slice and no collective
(all-gather, all-to-all, ...) in the compiled program. The results equal the one-device run;
XLA compiles the smaller per-device program on its own, so the float32 sums inside resize may
round differently in the last bit (then visible after the cast to bfloat16 as one bfloat16 ulp).

On a CPU-only machine this script asks XLA for 8 host devices (set ``XLA_FLAGS`` yourself to
override); on GPU/TPU it uses the devices there are.

  python examples/sharded.py
"""

from __future__ import annotations

import os

# Must happen before jax initialises its CPU backend.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxops  # noqa: E402

COLLECTIVES = r"\b(all-gather|all-to-all|all-reduce|collective-permute|reduce-scatter)\b"


@jax.jit
def pipeline(x: jax.Array) -> jax.Array:
  """NCHW float32 -> 2x cubic upsample -> 3x3/2 average pool -> bfloat16 (ONNX semantics)."""
  y = jaxops.resize(x, scales=(1.0, 1.0, 2.0, 2.0), mode="cubic")
  y = jaxops.average_pool(y, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
  return jaxops.cast(y, "BFLOAT16")


def main(argv: list[str] | None = None) -> dict[str, list[str]]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--size", type=int, default=64, help="image height and width")
  args = parser.parse_args(argv)
  devices = np.array(jax.devices())
  n = len(devices)
  x = np.random.default_rng(0).standard_normal((2 * n, n, args.size, args.size), np.float32)
  print(f"{n} {devices[0].platform} devices; input {x.shape} float32 (NCHW)")
  reference = np.asarray(pipeline(x).astype(jnp.float32))       # on one device

  found: dict[str, list[str]] = {}
  for name, mesh, spec in (("batch", Mesh(devices, ("b",)), P("b")),
                           ("channel", Mesh(devices, ("c",)), P(None, "c")),
                           ("batch x channel", Mesh(devices.reshape(-1, 2) if n % 2 == 0
                                                    else devices.reshape(-1, 1), ("b", "c")),
                            P("b", "c"))):
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    out = pipeline(xs)
    hlo = pipeline.lower(xs).compile().as_text()
    found[name] = sorted(set(re.findall(COLLECTIVES, hlo)))
    shard = out.addressable_shards[0].data.shape
    diff = float(np.max(np.abs(np.asarray(out.astype(jnp.float32)) - reference)))
    agree = "bitwise equal" if diff == 0 else f"max |diff| {diff:.2g} (last-bit rounding)"
    print(f"  {name} sharding {spec}: out {out.shape} {out.dtype} sharded {out.sharding.spec}, "
          f"{shard} per device\n    vs the one-device result: {agree}; collectives in the "
          f"compiled HLO: {', '.join(found[name]) or 'none'}")
  return found


if __name__ == "__main__":
  main()
