"""Memory, estimated before a point runs: the host's (inputs, every backend's outputs and the stage
tensors kept for checking, the checks' working copies) and the GPU's (one GPU backend's device
buffers), against what this machine can give now (free memory, the cgroup's and `ulimit -v`'s
limits; the device's free memory). A point that cannot fit is refused before anything is computed:
EnvironmentFailure, exit 3, instead of a bad_alloc after minutes or the OOM killer.

The estimate counts the tensors of numerics.md §1 from the scenario's shape; the factors below were
measured (peak RSS of single points, tests/python/test_resources.py) and err on the high side.
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvironmentFailure

# Bytes per stored value: golden computes and returns fp64, every other backend fp32 (bf16 values too).
GOLDEN_BYTES, VALUE_BYTES, CODE_BYTES = 8, 4, 1
# Working memory beyond what is kept: the oracles and the stage checks run a parallel loop over the
# experts, and each thread holds one expert's operands and products in fp64 (golden's GEMMs, the
# reference's certificate, the checks' recomputation): about WORKING_EXPERT_COPIES copies of one
# expert's weights and WORKING_ROW_COPIES of its rows' values. Fitted to the peak RSS of weight-heavy,
# token-heavy and row-heavy points on 1 and 2 threads and of the Qwen3-30B-A3B and DeepSeek-V3 points
# on 16 (bench/RESULTS.md, "Memory estimate"), then MARGIN on top so that the estimate errs high.
WORKING_EXPERT_COPIES, WORKING_ROW_COPIES = 3.0, 2.0
MARGIN = 1.15
# The interpreter, numpy, pandas, h5py and the module itself: a trivial point peaks at 240 MiB in a
# build with the CUDA backends (cuBLAS and the CUDA runtime loaded), much less without them.
FIXED_BYTES = {True: 320 << 20, False: 200 << 20}
# One GPU backend's device buffers: operands, outputs and row tensors in fp32 and bf16, with room for
# the GEMMs' workspaces.
GPU_WORKING_FACTOR = 2.0


@dataclass(frozen=True)
class Shape:
    tokens: int
    hidden: int
    ffn: int
    ffn1: int      # FC1's output width: 2*ffn for swiglu
    experts: int
    topk: int
    rows: int      # dispatched rows over every simulated rank, padding included (an upper bound)

    @property
    def weights(self) -> int:
        return self.experts * (self.hidden * self.ffn1 + self.ffn * self.hidden)

    @property
    def token_values(self) -> int:  # x, dy in; y, dx out
        return 4 * self.tokens * self.hidden

    @property
    def row_values(self) -> int:  # h, act, a, o, out, da, dh, dx_row
        return self.rows * (2 * self.ffn1 + 2 * self.ffn + 4 * self.hidden)


def shape_of(cfg: dict) -> Shape:
    m, d = cfg["model"], cfg["dispatch"]
    ffn1 = 2 * m["ffn"] if m["activation"] == "swiglu" else m["ffn"]
    padding = 0 if d["padding"] == "none" else m["experts"] * max(d["align"] or 0, 1)
    return Shape(tokens=cfg["tokens"], hidden=m["hidden"], ffn=m["ffn"], ffn1=ffn1, experts=m["experts"],
                 topk=m["topk"], rows=cfg["tokens"] * m["topk"] + padding)


def _threads() -> int:
    """The OpenMP threads a point's parallel loops use: OMP_NUM_THREADS, else the usable cores."""
    try:
        return max(int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]), 1)
    except ValueError:
        return max(len(os.sched_getaffinity(0)), 1)


def _stage_bytes(cfg: dict, s: Shape) -> int:
    """One backend's stage tensors (and, under mxfp8, the codes of every GEMM operand, both ways)."""
    n = VALUE_BYTES * s.row_values
    if cfg["recipe"]["name"] == "mxfp8":
        n += CODE_BYTES * (2 * s.weights + s.rows * (4 * s.hidden + 2 * s.ffn + 2 * s.ffn1))
    return n


def host_bytes(cfg: dict, backends: list[str]) -> int:
    """Peak host memory of one point, in bytes: the inputs, each backend's outputs, the stage tensors
    alive at once, and the working memory (an estimate that errs on the high side)."""
    from . import traits
    s = shape_of(cfg)
    inputs = VALUE_BYTES * (s.token_values // 2 + s.weights)
    outputs = {b: (GOLDEN_BYTES if b == "golden" else VALUE_BYTES) * (s.token_values // 2 + s.weights + s.tokens * s.topk)
               for b in backends}
    under_test = [b for b in backends if traits.under_test(b)]
    if cfg["output"]["intermediates"]:  # every backend's stages are kept to be written
        stages = len(backends) * _stage_bytes(cfg, s)
    elif cfg["verify"]["stages"] and under_test:  # each backend is checked as it runs, then its stages go
        stages = _stage_bytes(cfg, s)
    else:
        stages = 0
    # with two or more backends checked under mxfp8, the expected codes of x, dy, w1 and w2 (both ways)
    # are kept from the first check to the last (core/verify/input_codes.h)
    if cfg["verify"]["stages"] and len(under_test) > 1 and cfg["recipe"]["name"] == "mxfp8":
        stages += CODE_BYTES * 2 * (s.weights + 2 * s.rows * s.hidden) * (1 + 1 / 32)
    # the single-vs-discrete-weights check reruns a layout-sensitive backend: its outputs twice, for a while
    rerun = 0
    if cfg["verify"]["invariance"]:
        rerun = max((outputs[b] for b in backends if traits.layout_sensitive(b)), default=0)
    kept = inputs + sum(outputs.values()) + stages + rerun
    # a results file up to results_io.IN_MEMORY_LIMIT is assembled in memory: HDF5's buffer and the bytes
    # written, each about the outputs' size; a larger one is written directly
    from .results_io import IN_MEMORY_LIMIT
    results_file = 2 * sum(outputs.values())
    if results_file > 2 * IN_MEMORY_LIMIT:
        results_file = 0
    experts_at_once = min(_threads(), s.experts)
    working = GOLDEN_BYTES * experts_at_once * (WORKING_EXPERT_COPIES * s.weights + WORKING_ROW_COPIES * s.row_values) / s.experts
    from . import _core
    return int(FIXED_BYTES[bool(_core.built_with_cuda)] + MARGIN * (kept + max(working, results_file)))


def gpu_bytes(cfg: dict) -> int:
    """Device memory of one GPU backend."""
    s = shape_of(cfg)
    return int(GPU_WORKING_FACTOR * VALUE_BYTES * (2 * s.weights + s.token_values + s.row_values))


# ---- what this machine can give --------------------------------------------------------------

def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_headroom() -> int | None:
    """The tightest memory.max - memory.current on the way from this process's cgroup (v2) to the root."""
    try:
        line = next(l for l in Path("/proc/self/cgroup").read_text().splitlines() if l.startswith("0::"))
    except (OSError, StopIteration):
        return None
    root = Path("/sys/fs/cgroup")
    group = root / line[3:].lstrip("/")
    headroom = None
    while True:
        limit, used = _read_int(group / "memory.max"), _read_int(group / "memory.current")
        if limit is not None and used is not None:
            headroom = limit - used if headroom is None else min(headroom, limit - used)
        if group == root or root not in group.parents:
            return headroom
        group = group.parent


def _address_space_headroom() -> int | None:
    """`ulimit -v` (RLIMIT_AS) less what this process has mapped already."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        status = Path("/proc/self/status").read_text()
        mapped = next(int(l.split()[1]) * 1024 for l in status.splitlines() if l.startswith("VmSize:"))
    except (OSError, StopIteration):
        mapped = 0
    return soft - mapped


def host_memory_available() -> int:
    """Bytes this process can still allocate: free memory, within its cgroup's and ulimit's limits."""
    found = [v for v in (_meminfo_available(), _cgroup_headroom(), _address_space_headroom()) if v is not None]
    return max(min(found), 0) if found else 1 << 62


def gpu_memory_free() -> int | None:
    """Free bytes on the CUDA device, or None without one."""
    from . import _core
    free, total = _core.gpu_memory()
    return free if total else None


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PB"


def require_fits(points, backends=None) -> dict:
    """Each point's host estimate in bytes, by name; EnvironmentFailure for the first point that
    cannot fit on this host (or on its GPU, for a point with GPU backends)."""
    from . import traits
    available = host_memory_available()
    gpu_free = None
    need = {}
    for sc in points:
        names = list(backends or sc.config["backends"])
        need[sc.name] = host = host_bytes(sc.config, names)
        if host > available:
            raise EnvironmentFailure(f"scenario point {sc.name} needs about {_size(host)} of memory; "
                                     f"{_size(available)} is available here (refused before running it)")
        on_gpu = [b for b in names if getattr(traits.traits(b), "device", "") == "gpu"]
        if on_gpu:
            gpu_free = gpu_memory_free() if gpu_free is None else gpu_free
            if gpu_free is not None and gpu_bytes(sc.config) > gpu_free:
                raise EnvironmentFailure(f"scenario point {sc.name} needs about {_size(gpu_bytes(sc.config))} "
                                         f"of GPU memory for {on_gpu[0]}; {_size(gpu_free)} is free on the GPU "
                                         f"(refused before running it)")
    return need
