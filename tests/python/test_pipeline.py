"""The CPU pipeline end to end: run, results file layout, read-back, invariances, atomic writes."""
import copy
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import moenum
from moenum.verify import COLUMNS

from conftest import SCENARIOS, moenum_cli, with_changes


def run_cfg(cfg, tmp_path, **changes):
    cfg = with_changes(cfg, **changes)
    name_suffix = "-".join(f"{k.replace('__', '.')}{v}" for k, v in changes.items()).replace("_", "")
    cfg["name"] = (cfg["name"] + "-" + name_suffix).lower()[:60] if changes else cfg["name"]
    return moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)


def test_smoke_run_writes_documented_layout(tmp_path):
    (sc, *_) = moenum.load_scenarios(SCENARIOS / "smoke.yaml")
    res = moenum.run(sc, out=tmp_path)
    assert res.passed, (res.disposition, res.check_details)
    assert res.disposition == {"golden": "passed", "reference": "passed", "cpu.eigen": "passed"}
    with h5py.File(res.path, "r") as f:
        for attr in ("schema_version", "moenum_version", "git_sha", "created", "host", "gpu", "scenario_yaml"):
            assert attr in f.attrs
        assert "name: smoke/recipe.name=fp32" in f.attrs["scenario_yaml"]
        T, k = f["routing/topk_idx"].shape
        assert f["routing/topk_idx"].dtype == np.int32 and f["routing/probs"].dtype == np.float32
        assert f["routing/tokens_per_expert"][()].sum() == T * k
        assert set(f["dispatch"]) == {"rank_0", "rank_1"}
        assert f["dispatch/rank_0/row_token"].dtype == np.int64
        assert f["dispatch/rank_0/tokens_per_expert"].shape == (4,)
        assert set(f["inputs"]) == {"x", "w1", "b1", "w2", "b2", "dy"}
        for backend in ("golden", "reference"):
            g = f[f"results/{backend}"]
            assert g.attrs["disposition"] == "passed"
            assert set(g) >= {"y", "dx", "dw1", "dw2", "db1", "db2", "dprobs"}
            for name in g:
                assert np.any(g[name][()] != 0), f"{backend}/{name} is all zeros"
        assert f["results/golden/y"].dtype == np.float64
        assert f["results/reference/y"].dtype == np.float32
        assert f["tables/errors"].dtype.names == tuple(COLUMNS)


def test_gpu_attribute_describes_the_device_or_none(tmp_path, tiny_config):
    res = run_cfg(tiny_config, tmp_path)
    with h5py.File(res.path) as f:
        gpu = f.attrs["gpu"]
    assert gpu == moenum._core.gpu_description()
    if not moenum._core.built_with_cuda:
        assert gpu == "none"
    elif gpu != "none":
        assert " sm_" in gpu and " cublasLt " in gpu


def test_error_table_reads_back_with_documented_columns(tmp_path, tiny_config):
    res = run_cfg(tiny_config, tmp_path)
    back = moenum.open_results(res.path)
    assert list(back.errors.columns) == COLUMNS
    assert back.disposition == res.disposition
    assert back.errors.shape == res.errors.shape
    np.testing.assert_array_equal(back.errors.max_abs.to_numpy(), res.errors.max_abs.to_numpy())
    whole = back.errors[(back.errors.expert == -1) & (back.errors.backend == "reference")]
    assert set(whole.tensor) == {"y", "dx", "dw1", "dw2", "db1", "db2", "dprobs"}
    per_expert = back.errors[(back.errors.tensor == "dw1") & (back.errors.expert >= 0)]
    assert sorted(per_expert.expert.unique()) == list(range(4))
    # bf16 is a real approximation of golden: small, non-zero error
    y = whole[whole.tensor == "y"].iloc[0]
    assert 0 < y.rel_fro < 2e-2 and y.max_ulp >= 0.5


def test_results_summary_writes_the_tables_not_the_tensors(tmp_path, tiny_config):
    full = run_cfg(tiny_config, tmp_path / "full")
    summary = run_cfg(tiny_config, tmp_path / "summary", output__results="summary")
    assert summary.disposition == full.disposition and summary.checks == full.checks
    with h5py.File(full.path) as f, h5py.File(summary.path) as g:
        for backend in full.disposition:
            assert set(f[f"results/{backend}"]) >= {"y", "dw1"}
            assert len(g[f"results/{backend}"]) == 0  # the group, with its attributes only
            attrs = lambda h: {k: v for k, v in h[f"results/{backend}"].attrs.items() if k != "seconds"}
            assert attrs(g) == attrs(f)
        assert set(g["tables"]) == set(f["tables"]) and set(g["checks"]) == set(f["checks"])
        assert summary.path.stat().st_size < full.path.stat().st_size
    back = moenum.open_results(summary.path)
    np.testing.assert_array_equal(back.errors.max_abs.to_numpy(), full.errors.max_abs.to_numpy())
    with pytest.raises(KeyError, match="output.results: summary"):
        back.tensor("reference", "y")
    # no tensors to compare: the point takes no part in cross-point invariance checks
    assert moenum.verify.invariance_checks([full, back]) == {}


def test_golden_invariant_across_ep_and_padding(tmp_path, tiny_config):
    cfg = copy.deepcopy(tiny_config)
    cfg["model"].update(experts=8)
    cfg["tokens"] = 64
    runs = []
    for ep in (1, 2, 4):
        for padding in ("none", "router", "router_post", "module", "hybridep"):
            changes = {"dispatch": {"ep": ep, "padding": padding, "align": 8}}
            c = copy.deepcopy(cfg)
            c["dispatch"] = changes["dispatch"]
            c["name"] = f"inv-golden-ep{ep}-{padding}"
            c["backends"] = ["golden", "reference"]
            runs.append(moenum.run(moenum.from_dict(c)[0], out=tmp_path))
    base = runs[0]
    for r in runs[1:]:
        for t in ("y", "dx", "dw1", "dw2", "db1", "db2", "dprobs"):
            a, b = base.tensor("golden", t), r.tensor("golden", t)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * np.abs(a).max(), err_msg=f"{r.name}:{t}")


def test_bf16_reference_y_bitwise_across_ep_and_zero_padding(tmp_path, tiny_config):
    cfg = copy.deepcopy(tiny_config)
    cfg["model"].update(experts=8)
    cfg["tokens"] = 64
    ys = {}
    for ep in (1, 2, 4):
        for padding in ("none", "module", "hybridep"):
            c = copy.deepcopy(cfg)
            c["dispatch"] = {"ep": ep, "padding": padding, "align": 8}
            c["name"] = f"inv-bf16-ep{ep}-{padding}"
            ys[(ep, padding)] = moenum.run(moenum.from_dict(c)[0], out=tmp_path).tensor("reference", "y")
    first = ys[(1, "none")]
    for key, y in ys.items():
        assert np.array_equal(y.view(np.uint32), first.view(np.uint32)), key


def test_inputs_identical_across_ep_and_padding(tmp_path, tiny_config):
    paths = []
    for ep, padding in ((1, "none"), (2, "module"), (2, "router")):
        c = copy.deepcopy(tiny_config)
        c["dispatch"] = {"ep": ep, "padding": padding, "align": 8}
        c["name"] = f"inputs-ep{ep}-{padding}"
        c["backends"] = ["golden"]
        c["compare"] = {"baseline": "golden"}
        paths.append(moenum.run(moenum.from_dict(c)[0], out=tmp_path).path)
    with h5py.File(paths[0]) as f0:
        for p in paths[1:]:
            with h5py.File(p) as f:
                for name in f0["inputs"]:
                    assert np.array_equal(f0["inputs"][name][()], f["inputs"][name][()])
                assert np.array_equal(f0["routing/topk_idx"][()], f["routing/topk_idx"][()])


def test_cli_run_prints_table_and_ok(tmp_path):
    proc = moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("# OK: 2 scenario points passed")
    assert "rel_fro" in proc.stdout and "reference" in proc.stdout
    assert "[2/2]" in proc.stderr  # progress
    files = sorted(p.name for p in tmp_path.glob("*.h5"))
    assert files == ["smoke__recipe.name=bf16.h5", "smoke__recipe.name=fp32.h5"]
    rep = moenum_cli("report", tmp_path, "--by", "tensor,expert", "--limit", "5")
    assert rep.returncode == 0, rep.stderr
    assert "expert" in rep.stdout and "== smoke/recipe.name=bf16" in rep.stdout
    stages = moenum_cli("report", tmp_path / "smoke__recipe.name=bf16.h5", "--stages")
    assert stages.returncode == 0, stages.stderr
    assert "-- stage checks (teacher-forced)" in stages.stdout
    assert "cpu.eigen" in stages.stdout and "bound_violation" in stages.stdout and " dw1 " in stages.stdout
    bad = moenum_cli("report", tmp_path, "--by", "colour")
    assert bad.returncode == 2 and "--by" in bad.stderr


def test_cli_failed_check_exits_1(tmp_path, tiny_config):
    """Exit code 1 when a check fails: tighten the bf16 recipe check below what bf16 can reach."""
    from moenum.cli import main
    import yaml
    c = copy.deepcopy(tiny_config)
    c["backends"] = ["golden", "reference", "cpu.eigen"]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(c))
    assert main(["run", str(path), "-o", str(tmp_path), "-q"]) == 0
    from moenum import verify
    old = dict(verify.RECIPE_TOLERANCE)
    verify.RECIPE_TOLERANCE["bf16"] = 1e-12  # the bf16 recipe cannot meet an fp64 tolerance
    try:
        assert main(["run", str(path), "-o", str(tmp_path / "2"), "-q"]) == 1
    finally:
        verify.RECIPE_TOLERANCE.update(old)


def test_write_failure_leaves_old_file(tmp_path, tiny_config, monkeypatch):
    res = run_cfg(tiny_config, tmp_path)
    before = res.path.read_bytes()
    from moenum import results_io

    def boom(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(results_io, "errors_to_records", boom)
    with pytest.raises(moenum.errors.EnvironmentFailure, match="disk full"):
        run_cfg(tiny_config, tmp_path)
    assert res.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [res.path.name]  # no temporary left behind


@pytest.mark.slow
def test_kill_mid_run_never_leaves_truncated_file(tmp_path):
    """SIGKILL the CLI at several moments of a run that rewrites existing files: every *.h5 in the
    folder is always a complete, readable results file."""
    scenario = tmp_path / "big.yaml"
    scenario.write_text(
        "name: big\nmodel: {experts: 8, hidden: 256, ffn: 256, topk: 2}\ntokens: 1024\n"
        "backends: [golden, reference]\noutput: {inputs: true, diffs: full}\n"
        "sweep: {seed: [1, 2, 3]}\n")
    out = tmp_path / "out"
    assert moenum_cli("run", scenario, "-o", out, "-q").returncode == 4  # golden and reference: nothing under test
    complete = {p.name: p.read_bytes() for p in out.glob("*.h5")}
    assert len(complete) == 3
    for delay in (0.3, 0.8, 1.5, 2.5, 4.0):
        proc = subprocess.Popen([sys.executable, "-m", "moenum", "run", str(scenario), "-o", str(out), "-q"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for p in out.glob("*.h5"):
            r = moenum.open_results(p)  # raises on a truncated file
            assert list(r.errors.columns) == COLUMNS
        assert {p.name for p in out.glob("*.h5")} == set(complete)
