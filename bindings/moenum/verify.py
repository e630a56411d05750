"""Verification of one scenario point: the error table, backend dispositions and named checks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _core, traits
from .disposition import ran_ok

# The error table's columns (interfaces.md, plus the non-finite counts); the statistics come from
# core/verify/error_stats.h: nonfinite = elements NaN in both or the same infinity in both (equal, out
# of the sums), nonfinite_mismatch = a non-finite value against anything else.
COLUMNS = ["backend", "other", "tensor", "expert", "n", "max_abs", "max_rel", "mean_abs", "rel_fro",
           "calc_diff", "max_ulp", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "bitwise_equal",
           "bound_violations", "disposition", "nonfinite", "nonfinite_mismatch"]
_STAT_COLUMNS = COLUMNS[4:16] + ["nonfinite", "nonfinite_mismatch"]
# Input regimes whose values make non-finite outputs correct (NaN, +-inf, overflow past the fp32 range).
NONFINITE_REGIMES = ("special", "near_overflow")

# Tensors whose leading dimension is the expert: they also get one row per expert.
EXPERT_TENSORS = ("dw1", "dw2", "db1", "db2")
# Sanity bound on the recipe's error against the fp64 golden run (relative Frobenius, y and dx):
# far above what the arithmetic gives, far below what a wiring bug gives.
RECIPE_TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2, "mxfp8": 2e-1}


def comparison_pairs(backends: list[str], baseline: str) -> list[tuple[str, str]]:
    """Every backend against golden and against the baseline (interfaces.md: compare). Golden is the
    yardstick, not a backend under test: its row against the baseline would only mirror the
    baseline's row against golden."""
    pairs = []
    for b in backends:
        if b == "golden" and baseline != "golden":
            continue
        for other in ("golden", baseline):
            if other != b and other in backends and (b, other) not in pairs:
                pairs.append((b, other))
    return pairs


def error_table(results: dict, backends: list[str], baseline: str, topk_idx: np.ndarray,
                experts: list[int] | None = None) -> pd.DataFrame:
    """experts: the experts that computed (moenum.ranks, dispatch.ranks), None = all. The other experts'
    gradients and dprobs were not computed, so their rows are left out, also from the whole-tensor rows."""
    rows = []
    routed = np.ones(topk_idx.shape, dtype=bool) if experts is None else np.isin(topk_idx, experts)
    for backend, other in comparison_pairs(backends, baseline):
        ra, rb = results.get(backend), results.get(other)
        if not ra or not rb or "outputs" not in ra or "outputs" not in rb:
            continue
        for tensor, (a, dtype_a) in ra["outputs"].items():
            if tensor not in rb["outputs"]:
                continue
            b, dtype_b = rb["outputs"][tensor]
            base = {"backend": backend, "other": other, "tensor": tensor,
                    "bound_violations": -1,  # -1: the per-element GEMM bound was not checked
                    "disposition": ra["disposition"]}
            stat_rows = lambda pairs: rows.extend({**base, "expert": e, **{c: st[c] for c in _STAT_COLUMNS}}
                                                  for e, st in pairs)
            whole = lambda x, y: _core.error_stats(x, dtype_a, y, dtype_b)[0][1]
            if experts is None:  # every expert computed: whole tensor and per-expert rows in one pass
                labels = np.asarray(topk_idx, dtype=np.int64).ravel() if tensor == "dprobs" else None
                stat_rows(_core.error_stats(a, dtype_a, b, dtype_b, labels, leading_expert=tensor in EXPERT_TENSORS))
            elif tensor in EXPERT_TENSORS:
                stat_rows([(-1, whole(a[experts], b[experts]))] + [(e, whole(a[e], b[e])) for e in experts])
            elif tensor == "dprobs":
                stat_rows([(-1, whole(a[routed], b[routed]))] +
                          [(int(e), whole(a[topk_idx == e], b[topk_idx == e])) for e in np.unique(topk_idx[routed])])
            else:
                stat_rows([(-1, whole(a, b))])
    return pd.DataFrame(rows, columns=COLUMNS)


def nonfinite_expected(cfg: dict) -> bool:
    """Whether the inputs can make non-finite outputs correct: a regime with NaN, inf or overflow."""
    return any(reg["regime"] in NONFINITE_REGIMES for reg in cfg.get("inputs", {}).values())


def output_checks(name: str, result: dict, expected: dict, nonfinite_ok: bool = False) -> dict:
    """Every expected output present, with the right shape, and finite unless the inputs make
    non-finite values correct (nonfinite_ok: then the stage checks judge them, element by element)."""
    checks = {}
    outs = result.get("outputs", {})
    missing = [t for t in expected if t not in outs]
    bad_shape = [t for t, shape in expected.items() if t in outs and tuple(outs[t][0].shape) != shape]
    counts = {t: int(_core.count_nonfinite(v)) for t, (v, _) in outs.items()}
    nonfinite = [f"{t} ({n})" for t, n in counts.items() if n]
    ok = not (missing or bad_shape or (nonfinite and not nonfinite_ok))
    detail = "; ".join(filter(None, [
        missing and f"missing {', '.join(missing)}",
        bad_shape and f"wrong shape {', '.join(bad_shape)}",
        nonfinite and f"non-finite values in {', '.join(nonfinite)}"])) or "all outputs present and finite"
    if ok and nonfinite:
        detail = f"all outputs present; {detail}, as the input regimes allow"
    checks[f"outputs_complete.{name}"] = (ok, detail)
    return checks


def recipe_error_check(name: str, recipe: str, table: pd.DataFrame, nonfinite_ok: bool = False) -> dict:
    """rel_fro of y and dx against golden over the elements finite in both, within the recipe's
    tolerance; elements non-finite in only one of them fail it unless the inputs make them correct
    (golden, in fp64 without the recipe's rounding, overflows and quantizes differently)."""
    tol = RECIPE_TOLERANCE.get(recipe)
    if tol is None or table.empty:
        return {}
    rows = table[(table.backend == name) & (table.other == "golden") & (table.expert == -1)
                 & table.tensor.isin(["y", "dx"])]
    if rows.empty:
        return {}
    worst = rows.loc[rows.rel_fro.fillna(np.inf).idxmax()]
    mismatched = int(rows.nonfinite_mismatch.sum())
    ok = bool(worst.rel_fro <= tol) and (nonfinite_ok or mismatched == 0)
    detail = f"max rel_fro vs golden {worst.rel_fro:.3e} ({worst.tensor}); tolerance {tol:.0e} for {recipe}"
    if mismatched:
        detail += f"; {mismatched} elements of y, dx non-finite in only one of {name}, golden"
    return {f"recipe_error.{name}": (ok, detail)}


def expected_shapes(cfg: dict) -> dict:
    m, T = cfg["model"], cfg["tokens"]
    E, H, F, k = m["experts"], m["hidden"], m["ffn"], m["topk"]
    shapes = {"y": (T, H), "dx": (T, H), "dw1": (E, 2 * F, H), "dw2": (E, H, F), "dprobs": (T, k)}
    if m["bias"]:
        shapes.update(db1=(E, 2 * F), db2=(E, H))
    return shapes


# ---- teacher-forced stage checks (numerics.md §7), bound violations, the stage table ----------------

def stage_checks(cfg: dict, prepared, results: dict, backends: list[str], include=(), probes=None,
                 more_to_check: bool = False) -> tuple[dict, dict]:
    """Run the stage checks (core/verify) over every backend under test that ran. The oracles are not
    checked: golden is fp64 without the recipe's rounding points; reference is the oracle the checks
    recompute (checking it is a self-test of the harness, tests/python/test_verify_stages.py; naming
    it in `include`, as an injection into it does, turns its check on). probes: backend ->
    [(tensor, index)] elements whose classes are reported (planted faults). more_to_check: another
    backend of the point is checked after these (the expected codes drawn from the inputs are kept).

    Returns (checks, reports): checks `stage.<backend>` -> (passed, detail) and reports backend -> list
    of stages.StageResult (class counts, first failing element)."""
    from . import stages
    sample = cfg.get("verify", {}).get("sample", "auto")
    checks, reports = {}, {}
    checked = [name for name in backends if name != "golden" and (traits.under_test(name) or name in include)
               and results.get(name) and "outputs" in results[name] and ran_ok(results[name]["disposition"])]
    for i, name in enumerate(checked):
        reports[name], (passed, detail) = stages.check_backend(name, prepared, results[name], sample,
                                                                 (probes or {}).get(name, ()),
                                                                 cfg["recipe"].get("accumulate", "ideal"),
                                                                 keep_input_codes=more_to_check or i + 1 < len(checked))
        checks[f"stage.{name}"] = (passed, detail)
    return checks, reports


def fill_bound_violations(table: pd.DataFrame, reports: dict, baseline: str) -> pd.DataFrame:
    """bound_violations of each output row against the baseline: the elements failing the tensor's
    teacher-forced check (a bit-exact stage: every difference; a GEMM/reduction: outside the bound).
    Rows against golden, and tensors without a check, keep -1 (not checked)."""
    if table.empty:
        return table
    for backend, results in reports.items():
        for sr in results:
            if sr.status == "skipped" or sr.stage.where != "outputs":
                continue
            fail = lambda c: (sum(v for k, v in c.items() if k != "bitwise_equal")
                              if sr.bitwise else c.get("bound_violation", 0))
            sel = (table.backend == backend) & (table.other == baseline) & (table.tensor == sr.stage.name)
            for i in table.index[sel]:
                e = int(table.at[i, "expert"])
                c = sr.classes if e == -1 else sr.per_expert.get(e)
                if c is not None:
                    table.at[i, "bound_violations"] = int(fail(c))
    return table


def stage_table(reports: dict) -> pd.DataFrame:
    """One row per backend x stage x expert (-1 = whole tensor): class counts and ULP buckets of the
    backend's stage tensor against its teacher-forced recomputation."""
    from .stages import STAGE_TABLE_COLUMNS, stage_table_rows
    rows = [row for b, res in reports.items() for row in stage_table_rows(b, res)]
    return pd.DataFrame(rows, columns=STAGE_TABLE_COLUMNS)


def records_to_table(records: np.ndarray) -> pd.DataFrame:
    t = pd.DataFrame({n: records[n] for n in records.dtype.names})
    for col in t.columns:
        if t[col].dtype.kind in "SO":
            t[col] = t[col].map(lambda b: b.decode() if isinstance(b, bytes) else b)
    return t


# ---- invariance checks --------------------------------------------------------------------------

OUTPUTS = ("y", "dx", "dw1", "dw2", "db1", "db2", "dprobs")


def _identical(a: np.ndarray, b: np.ndarray) -> tuple[bool, str]:
    """Bitwise identical (core/verify/bitwise.h: +0 and -0 differ, every NaN equals every NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    same_shape, differing, first = _core.bitwise_diff(a, b)
    if not same_shape:
        return False, f"shapes {a.shape} vs {b.shape}"
    if differing == 0:
        return True, ""
    i = tuple(int(v) for v in np.unravel_index(first, a.shape))
    return False, f"{differing} element(s) differ, first {list(i)}: {a[i]!r} vs {b[i]!r}"


# golden with its fp64 GEMMs on the GPU (execution.device) sums in cuBLAS's order, which may follow
# the number of rows (padding, EP size): there its invariances hold to this relative error, not bit
# for bit (the CPU's k-ordered sums ignore zero terms; the reference is bitwise on either device).
GPU_GOLDEN_TOLERANCE = 1e-12


def _within(a, b, tol: float) -> tuple[bool, str]:
    """The same non-finite elements, and ||a - b|| / ||b|| <= tol over the finite ones."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, f"shapes {a.shape} vs {b.shape}"
    finite = np.isfinite(a) & np.isfinite(b)
    if not (np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~finite & ~np.isnan(a)], b[~finite & ~np.isnan(b)])):
        return False, "non-finite elements differ"
    den = np.linalg.norm(b[finite])
    err = np.linalg.norm(a[finite] - b[finite]) / den if den else float(np.abs(a[finite]).max(initial=0.0))
    return err <= tol, f"relative error {err:.3e} (tolerance {tol:.0e})"


def compare_outputs(out_a: dict, out_b: dict, tolerance: float = 0.0) -> tuple[bool, str]:
    """Every output common to both, bitwise (or, with a tolerance, within that relative error);
    outputs are (array, dtype) tuples or arrays."""
    diffs = []
    for t in OUTPUTS:
        if t in out_a and t in out_b:
            va = out_a[t][0] if isinstance(out_a[t], tuple) else out_a[t]
            vb = out_b[t][0] if isinstance(out_b[t], tuple) else out_b[t]
            ok, why = _within(va, vb, tolerance) if tolerance else _identical(va, vb)
            if not ok:
                diffs.append(f"{t}: {why}")
    if diffs:
        return False, "; ".join(diffs)
    return True, f"all outputs within {tolerance:.0e}" if tolerance else "all outputs bitwise identical"


def weights_layout_check(name: str, result: dict, rerun) -> tuple[bool, str] | None:
    """Single vs discrete weights for one backend of one point: `rerun()` runs it with the other layout.
    None when the backend does not look at the layout (its traits say so: trivially invariant)."""
    if not traits.layout_sensitive(name) or "outputs" not in result:
        return None
    other = rerun()
    if "outputs" not in other:
        return False, f"rerun with the other weights layout failed: {other.get('reason', '')}"
    ok, detail = compare_outputs(result["outputs"], other["outputs"])
    return ok, f"single vs discrete weights: {detail}"


def _point_key(cfg: dict, drop: tuple) -> str:
    """The scenario config without the keys an invariance may vary (and the bookkeeping keys). Points
    simulating a subset of the EP ranks are keyed by the experts they computed, which no invariance
    varies: partial outputs are compared only with partial outputs of the same experts."""
    import copy
    import json

    from .ranks import partial_experts
    c = copy.deepcopy(cfg)
    c["dispatch"].pop("ranks", None)
    c["partial_experts"] = partial_experts(cfg)
    for dotted in drop + ("name", "description", "backends", "compare", "output", "verify"):
        *parents, leaf = dotted.split(".")
        node = c
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return json.dumps(c, sort_keys=True, default=str)


# name, the keys that may vary within a group, a filter on the points, the backends compared
INVARIANCES = [
    ("weights", ("weights",), lambda cfg: True, "all"),
    ("padding_module_hybridep", ("dispatch.padding",),
     lambda cfg: cfg["dispatch"]["padding"] in ("module", "hybridep"), "all"),
    ("ep_zero_padding", ("dispatch.ep",),
     lambda cfg: cfg["dispatch"]["padding"] in ("none", "module", "hybridep"), "all"),
    ("golden", ("dispatch", "weights", "recipe"), lambda cfg: True, "golden"),
]


def invariance_checks(results) -> dict:
    """Cross-scenario invariance checks over the points a campaign ran (a list of RunResult).

    weights                  points differing only in `weights` (single | discrete): every backend's
                             outputs bitwise identical.
    padding_module_hybridep  points differing only in module vs hybridep padding (both zero rows at the
                             end of each segment, real rows in the same order): identical outputs.
    ep_zero_padding          points differing only in dispatch.ep, with none/module/hybridep padding (an
                             expert's rows do not depend on EP): identical outputs.
    golden                   golden's outputs across every point with the same inputs and routing (any
                             dispatch, padding, EP, weights, recipe): identical.
    A point simulating a subset of the EP ranks (dispatch.ranks) only joins points that computed the
    same experts; a point written with output.results: summary joins none (its file has no tensors).
    Returns {check name: (passed, detail)}, one per group with at least two points; names
    are `invariance.<kind>(<the parameters the group shares>)`. Backends that failed, errored or did not
    run in a point are left out of that point's comparisons, and so are external backends."""
    points = []
    for r in results:
        try:
            cfg = r.scenario
        except Exception:  # noqa: BLE001 - an unreadable file is reported by the campaign itself
            continue
        if cfg.get("output", {}).get("results", "full") != "full":  # no tensors in its file to compare
            continue
        points.append((r, cfg))
    checks = {}
    for kind, varying, keep, which in INVARIANCES:
        groups: dict[str, list] = {}
        for r, cfg in points:
            if keep(cfg):
                groups.setdefault(_point_key(cfg, varying), []).append((r, cfg))
        for members in groups.values():
            if len(members) < 2:
                continue
            first_r, first_cfg = members[0]
            shared = {k: v for k, v in first_r.sweep_point.items() if not k.startswith(varying)}
            label = ",".join(f"{k}={v}" for k, v in shared.items()) or first_r.name.split("/")[0]
            label = label.replace("/", "_")
            details, ok = [], True
            # external code promises no bitwise invariance (the order of its reductions may follow the
            # rows it gets): its stage checks verify each point on its own
            backends = ["golden"] if which == "golden" else [b for b in first_r.disposition
                                                             if not traits.is_external(b)]
            for b in backends:
                if not ran_ok(first_r.disposition.get(b)):
                    continue
                ref = _read_outputs(first_r, b)
                for r, _ in members[1:]:
                    if not ran_ok(r.disposition.get(b)):
                        continue
                    gpu_golden = b == "golden" and "gpu" in (_execution_device(first_r, b), _execution_device(r, b))
                    same, why = compare_outputs(ref, _read_outputs(r, b), GPU_GOLDEN_TOLERANCE if gpu_golden else 0.0)
                    if not same:
                        ok = False
                        details.append(f"{b}: {first_r.name} vs {r.name}: {why}")
            names = ", ".join(r.name for r, _ in members)
            detail = "; ".join(details) if details else f"identical outputs across {len(members)} points ({names})"
            checks[f"invariance.{kind}({label})"] = (ok, detail)
    return checks


def _execution_device(result, backend: str) -> str:
    """Where an oracle's GEMMs ran (attribute execution_device; cpu in files from before the key)."""
    import h5py
    with h5py.File(result.path, "r") as f:
        v = f[f"results/{backend}"].attrs.get("execution_device", "cpu")
    return v.decode() if isinstance(v, bytes) else str(v)


def _read_outputs(result, backend: str) -> dict:
    import h5py
    with h5py.File(result.path, "r") as f:
        g = f[f"results/{backend}"]
        return {t: g[t][()] for t in OUTPUTS if t in g}
