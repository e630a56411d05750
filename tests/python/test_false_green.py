"""Nothing that did not run can look green: a run of only GPU backends without a GPU verifies
nothing (exit 4), and a nightly where a backend that passed in the baseline is not_run is a regression."""
import pytest

import moenum
from moenum.nightly import regressions

from conftest import SCENARIOS, moenum_cli

NO_GPU = moenum._core.gpu_description() == "none"


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: gpu.grouped runs here")
def test_only_gpu_backends_without_a_gpu_is_not_verified(tmp_path):
    r = moenum_cli("run", SCENARIOS / "smoke.yaml", "--backends", "gpu.grouped", "-o", tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("# NOT VERIFIED: ")


def _summary(disposition):
    return {"smoke/recipe.name=bf16": {"gpu.grouped": {"disposition": disposition, "reason": "no CUDA device",
                                                       "rel_fro": {} if disposition != "passed" else {"y": 1e-3}}}}


@pytest.mark.parametrize("now", ["not_run", "not_verified", "not_supported", "failed", "error"])
def test_a_backend_that_passed_in_the_baseline_and_does_not_pass_now_is_a_regression(now):
    found = regressions(_summary(now), _summary("passed"), factor=2.0)
    assert len(found) == 1 and f"passed in the baseline, {now} now" in found[0], found


def test_a_backend_skipped_in_both_is_not_a_regression():
    assert regressions(_summary("not_run"), _summary("not_run"), factor=2.0) == []
