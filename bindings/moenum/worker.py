"""One campaign point in its own process: `python -m moenum.worker TASK.pickle PARENT_PID`.

Campaigns run points in fresh interpreter processes rather than through multiprocessing, so that a
user's script needs no `if __name__ == "__main__"` guard (spawn re-imports the main module) and no
OpenMP thread pool is ever forked. The task is (Scenario, run keyword arguments); the outcome is the
results file, or one line on stderr and exit code 2 (bad input) or 3 (the environment failed).

A worker leaves signals to its campaign: it ignores Ctrl-C (the terminal sends it to the whole
process group; the campaign decides), dies on SIGTERM (the campaign's way to stop it, after which the
campaign removes its temporary file), and gets SIGTERM when the campaign process dies, so no worker
runs on as an orphan.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PR_SET_PDEATHSIG = 1
EXIT_BAD_INPUT, EXIT_ENVIRONMENT = 2, 3
STOP_GRACE_S = 5.0


def _die_with_parent(parent_pid: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the campaign still stops its workers when it is interrupted
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(argv) > 1:
        _die_with_parent(int(argv[1]))
    with open(argv[0], "rb") as f:
        scenario, kwargs = pickle.load(f)
    from .errors import EnvironmentFailure, ScenarioError
    from .runner import run
    try:
        run(scenario, **kwargs)
    except ScenarioError as e:
        print(str(e), file=sys.stderr)
        return EXIT_BAD_INPUT
    except EnvironmentFailure as e:
        print(str(e), file=sys.stderr)
        return EXIT_ENVIRONMENT
    return 0


class Worker:
    """A running point: started with `start`, polled with `done`, read with `result`, or stopped."""

    def __init__(self, sc, out, backends):
        self.sc, self.out = sc, out
        self._tmp = tempfile.TemporaryDirectory(prefix="moenum-task-")
        task = Path(self._tmp.name) / "task.pickle"
        task.write_bytes(pickle.dumps((sc, {"out": str(out), "backends": backends})))
        self._stderr = open(Path(self._tmp.name) / "stderr", "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "moenum.worker", str(task), str(os.getpid())],
                                     stdout=subprocess.DEVNULL, stderr=self._stderr)

    def done(self) -> bool:
        return self.proc.poll() is not None

    def _close(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().strip()
        self._stderr.close()
        self._tmp.cleanup()
        return text

    def result(self):
        """The point's RunResult; ScenarioError, EnvironmentFailure or RuntimeError as the worker ended."""
        from .errors import EnvironmentFailure, ScenarioError
        from .result import open_results
        from .results_io import result_path
        rc, text = self.proc.wait(), self._close()
        last = text.splitlines()[-1] if text else ""
        if rc == EXIT_BAD_INPUT:
            raise ScenarioError(last or "bad input")
        if rc == EXIT_ENVIRONMENT:
            raise EnvironmentFailure(last or "the environment failed")
        if rc != 0:
            raise RuntimeError(f"scenario point {self.sc.name} crashed (exit {rc}):\n{text[-4000:]}")
        return open_results(result_path(self.out, self.sc.name))

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; remove the temporary file it was writing."""
        from .results_io import result_path, temporary_path
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        temporary_path(result_path(self.out, self.sc.name), pid=self.proc.pid).unlink(missing_ok=True)
        self._close()


if __name__ == "__main__":
    sys.exit(main())
