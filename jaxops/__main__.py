"""``python -m jaxops info | conformance``.

info         a table of each operator and the opset versions jaxops implements
conformance  runs ONNX's node test cases through jaxops.onnx.Backend; passed/total per op
"""

from __future__ import annotations

import argparse
import sys


def _info() -> int:
  import jax
  import numpy as np

  import jaxops

  print(f"jaxops {jaxops.__version__}  (jax {jax.__version__}, numpy {np.__version__})")
  print(f"public functions: {', '.join(jaxops.__all__)}")
  import jaxops.torch
  print(f"jaxops.torch (torch.nn.functional's names): {', '.join(jaxops.torch.__all__)}")
  try:
    import onnx
    import onnx.defs

    from jaxops.onnx import _registry
  except ImportError:
    print("the onnx package is not installed (pip install 'jaxops[onnx]'): no ONNX front end")
    return 0
  have = _registry.supported()
  newest = onnx.defs.onnx_opset_version()
  print(f"onnx {onnx.__version__} (opsets up to {newest})\n")
  print(f"{'op':<18} {'ONNX versions (* = jaxops implements)':<60}")
  for op in _registry.OPERATORS:
    versions = sorted({onnx.defs.get_schema(op, v, "").since_version
                       for v in range(1, newest + 1) if _defined(op, v)})
    cells = " ".join(f"{v}{'*' if v in have.get(op, ()) else ''}" for v in versions)
    print(f"{op:<18} {cells}")
  return 0


def _defined(op: str, version: int) -> bool:
  import onnx.defs

  try:
    onnx.defs.get_schema(op, version, "")
  except onnx.defs.SchemaError:
    return False
  return True


def _conformance(only: list[str]) -> int:
  from jaxops.onnx import conformance

  # The op names come from the case-name prefixes: checking them needs no case (collecting
  # ONNX's cases takes seconds).
  known = sorted({conformance.op_of(p) for p in conformance.PREFIXES})
  unknown = sorted(set(only) - set(known))
  if unknown:
    print(f"python -m jaxops conformance: --only takes {known}; got {unknown}", file=sys.stderr)
    return 2
  total_p = total_n = 0
  print(f"{'op':<20} {'passed':>6} / total")
  for op, (p, n) in conformance.summary(only).items():
    print(f"{op:<20} {p:>6} / {n}")
    total_p, total_n = total_p + p, total_n + n
  print(f"{'all':<20} {total_p:>6} / {total_n}")
  return 0 if total_p == total_n else 1


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jaxops", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("command", choices=["info", "conformance"])
  parser.add_argument("--only", nargs="*", default=[],
                      help="conformance: only these ops (case-name prefixes, e.g. cast resize)")
  args = parser.parse_args(argv)
  return _info() if args.command == "info" else _conformance(args.only)


if __name__ == "__main__":
  sys.exit(main())
