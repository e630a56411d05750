"""Dispositions, verdicts and exit codes (interfaces.md, "Additions"): a backend under test that
nothing verified is not_verified and `moenum run` exits 4; a backend that raises is an error and exits
1."""
import json

import h5py
import pytest
import yaml

import moenum
from moenum import _core
from moenum.cli import main

from conftest import moenum_cli

CFG = {
    "name": "disp", "seed": 3,
    "model": {"experts": 4, "hidden": 32, "ffn": 32, "topk": 2, "bias": True},
    "tokens": 32, "dispatch": {"ep": 2, "padding": "none"}, "recipe": {"name": "bf16"},
    "backends": ["golden", "reference", "cpu.eigen", "gpu.grouped"],
}


def write(tmp_path, **changes):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**CFG, **changes}))
    return path


def last_line(text):
    return text.strip().splitlines()[-1]


def test_disposition_strings_are_the_cores():
    assert [d.value for d in moenum.Disposition] == list(_core.DISPOSITIONS)
    assert list(_core.DISPOSITIONS) == ["passed", "failed", "error", "not_verified", "not_run", "not_supported"]
    assert moenum.Disposition.NOT_VERIFIED == "not_verified"


def test_stage_checks_off_is_not_verified_and_exits_4(tmp_path):
    path = write(tmp_path, verify={"stages": False})
    out = tmp_path / "out"
    proc = moenum_cli("run", path, "-o", out)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert last_line(proc.stdout).startswith("# NOT VERIFIED: no backend under test was verified in 1 scenario point")
    r = moenum.open_results(out / "disp.h5")
    assert r.disposition["golden"] == r.disposition["reference"] == "passed"  # the yardsticks ran
    assert r.disposition["cpu.eigen"] == "not_verified"                       # the sanity check passed it not
    assert "verify.stages: false" in r.reasons["cpu.eigen"]
    assert r.checks["recipe_error.cpu.eigen"] and r.verdict == "not_verified" and not r.passed
    with h5py.File(r.path) as f:
        assert f["results/cpu.eigen"].attrs["disposition"] == "not_verified"
    index = json.loads((out / "index.json").read_text())
    (point,) = index["points"]
    assert point["status"] == "not_verified" and point["dispositions"]["cpu.eigen"] == "not_verified"
    assert set(r.errors[r.errors.backend == "cpu.eigen"].disposition) == {"not_verified"}


def test_with_stage_checks_the_same_point_passes(tmp_path):
    proc = moenum_cli("run", write(tmp_path), "-o", tmp_path / "out", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc.stdout).startswith("# OK: 1 scenario point passed")


def test_sanity_check_can_still_fail_an_unverified_backend(tmp_path, monkeypatch, capsys):
    from moenum import verify
    monkeypatch.setitem(verify.RECIPE_TOLERANCE, "bf16", 1e-12)  # bf16 cannot meet an fp64 tolerance
    assert main(["run", str(write(tmp_path, verify={"stages": False})), "-o", str(tmp_path / "out"), "-q"]) == 1
    assert last_line(capsys.readouterr().out).startswith("# FAILED: 1 scenario point failed")


def crash_cpu_eigen(monkeypatch):
    """cpu.eigen raises a real C++ InternalError: it is run on a scenario it cannot run (Backend::run)."""
    real = _core.run_backend

    def run_backend(name, prepared, keep_stages=None, weights=None):
        if name != "cpu.eigen":
            return real(name, prepared, keep_stages, weights)
        sc = moenum.scenario.to_core(moenum.from_dict(CFG)[0])
        sc.recipe.name = "fp8_block"
        return real(name, _core.prepare(sc), keep_stages, weights)
    monkeypatch.setattr(_core, "run_backend", run_backend)


def test_cpp_backend_run_refuses_what_it_cannot_run():
    sc = moenum.scenario.to_core(moenum.from_dict(CFG)[0])
    sc.recipe.name = "fp8_block"
    with pytest.raises(_core.InternalError, match="cpu.eigen cannot run scenario 'disp'"):
        _core.run_backend("cpu.eigen", _core.prepare(sc))


def test_backend_that_raises_is_an_error_and_exits_1(tmp_path, monkeypatch, capsys):
    crash_cpu_eigen(monkeypatch)
    res = moenum.run(moenum.from_dict(CFG)[0], out=tmp_path)
    assert res.disposition["cpu.eigen"] == "error" and res.verdict == "error" and not res.passed
    assert res.reasons["cpu.eigen"].startswith("InternalError: ") and "fp8_block" in res.reasons["cpu.eigen"]
    assert res.disposition["golden"] == res.disposition["reference"] == "passed"
    assert main(["run", str(write(tmp_path)), "-o", str(tmp_path / "cli"), "-q"]) == 1
    assert last_line(capsys.readouterr().out).startswith("# ERROR: 1 scenario point had a backend error")


def test_disposition_is_public():
    assert "Disposition" in moenum.__all__ and moenum.Disposition is moenum.disposition.Disposition
