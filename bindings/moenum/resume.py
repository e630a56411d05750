"""`--resume`: which points already have a results file that a rerun would only repeat.

A file is kept when it is a clean, complete, uninjected run of the same scenario with the same
backends, and none of its not_run backends could run now (a GPU present now that was missing then).
A backend that errored is run again (a crash may be the machine's); one that failed is kept (the
numerics are deterministic: a rerun fails the same way).
"""
from __future__ import annotations

import yaml

from .disposition import ERROR, NOT_RUN
from .errors import ScenarioError
from .scenario import Scenario

INJECTED_CHECK = "inject."  # the checks of a fault-injection run (moenum.inject)


def _can_run_now(backend: str, sc: Scenario) -> bool:
    from . import _core, traits
    from .scenario import to_core
    if traits.is_external(backend):
        return False
    ok, _, _ = _core.backend_availability(backend, to_core(sc))
    return ok


def rerun_reason(path, sc: Scenario, backends: list[str] | None = None) -> str | None:
    """None when the file at `path` can stand for point `sc` run with `backends` (default: the
    scenario's), else why the point must run again."""
    from .results_io import open_file
    if not path.exists():
        return "no results file"
    try:
        with open_file(path) as f:
            stored = yaml.safe_load(f.attrs["scenario_yaml"])
            ran = {name: str(g.attrs["disposition"]) for name, g in f["results"].items()}
            checks = list(f["checks"])
    except (ScenarioError, OSError, KeyError, yaml.YAMLError):
        return "the results file is incomplete or unreadable"
    if stored != yaml.safe_load(sc.to_yaml()):
        return "the scenario changed"
    wanted = list(backends or sc.config["backends"])
    if set(ran) != set(wanted):
        return f"it ran {', '.join(sorted(ran))}, not {', '.join(sorted(wanted))}"
    if any(c.startswith(INJECTED_CHECK) for c in checks):
        return "it was a fault-injection run"
    errored = [b for b, d in ran.items() if d == ERROR]
    if errored:
        return f"{', '.join(errored)} errored"
    runnable = [b for b, d in ran.items() if d == NOT_RUN and _can_run_now(b, sc)]
    if runnable:
        return f"{', '.join(runnable)} did not run then and can run now"
    return None
