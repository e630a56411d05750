"""Time and energy per call of the 128-expert grouped GEMMs held at the GPU's power limit.

python3 bench/gpu_gemm_energy.py BUILD/libmoenum_gemm_capi.so

At its power limit the GPU lowers its clock until it draws the limit, so a GEMM's time per call
follows its energy per call. Three engines per case: torch._grouped_mm, gpu.grouped's automatic
choice, and the dense ceiling (torch.mm of all the rows with one expert's weight: the same products
without the other weights' traffic or any grouping). Rounds rotate the engine order; in a round each
engine runs back to back for about SECONDS (as in training, the GPU never idles), timed by CUDA
events, with NVML's total energy counter read before and after. Median of ROUNDS rounds. Prints CSV
shape,dist,engine,calls,ms,mj,watts,vs_torch_time,vs_torch_energy,differing (differing: elements
whose bits differ from torch's output; empty for the dense product, which computes other values).
"""
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_gemm_ab_torch import open_capi  # noqa: E402
from gpu_peer_torch import SHAPES, make_counts  # noqa: E402

CASES = [("qwen3_30b_fc1", False), ("qwen3_30b_fc1", True), ("qwen3_30b_fc2", False), ("qwen3_30b_fc2", True),
         ("gpt_oss_120b_fc1", False), ("gpt_oss_120b_fc1", True), ("gpt_oss_120b_fc2", False),
         ("gpt_oss_120b_fc2", True)]
SECONDS = 0.6
ROUNDS = 5


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
    read()
    return read


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
    library = sys.argv[1] if len(sys.argv) == 2 else None
    lib, tiles = open_capi(library, __doc__, ["auto"])
    energy = energy_meter()
    if energy is None:
        return 3
    shapes = {name: (g, m, n, k) for name, g, m, n, k in SHAPES}
    stream = torch.cuda.current_stream()
    print("shape,dist,engine,calls,ms,mj,watts,vs_torch_time,vs_torch_energy,differing")
    for name, zipf in CASES:
        g, m, n, k = shapes[name]
        dist = "zipf1.2" if zipf else "uniform"
        a = (torch.rand(m, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        b = (torch.rand(g, n, k, device="cuda") - 0.5).mul_(0.25).to(torch.bfloat16)
        bt = b.transpose(-2, -1)
        counts = make_counts(g, m, zipf)
        offs32 = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
        counts64 = torch.tensor(counts, device="cuda", dtype=torch.int64)
        offsets64 = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), counts64.cumsum(0)])
        h = lib.moenum_fprop_new(tiles["auto"], -1, -1, g, n, k, ctypes.c_void_p(b.data_ptr()))
        if not h:
            return 1
        torch_out = torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

        def grouped():
            if lib.moenum_fprop_run(h, a.data_ptr(), out.data_ptr(), counts64.data_ptr(), offsets64.data_ptr(),
                                    stream.cuda_stream):
                raise RuntimeError("moenum_fprop_run failed")
        calls = {"torch._grouped_mm": lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16),
                 "gpu.grouped": grouped,
                 "torch.mm dense": lambda: torch.mm(a, bt[0])}
        names = list(calls)
        # calls per engine and round: about SECONDS of back-to-back work, from a short first timing
        count = {}
        for e in names:
            ms, _ = sustained(calls[e], 10, energy)
            count[e] = max(10, int(SECONDS * 1e3 / ms))
        samples = {e: [] for e in names}
        for r in range(ROUNDS):
            for e in names[r % len(names):] + names[:r % len(names)]:
                samples[e].append(sustained(calls[e], count[e], energy))
        med = {e: (sorted(s[0] for s in samples[e])[ROUNDS // 2], sorted(s[1] for s in samples[e])[ROUNDS // 2])
               for e in names}
        differing = {"torch._grouped_mm": 0, "torch.mm dense": "",
                     "gpu.grouped": int((out.view(torch.int16) != torch_out.view(torch.int16)).sum())}
        for e in names:
            ms, mj = med[e]
            torch_ms, torch_mj = med["torch._grouped_mm"]
            print(f"{name},{dist},{e},{count[e]},{ms:.4f},{mj:.1f},{mj / ms:.0f},{torch_ms / ms:.3f},"
                  f"{torch_mj / mj:.3f},{differing[e]}", flush=True)
        lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
