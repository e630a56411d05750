"""The verification engine (issue 5): stage registry, teacher-forced stage checks, element
classification, the per-element GEMM bound, bound_violations in the error table, /tables/stages."""
import h5py
import numpy as np
import pytest

import moenum
from moenum import _core, stages, verify
from moenum.stages import CLASSES

from conftest import with_changes

TINY = {
    "name": "vstage", "seed": 5,
    "model": {"experts": 4, "hidden": 64, "ffn": 32, "topk": 2, "bias": True},
    "tokens": 64, "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 0.8}},
    "dispatch": {"ep": 2, "padding": "module", "align": 32},
    "recipe": {"name": "bf16"}, "backends": ["golden", "reference", "cpu.eigen"],
}


def cfg_with(**changes):
    return with_changes(TINY, **changes)


def test_registry_is_in_dataflow_order_with_known_kinds():
    names = [s.name for s in stages.STAGES]
    assert len(names) == len(set(names))
    assert {s.kind for s in stages.STAGES} <= {"exact", "gemm", "reduction", "mx"}
    for before, after in [("h", "a"), ("a", "o"), ("o", "out"), ("out", "y"), ("da", "dh"), ("dh", "dx_row"),
                          ("dx_row", "dx"), ("fc1_fprop.A", "h"), ("fc1_wgrad.B", "dw1")]:
        assert names.index(before) < names.index(after)
    for s in stages.STAGES:  # every input is a stage or output that comes earlier (or is the stage itself)
        for i in s.inputs:
            owner = stages.stage_by_tensor(i)
            assert owner is not None and names.index(owner.name) < names.index(s.name), (s.name, i)
    gemms = {s.name: s.gemm for s in stages.STAGES if s.kind == "gemm"}
    assert gemms == {"h": "fc1_fprop", "o": "fc2_fprop", "da": "fc2_dgrad", "dw2": "fc2_wgrad",
                     "dx_row": "fc1_dgrad", "dw1": "fc1_wgrad"}


@pytest.mark.parametrize("recipe", ["fp32", "bf16", "mxfp8"])
def test_cpu_eigen_passes_every_stage_check(tmp_path, recipe):
    res = moenum.run(moenum.from_dict(cfg_with(recipe__name=recipe, name=f"vstage-{recipe}"))[0], out=tmp_path)
    assert res.passed, res.check_details
    assert res.checks["stage.cpu.eigen"], res.check_details["stage.cpu.eigen"]
    assert "stage.reference" not in res.checks  # the oracle is not checked by default
    st = res.stage_table
    whole = st[(st.backend == "cpu.eigen") & (st.expert == -1)].set_index("stage")
    expected = {s.name for s in stages.STAGES if stages.applicable(s, res.scenario)}
    assert set(whole.index) == expected
    assert (whole.bound_violation == 0).all() and (whole.status == "passed").all()
    assert (whole.n == whole[list(CLASSES)].sum(axis=1)).all()
    exact = whole[whole.kind.isin(["exact", "mx"])]
    assert (exact.bitwise_equal == exact.n).all()
    # cpu.eigen's fp32 order really differs from the exact sum: the wgrads use the bound
    assert whole.loc["dw1", "within_bound"] + whole.loc["dw1", "tie_flip"] > 0
    if recipe == "fp32":  # no bf16 rounding hides the accumulation order there
        assert whole.loc["h", "within_bound"] > 0
    # per-expert rows add up to the whole tensor
    per = st[(st.backend == "cpu.eigen") & (st.expert >= 0)].groupby("stage").n.sum()
    for name in ("h", "dw1", "dprobs"):
        assert per[name] == whole.loc[name, "n"]
    # and their largest absolute differences make up the whole tensor's
    per_max = st[(st.backend == "cpu.eigen") & (st.expert >= 0) & (st.kind != "mx")].groupby("stage").max_abs.max()
    assert (per_max >= 0).all()
    assert per_max["dw1"] == whole.loc["dw1", "max_abs"]
    # and the table is in the file
    with h5py.File(res.path, "r") as f:
        assert "stages" in f["tables"] and f["checks/stage.cpu.eigen"].attrs["passed"]
    back = moenum.open_results(res.path)
    assert len(back.stage_table) == len(st)


def test_reference_reproduces_itself_bitwise():
    """The harness against its oracle: every stage recomputed from the reference's own inputs is
    bitwise equal to what the reference saved (GEMM and reduction stages included)."""
    sc = moenum.from_dict(cfg_with(dispatch__padding="router"))[0]
    core = moenum.scenario.to_core(sc)
    core.output.intermediates = True
    prep = _core.prepare(core)
    results = {"reference": {**_core.run_backend("reference", prep), "disposition": "passed"}}
    checks, reports = verify.stage_checks(sc.config, prep, results, ["reference"], include=["reference"])
    assert checks["stage.reference"][0], checks
    for r in reports["reference"]:
        assert r.status == "passed" and r.classes["bitwise_equal"] == sum(r.classes.values()), r.stage.name


def test_bound_violations_filled_against_the_baseline(tmp_path):
    res = moenum.run(moenum.from_dict(cfg_with())[0], out=tmp_path)
    t = res.errors
    mine = t[(t.backend == "cpu.eigen") & (t.other == "reference")]
    assert len(mine) and (mine.bound_violations == 0).all()
    assert set(mine.tensor) == {"y", "dx", "dw1", "dw2", "db1", "db2", "dprobs"}
    assert (t[t.other == "golden"].bound_violations == -1).all()


def test_stage_checks_can_be_switched_off(tmp_path):
    res = moenum.run(moenum.from_dict(cfg_with(verify={"stages": False}))[0], out=tmp_path)
    assert not any(k.startswith("stage.") for k in res.checks)
    assert res.disposition["cpu.eigen"] == "not_verified" and res.verdict == "not_verified" and not res.passed
    assert (res.errors.bound_violations == -1).all()
    with h5py.File(res.path, "r") as f:
        assert "stages" not in f["tables"] and "stages" not in f["results/cpu.eigen"]


# ---- classification and the bound (the element rules have their gtests: tests/cpp/test_verify_rules.cpp)

def _mx_run(tmp_path):
    """cpu.eigen's saved tensors of a small mxfp8 point, and the prepared problem."""
    sc = moenum.from_dict(cfg_with(recipe__name="mxfp8"))[0]
    core = moenum.scenario.to_core(sc)
    core.output.intermediates = True
    prep = _core.prepare(core)
    out = _core.run_backend("cpu.eigen", prep)
    return prep, {**out, "disposition": "passed"}


def test_mx_scale_off_by_one_takes_its_whole_block(tmp_path):
    prep, result = _mx_run(tmp_path)
    codes, dt = result["stages"]["fc1_fprop.A.codes"]
    scales, sdt = result["stages"]["fc1_fprop.A.scales"]
    codes, scales = np.array(codes, copy=True), np.array(scales, copy=True)
    scales[1, 0] += 1          # one scale one code off: 1 scale + its 32 codes
    scales[2, 1] += 3          # a scale three codes off: a violation
    codes[3, 40] = (int(codes[3, 40]) ^ 1)  # one code wrong
    result["stages"]["fc1_fprop.A.codes"] = (codes, dt)
    result["stages"]["fc1_fprop.A.scales"] = (scales, sdt)
    reports, (passed, detail) = stages.check_backend("cpu.eigen", prep, result, "all",
                                                        [("fc1_fprop.A.scales", (1, 0)), ("fc1_fprop.A.scales", (2, 1)),
                                                         ("fc1_fprop.A.codes", (1, 5)), ("fc1_fprop.A.codes", (3, 40))])
    r = next(r for r in reports if r.stage.name == "fc1_fprop.A")
    assert not passed and r.status == "failed" and "fc1_fprop.A" in detail
    assert [p["cls"] for p in r.probes] == ["scale_off_by_one", "bound_violation", "scale_off_by_one", "bound_violation"]
    assert r.classes["scale_off_by_one"] == 1 + 32
    assert r.classes["bound_violation"] == 2  # the scale three codes off and the wrong code
    assert r.first[0] == "fc1_fprop.A.scales"  # scales are compared first


def test_mx_stage_tallies_alike_with_and_without_probes(tmp_path):
    """An expert whose saved bytes equal the reference's is tallied in bulk unless a probe watches
    the tensor; the counts must be the per-element ones either way, damaged expert or not."""
    prep, result = _mx_run(tmp_path)
    codes, dt = result["stages"]["fc1_fprop.A.codes"]
    scales, sdt = result["stages"]["fc1_fprop.A.scales"]
    codes, scales = np.array(codes, copy=True), np.array(scales, copy=True)
    scales[2, 1] += 3
    codes[3, 40] = (int(codes[3, 40]) ^ 1)
    result["stages"]["fc1_fprop.A.codes"] = (codes, dt)
    result["stages"]["fc1_fprop.A.scales"] = (scales, sdt)
    bulk, _ = stages.check_backend("cpu.eigen", prep, result, "all")
    watched, _ = stages.check_backend("cpu.eigen", prep, result, "all",
                                      [("fc1_fprop.A.codes", (0, 0)), ("fc1_fprop.B.codes", (0, 0, 0))])
    for name in ("fc1_fprop.A", "fc1_fprop.B"):
        a = next(r for r in bulk if r.stage.name == name)
        b = next(r for r in watched if r.stage.name == name)
        assert (a.classes, a.checked, a.failing, a.first) == (b.classes, b.checked, b.failing, b.first)
        assert a.checked == codes.size + scales.size if name == "fc1_fprop.A" else a.checked > 0
    a = next(r for r in bulk if r.stage.name == "fc1_fprop.A")
    assert a.status == "failed" and a.classes["bound_violation"] == 2  # the scale three codes off and the code
    b = next(r for r in bulk if r.stage.name == "fc1_fprop.B")
    assert b.status == "passed" and b.classes["bitwise_equal"] == b.checked


def _report_key(r):
    return (r.stage.name, r.status, r.classes, r.per_expert, r.checked, r.failing, r.first)


def test_kept_input_codes_check_the_next_backend_as_fresh_ones_do(tmp_path):
    """The expected codes of x, dy, w1 and w2 kept from one backend's check (core/verify/input_codes.h)
    judge the next backend exactly as codes computed for it alone: the same reports for a damaged
    backend in the input-drawn stages (x rowwise, x columnwise, w1) as without them."""
    prep, clean = _mx_run(tmp_path)
    damaged = {**clean, "stages": dict(clean["stages"])}
    for name, at in (("fc1_fprop.A.codes", (3, 40)), ("fc1_wgrad.B.codes", (5, 7)), ("fc1_fprop.B.codes", (1, 2, 3))):
        codes, dt = damaged["stages"][name]
        codes = np.array(codes, copy=True)
        codes[at] = int(codes[at]) ^ 1
        damaged["stages"][name] = (codes, dt)
    fresh, (fresh_passed, fresh_detail) = stages.check_backend("cpu.eigen", prep, damaged, "all")
    assert prep.kept_input_codes_bytes == 0  # not asked to keep them
    first, (passed, _) = stages.check_backend("cpu.eigen", prep, clean, "all", keep_input_codes=True)
    assert passed
    kept = prep.kept_input_codes_bytes
    x, w = TINY["tokens"] * TINY["model"]["topk"], TINY["model"]["experts"] * 3 * TINY["model"]["hidden"] * TINY["model"]["ffn"]
    assert kept > 2 * w + 4 * x * TINY["model"]["hidden"]  # codes (and scales) of x, dy, w1 and w2, both ways
    shared, (shared_passed, shared_detail) = stages.check_backend("cpu.eigen", prep, damaged, "all")
    assert prep.kept_input_codes_bytes == 0  # the last check drops them
    assert not shared_passed and (shared_passed, shared_detail) == (fresh_passed, fresh_detail)
    assert [_report_key(r) for r in shared] == [_report_key(r) for r in fresh]
    for name in ("fc1_fprop.A", "fc1_wgrad.B", "fc1_fprop.B"):
        assert next(r for r in shared if r.stage.name == name).classes["bound_violation"] == 1


def test_ulp_steps_walk_the_dtype_grid():
    assert _core.grid_step(1.0, 1, "bf16") == 1.0078125
    assert _core.grid_step(1.0, -1, "bf16") == 1.0 - 2 ** -8
    assert _core.grid_step(0.0, 1, "fp32") == 2.0 ** -149
    assert _core.grid_step(1.0, 1, "fp64") == np.nextafter(1.0, 2.0)
    assert _core.ulp_distance(np.float32([1.0078125]), np.float32([1.0]), "bf16")[0] == 1.0


@pytest.mark.parametrize("K", [16, 256, 2048])
def test_any_fp32_summation_order_lies_inside_the_bound(K):
    """The bound interval holds every fp32 accumulation of the same products (forward, backward, pairwise,
    shuffled), and not a value a few ulps beyond it."""
    rng = np.random.default_rng(K)
    A = _core.round_to(rng.standard_normal((8, K)), "bf16")
    B = _core.round_to(rng.standard_normal((6, K)) * np.exp(rng.uniform(-3, 3, (1, K))), "bf16")
    c32, S, _ = _core.exact_gemm_nt(A, B)
    bounds = [[_core.accumulator_interval(c, s_, K) for c, s_ in zip(cr, sr)] for cr, sr in zip(c32, S)]
    lo, hi = np.array([[b[0] for b in row] for row in bounds]), np.array([[b[1] for b in row] for row in bounds])
    prods = (A[:, None, :] * B[None, :, :]).astype(np.float32)

    def seq(p):
        acc = np.zeros(p.shape[:-1], dtype=np.float32)
        for k in range(p.shape[-1]):
            acc = acc + p[..., k]
        return acc

    orders = [seq(prods), seq(prods[..., ::-1]), prods.sum(axis=-1, dtype=np.float32),
              seq(prods[..., rng.permutation(K)])]
    for acc in orders:
        assert np.all((acc >= lo) & (acc <= hi))
    beyond = np.nextafter(hi.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    assert np.all(beyond > hi)


@pytest.mark.parametrize("recipe", ["bf16", "fp32"])
def test_subnormal_range_inputs_give_no_false_bound_violations(tmp_path, recipe):
    """x in the fp32 subnormal range: every product and partial sum of FC1 underflows, and a correct
    fp32 GEMM (cpu.eigen) differs from the exact result by up to half the smallest subnormal per
    term; the bound's underflow term (numerics.md §7) must cover that."""
    cfg = cfg_with(recipe__name=recipe, name=f"vsub-{recipe}", inputs={"x": {"scale": 1.0e-40}})
    res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
    st = res.stage_table
    whole = st[(st.backend == "cpu.eigen") & (st.expert == -1)].set_index("stage")
    assert (whole.bound_violation == 0).all(), res.check_details["stage.cpu.eigen"]
    assert res.checks["stage.cpu.eigen"]
