"""The scenarios that ship with moenum, by name: `moenum run smoke`, `moenum scenarios`.

A wheel carries them as package data (moenum/scenarios, cmake/package_data.cmake); an editable
install or a source checkout reads scenarios/ at the repository root. A name is a file's path below
that folder without `.yaml` (`smoke`, `nightly/bf16`) or a folder of them (`nightly`).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import EnvironmentFailure

SUFFIX = ".yaml"


def _find_dir() -> Path | None:
    package = Path(__file__).resolve().parent
    for candidate in (package / "scenarios", package.parents[1] / "scenarios"):
        if candidate.is_dir():
            return candidate
    return None


def scenarios_dir() -> Path:
    found = _find_dir()
    if found is None:
        raise EnvironmentFailure(f"no bundled scenarios next to {Path(__file__).resolve().parent} "
                                 "(a broken install: reinstall moenum)")
    return found


def names() -> list[str]:
    """Every bundled scenario file's and folder's name, sorted: ['ep', ..., 'nightly', 'nightly/bf16', ...]."""
    root = scenarios_dir()
    files = {str(p.relative_to(root).with_suffix("")) for p in root.rglob(f"*{SUFFIX}")}
    folders = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir() and any(p.glob(f"*{SUFFIX}"))}
    return sorted(files | folders)


def path_of(name: str) -> Path | None:
    """The bundled file or folder called `name`, or None (also when there are none)."""
    root = _find_dir()
    if root is None:
        return None
    for candidate in (root / f"{name}{SUFFIX}", root / name):
        if candidate.exists() and candidate.resolve().is_relative_to(root.resolve()):
            return candidate
    return None


def resolve(argument: str) -> str:
    """A scenario argument as given: an existing path stays as it is (a file named like a bundled
    scenario in the current folder wins), else a bundled name becomes its path, else it is left for
    the loader to report."""
    if Path(argument).exists():
        return argument
    found = path_of(argument)
    return str(found) if found else argument


def describe(name: str) -> str:
    """The first line of a bundled scenario's `description` (a folder: its files), or ''."""
    path = path_of(name)
    if path.is_dir():
        return "folder: " + ", ".join(sorted(str(p.relative_to(path.parent).with_suffix(""))
                                            for p in path.glob(f"*{SUFFIX}")))
    try:
        cfg = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return ""
    text = cfg.get("description", "") if isinstance(cfg, dict) else ""
    return str(text).strip().splitlines()[0] if text else ""
