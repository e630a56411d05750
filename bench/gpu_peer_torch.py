"""Peer for bench/gpu_gemm_bench.cu: torch._grouped_mm on the identical shapes and counts.

Prints the same CSV columns (engine = torch._grouped_mm). Run on the GPU machine, in the same
session as the C++ bench, so the two are comparable (same clocks, same day).

--calls-per-round N runs N calls per timed round and times the last one, so the GPU is as
continuously loaded as in the C++ bench, which interleaves N engines round by round: sustained load
lowers the clocks an H200 holds under its power limit, so the default (1) favours the peer. With
N > 1 the engine column reads torch._grouped_mm.xN.
"""
import argparse
import math
import os
import sys

import torch

SHAPES = [
    ("dsv3_fc1_ep8", 32, 32768, 4096, 7168),
    ("dsv3_fc2_ep8", 32, 32768, 7168, 2048),
    ("qwen3_30b_fc1", 128, 65536, 1536, 2048),
    ("qwen3_30b_fc2", 128, 65536, 2048, 768),
    ("qwen3.5_35b_fc1", 256, 65536, 1024, 2048),
    ("qwen3.5_35b_fc2", 256, 65536, 2048, 512),
    ("gpt_oss_120b_fc1", 128, 32768, 5760, 2880),
    ("gpt_oss_120b_fc2", 128, 32768, 2880, 2880),
    ("mixtral_fc1", 8, 16384, 28672, 4096),
    ("mixtral_fc2", 8, 16384, 4096, 14336),
]
# MOENUM_GEMM_SHAPES=name,name,... keeps those shapes only, in every GEMM bench script (short runs).
if os.environ.get("MOENUM_GEMM_SHAPES"):
    SHAPES = [s for s in SHAPES if s[0] in os.environ["MOENUM_GEMM_SHAPES"].split(",")]


def make_counts(groups, m, zipf):
    """Same rule as make_counts() in gpu_gemm_bench.cu."""
    w = [1.0 / (e + 1.0) ** 1.2 if zipf else 1.0 for e in range(groups)]
    total = sum(w)
    c = [int(math.floor(m * x / total / 16)) * 16 for x in w]
    c[0] += m - sum(c)
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls-per-round", type=int, default=1)
    calls = max(ap.parse_args().calls_per_round, 1)
    engine = "torch._grouped_mm" if calls == 1 else f"torch._grouped_mm.x{calls}"
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    print("shape,dist,engine,groups,M,N,K,ms,tflops")
    for name, g, m, n, k in SHAPES:
        a = (torch.rand(m, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        b = (torch.rand(g, n, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        for zipf in (False, True):
            counts = make_counts(g, m, zipf)
            offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
            bt = b.transpose(-2, -1)  # [G, K, N] view of the [G, N, K] weights, like nn.Linear
            for _ in range(3 * calls):
                torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)
            times = []
            for _ in range(20):
                for _ in range(calls - 1):
                    torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)
                t0 = torch.cuda.Event(enable_timing=True)
                t1 = torch.cuda.Event(enable_timing=True)
                t0.record()
                torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)
                t1.record()
                t1.synchronize()
                times.append(t0.elapsed_time(t1))
            times.sort()
            med = times[len(times) // 2]
            tflops = 2.0 * m * n * k / (med * 1e-3) / 1e12
            print(f"{name},{'zipf1.2' if zipf else 'uniform'},{engine},{g},{m},{n},{k},{med:.4f},{tflops:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
