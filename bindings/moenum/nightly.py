"""`moenum nightly`: the CI gate. Runs a suite folder, writes a JUnit XML report and a summary
(`nightly.json`), and compares each backend's error against golden with a baseline summary from an
earlier night: a tensor whose relative Frobenius error grew past the allowed factor is a regression.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from .campaign import Campaign, run_campaign
from .disposition import ERROR, FAILED, PASSED
from .errors import ScenarioError

SUMMARY_NAME = "nightly.json"


def summarize(camp: Campaign) -> dict:
    """{scenario: {backend: {"disposition": d, "rel_fro": {tensor: value vs golden}}}}."""
    out = {}
    for r in camp.results:
        t = r.errors[(r.errors.other == "golden") & (r.errors.expert == -1)]
        out[r.name] = {b: {"disposition": str(d), "reason": r.reasons.get(b, ""),
                           "rel_fro": {row.tensor: float(row.rel_fro) for row in t[t.backend == b].itertuples()}}
                       for b, d in r.disposition.items()}
    return out


def load_baseline(path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_NAME
    try:
        return json.loads(path.read_text())["scenarios"]
    except FileNotFoundError:
        raise ScenarioError("no such baseline file", str(path)) from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ScenarioError(f"not a moenum nightly summary ({e})", str(path)) from None


def regressions(summary: dict, baseline: dict, factor: float) -> list[str]:
    """Errors that grew more than `factor` times (with a floor of 1e-12), and backends that passed
    in the baseline but do not pass now (failed, error, and also not_run or not_verified: a GPU
    backend that is skipped tonight is not a green night)."""
    found = []
    for scenario, backends in summary.items():
        for backend, now in backends.items():
            before = baseline.get(scenario, {}).get(backend)
            if not before:
                continue
            if before["disposition"] == PASSED and now["disposition"] != PASSED:
                found.append(f"{scenario} {backend}: passed in the baseline, {now['disposition']} now "
                             f"({now['reason']})")
            for tensor, value in now["rel_fro"].items():
                old = before["rel_fro"].get(tensor)
                if old is not None and value > factor * max(old, 1e-12):
                    found.append(f"{scenario} {backend} {tensor}: rel_fro {value:.3e} vs baseline {old:.3e} "
                                 f"(more than {factor:g}x)")
    return found


def junit_xml(camp: Campaign, found: list[str]) -> ET.ElementTree:
    """One testcase per (scenario point, backend): failed is <failure>, error <error>; not_verified,
    not_run and not_supported are <skipped> with the reason, never passes."""
    suite = ET.Element("testsuite", name="moenum-nightly")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for r in camp.results:
        for backend, disposition in r.disposition.items():
            case = ET.SubElement(suite, "testcase", classname=r.name, name=backend,
                                 time=f"{r.seconds.get(backend, 0.0):.3f}")
            counts["tests"] += 1
            mine = [f for f in found if f.startswith(f"{r.name} {backend}")]
            if disposition == ERROR:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=r.reasons.get(backend, "")).text = "\n".join(mine)
            elif disposition == FAILED or mine:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=r.reasons.get(backend) or "; ".join(mine)).text = \
                    "\n".join(mine)
            elif disposition != PASSED:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{disposition}: {r.reasons.get(backend, '')}")
    for name, (ok, detail) in camp.checks.items():
        case = ET.SubElement(suite, "testcase", classname="invariance", name=name)
        counts["tests"] += 1
        if not ok:
            counts["failures"] += 1
            ET.SubElement(case, "failure", message=detail)
    for key, value in counts.items():
        suite.set(key, str(value))
    return ET.ElementTree(suite)


def run_nightly(suite="scenarios/nightly", out="results/nightly", junit=None, baseline=None,
                factor: float = 2.0, jobs: int = 1, quiet: bool = False):
    if factor <= 1.0:
        raise ScenarioError(f"--regression-factor must be > 1, got {factor}", key="--regression-factor")
    base = load_baseline(baseline) if baseline else None  # bad baseline: fail before running anything
    camp = run_campaign(suite, out=out, jobs=jobs, quiet=quiet)
    summary = summarize(camp)
    found = regressions(summary, base, factor) if base else []
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / SUMMARY_NAME).write_text(json.dumps({"scenarios": summary}, indent=1))
    if junit:
        Path(junit).parent.mkdir(parents=True, exist_ok=True)
        junit_xml(camp, found).write(junit, encoding="unicode", xml_declaration=True)
    return camp, found
