"""A point runs again from its own results file: `moenum run results/x.h5` (or load_scenarios on
it) gives back exactly the point that wrote it, sweep points included."""
import h5py
import pandas as pd
import pytest
import yaml

import moenum
from moenum.results_io import SCHEMA_VERSION

from conftest import SCENARIOS, moenum_cli

BUNDLED = sorted(SCENARIOS.glob("*.yaml")) + sorted((SCENARIOS / "nightly").glob("*.yaml"))


def _fake_results_file(path, sc):
    """Only what the loader reads of a results file: its root attributes and /tables."""
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["scenario_yaml"] = sc.to_yaml()
        f.create_group("tables")


@pytest.mark.parametrize("scenario", BUNDLED, ids=lambda p: p.relative_to(SCENARIOS).as_posix())
def test_every_bundled_point_loads_back_from_its_scenario_yaml(tmp_path, scenario):
    for i, sc in enumerate(moenum.load_scenarios(scenario)):
        path = tmp_path / f"{i}.h5"
        _fake_results_file(path, sc)
        (back,) = moenum.load_scenarios(path)
        assert back.config == sc.config
        assert back.name == sc.name
        assert back.sweep_point.keys() == sc.sweep_point.keys()
        for key, value in sc.sweep_point.items():  # a swept section comes back with its defaults filled
            assert back.sweep_point[key] == value if not isinstance(value, dict) else value.items() <= back.sweep_point[key].items()


def test_run_a_results_file_again(tmp_path):
    first = tmp_path / "first"
    r = moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", first, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    original = first / "smoke__recipe.name=fp32.h5"
    again = tmp_path / "again"
    r = moenum_cli("run", original, "-o", again)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("# OK: 1 scenario point passed")
    replayed = again / original.name
    a, b = moenum.open_results(original), moenum.open_results(replayed)
    assert yaml.safe_load(h5py.File(original, "r").attrs["scenario_yaml"]) == \
        yaml.safe_load(h5py.File(replayed, "r").attrs["scenario_yaml"])
    pd.testing.assert_frame_equal(a.errors, b.errors)
    assert a.disposition == b.disposition


def test_a_file_that_is_not_a_results_file_is_bad_input(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.attrs["something"] = 1
    r = moenum_cli("run", path, "-o", tmp_path / "out")
    assert r.returncode == 2 and "not a moenum results file" in r.stderr, r.stderr
