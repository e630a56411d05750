"""The grouped GEMMs held at the power limit on fewer SMs: does a grid without a wave tail win?

python3 bench/gpu_gemm_sm_count.py BUILD/libmoenum_gemm_capi.so [CARVEOUT ...]   (default 0 4 8)

A persistent grouped kernel deals its output tiles to one CTA per SM: 4096 tiles of 128x256 over
132 SMs are 31.03 waves, the last one nearly empty. At the power limit the clock, not the SM count,
bounds throughput, so a grid of 128 SMs might finish the same work without the tail. For each
carveout c this times torch._grouped_mm with torch's experimental SM carveout c (which its grouped
kernel honours) and gpu.grouped's automatic plan with its grid on SMs - c, as in
bench/gpu_gemm_sustained.py (back to back for about 0.6 s per round, rounds rotating, median of 5);
every shape and routing of bench/gpu_peer_torch.py (MOENUM_GEMM_SHAPES narrows them).
Prints CSV shape,dist,engine,carveout,sms,ms,vs_torch,differing (vs_torch: over torch._grouped_mm
on every SM; differing: elements whose bits differ from its output, 0 expected: tiles only move
between CTAs).
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import moenum_plan, open_capi, operands, routing  # noqa: E402
from gpu_gemm_sustained import held_medians  # noqa: E402
from gpu_peer_torch import SHAPES  # noqa: E402

TORCH, MOENUM = "torch._grouped_mm", "gpu.grouped"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    lib, tiles = open_capi(sys.argv[1], __doc__, ["auto"])
    carveouts = sorted({0, *(int(c) for c in sys.argv[2:])} if len(sys.argv) > 2 else {0, 4, 8})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    seconds, rounds = 0.6, 5
    print("shape,dist,engine,carveout,sms,ms,vs_torch,differing")
    for name, g, m, n, k in SHAPES:
        a, b = operands(g, m, n, k)
        bt = b.transpose(-2, -1)
        for zipf in (False, True):
            dist = "zipf1.2" if zipf else "uniform"
            print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {name} {dist}", file=sys.stderr)
            offs32, counts64, offsets64 = routing(g, m, zipf)
            outs, calls, handles = {}, {}, []

            def torch_with(c):
                def call():
                    torch._C._set_sm_carveout_experimental(c)
                    outs[(TORCH, c)] = torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)
                return call
            for c in carveouts:
                calls[(TORCH, c)] = torch_with(c)
                outs[(MOENUM, c)] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                calls[(MOENUM, c)], h = moenum_plan(lib, tiles["auto"], -1, -1, a, b, outs[(MOENUM, c)], counts64,
                                                    offsets64, sm_count=sms - c)
                handles.append(h)
            names = list(calls)
            med, _ = held_medians(calls, seconds, rounds)
            ref = outs[(TORCH, 0)].view(torch.int16)
            for engine, c in names:
                differing = int((outs[(engine, c)].view(torch.int16) != ref).sum())
                print(f"{name},{dist},{engine},{c},{sms - c},{med[(engine, c)]:.4f},"
                      f"{med[(TORCH, 0)] / med[(engine, c)]:.3f},{differing}", flush=True)
            torch._C._set_sm_carveout_experimental(None)
            for h in handles:
                lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
