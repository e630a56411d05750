"""The nightly gate: per-architecture baselines (baselines/<arch>.json), --update-baseline printing
what changed, a backend that passed in the baseline and does not pass now (a GPU backend not_run)
as a regression, --require gpu, and the scheduled jobs that all run scripts/nightly.sh."""
import json
import os
import subprocess

import pytest
import yaml

import moenum
from moenum import bundled
from moenum.nightly import architecture, regressions

from conftest import ROOT, moenum_cli
from test_nightly import SUITE

HAVE_GPU = moenum._core.gpu_description() != "none"


def entry(disposition, reason="", **rel_fro):
    return {"disposition": disposition, "reason": reason, "rel_fro": rel_fro}


def test_a_backend_that_passed_and_is_not_run_now_is_a_regression():
    baseline = {"p": {"reference": entry("passed", y=1e-3), "gpu.grouped": entry("passed", y=1e-3),
                      "gpu.multistream": entry("passed", y=1e-3), "cpu.eigen": entry("passed", y=1e-3)}}
    tonight = {"p": {"reference": entry("passed", y=1e-3), "gpu.grouped": entry("not_run", "no CUDA device"),
                     "cpu.eigen": entry("not_verified", "stage checks off")}}
    found = regressions(tonight, baseline, 2.0)
    assert found == ["p gpu.multistream: passed in the baseline, not in tonight's run",
                     "p gpu.grouped: passed in the baseline, not_run now (no CUDA device)",
                     "p cpu.eigen: passed in the baseline, not_verified now (stage checks off)"]
    assert regressions(baseline, baseline, 2.0) == []
    # what was not passing before is no regression when it still does not pass
    assert regressions(tonight, {"p": {"gpu.grouped": entry("not_run")}}, 2.0) == []


def test_per_architecture_baseline_update_prints_changes_then_gates(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "gate.yaml").write_text(SUITE)
    baselines = tmp_path / "baselines"
    arch = architecture()
    assert arch == "cpu" if not HAVE_GPU else arch.startswith("sm_")

    first = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n1", "--baseline", baselines,
                       "--update-baseline")
    assert first.returncode == 0, first.stdout + first.stderr
    written = baselines / f"{arch}.json"
    doc = json.loads(written.read_text())
    assert doc["arch"] == arch and set(doc["scenarios"]) == {"gate/dispatch.padding=module",
                                                           "gate/dispatch.padding=hybridep"}
    assert "baseline: + gate/dispatch.padding=module reference: new, passed" in first.stdout

    # tonight against it: nothing moved, no regression
    again = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n2", "--baseline", baselines)
    assert again.returncode == 0 and ", 0 regressions," in again.stdout, again.stdout

    # a baseline from a night on which the reference was 10x better and gpu.grouped passed
    for point in doc["scenarios"].values():
        point["reference"]["rel_fro"] = {t: v / 10 for t, v in point["reference"]["rel_fro"].items()}
        point["gpu.grouped"]["disposition"] = "passed"
    written.write_text(json.dumps(doc))
    gate = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n3", "--baseline", baselines)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "regression: gate/dispatch.padding=module reference y: rel_fro" in gate.stdout
    if not HAVE_GPU:
        assert "regression: gate/dispatch.padding=module gpu.grouped: passed in the baseline, not_run now" \
            in gate.stdout

    # accepting tonight: the changes are printed and the gate is green again
    update = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n4", "--baseline", baselines,
                        "--update-baseline")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "baseline: ~ gate/dispatch.padding=module reference y: rel_fro " in update.stdout
    assert "(x10)" in update.stdout
    if not HAVE_GPU:
        assert "baseline: ~ gate/dispatch.padding=module gpu.grouped: passed -> not_run" in update.stdout
    assert "regression:" not in update.stdout
    assert moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n5", "--baseline", baselines).returncode == 0

    bad = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n6", "--update-baseline")
    assert bad.returncode == 2 and "--update-baseline: needs --baseline FILE or DIR" in bad.stderr


@pytest.mark.skipif(HAVE_GPU, reason="checks the refusal on a machine without a GPU")
def test_require_gpu_without_a_gpu_is_an_environment_failure(tmp_path):
    proc = moenum_cli("nightly", "--require", "gpu", "-o", tmp_path / "n")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("moenum: error: --require gpu: ")
    assert not (tmp_path / "n").exists()  # refused up front


def test_scheduled_jobs_run_the_one_nightly_command(tmp_path):
    workflow = yaml.safe_load((ROOT / ".github/workflows/nightly-gpu.yml").read_text())
    (job,) = workflow["jobs"].values()
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert workflow[True]["schedule"][0]["cron"]  # PyYAML reads the key `on` as True
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert runs == ["bash scripts/nightly.sh results/nightly"]
    slurm = (ROOT / "scripts/nightly.slurm").read_text()
    assert "#SBATCH --gres=gpu:1" in slurm and 'exec bash scripts/nightly.sh "results/nightly-' in slurm
    if HAVE_GPU:
        pytest.skip("running the gate itself is scripts/gpu-check.sh's job on a GPU machine")
    # the command itself, without its build step: on this machine it must refuse, not go green
    proc = subprocess.run(["bash", str(ROOT / "scripts/nightly.sh"), str(tmp_path / "n")], capture_output=True,
                          text=True, env={**os.environ, "MOENUM_NIGHTLY_SKIP_SETUP": "1"}, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "--require gpu" in proc.stderr


def test_cpu_baseline_covers_the_bundled_nightly_suite():
    """baselines/cpu.json is what `moenum nightly --baseline baselines` compares with on a machine
    without a GPU: it must name exactly tonight's points and backends, but for the production-scale
    points whose oracles need the GPU (execution.device: gpu), which such a machine refuses."""
    doc = json.loads((ROOT / "baselines/cpu.json").read_text())
    assert doc["arch"] == "cpu"
    points = [sc for sc in moenum.load_scenarios(bundled.path_of("nightly"))
              if sc.config["execution"]["device"] != "gpu"]
    assert len(points) < len(moenum.load_scenarios(bundled.path_of("nightly")))
    assert set(doc["scenarios"]) == {sc.name for sc in points}
    for sc in points:
        assert set(doc["scenarios"][sc.name]) == set(sc["backends"])
        assert doc["scenarios"][sc.name]["reference"]["disposition"] == "passed"


def test_update_baseline_refuses_a_failed_night(tmp_path, monkeypatch, capsys):
    from moenum import verify
    from moenum.cli import main
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "gate.yaml").write_text(SUITE.replace("backends:", "recipe: {name: bf16}\nbackends:"))
    baselines = tmp_path / "baselines"
    monkeypatch.setitem(verify.RECIPE_TOLERANCE, "bf16", 1e-12)  # bf16 cannot meet an fp64 tolerance
    rc = main(["nightly", "--suite", str(suite), "-o", str(tmp_path / "n"), "--baseline", str(baselines),
               "--update-baseline", "-q"])
    assert rc == 1 and not baselines.exists()
    assert f"baseline: {baselines / (architecture() + '.json')} not updated: tonight's run failed" \
        in capsys.readouterr().out
