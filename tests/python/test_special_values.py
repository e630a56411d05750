"""Special values end to end (scenarios/special.yaml): every backend computes NaN, +-inf, subnormal and
huge inputs per the spec, the comparisons count NaN against NaN and equal infinities as equal, the
verdict is passed, and a non-finite value where the reference is finite fails."""
from pathlib import Path

import numpy as np
import pytest

import moenum

ROOT = Path(__file__).resolve().parents[2]
POINTS = {sc.config["recipe"].get("inv_scale", "") + sc.config["recipe"]["name"]: sc
          for sc in moenum.load_scenarios(ROOT / "scenarios" / "special.yaml")}


@pytest.mark.parametrize("point", ["te_kernelbf16", "te_kernelmxfp8", "specmxfp8"])
def test_special_values_pass_on_the_cpu_backends(tmp_path, point):
    res = moenum.run(POINTS[point], out=tmp_path)
    assert res.verdict == "passed", res.disposition
    assert set(res.disposition.values()) == {"passed"}
    t = res.errors
    whole = t[(t.expert == -1) & t.tensor.isin(["y", "dx"])]
    # the NaN and inf inputs reach the outputs, in every backend, at the same places as the reference's
    ref = whole[(whole.backend == "cpu.eigen") & (whole.other == "reference")]
    assert (ref.nonfinite > 0).all() and (ref.nonfinite_mismatch == 0).all(), ref
    assert np.isfinite(ref.rel_fro).all()  # over the elements finite in both
    r = moenum.open_results(res.path)  # the columns survive the file
    assert (r.errors.nonfinite == t.nonfinite).all()
    assert "non-finite values in" in r.check_details["outputs_complete.reference"]


def test_te_kernel_and_spec_differ_in_inf_blocks(tmp_path):
    """A block of x holding inf: te_kernel codes the inf as NaN (0x7F) and the rest +-0; spec codes it
    +-max normal (0x7E / 0xFE) and keeps huge neighbours; tiny blocks vanish under te_kernel only.
    The operand stages of the reference show it."""
    codes = {}
    for rule in ("te_kernel", "spec"):
        cfg = dict(POINTS[rule + "mxfp8"].config, backends=["golden", "reference"])
        cfg["output"] = dict(cfg["output"], intermediates=True)
        cfg["name"] = f"special-{rule.replace('_', '-')}"
        cfg.pop("sweep", None)
        res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
        codes[rule] = res.tensor("reference", "stages/fc1_fprop.A.codes")
        x_rows = res.tensor("reference", "stages/fc1_fprop.A.scales")
        assert (x_rows == 0xFE).any()  # some rowwise block of x holds an inf
    te, sp = codes["te_kernel"], codes["spec"]
    differ = te != sp
    assert differ.any()
    # te_kernel: inf -> NaN, the rest of an inf block and every tiny (code 0) block -> +-0
    assert set(np.unique(te[differ])) <= {0x7F, 0x00, 0x80} and (te[differ] == 0x7F).any()
    assert ((sp[differ] & 0x7F) == 0x7E).any()                  # spec: inf -> +-max normal


def test_a_nonfinite_value_where_the_reference_is_finite_fails(tmp_path):
    sc = POINTS["te_kernelbf16"]
    probe = moenum.run(sc, out=tmp_path / "probe", backends=["golden", "reference"])
    import h5py
    with h5py.File(probe.path) as f:
        y = f["results/reference/y"][()]
    i, j = map(int, np.argwhere(np.isfinite(y))[0])
    # +1e39 rounds to +inf in bf16: inf where the reference is finite
    res = moenum.run(sc, out=tmp_path / "inj", inject=[f"cpu.eigen:y[{i},{j}]+=1.0e39"])
    assert res.disposition["cpu.eigen"] == "failed"
    (inj,) = res.injections
    assert inj["outcome"] == "detected", inj["detail"]
