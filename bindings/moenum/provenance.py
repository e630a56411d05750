"""Where a results file came from: version, git commit, host, GPU and library versions."""
from __future__ import annotations

import functools
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

UNKNOWN = "unknown"


def _git(root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _source_checkout_sha() -> str:
    """HEAD of the git checkout this package is imported from (an editable install), or "" when the
    package does not sit at bindings/moenum of moenum's own checkout. Asking git from the package
    folder alone is not enough: an installed copy inside some other repository would report that
    repository's commit."""
    package = Path(__file__).resolve().parent
    root = package.parents[1]
    if package != root / "bindings" / "moenum" or not (root / "pyproject.toml").is_file():
        return ""
    if 'name = "moenum"' not in (root / "pyproject.toml").read_text(errors="replace"):
        return ""
    toplevel = _git(root, "rev-parse", "--show-toplevel")
    if not toplevel or Path(toplevel).resolve() != root:
        return ""
    return _git(root, "rev-parse", "HEAD")


def _built_sha() -> str:
    """The commit the installed package was built from (CMake writes moenum/_build_info.py into a
    wheel), or "" when the build did not know it (e.g. built from an sdist)."""
    try:
        from ._build_info import GIT_SHA
    except ImportError:
        return ""
    return GIT_SHA


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """The git commit of moenum's own source, or "unknown"; never the current directory's repository."""
    return _source_checkout_sha() or _built_sha() or UNKNOWN


def version_line() -> str:
    """`moenum --version`: "moenum 0.1.0 (git <sha>|unknown, CUDA backends built|not built)"."""
    from . import _core
    cuda = "built" if _core.built_with_cuda else "not built"
    return f"moenum {_core.__version__} (git {git_sha()}, CUDA backends {cuda})"


@functools.lru_cache(maxsize=1)
def gpu_description() -> str:
    """The CUDA device this module runs on (name, sm, driver, runtime, cuBLASLt), or "none"."""
    from . import _core
    return _core.gpu_description()


def root_attributes(scenario_yaml: str) -> dict:
    from . import _core
    from .results_io import SCHEMA_VERSION
    return {
        "schema_version": SCHEMA_VERSION,
        "moenum_version": _core.__version__,
        "git_sha": git_sha(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "gpu": gpu_description(),
        "scenario_yaml": scenario_yaml,
    }
