"""`execution.device` (auto | cpu | gpu): where golden, reference and the stage checks compute their
fp64 GEMMs. auto is the GPU when this build has CUDA and a device is usable, else the CPU; gpu without one is refused
before anything runs (exit 3, one line). On a GPU machine every bundled scenario's oracles run on both
devices: the reference bitwise the same, golden within 1e-12."""
import copy
import re

import h5py
import numpy as np
import pytest
import yaml

import moenum
from moenum.errors import EnvironmentFailure, ScenarioError

from conftest import SCENARIOS, moenum_cli

GPU_USABLE = moenum._core.built_with_cuda and moenum._core.gpu_description() != "none"
NO_GPU = "no usable CUDA GPU here (or moenum built without CUDA): the GPU oracles cannot run"
TINY = {"name": "exec", "seed": 3, "model": {"experts": 4, "hidden": 64, "ffn": 32, "topk": 2},
        "tokens": 64, "recipe": {"name": "bf16"}, "backends": ["golden", "reference", "cpu.eigen"]}


def _attrs(path, backend):
    with h5py.File(path, "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f[f"results/{backend}"].attrs.items()}


def test_the_key_defaults_to_auto_and_refuses_other_devices(tmp_path):
    (sc,) = moenum.load_scenarios(SCENARIOS / "smoke.yaml")[:1]
    assert sc.config["execution"] == {"device": "auto"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(dict(TINY, execution={"device": "tpu"}), sort_keys=False))
    with pytest.raises(ScenarioError) as e:
        moenum.load_scenarios(bad)
    assert re.match(rf"{re.escape(str(bad))}:\d+: execution.device: ", str(e.value)), str(e.value)


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_the_oracles_record_the_device_they_used(tmp_path, device):
    res = moenum.run(dict(TINY, execution={"device": device}), out=tmp_path)
    assert res.disposition["reference"] == "passed"
    want = "gpu" if device == "auto" and GPU_USABLE else "cpu"
    for oracle in ("golden", "reference"):
        attrs = _attrs(res.path, oracle)
        assert attrs["execution_device"] == want, oracle
        assert (attrs["device"] == "cpu") == (want == "cpu"), attrs["device"]
    assert "execution_device" not in _attrs(res.path, "cpu.eigen")  # backends under test keep their own device


def test_gpu_without_a_usable_gpu_is_refused_up_front_exit_3(tmp_path):
    if GPU_USABLE:
        pytest.skip("a usable GPU is here: execution.device gpu runs")
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(dict(TINY, execution={"device": "gpu"},
                                        sweep={"recipe.name": ["fp32", "bf16"]}), sort_keys=False))
    out = tmp_path / "out"
    proc = moenum_cli("run", path, "-o", out, "-j", "2")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moenum: error: scenario point exec/"), proc.stderr
    assert "execution.device: gpu, but " in lines[0] and "Traceback" not in proc.stderr
    assert not list(out.glob("*.h5")) if out.exists() else True
    with pytest.raises(EnvironmentFailure, match="execution.device: gpu"):
        moenum.run(dict(TINY, execution={"device": "gpu"}), out=tmp_path / "api")


# ---- on a GPU machine: every bundled scenario, oracles on both devices ------------------------------

def _bundled_points():
    """Every point of the bundled scenarios but the production-scale ones that ask for the GPU
    themselves (nightly/deepseek-v3-ep8, nightly/qwen3-30b-a3b: minutes of CPU oracle work each)."""
    files = sorted(SCENARIOS.glob("*.yaml")) + sorted((SCENARIOS / "nightly").glob("*.yaml"))
    for path in files:
        for i, sc in enumerate(moenum.load_scenarios(path)):
            if sc.config["execution"]["device"] == "gpu":
                continue
            yield pytest.param(sc, id=f"{path.relative_to(SCENARIOS).with_suffix('').as_posix()}-{i}")


def _run_oracles(sc, device, out):
    cfg = copy.deepcopy(sc.config)
    cfg.update(name="oracles", backends=["golden", "reference"], execution={"device": device})
    cfg["output"] = dict(cfg["output"], intermediates=True)
    res = moenum.run(cfg, out=out)
    assert res.disposition == {"golden": "passed", "reference": "passed"}, res.reasons
    return res.path


def _same_bits(a, b):
    """Bit patterns equal, every NaN equal to every NaN (core/verify/bitwise.h)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return np.array_equal(a, b)
    nan = np.isnan(a) | np.isnan(b)
    uint = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a.view(uint)[~nan], b.view(uint)[~nan]))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("sc", list(_bundled_points()))
def test_gpu_oracles_match_the_cpu_oracles(tmp_path, sc):
    if not GPU_USABLE:
        pytest.skip(NO_GPU)
    cpu, gpu = _run_oracles(sc, "cpu", tmp_path / "cpu"), _run_oracles(sc, "gpu", tmp_path / "gpu")
    assert _attrs(gpu, "reference")["execution_device"] == "gpu"
    with h5py.File(cpu, "r") as fc, h5py.File(gpu, "r") as fg:
        ref_c, ref_g = fc["results/reference"], fg["results/reference"]
        names = [n for n in ref_c if isinstance(ref_c[n], h5py.Dataset)]
        assert names and set(names) == {n for n in ref_g if isinstance(ref_g[n], h5py.Dataset)}
        for name in names:
            assert _same_bits(ref_c[name][()], ref_g[name][()]), f"reference {name}"
        for name in ref_c["stages"]:
            assert _same_bits(ref_c["stages"][name][()], ref_g["stages"][name][()]), f"reference stage {name}"
        gold_c, gold_g = fc["results/golden"], fg["results/golden"]
        for name in (n for n in gold_c if isinstance(gold_c[n], h5py.Dataset)):
            a, b = gold_c[name][()], gold_g[name][()]
            finite = np.isfinite(a) & np.isfinite(b)
            assert np.array_equal(np.isnan(a), np.isnan(b)), f"golden {name}: NaN in one only"
            assert np.array_equal(a[~finite & ~np.isnan(a)], b[~finite & ~np.isnan(a)]), f"golden {name}: inf"
            den = np.linalg.norm(a[finite])
            err = np.linalg.norm(a[finite] - b[finite]) / den if den else np.abs(b[finite]).max(initial=0.0)
            assert err <= 1e-12, f"golden {name}: relative error {err:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
def test_stage_checks_on_the_gpu_classify_as_on_the_cpu(tmp_path, recipe):
    """The stage checks' GEMM products follow execution.device: their certified reference values, and
    so every class count of the stage table, are the same on either device."""
    if not GPU_USABLE:
        pytest.skip(NO_GPU)
    point = dict(TINY, model={"experts": 4, "hidden": 64, "ffn": 32, "topk": 2}, tokens=256,
                 dispatch={"ep": 1, "padding": "module", "align": 32}, recipe={"name": recipe},
                 verify={"sample": "all"})
    tables = {}
    for device in ("cpu", "gpu"):
        res = moenum.run(dict(point, name=f"stages-{device}", execution={"device": device}), out=tmp_path / device)
        assert res.disposition["cpu.eigen"] == "passed", res.reasons
        tables[device] = res.stage_table.reset_index(drop=True)
    assert not tables["cpu"].empty
    assert tables["cpu"].equals(tables["gpu"]), (tables["cpu"], tables["gpu"])
