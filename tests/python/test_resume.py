"""--resume keeps only a clean, complete, uninjected run of the same scenario with the same backends
whose not_run backends could not run now; every other point runs again."""
import h5py
import pytest
import yaml

import moenum
from moenum.resume import rerun_reason

from conftest import moenum_cli


@pytest.fixture
def scenario(tmp_path, tiny_config):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(dict(tiny_config, backends=["golden", "reference", "cpu.eigen"])))
    return path


def _last(r):
    return r.stdout.strip().splitlines()[-1]


def _resume(scenario, out):
    r = moenum_cli("run", scenario, "-o", out, "--resume")
    return r.returncode, _last(r)


def test_a_clean_run_is_kept(tmp_path, scenario):
    out = tmp_path / "out"
    assert moenum_cli("run", scenario, "-o", out, "-q").returncode == 0
    code, last = _resume(scenario, out)
    assert code == 0 and "1 resumed" in last, last


def test_a_fault_injected_run_is_run_again(tmp_path, scenario):
    out = tmp_path / "out"
    r = moenum_cli("run", scenario, "-o", out, "-q", "--inject", "cpu.eigen:dw1[1,2,3]+=0.5")
    assert r.returncode == 1, r.stdout + r.stderr
    code, last = _resume(scenario, out)
    assert code == 0 and last.startswith("# OK: ") and "resumed" not in last, last


def test_a_run_with_fewer_backends_is_run_again(tmp_path, scenario):
    out = tmp_path / "out"
    assert moenum_cli("run", scenario, "-o", out, "-q", "--backends", "golden").returncode == 4
    code, last = _resume(scenario, out)
    assert code == 0 and "resumed" not in last and "3 passed" in last, last


@pytest.mark.parametrize("was", ["not_run", "error"])
def test_a_backend_that_could_run_now_or_errored_is_run_again(tmp_path, scenario, was):
    """A file from a machine where cpu.eigen did not run (as a GPU backend does not without a GPU), or
    where it crashed: cpu.eigen can run here, so the point runs again."""
    out = tmp_path / "out"
    assert moenum_cli("run", scenario, "-o", out, "-q").returncode == 0
    (path,) = out.glob("*.h5")
    with h5py.File(path, "r+") as f:
        f["results/cpu.eigen"].attrs["disposition"] = was
    (sc,) = moenum.load_scenarios(scenario)
    assert rerun_reason(path, sc) is not None
    code, last = _resume(scenario, out)
    assert code == 0 and "resumed" not in last, last
    with h5py.File(path, "r") as f:
        assert f["results/cpu.eigen"].attrs["disposition"] == "passed"


def test_a_backend_that_still_cannot_run_is_kept(tmp_path, tiny_config):
    """not_run because no GPU is here, and still none: the file stands for the point."""
    if moenum._core.gpu_description() != "none":
        pytest.skip("a GPU is present: gpu.grouped can run here")
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(dict(tiny_config, backends=["golden", "reference", "gpu.grouped"])))
    out = tmp_path / "out"
    assert moenum_cli("run", path, "-o", out, "-q").returncode == 4
    (sc,) = moenum.load_scenarios(path)
    (result,) = out.glob("*.h5")
    assert rerun_reason(result, sc) is None


def test_a_changed_or_truncated_file_is_run_again(tmp_path, scenario, tiny_config):
    out = tmp_path / "out"
    assert moenum_cli("run", scenario, "-o", out, "-q").returncode == 0
    (path,) = out.glob("*.h5")
    (sc,) = moenum.load_scenarios(scenario)
    assert rerun_reason(path, sc) is None
    changed = moenum.from_dict(dict(tiny_config, seed=6, backends=["golden", "reference", "cpu.eigen"]))[0]
    assert rerun_reason(path, changed) == "the scenario changed"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert rerun_reason(path, sc) == "the results file is incomplete or unreadable"


@pytest.mark.gpu
def test_a_gpu_backend_that_was_not_run_runs_now(tmp_path, tiny_config):
    """A file written where gpu.grouped was not_run (no GPU then), resumed on a GPU machine."""
    if moenum._core.gpu_description() == "none":
        pytest.skip("no CUDA device: gpu.grouped cannot run here")
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(dict(tiny_config, backends=["golden", "reference", "gpu.grouped"])))
    out = tmp_path / "out"
    assert moenum_cli("run", path, "-o", out, "-q").returncode == 0
    (result,) = out.glob("*.h5")
    with h5py.File(result, "r+") as f:
        f["results/gpu.grouped"].attrs["disposition"] = "not_run"
    (sc,) = moenum.load_scenarios(path)
    assert rerun_reason(result, sc) == "gpu.grouped did not run then and can run now"
    code, last = _resume(path, out)
    assert code == 0 and "resumed" not in last, last


@pytest.mark.gpu
def test_gpu_memory_is_reported_and_a_point_too_large_for_it_is_refused(tiny_config):
    from moenum import resources
    free, total = moenum._core.gpu_memory()
    if not total:
        pytest.skip("no CUDA device")
    assert 0 < free <= total
    cfg = dict(tiny_config, tokens=1 << 20, model=dict(tiny_config["model"], experts=64, hidden=8192, ffn=8192),
               dispatch={"ep": 1, "padding": "none"}, backends=["gpu.grouped"], compare={"baseline": "gpu.grouped"})
    (sc,) = moenum.from_dict(cfg)
    assert resources.gpu_bytes(sc.config) > free
    with pytest.raises(moenum.errors.EnvironmentFailure, match="memory"):
        resources.require_fits([sc])
