"""The grouped GEMMs held at the GPU's power limit: time per call, sustained.

python3 bench/gpu_gemm_sustained.py BUILD/libmoenum_gemm_capi.so [--uniform | --sweep | --sweep-zipf]

In training the GEMMs run back to back for seconds and the GPU sits at its power limit, lowering its
clock until it draws the limit. One call or a burst of five after an idle gap
(bench/gpu_gemm_ab_torch.py) runs partly above that steady state, and a kernel that draws more
power gains more there. Here each engine runs back to back for about 0.6 s per round (0.4 s in a
sweep; the host queues ahead, so no launch gap is timed), timed by CUDA events; rounds rotate the
engine order; median of the rounds (5, or 3 in a sweep).
  default: every shape and routing of bench/gpu_peer_torch.py; torch._grouped_mm, gpu.grouped's
           automatic choice (with the rows told, and untold: without the strided batch for equal
           counts), the dense ceiling (torch.mm of all the rows with one expert's
           weight: the same products without the other weights' traffic or any grouping) and, where
           the counts are equal, cuBLAS's batched GEMM (torch.bmm of the groups: the same products
           and bytes as one strided batch, cuBLAS's choice of kernel).
  --uniform: the default's engines on the uniform cells only (where the batched ceiling applies).
  --sweep: the uniform cells, every configuration of bench/gpu_gemm_ab_torch.py's ENGINES forced
           beside torch, the automatic choice and cuBLAS's batched GEMM; --sweep-zipf: the same on
           the zipf s=1.2 cells (no batched GEMM there).
MOENUM_GEMM_SHAPES (bench/gpu_peer_torch.py) narrows the shapes, MOENUM_GEMM_BENCH_ENGINES
(bench/gpu_gemm_ab_torch.py) the engines.
Prints CSV shape,dist,engine,calls,ms,tflops,vs_torch,differing (differing: elements whose bits
differ from torch's output; empty for the dense and batched products, whose bits are not compared).
(NVML's energy counter, tried here, changes every 100 ms on the H200: too coarse for these windows.)
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import (AUTOMATIC_ENGINES, ENGINES, ROWS_UNTOLD, moenum_plan, open_capi,  # noqa: E402
                               operands, routing)
from gpu_peer_torch import SHAPES  # noqa: E402

TORCH, DENSE, BATCHED = "torch._grouped_mm", "torch.mm dense", "torch.bmm batched"


def sustained(call, calls):
    """ms per call over `calls` back-to-back calls."""
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0.record()
    for _ in range(calls):
        call()
    t1.record()
    t1.synchronize()
    return t0.elapsed_time(t1) / calls


def held_medians(calls, seconds, rounds):
    """({name: median ms per call}, {name: calls per round}) of the calls {name: call}: each runs
    back to back for about `seconds` per round (calibrated after a warm-up), rounds rotating the
    order, median of `rounds`."""
    names = list(calls)
    count = {}
    for e in names:
        sustained(calls[e], 3)
        count[e] = max(20, int(seconds * 1e3 / sustained(calls[e], 20)))
    samples = {e: [] for e in names}
    for r in range(rounds):
        for e in names[r % len(names):] + names[:r % len(names)]:
            samples[e].append(sustained(calls[e], count[e]))
    return {e: sorted(v)[rounds // 2] for e, v in samples.items()}, count


def main():
    args = sys.argv[1:]
    sweep_dists = {"--sweep": (False,), "--sweep-zipf": (True,)}
    sweep = next((sweep_dists[a] for a in args if a in sweep_dists), None)
    dists = (False,) if "--uniform" in args else (False, True)
    args = [a for a in args if a not in sweep_dists and a != "--uniform"]
    library = args[0] if len(args) == 1 else None
    engines = ENGINES if sweep else AUTOMATIC_ENGINES
    lib, tiles = open_capi(library, __doc__, [tile for _, tile, _, _ in engines])
    seconds, rounds = (0.4, 3) if sweep else (0.6, 5)
    cases = [(name, zipf) for name, *_ in SHAPES for zipf in (sweep or dists)]
    shapes = {name: (g, m, n, k) for name, g, m, n, k in SHAPES}
    print("shape,dist,engine,calls,ms,tflops,vs_torch,differing")
    for name, zipf in cases:
        g, m, n, k = shapes[name]
        dist = "zipf1.2" if zipf else "uniform"
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {name} {dist}", file=sys.stderr)
        a, b = operands(g, m, n, k)
        bt = b.transpose(-2, -1)
        offs32, counts64, offsets64 = routing(g, m, zipf)
        torch_out = torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)
        calls = {TORCH: lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
        if not sweep:
            calls[DENSE] = lambda: torch.mm(a, bt[0])
        if m % g == 0 and torch.equal(offs32, torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * (m // g)):
            a_batched = a.view(g, m // g, k)
            calls[BATCHED] = lambda: torch.bmm(a_batched, bt)
        outs, handles = {}, []
        for engine, tile, chunks, run in engines:
            outs[engine] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            calls[engine], h = moenum_plan(lib, tiles[tile], chunks, run, a, b, outs[engine], counts64, offsets64,
                                           rows_told=engine != ROWS_UNTOLD)
            handles.append(h)
        names = list(calls)
        med, count = held_medians(calls, seconds, rounds)
        ref = torch_out.view(torch.int16)
        for e in names:
            ms = med[e]
            differing = "" if e in (DENSE, BATCHED) else 0 if e == TORCH else int((outs[e].view(torch.int16) != ref).sum())
            tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12
            print(f"{name},{dist},{e},{count[e]},{ms:.4f},{tflops:.1f},{med[TORCH] / ms:.3f},{differing}", flush=True)
        for h in handles:
            lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
