"""Which kernels the peers run on the bench's GEMM shapes, and for how long.

python3 bench/gpu_gemm_peer_kernels.py

For every shape of bench/gpu_peer_torch.py with uniform counts: torch._grouped_mm (CUTLASS),
torch.bmm on the same problem as a batch (cuBLAS's choice for the strided batch) and torch.mm on the
dense product with one weight (cuBLAS's choice at that N and K). Kernel names carry the tile, cluster
and schedule the library picked, which is what a configuration of gpu.grouped can copy. Needs torch
only (torch.profiler, no ncu). Prints CSV shape,engine,kernel,calls,us_per_call.
"""
import re
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import operands, routing  # noqa: E402
from gpu_peer_torch import SHAPES  # noqa: E402

CALLS = 10


def kernels(call):
    """[(kernel name, calls, us per call)] of CALLS calls of `call` after a warm-up, longest first."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    rows = [(e.key, e.count, e.device_time_total / CALLS) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[2])


def short(kernel):
    """A kernel's name without its template arguments: cuBLAS's nvjet names already carry the tile,
    cluster and schedule. A CUTLASS kernel's mangled name gives its first template integers in order
    (for an sm90 mainloop: stages, the cluster's extents that are not back-references, the tile):
    torch._grouped_mm's reads 4x2x1x128x256x64, 4 stages, a 2x1 cluster, a 128x256x64 tile."""
    if kernel.startswith("_ZN7cutlass"):
        ints = [int(x) for x in re.findall(r"ILi(\d+)E", kernel)]
        return "cutlass " + "x".join(map(str, ints[:12]))
    return kernel.split("(")[0].split("<")[0].replace(",", " ")


def main():
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    print("shape,engine,kernel,calls,us_per_call")
    for name, g, m, n, k in SHAPES:
        a, b = operands(g, m, n, k)
        bt = b.transpose(-2, -1)
        offs32, counts64, _ = routing(g, m, False)
        engines = {"torch._grouped_mm": lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
        if bool((counts64 == counts64[0]).all()):
            a3 = a.view(g, m // g, k)
            engines["torch.bmm batched"] = lambda: torch.bmm(a3, bt)
        engines["torch.mm dense"] = lambda: torch.mm(a, bt[0])
        for engine, call in engines.items():
            for kernel, count, us in kernels(call):
                print(f"{name},{engine},{short(kernel)},{count},{us:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
