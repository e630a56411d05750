"""Where a `moenum run` spends its time, from a py-spy raw (collapsed-stack) profile taken with
`py-spy record --native -f raw`: the share of the main thread's samples under each part of the runner (a part is the
first frame of a stack that matches its pattern, outermost first), then the hottest functions, and the hottest leaf functions of every thread (the worker threads too).

    python bench/profile_parts.py PROFILE.raw [--seconds WALL]
"""
from __future__ import annotations

import argparse
import collections
import re

# Outermost match wins: a GEMM inside a backend run counts for the backend run.
PARTS = [
    ("layout rerun", r"^_rerun_other_layout"),
    ("backend runs", r"^_run_backend"),
    ("stage checks", r"^stage_checks$"),
    ("error table", r"^error_table$"),
    ("results file", r"^write_results$"),
    ("inputs (prepare)", r"moenum::prepare|^prepare$"),
    ("output checks", r"^output_checks$"),
    ("memory estimate", r"^(check_resources|estimate)"),
    ("imports", r"^_find_and_load$"),
]


def frame_name(frame: str) -> str:
    return re.sub(r" \(.*\)$", "", frame)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--seconds", type=float, default=0.0, help="the run's wall time: shares also as seconds")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    parts, inclusive, total = collections.Counter(), collections.Counter(), 0
    leaves, leaf_total = collections.Counter(), 0  # every thread: where the cores' samples land
    for line in open(args.profile):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        n = int(count)
        names = [frame_name(f) for f in stack.split(";")]
        leaves[names[-1]] += n
        leaf_total += n
        if "<module>" not in names:  # OpenMP and CUDA worker threads: the main thread's wall time only
            continue
        total += n
        part = next((label for name in names for label, pat in PARTS if re.search(pat, name)), "other")
        parts[part] += n
        for name in set(names):
            inclusive[name] += n
    scale = args.seconds / total if args.seconds and total else 0.0
    print(f"| part | share | s |\n|---|---|---|")
    for label, n in parts.most_common():
        print(f"| {label} | {n / total:.1%} | {n * scale:.1f} |")
    print(f"\nhottest functions (inclusive share of {total} samples):")
    for name, n in inclusive.most_common(args.top):
        print(f"{n / total:6.1%}  {name[:160]}")
    print(f"\nhottest leaf functions, every thread (share of {leaf_total} samples):")
    for name, n in leaves.most_common(args.top // 2):
        print(f"{n / leaf_total:6.1%}  {name[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
