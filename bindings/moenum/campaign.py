"""Campaigns: many scenario points, run in parallel processes, resumable, shardable, interruptible.

Each point's results file is complete or absent (atomic rename); `resume` skips the points whose file
a rerun would only repeat (moenum.resume). Ctrl-C or SIGTERM stops the queued points and the running
workers, removes their temporary files, leaves index.json true and raises moenum.interrupt.Interrupted.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import interrupt
from .campaign_index import CampaignIndex
from .disposition import FAILED, PASSED, Disposition, combine
from .errors import ScenarioError
from .output_folder import prepare_output
from .result import RunResult, open_results
from .results_io import result_path
from .resume import rerun_reason
from .scenario import Scenario, load_scenarios

POLL_S = 0.05  # how often a campaign looks at its workers


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

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

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


class ExpansionProgress:
    """Called by the scenario loader for each point it expands: a sweep that takes more than a second
    says how far it got on stderr, about once a second, and when it is done."""

    def __init__(self, every_s: float = 1.0):
        self.every_s, self.since, self.printed = every_s, 0.0, False

    def __call__(self, file: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 1:
            self.since, self.printed = now, False
        if now - self.since >= self.every_s or (done == total and self.printed):
            self.since, self.printed = now, True
            print(f"expanding {file}: {done} of {total} scenario points", file=sys.stderr, flush=True)


def prepare(points: list[Scenario], out, backends=None) -> dict:
    """Everything that can fail before any computation: the output folder and the points' file names
    (output_folder), whether each point's execution.device is usable here (execution), and whether
    each point fits in memory (resources). Returns each point's host memory estimate in bytes, by name."""
    from .execution import require_devices
    from .resources import require_fits
    prepare_output(out, points)
    require_devices(points)
    return require_fits(points, backends)


def _reusable(sc: Scenario, out, backends) -> RunResult | None:
    path = result_path(out, sc.name)
    if rerun_reason(path, sc, backends) is not None:
        return None
    r = open_results(path)
    r.sweep_point = dict(sc.sweep_point)
    return r


def _run_here(todo, out, backends, record) -> None:
    from .runner import run
    for sc in todo:
        record(sc, run(sc, out=out, backends=backends))
        interrupt.check()


def _run_in_workers(todo, out, backends, jobs: int, record, need: dict) -> None:
    """Up to `jobs` worker processes at once, and no more than the host memory allows together.
    Interrupted (or any failure): the running workers are stopped and their temporary files removed;
    a worker that had already finished is still recorded."""
    from .resources import host_memory_available
    from .worker import Worker
    queue, running = list(todo), []
    budget = host_memory_available()
    try:
        while queue or running:
            while queue and len(running) < jobs and (
                    not running or sum(need[w.sc.name] for w in running) + need[queue[0].name] <= budget):
                running.append(Worker(queue.pop(0), out, backends))
            for w in [w for w in running if w.done()]:
                running.remove(w)
                record(w.sc, w.result())
            interrupt.check()
            time.sleep(POLL_S)
    except BaseException:
        with interrupt.shielded():
            for w in running:
                if w.done() and w.proc.returncode == 0:
                    record(w.sc, w.result())
                else:
                    w.stop()
        raise


def run_points(points: list[Scenario], out="results", jobs: int = 1, resume: bool = False,
               shard: tuple[int, int] | None = None, backends=None, quiet: bool = False) -> Campaign:
    if shard:
        i, n = shard
        points = points[i::n]
    need = prepare(points, out, backends)
    camp = Campaign()
    index = CampaignIndex(out, points, shard)
    todo = []
    for sc in points:
        r = _reusable(sc, out, backends) if resume else None
        if r is None:
            todo.append(sc)
            continue
        camp.results.append(r)
        camp.skipped.append(sc.name)
        index.set(r, resumed=True)
    index.write()
    progress = Progress(len(todo), quiet)
    finished: dict[str, RunResult] = {}

    def record(sc: Scenario, r: RunResult) -> None:
        r.sweep_point = dict(sc.sweep_point)
        finished[sc.name] = r
        index.record(r)
        progress.step(sc.name, r.verdict)

    with interrupt.handling():
        try:
            if jobs <= 1 or len(todo) <= 1:
                _run_here(todo, out, backends, record)
            else:
                _run_in_workers(todo, out, backends, jobs, record, need)
        except KeyboardInterrupt:
            with interrupt.shielded():
                index.write()
                progress.close()
            raise interrupt.Interrupted(interrupt.received() or "SIGINT",
                                        done=len(finished) + len(camp.skipped), total=len(points)) from None
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
    report = None if quiet else ExpansionProgress()
    points = [sc for p in paths
              for sc in (from_dict(p, progress=report) if isinstance(p, dict) else load_scenarios(p, progress=report))]
    dup = {n for n, count in Counter(sc.name for sc in points).items() if count > 1}
    if dup:
        raise ScenarioError(f"scenario names repeat across files: {', '.join(sorted(dup))}")
    if isinstance(shard, str):
        shard = parse_shard(shard)
    return run_points(points, out=out, jobs=jobs, resume=resume, shard=shard, backends=backends,
                      quiet=quiet)
