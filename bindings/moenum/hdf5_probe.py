"""A damaged results file must not hang moenum. HDF5 can spin forever on some damaged files (a corrupt
global heap behind a variable-length string attribute: tests/fuzz/regressions/results/
vlen-attribute-global-heap.h5, HDF5 2.0.0), in native code that no Python timeout reaches. So before
moenum reads a file, a forked child reads what moenum will read (every attribute, the tables); a
child that does not finish in time is killed and the file is refused as damaged."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import h5py

PROBE_SECONDS = 20.0  # a results file's attributes and tables are read in milliseconds


def _read_metadata(path: Path) -> None:
    with h5py.File(path, "r") as f:
        for key in f.attrs:
            f.attrs[key]

        def visit(name, obj):
            for key in obj.attrs:
                obj.attrs[key]
            if name.startswith("tables/") and isinstance(obj, h5py.Dataset):
                obj[()]

        f.visititems(visit)


def finishes_reading(path: Path, seconds: float = PROBE_SECONDS) -> bool:
    """Whether HDF5 reads the file's attributes and tables within `seconds` (in a forked child, so a
    hang costs `seconds`, not the process). True without fork: nothing to guard with."""
    if not hasattr(os, "fork"):
        return True
    pid = os.fork()
    if pid == 0:  # the child: its result does not matter, only that it returns
        try:
            _read_metadata(path)
        except BaseException:
            pass
        os._exit(0)
    deadline, pause = time.monotonic() + seconds, 0.0005
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
    return True
