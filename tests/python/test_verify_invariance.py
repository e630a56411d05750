"""Invariance checks (issue 5): cross-scenario `moenum.verify.invariance_checks(results)` over the points
a campaign ran, and the per-point single-vs-discrete weights check of layout-sensitive backends."""
import h5py
import pytest

import moenum
from moenum import traits, verify

CAMPAIGN = {
    "name": "vinv", "seed": 4,
    "model": {"experts": 4, "hidden": 32, "ffn": 32, "topk": 2, "bias": True},
    "tokens": 64, "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 1.0}},
    "dispatch": {"ep": 1, "padding": "module", "align": 16},
    "recipe": {"name": "bf16"}, "backends": ["golden", "reference", "cpu.eigen"],
    "verify": {"stages": False},
    "sweep": {"dispatch.padding": ["module", "hybridep", "router"], "dispatch.ep": [1, 2],
              "weights": ["single", "discrete"]},
}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("inv")
    camp = moenum.run_campaign(CAMPAIGN, out=out, quiet=True)
    # stage checks off: cpu.eigen is compared across points but nothing verifies it
    assert camp.verdict == "not_verified", [r.disposition for r in camp.results]
    return camp


def test_invariances_hold_across_the_campaign(campaign):
    checks = verify.invariance_checks(campaign.results)
    kinds = {name.split("(")[0] for name in checks}
    assert kinds == {"invariance.weights", "invariance.padding_module_hybridep", "invariance.ep_zero_padding",
                     "invariance.golden"}
    assert all(ok for ok, _ in checks.values()), {k: d for k, (ok, d) in checks.items() if not ok}
    # groups: weights pairs over 6 (padding, ep) points; module/hybridep over 4 (ep, weights); EP over
    # the 4 zero-padding (padding, weights) groups; golden over all 12 points
    assert sum(k.startswith("invariance.weights(") for k in checks) == 6
    assert sum(k.startswith("invariance.padding_module_hybridep(") for k in checks) == 4
    assert sum(k.startswith("invariance.ep_zero_padding(") for k in checks) == 4
    (golden,) = [d for k, (_, d) in checks.items() if k.startswith("invariance.golden(")]
    assert "12 points" in golden
    assert all("/" not in name for name in checks)  # valid /checks/<name> in HDF5


def test_a_differing_point_fails_its_invariance_and_is_named(campaign, tmp_path):
    import shutil
    results = []
    for r in campaign.results:
        copy = tmp_path / r.path.name
        shutil.copy(r.path, copy)
        results.append(moenum.result.RunResult(**{**r.__dict__, "path": copy}))
    victim = next(r for r in results if r.sweep_point == {"dispatch.padding": "hybridep", "dispatch.ep": 2,
                                                            "weights": "single"})
    with h5py.File(victim.path, "r+") as f:
        ds = f["results/cpu.eigen/dw1"]
        v = ds[()]
        v[1, 2, 3] += 1e-3
        ds[...] = v
    checks = verify.invariance_checks(results)
    failed = {k: d for k, (ok, d) in checks.items() if not ok}
    assert {k.split("(")[0] for k in failed} == {"invariance.weights", "invariance.padding_module_hybridep",
                                                 "invariance.ep_zero_padding"}
    for d in failed.values():
        assert "cpu.eigen" in d and victim.name in d and "dw1" in d and "[1, 2, 3]" in d
    assert all(ok for k, (ok, _) in checks.items() if k.startswith("invariance.golden("))


@pytest.mark.parametrize("device,relative,holds", [("cpu", 1e-14, False), ("gpu", 1e-14, True), ("gpu", 1e-6, False)])
def test_golden_on_the_gpu_is_invariant_to_1e12_not_bitwise(campaign, tmp_path, device, relative, holds):
    """golden's GPU GEMMs sum in cuBLAS's order, which may follow the rows: its invariances are then
    checked to verify.GPU_GOLDEN_TOLERANCE; on the CPU they stay bitwise."""
    import shutil
    results = []
    for r in campaign.results:
        copy = tmp_path / r.path.name
        shutil.copy(r.path, copy)
        with h5py.File(copy, "r+") as f:
            f["results/golden"].attrs["execution_device"] = device
        results.append(moenum.result.RunResult(**{**r.__dict__, "path": copy}))
    with h5py.File(results[-1].path, "r+") as f:
        ds = f["results/golden/dw1"]
        v = ds[()]
        v[1, 2, 3] *= 1 + relative
        ds[...] = v
    golden = {k: ok for k, (ok, _) in verify.invariance_checks(results).items() if k.startswith("invariance.golden(")}
    assert golden and all(ok == holds for ok in golden.values()), golden


def test_per_point_weights_layout_check_reruns_layout_sensitive_backends(tmp_path, monkeypatch):
    cfg = {k: v for k, v in CAMPAIGN.items() if k != "sweep"}
    res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
    assert not any(k.startswith("invariance.weights.") for k in res.checks)  # CPU backends: trivially
    layout_sensitive = traits.layout_sensitive
    monkeypatch.setattr(traits, "layout_sensitive", lambda name: name == "cpu.eigen" or layout_sensitive(name))
    res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
    assert res.checks["invariance.weights.cpu.eigen"], res.check_details
    assert "bitwise identical" in res.check_details["invariance.weights.cpu.eigen"]


def test_weights_layout_rerun_shares_the_points_inputs(tmp_path, monkeypatch):
    """The rerun gets the other layout on the same prepared inputs: one input generation per point."""
    from moenum import _core
    cfg = {k: v for k, v in CAMPAIGN.items() if k != "sweep"}
    monkeypatch.setattr(traits, "layout_sensitive", lambda name: name == "cpu.eigen")
    prepares, layouts = [], []
    real_prepare, real_run = _core.prepare, _core.run_backend

    def prepare(sc):
        prepares.append(sc.weights)
        return real_prepare(sc)

    def run_backend(name, prepared, keep_stages=None, weights=None):
        layouts.append((name, weights))
        return real_run(name, prepared, keep_stages, weights)
    monkeypatch.setattr(_core, "prepare", prepare)
    monkeypatch.setattr(_core, "run_backend", run_backend)
    res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
    assert res.checks["invariance.weights.cpu.eigen"], res.check_details
    assert prepares == ["single"]
    assert ("cpu.eigen", "discrete") in layouts
