"""Running an external experts module as a moenum backend (interfaces.md, "External backends under
test"): per simulated EP rank, moenum dispatches the plan's rows, hands the module the hidden rows,
device-side int64 tokens_per_expert and fp32 probs, backpropagates dy (every row of token t gets dy_t:
the combine has no probs) through it, and takes dx_row and dprobs from autograd and the weight
gradients from the module. moenum then combines y and dx itself and returns the result dict of a
built-in backend ({outputs, stages, attrs, seconds}), so the runner verifies it like any other."""
from __future__ import annotations

import time

import numpy as np

from ..stages import STAGES
from . import dtypes
from .capture import HookCapture
from .combine import combine, combine_index
from .errors import NotSupported
from .spec import ExpertsSpec

STAGE_NAMES = frozenset(t for s in STAGES if s.where == "stages" for t in s.tensors)
GRADS = ("dw1", "db1", "dw2", "db2")


def _rows(src: np.ndarray, row_token: np.ndarray) -> np.ndarray:
    """The dispatched rows of a [T, H] tensor: token t's row, zeros for a zero pad row (-1)."""
    out = np.zeros((len(row_token), src.shape[1]), dtype=np.float32)
    real = row_token >= 0
    out[real] = src[row_token[real]]
    return out


def _call_module(module, hidden, tokens_per_expert, probs, dy_rows):
    """One forward and backward; (out, dx_row, dprobs rows, weight grads, stages)."""
    capture = HookCapture(module)
    try:
        out = module(hidden, tokens_per_expert, probs)
        if tuple(out.shape) != tuple(hidden.shape):
            raise ValueError(f"the module returned shape {tuple(out.shape)} for hidden rows {tuple(hidden.shape)}")
        out.backward(dy_rows)
    finally:
        capture.remove()
    stages = capture.stages()
    given = getattr(module, "stages", None)
    if callable(given):
        stages.update(given() or {})
    unknown = sorted(set(stages) - STAGE_NAMES)
    if unknown:
        raise ValueError(f"stages() returned unknown stage(s) {', '.join(unknown)}")
    grads = module.weight_grads()
    return out, hidden.grad, probs.grad, grads, stages


def run_module(factory, prepared, cfg: dict, device) -> dict:
    """Every simulated rank through the module of `factory`; the built-in backends' result dict."""
    import torch

    m, recipe = cfg["model"], cfg["recipe"]["name"]
    if recipe not in dtypes.RECIPE_DTYPES:
        raise NotSupported(f"recipe {recipe}: external backends run fp32 and bf16")
    dtype = dtypes.torch_dtype(recipe)
    E, H, F, T, k = m["experts"], m["hidden"], m["ffn"], cfg["tokens"], m["topk"]
    plan, inputs = prepared.plan, prepared.inputs
    P = plan["ep"]
    El = E // P
    x, dy = inputs["x"], inputs["dy"]

    outs, dx_rows, dprob_rows, stage_parts = [], [], [], []
    grads = {g: np.zeros(shape, dtype=np.float32) for g, shape in
             {"dw1": (E, 2 * F, H), "dw2": (E, H, F), "db1": (E, 2 * F), "db2": (E, H)}.items()}
    grad_dtypes = {}
    seconds = 0.0
    for r, rank in enumerate(plan["ranks"]):
        row_token = rank["row_token"]
        if not rank["simulated"] or len(row_token) == 0:
            continue
        e0 = r * El
        spec = ExpertsSpec(num_local_experts=El, hidden=H, ffn=F, activation=m["activation"], bias=m["bias"],
                           recipe=recipe, device=device, dtype=dtype, ep_rank=r, ep_size=P, first_expert=e0,
                           bias_mode=cfg["recipe"].get("bias_mode", "separate"))
        module = factory(spec)
        local = slice(e0, e0 + El)
        w = {n: dtypes.to_torch(inputs[n][local], dtype, device) for n in ("w1", "w2")}
        b = {n: dtypes.to_torch(inputs[n][local], dtype, device) if m["bias"] else None for n in ("b1", "b2")}
        module.load_weights(w["w1"], b["b1"], w["w2"], b["b2"])
        hidden = dtypes.to_torch(_rows(x, row_token), dtype, device).requires_grad_(True)
        probs = torch.tensor(rank["row_prob"], dtype=torch.float32, device=device, requires_grad=True)
        tpe = torch.tensor(rank["tokens_per_expert"], dtype=torch.int64, device=device)
        dy_rows = dtypes.to_torch(_rows(dy, row_token), dtype, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out, dx_row, dprobs, g, stages = _call_module(module, hidden, tpe, probs, dy_rows)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - t0
        outs.append(out)
        dx_rows.append(dx_row)
        dprob_rows.append(dtypes.to_numpy(dprobs))
        stage_parts.append(stages)
        for name in GRADS:
            if name.startswith("db") and not m["bias"]:
                continue
            if g.get(name) is None:
                raise ValueError(f"weight_grads() gave no {name}")
            grads[name][local] = dtypes.to_numpy(g[name]).reshape(grads[name][local].shape)
            grad_dtypes[name] = dtypes.label(g[name])

    row_token = np.concatenate([rk["row_token"] for rk in plan["ranks"]])
    row_slot = np.concatenate([rk["row_slot"] for rk in plan["ranks"]])
    index = combine_index(row_token, row_slot, T, k)
    act = "fp32" if recipe == "fp32" else "bf16"
    out_rows = np.concatenate([dtypes.to_numpy(o) for o in outs]) if outs else np.zeros((0, H), np.float32)
    dx_row = np.concatenate([dtypes.to_numpy(d) for d in dx_rows]) if dx_rows else np.zeros((0, H), np.float32)
    dprobs = np.zeros((T, k), dtype=np.float32)
    if dprob_rows:
        routed = row_slot >= 0
        dprobs[row_token[routed], row_slot[routed]] = np.concatenate(dprob_rows)[routed]

    outputs = {"y": (combine(out_rows, index, act), act), "dx": (combine(dx_row, index, act), act),
               "dprobs": (dprobs, "fp32")}
    for name in GRADS:
        if name in grad_dtypes:
            outputs[name] = (grads[name], grad_dtypes[name])
    stages = {"out": (out_rows, dtypes.label(outs[0]) if outs else act),
              "dx_row": (dx_row, dtypes.label(dx_rows[0]) if dx_rows else act)}
    # a stage counts only when every rank that ran gave it
    for name in set.intersection(*(set(p) for p in stage_parts)) if stage_parts else ():
        parts = [p[name] for p in stage_parts]
        stages[name] = (np.concatenate([dtypes.to_numpy(t) for t in parts]), dtypes.label(parts[0]))
    attrs = {"device": str(device), "torch": str(torch.__version__), "elementwise": "interval"}
    return {"outputs": outputs, "stages": stages, "attrs": attrs, "seconds": seconds}
