"""The output folder, checked before anything is computed: a folder that can be written (not a file,
not /proc, not read-only), where every point's results file name fits, cleared of the temporary
files that killed runs left there."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import EnvironmentFailure
from .results_io import remove_stale_temporaries, result_path, temporary_path

WIDEST_PID = 4194304  # Linux's largest pid_max: the longest temporary name a writer can give


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_file_names(out, points) -> None:
    """Every point's file (and its temporary name while written) within the file system's name
    length: a too long one is bad input (the name or a swept value), found before any computation."""
    out = Path(out)
    limit = _name_max(out)
    for sc in points:
        name = temporary_path(result_path(out, sc.name), pid=WIDEST_PID).name
        size = len(os.fsencode(name))
        if size > limit:
            longest = max(sc.sweep_point, key=lambda k: len(str(sc.sweep_point[k])), default="name")
            raise sc.error(longest, f"makes the results file name of point '{sc.name[:60]}...' {size} bytes "
                                    f"long (while written); the file system allows {limit}: shorten the "
                                    f"scenario name or the swept values")


def prepare_output(out, points=()) -> Path:
    """Create `out` if needed and prove it writable; check the points' file names; remove stale
    temporary files. EnvironmentFailure (exit 3) when the folder cannot be used."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise EnvironmentFailure(f"output folder {out} is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".moenum-probe-") as probe:
            probe.write(b"x")
            probe.flush()
    except OSError as e:
        raise EnvironmentFailure(f"output folder {out} cannot be written: {e.strerror or e}") from None
    check_file_names(out, points)
    remove_stale_temporaries(out)
    return out
