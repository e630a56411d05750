"""Campaigns: parallel points, the index file, shards, and kill-then-resume giving the same table."""
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

import moenum

from conftest import SCENARIOS

PADDING = SCENARIOS / "padding.yaml"


def _table(camp):
    t = camp.errors.sort_values(["scenario", "backend", "other", "tensor", "expert"]).reset_index(drop=True)
    return t


def test_campaign_table_has_parameters_and_index(tmp_path):
    camp = moenum.run_campaign(SCENARIOS / "ep.yaml", out=tmp_path, jobs=2, quiet=True)
    assert camp.passed and len(camp.results) == 4
    t = camp.errors
    assert "dispatch.ep" in t.columns and sorted(t["dispatch.ep"].unique()) == [1, 2, 4, 8]
    index = json.loads((tmp_path / "index.json").read_text())
    assert [p["status"] for p in index["points"]] == ["passed"] * 4
    assert {p["file"] for p in index["points"]} == {p.name for p in tmp_path.glob("*.h5")}


def test_shards_partition_the_points(tmp_path):
    names = []
    for i in range(3):
        camp = moenum.run_campaign(SCENARIOS / "ep.yaml", out=tmp_path, shard=f"{i}/3", quiet=True)
        names += [r.name for r in camp.results]
        assert (tmp_path / f"index.shard-{i}of3.json").exists()
    assert sorted(names) == sorted(sc.name for sc in moenum.load_scenarios(SCENARIOS / "ep.yaml"))


@pytest.mark.slow
def test_killed_campaign_resumes_to_the_same_table(tmp_path):
    """24 points with -j 2, SIGKILLed halfway, resumed: same combined table as one clean run."""
    points = moenum.load_scenarios(PADDING)
    assert len(points) == 24
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "moenum", "run", str(PADDING), "-o", str(killed), "-j", "2", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while len(list(killed.glob("*.h5"))) < 8 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(list(killed.glob("*.h5")))
    assert 0 < done_before < 24, done_before
    index = json.loads((killed / "index.json").read_text())
    assert "pending" in {p["status"] for p in index["points"]}

    resumed = moenum.run_campaign(PADDING, out=killed, jobs=2, resume=True, quiet=True)
    assert len(resumed.skipped) >= done_before - 2  # a file may have landed as the kill hit
    assert len(resumed.results) == 24 and resumed.passed
    clean = moenum.run_campaign(PADDING, out=tmp_path / "clean", jobs=2, quiet=True)
    pd.testing.assert_frame_equal(_table(resumed), _table(clean))
    index = json.loads((killed / "index.json").read_text())
    assert {p["status"] for p in index["points"]} == {"passed"}
