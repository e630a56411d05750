"""The fuzz targets (tests/fuzz/targets.py) over their corpus and every finding kept as a regression
(tests/fuzz/regressions/<target>/): each input is accepted or refused with a ScenarioError, nothing
else escapes. The same functions run under atheris in scripts/test.sh's fuzz step."""
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
sys.path.insert(0, str(FUZZ))
import targets  # noqa: E402


def _inputs():
    for name in targets.TARGETS:
        for kind in ("corpus", "regressions"):
            for f in sorted((FUZZ / kind / name).glob("*")):
                if f.is_file() and not f.name.startswith("README"):
                    yield pytest.param(name, f, id=f"{name}/{kind}/{f.name}")


INPUTS = list(_inputs())


def test_every_target_has_a_corpus():
    for name in targets.TARGETS:
        assert any(p.values[0] == name for p in INPUTS), f"tests/fuzz/corpus/{name}/ is empty"


@pytest.mark.parametrize("target,path", INPUTS)
def test_input_is_accepted_or_refused_cleanly(target, path):
    targets.TARGETS[target](path.read_bytes())
