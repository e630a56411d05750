"""RunResult: what a run returns and what `open_results` reads back from a file."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .disposition import PASSED, Disposition, verdict


@dataclass
class RunResult:
    path: Path
    name: str
    errors: pd.DataFrame
    disposition: dict
    reasons: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    check_details: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    sweep_point: dict = field(default_factory=dict)
    stage_table: pd.DataFrame | None = None  # /tables/stages: teacher-forced stage checks (moenum.verify)
    injections: list = field(default_factory=list)  # fault injections of this run and their outcomes

    @property
    def verdict(self) -> Disposition:
        """passed (a backend under test passed, nothing failed), failed, error (a backend raised), or
        not_verified (no backend under test passed: not run, not supported or not verified)."""
        return verdict(self.disposition, all(self.checks.values()))

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    def tensor(self, backend: str, name: str) -> np.ndarray:
        """Read one output (or `stages/<name>`) of one backend from the results file."""
        import h5py
        with h5py.File(self.path, "r") as f:
            key = f"results/{backend}/{name}"
            if key not in f and backend in f["results"] and "/" not in name \
                    and yaml.safe_load(f.attrs["scenario_yaml"]).get("output", {}).get("results") == "summary":
                raise KeyError(f"{key}: not in {self.path} (the point ran with output.results: summary)")
            return f[key][()]

    @property
    def tokens_per_expert(self) -> np.ndarray:
        """Unpadded tokens routed to each expert (from /routing)."""
        import h5py
        with h5py.File(self.path, "r") as f:
            return f["routing/tokens_per_expert"][()]

    @property
    def scenario(self) -> dict:
        import h5py
        with h5py.File(self.path, "r") as f:
            return yaml.safe_load(f.attrs["scenario_yaml"])


# What h5py, numpy and yaml raise on a file that opens but is damaged or not laid out as moenum writes.
_DAMAGED_FILE_ERRORS = (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError, RuntimeError,
                        yaml.YAMLError)


def open_results(path) -> RunResult:
    """Read a results file back into the same object `moenum.run` returns. A file that is not one
    (a foreign HDF5 file, a missing group or attribute, a damaged dataset) is bad input naming it,
    never a traceback."""
    from .errors import ScenarioError
    try:
        return _read_results(path)
    except ScenarioError:
        raise
    except _DAMAGED_FILE_ERRORS as e:
        reason = str(e.args[0] if e.args else e).strip() or type(e).__name__
        raise ScenarioError(f"not a readable moenum results file ({reason})", str(path)) from None


def _read_results(path) -> RunResult:
    from .results_io import open_file, records_to_errors
    with open_file(path) as f:
        cfg = yaml.safe_load(f.attrs["scenario_yaml"])
        disposition, reasons, seconds = {}, {}, {}
        for name, g in f["results"].items():
            disposition[name] = str(g.attrs["disposition"])
            reasons[name] = str(g.attrs.get("reason", ""))
            seconds[name] = float(g.attrs.get("seconds", 0.0))
        checks = {n: bool(g.attrs["passed"]) for n, g in f["checks"].items()}
        details = {n: str(g.attrs["detail"]) for n, g in f["checks"].items()}
        errors = records_to_errors(f["tables/errors"][()])
        warnings = [w for w in str(f["dispatch"].attrs.get("warnings", "")).split("\n") if w]
        stage_table = None
        if "stages" in f["tables"]:
            from .verify import records_to_table
            stage_table = records_to_table(f["tables/stages"][()])
    return RunResult(path=Path(path), name=cfg["name"], errors=errors, disposition=disposition,
                     reasons=reasons, checks=checks, check_details=details, seconds=seconds,
                     warnings=warnings, stage_table=stage_table)
