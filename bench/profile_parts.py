"""Where a `moenum run` spends its time, from a py-spy raw (collapsed-stack) profile taken with
`py-spy record --native -f raw`: the share of the main thread's samples under each part of the runner
(a part is the first frame of a stack that matches its pattern, outermost first), then the hottest
functions; then the same samples by part of the C++ core, each with its hottest named functions.
py-spy samples the threads that run Python only, so the OpenMP workers never appear: the main thread
is thread 0 of every parallel loop, and its samples stand for one core's share. The C++ names need
an unstripped `_core` (configure with -DCMAKE_STRIP=/bin/true: pybind11 strips Release modules).

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

# The C++ core's parts: the first pattern (in this order) that a frame of the stack matches.
CORE_PARTS = [
    ("stage check: mx", r"::mx_stage\b"),
    ("stage check: gemm", r"::gemm_stage\b"),
    ("stage check: elementwise", r"::rowwise_exact_stage\b"),
    ("stage check: combine, bias, dprobs", r"::(combine|bias_grad|dprobs)_stage\b"),
    ("golden", r"grouped_mlp<moenum::reference::GoldenPolicy>"),
    ("reference", r"grouped_mlp<moenum::reference::(Mxfp8Policy|ExactRecipePolicy)"),
    ("error table", r"moenum::verify::error_stats"),
    ("GPU backends", r"moenum::gpu::(run_layer|GroupedMlp)"),
    ("inputs", r"moenum::(generate_problem|prepare)"),
]


def frame_name(frame: str) -> str:
    return re.sub(r" \(.*\)$", "", frame)


def named(name: str) -> bool:
    return not name.startswith("0x")


def short(name: str) -> str:
    """A C++ name without its template arguments and parameters: grouped_mlp<...>(...) -> grouped_mlp."""
    out, depth = [], 0
    for ch in name:
        depth += ch in "<("
        if depth == 0:
            out.append(ch)
        depth -= ch in ">)"
    return "".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--seconds", type=float, default=0.0, help="the run's wall time: shares also as seconds")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    parts, inclusive, total = collections.Counter(), collections.Counter(), 0
    core, core_leaves = collections.Counter(), collections.defaultdict(collections.Counter)
    for line in open(args.profile):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        n = int(count)
        names = [frame_name(f) for f in stack.split(";")]
        part = next((label for label, pat in CORE_PARTS if any(re.search(pat, name) for name in names)), None)
        if part:
            core[part] += n
            leaf = next((name for name in reversed(names) if named(name)), "?")
            core_leaves[part][short(leaf)[:100]] += n
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
    print("\n| core part (main thread) | s | hottest named leaf functions |\n|---|---|---|")
    for label, n in core.most_common():
        hot = "; ".join(f"{name} {m / n:.0%}" for name, m in core_leaves[label].most_common(5))
        print(f"| {label} | {n * scale:.1f} | {hot} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
