"""Fault injection: perturb one element of one backend's output or stage tensor before verification,
to test the harness itself (`moenum run --inject SPEC`, `moenum.run(..., inject=[SPEC, ...])`).

    SPEC := BACKEND ":" TENSOR "[" I ("," I)* "]" ("+=" | "-=") AMOUNT
    AMOUNT := N "ulp"            N steps along the tensor's dtype grid (bf16, fp32, fp64; FP8/E8M0 codes: N codes)
            | <float>            an absolute amount; the result is rounded to the tensor's dtype and must change it

    cpu.eigen:dw1[3,5,7]+=1ulp      gpu.grouped:h[10,3]-=2ulp      reference:stages/o[0,0]+=0.25

TENSOR is an output (y, dx, dw1, ...) or a stage (h, a, ..., fc1_fprop.A.codes); `stages/NAME` forces
the stage. Indices may be negative (from the end).

After verification each injection gets a check `inject.<backend>.<tensor>` whose detail starts with
the outcome:
  detected       the stage that checks the tensor fails AT the planted element (located); check passed.
  undetectable   the perturbed element still satisfies its own stage's criterion: for a GEMM or reduction
                 stage, it lies inside the bound interval (or is a tie flip of the reference), so no
                 check can tell it from a legitimate accumulation-order difference; check NOT passed.
  detected_downstream  undetectable at its own stage, but a later stage recomputed from it disagrees
                 with what the backend saved (e.g. an in-bound change of h seen by the bit-exact stage a);
                 check NOT passed (detected but not located).
  unchecked      no teacher-forced check covers the tensor (golden, stage checks off, stage not saved).
A run with an injection therefore never ends OK: `moenum run` exits 1 in every case.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from . import _core
from .errors import ScenarioError

SPEC_RE = re.compile(r"^\s*(?P<backend>[^:\s\[\]]+)\s*:\s*(?P<tensor>[A-Za-z0-9_./]+)\s*"
                     r"\[(?P<index>[^\]]*)\]\s*(?P<op>\+=|-=)\s*(?P<amount>\S.*?)\s*$")
ULP_RE = re.compile(r"^(?P<n>\d+)\s*ulps?$")
CODE_DTYPES = ("e4m3", "e5m2", "e8m0", "uint8")
SYNTAX = "expected BACKEND:TENSOR[i,j,...]+=Nulp or +=<number> (or -=), e.g. 'cpu.eigen:dw1[3,5,7]+=1ulp'"


@dataclass(frozen=True)
class Injection:
    backend: str
    tensor: str          # as written, minus a "stages/" prefix
    index: tuple
    ulps: int | None     # signed step count, or None
    amount: float | None  # signed absolute amount, or None
    text: str
    force_stage: bool = False

    @property
    def check_name(self) -> str:
        return f"inject.{self.backend}.{self.tensor}"


def parse(spec) -> Injection:
    """Parse one SPEC (an Injection passes through); ScenarioError (CLI exit 2) on bad syntax."""
    if isinstance(spec, Injection):
        return spec
    if not isinstance(spec, str):
        raise ScenarioError(f"an injection must be a string, got {type(spec).__name__}", key="--inject")
    m = SPEC_RE.match(spec)
    if not m:
        raise ScenarioError(f"cannot parse '{spec}': {SYNTAX}", key="--inject")
    try:
        index = tuple(int(i) for i in m["index"].split(","))
    except ValueError:
        raise ScenarioError(f"'{spec}': the index must be integers separated by commas, got "
                            f"[{m['index']}]", key="--inject") from None
    sign = 1 if m["op"] == "+=" else -1
    amount_text = m["amount"]
    ulps = amount = None
    u = ULP_RE.match(amount_text)
    if u:
        ulps = sign * int(u["n"])
        if ulps == 0:
            raise ScenarioError(f"'{spec}': a perturbation of 0 ulp changes nothing", key="--inject")
    else:
        try:
            amount = sign * float(amount_text)
        except ValueError:
            raise ScenarioError(f"'{spec}': the amount must be Nulp or a number, got '{amount_text}'",
                                key="--inject") from None
        if amount == 0.0 or not np.isfinite(amount):
            raise ScenarioError(f"'{spec}': the amount must be finite and non-zero", key="--inject")
    tensor = m["tensor"]
    force_stage = tensor.startswith("stages/")
    if force_stage:
        tensor = tensor[len("stages/"):]
    return Injection(m["backend"], tensor, index, ulps, amount, spec.strip(), force_stage)


def parse_all(specs) -> list[Injection]:
    if specs is None:
        return []
    if isinstance(specs, (str, Injection)):
        specs = [specs]
    return [parse(s) for s in specs]


def apply(inj: Injection, results: dict) -> dict:
    """Perturb the element in place in results[backend]; returns what was done (where, old, new, dtype).
    ScenarioError when the backend did not run, the tensor does not exist, or the index is out of range."""
    r = results.get(inj.backend)
    if r is None:
        raise ScenarioError(f"'{inj.text}': backend '{inj.backend}' is not in this run "
                            f"({', '.join(results)})", key="--inject")
    outputs, stages = r.get("outputs", {}), r.get("stages", {})
    if not inj.force_stage and inj.tensor in outputs:
        where, group = "outputs", outputs
    elif inj.tensor in stages:
        where, group = "stages", stages
    else:
        if "outputs" not in r:
            why = f"backend '{inj.backend}' produced nothing ({r.get('disposition')}: {r.get('reason', '')})"
        else:
            why = (f"no tensor '{inj.tensor}' in {inj.backend}: outputs {', '.join(sorted(outputs))}; "
                   f"stages {', '.join(sorted(stages)) or '(none saved)'}")
        raise ScenarioError(f"'{inj.text}': {why}", key="--inject")
    values, dtype = group[inj.tensor]
    values = np.array(values, copy=True)  # in the stored dtype: float32, float64, or uint8 codes
    if len(inj.index) != values.ndim or any(not -n <= i < n for i, n in zip(inj.index, values.shape)):
        raise ScenarioError(f"'{inj.text}': index {list(inj.index)} is out of range for {inj.tensor} "
                            f"of shape {list(values.shape)}", key="--inject")
    index = tuple(i % n for i, n in zip(inj.index, values.shape))
    old = float(values[index])
    if dtype in CODE_DTYPES:
        if inj.ulps is None:
            raise ScenarioError(f"'{inj.text}': {inj.tensor} holds {dtype} codes; perturb it by Nulp (codes)",
                                key="--inject")
        new = float(np.clip(old + inj.ulps, 0, 255))
    elif inj.ulps is not None:
        new = float(_core.grid_step(old, inj.ulps, dtype if dtype in ("bf16", "fp64") else "fp32"))
    else:
        raw = old + inj.amount
        new = raw if dtype == "fp64" else float(_core.round_to(np.array([raw]), "bf16" if dtype == "bf16" else "fp32")[0])
    if new == old:
        raise ScenarioError(f"'{inj.text}': the perturbation does not change {inj.tensor}{list(index)} = {old!r} "
                            f"in {dtype}", key="--inject")
    values[index] = new
    group[inj.tensor] = (values, dtype)
    return {"where": where, "index": index, "old": old, "new": new, "dtype": dtype}


def probe(inj: Injection, applied: dict) -> tuple[str, tuple]:
    """The (tensor, index) whose class the stage checks must report for this injection."""
    return inj.tensor, tuple(applied["index"])


def outcome(inj: Injection, applied: dict, stage_results: list | None) -> tuple[bool, str]:
    """The check of one injection: (passed, detail); passed only when detected at the planted element."""
    from .stages import stage_by_tensor
    idx = list(applied["index"])
    head = (f"{inj.text}: {applied['where']}/{inj.tensor}{idx} {applied['old']!r} -> {applied['new']!r} "
            f"({applied['dtype']})")
    stage = stage_by_tensor(inj.tensor)
    if stage_results is None:
        return False, f"unchecked: {head}; {inj.backend} has no teacher-forced stage checks"
    sr = next((r for r in stage_results if stage is not None and r.stage.name == stage.name), None)
    p = next((q for q in (sr.probes if sr else []) if q["tensor"] == inj.tensor and tuple(q["index"]) == tuple(idx)),
             None)
    if sr is None or sr.status == "skipped" or p is None or not p["checked"]:
        why = sr.reason if sr is not None and sr.reason else "no stage checks this tensor"
        return False, f"unchecked: {head}; {why}"
    cls = p["cls"]
    # bitwise: a bit-exact stage, or a GEMM stage checked against a bit-exact model (no bound)
    bitwise = stage.bit_exact or p["bound"] is None
    failing = cls != "bitwise_equal" if bitwise else cls == "bound_violation"
    if failing:
        return True, f"detected: {head}; {sr.reason}"
    order = [r.stage.name for r in stage_results]
    later = [r for r in stage_results[order.index(stage.name) + 1:] if r.status == "failed"]
    if later:
        return False, (f"detected_downstream: {head}; its own stage {stage.name} classifies it {cls}, "
                       f"but a later one disagrees with it: first failing {later[0].reason}")
    if bitwise:
        return False, f"missed: {head}; classified {cls} by the bit-exact stage {stage.name} (a harness bug)"
    lo, hi = p["bound"]
    return False, (f"undetectable: {head}; stage {stage.name} ({stage.kind}) classifies the perturbed value "
                   f"{cls}: it lies inside the bound [{lo!r}, {hi!r}] around the reference "
                   f"{p['ref']!r}, so no check can tell it from accumulation order")
