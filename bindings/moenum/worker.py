"""One campaign point in its own process: `python -m moenum.worker TASK.pickle`.

Campaigns run points in fresh interpreter processes rather than through multiprocessing, so that a
user's script needs no `if __name__ == "__main__"` guard (spawn re-imports the main module) and no
OpenMP thread pool is ever forked. The task is (Scenario, run keyword arguments); the outcome is the
results file, or on bad input one line on stderr and exit code 2.
"""
from __future__ import annotations

import pickle
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], "rb") as f:
        scenario, kwargs = pickle.load(f)
    from .errors import ScenarioError
    from .runner import run
    try:
        run(scenario, **kwargs)
    except ScenarioError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
