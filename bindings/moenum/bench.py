"""`moenum bench`: the benchmark drivers of bench/, run from a source checkout (an editable install).

--cpu: the smoke run's wall time, the reference GEMM beside Eigen's fp64 GEMM, and MXFP8 quantize
throughput beside numpy and ml_dtypes. --gpu: the grouped GEMM engines beside torch._grouped_mm
(scripts/gpu-check.sh build bench). --gpu --layer: gpu.grouped's whole layer forward+backward, eager
and replayed from a CUDA graph, beside the torch.grouped_mm adapter's autograd layer on the same
routing, and the MXFP8 quantize kernel beside a device copy (scripts/gpu-check.sh build layer). Figures worth keeping go to bench/RESULTS.md by hand, with the
command, the machine and the date.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .errors import EnvironmentFailure, ScenarioError

DRIVERS = ("bench/cpu-bench.sh", "bench/bench_mx_quantize.py", "scripts/gpu-check.sh")


def source_root() -> Path:
    """The checkout this package is imported from (an editable install); an installed wheel has no
    bench drivers (they build C++ drivers from the sources), so it says where to get them."""
    root = Path(__file__).resolve().parents[2]
    if not all((root / d).is_file() for d in DRIVERS):
        raise EnvironmentFailure("moenum bench needs a source checkout (its drivers build from bench/ and "
                                 "scripts/, which an installed package does not carry): clone moenum, run "
                                 "scripts/setup.sh, then .venv/bin/moenum bench")
    return root


def run_bench(cpu: bool, gpu: bool, peer: str | None, layer: bool = False) -> int:
    if peer not in (None, "torch"):
        raise ScenarioError(f"unknown peer '{peer}' (known: torch)", key="--peer")
    if peer and not gpu:
        raise ScenarioError("--peer torch is a GPU comparison: use it with --gpu", key="--peer")
    if layer and not gpu:
        raise ScenarioError("--layer is a GPU benchmark: use it with --gpu", key="--layer")
    root = source_root()
    commands = []
    if cpu or not gpu:
        commands += [["bash", str(root / "bench/cpu-bench.sh")],
                     [sys.executable, str(root / "bench/bench_mx_quantize.py")]]
    if gpu:
        commands.append(["bash", str(root / "scripts/gpu-check.sh"), "build", "layer" if layer else "bench"])
    rc = 0
    for command in commands:
        print(f"$ {' '.join(command)}", flush=True)
        rc |= subprocess.run(command, cwd=root).returncode
    return 1 if rc else 0
