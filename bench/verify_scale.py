"""How the whole verification of one scenario point scales: wall time, peak resident memory, and the
backends' own time (the sum of each backend's `seconds` in the results file), for one moenum checkout.

    python bench/verify_scale.py --moenum .venv/bin/moenum bench/scenarios/midsize.yaml
    python bench/verify_scale.py --moenum .venv/bin/moenum bench/scenarios/midsize.yaml \
        --sweep tokens=512,1024,2048,4096 --sweep model.experts=8,16,32,64

Prints one markdown table row per point: the verification's overhead is wall / backends. Another
checkout (the code before a change) is measured the same way by pointing --moenum at its command.
"""
from __future__ import annotations

import argparse
import copy
import re
import subprocess
import sys
import tempfile
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


def measure(moenum: str, cfg: dict, workdir: Path, extra: list[str]) -> dict:
    scenario = workdir / f"{cfg['name']}.yaml"
    scenario.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = workdir / "out"
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", moenum, "run", str(scenario), "-o", str(out), *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    last = [line for line in proc.stdout.splitlines() if line.startswith("# ")]
    backends = {}
    for h5 in out.glob("*.h5"):
        with h5py.File(h5, "r") as f:
            for name, g in f["results"].items():
                backends[name] = float(g.attrs.get("seconds", 0.0))
        h5.unlink()
    return {"wall": wall, "rss_gb": int(rss.group(1)) / 1e6 if rss else float("nan"), "backends": backends,
            "verdict": last[-1] if last else proc.stderr.strip().splitlines()[-1:], "rc": proc.returncode}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--moenum", default="moenum")
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
            m = measure(args.moenum, cfg, Path(d), extra)
        total = sum(m["backends"].values())
        each = ", ".join(f"{k} {v:.1f}" for k, v in m["backends"].items())
        label = ", ".join(f"{k}={v}" for k, v in change.items()) or cfg["name"]
        ratio = m["wall"] / total if total else float("nan")
        print(f"| {label} | {m['wall']:.1f} | {total:.1f} | {ratio:.2f} | {m['rss_gb']:.2f} | {each} | {m['verdict']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
