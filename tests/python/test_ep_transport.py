"""dispatch.transport (issue 13): a real EP run, one process per EP rank under `mpirun -np 2`, whose
results file is bitwise the simulated (local) run's, for every padding source; and a failing or
hanging rank that stops the whole job, naming the rank, within a bounded time."""
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import yaml

from conftest import moenum_cli
from results_digest import digest

MPIRUN = shutil.which("mpirun")
try:
    import mpi4py  # noqa: F401
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False
needs_mpi = pytest.mark.skipif(not (MPIRUN and HAVE_MPI4PY),
                               reason="needs Open MPI's mpirun and mpi4py (scripts/setup.sh installs both)")

BACKENDS = ["golden", "reference", "cpu.eigen"]
# (recipe, align, padding sources): mxfp8 needs aligned segments, so no `none`
SWEEPS = [("bf16", 16, ["none", "router", "router_post", "module", "hybridep"]),
          ("mxfp8", 32, ["router", "router_post", "module", "hybridep"]),
          ("fp32", 16, ["none", "router"])]
BOUND_S = 120  # a failing job must end well within this


def mpi_env(**extra) -> dict:
    """Open MPI as root on a small machine: allowed for the tests only, more ranks than cores allowed."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", NCCL_NVLS_ENABLE="0")
    env.update(extra)
    return env


def mpirun(*apps, env=None, timeout=600):
    """mpirun with one or more app contexts (each a list of arguments, run with -np 1 each when more
    than one is given); returns the completed process."""
    command = [MPIRUN]
    if len(apps) == 1:
        command += ["-np", "2", *apps[0]]
    else:
        for i, app in enumerate(apps):
            command += ([":"] if i else []) + ["-np", "1", *app]
    return subprocess.run(command, capture_output=True, text=True, env=env or mpi_env(), timeout=timeout)


def moenum_args(*args) -> list[str]:
    return [sys.executable, "-m", "moenum", *map(str, args)]


def scenario(tmp_path, name, recipe, align, paddings, transport, backends=BACKENDS, **dispatch) -> str:
    cfg = {"name": name, "seed": 7,
           "model": {"experts": 4, "hidden": 64, "ffn": 64, "topk": 2, "bias": True},
           "tokens": 128,  # 64 per source rank: router padding to 32 rows always finds enough tokens
           "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 1.0}},
           "dispatch": {"ep": 2, "padding": paddings[0], "align": align, "transport": transport, **dispatch},
           "recipe": {"name": recipe}, "backends": backends,
           "output": {"intermediates": True},
           "sweep": {"dispatch.padding": paddings}}
    path = tmp_path / f"{name}-{transport}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


@needs_mpi
@pytest.mark.parametrize("recipe,align,paddings", SWEEPS, ids=[s[0] for s in SWEEPS])
def test_mpi_transport_is_bitwise_the_local_run(tmp_path, recipe, align, paddings):
    name = f"ep-{recipe}"
    local = moenum_cli("run", scenario(tmp_path, name, recipe, align, paddings, "local"), "-o", tmp_path / "local", "-q")
    assert local.returncode == 0, local.stdout + local.stderr
    dist = mpirun(moenum_args("run", scenario(tmp_path, name, recipe, align, paddings, "mpi"),
                              "-o", tmp_path / "mpi", "-q"))
    assert dist.returncode == 0, dist.stdout + dist.stderr
    files = sorted((tmp_path / "local").glob("*.h5"))
    assert len(files) == len(paddings)
    for f in files:
        other = tmp_path / "mpi" / f.name
        a, b = digest(f), digest(other)
        assert a["backends"] == b["backends"], f.name   # every output tensor bit for bit, dispositions
        assert a["stages"] == b["stages"], f.name       # stage checks' class counts
        assert a["errors"] == b["errors"], f.name       # error table figures
        assert a["checks"] == b["checks"], f.name
        assert all(e["disposition"] == "passed" for e in b["backends"].values()), b["backends"]
        with h5py.File(other) as h, h5py.File(f) as l:
            assert (h.attrs["transport"], int(h.attrs["world_size"])) == ("mpi", 2)
            assert (l.attrs["transport"], int(l.attrs["world_size"])) == ("local", 1)
            stages = []  # the stage tensors came back from the ranks in plan order too
            l["results"].visititems(lambda key, ds: stages.append(key) if isinstance(ds, h5py.Dataset) else None)
            assert any("/stages/" in key for key in stages)
            for key in stages:
                assert h["results"][key][()].tobytes() == l["results"][key][()].tobytes(), key


def test_a_distributed_transport_needs_a_launcher(tmp_path):
    r = moenum_cli("run", scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi"), "-o", tmp_path / "o")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dispatch.transport: transport mpi runs one process per EP rank" in r.stderr
    assert "mpirun -np 2" in r.stderr


def test_a_subset_of_ranks_is_local_only(tmp_path):
    r = moenum_cli("run", scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi", ranks=[0]), "-o", tmp_path / "o")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dispatch.ranks: transport mpi runs every EP rank" in r.stderr


@needs_mpi
def test_world_size_must_be_ep(tmp_path):
    path = scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi")
    text = open(path).read().replace("ep: 2", "ep: 4")
    open(path, "w").write(text)
    t0 = time.monotonic()
    r = mpirun(moenum_args("run", path, "-o", tmp_path / "o"), timeout=BOUND_S)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dispatch.ep: ep 4 needs 4 processes, one per EP rank, but this run has 2" in r.stderr
    assert "rank 0 of 2" in r.stderr
    assert time.monotonic() - t0 < BOUND_S


@needs_mpi
def test_a_rank_with_bad_input_stops_every_rank(tmp_path):
    good = scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi")
    bad = tmp_path / "bad.yaml"
    bad.write_text(open(good).read().replace("experts: 4", "experts: 0"))
    t0 = time.monotonic()
    r = mpirun(moenum_args("run", good, "-o", tmp_path / "o"), moenum_args("run", bad, "-o", tmp_path / "o"),
               timeout=BOUND_S)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"moenum: error: rank 1 of 2: {bad}:" in r.stderr
    assert "model.experts" in r.stderr
    assert time.monotonic() - t0 < BOUND_S
    assert not list((tmp_path / "o").glob("*.h5"))  # nothing written


@needs_mpi
def test_a_hung_rank_times_out_the_others(tmp_path):
    good = scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi")
    hang = [sys.executable, "-c", "from mpi4py import MPI; import time; time.sleep(600)"]
    t0 = time.monotonic()
    r = mpirun(moenum_args("run", good, "-o", tmp_path / "o"), hang, env=mpi_env(MOENUM_EP_TIMEOUT="5"),
               timeout=BOUND_S)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0, r.stdout + r.stderr
    assert "moenum: error: rank 0 of 2: timed out after 5 s waiting for the other ranks" in r.stderr
    assert elapsed < BOUND_S


@needs_mpi
def test_a_rank_that_dies_stops_the_job(tmp_path):
    good = scenario(tmp_path, "ep-bf16", "bf16", 16, ["none"], "mpi")
    die = [sys.executable, "-c", "from mpi4py import MPI; import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    t0 = time.monotonic()
    r = mpirun(moenum_args("run", good, "-o", tmp_path / "o"), die, env=mpi_env(MOENUM_EP_TIMEOUT="30"),
               timeout=BOUND_S)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "rank 1" in r.stdout + r.stderr  # mpirun names the rank that died
    assert time.monotonic() - t0 < BOUND_S


def _gpus() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    out = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def _built_with_nccl() -> bool:
    from moenum import _core
    return bool(getattr(_core, "built_with_nccl", False))


NCCL_BACKENDS = ["reference", "gpu.grouped", "gpu.multistream"]
NCCL_SWEEPS = [("bf16", 16, ["none", "router", "router_post", "module", "hybridep"]),
               ("mxfp8", 32, ["router", "router_post", "module", "hybridep"])]


@needs_mpi
@pytest.mark.gpu
@pytest.mark.skipif(not _built_with_nccl(), reason="this moenum was built without CUDA and NCCL")
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs (nvidia-h200-x2): one per EP rank")
@pytest.mark.parametrize("recipe,align,paddings", NCCL_SWEEPS, ids=[s[0] for s in NCCL_SWEEPS])
def test_nccl_transport_is_bitwise_the_local_run(tmp_path, recipe, align, paddings):
    """EP 2 on two GPUs through NCCL, gpu.grouped and gpu.multistream: bitwise the simulated run.
    Prints each backend's seconds (the slowest rank) next to the local run's."""
    local_yaml = scenario(tmp_path, f"nccl-{recipe}", recipe, align, paddings, "local", NCCL_BACKENDS)
    nccl_yaml = scenario(tmp_path, f"nccl-{recipe}", recipe, align, paddings, "nccl", NCCL_BACKENDS)
    local = moenum_cli("run", local_yaml, "-o", tmp_path / "local", "-q")
    assert local.returncode == 0, local.stdout + local.stderr
    dist = mpirun(moenum_args("run", nccl_yaml, "-o", tmp_path / "nccl", "-q"))
    assert dist.returncode == 0, dist.stdout + dist.stderr
    for f in sorted((tmp_path / "local").glob("*.h5")):
        a, b = digest(f), digest(tmp_path / "nccl" / f.name)
        assert a["backends"] == b["backends"], f.name
        assert a["stages"] == b["stages"] and a["errors"] == b["errors"], f.name
        with h5py.File(tmp_path / "nccl" / f.name) as h, h5py.File(f) as l:
            assert (h.attrs["transport"], int(h.attrs["world_size"])) == ("nccl", 2)
            for backend in NCCL_BACKENDS[1:]:
                assert h[f"results/{backend}"].attrs["disposition"] == "passed", (f.name, backend)
                print(f"timing {f.name} {backend}: local {l[f'results/{backend}'].attrs['seconds']:.4f} s, "
                      f"nccl {h[f'results/{backend}'].attrs['seconds']:.4f} s (slowest rank)")


@pytest.mark.parametrize("recipe", ["fp32", "bf16", "mxfp8"])
@pytest.mark.parametrize("bias", [True, False])
def test_the_exchange_arithmetic_is_the_backends_own(recipe, bias):
    """What a rank computes on received rows, checked on one process against the reference: the
    combine of its `out` rows is its y, of its dx rows its dx; and `out` rebuilt from `o` (the GPU
    backends save no `out`: their combine kernel adds the FC2 bias) is its `out`, bit for bit."""
    import moenum
    from moenum import _core
    from moenum.scenario import to_core
    cfg = {"name": "arith", "seed": 3, "model": {"experts": 4, "hidden": 64, "ffn": 64, "topk": 2, "bias": bias},
           "tokens": 64, "dispatch": {"ep": 2, "padding": "router", "align": 32}, "recipe": {"name": recipe},
           "backends": ["golden", "reference"]}
    (sc,) = moenum.scenario.from_dict(cfg)
    prepared = _core.prepare(to_core(sc))
    plan = prepared.plan["ranks"]
    row_token = np.concatenate([r["row_token"] for r in plan])
    row_expert = np.concatenate([r["row_expert"] for r in plan])
    row_slot = np.concatenate([r["row_slot"] for r in plan])
    row_prob = np.concatenate([r["row_prob"] for r in plan])
    routed = row_slot >= 0
    for backend in ("golden", "reference"):
        res = _core.run_backend(backend, prepared, True)
        out, dx_rows = res["stages"]["out"][0], res["stages"]["dx_row"][0]
        for tensor, rows in (("y", out), ("dx", dx_rows)):
            a, dtype = res["outputs"][tensor]
            combined = _core.ep_combine(rows[routed], row_token[routed], row_expert[routed], 64, dtype)
            assert combined.dtype == a.dtype and combined.tobytes() == a.tobytes(), (backend, tensor)
    o, y_dtype = res["stages"]["o"][0], res["outputs"]["y"][1]
    b2 = prepared.inputs["b2"] if bias else None
    rebuilt = _core.ep_out_rows(o, b2, row_expert, row_prob, y_dtype)
    assert rebuilt.tobytes() == out.tobytes()
    if bias:  # the bias matters: o alone is not out
        assert o.tobytes() != out.tobytes()


@needs_mpi
def test_local_and_distributed_points_in_one_job_and_resume(tmp_path):
    """Under mpirun, a local point is rank 0's alone, a distributed one every rank's; a resumed run
    that has nothing left to do ends every rank too."""
    local = scenario(tmp_path, "mixed-local", "bf16", 16, ["none", "module"], "local")
    dist = scenario(tmp_path, "mixed-mpi", "bf16", 16, ["none", "module"], "mpi")
    for attempt in ("first", "resumed"):
        t0 = time.monotonic()
        r = mpirun(moenum_args("run", local, dist, "-o", tmp_path / "o", "--resume"), timeout=BOUND_S)
        assert r.returncode == 0, (attempt, r.stdout + r.stderr)
        assert time.monotonic() - t0 < BOUND_S
    assert "4 resumed" in r.stdout
    files = {f.name: f for f in (tmp_path / "o").glob("*.h5")}
    assert len(files) == 4, sorted(files)
    for name, f in files.items():
        with h5py.File(f) as h:
            want = ("mpi", 2) if name.startswith("mixed-mpi") else ("local", 1)
            assert (h.attrs["transport"], int(h.attrs["world_size"])) == want, name
