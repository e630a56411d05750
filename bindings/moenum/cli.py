"""The `moenum` command: run, report (nightly and bench arrive with their issues).

Exit codes: 0 all passed, 1 a check or backend failed, 2 bad input (one clear message, no traceback).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import ScenarioError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moenum", description="Numerics harness for MoE grouped linear layers")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenario files and write one HDF5 results file per point")
    run.add_argument("scenarios", nargs="+", help="scenario YAML files or folders")
    run.add_argument("-o", "--out", default="results", help="output folder (default: results)")
    run.add_argument("--backends", help="comma-separated backends, overriding the scenario's list")
    run.add_argument("-j", "--jobs", type=int, default=1, help="scenario points run in parallel")
    run.add_argument("--resume", action="store_true", help="skip points whose complete results file exists")
    run.add_argument("--shard", help="run slice i of n (i/n), e.g. for Slurm array jobs")
    run.add_argument("-q", "--quiet", action="store_true", help="only the final line")
    run.add_argument("--inject", action="append", metavar="SPEC",
                     help="fault injection (harness self-test), repeatable: BACKEND:TENSOR[i,j,...]+=Nulp or "
                          "+=<number>, e.g. 'cpu.eigen:dw1[3,5,7]+=1ulp'; points then run one by one")
    nig = sub.add_parser("nightly", help="the CI gate: run a suite, JUnit XML, regressions against a baseline")
    nig.add_argument("--suite", default="scenarios/nightly", help="scenario folder or file (default: scenarios/nightly)")
    nig.add_argument("-o", "--out", default="results/nightly", help="output folder; nightly.json summary goes there")
    nig.add_argument("--junit", help="write a JUnit XML report here")
    nig.add_argument("--baseline", help="an earlier nightly.json (or its folder) to compare errors against")
    nig.add_argument("--regression-factor", type=float, default=2.0,
                     help="an error more than this many times its baseline is a regression (default 2)")
    nig.add_argument("-j", "--jobs", type=int, default=1, help="scenario points run in parallel")
    nig.add_argument("-q", "--quiet", action="store_true", help="only the final line")
    ben = sub.add_parser("bench", help="performance, side by side with peers (from a source checkout)")
    ben.add_argument("--cpu", action="store_true", help="CPU figures: smoke time, reference GEMM, MX quantize")
    ben.add_argument("--gpu", action="store_true", help="GPU grouped GEMM engines (needs a GPU)")
    ben.add_argument("--peer", help="peer to measure in the same run: torch (with --gpu)")
    rep = sub.add_parser("report", help="print the error table of a results file or folder")
    rep.add_argument("path", help="a results .h5 file or a folder of them")
    rep.add_argument("--by", help="group by these columns, e.g. tensor,expert")
    rep.add_argument("--limit", type=int, help="show only the worst N rows")
    rep.add_argument("--stages", action="store_true",
                     help="also the teacher-forced stage checks (per expert with --by ...expert)")
    return p


def _cmd_run(args) -> int:
    from .campaign import parse_shard, run_campaign
    from .report import format_table
    if args.jobs < 1:
        raise ScenarioError(f"-j must be >= 1, got {args.jobs}", key="-j")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    if args.inject:
        camp = _run_injected(args, backends)
    else:
        camp = run_campaign(args.scenarios, out=args.out, jobs=args.jobs, resume=args.resume,
                            shard=parse_shard(args.shard), backends=backends, quiet=args.quiet)
    n_backend = {"passed": 0, "failed": 0, "not_run": 0, "not_supported": 0}
    for r in camp.results:
        if not args.quiet:
            print(f"\n== {r.name}  ({r.path})")
            for b, d in r.disposition.items():
                reason = f" — {r.reasons[b]}" if r.reasons.get(b) else ""
                print(f"   {b:<18} {d:<13} {r.seconds.get(b, 0):7.3f} s{reason}")
            for w in r.warnings:
                print(f"   warning: {w}")
            failed_checks = [f"{k}: {r.check_details[k]}" for k, ok in r.checks.items() if not ok]
            for c in failed_checks:
                print(f"   check FAILED {c}")
            for inj in getattr(r, "injections", []):
                print(f"   inject {inj['detail']}")
            print(format_table(r.errors))
        for d in r.disposition.values():
            n_backend[d] = n_backend.get(d, 0) + 1
    n_points = len(camp.results)
    bad = [r for r in camp.results if not r.passed]
    checks = getattr(camp, "checks", {})
    bad_checks = [name for name, (ok, _) in checks.items() if not ok]
    if checks and not args.quiet:
        print(f"\n== cross-scenario invariance checks: {len(checks) - len(bad_checks)} of {len(checks)} passed")
        for name in bad_checks:
            print(f"   check FAILED {name}: {checks[name][1]}")
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in n_backend.items() if v)
    resumed = f", {len(camp.skipped)} resumed" if camp.skipped else ""
    invariance = f", {len(bad_checks)} of {len(checks)} invariance checks failed" if bad_checks else ""
    if bad or bad_checks:
        print(f"# FAILED: {len(bad)} of {n_points} scenario points failed ({counts}{resumed}){invariance}")
        return 1
    print(f"# OK: {n_points} scenario points passed ({counts}{resumed})")
    return 0


def _run_injected(args, backends):
    """--inject: parse the faults first (bad syntax: exit 2 before anything runs), then run every point
    in this process with them (a harness self-test; -j, --resume and --shard do not apply)."""
    from .campaign import Campaign
    from .inject import parse_all
    from .runner import run
    from .scenario import load_scenarios
    injections = parse_all(args.inject)
    points = [sc for p in args.scenarios for sc in load_scenarios(p)]
    return Campaign(results=[run(sc, out=args.out, backends=backends, inject=injections) for sc in points])


def _cmd_nightly(args) -> int:
    from .nightly import run_nightly
    camp, found = run_nightly(args.suite, out=args.out, junit=args.junit, baseline=args.baseline,
                              factor=args.regression_factor, jobs=args.jobs, quiet=args.quiet)
    counts: dict = {}
    for r in camp.results:
        for d in r.disposition.values():
            counts[d] = counts.get(d, 0) + 1
        if not args.quiet:
            for b, d in r.disposition.items():
                if d != "passed":
                    print(f"{r.name} {b}: {d} {r.reasons.get(b, '')}")
    for f in found:
        print(f"regression: {f}")
    bad_checks = [n for n, (ok, _) in camp.checks.items() if not ok]
    for n in bad_checks:
        print(f"check FAILED {n}: {camp.checks[n][1]}")
    text = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(counts.items()))
    failed = counts.get("failed", 0) + len(found) + len(bad_checks) + sum(not all(r.checks.values()) for r in camp.results)
    if failed:
        print(f"# FAILED: nightly, {len(camp.results)} scenario points ({text}), {len(found)} regressions, "
              f"{len(bad_checks)} invariance checks failed")
        return 1
    print(f"# OK: nightly, {len(camp.results)} scenario points ({text}), 0 regressions, "
          f"{len(camp.checks)} invariance checks passed")
    return 0


def _cmd_report(args) -> int:
    from .report import format_table
    from .result import open_results
    path = Path(args.path)
    files = sorted(path.glob("*.h5")) if path.is_dir() else [path]
    if not files:
        raise ScenarioError("no results files (*.h5) in this folder", str(path))
    by = [c.strip() for c in args.by.split(",")] if args.by else None
    for f in files:
        r = open_results(f)
        print(f"== {r.name}  ({f})")
        try:
            print(format_table(r.errors, by=by, limit=args.limit))
        except KeyError as e:
            raise ScenarioError(str(e.args[0]), key="--by") from None
        if args.stages:
            from .report import format_stage_table
            print(f"-- stage checks (teacher-forced) of {r.name}")
            print(format_stage_table(r.stage_table, per_expert=bool(by and "expert" in by), limit=args.limit))
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "nightly":
            return _cmd_nightly(args)
        if args.command == "bench":
            from .bench import run_bench
            return run_bench(args.cpu, args.gpu, args.peer)
        return _cmd_report(args)
    except ScenarioError as e:
        print(f"moenum: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moenum: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
