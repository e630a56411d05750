"""`moenum bench`: the benchmark drivers of bench/, run from a source checkout.

--cpu: the smoke run's wall time, the reference GEMM beside Eigen's fp64 GEMM, and MXFP8 quantize
throughput beside numpy and ml_dtypes. --gpu: the grouped GEMM engines beside torch._grouped_mm
(scripts/gpu-check.sh build bench). Figures worth keeping go to bench/RESULTS.md by hand, with the
command, the machine and the date.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .errors import ScenarioError


def source_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    if not (root / "bench").is_dir() or not (root / "scripts").is_dir():
        raise ScenarioError("moenum bench runs from a source checkout (bench/ and scripts/ not found "
                            f"next to {Path(__file__).parent})", key="bench")
    return root


def run_bench(cpu: bool, gpu: bool, peer: str | None) -> int:
    root = source_root()
    if peer not in (None, "torch"):
        raise ScenarioError(f"unknown peer '{peer}' (known: torch)", key="--peer")
    if peer and not gpu:
        raise ScenarioError("--peer torch is a GPU comparison: use it with --gpu", key="--peer")
    commands = []
    if cpu or not gpu:
        commands += [["bash", str(root / "bench/cpu-bench.sh")],
                     [sys.executable, str(root / "bench/bench_mx_quantize.py")]]
    if gpu:
        commands.append(["bash", str(root / "scripts/gpu-check.sh"), "build", "bench"])
    rc = 0
    for command in commands:
        print(f"$ {' '.join(command)}", flush=True)
        rc |= subprocess.run(command, cwd=root).returncode
    return 1 if rc else 0
