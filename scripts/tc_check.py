"""The `tc` stage of scripts/gpu-check.sh: a backend against the reference with recipe.accumulate:
hopper_mma (reference/hopper_mma.h, numerics.md §6) on every point of the smoke (bf16 point), padding,
ep and mxfp8 scenarios, forward and backward:

  - every GEMM stage of the backend (h, o, da, dx_row, dw2, dw1) is checked in full (verify.sample:
    all) and bitwise against the model recomputed from its own operands: n == total == bitwise_equal;
  - its weight gradients dw1 and dw2 (GEMM outputs) equal the hopper_mma reference's bit for bit;
  - one-ulp faults planted in its FC1 output h and in its fp32 weight gradient dw1 are `detected`
    under hopper_mma; for contrast the same run under accumulate: ideal, where the bound is all a
    check has, reports the dw1 fault `undetectable` (one fp32 ulp lies well inside the bound).

    python3 scripts/tc_check.py [--backend gpu.grouped] [--out DIR] [--scenarios DIR]

Where the hardware disagrees with the model, the failing points' results files (inputs and every
stage tensor kept) stay in DIR/mismatch/ as the data that shows it; the first failing element of each
is printed. Exit 0 when everything holds, 1 otherwise, 3 when the backend could not run here.
"""
from __future__ import annotations

import argparse
import copy
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

import moenum
from moenum import stages

SCENARIOS = ("smoke", "padding", "ep", "mxfp8")
GEMM_STAGES = tuple(s.name for s in stages.STAGES if s.kind == stages.GEMM)
GEMM_OUTPUTS = ("dw1", "dw2")
INJECTIONS = ("{backend}:h[3,5]+=1ulp", "{backend}:dw1[3,5,7]+=1ulp")


def hopper_points(path: Path, backend: str, accumulate: str = "hopper_mma") -> list:
    """The scenario's points with recipe.accumulate set, bf16 where it sweeps fp32 (hopper_mma models
    bf16 GEMMs), full stage checks and every tensor kept for a post-mortem."""
    d = yaml.safe_load(path.read_text())
    d = copy.deepcopy(d)
    sweep = d.get("sweep") or {}
    if "recipe.name" in sweep:
        names = [n for n in sweep.pop("recipe.name") if n in ("bf16", "mxfp8")]
        d.setdefault("recipe", {})["name"] = names[0]
    if not sweep:
        d.pop("sweep", None)
    d.setdefault("recipe", {})["accumulate"] = accumulate
    d["backends"] = ["golden", "reference", backend]
    d["compare"] = {"baseline": "reference"}
    d["output"] = {**d.get("output", {}), "inputs": True, "intermediates": True}
    d["verify"] = {"stages": True, "invariance": True, "sample": "all"}
    return moenum.from_dict(d)


def gemm_problems(res, backend: str) -> list[str]:
    """What is not bitwise in the backend's GEMMs of one point (empty: all of it is)."""
    problems = []
    st = res.stage_table
    rows = st[(st.backend == backend) & (st.expert == -1)] if st is not None else None
    for name in GEMM_STAGES:
        r = rows[rows.stage == name] if rows is not None else []
        if len(r) == 0:
            problems.append(f"stage {name} not checked")
            continue
        r = r.iloc[0]
        if not (r["n"] == r["total"] == r["bitwise_equal"]) or r["status"] != "passed":
            problems.append(f"stage {name}: {r['bitwise_equal']} of {r['n']} checked ({r['total']} in all) "
                            f"bitwise, status {r['status']}")
    t = res.errors
    for name in GEMM_OUTPUTS:
        r = t[(t.backend == backend) & (t.other == "reference") & (t.tensor == name) & (t.expert == -1)]
        if len(r) == 0 or int(r.iloc[0]["bitwise_equal"]) != int(r.iloc[0]["n"]):
            got = "missing" if len(r) == 0 else f"{int(r.iloc[0]['bitwise_equal'])} of {int(r.iloc[0]['n'])}"
            problems.append(f"{name} vs reference: {got} bitwise equal")
    if res.disposition.get(backend) != "passed":
        problems.append(f"{backend} {res.disposition.get(backend)}: {res.check_details.get(f'stage.{backend}', '')}"
                        f" {res.reasons.get(backend, '')}".rstrip())
    return problems


def injection_outcomes(point, backend: str, out: Path) -> list[str]:
    res = moenum.run(point, out=out, inject=[i.format(backend=backend) for i in INJECTIONS])
    return [i["detail"] for i in res.injections]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="gpu.grouped")
    ap.add_argument("--out", default="build/gpu-check/tc")
    ap.add_argument("--scenarios", default="scenarios")
    args = ap.parse_args(argv)
    out = Path(args.out)
    keep = out / "mismatch"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    failed, total = 0, 0
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        for name in SCENARIOS:
            for point in hopper_points(Path(args.scenarios) / f"{name}.yaml", args.backend):
                total += 1
                res = moenum.run(point, out=tmp)
                if res.disposition.get(args.backend) in ("not_run", "not_supported"):
                    print(f"tc: {args.backend} {res.disposition[args.backend]}: {res.reasons.get(args.backend)}")
                    return 3
                problems = gemm_problems(res, args.backend)
                if problems:
                    failed += 1
                    keep.mkdir(exist_ok=True)
                    shutil.copy(res.path, keep / Path(res.path).name)
                    print(f"MISMATCH {point.name}: " + "; ".join(problems))
                else:
                    print(f"bitwise  {point.name}: {', '.join(GEMM_STAGES)} and {', '.join(GEMM_OUTPUTS)}")
        smoke_hopper = hopper_points(Path(args.scenarios) / "smoke.yaml", args.backend)[0]
        smoke_ideal = hopper_points(Path(args.scenarios) / "smoke.yaml", args.backend, accumulate="ideal")[0]
        hopper = injection_outcomes(smoke_hopper, args.backend, Path(tmp))
        ideal = injection_outcomes(smoke_ideal, args.backend, Path(tmp))
    for h, i in zip(hopper, ideal):
        print(f"inject hopper_mma: {h}")
        print(f"inject ideal:      {i}")
    ok_inject = all(h.startswith("detected:") for h in hopper)
    outcome = lambda d: d.split(":", 1)[0]
    print(f"# tc: {total - failed} of {total} points bitwise in every GEMM; 1-ulp faults in h, dw1: "
          f"{', '.join(map(outcome, hopper))} under hopper_mma ({', '.join(map(outcome, ideal))} under ideal)"
          + (f"; mismatching points kept in {keep}" if failed else ""))
    return 0 if failed == 0 and ok_inject else 1


if __name__ == "__main__":
    sys.exit(main())
