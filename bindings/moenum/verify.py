"""Verification of one scenario point: the error table, backend dispositions and named checks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import COLUMNS, coarser, compare

# Tensors whose leading dimension is the expert: they also get one row per expert.
EXPERT_TENSORS = ("dw1", "dw2", "db1", "db2")
# Sanity bound on the recipe's error against the fp64 golden run (relative Frobenius, y and dx):
# far above what the arithmetic gives, far below what a wiring bug gives.
RECIPE_TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2, "mxfp8": 2e-1}


def comparison_pairs(backends: list[str], baseline: str) -> list[tuple[str, str]]:
    """Every backend against golden and against the baseline (interfaces.md: compare)."""
    pairs = []
    for b in backends:
        for other in ("golden", baseline):
            if other != b and other in backends and (b, other) not in pairs:
                pairs.append((b, other))
    return pairs


def error_table(results: dict, backends: list[str], baseline: str, topk_idx: np.ndarray) -> pd.DataFrame:
    rows = []
    for backend, other in comparison_pairs(backends, baseline):
        ra, rb = results.get(backend), results.get(other)
        if not ra or not rb or "outputs" not in ra or "outputs" not in rb:
            continue
        for tensor, (a, dtype_a) in ra["outputs"].items():
            if tensor not in rb["outputs"]:
                continue
            b, dtype_b = rb["outputs"][tensor]
            dtype = coarser(dtype_a, dtype_b)
            base = {"backend": backend, "other": other, "tensor": tensor,
                    "bound_violations": -1,  # -1: the per-element GEMM bound was not checked
                    "disposition": ra["disposition"]}
            rows.append({**base, "expert": -1, **compare(a, b, dtype)})
            if tensor in EXPERT_TENSORS:
                for e in range(a.shape[0]):
                    rows.append({**base, "expert": e, **compare(a[e], b[e], dtype)})
            elif tensor == "dprobs":
                for e in np.unique(topk_idx):
                    mask = topk_idx == e
                    rows.append({**base, "expert": int(e), **compare(a[mask], b[mask], dtype)})
    return pd.DataFrame(rows, columns=COLUMNS)


def output_checks(name: str, result: dict, expected: dict) -> dict:
    """Every expected output present, with the right shape, and finite."""
    checks = {}
    outs = result.get("outputs", {})
    missing = [t for t in expected if t not in outs]
    bad_shape = [t for t, shape in expected.items() if t in outs and tuple(outs[t][0].shape) != shape]
    nonfinite = [t for t, (v, _) in outs.items() if not np.all(np.isfinite(v))]
    ok = not (missing or bad_shape or nonfinite)
    detail = "; ".join(filter(None, [
        missing and f"missing {', '.join(missing)}",
        bad_shape and f"wrong shape {', '.join(bad_shape)}",
        nonfinite and f"non-finite values in {', '.join(nonfinite)}"])) or "all outputs present and finite"
    checks[f"outputs_complete.{name}"] = (ok, detail)
    return checks


def recipe_error_check(name: str, recipe: str, table: pd.DataFrame) -> dict:
    tol = RECIPE_TOLERANCE.get(recipe)
    if tol is None or table.empty:
        return {}
    rows = table[(table.backend == name) & (table.other == "golden") & (table.expert == -1)
                 & table.tensor.isin(["y", "dx"])]
    if rows.empty:
        return {}
    worst = rows.loc[rows.rel_fro.idxmax()]
    ok = bool(worst.rel_fro <= tol)
    detail = f"max rel_fro vs golden {worst.rel_fro:.3e} ({worst.tensor}); tolerance {tol:.0e} for {recipe}"
    return {f"recipe_error.{name}": (ok, detail)}


def expected_shapes(cfg: dict) -> dict:
    m, T = cfg["model"], cfg["tokens"]
    E, H, F, k = m["experts"], m["hidden"], m["ffn"], m["topk"]
    shapes = {"y": (T, H), "dx": (T, H), "dw1": (E, 2 * F, H), "dw2": (E, H, F), "dprobs": (T, k)}
    if m["bias"]:
        shapes.update(db1=(E, 2 * F), db2=(E, H))
    return shapes
