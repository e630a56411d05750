"""The `moenum` command: run, nightly, bench, report, scenarios.

Exit codes of run and nightly (interfaces.md): 0 a backend under test passed and nothing failed, 1
something failed or errored, 2 bad input (one clear message, no traceback), 3 the environment failed
(disk full, unwritable output, a point that cannot fit in memory: one clear line), 4 nothing was
verified (every backend under test not_run, not_supported or not_verified), 130 interrupted (Ctrl-C or
SIGTERM). The last line says which.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import bundled, interrupt
from .disposition import ERROR, FAILED, NOT_VERIFIED, PASSED, Disposition
from .errors import EnvironmentFailure, ScenarioError

EXIT_CODES = {PASSED: 0, FAILED: 1, ERROR: 1, NOT_VERIFIED: 4}
LAST_LINE = {PASSED: "OK", FAILED: "FAILED", ERROR: "ERROR", NOT_VERIFIED: "NOT VERIFIED"}
EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 2, 3, 130


def _finish(verdict: Disposition, text: str) -> int:
    print(f"# {LAST_LINE[verdict]}: {text}")
    return EXIT_CODES[verdict]


def _points(some: int, total: int) -> str:
    """"2 scenario points", "1 of 3 scenario points"."""
    return f"{some if some == total else f'{some} of {total}'} scenario point{'' if total == 1 else 's'}"


def _backend_counts(results) -> str:
    """"3 passed, 2 not run": every backend of every point, by disposition, in the enum's order."""
    counts = {d: 0 for d in Disposition}
    for r in results:
        for d in r.disposition.values():
            counts[Disposition(d)] += 1
    return ", ".join(f"{n} {d.replace('_', ' ')}" for d, n in counts.items() if n)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moenum", description="Numerics harness for MoE grouped linear layers")
    p.add_argument("--version", action=_VersionAction, help="print the version and the git commit, then exit")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenario files and write one HDF5 results file per point")
    run.add_argument("scenarios", nargs="+",
                     help="scenario YAML files or folders, bundled scenarios by name (moenum scenarios), or "
                          "results files (.h5) to run their point again")
    run.add_argument("-o", "--out", default="results", help="output folder (default: results)")
    run.add_argument("--backends", help="comma-separated backends, overriding the scenario's list")
    run.add_argument("-j", "--jobs", type=int, default=1, help="scenario points run in parallel")
    run.add_argument("--resume", action="store_true",
                     help="skip points whose results file a rerun would only repeat (same scenario and backends, "
                          "complete, no backend errored, no fault injected, nothing not_run that could run now)")
    run.add_argument("--shard", help="run slice i of n (i/n), e.g. for Slurm array jobs")
    run.add_argument("-q", "--quiet", action="store_true", help="only the final line")
    run.add_argument("--device", help="torch device of the external backends (cpu, cuda, cuda:1); "
                                      "one backend: NAME@DEVICE in --backends")
    run.add_argument("--inject", action="append", metavar="SPEC",
                     help="fault injection (harness self-test), repeatable: BACKEND:TENSOR[i,j,...]+=Nulp or "
                          "+=<number>, e.g. 'cpu.eigen:dw1[3,5,7]+=1ulp'; points then run one by one")
    nig = sub.add_parser("nightly", help="the CI gate: run a suite, JUnit XML, regressions against a baseline")
    nig.add_argument("--suite", default="nightly",
                     help="scenario folder or file, or a bundled suite by name (default: nightly, scenarios/nightly)")
    nig.add_argument("-o", "--out", default="results/nightly", help="output folder; nightly.json summary goes there")
    nig.add_argument("--junit", help="write a JUnit XML report here")
    nig.add_argument("--baseline", help="an earlier nightly.json, or a folder holding one or per-architecture "
                                        "baselines <arch>.json (e.g. baselines/), to compare errors against")
    nig.add_argument("--update-baseline", action="store_true",
                     help="write this run's summary as the baseline (with --baseline) and print what changed")
    nig.add_argument("--require", action="append", choices=["gpu"], default=[],
                     help="gpu: exit 3 up front when no CUDA GPU is usable (GPU runners)")
    nig.add_argument("--regression-factor", type=float, default=2.0,
                     help="an error more than this many times its baseline is a regression (default 2)")
    nig.add_argument("-j", "--jobs", type=int, default=1, help="scenario points run in parallel")
    nig.add_argument("-q", "--quiet", action="store_true", help="only the final line")
    ben = sub.add_parser("bench", help="performance, side by side with peers (from a source checkout)")
    ben.add_argument("--cpu", action="store_true", help="CPU figures: smoke time, reference GEMM, MX quantize")
    ben.add_argument("--gpu", action="store_true", help="GPU grouped GEMM engines (needs a GPU)")
    ben.add_argument("--peer", help="peer to measure in the same run: torch (with --gpu)")
    ben.add_argument("--layer", action="store_true",
                     help="with --gpu: the whole layer forward+backward beside the torch.grouped_mm adapter, "
                          "CUDA graph replay and the MXFP8 quantize bandwidth, instead of the GEMMs alone")
    rep = sub.add_parser("report", help="print the error table of a results file or folder")
    rep.add_argument("path", help="a results .h5 file or a folder of them")
    rep.add_argument("--by", help="group by these columns, e.g. tensor,expert")
    rep.add_argument("--limit", type=int, help="show only the worst N rows (N >= 1; in a summary, the worst N points)")
    rep.add_argument("--stages", action="store_true",
                     help="also the teacher-forced stage checks (per expert with --by ...expert)")
    shape = rep.add_mutually_exclusive_group()
    shape.add_argument("--summary", action="store_true", default=None,
                       help="one line per point: verdict, worst tensor vs golden, bound violations, failed "
                            "checks (the default for a folder)")
    shape.add_argument("--full", dest="summary", action="store_false", default=None, help="every point's error table")
    sub.add_parser("scenarios", help="list the bundled scenarios (run one by name: moenum run smoke)")
    return p


class _VersionAction(argparse.Action):
    """--version, computed only when asked (it asks git)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .provenance import version_line
        print(version_line())
        parser.exit()


def _cmd_run(args) -> int:
    from .campaign import parse_shard, run_campaign
    from .report import format_table
    if args.jobs < 1:
        raise ScenarioError(f"-j must be >= 1, got {args.jobs}", key="-j")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    args.scenarios = [bundled.resolve(s) for s in args.scenarios]
    if args.device:  # the environment carries it to the worker processes of -j
        from .external.device import DEVICE_ENV
        os.environ[DEVICE_ENV] = args.device
    world = _launched_world(args)
    if world is not None and not world.is_root:
        return _follow(world, args, backends)
    try:
        if args.inject:
            camp = _run_injected(args, backends)
        else:
            camp = run_campaign(args.scenarios, out=args.out, jobs=args.jobs, resume=args.resume,
                                shard=parse_shard(args.shard), backends=backends, quiet=args.quiet)
    finally:
        if world is not None:
            world.stop_followers()
    if not args.quiet:
        for r in camp.results:
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
    checks = camp.checks
    bad_checks = [name for name, (ok, _) in checks.items() if not ok]
    if checks and not args.quiet:
        print(f"\n== cross-scenario invariance checks: {len(checks) - len(bad_checks)} of {len(checks)} passed")
        for name in bad_checks:
            print(f"   check FAILED {name}: {checks[name][1]}")
    verdict = camp.verdict
    n_points = len(camp.results)
    of = _points(sum(r.verdict == verdict for r in camp.results), n_points)
    counts = _backend_counts(camp.results) + (f", {len(camp.skipped)} resumed" if camp.skipped else "")
    invariance = f", {len(bad_checks)} of {len(checks)} invariance checks failed" if bad_checks else ""
    text = {PASSED: f"{of} passed ({counts})",
            FAILED: f"{of} failed ({counts}){invariance}",
            ERROR: f"{of} had a backend error ({counts}){invariance}",
            NOT_VERIFIED: f"no backend under test was verified in {_points(n_points, n_points)} ({counts})"}
    return _finish(verdict, text[verdict])


def _launched_world(args):
    """The job's world when mpirun or srun started this process (moenum.ep), else None. Its points run
    one at a time in this process: a distributed point's ranks are the job's processes."""
    from .ep import world
    if not world.launched():
        return None
    if args.jobs > 1:
        raise ScenarioError(f"-j {args.jobs}: under mpirun or srun the points run one at a time (-j 1); "
                            f"each process is one EP rank", key="-j")
    return world.current()


def _follow(world, args, backends) -> int:
    """A rank other than 0: the same scenario points, each run when rank 0 announces it."""
    from .ep.session import EXIT_BAD_INPUT as BAD_INPUT, follow
    from .runner import run
    from .scenario import load_scenarios
    try:
        points = [sc for p in args.scenarios for sc in load_scenarios(p)]
    except ScenarioError as e:
        world.abort(str(e), BAD_INPUT)
    return follow(world, points, lambda sc: run(sc, out=args.out, backends=backends))


def _run_injected(args, backends):
    """--inject: parse the faults first (bad syntax: exit 2 before anything runs), then run every point
    in this process with them (a harness self-test; -j, --resume and --shard do not apply)."""
    from .campaign import Campaign, prepare
    from .inject import parse_all
    from .runner import run
    from .scenario import load_scenarios
    injections = parse_all(args.inject)
    points = [sc for p in args.scenarios for sc in load_scenarios(p)]
    prepare(points, args.out, backends)
    camp = Campaign()
    try:
        for sc in points:
            camp.results.append(run(sc, out=args.out, backends=backends, inject=injections))
            interrupt.check()
    except KeyboardInterrupt:
        raise interrupt.Interrupted(interrupt.received() or "SIGINT", len(camp.results), len(points)) from None
    return camp


def _cmd_nightly(args) -> int:
    from .nightly import run_nightly
    from .disposition import combine
    camp, found, changes = run_nightly(bundled.resolve(args.suite), out=args.out, junit=args.junit,
                                       baseline=args.baseline, factor=args.regression_factor, jobs=args.jobs,
                                       quiet=args.quiet, update_baseline=args.update_baseline,
                                       require=args.require)
    if not args.quiet:
        for r in camp.results:
            for b, d in r.disposition.items():
                if d != PASSED:
                    print(f"{r.name} {b}: {d} {r.reasons.get(b, '')}")
    for f in found:
        print(f"regression: {f}")
    for c in changes:
        print(f"baseline: {c}")
    bad_checks = [n for n, (ok, _) in camp.checks.items() if not ok]
    for n in bad_checks:
        print(f"check FAILED {n}: {camp.checks[n][1]}")
    verdict = combine([camp.verdict] + ([FAILED] if found else []))
    n = len(camp.results)
    return _finish(verdict, f"nightly, {_points(n, n)} ({_backend_counts(camp.results)}), "
                            f"{len(found)} regressions, {len(camp.checks) - len(bad_checks)} of {len(camp.checks)} "
                            f"invariance checks passed")


def _cmd_report(args) -> int:
    from .report import report
    by = [c.strip() for c in args.by.split(",")] if args.by else None
    return report(args.path, by=by, limit=args.limit, stages=args.stages, summary=args.summary)


def _cmd_scenarios(args) -> int:
    for name in bundled.names():
        print(f"{name:<16} {bundled.describe(name)}")
    print(f"# {len(bundled.names())} bundled scenarios in {bundled.scenarios_dir()} (moenum run NAME)")
    return 0


def _interrupted(e: KeyboardInterrupt) -> int:
    name = getattr(e, "signal_name", None) or interrupt.received() or "SIGINT"
    done, total = getattr(e, "done", None), getattr(e, "total", None)
    where = f" after {done} of {_points(total, total)}" if total is not None else ""
    print(f"# INTERRUPTED: {name}{where}; workers stopped, no partial results file left; "
          f"rerun with --resume to continue", flush=True)
    return EXIT_INTERRUPTED


def _command(args) -> int:
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "nightly":
        return _cmd_nightly(args)
    if args.command == "bench":
        from .bench import run_bench
        return run_bench(args.cpu, args.gpu, args.peer, args.layer)
    if args.command == "scenarios":
        return _cmd_scenarios(args)
    return _cmd_report(args)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        with interrupt.handling():
            code = _command(args)
            interrupt.check()  # a signal whose exception something swallowed still stops the run
            return code
    except ScenarioError as e:
        print(f"moenum: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except EnvironmentFailure as e:
        print(f"moenum: error: {e}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except OSError as e:  # the machine's, wherever it came from: one line, not a traceback
        where = f": {e.filename}" if e.filename else ""
        print(f"moenum: error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt as e:
        return _interrupted(e)


if __name__ == "__main__":
    sys.exit(main())
