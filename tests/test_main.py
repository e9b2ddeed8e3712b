"""`python -m jaxops info | conformance`, run as a user would, in a subprocess (the case
counts in this process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("onnx")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, "-m", "jaxops", *args], capture_output=True, text=True,
                        timeout=300)


def test_info_lists_every_version_of_every_op():
  proc = _run("info")
  assert proc.returncode == 0, proc.stderr
  rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()
          if line[:1].isupper() and not line.startswith("ONNX")}
  # The versions ONNX defines (onnx 1.23.2), each starred when jaxops implements it.
  assert rows["Cast"] == [f"{v}*" for v in (1, 6, 9, 13, 19, 21, 23, 24, 25, 28)]
  assert rows["CastLike"] == [f"{v}*" for v in (15, 19, 21, 23, 24, 25)]
  assert rows["ConstantOfShape"] == [f"{v}*" for v in (9, 20, 21, 23, 24, 25)]
  assert rows["Resize"] == [f"{v}*" for v in (10, 11, 13, 18, 19)]
  assert rows["Upsample"] == ["1", "7*", "9*", "10*"]
  assert rows["AveragePool"] == [f"{v}*" for v in (1, 7, 10, 11, 19, 22)]
  assert rows["GlobalAveragePool"] == ["1*", "22*"]
  assert rows["MaxPool"] == [f"{v}*" for v in (1, 8, 10, 11, 12, 22)]
  assert rows["MaxUnpool"] == [f"{v}*" for v in (9, 11, 22)]
  assert rows["GlobalMaxPool"] == ["1*", "22*"]
  assert rows["LpPool"] == [f"{v}*" for v in (1, 2, 11, 18, 22)]
  assert rows["GlobalLpPool"] == ["1*", "2*", "22*"]
  import jaxops.torch
  names = proc.stdout.split("jaxops.torch (torch.nn.functional's names): ")[1].splitlines()[0]
  assert names.split(", ") == list(jaxops.torch.__all__)
  assert {"interpolate", "grid_sample", "roi_align", "pixel_shuffle"} <= set(names.split(", "))


def test_conformance_counts_and_exit_code(capsys):
  # In this process: collecting ONNX's node cases runs onnx's generators (10-20 s), and the
  # suite's workers have already collected them for test_onnx_conformance. The subprocess
  # entry point and its exit codes are checked by the other tests here.
  from jaxops.__main__ import main
  assert main(["conformance", "--only", "constantofshape", "globalaveragepool"]) == 0
  lines = [line.split() for line in capsys.readouterr().out.splitlines()]
  assert ["constantofshape", "3", "/", "3"] in lines
  assert ["globalaveragepool", "2", "/", "2"] in lines
  assert ["all", "5", "/", "5"] in lines


def test_conformance_rejects_unknown_op():
  proc = _run("conformance", "--only", "relu")
  assert proc.returncode == 2
  assert "--only takes" in proc.stderr and "'relu'" in proc.stderr
