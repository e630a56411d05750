"""recipe.accumulate: hopper_mma (numerics.md §6, reference/hopper_mma.h): the reference computes
every GEMM as gpu.grouped's CUTLASS sm90 kernels do, on the tensor-core model of moenum.tc, and the
GEMM stages of a backend that model covers are checked bitwise. Without a GPU the mechanism is tested
on the reference itself (an injection turns its stage checks on); the GPU side is scripts/tc_check.py
(the tc stage of scripts/gpu-check.sh)."""
import copy

import h5py
import ml_dtypes
import numpy as np
import pytest

import moenum
from moenum import stages, traits

BASE = {
    "name": "hopper", "seed": 21,
    "model": {"experts": 4, "hidden": 64, "ffn": 32, "topk": 2, "bias": True},
    "tokens": 128, "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 0.8}},
    "dispatch": {"ep": 2, "padding": "module", "align": 32},
    "recipe": {"name": "bf16", "accumulate": "hopper_mma"},
    "backends": ["golden", "reference"],
    "output": {"inputs": True, "intermediates": True},
}
GEMM_STAGES = [s.name for s in stages.STAGES if s.kind == stages.GEMM]


def config(**recipe):
    cfg = copy.deepcopy(BASE)
    cfg["recipe"].update(recipe)
    cfg["name"] = "hopper-" + "-".join(f"{v}" for v in cfg["recipe"].values())
    return cfg


def run(tmp_path, cfg, inject=None):
    (sc,) = moenum.from_dict(cfg)
    return moenum.run(sc, out=tmp_path, inject=inject)


def segment_rows(f, expert):
    """Plan rows of one expert over all ranks (rank order), as (row index, token) pairs."""
    rows, base = [], 0
    for r in range(len([k for k in f["dispatch"] if k.startswith("rank_")])):
        g = f[f"dispatch/rank_{r}"]
        tok, ex = g["row_token"][()], g["row_expert"][()]
        rows += [(base + i, int(t)) for i, (t, e) in enumerate(zip(tok, ex)) if e == expert]
        base += len(tok)
    return rows


@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
def test_reference_gemms_are_the_tensor_core_model(tmp_path, recipe):
    """dw2 of every expert recomputed here with moenum.tc.dot (and with MMA-Sim where installed) from
    the run's own operands (for mxfp8 the dequantized codes it saved) is the hopper_mma reference's
    dw2 bit for bit; the ideal reference differs from it in many elements, each by a few fp32 ulps."""
    res = run(tmp_path, config(name=recipe))
    assert res.disposition["reference"] == "passed"
    with h5py.File(res.path) as f:
        dw2 = f["results/reference/dw2"][()]
        st = f["results/reference/stages"]
        if recipe == "mxfp8":
            dy_rows = moenum.mx.dequantize(st["fc2_wgrad.A.codes"][()], st["fc2_wgrad.A.scales"][()], "e4m3", axis=-2)
            a_rows = moenum.mx.dequantize(st["fc2_wgrad.B.codes"][()], st["fc2_wgrad.B.scales"][()], "e4m3", axis=-2)
        else:
            dy, a_rows = f["inputs/dy"][()].astype(np.float32), st["a"][()]
        E = dw2.shape[0]
        for e in range(E):
            rows = segment_rows(f, e)
            idx = [i for i, _ in rows]
            if recipe == "mxfp8":
                dye = dy_rows[idx]
            else:
                dye = np.stack([dy[t] if t >= 0 else np.zeros(dy.shape[1], np.float32) for _, t in rows])
            ae = a_rows[idx]
            H, F = dw2.shape[1:]
            A = np.repeat(dye.T, F, axis=0)  # (h, f) pairs: A[h*F + f] = dy[:, h], B[h*F + f] = a[:, f]
            B = np.tile(ae.T, (H, 1))
            want = moenum.tc.dot(np.ascontiguousarray(A), np.ascontiguousarray(B), np.zeros(H * F, np.float32))
            np.testing.assert_array_equal(want.reshape(H, F).view(np.uint32), dw2[e].view(np.uint32))
    ideal = run(tmp_path / "ideal", config(name=recipe, accumulate="ideal"))
    with h5py.File(ideal.path) as f:
        dw2_ideal = f["results/reference/dw2"][()]
    differ = np.count_nonzero(dw2_ideal != dw2)
    assert 0 < differ < dw2.size  # truncation toward zero moves many fp32 accumulators by an ulp or so
    np.testing.assert_allclose(dw2, dw2_ideal, rtol=2e-6, atol=1e-6)

def test_reference_under_hopper_mma_matches_mmasim_where_installed(tmp_path):
    torch = pytest.importorskip("torch", reason="mmasim needs torch (requirements-mmasim.txt)")
    ptx = pytest.importorskip("mmasim.nv_ptx", reason="mmasim not installed (requirements-mmasim.txt)")
    res = run(tmp_path, config())
    with h5py.File(res.path) as f:
        x, w1 = f["inputs/x"][()].astype(np.float32), f["inputs/w1"][()].astype(np.float32)
        rows = segment_rows(f, 1)
        h = f["results/reference/stages/h"][()]
        b1 = f["inputs/b1"][()].astype(np.float32)
    xe = np.stack([x[t] if t >= 0 else np.zeros(x.shape[1], np.float32) for _, t in rows])
    F2 = w1.shape[1]
    A = np.repeat(xe, F2, axis=0)
    B = np.tile(w1[1], (len(rows), 1))
    op = ptx.WGMMA("Hopper", "m64n8k16.f32.bf16.bf16")
    acc = op.dpa(torch.from_numpy(A).bfloat16(), torch.from_numpy(B).bfloat16(), torch.zeros(len(A))).numpy()
    bf16 = lambda v: np.asarray(v, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    want = bf16(bf16(acc).reshape(len(rows), F2) + b1[1])  # epilogue to bf16, then the separate bias
    np.testing.assert_array_equal(want, h[[i for i, _ in rows]])


def test_gemm_stages_are_bitwise_and_a_one_ulp_fault_is_detected(tmp_path):
    """Under hopper_mma the reference's GEMM stages are checked bitwise against the model: all pass
    with every element bitwise_equal, and one fp32 ulp planted in dw1 is detected; under ideal the
    same fault lies inside the bound: undetectable."""
    spec = "reference:dw1[1,5,7]+=1ulp"
    res = run(tmp_path, config(), inject=[spec])
    (inj,) = res.injections
    assert inj["outcome"] == "detected", inj["detail"]
    assert "stage dw1 (gemm fc1_wgrad)" in inj["detail"] and "1 element(s) differ" in inj["detail"]
    st = res.stage_table.query("backend == 'reference' and expert == -1").set_index("stage")
    for name in GEMM_STAGES:
        row = st.loc[name]
        want = row.n - (1 if name == "dw1" else 0)
        assert row.n == row.total and row.bitwise_equal == want, (name, row.to_dict())
        assert row.within_bound == 0
    ideal = run(tmp_path / "ideal", config(accumulate="ideal"), inject=[spec])
    assert ideal.injections[0]["outcome"] == "undetectable", ideal.injections[0]["detail"]


def test_the_gemm_rule_follows_the_traits():
    assert traits.gemm_rule("gpu.grouped", "hopper_mma") == "hopper_mma"
    assert traits.gemm_rule("reference", "hopper_mma") == "hopper_mma"
    assert traits.gemm_rule("gpu.grouped", "ideal") == "bound"
    # cuBLASLt picks its algorithm by heuristics (split-K, reduction order): no fixed order to model
    assert traits.gemm_rule("gpu.multistream", "hopper_mma") == "bound"
    assert traits.gemm_rule("cpu.eigen", "hopper_mma") == "bound"
    assert traits.gemm_rule("torch.loop", "hopper_mma") == "bound"


@pytest.mark.parametrize("recipe,key,message", [
    ({"name": "fp32"}, "recipe.accumulate", "hopper_mma models bf16 tensor-core GEMMs: recipe 'fp32'"),
    ({"bias_mode": "epilogue"}, "recipe.accumulate", "bias_mode must be separate"),
    ({"accumulate": "fp16"}, "recipe.accumulate", "fp16"),
])
def test_impossible_combinations_are_bad_input(recipe, key, message):
    cfg = config(**recipe)
    with pytest.raises(moenum.ScenarioError, match=message) as e:
        moenum.from_dict(cfg)
    assert key in str(e.value)
