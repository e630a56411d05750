"""`moenum nightly`: JUnit report (not_run is <skipped>, never a pass), summary, regressions."""
import json
import xml.etree.ElementTree as ET

from conftest import moenum_cli

SUITE = """\
name: gate
model: {experts: 4, hidden: 32, ffn: 32, topk: 2}
tokens: 64
dispatch: {ep: 2, padding: module, align: 16}
backends: [golden, reference, gpu.grouped]
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
