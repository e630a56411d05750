"""Where the grouped GEMM's time goes on uniform counts: ceilings beside torch._grouped_mm.

python3 bench/gpu_gemm_diagnose.py BUILD/libmoenum_gemm_capi.so [--ncu]

For the bench's shapes with uniform counts (every group the same rows), times in one process, round
by round (bench/gpu_gemm_ab_torch.py's protocol, one call per timing): torch._grouped_mm,
gpu.grouped's automatic choice, torch.bmm on the same problem as a batch (cuBLAS: one tensor map
per operand, no per-group pointers), and torch.mm on one dense [rows, K] x [K, N] product (one
weight for all rows: the compute ceiling at that N and K, with no weight traffic). Prints CSV
shape,engine,ms,tflops,vs_torch.

MOENUM_GEMM_BENCH_ENGINES (bench/gpu_gemm_ab_torch.py) adds the forced engines it names beside
gpu.grouped's automatic choice (for example gpu.grouped.l2_weights_first_rows_normal).

--ncu: instead runs each engine once between cudaProfilerStart/Stop after a warm-up, for
`ncu --profile-from-start off` (scripts/gpu-check.sh stage gemm-diagnose).
--table FILE: one line per kernel of ncu's CSV (--csv --page details --print-units base) FILE, its metrics side by side,
in launch order: per shape torch, gpu.grouped, the forced engines, torch.bmm, the dense product.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import ASKED_ENGINES, median_ms, moenum_plan, open_capi, operands, routing  # noqa: E402
from gpu_peer_torch import SHAPES  # noqa: E402


def engines(lib, tiles, g, m, n, k):
    """name -> zero-argument call, and the handles to free."""
    a, b = operands(g, m, n, k)
    bt = b.transpose(-2, -1)
    offs32, counts64, offsets64 = routing(g, m, False)
    calls = {"torch._grouped_mm": lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
    handles = []
    for engine, tile, chunks, run in [("gpu.grouped", "auto", -1, -1)] + ASKED_ENGINES:
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        calls[engine], h = moenum_plan(lib, tiles[tile], chunks, run, a, b, d, counts64, offsets64)
        handles.append(h)
    if bool((counts64 == counts64[0]).all()):
        a3 = a.view(g, m // g, k)
        calls["torch.bmm"] = lambda: torch.bmm(a3, bt)
    calls["torch.mm dense"] = lambda: torch.mm(a, bt[0])
    return calls, handles


def table(path):
    """Kernel, then each metric's value, for kernels of at least 20 us (the GEMMs, not the fills)."""
    import csv
    kernels = {}
    for r in csv.DictReader(open(path)):
        kernels.setdefault(r["ID"], {"name": r["Kernel Name"]})[r["Metric Name"]] = r["Metric Value"]
    metrics = sorted({mk for kv in kernels.values() for mk in kv if mk != "name"})
    print("kernel," + ",".join(metrics))
    for kv in kernels.values():
        ns = float(kv.get("gpu__time_duration.sum", "0").replace(",", ""))  # --print-units base
        if ns >= 20000:
            print(f"{kv['name'][:60].replace(',', ' ')}," + ",".join(kv.get(mk, "-").replace(",", "") for mk in metrics))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        return table(sys.argv[2])
    args = [x for x in sys.argv[1:] if x != "--ncu"]
    lib, tiles = open_capi(args[0] if len(args) == 1 else None, __doc__, ["auto"] + [e[1] for e in ASKED_ENGINES])
    profile = "--ncu" in sys.argv
    if not profile:
        print("shape,engine,ms,tflops,vs_torch")
    for name, g, m, n, k in SHAPES:
        calls, handles = engines(lib, tiles, g, m, n, k)
        if profile:
            for f in calls.values():
                f()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            for e, f in calls.items():
                torch.cuda.nvtx.range_push(f"{name} {e}")
                f()
                torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        else:
            names = list(calls)
            med = median_ms(calls, names, 1)
            for e in names:
                tflops = 2.0 * m * n * k / (med[e] * 1e-3) / 1e12
                print(f"{name},{e},{med[e]:.4f},{tflops:.1f},{med['torch._grouped_mm'] / med[e]:.3f}", flush=True)
        for h in handles:
            lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
