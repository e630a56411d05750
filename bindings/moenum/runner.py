"""Run one scenario point: prepare inputs, run every backend, verify, write the results file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import _core, external, traits
from .ep import session as ep_session
from .disposition import ERROR, FAILED, NOT_VERIFIED, PASSED, ran_ok
from .errors import ScenarioError
from .execution import require_devices
from .provenance import root_attributes
from .ranks import partial_experts, results_attributes
from .result import RunResult
from .results_io import result_path, table_to_records, write_results
from .scenario import Scenario, load_scenarios, to_core
from .verify import (error_table, expected_shapes, fill_bound_violations, nonfinite_expected, output_checks,
                     recipe_error_check, stage_checks, stage_table, weights_layout_check)

UNCHECKED = "no check verified it"


def _check_alignment(sc: Scenario, prepared) -> None:
    """mxfp8 quantizes along tokens in blocks of 32: every segment must be aligned."""
    cfg = sc.config
    if cfg["recipe"]["name"] != "mxfp8":
        return
    for r, rank in enumerate(prepared.plan["ranks"]):
        counts = rank["tokens_per_expert"]
        bad = np.nonzero(counts % 32)[0]
        if bad.size:
            e = int(bad[0]) + r * len(counts)
            raise sc.error("dispatch.padding",
                           f"mxfp8 needs every expert segment aligned to 32 rows, but expert {e} has "
                           f"{int(counts[bad[0]])} rows with padding '{cfg['dispatch']['padding']}' "
                           f"(use router, module or hybridep padding)")


def _config_error(sc: Scenario, e) -> ScenarioError:
    """A C++ ConfigError as the loader's errors read: file:line: key: message (exit code 2)."""
    return sc.error(e.key, e.message) if e.key else ScenarioError(e.message, sc.file)


def _run_backend(name: str, core_sc, prepared, sc: Scenario, keep_stages: bool | None = None,
                 weights: str | None = None) -> dict:
    """One backend's outputs with a provisional disposition: an oracle that ran to completion passed;
    a backend under test is not_verified until its checks pass. A backend that raises is an error."""
    ok, disposition, reason = (True, "", "") if traits.is_external(name) else _core.backend_availability(name, core_sc)
    if not ok:
        return {"disposition": disposition, "reason": reason}
    try:
        out = (external.run_backend(name, prepared, sc.config) if traits.is_external(name)
               else _core.run_backend(name, prepared, keep_stages, weights))
        if "disposition" in out:  # an external backend that cannot run here
            return out
    except _core.ConfigError as e:  # bad input found by a backend: exit 2, like the loader's errors
        raise _config_error(sc, e) from None
    except ScenarioError:  # an external backend's name that names no factory
        raise
    except Exception as e:  # noqa: BLE001 - whatever the backend raised is its error, reported with it
        return {"disposition": ERROR, "reason": f"{type(e).__name__}: {e}"}
    if traits.under_test(name):
        out["disposition"], out["reason"] = NOT_VERIFIED, UNCHECKED
    else:
        out["disposition"], out["reason"] = PASSED, ""
    return out


def run(scenario, out="results", backends: list[str] | None = None, inject=None) -> RunResult | None:
    """Run one scenario point (a Scenario, a dict, or a path holding exactly one point).

    inject: fault injections (strings `BACKEND:TENSOR[i,...]+=Nulp|+=<amount>`, see moenum.inject),
    applied to the backends' results before verification; each gets a check `inject.<backend>.<tensor>`.
    A point with dispatch.transport mpi or nccl runs on every rank of a launched job (moenum.ep); it
    returns None on the ranks other than 0."""
    from . import inject as inject_mod
    injections = inject_mod.parse_all(inject)
    if isinstance(scenario, (str, Path)):
        points = load_scenarios(scenario)
        if len(points) != 1:
            raise ScenarioError(f"holds {len(points)} scenario points; use run_campaign", str(scenario))
        scenario = points[0]
    elif isinstance(scenario, dict):
        from .scenario import from_dict
        (scenario,) = from_dict(scenario)
    sc: Scenario = scenario
    ep = ep_session.for_point(sc)
    if ep is None:
        return _run_point(sc, out, backends, injections, _run_backend, ep_session.local_attributes())
    with ep.guard():  # a real EP run: a rank that fails stops every rank
        return _run_point(sc, out, backends, injections, ep.backend_runner(_run_backend), ep.results_attributes())


def _run_point(sc: Scenario, out, backends, injections, run_backend, transport_attrs: dict) -> RunResult | None:
    """run() once the point is known; run_backend runs one backend, on this process or (a real EP run)
    on every rank, returning None on the ranks other than 0, which then leave the rest to rank 0."""
    from . import inject as inject_mod
    cfg = sc.config
    names = list(backends or cfg["backends"])
    unknown = [b for b in names if not traits.known(b)]
    if unknown:
        raise ScenarioError(f"unknown backend(s) {', '.join(unknown)} (known: "
                            f"{', '.join(_core.backend_names())})", key="--backends")
    baseline = cfg["compare"]["baseline"] if cfg["compare"]["baseline"] in names else names[0]
    for inj in injections:
        if inj.backend not in names:
            raise ScenarioError(f"'{inj.text}': backend '{inj.backend}' is not run by this scenario "
                                f"({', '.join(names)})", key="--inject")
    verify_cfg = cfg.get("verify", {})
    # Teacher-forced stage checks need the checked backends' stage tensors (an injection always checks
    # its backend); golden and the reference oracle keep theirs only when asked to write them.
    check_stages = bool(verify_cfg.get("stages", True)) or bool(injections)
    injected_backends = {inj.backend for inj in injections}

    def keep_stages(name: str) -> bool:
        checked = traits.under_test(name) or name in injected_backends
        return cfg["output"]["intermediates"] or (check_stages and checked)

    require_devices([sc])
    core_sc = to_core(sc)
    try:
        prepared = _core.prepare(core_sc)
    except _core.ConfigError as e:
        raise _config_error(sc, e) from None
    _check_alignment(sc, prepared)

    results, checks = {}, {}
    applied = {}              # injection index -> what was planted
    stage_c, reports = {}, {}  # stage.<backend> -> (passed, detail); backend -> [StageResult]
    invariance_c = {}          # backend -> (passed, detail)
    shapes = expected_shapes(cfg)
    def checked(name: str) -> bool:
        return name != "golden" and (traits.under_test(name) or name in injected_backends)

    for i, name in enumerate(names):
        r = run_backend(name, core_sc, prepared, sc, keep_stages(name))
        if r is None:  # another rank's share of a real EP run
            continue
        results[name] = r
        if ran_ok(r["disposition"]):
            c = output_checks(name, r, shapes, nonfinite_expected(cfg))
            checks.update(c)
            if not all(ok for ok, _ in c.values()):
                r["disposition"], r["reason"] = FAILED, next(d for ok, d in c.values() if not ok)
        for i, inj in enumerate(injections):
            if inj.backend == name:
                applied[i] = inject_mod.apply(inj, results)
        if not ran_ok(r["disposition"]):
            continue
        # Each backend is checked as soon as it ran, so only one backend's stage tensors live at a time.
        if check_stages:
            probes = [inject_mod.probe(inj, applied[i]) for i, inj in enumerate(injections) if inj.backend == name]
            c, rep = stage_checks(cfg, prepared, results, [name], include=list(injected_backends),
                                  probes={name: probes}, more_to_check=any(map(checked, names[i + 1:])))
            stage_c.update(c)
            reports.update(rep)
        if not cfg["output"]["intermediates"]:
            r["stages"] = {}
        if verify_cfg.get("invariance", True):
            c = weights_layout_check(name, r, lambda n=name: _rerun_other_layout(sc, n, core_sc, prepared))
            if c is not None:
                invariance_c[name] = c
    if len(results) < len(names):  # a rank other than 0: rank 0 verifies and writes
        return None
    applied = [(inj, applied[i]) for i, inj in enumerate(injections)]

    table = error_table(results, names, baseline, prepared.topk_idx, partial_experts(cfg))
    # A sanity bound against golden: far from the arithmetic's error, so it can fail a backend but
    # never verify one.
    for name in names:
        if name != "golden" and ran_ok(results[name]["disposition"]):
            c = recipe_error_check(name, cfg["recipe"]["name"], table, nonfinite_expected(cfg))
            checks.update(c)
            failed = [d for ok, d in c.values() if not ok]
            if failed:
                results[name]["disposition"], results[name]["reason"] = FAILED, failed[0]
    if check_stages:
        checks.update(stage_c)
        for name, report in reports.items():
            ok, detail = stage_c[f"stage.{name}"]
            r = results[name]
            if not ok:  # also when the sanity bound failed it: the stage checks say where it went wrong
                r["disposition"], r["reason"] = FAILED, detail
            elif r["disposition"] == NOT_VERIFIED:
                checked = any(sr.status != "skipped" for sr in report)
                r["disposition"], r["reason"] = (PASSED, "") if checked else (NOT_VERIFIED, detail)
        table = fill_bound_violations(table, reports, baseline)
    else:
        for r in results.values():
            if r["disposition"] == NOT_VERIFIED:
                r["reason"] = "stage checks off (verify.stages: false): no check verified it"
    for name, (ok, detail) in invariance_c.items():
        checks[f"invariance.weights.{name}"] = (ok, detail)
        if not ok and ran_ok(results[name]["disposition"]):
            results[name]["disposition"], results[name]["reason"] = FAILED, detail
    injected = []
    for inj, info in applied:
        checks[inj.check_name] = inject_mod.outcome(inj, info, reports.get(inj.backend))
        injected.append({"spec": inj.text, "backend": inj.backend, "tensor": inj.tensor,
                         "index": list(info["index"]), "old": info["old"], "new": info["new"],
                         "outcome": checks[inj.check_name][1].split(":", 1)[0],
                         "detail": checks[inj.check_name][1]})
    stages_df = stage_table(reports)
    # the table's disposition column reflects the final verdicts
    if not table.empty:
        table["disposition"] = table["backend"].map(lambda b: results[b]["disposition"])

    diffs = None
    if cfg["output"]["diffs"] == "full":
        diffs = _full_diffs(results, names, baseline)
    path = result_path(out, sc.name)
    attrs = {**root_attributes(sc.to_yaml()), **results_attributes(cfg), **transport_attrs}
    write_results(path, attrs, prepared, results, table, checks,
                  write_inputs=cfg["output"]["inputs"], write_stages=cfg["output"]["intermediates"],
                  diffs=diffs, extra_tables={"stages": table_to_records(stages_df)} if reports else None,
                  write_outputs=cfg["output"]["results"] == "full")
    return RunResult(path=path, name=sc.name, errors=table,
                     disposition={n: r["disposition"] for n, r in results.items()},
                     reasons={n: r.get("reason", "") for n, r in results.items()},
                     checks={k: bool(ok) for k, (ok, _) in checks.items()},
                     check_details={k: d for k, (_, d) in checks.items()},
                     seconds={n: float(r.get("seconds", 0.0)) for n, r in results.items()},
                     warnings=list(prepared.plan["warnings"]), sweep_point=dict(sc.sweep_point),
                     stage_table=stages_df, injections=injected)


def _rerun_other_layout(sc: Scenario, name: str, core_sc, prepared) -> dict:
    """One backend again with the other weights layout (single <-> discrete), for invariance.weights,
    on the same inputs."""
    other = "discrete" if sc.config["weights"] == "single" else "single"
    return _run_backend(name, core_sc, prepared, sc, keep_stages=False, weights=other)


def _full_diffs(results, names, baseline):
    from .verify import comparison_pairs
    diffs = {}
    for a, b in comparison_pairs(names, baseline):
        ra, rb = results[a].get("outputs"), results[b].get("outputs")
        if ra and rb:
            diffs[f"{a}__vs__{b}"] = {t: np.asarray(v, dtype=np.float64) - np.asarray(rb[t][0], dtype=np.float64)
                                      for t, (v, _) in ra.items() if t in rb}
    return diffs
