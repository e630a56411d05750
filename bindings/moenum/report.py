"""Human-readable error tables: the short table after a run, and `moenum report` (every point's
error table, or one summary line per point: the default for a folder)."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from .disposition import ERROR, FAILED, NOT_VERIFIED, PASSED
from .errors import ScenarioError
from .traits import under_test

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
    if limit is not None:
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
    if limit is not None:
        t = t.head(limit)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 1000,
                           "display.float_format", "{:.3g}".format):
        return t.to_string(index=False)


# ---- moenum report ------------------------------------------------------------------------------

SEVERITY = {ERROR: 0, FAILED: 1, NOT_VERIFIED: 2, PASSED: 3}  # summary order: worst points first


def check_limit(limit: int | None) -> int | None:
    """--limit N: the worst N rows (or points); left out, all of them. 0 or less is bad input, not
    "everything" or "all but the last N"."""
    if limit is not None and limit < 1:
        raise ScenarioError(f"must be >= 1 (the worst N rows; leave it out for all), got {limit}", key="--limit")
    return limit


def failed_checks(result) -> list[str]:
    return [name for name, ok in result.checks.items() if not ok]


def shown_dispositions(result) -> dict:
    """Each backend's disposition as the report shows it: `failed` when a failed check of the point
    names the backend (`inject.cpu.eigen.dw1`, `stage.cpu.eigen`), even where the stored disposition
    says passed: an undetected injected fault is the harness failing on that backend."""
    failed = [f".{name}." for name in failed_checks(result)]
    return {b: FAILED if d == PASSED and any(f".{b}." in name for name in failed) else d
            for b, d in result.disposition.items()}


def point_table(result, by=None, limit=None) -> str:
    errors = result.errors
    if not errors.empty and "disposition" in errors:
        shown = shown_dispositions(result)
        errors = errors.assign(disposition=errors.backend.map(shown).fillna(errors.disposition))
    return format_table(errors, by=by, limit=limit)


def summary_row(result) -> dict:
    """One point: verdict, the worst whole-tensor error against golden (backends under test, else the
    reference oracle), bound violations (-1 when nothing was checked), failed checks."""
    t = result.errors
    vs_golden = t[(t.other == "golden") & (t.expert == -1) & (t.backend != "golden")] if not t.empty else t
    tested = vs_golden[vs_golden.backend.map(under_test)] if not vs_golden.empty else vs_golden
    pool = tested if not tested.empty else vs_golden
    worst, worst_value = "-", float("nan")
    if not pool.empty:
        row = pool.loc[pool.rel_fro.idxmax()]
        worst, worst_value = f"{row.backend} {row.tensor}", float(row.rel_fro)
    counted = t.bound_violations[(t.expert == -1) & (t.bound_violations >= 0)] if not t.empty else []
    return {"point": result.name, "verdict": str(result.verdict), "worst vs golden": worst,
            "rel_fro": worst_value, "bound_violations": int(sum(counted)) if len(counted) else -1,
            "failed checks": ", ".join(failed_checks(result)) or "-"}


def format_summary(results, limit=None) -> str:
    if not results:
        return "(no readable results files)"
    table = pd.DataFrame([summary_row(r) for r in results])
    order = table.verdict.map(SEVERITY).fillna(len(SEVERITY))
    table = table.assign(_order=order).sort_values(["_order", "rel_fro"], ascending=[True, False],
                                                   kind="stable").drop(columns="_order")
    if limit is not None:
        table = table.head(limit)
    with pd.option_context("display.width", 250, "display.max_columns", 10, "display.max_rows", None,
                           "display.max_colwidth", 120, "display.float_format", "{:.3g}".format):
        return table.to_string(index=False)


def results_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    files = sorted(path.glob("*.h5"))
    if not files:
        raise ScenarioError("no results files (*.h5) in this folder", str(path))
    return files


def report(path, by=None, limit=None, stages=False, summary=None) -> int:
    """`moenum report`: a file's error table, or a folder's summary (one line per point; `summary`
    False gives every point's table). An unreadable file in a folder is named on stderr, skipped and
    counted, and the exit code is then 2 (bad input); a single unreadable file is bad input."""
    from .result import open_results
    path = Path(path)
    check_limit(limit)
    if summary is None:
        summary = path.is_dir() and not (by or stages)
    if summary and (by or stages):
        raise ScenarioError("--by and --stages show full tables: use them without --summary", key="--summary")
    files = results_files(path)
    results, skipped = [], 0
    for f in files:
        try:
            r = open_results(f)
        except ScenarioError as e:
            if not path.is_dir():
                raise
            print(f"moenum: skipped: {e}", file=sys.stderr)
            skipped += 1
            continue
        results.append(r)
        if not summary:
            _print_point(r, f, by, limit, stages)
    if summary:
        print(format_summary(results, limit))
    if path.is_dir():
        counts = ", ".join(f"{sum(r.verdict == v for r in results)} {v}" for v in SEVERITY
                           if any(r.verdict == v for r in results))
        print(f"# report: {len(results)} of {len(files)} results files read ({counts or 'none'})"
              + (f", {skipped} unreadable skipped" if skipped else ""))
    return 2 if skipped else 0


def _print_point(r, f, by, limit, stages):
    print(f"== {r.name}  ({f}): {r.verdict}")
    for name in failed_checks(r):
        print(f"   check FAILED {name}: {r.check_details.get(name, '')}")
    try:
        print(point_table(r, by=by, limit=limit))
    except KeyError as e:
        raise ScenarioError(str(e.args[0]), key="--by") from None
    if stages:
        print(f"-- stage checks (teacher-forced) of {r.name}")
        print(format_stage_table(r.stage_table, per_expert=bool(by and "expert" in by), limit=limit))
