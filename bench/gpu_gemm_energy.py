"""The grouped GEMMs held at the GPU's power limit: time and energy per call, sustained.

python3 bench/gpu_gemm_energy.py BUILD/libmoenum_gemm_capi.so [--sweep]

In training the GEMMs run back to back for seconds and the GPU sits at its power limit, lowering its
clock until it draws the limit; then time per call follows energy per call. One call or a burst of
five after an idle gap (bench/gpu_gemm_ab_torch.py) runs partly above that steady state. Here each
engine runs back to back for about 0.6 s per round (0.4 s with --sweep; the host queues ahead, so
no launch gap is timed), timed by CUDA events, with NVML's total energy counter read before and
after; rounds rotate the engine order; median of the rounds (5, or 3 with --sweep).
  default: every shape and routing of bench/gpu_peer_torch.py; torch._grouped_mm, gpu.grouped's
           automatic choice and the dense ceiling (torch.mm of all the rows with one expert's
           weight: the same products without the other weights' traffic or any grouping).
  --sweep: the uniform 128-expert cells with every configuration of bench/gpu_gemm_ab_torch.py's
           ENGINES forced beside torch and the automatic choice.
Prints CSV shape,dist,engine,calls,ms,mj,watts,vs_torch_time,vs_torch_energy,differing (differing:
elements whose bits differ from torch's output; empty for the dense product, which computes other
values). The energy counter's update interval goes to stderr: windows much longer than it are needed.
"""
import ctypes
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import ENGINES, open_capi  # noqa: E402
from gpu_peer_torch import SHAPES, make_counts  # noqa: E402

SWEEP_CASES = [("qwen3_30b_fc1", False), ("qwen3_30b_fc2", False), ("gpt_oss_120b_fc1", False),
               ("gpt_oss_120b_fc2", False)]
TORCH, DENSE = "torch._grouped_mm", "torch.mm dense"


def energy_meter():
    """A function returning the current device's total energy in millijoules (NVML), or None
    (after saying why) when NVML cannot give it."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        print(f"no NVML: {e}", file=sys.stderr)
        return None
    handle = ctypes.c_void_p()
    uuid = f"GPU-{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}".encode()
    if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetHandleByUUID(uuid, ctypes.byref(handle)) != 0:
        print(f"NVML has no device {uuid.decode()}", file=sys.stderr)
        return None
    mj = ctypes.c_ulonglong()

    def read():
        rc = nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(mj))
        if rc != 0:
            raise RuntimeError(f"nvmlDeviceGetTotalEnergyConsumption returned {rc}")
        return mj.value
    return read


def update_interval_ms(energy, seconds=0.5):
    """The mean time between changes of the energy counter, polled for `seconds`."""
    changes, last, t_end = 0, energy(), time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        value = energy()
        changes += value != last
        last = value
    return seconds * 1e3 / max(changes, 1)


def sustained(call, calls, energy):
    """(ms per call, mJ per call) over `calls` back-to-back calls."""
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0 = energy()
    t0.record()
    for _ in range(calls):
        call()
    t1.record()
    t1.synchronize()
    e1 = energy()
    return t0.elapsed_time(t1) / calls, (e1 - e0) / calls


def main():
    args = sys.argv[1:]
    sweep = "--sweep" in args
    args = [a for a in args if a != "--sweep"]
    library = args[0] if len(args) == 1 else None
    engines = [(e, tile, chunks, run) for e, tile, chunks, run in ENGINES if sweep or e == "gpu.grouped"]
    lib, tiles = open_capi(library, __doc__, [tile for _, tile, _, _ in engines])
    energy = energy_meter()
    if energy is None:
        return 3
    print(f"NVML energy counter: a new value every {update_interval_ms(energy):.1f} ms", file=sys.stderr)
    seconds, rounds = (0.4, 3) if sweep else (0.6, 5)
    cases = SWEEP_CASES if sweep else [(name, zipf) for name, *_ in SHAPES for zipf in (False, True)]
    shapes = {name: (g, m, n, k) for name, g, m, n, k in SHAPES}
    stream = torch.cuda.current_stream()
    print("shape,dist,engine,calls,ms,mj,watts,vs_torch_time,vs_torch_energy,differing")
    for name, zipf in cases:
        g, m, n, k = shapes[name]
        dist = "zipf1.2" if zipf else "uniform"
        print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {name} {dist}", file=sys.stderr)
        a = (torch.rand(m, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        b = (torch.rand(g, n, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        bt = b.transpose(-2, -1)
        counts = make_counts(g, m, zipf)
        offs32 = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
        counts64 = torch.tensor(counts, device="cuda", dtype=torch.int64)
        offsets64 = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), counts64.cumsum(0)])
        torch_out = torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)
        calls = {TORCH: lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
        if not sweep:
            calls[DENSE] = lambda: torch.mm(a, bt[0])
        outs, handles = {}, []
        for engine, tile, chunks, run in engines:
            h = lib.moenum_fprop_new(tiles[tile], chunks, run, g, n, k, ctypes.c_void_p(b.data_ptr()))
            if not h:
                return 1
            handles.append(h)
            outs[engine] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

            def grouped(h=h, d=outs[engine]):
                if lib.moenum_fprop_run(h, a.data_ptr(), d.data_ptr(), counts64.data_ptr(), offsets64.data_ptr(),
                                        stream.cuda_stream):
                    raise RuntimeError("moenum_fprop_run failed")
            calls[engine] = grouped
        names = list(calls)
        # calls per engine and round: about `seconds` of back-to-back work, timed after a warm-up
        count = {}
        for e in names:
            sustained(calls[e], 3, energy)
            ms, _ = sustained(calls[e], 20, energy)
            count[e] = max(20, int(seconds * 1e3 / ms))
        samples = {e: [] for e in names}
        for r in range(rounds):
            for e in names[r % len(names):] + names[:r % len(names)]:
                samples[e].append(sustained(calls[e], count[e], energy))
        med = {e: (sorted(s[0] for s in samples[e])[rounds // 2], sorted(s[1] for s in samples[e])[rounds // 2])
               for e in names}
        torch_ms, torch_mj = med[TORCH]
        ref = torch_out.view(torch.int16)
        for e in names:
            ms, mj = med[e]
            differing = "" if e == DENSE else 0 if e == TORCH else int((outs[e].view(torch.int16) != ref).sum())
            print(f"{name},{dist},{e},{count[e]},{ms:.4f},{mj:.1f},{mj / ms:.0f},{torch_ms / ms:.3f},"
                  f"{torch_mj / mj:.3f},{differing}", flush=True)
        for h in handles:
            lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
