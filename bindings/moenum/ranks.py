"""Which EP ranks a scenario point simulates (`dispatch.ranks`; interfaces.md, additions 2026-12).

The plan is made as for the full run, then only the simulated ranks keep their rows
(core/src/dispatch_plan.cpp applies the same rule in C++). With a subset of the ranks, y and dx are
the partial sums over the simulated ranks' experts (what those ranks hold before the combine
all-to-all), dprobs holds only the routed pairs of those experts, and the dw/db of every other
expert are not computed (left zero).
"""
from __future__ import annotations

import numpy as np


def simulated_ranks(cfg: dict) -> list[int]:
    """The simulated ranks, ascending; all of them when `dispatch.ranks` is unset (or in files
    written before the key existed)."""
    d = cfg["dispatch"]
    return sorted(d.get("ranks") or range(d["ep"]))


def is_partial(cfg: dict) -> bool:
    """True when some rank is left out: y, dx and dprobs are then partial."""
    return len(simulated_ranks(cfg)) < cfg["dispatch"]["ep"]


def partial_experts(cfg: dict) -> list[int] | None:
    """The global ids of the simulated ranks' experts, ascending, when some rank is left out; None
    when every rank is simulated."""
    if not is_partial(cfg):
        return None
    per_rank = cfg["model"]["experts"] // cfg["dispatch"]["ep"]
    return [r * per_rank + le for r in simulated_ranks(cfg) for le in range(per_rank)]


def results_attributes(cfg: dict) -> dict:
    """The results file's root attributes that say what was simulated (README: results file)."""
    return {"simulated_ranks": np.asarray(simulated_ranks(cfg), dtype=np.int64),
            "partial_sums": is_partial(cfg)}
