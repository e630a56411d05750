"""Where the automatic choice's time goes: its kernels beside the same configuration forced.

python3 bench/gpu_gemm_kernel_times.py BUILD/libmoenum_gemm_capi.so

gpu.grouped's automatic plan launches choose_and_fill and either_gemm (both configurations of a
pair in one kernel); the forced plan fill_groups and CUTLASS's kernel. For a few shapes this times
bursts of five calls of each (CUDA events, median of 20, as bench/gpu_gemm_ab_torch.py) and takes
every kernel's GPU time from torch.profiler, so the difference splits into the fill kernel, the GEMM
kernel and the gaps between them. Each engine is profiled in a session of its own after the timed
rounds: the H200 runs these GEMMs at its power cap, so a GEMM kernel's profiled time can differ
from the rounds' by several percent; the fill kernels' times and "elapsed" are the figures to
compare. Prints CSV shape,dist,engine,part,us_per_call (part: a kernel's name, "kernels" their sum,
"elapsed" the events' time per call, "gaps" elapsed - kernels).
"""
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import median_ms, open_capi  # noqa: E402
from gpu_peer_torch import SHAPES, make_counts  # noqa: E402

# (shape, zipf, the configuration the automatic rule picks for those counts: fprop_tiles and
# fprop_run in core/gpu/sm90/grouped_fprop.cu)
CASES = [("qwen3_30b_fc2", False, "128x128 pingpong 1x2 transposed", 8),
         ("qwen3_30b_fc2", True, "128x128 pingpong 1x2", 1),
         ("qwen3_30b_fc1", False, "192x128 pingpong 1x2 transposed", 2),
         ("gpt_oss_120b_fc1", False, "192x128 pingpong 1x2 transposed", 4)]
BURST = 5


# The kernels of the two plans; CUPTI reports them by mangled name.
KERNELS = {"either_gemm": "either_gemm", "choose_and_fill": "choose_and_fill", "fill_groups": "fill_groups",
           "device_kernel": "CUTLASS device_kernel"}


def short_name(kernel):
    """One of KERNELS' names for a kernel whose (mangled or demangled) name holds its key."""
    hits = [name for key, name in KERNELS.items() if key in kernel]
    return hits[0] if len(hits) == 1 else kernel[:60]


def kernel_us(call, calls):
    """{kernel name: GPU microseconds per call} over `calls` calls, from torch.profiler."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per_call = {}
    for ev in prof.key_averages():
        total = getattr(ev, "device_time_total", None)
        if total is None:
            total = ev.cuda_time_total
        if total > 0:
            name = short_name(ev.key)
            per_call[name] = per_call.get(name, 0.0) + total / calls
    return per_call


def main():
    library = sys.argv[1] if len(sys.argv) == 2 else None
    lib, tiles = open_capi(library, __doc__, ["auto"] + [tile for _, _, tile, _ in CASES])
    shapes = {name: (g, m, n, k) for name, g, m, n, k in SHAPES}
    stream = torch.cuda.current_stream()
    print("shape,dist,engine,part,us_per_call")
    for name, zipf, tile, run in CASES:
        g, m, n, k = shapes[name]
        a = (torch.rand(m, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        b = (torch.rand(g, n, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        counts64 = torch.tensor(make_counts(g, m, zipf), device="cuda", dtype=torch.int64)
        offsets64 = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), counts64.cumsum(0)])
        engines = {"gpu.grouped": (tiles["auto"], -1), f"forced {tile} runs of {run}": (tiles[tile], run)}
        calls, handles = {}, []
        for engine, (value, engine_run) in engines.items():
            h = lib.moenum_fprop_new(value, -1, engine_run, g, n, k, b.data_ptr())
            if not h:
                return 1
            handles.append(h)

            def call(h=h):
                if lib.moenum_fprop_run(h, a.data_ptr(), d.data_ptr(), counts64.data_ptr(), offsets64.data_ptr(),
                                        stream.cuda_stream):
                    raise RuntimeError("moenum_fprop_run failed")
            calls[engine] = call
        elapsed = median_ms(calls, list(calls), BURST)
        dist = "zipf1.2" if zipf else "uniform"
        for engine, call in calls.items():
            parts = kernel_us(call, 20 * BURST)
            kernels = sum(parts.values())
            for part, us in sorted(parts.items()):
                print(f"{name},{dist},{engine},{part},{us:.1f}")
            print(f"{name},{dist},{engine},kernels,{kernels:.1f}")
            print(f"{name},{dist},{engine},elapsed,{elapsed[engine] * 1e3:.1f}")
            print(f"{name},{dist},{engine},gaps,{elapsed[engine] * 1e3 - kernels:.1f}", flush=True)
        for h in handles:
            lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
