"""The output cannot be written: a full disk, a file too large, -o onto a file, under /proc, a
read-only folder. One clear line, exit 3, no traceback, no temporary file left. A results file name
too long for the file system is found before anything is computed (bad input, exit 2)."""
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import moenum
import yaml

from conftest import SCENARIOS, moenum_cli


def _one_line_exit_3(r, *words):
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moenum: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def _mount_tmpfs(where: Path, options: str):
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not permitted'})")


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "disk"
    _mount_tmpfs(where, "size=200k")
    yield where
    subprocess.run(["umount", str(where)])


@pytest.fixture
def read_only_folder(tmp_path):
    where = tmp_path / "ro"
    _mount_tmpfs(where, "ro,size=64k")
    yield where
    subprocess.run(["umount", str(where)])


def test_full_disk_is_one_line_and_exit_3(small_disk):
    r = moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", small_disk / "out", "-q")
    _one_line_exit_3(r, "No space left on device", ".h5")
    assert not list((small_disk / "out").glob(".*.tmp-*"))


def test_file_size_limit_is_one_line_and_exit_3(tmp_path):
    """The real OS error path without a mount: `ulimit -f` makes the results file's writes fail
    (EFBIG) inside HDF5, as a full disk does."""
    exe = [sys.executable, "-m", "moenum"]

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    out = tmp_path / "out"
    r = subprocess.run([*exe, "run", str(SCENARIOS / "smoke.yaml"), "-o", str(out), "-q"], capture_output=True,
                       text=True, preexec_fn=limit_file_size, timeout=600)
    _one_line_exit_3(r, "File too large")
    assert not list(out.glob(".*.tmp-*"))


def test_output_onto_a_file_is_exit_3(tmp_path):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    _one_line_exit_3(moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", target), "not a folder")
    assert target.read_text() == "not a folder"


def test_output_under_proc_is_exit_3():
    _one_line_exit_3(moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", "/proc/moenum-results"), "/proc/moenum-results")


def test_read_only_output_folder_is_exit_3(read_only_folder):
    _one_line_exit_3(moenum_cli("run", SCENARIOS / "smoke.yaml", "-o", read_only_folder), "cannot be written")


def test_too_long_file_name_fails_before_the_computation(tmp_path, tiny_config):
    cfg = dict(tiny_config, sweep={"description": ["x" * 300]})
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(cfg, width=1000))
    out = tmp_path / "out"
    t0 = time.time()
    r = moenum_cli("run", path, "-o", out)
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = r.stderr.strip()
    assert line.startswith(f"moenum: error: {path}:") and "description:" in line and "bytes" in line, line
    assert "Traceback" not in r.stderr
    assert not list(out.glob("*.h5")) and not list(out.glob(".*.tmp-*"))
    sweep_line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.strip().startswith("description:"))
    assert f"{path}:{sweep_line}:" in line
    assert time.time() - t0 < 60


def test_a_large_results_file_is_written_directly_after_a_space_check(tmp_path, monkeypatch, tiny_config):
    """Above results_io.IN_MEMORY_LIMIT the file is not built in memory (it would double the peak):
    HDF5 writes it, and a file system without room for it is refused before writing (exit 3)."""
    import shutil

    from moenum import results_io
    monkeypatch.setattr(results_io, "IN_MEMORY_LIMIT", 0)
    sc = moenum.from_dict(tiny_config)[0]
    res = moenum.run(sc, out=tmp_path / "direct")
    back = moenum.open_results(res.path)
    assert back.disposition == res.disposition
    assert back.errors.equals(res.errors)
    assert not list((tmp_path / "direct").glob(".*tmp*"))
    Usage = type(shutil.disk_usage(tmp_path))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(1 << 30, 1 << 30, 1024))
    with pytest.raises(moenum.errors.EnvironmentFailure, match="no space left"):
        moenum.run(sc, out=tmp_path / "full")
    assert not list((tmp_path / "full").glob("*")) or not list((tmp_path / "full").glob("*.h5*"))
