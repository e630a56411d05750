"""`moenum report`: bad files are one clear line (a folder's are named, skipped and counted), a point
failed only by a check never shows rows that say passed, --limit is N >= 1, and a folder gets one
summary line per point."""
import shutil
import time
from pathlib import Path

import h5py
import pytest
import yaml

from conftest import moenum_cli
from moenum.hdf5_probe import PROBE_SECONDS

POINTS = """\
name: rep
model: {experts: 4, hidden: 32, ffn: 32, topk: 2}
tokens: 32
dispatch: {ep: 2, padding: none}
recipe: {name: bf16}
backends: [golden, reference, cpu.eigen]
sweep: {seed: [1, 2]}
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A folder of two good points."""
    root = tmp_path_factory.mktemp("report")
    (root / "rep.yaml").write_text(POINTS)
    proc = moenum_cli("run", root / "rep.yaml", "-o", root / "out", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "out"


def last_line(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


def test_foreign_hdf5_file_is_one_clear_line(tmp_path):
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f.attrs["schema_version"] = 1
        f.create_group("tables")
        f.create_dataset("data", data=[1, 2, 3])
    proc = moenum_cli("report", foreign)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert f"{foreign}: not a readable moenum results file" in proc.stderr


@pytest.mark.slow
def test_a_file_that_hangs_hdf5_is_refused_not_waited_on(results, tmp_path):
    """A damaged global heap behind a string attribute makes HDF5 2.0.0 spin for ever in native code
    (found by fuzzing the reader); in a folder it is named, skipped and counted within the probe's time."""
    folder = tmp_path / "mixed"
    shutil.copytree(results, folder)
    hang = folder / "zz-damaged-heap.h5"
    shutil.copy(Path(__file__).parents[1] / "fuzz/regressions/results/vlen-attribute-global-heap.h5", hang)
    t0 = time.monotonic()
    proc = moenum_cli("report", folder)
    assert time.monotonic() - t0 < PROBE_SECONDS + 60
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"moenum: skipped: {hang}: not a readable moenum results file (HDF5 did not finish" in proc.stderr
    assert last_line(proc) == "# report: 2 of 3 results files read (2 passed), 1 unreadable skipped"


def test_truncated_file_in_a_folder_is_named_skipped_and_counted(results, tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(results, folder)
    good = sorted(folder.glob("*.h5"))
    truncated = folder / "zz-truncated.h5"
    data = good[0].read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    proc = moenum_cli("report", folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"moenum: skipped: {truncated}: " in proc.stderr
    for f in good:  # the readable points are still reported
        assert yaml.safe_load(h5py.File(f).attrs["scenario_yaml"])["name"] in proc.stdout
    assert last_line(proc) == "# report: 2 of 3 results files read (2 passed), 1 unreadable skipped"


def test_folder_default_is_one_summary_line_per_point(results):
    proc = moenum_cli("report", results)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    header, rows = lines[0], lines[1:-1]
    for column in ("point", "verdict", "worst vs golden", "rel_fro", "bound_violations", "failed checks"):
        assert column in header
    assert len(rows) == 2 and all(r.split()[0].startswith("rep/seed=") for r in rows)
    assert all(" passed " in r and " cpu.eigen " in r for r in rows)
    assert last_line(proc) == "# report: 2 of 2 results files read (2 passed)"
    full = moenum_cli("report", results, "--full")
    assert full.returncode == 0 and full.stdout.count("== rep/seed=") == 2 and "max_ulp" in full.stdout


def test_limit_must_be_positive(results):
    one = next(results.glob("*.h5"))
    for bad in ("0", "-3"):
        proc = moenum_cli("report", one, "--limit", bad)
        assert proc.returncode == 2 and f"--limit: must be >= 1 (the worst N rows; leave it out for all), got {bad}" \
            in proc.stderr, proc.stderr
    proc = moenum_cli("report", one, "--limit", "2")
    assert proc.returncode == 0
    assert len(proc.stdout.strip().splitlines()) == 1 + 1 + 2  # "== point", header, 2 rows


def test_point_failed_only_by_an_injection_check_shows_no_passed_rows(tmp_path):
    (tmp_path / "one.yaml").write_text(POINTS.replace("sweep: {seed: [1, 2]}\n", ""))
    # one ulp inside the stage bound: undetectable, so the injection check fails, the stage check passes
    run = moenum_cli("run", tmp_path / "one.yaml", "-o", tmp_path / "out", "--inject", "cpu.eigen:dw1[1,2,3]+=1ulp")
    assert run.returncode == 1, run.stdout + run.stderr
    (path,) = (tmp_path / "out").glob("*.h5")
    with h5py.File(path) as f:
        assert f["results/cpu.eigen"].attrs["disposition"] == "passed"  # what makes the report's rows matter
        assert not f["checks/inject.cpu.eigen.dw1"].attrs["passed"]
    proc = moenum_cli("report", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].endswith(": failed")
    assert "check FAILED inject.cpu.eigen.dw1: undetectable" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("cpu.eigen ")]
    assert rows and all(line.split()[-1] == "failed" for line in rows)
    summary = moenum_cli("report", path, "--summary")
    (row,) = summary.stdout.strip().splitlines()[1:]
    assert " failed " in row and row.endswith("inject.cpu.eigen.dw1")
