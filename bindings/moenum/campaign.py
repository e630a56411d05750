"""Campaigns: many scenario points, run in parallel processes, resumable, shardable.

Each point's results file is complete or absent (atomic rename), so `resume` just skips points
whose file exists and holds the same expanded scenario.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from .disposition import FAILED, PASSED, Disposition, combine
from .errors import ScenarioError
from .result import RunResult, open_results
from .results_io import result_path
from .scenario import Scenario, load_scenarios


@dataclass
class Campaign:
    results: list[RunResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # resumed: already complete on disk
    checks: dict = field(default_factory=dict)        # cross-scenario invariances: name -> (ok, detail)

    @property
    def errors(self) -> pd.DataFrame:
        """One error table over every point, with the swept parameters as columns."""
        frames = []
        for r in self.results:
            t = r.errors.copy()
            t.insert(0, "scenario", r.name)
            for key, value in r.sweep_point.items():
                t[key] = value if not isinstance(value, (list, dict)) else str(value)
            frames.append(t)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def verdict(self) -> Disposition:
        """Over every point and the cross-scenario checks; see disposition.combine."""
        checks_ok = all(ok for ok, _ in self.checks.values())
        return combine([r.verdict for r in self.results] + ([] if checks_ok else [FAILED]))

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED


def _is_complete(path: Path, sc: Scenario) -> bool:
    if not path.exists():
        return False
    try:
        import h5py
        with h5py.File(path, "r") as f:
            return yaml.safe_load(f.attrs["scenario_yaml"]) == yaml.safe_load(sc.to_yaml())
    except (OSError, KeyError):
        return False


def _run_point(sc: Scenario, out: str, backends):
    from .runner import run
    return run(sc, out=out, backends=backends)


def _run_point_in_process(sc: Scenario, out: str, backends) -> RunResult:
    """Run one point in a fresh `python -m moenum.worker` process and read its results file back."""
    with tempfile.TemporaryDirectory(prefix="moenum-task-") as tmp:
        task = Path(tmp) / "task.pickle"
        task.write_bytes(pickle.dumps((sc, {"out": str(out), "backends": backends})))
        proc = subprocess.run([sys.executable, "-m", "moenum.worker", str(task)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode == 2:
        raise ScenarioError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "bad input")
    if proc.returncode != 0:
        raise RuntimeError(f"scenario point {sc.name} crashed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return open_results(result_path(out, sc.name))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ScenarioError(f"--shard must look like i/n (e.g. 0/4), got '{text}'", key="--shard") from None
    if n < 1 or not 0 <= i < n:
        raise ScenarioError(f"--shard {text}: need 0 <= i < n", key="--shard")
    return i, n


class Progress:
    """done/total, elapsed and ETA on stderr: a tqdm bar on a terminal, one line per point otherwise
    (logs, CI, pipes)."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.done, self.quiet, self.t0 = total, 0, quiet, time.perf_counter()
        self.bar = None
        if not quiet and total > 1 and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="point", file=sys.stderr)
            except ImportError:
                pass

    def step(self, name: str, verdict: str):
        self.done += 1
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"{name}: {verdict}", refresh=False)
            self.bar.update(1)
            if self.done == self.total:
                self.bar.close()
            return
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        print(f"[{self.done}/{self.total}] {name}: {verdict}  (elapsed {elapsed:.1f} s, ETA {eta:.1f} s)",
              file=sys.stderr, flush=True)


class CampaignIndex:
    """`index.json` in the output folder: every point with its file, its verdict (status: pending, or
    passed | failed | error | not_verified) and its backends' dispositions, rewritten atomically after
    each point, so a killed campaign still says what it had finished."""

    def __init__(self, out, points: list[Scenario], shard: tuple[int, int] | None):
        name = "index.json" if not shard else f"index.shard-{shard[0]}of{shard[1]}.json"
        self.path = Path(out) / name
        self.entries = {sc.name: {"name": sc.name, "file": result_path(out, sc.name).name,
                                  "status": "pending", "dispositions": {},
                                  "parameters": {k: v for k, v in sc.sweep_point.items()}}
                        for sc in points}

    def record(self, r: RunResult, resumed: bool = False):
        self.entries[r.name].update(status=str(r.verdict), resumed=resumed,
                                    dispositions={b: str(d) for b, d in r.disposition.items()})
        self.write()

    def write(self, checks: dict | None = None):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        doc = {"points": list(self.entries.values())}
        if checks is not None:
            doc["checks"] = {name: {"passed": bool(ok), "detail": detail} for name, (ok, detail) in checks.items()}
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, self.path)


def run_points(points: list[Scenario], out="results", jobs: int = 1, resume: bool = False,
               shard: tuple[int, int] | None = None, backends=None, quiet: bool = False) -> Campaign:
    if shard:
        i, n = shard
        points = points[i::n]
    camp = Campaign()
    index = CampaignIndex(out, points, shard)
    todo = []
    for sc in points:
        path = result_path(out, sc.name)
        if resume and _is_complete(path, sc):
            r = open_results(path)
            r.sweep_point = dict(sc.sweep_point)
            camp.results.append(r)
            camp.skipped.append(sc.name)
            index.entries[sc.name].update(status=str(r.verdict), resumed=True,
                                          dispositions={b: str(d) for b, d in r.disposition.items()})
        else:
            todo.append(sc)
    index.write()
    progress = Progress(len(todo), quiet)
    finished: dict[str, RunResult] = {}
    if jobs <= 1 or len(todo) <= 1:
        for sc in todo:
            r = _run_point(sc, out, backends)
            r.sweep_point = dict(sc.sweep_point)
            finished[sc.name] = r
            index.record(r)
            progress.step(sc.name, r.verdict)
    else:
        # threads that each wait on a worker process: the points run in parallel processes
        with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_run_point_in_process, sc, out, backends): sc for sc in todo}
            for fut in cf.as_completed(futures):
                sc = futures[fut]
                r = fut.result()
                r.sweep_point = dict(sc.sweep_point)
                finished[sc.name] = r
                index.record(r)
                progress.step(sc.name, r.verdict)
    by_name = {r.name: r for r in camp.results}
    by_name.update(finished)
    camp.results = [by_name[sc.name] for sc in points if sc.name in by_name]
    from .verify import invariance_checks
    camp.checks = invariance_checks(camp.results)
    index.write(camp.checks)
    return camp


def run_campaign(paths, out="results", jobs: int = 1, resume: bool = False, shard=None,
                 backends=None, quiet: bool = False) -> Campaign:
    """Run every point of one or more scenario files, folders, or scenario mappings (dicts)."""
    from .scenario import from_dict
    if isinstance(paths, (str, Path, dict)):
        paths = [paths]
    points = [sc for p in paths for sc in (from_dict(p) if isinstance(p, dict) else load_scenarios(p))]
    names = [sc.name for sc in points]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ScenarioError(f"scenario names repeat across files: {', '.join(sorted(dup))}")
    if isinstance(shard, str):
        shard = parse_shard(shard)
    return run_points(points, out=out, jobs=jobs, resume=resume, shard=shard, backends=backends,
                      quiet=quiet)
