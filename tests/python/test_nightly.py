"""`moenum nightly`: JUnit report (not_run and not_verified are <skipped>, never a pass; error is
<error>), summary, regressions, exit codes."""
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from moenum.campaign import Campaign
from moenum.nightly import junit_xml
from moenum.result import RunResult

from conftest import moenum_cli

SUITE = """\
name: gate
model: {experts: 4, hidden: 32, ffn: 32, topk: 2}
tokens: 64
dispatch: {ep: 2, padding: module, align: 16}
backends: [golden, reference, cpu.eigen, gpu.grouped]
sweep: {dispatch.padding: [module, hybridep]}
"""


def test_nightly_junit_summary_and_regression(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "gate.yaml").write_text(SUITE)
    out, junit = tmp_path / "night1", tmp_path / "junit.xml"
    proc = moenum_cli("nightly", "--suite", suite, "-o", out, "--junit", junit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("# OK: nightly, 2 scenario points")
    root = ET.parse(junit).getroot()
    cases = root.findall("testcase")
    gpu = [c for c in cases if c.get("name") == "gpu.grouped"]
    assert len(gpu) == 2
    dispositions = json.loads((out / "nightly.json").read_text())["scenarios"]
    if dispositions["gate/dispatch.padding=module"]["gpu.grouped"]["disposition"] == "not_run":
        # no GPU here: reported as skipped, never as passed
        assert all(c.find("skipped") is not None for c in gpu)
        assert int(root.get("skipped")) >= 2
    assert any(c.get("classname") == "invariance" for c in cases)  # module vs hybridep
    summary = json.loads((out / "nightly.json").read_text())["scenarios"]
    ref = summary["gate/dispatch.padding=module"]["reference"]
    assert ref["disposition"] == "passed" and ref["rel_fro"]["y"] > 0

    # a baseline whose reference errors were 10x smaller: tonight looks like a regression
    for point in summary.values():
        for tensor in point["reference"]["rel_fro"]:
            point["reference"]["rel_fro"][tensor] /= 10
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"scenarios": summary}))
    proc = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "night2", "--junit", junit, "--baseline", baseline)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression: gate/dispatch.padding=module reference y: rel_fro" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("# FAILED: nightly")
    root = ET.parse(junit).getroot()
    assert int(root.get("failures")) >= 2

    bad = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "n3", "--baseline", tmp_path / "missing.json")
    assert bad.returncode == 2 and "missing.json: no such baseline file" in bad.stderr


def test_nightly_without_stage_checks_verifies_nothing_exit_4(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "gate.yaml").write_text(SUITE + "verify: {stages: false}\n")
    junit = tmp_path / "junit.xml"
    proc = moenum_cli("nightly", "--suite", suite, "-o", tmp_path / "night", "--junit", junit)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("# NOT VERIFIED: nightly, 2 scenario points")
    cpu = [c for c in ET.parse(junit).getroot().findall("testcase") if c.get("name") == "cpu.eigen"]
    assert len(cpu) == 2
    for c in cpu:
        assert c.find("skipped").get("message").startswith("not_verified: ")


def test_junit_one_element_per_disposition():
    dispositions = {"golden": "passed", "cpu.eigen": "failed", "gpu.grouped": "error", "torch:m.f": "not_verified",
                    "gpu.multistream": "not_run", "reference": "not_supported"}
    r = RunResult(path=Path("p.h5"), name="p", errors=pd.DataFrame(), disposition=dispositions,
                  reasons={b: f"why {b}" for b in dispositions})
    root = junit_xml(Campaign(results=[r]), []).getroot()
    kind = {c.get("name"): [e.tag for e in c] for c in root.findall("testcase")}
    assert kind == {"golden": [], "cpu.eigen": ["failure"], "gpu.grouped": ["error"], "torch:m.f": ["skipped"],
                    "gpu.multistream": ["skipped"], "reference": ["skipped"]}
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("6", "1", "1", "3")
    case = next(c for c in root.findall("testcase") if c.get("name") == "gpu.grouped")
    assert case.find("error").get("message") == "why gpu.grouped"
