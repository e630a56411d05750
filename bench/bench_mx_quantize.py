"""Throughput of moenum.mx.quantize (MB/s of fp32 input) next to peers measured in the same run.

Peers:
  numpy      what a user would write: reshape to blocks, amax, power-of-two scale, rint onto the FP8
             grid, clip. Produces fake-quantized float32 values, not codes (and no satfinite/NaN rules).
  ml_dtypes  the same scale computation, then a cast to ml_dtypes.float8_* (codes), when importable.

Each thread count runs in a fresh process (OpenMP fixes its pool at start): OMP_NUM_THREADS=1 and all
cores. The peers are single-threaded numpy either way.

    .venv/bin/python bench/bench_mx_quantize.py [--rows 4096 --cols 4096 --reps 9] [--append bench/RESULTS.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench_process import cpu_model, run_per_thread_count

HEADING = "## MXFP8 quantize throughput (issue 3)"
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
MANT = {"e4m3": 3, "e5m2": 2}
MIN_NORMAL_EXP = {"e4m3": -6, "e5m2": -14}


def numpy_quantize(x: np.ndarray, fmt: str):
    """The vectorised quantizer a user would write: fake-quantized values and per-block scales."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    with np.errstate(divide="ignore"):
        scale = np.exp2(np.ceil(np.log2(amax / FMT_MAX[fmt])))
    scale[amax == 0] = 1.0
    v = b / scale[:, None]
    with np.errstate(divide="ignore"):
        e = np.maximum(np.floor(np.log2(np.abs(v))), MIN_NORMAL_EXP[fmt])
    quantum = np.exp2(e - MANT[fmt])
    q = np.clip(np.rint(v / quantum) * quantum, -FMT_MAX[fmt], FMT_MAX[fmt])
    return q.astype(np.float32), scale.astype(np.float32)


def ml_dtypes_quantize(x: np.ndarray, fmt: str):
    import ml_dtypes

    dtype = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(amax / FMT_MAX[fmt]))
    e[amax == 0] = -127
    e = np.clip(e, -127, 127)
    inv = np.exp2(-e).astype(np.float32)
    codes = np.clip(b * inv[:, None], -FMT_MAX[fmt], FMT_MAX[fmt]).astype(dtype).view(np.uint8)
    return codes, (e + 127).astype(np.uint8)


def make_input(rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    # activations-like: normal values with a per-row magnitude spread and a few outliers
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.exp2(rng.integers(-8, 8, (rows, 1))).astype(np.float32)
    x[rng.random((rows, cols)) < 1e-4] *= 100
    return x


def timed(fn, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def worker(args) -> dict:
    from moenum import mx

    x = make_input(args.rows, args.cols)
    mb = x.nbytes / 1e6
    out = {"threads": os.environ.get("OMP_NUM_THREADS", "default"), "mb": mb, "results": {}}
    for fmt in args.formats:
        r = {"moenum": mb / timed(lambda: mx.quantize(x, fmt=fmt), args.reps)}
        if not args.skip_peers:
            r["numpy"] = mb / timed(lambda: numpy_quantize(x, fmt), max(3, args.reps // 3))
            try:
                import ml_dtypes  # noqa: F401

                r["ml_dtypes"] = mb / timed(lambda: ml_dtypes_quantize(x, fmt), max(3, args.reps // 3))
            except ImportError:
                r["ml_dtypes"] = None
            # Sanity: on ordinary data the numpy peer's values equal ours.
            q, s = mx.quantize(x, fmt=fmt)
            ours = mx.dequantize(q, s, fmt=fmt).reshape(-1, 32)
            fq, fs = numpy_quantize(x, fmt)
            r["numpy_values_equal"] = float(np.mean(ours == fq * fs[:, None]))
        out["results"][fmt] = r
    return out


def run_all(args) -> list[dict]:
    return run_per_thread_count(__file__, ["--rows", str(args.rows), "--cols", str(args.cols), "--reps", str(args.reps),
                                           "--formats", *args.formats], "--skip-peers")


def report(args, runs: list[dict]) -> str:
    ncores = os.cpu_count() or 1
    one, many = runs
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [HEADING, "",
             f"Command: `{' '.join(['.venv/bin/python', 'bench/bench_mx_quantize.py', *sys.argv[1:]])}`  ",
             f"Machine: {cpu_model()}, {ncores} cores, shared with other work (load average 1/5/15 min "
             f"after the run: {load}; the {ncores}-thread figure drops when another job holds a core); "
             f"date {dt.date.today().isoformat()}; numpy {np.__version__}  ",
             f"Input: fp32 [{args.rows} x {args.cols}] = {one['mb']:.1f} MB, blocks of 32 along the last axis; "
             f"median of {args.reps} calls (peers: of {max(3, args.reps // 3)}), MB/s of fp32 input.", "",
             f"| format | moenum 1 thread | moenum {ncores} threads (per core) | numpy peer | ml_dtypes peer "
             f"| moenum/numpy | moenum/ml_dtypes |",
             "|---|---|---|---|---|---|---|"]
    for fmt in args.formats:
        a, b = one["results"][fmt], many["results"][fmt]
        mld = a.get("ml_dtypes")
        lines.append(
            f"| {fmt} | {a['moenum']:.0f} | {b['moenum']:.0f} ({b['moenum'] / ncores:.0f}) | {a['numpy']:.0f} "
            f"| {mld:.0f} | {a['moenum'] / a['numpy']:.1f}x | {a['moenum'] / mld:.1f}x |" if mld else
            f"| {fmt} | {a['moenum']:.0f} | {b['moenum']:.0f} ({b['moenum'] / ncores:.0f}) | {a['numpy']:.0f} "
            f"| n/a | {a['moenum'] / a['numpy']:.1f}x | n/a |")
    lines += ["",
              "Ratios are single-thread moenum over the single-threaded peers. The numpy peer's values equal "
              "moenum's on this input for a fraction "
              + ", ".join(f"{one['results'][f]['numpy_values_equal']:.6f} ({f})" for f in args.formats)
              + " of the elements (it has no satfinite/NaN/inf rules and takes the scale from np.log2, "
              "so it differs at the edges). Acceptance: >= 200 MB/s of fp32 input per core.", ""]
    return "\n".join(lines)


def append_section(path: Path, text: str) -> None:
    """Replace this benchmark's section in RESULTS.md (up to the next '## '), or append it."""
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    start = old.find(HEADING)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + len(HEADING))
        new = old[:start] + text + ("\n" + old[nxt + 1:] if nxt >= 0 else "")
    path.write_text(new.rstrip("\n") + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--formats", nargs="+", default=["e4m3", "e5m2"])
    p.add_argument("--append", type=Path, help="write the results section into this markdown file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--skip-peers", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    text = report(args, run_all(args))
    print(text)
    if args.append:
        append_section(args.append, text)


if __name__ == "__main__":
    main()
