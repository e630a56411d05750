"""The verification engine (issue 5): stage registry, teacher-forced stage checks, element
classification, the per-element GEMM bound, bound_violations in the error table, /tables/stages."""
import h5py
import numpy as np
import pytest

import moenum
from moenum import _core, classify, stages, verify
from moenum.classify import CLASSES

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


# ---- classification and the bound --------------------------------------------------------------

def test_classify_rules():
    ref = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    val = np.array([1.0, 1.0078125, 1.0078125, 1.001, 2.0, -0.0])  # bf16 1 + 2^-7 is 1's upper neighbour
    pre = np.array([1.0, 1.00390625, 1.0, 1.0, 1.0, 0.0])           # 1 + 2^-8: the bf16 midpoint
    lo = np.array([1.0, 0.99, 0.99, 0.99, 0.99, 0.0])
    hi = np.array([1.0, 1.01, 1.01, 1.01, 1.5, 0.0])
    cls = classify.classify(val, ref, "bf16", pre=pre, lo=lo, hi=hi)
    assert [CLASSES[c] for c in cls] == ["bitwise_equal", "tie_flip", "within_bound", "within_bound",
                                         "bound_violation", "within_bound"]  # -0 vs +0: in [0, 0]
    # a bit-exact stage (no bound): a tie flip is named, anything else is a violation
    cls = classify.classify(val, ref, "bf16", pre=pre)
    assert [CLASSES[c] for c in cls][:5] == ["bitwise_equal", "tie_flip", "bound_violation",
                                             "bound_violation", "bound_violation"]
    # a tie flip outside the bound interval is a violation
    assert CLASSES[classify.classify(val[1:2], ref[1:2], "bf16", pre=pre[1:2], lo=[1.0], hi=[1.0])[0]] \
        == "bound_violation"


def test_classify_mx_scale_off_by_one_takes_its_whole_block():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    codes, scales = moenum.mx.quantize(x, fmt="e4m3", axis=-1)
    codes2, scales2 = codes.copy(), scales.copy()
    scales2[1, 0] += 1          # one scale one code off: 1 scale + 32 codes
    scales2[2, 1] += 3          # a scale three codes off: a violation
    codes2[3, 40] ^= 1          # one code wrong
    code_cls, scale_cls = classify.classify_mx(codes2, scales2, codes, scales, axis=-1)
    assert CLASSES[scale_cls[1, 0]] == "scale_off_by_one" and CLASSES[scale_cls[2, 1]] == "bound_violation"
    assert (code_cls[1, :32] == classify.SCALE).all() and (code_cls[1, 32:] == classify.EQUAL).all()
    assert CLASSES[code_cls[3, 40]] == "bound_violation"
    assert classify.counts(code_cls)["scale_off_by_one"] == 32


def test_ulp_steps_walk_the_dtype_grid():
    assert classify.step_ulps(1.0, 1, "bf16") == 1.0078125
    assert classify.step_ulps(1.0, -1, "bf16") == 1.0 - 2 ** -8
    assert classify.step_ulps(0.0, 1, "fp32") == 2.0 ** -149
    assert classify.step_ulps(-0.0, 1, "bf16") == 2.0 ** -133
    assert classify.step_ulps(1.0, 1, "fp32") == 1.0 + 2 ** -23
    assert classify.step_ulps(1.0, 1, "fp64") == np.nextafter(1.0, 2.0)
    assert classify.ulp_distance(np.float32(-1.0), np.float32(1.0), "fp32") == 2 * 0x3F800000


@pytest.mark.parametrize("K", [16, 256, 2048])
def test_any_fp32_summation_order_lies_inside_the_bound(K):
    """The bound interval holds every fp32 accumulation of the same products (forward, backward, pairwise,
    shuffled), and not a value a few ulps beyond it."""
    rng = np.random.default_rng(K)
    A = _core.round_to(rng.standard_normal((8, K)), "bf16")
    B = _core.round_to(rng.standard_normal((6, K)) * np.exp(rng.uniform(-3, 3, (1, K))), "bf16")
    c32, S, _ = _core.exact_gemm_nt(A, B)
    lo, hi = classify.accumulator_interval(c32, S, K)
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
    assert np.all(classify.step_ulps(hi, 1, "fp32") > hi)
    cls = classify.classify(classify.step_ulps(hi, 1, "fp32"), c32, "fp32", lo=lo, hi=hi)
    assert (cls == classify.VIOLATION).all()
