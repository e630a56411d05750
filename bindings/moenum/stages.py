"""The stage registry and the teacher-forced stage checks (numerics.md §7).

A stage is one step of the layer whose result a backend saves (a stage tensor under
/results/<backend>/stages, or an output). The registry below lists them in dataflow order; each entry
says what kind of check applies, which saved tensors feed it, and how the CPU recomputes it from THAT
backend's own inputs to the stage (teacher forcing), so that a fault is pinned to the stage that made it.

  kind "exact"      bit-exact by contract (elementwise, casts, combine): every element bitwise equal.
  kind "gemm"       a GEMM: every element inside the bound interval of numerics.md §7, evaluated on the
                    backend's own operands (see `gemm_interval`).
  kind "reduction"  a dot product or column sum that a backend may accumulate in fp32 in any order
                    (dprobs, db1, db2): the same bound as a GEMM.
  kind "mx"         MXFP8 codes and scales of one GEMM operand: bitwise equal, scales compared first.

Adding a stage = adding one `Stage(...)` here; the verifier, the stage table and the fault-injection
tests pick it up from `STAGES`.

The bound, exactly. For a GEMM output with K terms, c32 = the correctly rounded fp32 value of the exact
sum (the reference), S = sum_k |a_k b_k| (+ |bias| for an epilogue bias), gamma(K) = K*u/(1-K*u) with
u = 2^-24: any fp32 accumulation lands in [lo, hi] = fp32 grid points within gamma(K)*S + ulp32(c32)/2
of c32. The stage's value is post(acc) for a monotone post-processing `post` (round to bf16; for FC1 with
a separate bias round(round(acc) + b1)), so the allowed values are [post(lo), post(hi)]. For an fp32
output (wgrad, reductions) this is exactly |c - c_ref| <= gamma(K)*S + ulp(c_ref)/2 of §7; for a bf16
output it is §7's bound taken on the fp32 accumulator before the output rounding: §7 literally measured
from the bf16 c_ref would be too tight by half a bf16 ulp (two values either side of a bf16 midpoint,
a tiny accumulator difference apart, round one bf16 ulp apart).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import _core
from .classify import (CLASSES, EQUAL, VIOLATION, accumulator_interval, classify, classify_mx, counts,
                       gamma, half_ulp_f32)

EXACT, GEMM, REDUCTION, MX = "exact", "gemm", "reduction", "mx"

# MXFP8 operands (reference/mxfp8_policy.h): gemm -> operand -> (source tensor, axis of the blocks in the
# natural layout, whether it is a gradient operand using recipe.grad_format).
MX_OPERANDS = {
    "fc1_fprop": {"A": ("x", -1, False), "B": ("w1", -1, False)},
    "fc2_fprop": {"A": ("a", -1, False), "B": ("w2", -1, False)},
    "fc2_dgrad": {"A": ("dy", -1, True), "B": ("w2", -2, False)},
    "fc1_dgrad": {"A": ("dh", -1, True), "B": ("w1", -2, False)},
    "fc2_wgrad": {"A": ("dy", -2, True), "B": ("a", -2, False)},
    "fc1_wgrad": {"A": ("dh", -2, True), "B": ("x", -2, False)},
}


@dataclass(frozen=True)
class Stage:
    name: str                 # the saved tensor: a stage name, an output name, or an MX operand "gemm.X"
    kind: str                 # exact | gemm | reduction | mx
    where: str                # "stages" or "outputs"
    inputs: tuple             # saved tensors it is recomputed from (stages/outputs of the same backend)
    recompute: Callable       # (StageContext, tensors) -> Recomputed
    gemm: str = ""            # reference gemm name (numeric_policy.h) for gemm/mx stages
    doc: str = ""
    recipes: tuple = ()       # only for these recipes (empty: all)
    needs_bias: bool = False  # only when model.bias

    @property
    def tensors(self) -> tuple:
        """The saved tensor(s) this stage checks."""
        return (f"{self.name}.codes", f"{self.name}.scales") if self.kind == MX else (self.name,)


@dataclass
class Recomputed:
    ref: np.ndarray                 # what a correct backend holds, same shape as the tensor
    dtype: str                      # logical dtype of the stage's values
    expert: np.ndarray              # expert id of each element (-1: none), broadcastable to ref
    pre: np.ndarray | None = None   # the reference before its last rounding (tie flips)
    lo: np.ndarray | None = None    # bound interval (gemm/reduction)
    hi: np.ndarray | None = None
    ref_scales: np.ndarray | None = None  # mx stages
    axis: int = -1


# ---- the context: inputs, the plan's rows, per-expert segments ------------------------------------

@dataclass
class StageContext:
    cfg: dict
    inputs: dict                     # x, w1, b1, w2, b2, dy (fp64 arrays of bf16 values)
    row_token: np.ndarray            # all ranks' rows concatenated in plan order
    row_expert: np.ndarray
    row_slot: np.ndarray
    row_prob: np.ndarray
    topk_idx: np.ndarray
    segments: list = field(default_factory=list)   # per expert (start, end) in the row order
    combine_index: np.ndarray | None = None        # [T, k] rows of each token, ascending expert, -1 none
    x_rows: np.ndarray | None = None
    dy_rows: np.ndarray | None = None

    @property
    def act_dtype(self) -> str:
        return "fp32" if self.cfg["recipe"]["name"] == "fp32" else "bf16"

    @property
    def bias(self) -> bool:
        return bool(self.cfg["model"]["bias"])

    @property
    def epilogue(self) -> bool:
        return self.bias and self.cfg["recipe"].get("bias_mode", "separate") == "epilogue"

    @property
    def mx(self) -> bool:
        return self.cfg["recipe"]["name"] == "mxfp8"

    def row_experts(self, cols: int) -> np.ndarray:
        return np.broadcast_to(self.row_expert[:, None], (self.row_expert.size, cols))

    def locate(self, stage: Stage, tensor: str, index: tuple) -> str:
        """Human-readable position of one element of a stage tensor."""
        idx = ",".join(str(int(i)) for i in index)
        name = f"{stage.where}/{tensor}" if stage.where == "stages" else tensor
        if stage.where == "stages" and stage.kind != MX or (stage.kind == MX and _is_row_tensor(stage)):
            r = int(index[0])
            if stage.kind == MX and tensor.endswith(".scales") and MX_OPERANDS[stage.gemm][stage.name[-1]][1] == -2:
                r *= 32
            tok = int(self.row_token[r])
            return (f"{name}[{idx}]: expert {int(self.row_expert[r])}, row {r} "
                    f"({'zero pad row' if tok < 0 else f'token {tok}'})")
        if stage.kind == MX or tensor in ("dw1", "dw2", "db1", "db2"):
            return f"{name}[{idx}]: expert {int(index[0])}"
        if tensor == "dprobs":
            return f"{name}[{idx}]: expert {int(self.topk_idx[index[0], index[1]])}, token {int(index[0])}"
        return f"{name}[{idx}]: token {int(index[0])}"


def _is_row_tensor(stage: Stage) -> bool:
    return MX_OPERANDS[stage.gemm][stage.name[-1]][0] in ("x", "a", "dy", "dh")


def make_context(cfg: dict, prepared) -> StageContext:
    plan = prepared.plan
    cat = lambda key: np.concatenate([r[key] for r in plan["ranks"]]) if plan["ranks"] else np.zeros(0)
    inputs = {k: np.asarray(v, dtype=np.float64) for k, v in prepared.inputs.items()}
    ctx = StageContext(cfg=cfg, inputs=inputs, row_token=cat("row_token").astype(np.int64),
                       row_expert=cat("row_expert").astype(np.int64), row_slot=cat("row_slot").astype(np.int64),
                       row_prob=cat("row_prob").astype(np.float64), topk_idx=np.asarray(prepared.topk_idx))
    E = cfg["model"]["experts"]
    bounds = np.searchsorted(ctx.row_expert, np.arange(E + 1), side="left")
    if np.any(np.diff(ctx.row_expert) < 0):
        raise RuntimeError("dispatch plan rows are not grouped by ascending expert")
    ctx.segments = [(int(bounds[e]), int(bounds[e + 1])) for e in range(E)]
    T, k = ctx.topk_idx.shape
    index = np.full((T, k), -1, dtype=np.int64)
    routed = np.nonzero(ctx.row_slot >= 0)[0]
    order = routed[np.lexsort((ctx.row_expert[routed], ctx.row_token[routed]))]
    fill = np.zeros(T, dtype=np.int64)
    for r in order:
        t = ctx.row_token[r]
        index[t, fill[t]] = r
        fill[t] += 1
    ctx.combine_index = index
    tok = ctx.row_token
    H = inputs["x"].shape[1]
    ctx.x_rows = np.where((tok >= 0)[:, None], inputs["x"][np.maximum(tok, 0)], 0.0).reshape(-1, H)
    ctx.dy_rows = np.where((tok >= 0)[:, None], inputs["dy"][np.maximum(tok, 0)], 0.0).reshape(-1, H)
    return ctx


# ---- MXFP8 operands as a GEMM sees them -----------------------------------------------------------

def _natural_source(ctx: StageContext, t: dict, name: str) -> np.ndarray:
    """An MX operand's bf16 tensor in its natural layout: dispatched x/dy rows, weights, or a stage."""
    if name == "x":
        return ctx.x_rows
    if name == "dy":
        return ctx.dy_rows
    return ctx.inputs[name] if name in ("w1", "w2") else t[name]


def mx_reference(ctx: StageContext, t: dict, gemm: str, op: str):
    """(codes, scales, fmt, axis): the operand quantized from the backend's own bf16 tensor."""
    src, axis, grad = MX_OPERANDS[gemm][op]
    fmt = ctx.cfg["recipe"].get("grad_format", "e4m3") if grad else "e4m3"
    values = _natural_source(ctx, t, src).astype(np.float32)
    codes, scales = _mx().quantize(values, fmt=fmt, axis=axis,
                                   scale_rounding=ctx.cfg["recipe"].get("scale_rounding", "rceil"))
    return codes, scales, fmt, axis


def _mx():
    from . import mx
    return mx


def gemm_operand(ctx: StageContext, t: dict, gemm: str, op: str, natural: np.ndarray) -> np.ndarray:
    """The natural-layout operand the GEMM multiplies: for mxfp8 the dequantized codes the backend saved
    (its own input to the GEMM), else the quantization of its bf16 tensor; otherwise `natural` itself."""
    if not ctx.mx:
        return natural
    src, axis, grad = MX_OPERANDS[gemm][op]
    key = f"{gemm}.{op}"
    fmt = ctx.cfg["recipe"].get("grad_format", "e4m3") if grad else "e4m3"
    if f"{key}.codes" in t and f"{key}.scales" in t:
        codes, scales = t[f"{key}.codes"], t[f"{key}.scales"]
    else:
        codes, scales, fmt, axis = mx_reference(ctx, t, gemm, op)
    return _mx().dequantize(np.asarray(codes, dtype=np.uint8), np.asarray(scales, dtype=np.uint8),
                            fmt=fmt, axis=axis).astype(np.float64)


# ---- recomputation of each stage --------------------------------------------------------------------

def gemm_interval(c32, absprod, K, post):
    """(ref, pre, lo, hi): the stage value of the exact result and the bound interval after `post`."""
    lo_acc, hi_acc = accumulator_interval(c32, absprod, K)
    ref, pre = post(c32)
    return ref, pre, post(lo_acc)[0], post(hi_acc)[0]


def _map_segments(ctx, fn):
    """fn(e, s, en) over the non-empty expert segments, in threads (the C++ GEMMs release the GIL)."""
    import os
    from concurrent.futures import ThreadPoolExecutor
    todo = [(e, s, en) for e, (s, en) in enumerate(ctx.segments) if en > s]
    workers = min(len(todo), os.cpu_count() or 1)
    if workers <= 1:
        return [(e, s, en, fn(e, s, en)) for e, s, en in todo]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda a: fn(*a), todo))
    return [(e, s, en, p) for (e, s, en), p in zip(todo, parts)]


def _rows_gemm(ctx, t, out_cols, per_expert, dtype):
    """A per-row GEMM stage over every expert segment: per_expert(e, s, en) -> (ref, pre, lo, hi)."""
    R = ctx.row_expert.size
    res = [np.zeros((R, out_cols)) for _ in range(4)]
    for e, s, en, parts in _map_segments(ctx, per_expert):
        for arr, part in zip(res, parts):
            arr[s:en] = part
    ref, pre, lo, hi = res
    return Recomputed(ref=ref, dtype=dtype, expert=ctx.row_experts(out_cols), pre=pre, lo=lo, hi=hi)


def _round_post(dtype):
    return lambda acc: (_core.round_to(acc, dtype), np.asarray(acc, dtype=np.float64))


def _identity_post(c64=None):
    return lambda acc: (np.asarray(acc, dtype=np.float64), c64)


def _h(ctx: StageContext, t: dict) -> Recomputed:
    H, F2 = ctx.inputs["w1"].shape[2], ctx.inputs["w1"].shape[1]
    X = gemm_operand(ctx, t, "fc1_fprop", "A", ctx.x_rows)
    W1 = gemm_operand(ctx, t, "fc1_fprop", "B", ctx.inputs["w1"])

    def seg(e, s, en):
        b1 = ctx.inputs["b1"][e] if ctx.bias else None
        c32, S, _ = _core.exact_gemm_nt(X[s:en], W1[e], b1 if ctx.epilogue else None)
        sep = b1 if ctx.bias and not ctx.epilogue else None
        post = lambda acc: _core.stage_fc1_post(acc, sep, ctx.act_dtype)
        return gemm_interval(c32, S, H + (1 if ctx.epilogue else 0), post)
    return _rows_gemm(ctx, t, F2, seg, ctx.act_dtype)


def _act(ctx, t):
    act, _, _ = _core.stage_act_forward(t["h"], ctx.row_prob, ctx.act_dtype)
    return Recomputed(ref=act, dtype="fp32", expert=ctx.row_experts(act.shape[1]))


def _a(ctx, t):
    _, a, pre = _core.stage_act_forward(t["h"], ctx.row_prob, ctx.act_dtype)
    return Recomputed(ref=a, dtype=ctx.act_dtype, expert=ctx.row_experts(a.shape[1]), pre=pre)


def _o(ctx, t):
    H, F = ctx.inputs["w2"].shape[1:]
    A = gemm_operand(ctx, t, "fc2_fprop", "A", t["a"])
    W2 = gemm_operand(ctx, t, "fc2_fprop", "B", ctx.inputs["w2"])

    def seg(e, s, en):
        c32, S, _ = _core.exact_gemm_nt(A[s:en], W2[e])
        return gemm_interval(c32, S, F, _round_post(ctx.act_dtype))
    return _rows_gemm(ctx, t, H, seg, ctx.act_dtype)


def _b2_rows(ctx):
    return ctx.inputs["b2"][ctx.row_expert] if ctx.bias else None


def _out(ctx, t):
    out, pre = _core.stage_fc2_bias(t["o"], _b2_rows(ctx), ctx.row_prob, ctx.act_dtype)
    return Recomputed(ref=out, dtype=ctx.act_dtype, expert=ctx.row_experts(out.shape[1]), pre=pre)


def _y(ctx, t):
    rows = t["out"] if "out" in t else _core.stage_fc2_bias(t["o"], _b2_rows(ctx), ctx.row_prob, ctx.act_dtype)[0]
    y, pre = _core.stage_combine(rows, ctx.combine_index, ctx.act_dtype)
    return Recomputed(ref=y, dtype=ctx.act_dtype, expert=np.int64(-1), pre=pre)


def _da(ctx, t):
    H, F = ctx.inputs["w2"].shape[1:]
    DY = gemm_operand(ctx, t, "fc2_dgrad", "A", ctx.dy_rows)
    W2 = gemm_operand(ctx, t, "fc2_dgrad", "B", ctx.inputs["w2"])

    def seg(e, s, en):
        c32, S, _ = _core.exact_gemm_nt(DY[s:en], np.ascontiguousarray(W2[e].T))
        return gemm_interval(c32, S, H, _round_post(ctx.act_dtype))
    return _rows_gemm(ctx, t, F, seg, ctx.act_dtype)


def _wgrad(ctx, t, gemm, a_natural, b_natural, shape):
    """dw_e = A_seg^T . B_seg (fp32 output, no rounding after the accumulator); K = rows of the segment."""
    A = gemm_operand(ctx, t, gemm, "A", a_natural)
    B = gemm_operand(ctx, t, gemm, "B", b_natural)
    E = len(ctx.segments)
    ref, pre, lo, hi = (np.zeros((E,) + shape) for _ in range(4))
    def seg(e, s, en):  # an empty expert stays exactly zero
        c32, S, c64 = _core.exact_gemm_nt(np.ascontiguousarray(A[s:en].T), np.ascontiguousarray(B[s:en].T))
        return gemm_interval(c32, S, en - s, _identity_post(c64))
    for e, s, en, parts in _map_segments(ctx, seg):
        ref[e], pre[e], lo[e], hi[e] = parts
    return Recomputed(ref=ref, dtype="fp32", expert=np.arange(E).reshape((E,) + (1,) * len(shape)),
                      pre=pre, lo=lo, hi=hi)


def _dw2(ctx, t):
    H, F = ctx.inputs["w2"].shape[1:]
    return _wgrad(ctx, t, "fc2_wgrad", ctx.dy_rows, t["a"], (H, F))


def _dw1(ctx, t):
    F2, H = ctx.inputs["w1"].shape[1:]
    return _wgrad(ctx, t, "fc1_wgrad", t["dh"], ctx.x_rows, (F2, H))


def _column_sums(ctx, weights_rows, values_rows):
    """out_e[j] = sum_i w_i v_ij over the expert's rows: (ref, pre, lo, hi) as a [E, cols] reduction."""
    E, cols = len(ctx.segments), values_rows.shape[1]
    ref, pre, lo, hi = (np.zeros((E, cols)) for _ in range(4))
    for e, (s, en) in enumerate(ctx.segments):
        if en == s:
            continue
        c32, S, c64 = _core.exact_gemm_nt(weights_rows[None, s:en], np.ascontiguousarray(values_rows[s:en].T))
        ref[e], pre[e], lo[e], hi[e] = gemm_interval(c32[0], S[0], en - s, _identity_post(c64[0]))
    return Recomputed(ref=ref, dtype="fp32", expert=np.arange(E)[:, None], pre=pre, lo=lo, hi=hi)


def _db2(ctx, t):
    return _column_sums(ctx, ctx.row_prob, ctx.dy_rows)


def _db1(ctx, t):
    return _column_sums(ctx, np.ones(ctx.row_expert.size), t["dh"])


def _dh(ctx, t):
    dh, pre = _core.stage_act_backward(t["da"], t["h"], ctx.row_prob, ctx.act_dtype)
    return Recomputed(ref=dh, dtype=ctx.act_dtype, expert=ctx.row_experts(dh.shape[1]), pre=pre)


def _dprobs(ctx, t):
    """dp = dot(da, act) [+ dot(dy, b2)] per routed row. The reference rounds each dot once and adds them
    in fp32 (three roundings, |ref - exact| <= 2.01 u S), so the slack is gamma(F + H + 3) * S."""
    act, _, _ = _core.stage_act_forward(t["h"], ctx.row_prob, ctx.act_dtype)
    d_act, s_act = _core.rowwise_dot_rn(t["da"], act)
    F = act.shape[1]
    if ctx.bias:
        d_b, s_b = _core.rowwise_dot_rn(ctx.dy_rows, _b2_rows(ctx))
        ref_rows = (d_b.astype(np.float32) + d_act.astype(np.float32)).astype(np.float64)
        S, K = s_act + s_b, F + ctx.dy_rows.shape[1] + 3
    else:
        ref_rows, S, K = d_act, s_act, F
    slack = (gamma(K) * S + half_ulp_f32(ref_rows)) * (1.0 + 1e-12)
    T, k = ctx.topk_idx.shape
    ref, lo, hi = np.zeros((T, k)), np.zeros((T, k)), np.zeros((T, k))
    routed = np.nonzero(ctx.row_slot >= 0)[0]
    at = (ctx.row_token[routed], ctx.row_slot[routed])
    ref[at] = ref_rows[routed]
    lo[at] = (ref_rows - slack)[routed]
    hi[at] = (ref_rows + slack)[routed]
    return Recomputed(ref=ref, dtype="fp32", expert=ctx.topk_idx, lo=lo, hi=hi)


def _dx_row(ctx, t):
    F2, H = ctx.inputs["w1"].shape[1:]
    DH = gemm_operand(ctx, t, "fc1_dgrad", "A", t["dh"])
    W1 = gemm_operand(ctx, t, "fc1_dgrad", "B", ctx.inputs["w1"])

    def seg(e, s, en):
        c32, S, _ = _core.exact_gemm_nt(DH[s:en], np.ascontiguousarray(W1[e].T))
        return gemm_interval(c32, S, F2, _round_post(ctx.act_dtype))
    return _rows_gemm(ctx, t, H, seg, ctx.act_dtype)


def _dx(ctx, t):
    dx, pre = _core.stage_combine(t["dx_row"], ctx.combine_index, ctx.act_dtype)
    return Recomputed(ref=dx, dtype=ctx.act_dtype, expert=np.int64(-1), pre=pre)


def _mx_stage(gemm: str, op: str):
    def recompute(ctx, t):
        codes, scales, _, axis = mx_reference(ctx, t, gemm, op)
        src = MX_OPERANDS[gemm][op][0]
        if src in ("w1", "w2"):
            expert = np.arange(codes.shape[0]).reshape(-1, 1, 1)
        else:
            expert = ctx.row_experts(codes.shape[1])
        return Recomputed(ref=codes.astype(np.float64), dtype="codes", expert=expert,
                          ref_scales=scales, axis=axis)
    return recompute


def _mx_stages(gemm: str) -> list:
    """The two MX operand stages of one GEMM (mxfp8 only)."""
    out = []
    for op in ("A", "B"):
        src = MX_OPERANDS[gemm][op][0]
        inputs = tuple(s for s in (src,) if s in ("a", "dh"))
        out.append(Stage(f"{gemm}.{op}", MX, "stages", inputs, _mx_stage(gemm, op), gemm=gemm,
                         recipes=("mxfp8",), doc=f"MXFP8 codes and scales of {gemm} operand {op} ({src})"))
    return out


STAGES: list[Stage] = [
    *_mx_stages("fc1_fprop"),
    Stage("h", GEMM, "stages", (), _h, gemm="fc1_fprop", doc="FC1: x . w1^T (+ b1), the activation's input"),
    Stage("act", EXACT, "stages", ("h",), _act, doc="silu(g) * l, fp32"),
    Stage("a", EXACT, "stages", ("h",), _a, doc="round(silu(g) * l * p), FC2's input"),
    *_mx_stages("fc2_fprop"),
    Stage("o", GEMM, "stages", ("a",), _o, gemm="fc2_fprop", doc="FC2: a . w2^T"),
    Stage("out", EXACT, "stages", ("o",), _out, doc="round(o + b2 * p)"),
    Stage("y", EXACT, "outputs", ("o",), _y, doc="combine: round(sum of out over routed experts, ascending id)"),
    *_mx_stages("fc2_dgrad"),
    Stage("da", GEMM, "stages", (), _da, gemm="fc2_dgrad", doc="FC2 dgrad: dy . w2"),
    *_mx_stages("fc2_wgrad"),
    Stage("dw2", GEMM, "outputs", ("a",), _dw2, gemm="fc2_wgrad", doc="FC2 wgrad: dy^T . a, fp32"),
    Stage("db2", REDUCTION, "outputs", (), _db2, needs_bias=True, doc="sum of p * dy over the expert's rows"),
    Stage("dh", EXACT, "stages", ("da", "h"), _dh, doc="round([da*p*l*silu'(g), da*p*silu(g)])"),
    Stage("dprobs", REDUCTION, "outputs", ("da", "h"), _dprobs, doc="dot(da, act) + dot(dy, b2) per routed row"),
    *_mx_stages("fc1_dgrad"),
    Stage("dx_row", GEMM, "stages", ("dh",), _dx_row, gemm="fc1_dgrad", doc="FC1 dgrad: dh . w1"),
    Stage("dx", EXACT, "outputs", ("dx_row",), _dx, doc="combine of dx_row"),
    *_mx_stages("fc1_wgrad"),
    Stage("dw1", GEMM, "outputs", ("dh",), _dw1, gemm="fc1_wgrad", doc="FC1 wgrad: dh^T . x, fp32"),
    Stage("db1", REDUCTION, "outputs", ("dh",), _db1, needs_bias=True, doc="sum of dh over the expert's rows"),
]


def stage_by_tensor(name: str) -> Stage | None:
    """The stage that checks a saved tensor (an MX stage checks both its codes and its scales)."""
    for st in STAGES:
        if name in st.tensors:
            return st
    return None


def applicable(stage: Stage, cfg: dict) -> bool:
    if stage.recipes and cfg["recipe"]["name"] not in stage.recipes:
        return False
    return not (stage.needs_bias and not cfg["model"]["bias"])


# ---- running the checks -----------------------------------------------------------------------------

@dataclass
class StageResult:
    stage: Stage
    status: str                      # passed | failed | skipped
    reason: str = ""                 # skipped: why; failed: the first failing element
    classes: dict = field(default_factory=dict)       # class name -> count (whole tensor)
    per_expert: dict = field(default_factory=dict)    # expert -> {class -> count}
    per_expert_ulps: dict = field(default_factory=dict)  # expert -> ULP buckets (not for MX stages)
    first: tuple | None = None       # (tensor, index, expert) of the first failing element
    cls: np.ndarray | None = None    # class codes per element (kept for fault injection checks)
    cls_by_tensor: dict = field(default_factory=dict)  # tensor name -> class codes (MX: codes and scales)
    rec: Recomputed | None = None
    metrics: dict = field(default_factory=dict)       # compare() of the tensor vs the recomputation

    @property
    def failing(self) -> int:
        if self.stage.kind in (EXACT, MX):
            return sum(v for k, v in self.classes.items() if k != "bitwise_equal")
        return self.classes.get("bound_violation", 0)


def _backend_tensors(result: dict) -> dict:
    t = {k: v for k, (v, _) in result.get("stages", {}).items()}
    t.update({k: v for k, (v, _) in result.get("outputs", {}).items()})
    return t


def _failing_mask(stage: Stage, cls: np.ndarray) -> np.ndarray:
    return cls != EQUAL if stage.kind in (EXACT, MX) else cls == VIOLATION


def check_stage(ctx: StageContext, stage: Stage, t: dict) -> StageResult:
    from .metrics import compare, ulp_buckets, ulp_spacing
    missing = [n for n in stage.tensors + stage.inputs if n not in t]
    if missing:
        return StageResult(stage, "skipped", f"not saved: {', '.join(missing)}")
    rec = stage.recompute(ctx, t)
    if stage.kind == MX:
        code_cls, scale_cls = classify_mx(t[stage.tensors[0]], t[stage.tensors[1]], rec.ref, rec.ref_scales,
                                          axis=rec.axis)
        parts = [(stage.tensors[1], scale_cls), (stage.tensors[0], code_cls)]  # scales first
        cls = code_cls
    else:
        value = np.asarray(t[stage.name], dtype=np.float64)
        if value.shape != rec.ref.shape:
            return StageResult(stage, "failed", f"{stage.name} has shape {value.shape}, expected {rec.ref.shape}")
        cls = classify(value, rec.ref, rec.dtype, pre=rec.pre, lo=rec.lo, hi=rec.hi)
        parts = [(stage.name, cls)]
    res = StageResult(stage, "passed", cls=cls, rec=rec, cls_by_tensor=dict(parts))
    for _, c in parts:
        for k, v in counts(c).items():
            res.classes[k] = res.classes.get(k, 0) + v
    expert = np.broadcast_to(rec.expert, cls.shape)
    ulps = None
    if stage.kind != MX:
        dtype = rec.dtype if rec.dtype in ("bf16", "fp32", "fp64") else "fp32"
        res.metrics = compare(t[stage.name], rec.ref, dtype)
        absdiff = np.abs(np.asarray(t[stage.name], dtype=np.float64) - rec.ref)
        ulps = absdiff / ulp_spacing(rec.ref, dtype)
    for e in np.unique(expert):
        mask = expert == e
        res.per_expert[int(e)] = counts(cls[mask])
        if ulps is not None:
            res.per_expert_ulps[int(e)] = {**ulp_buckets(ulps[mask], skip_nan=True),
                                           "max_abs": float(np.nanmax(absdiff[mask])) if mask.any() else 0.0}
    for tensor, c in parts:
        bad = np.argwhere(_failing_mask(stage, c))
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            e = int(expert[index]) if tensor == stage.tensors[0] or stage.kind != MX else -1
            res.status, res.first = "failed", (tensor, index, e)
            break
    if res.status == "failed":
        res.reason = describe_failure(ctx, res, t)
    return res


def describe_failure(ctx: StageContext, res: StageResult, t: dict) -> str:
    stage, (tensor, index, _) = res.stage, res.first
    where = ctx.locate(stage, tensor, index)
    n_bad = res.failing
    kind = f"{stage.kind} {stage.gemm}".strip() if stage.gemm else stage.kind
    head = f"stage {stage.name} ({kind}): {where}"
    if stage.kind == MX:
        if tensor.endswith(".scales"):
            ref = res.rec.ref_scales[index]
        else:
            ref = res.rec.ref[index]
        return f"{head}: {int(t[tensor][index])} vs recomputed {int(ref)}; {n_bad} element(s) differ"
    v, ref = float(t[tensor][index]), float(res.rec.ref[index])
    cls = CLASSES[int(res.cls[index])]
    if stage.kind == EXACT:
        return f"{head}: {v!r} vs recomputed {ref!r} ({cls}); {n_bad} element(s) differ"
    lo, hi = float(res.rec.lo[index]), float(res.rec.hi[index])
    return (f"{head}: {v!r} outside the bound [{lo!r}, {hi!r}] around the reference {ref!r}; "
            f"{n_bad} bound violation(s)")


def check_backend(ctx: StageContext, result: dict) -> list[StageResult]:
    t = _backend_tensors(result)
    return [check_stage(ctx, st, t) for st in STAGES if applicable(st, ctx.cfg)]


def summarize(backend: str, results: list[StageResult]) -> tuple[bool, str]:
    """The /checks/stage.<backend> verdict: the first failing stage, expert and element, or a summary."""
    failed = [r for r in results if r.status == "failed"]
    checked = [r for r in results if r.status != "skipped"]
    skipped = [r.stage.name for r in results if r.status == "skipped"]
    if not checked:
        return True, f"no stage tensors saved by {backend}; nothing checked"
    if failed:
        first = failed[0]
        more = f"; later failing stages: {', '.join(r.stage.name for r in failed[1:])}" if len(failed) > 1 else ""
        return False, f"first failing {first.reason}{more}"
    parts = []
    for r in checked:
        c = r.classes
        bits = [f"{c['bitwise_equal']} equal"]
        for k in ("tie_flip", "scale_off_by_one", "within_bound"):
            if c.get(k):
                bits.append(f"{c[k]} {k.replace('_', ' ')}")
        parts.append(f"{r.stage.name} ({', '.join(bits)})")
    skip = f"; not saved: {', '.join(skipped)}" if skipped else ""
    return True, f"{len(checked)} stages passed: {'; '.join(parts)}{skip}"


STAGE_TABLE_COLUMNS = ["backend", "stage", "kind", "expert", "n", *CLASSES, "max_ulp", "ulp_le0", "ulp_le1",
                       "ulp_le2", "ulp_gt2", "max_abs", "status"]


def stage_table_rows(backend: str, results: list[StageResult]) -> list[dict]:
    rows = []
    for r in results:
        if r.status == "skipped":
            continue
        base = {"backend": backend, "stage": r.stage.name, "kind": r.stage.kind, "status": r.status}
        m = r.metrics or {}
        whole = {**base, "expert": -1, "n": int(sum(r.classes.values())), **r.classes,
                 **{k: m.get(k, -1) for k in ("max_ulp", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "max_abs")}}
        rows.append(whole)
        for e, c in sorted(r.per_expert.items()):
            if e < 0:
                continue
            u = r.per_expert_ulps.get(e, {})
            rows.append({**base, "expert": e, "n": int(sum(c.values())), **c,
                         **{k: u.get(k, -1) for k in ("max_ulp", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2",
                                                      "max_abs")}})
    return rows
