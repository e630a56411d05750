"""One backend of one scenario point on one EP rank of a real EP run (numerics.md §3's plan, for real).

Rank r is both a source rank (it holds tokens [r T/P, (r+1) T/P): their x, dy and routing probs) and
an expert rank (it holds experts [r E/P, (r+1) E/P)). The rows move as the dispatch plan says:

1. dispatch: each source rank sends every plan row of its tokens to the row's expert rank (x and the
   row's prob forward, dy backward), in the receiving rank's plan order;
2. the expert rank runs its local experts with the chosen backend, on a problem that holds only what
   it received (every other token's x and dy is NaN, so a row that did not arrive cannot go unseen);
3. combine: the routed rows' outputs (out, dx_row, dprob) go back to their tokens' source ranks, which
   sum each token's rows in ascending expert id and round once (the backends' own combine rule);
4. rank 0 gathers y, dx and dprobs from the source ranks, the weight gradients from the expert ranks
   and, when they are checked or written, the per-row stage tensors (in plan order), and returns the
   result a local run returns: the runner then verifies and writes the one results file.
"""
from __future__ import annotations

import numpy as np

from .. import _core
from ..disposition import NOT_SUPPORTED, ran_ok

GRADIENTS = ("dw1", "dw2", "db1", "db2")


def _weight_stage_tensors() -> set[str]:
    """The MX operand stage tensors of the weights: one per expert (shape E x ...), not per row."""
    return {f"{g['name']}.{op}.{part}" for g in _core.GEMMS for op in ("A", "B")
            if g[op]["source"] in ("w1", "w2") for part in ("codes", "scales")}


class RankLayout:
    """Which tokens and experts each rank holds, and the plan's rows between them."""

    def __init__(self, prepared, ep: int):
        self.plan = prepared.plan["ranks"]
        self.topk_idx, self.probs = prepared.topk_idx, prepared.probs
        self.P = ep
        self.T, self.k = self.topk_idx.shape
        self.T_rank = self.T // ep

    def source_of(self, tokens: np.ndarray) -> np.ndarray:
        return tokens // self.T_rank

    def token_range(self, rank: int) -> tuple[int, int]:
        return rank * self.T_rank, (rank + 1) * self.T_rank

    def rows_from(self, expert_rank: int, source_rank: int, routed_only: bool = False) -> np.ndarray:
        """Indices into expert_rank's plan rows of source_rank's tokens, in plan order."""
        p = self.plan[expert_rank]
        lo, hi = self.token_range(source_rank)
        mask = (p["row_token"] >= lo) & (p["row_token"] < hi)
        if routed_only:
            mask &= p["row_slot"] >= 0
        return np.nonzero(mask)[0]

    def row_probs(self, expert_rank: int, rows: np.ndarray) -> np.ndarray:
        """The probs a source rank sends with its rows: the routing prob of (token, slot), 0 for a
        router pad row."""
        p = self.plan[expert_rank]
        slot = p["row_slot"][rows]
        tok = p["row_token"][rows]
        return np.where(slot >= 0, self.probs[tok, np.maximum(slot, 0)], np.float32(0)).astype(np.float32)


def dispatch(world, transport, layout: RankLayout, full_inputs: dict, local) -> None:
    """Steps 1: this rank's tokens to their expert ranks; what arrives becomes `local`'s inputs."""
    r = world.rank
    sends = [layout.rows_from(d, r) for d in range(layout.P)]
    tokens_to = [layout.plan[d]["row_token"][rows] for d, rows in enumerate(sends)]
    x_recv = transport.alltoallv([full_inputs["x"][t] for t in tokens_to], "the dispatch of x")
    p_recv = transport.alltoallv([layout.row_probs(d, rows)[:, None] for d, rows in enumerate(sends)],
                                 "the dispatch of the probs")
    dy_recv = transport.alltoallv([full_inputs["dy"][t] for t in tokens_to], "the dispatch of dy")

    mine = layout.plan[r]
    x, dy = local.inputs["x"], local.inputs["dy"]
    x[...] = np.nan
    dy[...] = np.nan
    row_prob = np.zeros(len(mine["row_token"]), dtype=np.float32)
    for s in range(layout.P):
        rows = layout.rows_from(r, s)
        tok = mine["row_token"][rows]
        x[tok], dy[tok] = x_recv[s], dy_recv[s]
        row_prob[rows] = p_recv[s][:, 0]
    _core.ep_set_row_prob(local, r, row_prob)


def _out_rows(result: dict, mine: dict, local) -> np.ndarray:
    """The rows the combine sums: the backend's `out` stage, or (a backend whose combine kernel adds
    the FC2 bias) `o` with the bias added by the layer's rule."""
    stages, y_dtype = result["stages"], result["outputs"]["y"][1]
    if "out" in stages:
        return stages["out"][0]
    o = stages["o"][0]
    b2 = local.inputs["b2"] if "db2" in result["outputs"] else None
    return _core.ep_out_rows(o, b2, mine["row_expert"], mine["row_prob"], y_dtype)


def combine(world, transport, layout: RankLayout, result: dict, local) -> dict:
    """Step 3: the routed rows back to their source ranks; returns this rank's tokens' y, dx, dprobs."""
    r = world.rank
    mine = layout.plan[r]
    out = _out_rows(result, mine, local)
    dx_rows = result["stages"]["dx_row"][0]
    dprobs = result["outputs"]["dprobs"][0]
    back = [layout.rows_from(r, s, routed_only=True) for s in range(layout.P)]
    dp_rows = [dprobs[mine["row_token"][rows], mine["row_slot"][rows]][:, None] for rows in back]
    out_recv = transport.alltoallv([out[rows] for rows in back], "the combine of y")
    dx_recv = transport.alltoallv([dx_rows[rows] for rows in back], "the combine of dx")
    dp_recv = transport.alltoallv(dp_rows, "the combine of dprobs")

    lo, _ = layout.token_range(r)
    arrived = [layout.rows_from(d, r, routed_only=True) for d in range(layout.P)]
    token = np.concatenate([layout.plan[d]["row_token"][a] for d, a in enumerate(arrived)]) - lo
    expert = np.concatenate([layout.plan[d]["row_expert"][a] for d, a in enumerate(arrived)])
    slot = np.concatenate([layout.plan[d]["row_slot"][a] for d, a in enumerate(arrived)])
    y_dtype, dx_dtype = result["outputs"]["y"][1], result["outputs"]["dx"][1]
    y = _core.ep_combine(np.concatenate(out_recv), token, expert, layout.T_rank, y_dtype)
    dx = _core.ep_combine(np.concatenate(dx_recv), token, expert, layout.T_rank, dx_dtype)
    dp = np.zeros((layout.T_rank, layout.k), dtype=dprobs.dtype)
    dp[token, slot] = np.concatenate(dp_recv)[:, 0]
    return {"y": y, "dx": dx, "dprobs": dp}


def _gather_rows(world, a: np.ndarray, what: str) -> np.ndarray | None:
    """Each rank's block of rows, concatenated in rank order on rank 0."""
    a = np.ascontiguousarray(a)
    parts = world.gather_bytes(a, what)
    if parts is None:
        return None
    return np.concatenate([p.view(a.dtype).reshape((-1, *a.shape[1:])) for p in parts])


def gather(world, layout: RankLayout, result: dict, combined: dict, stage_names: list[str],
           experts_per_rank: int) -> dict | None:
    """Step 4: the whole layer's outputs (and the stages asked for) on rank 0; None elsewhere."""
    outputs, stages = {}, {}
    for name, (a, dtype) in result["outputs"].items():
        if name in combined:
            block = combined[name]
        else:  # a weight gradient: this rank's experts
            lo = world.rank * experts_per_rank
            block = a[lo:lo + experts_per_rank]
        outputs[name] = (_gather_rows(world, block, f"the gather of {name}"), dtype)
    weights = _weight_stage_tensors()
    for name in stage_names:
        a, dtype = result["stages"][name]
        if name in weights:
            lo = world.rank * experts_per_rank
            a = a[lo:lo + experts_per_rank]
        stages[name] = (_gather_rows(world, a, f"the gather of the stage {name}"), dtype)
    if not world.is_root:
        return None
    return {"outputs": outputs, "stages": stages}


def run_backend(world, transport, name: str, sc, prepared, keep_stages: bool, run_local) -> dict | None:
    """One backend on this rank; the merged result on rank 0 (as `run_local` returns it), None elsewhere.

    run_local(name, core_sc, prepared, sc, keep_stages) runs a backend on one process (runner._run_backend)."""
    from .. import traits
    from ..scenario import to_core
    r, cfg = world.rank, sc.config
    if traits.is_external(name):  # the same answer on every rank: none goes on to an exchange alone
        if not world.is_root:
            return None
        return {"disposition": NOT_SUPPORTED, "reason": "external backends run with dispatch.transport local"}
    layout = RankLayout(prepared, world.size)
    local_core = to_core(sc)  # the same point with only this rank's experts (dispatch.ranks: [r])
    d = local_core.dispatch
    d.ranks = [r]
    local_core.dispatch = d
    local = _core.prepare(local_core)
    dispatch(world, transport, layout, prepared.inputs, local)
    res = run_local(name, local_core, local, sc, True)

    statuses = world.allgather_object((res["disposition"], res.get("reason", "")), f"the end of {name}")
    failed = [(s, d, why) for s, (d, why) in enumerate(statuses) if not ran_ok(d)]
    if failed:  # every rank sees the same list, so none goes on to an exchange alone
        if not world.is_root:
            return None
        s, d, why = failed[0]
        return {"disposition": d, "reason": f"rank {s}: {why}" if world.size > 1 else why}
    combined = combine(world, transport, layout, res, local)
    keep = sorted(res["stages"]) if keep_stages else []
    merged = gather(world, layout, res, combined, keep, cfg["model"]["experts"] // world.size)
    seconds = world.allgather_object(float(res.get("seconds", 0.0)), f"the timings of {name}")
    if merged is None:
        return None
    attrs = dict(res.get("attrs", {}))
    attrs["seconds_per_rank"] = ", ".join(f"{t:.6f}" for t in seconds)
    return {**res, **merged, "attrs": attrs, "seconds": max(seconds)}
