"""Peer for `moenum_gpu_layer_bench layer PLAN_DIR`: the bundled torch.grouped_mm adapter's layer,
forward and backward by autograd, on the identical routing (the .plan files the C++ bench wrote).

    python3 bench/gpu_layer_peer_torch.py PLAN_DIR > peer.csv

The layer around the adapter is the same as gpu.grouped's: gather each row's token, the adapter
(FC1, bias, activation and probs, FC2, bias), combine (fp32 sum per token, rounded to bf16), and
autograd back to x, the probs and the fp32 master weights. Same CSV columns, same timing rule
(median of 10 after 2 warm-ups, CUDA events, forward alone inside the same rounds)."""
import sys
from pathlib import Path

import numpy as np
import torch

from moenum import ExpertsSpec
from moenum.external.adapters import torch_grouped_mm

WARMUP, ROUNDS = 2, 10
SHAPES = {  # name: (experts, hidden, ffn, topk, tokens, bias), as kShapes in gpu_layer_bench.cu
    "tiny": (8, 512, 256, 2, 256, False),
    "dsv3_ep8r0": (32, 7168, 2048, 8, 4096, False),
    "qwen3_30b": (128, 2048, 768, 8, 8192, False),
    "qwen3.5_35b": (256, 2048, 512, 8, 8192, False),
    "gpt_oss_120b": (128, 2880, 2880, 4, 8192, True),
    "mixtral": (8, 4096, 14336, 2, 8192, False),
}


def read_plan(path):
    raw = path.read_bytes()
    experts, rows = np.frombuffer(raw, dtype=np.int64, count=2)
    at = 16
    counts = np.frombuffer(raw, dtype=np.int64, count=experts, offset=at)
    at += 8 * int(experts)
    row_token = np.frombuffer(raw, dtype=np.int32, count=rows, offset=at)
    at += 4 * int(rows)
    row_prob = np.frombuffer(raw, dtype=np.float32, count=rows, offset=at)
    return counts, row_token, row_prob


def uniform(shape, scale, dtype=torch.bfloat16):
    return ((torch.rand(shape, device="cuda") - 0.5) * scale).to(dtype)


def bench(name, dist, plan):
    E, H, F, k, T, bias = SHAPES[name]
    counts, row_token, row_prob = plan
    spec = ExpertsSpec(num_local_experts=E, hidden=H, ffn=F, activation="swiglu", bias=bias, recipe="bf16",
                       device=torch.device("cuda"), dtype=torch.bfloat16)
    module = torch_grouped_mm.make(spec)
    module.load_weights(uniform((E, 2 * F, H), 2 / H ** 0.5), uniform((E, 2 * F), 0.2 if bias else 0.0),
                        uniform((E, H, F), 2 / F ** 0.5), uniform((E, H), 0.2 if bias else 0.0))
    params = [p for p in (module.w1, module.b1, module.w2, module.b2) if p is not None]
    tpe = torch.tensor(counts, dtype=torch.int64, device="cuda")
    tok = torch.tensor(row_token, dtype=torch.int64, device="cuda")
    probs = torch.tensor(row_prob, dtype=torch.float32, device="cuda", requires_grad=True)
    x = uniform((T, H), 2.0).requires_grad_()
    dy = uniform((T, H), 2.0)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    fwd, total = [], []
    for it in range(WARMUP + ROUNDS):
        for t in (x, probs, *params):
            t.grad = None
        ev[0].record()
        rows = module(x[tok], tpe, probs)
        y = torch.zeros((T, H), dtype=torch.float32, device="cuda").index_add_(0, tok, rows.float()).to(torch.bfloat16)
        ev[1].record()
        y.backward(dy)
        ev[2].record()
        ev[2].synchronize()
        if it >= WARMUP:
            fwd.append(ev[0].elapsed_time(ev[1]))
            total.append(ev[0].elapsed_time(ev[2]))
    fwd_ms, ms = float(np.median(fwd)), float(np.median(total))
    tflops = 18.0 * len(row_token) * H * F / (ms * 1e-3) / 1e12
    print(f"{name},{dist},torch.grouped_mm,{E},{H},{F},{k},{T},{len(row_token)},{fwd_ms:.4f},{ms:.4f},{tflops:.1f}",
          flush=True)


def main():
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 3
    folder = Path(sys.argv[1])
    print("shape,dist,engine,experts,hidden,ffn,topk,tokens,rows,fwd_ms,ms,tflops")
    for name in SHAPES:
        for dist in ("uniform", "zipf1.2"):
            path = folder / f"{name}_{dist}.plan"
            if path.is_file():
                bench(name, dist, read_plan(path))
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
