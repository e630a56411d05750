"""index.json lists every point ever run in its folder: two campaigns writing into one folder, at
the same time or one after the other, both keep their points."""
import json
import subprocess
import sys

import yaml

from conftest import SCENARIOS


def _index(out):
    return {p["name"]: p for p in json.loads((out / "index.json").read_text())["points"]}


def test_two_campaigns_at_once_both_keep_their_points(tmp_path, tiny_config):
    scenarios = []
    for name in ("first", "second"):
        cfg = dict(tiny_config, name=name, backends=["golden", "reference", "cpu.eigen"],
                   sweep={"seed": list(range(6))})
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        scenarios.append(path)
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "moenum", "run", str(s), "-o", str(out), "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in scenarios]
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stdout + stderr
    index = _index(out)
    files = {p.name for p in out.glob("*.h5")}
    assert len(files) == 12
    assert {p["file"] for p in index.values()} == files
    assert {p["status"] for p in index.values()} == {"passed"}


def test_a_later_campaign_keeps_the_earlier_points(tmp_path):
    out = tmp_path / "out"
    for scenario in ("smoke.yaml", "ep.yaml"):
        r = subprocess.run([sys.executable, "-m", "moenum", "run", str(SCENARIOS / scenario), "-o", str(out), "-q"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
    index = _index(out)
    assert len(index) == 6 and {p["file"] for p in index.values()} == {p.name for p in out.glob("*.h5")}
