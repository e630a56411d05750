"""Human-readable error tables: the short table after a run, and `moenum report`."""
from __future__ import annotations

import pandas as pd

SUMMARY_COLUMNS = ["backend", "other", "tensor", "max_abs", "max_rel", "rel_fro", "max_ulp",
                   "bitwise_equal", "n", "disposition"]


def format_table(table: pd.DataFrame, by: list[str] | None = None, limit: int | None = None) -> str:
    """Group by `by` (default: the whole-tensor rows), worst (largest rel_fro) first."""
    if table.empty:
        return "(empty error table)"
    if by:
        unknown = [c for c in by if c not in table.columns]
        if unknown:
            raise KeyError(f"unknown column(s) {', '.join(unknown)} (columns: {', '.join(table.columns)})")
        t = table if "expert" in by else table[table.expert == -1]
        keys = list(dict.fromkeys(["backend", "other", *by]))
        agg = t.groupby(keys, sort=False).agg(
            max_abs=("max_abs", "max"), max_rel=("max_rel", "max"), rel_fro=("rel_fro", "max"),
            max_ulp=("max_ulp", "max"), bitwise_equal=("bitwise_equal", "sum"), n=("n", "sum"),
            disposition=("disposition", "first")).reset_index()
    else:
        agg = table[table.expert == -1][SUMMARY_COLUMNS]
    agg = agg.sort_values("rel_fro", ascending=False, kind="stable")
    if limit:
        agg = agg.head(limit)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 500,
                           "display.float_format", "{:.3g}".format):
        return agg.to_string(index=False)


STAGE_SUMMARY_COLUMNS = ["backend", "stage", "kind", "n", "bitwise_equal", "scale_off_by_one", "tie_flip",
                         "within_bound", "bound_violation", "max_ulp", "status"]


def format_stage_table(stages: pd.DataFrame, per_expert: bool = False, limit: int | None = None) -> str:
    """The teacher-forced stage checks: whole tensors (or every expert), worst first (bound
    violations, then the largest ULP distance)."""
    if stages is None or stages.empty:
        return "(no stage checks in this file)"
    t = stages if per_expert else stages[stages.expert == -1]
    cols = [c for c in STAGE_SUMMARY_COLUMNS if c in t.columns]
    if per_expert:
        cols.insert(2, "expert")
    t = t.sort_values(["bound_violation", "max_ulp"], ascending=False, kind="stable")[cols]
    if limit:
        t = t.head(limit)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 1000,
                           "display.float_format", "{:.3g}".format):
        return t.to_string(index=False)
