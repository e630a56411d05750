"""What the CPU benches share: a fresh worker process per thread count (OpenMP fixes its pool when
a process starts), 1 thread and all cores, and the CPU's name for the report."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_per_thread_count(script: str, worker_args: list[str], skip_peers_flag: str) -> list[dict]:
    """`script --worker *worker_args` under OMP_NUM_THREADS=1, then all cores; each prints one JSON
    line. The peers do not use moenum's threads: they are measured once, in the 1-thread run."""
    runs = []
    for threads in ["1", str(os.cpu_count() or 1)]:
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        cmd = [sys.executable, script, "--worker", *worker_args]
        if threads != "1":
            cmd.append(skip_peers_flag)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return runs
