"""Throughput of moenum.tc.dot (multiply-adds per second) next to MMA-Sim's (mmasim) on the same
operands, measured in the same run; mmasim is checked to give the same bits.

Each thread count runs in a fresh process (OpenMP fixes its pool at start): OMP_NUM_THREADS=1 (the
per-core figure) and all cores. mmasim runs on torch's CPU threads, one thread in the 1-thread run.

    .venv/bin/python bench/bench_tc.py [--n 20000 --k 1024 --reps 5] [--append bench/RESULTS.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time

import numpy as np

from bench_process import cpu_model, run_per_thread_count

HEADING = "## Tensor-core model throughput (issue 12)"
FORMATS = ("bf16", "e4m3", "e5m2")
INSTRUCTION = {"bf16": "m64n8k16.f32.bf16.bf16", "e4m3": "m64n8k32.f32.e4m3.e4m3", "e5m2": "m64n8k32.f32.e5m2.e5m2"}


def operands(n: int, k: int, fmt: str):
    import ml_dtypes

    dtype = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, k), dtype=np.float32).astype(dtype).astype(np.float32) for _ in range(2))
    return a, b, rng.standard_normal(n, dtype=np.float32)


def timed(fn, reps: int) -> float:
    """Median CPU time of the process over the calls: on a shared machine the wall clock measures the
    other jobs too; divided by the threads' CPU seconds, the rate is per core."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return float(np.median(ts))


def worker(args) -> dict:
    from moenum import tc

    out = {"threads": os.environ.get("OMP_NUM_THREADS", "default"), "results": {}}
    for fmt in FORMATS:
        a, b, c = operands(args.n, args.k, fmt)
        macs = a.size
        r = {"moenum": macs / timed(lambda: tc.dot(a, b, c, fmt=fmt), args.reps)}
        if not args.skip_peer:
            try:
                import torch
                import mmasim.nv_ptx as ptx
            except ImportError:
                r["mmasim"] = None
            else:
                torch.set_num_threads(int(out["threads"]) if out["threads"].isdigit() else os.cpu_count())
                tdt = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
                op = ptx.WGMMA("Hopper", INSTRUCTION[fmt])
                ta, tb, tcc = torch.from_numpy(a).to(tdt), torch.from_numpy(b).to(tdt), torch.from_numpy(c)
                r["mmasim"] = macs / timed(lambda: op.dpa(ta, tb, tcc), max(1, args.reps // 2))
                same = op.dpa(ta, tb, tcc).numpy().view(np.uint32) == tc.dot(a, b, c, fmt=fmt).view(np.uint32)
                r["same_bits"] = float(same.mean())
        out["results"][fmt] = r
    return out


def run_all(args) -> list[dict]:
    return run_per_thread_count(__file__, ["--n", str(args.n), "--k", str(args.k), "--reps", str(args.reps)],
                                "--skip-peer")


def report(args, runs: list[dict]) -> str:
    ncores = os.cpu_count() or 1
    one, many = runs
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [HEADING, "",
             f"Command: `{' '.join(['.venv/bin/python', 'bench/bench_tc.py', *sys.argv[1:]])}`  ",
             f"Machine: {cpu_model()}, {ncores} cores, shared with other work (load average 1/5/15 min after "
             f"the run: {load}); date {dt.date.today().isoformat()}  ",
             f"Input: {args.n} dot products of K = {args.k} (random normal values of the format, fp32 c); median "
             f"of {args.reps} calls (mmasim: of {max(1, args.reps // 2)}); million multiply-adds per CPU second "
             f"(process CPU time, so per core).", "",
             f"| format | moenum 1 thread | moenum {ncores} threads | mmasim 1 thread | moenum/mmasim "
             f"| same bits |", "|---|---|---|---|---|---|"]
    for fmt in FORMATS:
        r1, rn = one["results"][fmt], many["results"][fmt]
        peer = r1.get("mmasim")
        lines.append(f"| {fmt} | {r1['moenum'] / 1e6:.0f} | {rn['moenum'] / 1e6:.0f} | {peer / 1e6 if peer else float('nan'):.2f} | "
                     f"{r1['moenum'] / peer if peer else float('nan'):.0f}x | {r1.get('same_bits', float('nan')):.6f} |")
    lines += ["", "Acceptance: >= 50 million multiply-adds per second per core (1-thread column). \"same bits\": the "
              "fraction of the dot products where mmasim's result has moenum's bits.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--append", help="append the table to this markdown file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--skip-peer", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    text = report(args, run_all(args))
    print(text)
    if args.append:
        with open(args.append, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
