"""Where a results file came from: version, git commit, host, GPU and library versions."""
from __future__ import annotations

import functools
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


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
