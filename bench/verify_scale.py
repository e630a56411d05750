"""How the whole verification of one scenario point scales: wall time, peak resident memory, and the
backends' own time (the sum of each backend's `seconds` in the results file), for one moenum checkout.

    python bench/verify_scale.py --moenum .venv/bin/moenum bench/scenarios/midsize.yaml
    python bench/verify_scale.py --moenum .venv/bin/moenum bench/scenarios/midsize.yaml \
        --sweep tokens=512,1024,2048,4096 --sweep model.experts=8,16,32,64

Prints one markdown table row per point: the verification's overhead is wall / backends; peak RSS is
the moenum process's (os.wait4). Another
checkout (the code before a change) is measured the same way by pointing --moenum at its command.
"""
from __future__ import annotations

import argparse
import copy
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import h5py
import yaml


def set_key(cfg: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def measure(moenum: list[str], cfg: dict, workdir: Path, extra: list[str], timeout: float) -> dict:
    scenario = workdir / f"{cfg['name']}.yaml"
    scenario.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = workdir / "out"
    t0 = time.perf_counter()
    with open(workdir / "stdout", "w") as so, open(workdir / "stderr", "w") as se:
        proc = subprocess.Popen([*moenum, "run", str(scenario), "-o", str(out), *extra], stdout=so, stderr=se)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory
        killer.cancel()
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    stdout = (workdir / "stdout").read_text()
    last = [line for line in stdout.splitlines() if line.startswith("# ")]
    if rc < 0:
        last = [f"killed after {timeout:.0f} s"]
    backends = {}
    for h5 in out.glob("*.h5"):
        with h5py.File(h5, "r") as f:
            for name, g in f["results"].items():
                backends[name] = float(g.attrs.get("seconds", 0.0))
        h5.unlink()
    err = (workdir / "stderr").read_text().strip().splitlines()
    return {"wall": wall, "rss_gb": usage.ru_maxrss / 1e6, "backends": backends,
            "verdict": last[-1] if last else (err[-1] if err else f"exit {rc}"), "rc": rc}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--moenum", default="moenum", help="the command, e.g. .venv/bin/moenum or 'python3 -m moenum'")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a point is killed")
    ap.add_argument("--sweep", action="append", default=[], help="KEY=v1,v2,...: one point per value")
    ap.add_argument("--backends", default=None)
    args = ap.parse_args(argv)
    base = yaml.safe_load(Path(args.scenario).read_text())
    points = [({}, base)]
    for spec in args.sweep:
        key, values = spec.split("=", 1)
        for v in values.split(","):
            cfg = copy.deepcopy(base)
            set_key(cfg, key, yaml.safe_load(v))
            points.append(({key: v}, cfg))
    extra = ["--backends", args.backends] if args.backends else []
    print("| point | wall s | backends s | wall / backends | peak RSS GB | backends (s each) | verdict |")
    print("|---|---|---|---|---|---|---|")
    for change, cfg in points:
        with tempfile.TemporaryDirectory() as d:
            m = measure(shlex.split(args.moenum), cfg, Path(d), extra, args.timeout)
        total = sum(m["backends"].values())
        each = ", ".join(f"{k} {v:.1f}" for k, v in m["backends"].items())
        label = ", ".join(f"{k}={v}" for k, v in change.items()) or cfg["name"]
        ratio = m["wall"] / total if total else float("nan")
        print(f"| {label} | {m['wall']:.1f} | {total:.1f} | {ratio:.2f} | {m['rss_gb']:.2f} | {each} | {m['verdict']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
