"""`moenum nightly`: the CI gate. Runs a suite folder, writes a JUnit XML report and a summary
(`nightly.json`), and compares each backend's error against golden with a baseline summary from an
earlier night: a tensor whose relative Frobenius error grew past the allowed factor is a regression,
and so is a backend that passed in the baseline and does not pass now (a GPU backend not_run on a
broken GPU runner included). Baselines are per architecture (`baselines/<arch>.json`: `sm_90`, or
`cpu` on a machine without a usable GPU); `--update-baseline` rewrites one and prints what changed.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from .campaign import Campaign, run_campaign
from .disposition import ERROR, FAILED, NOT_RUN, PASSED, combine
from .errors import EnvironmentFailure, ScenarioError
from .traits import traits

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


def architecture() -> str:
    """This machine's baseline key: the GPU's compute capability (`sm_90`), or `cpu` without one."""
    from .provenance import gpu_description
    found = re.search(r"\bsm_(\d+)", gpu_description())
    return f"sm_{found.group(1)}" if found else "cpu"


def require_gpu() -> None:
    """--require gpu: a GPU runner without a usable GPU is a broken environment, not a green night of
    CPU backends."""
    from . import _core
    if not _core.built_with_cuda:
        raise EnvironmentFailure("--require gpu: this moenum was built without the CUDA backends "
                                 "(rebuild with -Ccmake.define.MOENUM_CUDA=ON)")
    if _core.gpu_description() == "none":
        raise EnvironmentFailure("--require gpu: no usable CUDA GPU (check the driver, nvidia-smi and "
                                 "CUDA_VISIBLE_DEVICES)")


def baseline_path(path, arch: str) -> Path:
    """--baseline: a nightly.json, a results folder holding one, or a folder of per-architecture
    baselines, of which `<arch>.json` is this machine's (a path not ending in .json that does not exist
    yet is such a folder, for --update-baseline to create)."""
    path = Path(path)
    if path.is_dir() or (not path.exists() and path.suffix != ".json"):
        return path / SUMMARY_NAME if (path / SUMMARY_NAME).is_file() else path / f"{arch}.json"
    return path


def load_baseline(path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_NAME
    try:
        scenarios = json.loads(path.read_text())["scenarios"]
    except FileNotFoundError:
        raise ScenarioError("no such baseline file (write one with --update-baseline)", str(path)) from None
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ScenarioError(f"not a moenum nightly summary ({e})", str(path)) from None
    if not isinstance(scenarios, dict):
        raise ScenarioError("not a moenum nightly summary (scenarios is not a mapping)", str(path))
    return scenarios


def summary_document(summary: dict) -> dict:
    """nightly.json and baselines/<arch>.json: the summary with where and when it was made."""
    from . import _core
    from .provenance import git_sha, gpu_description
    return {"arch": architecture(), "gpu": gpu_description(), "moenum_version": _core.__version__,
            "git_sha": git_sha(), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "scenarios": summary}


def regressions(summary: dict, baseline: dict, factor: float) -> list[str]:
    """Errors that grew more than `factor` times (with a floor of 1e-12), and backends that passed
    in the baseline but do not pass now: failed, error, not_run (a GPU runner that lost its GPU),
    not_supported, not_verified, or gone from the suite."""
    found = []
    for scenario, backends in baseline.items():
        for backend, before in backends.items():
            if before.get("disposition") == PASSED and backend not in summary.get(scenario, {}):
                found.append(f"{scenario} {backend}: passed in the baseline, not in tonight's run")
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


def gpu_not_run(summary: dict) -> list[str]:
    """--require gpu, after the run: every GPU backend of the suite ran (none is not_run)."""
    gpu = [(s, b, now) for s, backends in summary.items() for b, now in backends.items()
           if traits(b) is not None and traits(b).device == "gpu"]
    if not gpu:
        return ["--require gpu: the suite has no GPU backend"]
    return [f"{s} {b}: not_run under --require gpu ({now['reason']})" for s, b, now in gpu
            if now["disposition"] == NOT_RUN]


def baseline_changes(old: dict, new: dict) -> list[str]:
    """What --update-baseline changes: backends added or removed, dispositions, and every rel_fro that
    moved (old -> new and the ratio)."""
    lines = []
    for scenario in sorted(set(old) | set(new)):
        before_all, now_all = old.get(scenario, {}), new.get(scenario, {})
        for backend in sorted(set(before_all) | set(now_all)):
            before, now = before_all.get(backend), now_all.get(backend)
            where = f"{scenario} {backend}"
            if before is None:
                lines.append(f"+ {where}: new, {now['disposition']}")
                continue
            if now is None:
                lines.append(f"- {where}: removed (was {before['disposition']})")
                continue
            if before["disposition"] != now["disposition"]:
                lines.append(f"~ {where}: {before['disposition']} -> {now['disposition']}")
            for tensor in sorted(set(before["rel_fro"]) | set(now["rel_fro"])):
                a, b = before["rel_fro"].get(tensor), now["rel_fro"].get(tensor)
                if a != b:
                    ratio = f" (x{b / a:.3g})" if a and b is not None else ""
                    lines.append(f"~ {where} {tensor}: rel_fro {_value(a)} -> {_value(b)}{ratio}")
    return lines


def _value(v) -> str:
    return "-" if v is None else f"{v:.6e}"


def run_nightly(suite="scenarios/nightly", out="results/nightly", junit=None, baseline=None,
                factor: float = 2.0, jobs: int = 1, quiet: bool = False, update_baseline: bool = False,
                require=()):
    """Returns (campaign, regressions, baseline changes). With `update_baseline` the run's summary
    replaces the baseline (when nothing failed or errored) and its regressions are accepted, not
    counted; `require=["gpu"]` refuses a machine without a usable GPU and counts a GPU backend that
    did not run."""
    if factor <= 1.0:
        raise ScenarioError(f"--regression-factor must be > 1, got {factor}", key="--regression-factor")
    if update_baseline and not baseline:
        raise ScenarioError("needs --baseline FILE or DIR (e.g. --baseline baselines)", key="--update-baseline")
    if "gpu" in require:
        require_gpu()
    base_file = baseline_path(baseline, architecture()) if baseline else None
    # a bad baseline fails before anything runs; a missing one is fine when it is about to be written
    base = None
    if base_file:
        base = {} if update_baseline and not base_file.exists() else load_baseline(base_file)
    camp = run_campaign(suite, out=out, jobs=jobs, quiet=quiet)
    summary = summarize(camp)
    found = regressions(summary, base, factor) if base and not update_baseline else []
    if "gpu" in require:
        found += gpu_not_run(summary)
    Path(out).mkdir(parents=True, exist_ok=True)
    document = summary_document(summary)
    (Path(out) / SUMMARY_NAME).write_text(json.dumps(document, indent=1))
    changes = []
    if update_baseline:
        if combine([camp.verdict] + ([FAILED] if found else [])) in (FAILED, ERROR):
            changes = [f"{base_file} not updated: tonight's run failed"]
        else:
            changes = baseline_changes(base, summary) or [f"{base_file} unchanged"]
            base_file.parent.mkdir(parents=True, exist_ok=True)
            base_file.write_text(json.dumps(document, indent=1) + "\n")
    if junit:
        Path(junit).parent.mkdir(parents=True, exist_ok=True)
        junit_xml(camp, found).write(junit, encoding="unicode", xml_declaration=True)
    return camp, found, changes
