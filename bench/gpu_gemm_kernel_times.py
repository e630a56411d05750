"""Where the automatic choice's time goes: its kernels beside the same configuration forced.

python3 bench/gpu_gemm_kernel_times.py BUILD/libmoenum_gemm_capi.so

gpu.grouped's automatic plan launches choose_and_fill and chosen_gemm (every configuration it picks
among in one kernel, launched programmatically dependent on the fill, so the two kernels' times
may overlap); the forced plan fill_groups and CUTLASS's kernel, one after the other. For a few shapes this times bursts
of five calls of each (CUDA events, median of 20, as bench/gpu_gemm_ab_torch.py) and takes every
kernel's GPU time from torch.profiler, so the difference splits into the fill kernel, the GEMM
kernel and the gaps between them. Both plans are profiled in one session, their bursts interleaved
as in the timed rounds: the H200 runs these GEMMs at its power cap, and a kernel's time depends on
the power state it ran in. Prints CSV shape,dist,engine,part,us_per_call (part: a kernel's name,
"kernels" their sum, "elapsed" the events' time per call, "gaps" elapsed - kernels, negative where
the kernels overlap).
"""
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import median_ms, moenum_plan, open_capi, operands, routing  # noqa: E402
from gpu_peer_torch import SHAPES  # noqa: E402

# (shape, zipf, the configuration the automatic rule picks for those counts on the H200: fprop_tiles and
# fprop_run in core/gpu/sm90/grouped_fprop.cu)
CASES = [("qwen3_30b_fc2", False, "128x128 pingpong 1x2 transposed", 4),
         ("qwen3_30b_fc2", True, "128x128 pingpong 1x2", 1),
         ("qwen3_30b_fc1", False, "192x128 pingpong 1x2 transposed", 1),
         ("gpt_oss_120b_fc1", False, "192x128 pingpong 1x2 transposed", 2),
         ("dsv3_fc2_ep8", False, "128x128 pingpong 1x2", 1),
         ("qwen3.5_35b_fc1", False, "128x256 coop 2x1", 1),
         ("qwen3.5_35b_fc1", True, "128x128 pingpong 2x1 transposed", 1),
         ("dsv3_fc1_ep8", False, "128x256 coop 2x1", 1),
         ("mixtral_fc2", False, "128x256 coop 2x1", 1)]
BURST = 5


# The kernels of the two plans (CUPTI names them mangled): {name in the mangled name: (plan, name)}.
AUTOMATIC = "gpu.grouped"
FORCED = "forced"
KERNELS = {"choose_and_fill": (AUTOMATIC, "choose_and_fill"), "chosen_gemm": (AUTOMATIC, "chosen_gemm"),
           "fill_groups": (FORCED, "fill_groups"), "device_kernel": (FORCED, "CUTLASS device_kernel")}


def plan_kernel(kernel):
    """(plan, short name) of a profiled kernel: KERNELS' entry whose key it holds, else ("other", it)."""
    hits = [entry for key, entry in KERNELS.items() if key in kernel]
    return hits[0] if len(hits) == 1 else ("other", kernel[:60])


def kernel_us(calls, rounds):
    """{(plan, kernel): GPU microseconds per call}, from torch.profiler over `rounds` rounds of a
    burst of every plan, in an order that rotates round by round: both plans run in one profiling
    session, at the same power state."""
    names = list(calls)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for r in range(rounds):
            for plan in names[r % len(names):] + names[:r % len(names)]:
                for _ in range(BURST):
                    calls[plan]()
        torch.cuda.synchronize()
    per_call = {}
    for ev in prof.key_averages():
        total = getattr(ev, "device_time_total", None)
        if total is None:
            total = ev.cuda_time_total
        if total > 0:
            key = plan_kernel(ev.key)
            per_call[key] = per_call.get(key, 0.0) + total / (rounds * BURST)
    return per_call


def main():
    library = sys.argv[1] if len(sys.argv) == 2 else None
    lib, tiles = open_capi(library, __doc__, ["auto"] + [tile for _, _, tile, _ in CASES])
    shapes = {name: (g, m, n, k) for name, g, m, n, k in SHAPES}
    print("shape,dist,engine,part,us_per_call")
    for name, zipf, tile, run in CASES:
        if name not in shapes:  # left out by MOENUM_GEMM_SHAPES
            continue
        g, m, n, k = shapes[name]
        a, b = operands(g, m, n, k)
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        _, counts64, offsets64 = routing(g, m, zipf)
        plans = {AUTOMATIC: (tiles["auto"], -1), FORCED: (tiles[tile], run)}
        calls, handles = {}, []
        for plan, (value, plan_run) in plans.items():
            calls[plan], h = moenum_plan(lib, value, -1, plan_run, a, b, d, counts64, offsets64)
            handles.append(h)
        elapsed = median_ms(calls, list(calls), BURST)
        parts = kernel_us(calls, 20)
        dist = "zipf1.2" if zipf else "uniform"
        for plan in calls:
            engine = plan if plan == AUTOMATIC else f"forced {tile} runs of {run}"
            mine = {kernel: us for (owner, kernel), us in parts.items() if owner == plan}
            for kernel, us in sorted(mine.items()):
                print(f"{name},{dist},{engine},{kernel},{us:.1f}")
            kernels = sum(mine.values())
            print(f"{name},{dist},{engine},kernels,{kernels:.1f}")
            print(f"{name},{dist},{engine},elapsed,{elapsed[plan] * 1e3:.1f}")
            print(f"{name},{dist},{engine},gaps,{elapsed[plan] * 1e3 - kernels:.1f}", flush=True)
        for (owner, kernel), us in sorted(parts.items()):
            if owner == "other":
                print(f"{name},{dist},other,{kernel},{us:.1f}")
        for h in handles:
            lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
