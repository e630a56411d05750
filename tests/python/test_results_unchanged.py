"""The bundled scenarios give the same results as before the verifier moved to C++: every output
tensor bitwise, every backend's disposition and named check's verdict, the stage table's class
counts, and the error table's figures (counts exactly, sums to 1e-12 relative, calc_diff to 1e-13: the C++
statistics add in another order than numpy did). The expected values are tests/data/bundled_digest.json.gz, made
with results_digest.py from the code before the move."""
import gzip
import json
import math
from pathlib import Path

import pytest
import yaml

import moenum

from results_digest import digest

ROOT = Path(__file__).resolve().parents[2]
BEFORE = json.loads(gzip.open(ROOT / "tests/data/bundled_digest.json.gz", "rt").read())
SCENARIOS = ["smoke", "ep", "mxfp8", "padding", "skew", "nightly/bf16", "nightly/mxfp8"]
COUNT_FIGURES = {"n", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "bitwise_equal", "bound_violations"}


def _close(name, a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    # calc_diff = 1 - 2ab/(a.a + b.b) keeps the sums' rounding as an absolute error near 1e-16 * n
    slack = 1e-13 if name == "calc_diff" else 0.0
    return a == b or abs(a - b) <= max(1e-12 * max(abs(a), abs(b)), slack)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_bundled_scenario_results_unchanged(tmp_path, scenario):
    # the digest is of the CPU oracles (golden on a GPU agrees only to 1e-12: test_execution_device.py)
    cfg = yaml.safe_load((ROOT / "scenarios" / f"{scenario}.yaml").read_text())
    cfg["execution"] = {"device": "cpu"}
    camp = moenum.run_campaign(cfg, out=tmp_path, jobs=2)
    assert camp.results, scenario
    for res in camp.results:
        key = Path(res.path).stem
        old, new = BEFORE[key], digest(res.path)
        for backend, entry in old["backends"].items():
            assert new["backends"][backend] == entry, (key, backend)
        for check, verdict in old["checks"].items():
            assert new["checks"][check] == verdict, (key, check)
        for row, classes in old["stages"].items():
            assert new["stages"][row] == classes, (key, row)
        assert set(new["errors"]) == set(old["errors"]), key
        for row, figures in old["errors"].items():
            for name, value in figures.items():
                got = new["errors"][row][name]
                ok = got == value if name in COUNT_FIGURES else _close(name, got, value)
                assert ok, (key, row, name, got, value)
