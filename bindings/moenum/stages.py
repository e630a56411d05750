"""The stage registry and the teacher-forced stage checks, as Python sees them.

The stages, their kinds and inputs are the table of `core/include/moenum/layer.h`; the checks run in
the C++ verifier (`core/verify/stage_check.h`: recomputation from the backend's own inputs, the
bound of `core/verify/bounds.h`, the classes of `core/verify/classify.h`, sampling). This module
only wraps their results for the runner, the results file and fault injection.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import _core

EXACT, GEMM, REDUCTION, MX = "exact", "gemm", "reduction", "mx"
CLASSES = tuple(_core.CLASSES)


@dataclass(frozen=True)
class Stage:
    name: str            # the saved tensor: a stage name, an output name, or an MX operand "gemm.X"
    kind: str            # exact | gemm | reduction | mx
    where: str           # "stages" or "outputs"
    inputs: tuple        # saved tensors of the same backend it is recomputed from
    gemm: str = ""       # the GEMM of a gemm or mx stage
    doc: str = ""
    needs_bias: bool = False
    mx_only: bool = False

    @property
    def tensors(self) -> tuple:
        """The saved tensor(s) this stage checks."""
        return (f"{self.name}.codes", f"{self.name}.scales") if self.kind == MX else (self.name,)

    @property
    def bit_exact(self) -> bool:
        return self.kind in (EXACT, MX)


STAGES: list[Stage] = [Stage(s["name"], s["kind"], s["where"], tuple(s["inputs"]), s["gemm"], s["doc"],
                             s["needs_bias"], s["mx_only"]) for s in _core.STAGES]
_BY_NAME = {s.name: s for s in STAGES}


def stage_by_tensor(name: str) -> Stage | None:
    """The stage that checks a saved tensor (an MX stage checks both its codes and its scales)."""
    for st in STAGES:
        if name in st.tensors:
            return st
    return None


def applicable(stage: Stage, cfg: dict) -> bool:
    if stage.mx_only and cfg["recipe"]["name"] != "mxfp8":
        return False
    return not (stage.needs_bias and not cfg["model"]["bias"])


@dataclass
class StageResult:
    """One stage's check of one backend (core/verify/stage_check.h, StageReport)."""
    stage: Stage
    status: str                                   # passed | failed | skipped
    reason: str = ""                              # skipped: why; failed: the first failing element
    classes: dict = field(default_factory=dict)   # class name -> count (checked elements)
    per_expert: dict = field(default_factory=dict)       # expert -> {class -> count}
    per_expert_ulps: dict = field(default_factory=dict)  # expert -> ULP buckets (not for mx stages)
    ulps: dict | None = None                      # the whole stage's ULP buckets
    checked: int = 0                              # elements checked (sampled GEMM stages: fewer than total)
    total: int = 0
    sampled: bool = False
    failing: int = 0
    first: tuple | None = None                    # (tensor, index) of the first failing element
    probes: list = field(default_factory=list)    # per probe: checked, cls, value, ref, bound
    bitwise: bool = False                         # every difference fails: a bit-exact stage, or a GEMM
                                                  # stage checked against a bit-exact model (hopper_mma)

    @classmethod
    def from_report(cls, r: dict) -> "StageResult":
        return cls(_BY_NAME[r["stage"]], r["status"], r["reason"], dict(r["classes"]),
                   {int(e): dict(c) for e, c in r["per_expert"].items()},
                   {int(e): dict(u) for e, u in r["per_expert_ulps"].items()}, r["ulps"], r["checked"], r["total"],
                   r["sampled"], r["failing"], r["first"], list(r["probes"]),
                   bool(r.get("bitwise", _BY_NAME[r["stage"]].bit_exact)))


def backend_tensors(result: dict) -> dict:
    """A backend's saved stage tensors and outputs by name, as (array, dtype)."""
    t = dict(result.get("stages", {}))
    t.update(result.get("outputs", {}))
    return t


def check_backend(name: str, prepared, result: dict, sample="auto", probes=(),
                  accumulate: str = "ideal", keep_input_codes: bool = False) -> tuple[list[StageResult], tuple]:
    """Every applicable stage of one backend's result, checked in C++. probes: (tensor, index) pairs
    whose classes are reported (planted faults). accumulate: the scenario's recipe.accumulate, which
    decides with the backend's traits whether its GEMM stages are bitwise (traits.gemm_rule).
    keep_input_codes: another backend of the point follows (core/verify/input_codes.h).
    Returns (stage results, (passed, detail))."""
    from . import traits
    out = _core.check_stages(name, prepared, backend_tensors(result), sample,
                             [(t, [int(i) for i in idx]) for t, idx in probes], traits.elementwise_rule(name),
                             traits.gemm_rule(name, accumulate), keep_input_codes)
    results = [StageResult.from_report(r) for r in out["reports"]]
    return results, (bool(out["passed"]), out["detail"])


STAGE_TABLE_COLUMNS = ["backend", "stage", "kind", "expert", "n", "total", *CLASSES, "max_ulp", "ulp_le0",
                       "ulp_le1", "ulp_le2", "ulp_gt2", "max_abs", "status"]
_ULP_COLUMNS = ("max_ulp", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "max_abs")


def stage_table_rows(backend: str, results: list[StageResult]) -> list[dict]:
    """/tables/stages: one row per stage (expert -1) and per expert: class counts of the checked
    elements (n of total), ULP buckets and max_abs against the recomputation (-1: not applicable)."""
    rows = []
    for r in results:
        if r.status == "skipped":
            continue
        base = {"backend": backend, "stage": r.stage.name, "kind": r.stage.kind, "status": r.status}
        u = r.ulps or {}
        rows.append({**base, "expert": -1, "n": int(sum(r.classes.values())), "total": int(r.total), **r.classes,
                     **{k: u.get(k, -1) for k in _ULP_COLUMNS}})
        for e, c in sorted(r.per_expert.items()):
            if e < 0:
                continue
            ue = r.per_expert_ulps.get(e, {})
            rows.append({**base, "expert": e, "n": int(sum(c.values())), "total": -1, **c,
                         **{k: ue.get(k, -1) for k in _ULP_COLUMNS}})
    return rows
