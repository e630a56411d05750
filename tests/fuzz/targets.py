"""The fuzz targets: the scenario loader and the results reader, each fed arbitrary bytes.

A target returns normally when moenum accepts the input or refuses it the documented way (a
ScenarioError: the CLI's one-line `file:line: key: message`, exit 2); anything else it lets escape is a
finding. tests/fuzz/fuzz.py drives them under atheris; tests/python/test_fuzz_regressions.py replays the
corpus and every finding (tests/fuzz/regressions/<target>/) without it.
"""
from __future__ import annotations

import os
import tempfile

from moenum.errors import ScenarioError

# The longest input each target is given (libFuzzer -max_len): scenario files are short, a small
# results file is 100-200 kB.
MAX_LEN = {"scenario": 4096, "results": 1 << 18}


def scenario_target(data: bytes) -> None:
    """YAML text -> validated, expanded scenarios (moenum.load_scenarios after the file is read)."""
    from moenum.scenario import _parse_yaml, expand
    text = data[:MAX_LEN["scenario"]].decode("utf-8", errors="replace")
    try:
        parsed, lines = _parse_yaml(text, "fuzz.yaml")
        if parsed is None:
            return
        expand(parsed, "fuzz.yaml", lines)
    except ScenarioError:
        pass


def results_target(data: bytes) -> None:
    """Bytes on disk -> moenum.open_results."""
    import moenum
    fd, path = tempfile.mkstemp(suffix=".h5")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            moenum.open_results(path)
        except ScenarioError:
            pass
    finally:
        os.unlink(path)


TARGETS = {"scenario": scenario_target, "results": results_target}
