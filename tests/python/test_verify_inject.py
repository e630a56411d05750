"""Fault injection (issue 5): a fault planted in every stage of every backend under test is detected and
located; the test list is generated from the stage registry, so a new stage is covered automatically.
GPU backends' cases skip without a GPU, with the reason."""
import copy

import numpy as np
import pytest

import moenum
from moenum import _core, inject, stages

from conftest import moenum_cli

BACKENDS_UNDER_TEST = ["cpu.eigen", "gpu.grouped", "gpu.multistream"]
BASE = {
    "name": "vinject", "seed": 9,
    "model": {"experts": 4, "hidden": 64, "ffn": 32, "topk": 2, "bias": True},
    "tokens": 64, "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 0.8}},
    "dispatch": {"ep": 2, "padding": "router", "align": 32},
    "recipe": {"name": "bf16"},
}
# Tensors a GPU backend does not save (the stage check reports them as not saved).
GPU_UNSAVED = {"act", "out"}


def config(backend, recipe):
    cfg = copy.deepcopy(BASE)
    cfg["recipe"]["name"] = recipe
    cfg["backends"] = ["reference", backend]
    cfg["output"] = {"intermediates": True}
    cfg["name"] = f"vinject-{recipe}-{backend}".replace(".", "-")
    return cfg


def cases():
    """(backend, recipe, stage, tensor) for every applicable stage tensor; MX stages with mxfp8."""
    out = []
    for backend in BACKENDS_UNDER_TEST:
        for st in stages.STAGES:
            recipe = "mxfp8" if st.kind == stages.MX else "bf16"
            if backend.startswith("gpu.") and st.name in GPU_UNSAVED | {s.name for s in stages.STAGES if s.kind == stages.MX}:
                continue
            for tensor in st.tensors:
                out.append(pytest.param(backend, recipe, st, tensor, id=f"{backend}-{tensor}"))
    return out


def skip_unless_runs(backend, recipe):
    if backend not in _core.backend_names():
        pytest.skip(f"{backend}: not run: this moenum was built without CUDA")
    sc = moenum.from_dict(config(backend, recipe))[0]
    ok, disposition, reason = _core.backend_availability(backend, moenum.scenario.to_core(sc))
    if not ok:
        pytest.skip(f"{backend}: {disposition}: {reason}")
    return sc


def index_for(shape):
    return tuple(min(3, n - 1) for n in shape)


_CLEAN = {}


def clean_run(tmp_path_factory, backend, recipe):
    """The fault-free run of one (backend, recipe), once per session: it must pass."""
    if (backend, recipe) not in _CLEAN:
        sc = skip_unless_runs(backend, recipe)
        _CLEAN[backend, recipe] = moenum.run(sc, out=tmp_path_factory.mktemp("clean"))
    clean = _CLEAN[backend, recipe]
    assert clean.passed, clean.check_details
    return clean


@pytest.mark.parametrize("backend,recipe,stage,tensor", cases())
def test_planted_fault_is_detected_and_located(tmp_path, tmp_path_factory, backend, recipe, stage, tensor):
    sc = skip_unless_runs(backend, recipe)
    clean = clean_run(tmp_path_factory, backend, recipe)
    shape = clean.tensor(backend, tensor if stage.where == "outputs" else f"stages/{tensor}").shape
    idx = index_for(shape)
    # bit-exact stages: one ulp (one code) is a fault; GEMM/reduction stages: a large absolute change
    amount = "1ulp" if stage.kind in (stages.EXACT, stages.MX) else "0.5"
    spec = f"{backend}:{tensor}[{','.join(map(str, idx))}]+={amount}"
    res = moenum.run(sc, out=tmp_path / "faulty", inject=[spec])
    assert not res.passed
    assert res.disposition[backend] == "failed"
    (inj,) = res.injections
    assert inj["outcome"] == "detected", inj["detail"]
    reason = res.reasons[backend]
    assert reason.startswith(f"first failing stage {stage.name} "), reason
    where = f"{tensor}[{','.join(map(str, idx))}]"
    assert where in reason, reason
    assert ("expert " in reason) or (tensor in ("y", "dx") and "token " in reason), reason
    assert res.checks[f"inject.{backend}.{tensor}"]
    assert not res.checks[f"stage.{backend}"]


def test_one_ulp_in_an_fp32_gemm_output_is_reported_undetectable(tmp_path):
    """dw2 is an fp32 wgrad: one ulp is far inside gamma(M) * sum|a b|, so no check can see it. The run
    says so (outcome undetectable, the interval in the detail) and does not pass."""
    sc = moenum.from_dict(config("cpu.eigen", "bf16"))[0]
    res = moenum.run(sc, out=tmp_path, inject=["cpu.eigen:dw2[1,2,3]+=1ulp"])
    (inj,) = res.injections
    assert inj["outcome"] == "undetectable", inj["detail"]
    assert "inside the bound [" in inj["detail"]
    assert res.disposition["cpu.eigen"] == "passed"   # its numbers are within bound ...
    assert not res.passed                              # ... but the run is not OK
    assert not res.checks["inject.cpu.eigen.dw2"]
    stage = next(r for r in moenum.stages.STAGES if r.name == "dw2")
    assert stage.kind == "gemm"


def test_in_bound_fault_in_a_stage_is_caught_downstream(tmp_path):
    """fp32 recipe: one ulp of h lies inside h's bound, but the bit-exact stage a, recomputed from it,
    disagrees with the a the backend saved: detected, though not at h."""
    sc = moenum.from_dict(config("cpu.eigen", "fp32"))[0]
    res = moenum.run(sc, out=tmp_path, inject=["cpu.eigen:h[3,3]+=1ulp"])
    (inj,) = res.injections
    assert inj["outcome"] in ("detected_downstream", "detected"), inj["detail"]
    assert res.disposition["cpu.eigen"] == "failed"
    if inj["outcome"] == "detected_downstream":
        assert "first failing stage act" in inj["detail"] or "first failing stage a " in inj["detail"]


def test_reference_and_golden_injections(tmp_path):
    cfg = config("cpu.eigen", "bf16")
    cfg["backends"] = ["golden", "reference", "cpu.eigen"]
    sc = moenum.from_dict(cfg)[0]
    res = moenum.run(sc, out=tmp_path, inject=["reference:a[2,1]-=1ulp", "golden:y[0,0]+=1ulp"])
    by = {i["backend"]: i for i in res.injections}
    assert by["reference"]["outcome"] == "detected"     # an injection turns the oracle's check on
    assert by["golden"]["outcome"] == "unchecked"       # golden has no stage checks
    assert res.disposition["reference"] == "failed" and not res.passed


@pytest.mark.parametrize("spec,message", [
    ("cpu.eigen:dw1[3,5,7]+=1ulpx", "must be Nulp or a number"),
    ("cpu.eigen-dw1[3]+=1ulp", "cannot parse"),
    ("cpu.eigen:dw1[a,b]+=1ulp", "integers"),
    ("cpu.eigen:dw1[0,0,0]+=0ulp", "changes nothing"),
    ("cpu.eigen:dw1[0,0,0]*=2", "cannot parse"),
])
def test_bad_syntax_is_a_scenario_error(spec, message):
    with pytest.raises(moenum.ScenarioError, match=message):
        inject.parse(spec)


def test_parse_and_apply():
    inj = inject.parse(" gpu.grouped:stages/h[10,-1]-=2ulp ")
    assert (inj.backend, inj.tensor, inj.index, inj.ulps, inj.force_stage) == ("gpu.grouped", "h", (10, -1), -2, True)
    assert inject.parse("b:t[0]+=1e-3").amount == 1e-3
    results = {"b": {"outputs": {"t": (np.array([1.0, 2.0]), "bf16")}, "stages": {}}}
    info = inject.apply(inject.parse("b:t[-1]+=1ulp"), results)
    assert info["index"] == (1,) and results["b"]["outputs"]["t"][0][1] == 2.015625
    with pytest.raises(moenum.ScenarioError, match="out of range"):
        inject.apply(inject.parse("b:t[2]+=1ulp"), results)
    with pytest.raises(moenum.ScenarioError, match="no tensor 'u'"):
        inject.apply(inject.parse("b:u[0]+=1ulp"), results)
    with pytest.raises(moenum.ScenarioError, match="does not change"):
        inject.apply(inject.parse("b:t[0]+=1e-9"), results)  # below bf16's resolution at 1.0


def test_cli_inject_exit_codes(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("name: cliinject\nmodel: {experts: 4, hidden: 64, ffn: 32, topk: 2}\ntokens: 64\n"
                   "backends: [reference, cpu.eigen]\n")
    r = moenum_cli("run", cfg, "-o", tmp_path, "--inject", "cpu.eigen:dh[5,7]+=1ulp")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "first failing stage dh (exact): stages/dh[5,7]: expert" in r.stdout
    assert "inject detected: cpu.eigen:dh[5,7]+=1ulp" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("# FAILED")
    r = moenum_cli("run", cfg, "-o", tmp_path, "--inject", "cpu.eigen:dw1[0,0,0]+=1ulp")
    assert r.returncode == 1 and "undetectable" in r.stdout
    r = moenum_cli("run", cfg, "-o", tmp_path, "--inject", "cpu.eigen:dw1[3,5,7]+=1ulps!")
    assert r.returncode == 2 and "--inject" in r.stderr and "Traceback" not in r.stderr
    r = moenum_cli("run", cfg, "-o", tmp_path, "--inject", "gpu.grouped:y[0,0]+=1ulp")
    assert r.returncode == 2 and "not run by this scenario" in r.stderr
    r = moenum_cli("run", cfg, "-o", tmp_path, "--inject", "cpu.eigen:nope[0]+=1ulp")
    assert r.returncode == 2 and "no tensor 'nope'" in r.stderr
