"""Resources: a point that cannot fit in memory is refused up front (exit 3, one line); the estimate
is close to the measured peak; YAML aliases and sweeps cannot grow without bound (exit 2, fast); a
large sweep says how far its expansion got."""
import resource
import subprocess
import sys
import time

import pytest
import yaml

import moenum
from moenum import resources
from moenum.campaign import ExpansionProgress

from conftest import moenum_cli, with_changes

GiB = 1 << 30


def _write(tmp_path, cfg, name="sc.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _refused(r, t0):
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs about" in lines[0] and "available" in lines[0], r.stderr
    assert time.time() - t0 < 60


def test_a_huge_point_is_refused_before_it_runs(tmp_path, tiny_config):
    cfg = with_changes(tiny_config, tokens=10**9, model__hidden=10**6, backends=["golden", "reference", "cpu.eigen"])
    t0 = time.time()
    _refused(moenum_cli("run", _write(tmp_path, cfg), "-o", tmp_path / "out"), t0)


def test_a_point_larger_than_a_24_gb_machine_is_refused(tmp_path, tiny_config):
    """8 experts of 8192 x 8192 with 16k tokens under a 24 GiB address-space limit (`ulimit -v`)."""
    cfg = with_changes(tiny_config, tokens=16384, model__experts=8, model__hidden=8192, model__ffn=8192,
                       dispatch__ep=1, backends=["golden", "reference", "cpu.eigen"])
    path = _write(tmp_path, cfg)

    def machine_of_24_gb():
        resource.setrlimit(resource.RLIMIT_AS, (24 * GiB, 24 * GiB))

    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "moenum", "run", str(path), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, preexec_fn=machine_of_24_gb, timeout=600)
    _refused(r, t0)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    dict(tokens=256, model__experts=8, model__hidden=512, model__ffn=512),             # weights dominate
    dict(tokens=8192, model__experts=4, model__hidden=128, model__ffn=128),            # tokens dominate
    dict(tokens=2048, model__experts=4, model__hidden=256, model__ffn=256, recipe__name="mxfp8",
         dispatch__padding="router"),
], ids=["weights", "tokens", "mxfp8"])
def test_the_estimate_is_close_to_the_measured_peak(tmp_path, tiny_config, case):
    cfg = with_changes(tiny_config, dispatch__ep=1, backends=["golden", "reference", "cpu.eigen"], **case)
    path = _write(tmp_path, cfg)
    # VmHWM, not ru_maxrss: Linux carries the parent's high-water mark across fork and exec into
    # ru_maxrss, so a child of a large pytest process (torch imported) would report the parent's.
    code = ("import sys, moenum; moenum.run(sys.argv[1], out=sys.argv[2]); "
            "print(next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')))")
    r = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    peak = int(r.stdout.split()[-1])
    (sc,) = moenum.load_scenarios(path)
    estimate = resources.host_bytes(sc.config, sc.config["backends"])
    assert peak <= estimate <= 1.6 * peak, (estimate / 2**20, peak / 2**20)


def test_available_memory_follows_the_address_space_limit():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)); "
            "from moenum import resources; print(resources.host_memory_available())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 0 < int(r.stdout) < 8 << 30


def test_nested_yaml_aliases_fail_fast(tmp_path):
    """The billion-laughs shape in 735 bytes: nine levels of nine aliases."""
    levels = ['a0: &a0 [x, x, x, x, x, x, x, x, x]']
    for i in range(1, 9):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    text = "name: bomb\ndescription: d\n" + "\n".join(levels) + "\n"
    assert len(text) < 800
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    t0 = time.time()
    r = moenum_cli("run", path, "-o", tmp_path / "out", timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "aliases" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert time.time() - t0 < 30


def test_a_sweep_too_large_fails_fast(tmp_path, tiny_config):
    cfg = dict(tiny_config, sweep={"seed": list(range(1000)), "routing.skew.s": [0.1 * i for i in range(1000)]})
    path = _write(tmp_path, cfg)
    t0 = time.time()
    r = moenum_cli("run", path, "-o", tmp_path / "out", timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "1000000 scenario points" in r.stderr and "sweep" in r.stderr, r.stderr
    assert time.time() - t0 < 30


def test_a_large_sweep_reports_its_expansion(tmp_path, tiny_config, capsys):
    path = _write(tmp_path, dict(tiny_config, sweep={"seed": list(range(50))}))
    calls = []
    points = moenum.load_scenarios(path, progress=lambda f, done, total: calls.append((done, total)))
    assert len(points) == 50 and calls == [(i, 50) for i in range(1, 51)]
    moenum.load_scenarios(path, progress=ExpansionProgress(every_s=0.0))
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"expanding {path}: 50 of 50 scenario points" and len(err) == 50
