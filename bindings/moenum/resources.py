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
# Beyond what is kept, the point's working memory, per weight value and per row value (in the widest
# backend's bytes): the operands converted and dequantized, the weight gradients, the checks' fp64
# copies. Fitted to the peak RSS of weight-heavy and token-heavy points (golden, reference,
# cpu.eigen; bf16 and mxfp8), then MARGIN on top so that the estimate errs high.
WORKING_PER_WEIGHT, WORKING_PER_ROW_VALUE = 4.5, 1.3
MARGIN = 1.15
FIXED_BYTES = 200 << 20  # the interpreter, numpy, pandas, h5py and the module itself (about 90 MB after import)
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


def _keeps_stages(cfg: dict, backend: str) -> bool:
    from . import traits
    return bool(cfg["output"]["intermediates"]) or (bool(cfg["verify"]["stages"]) and traits.under_test(backend))


def host_bytes(cfg: dict, backends: list[str]) -> int:
    """Peak host memory of one point, in bytes: the inputs, each backend's outputs and the stage
    tensors kept to check it, and the working memory (an estimate that errs on the high side)."""
    s = shape_of(cfg)
    kept = VALUE_BYTES * (s.token_values // 2 + s.weights)  # the inputs
    # a results file up to results_io.IN_MEMORY_LIMIT is assembled in memory: HDF5's buffer and the bytes
    # written, each about the outputs' size; a larger one is written directly
    results_file = 0
    for b in backends:
        nbytes = GOLDEN_BYTES if b == "golden" else VALUE_BYTES
        outputs = nbytes * (s.token_values // 2 + s.weights + s.tokens * s.topk)
        kept += outputs
        results_file += 2 * outputs
        if _keeps_stages(cfg, b):
            kept += VALUE_BYTES * s.row_values
            if cfg["recipe"]["name"] == "mxfp8":  # codes of every GEMM operand, both directions
                kept += CODE_BYTES * (2 * s.weights + s.rows * (4 * s.hidden + 2 * s.ffn + 2 * s.ffn1))
    widest = GOLDEN_BYTES if "golden" in backends else VALUE_BYTES
    working = widest * (WORKING_PER_WEIGHT * s.weights + WORKING_PER_ROW_VALUE * s.row_values)
    from .results_io import IN_MEMORY_LIMIT
    if results_file > 2 * IN_MEMORY_LIMIT:
        results_file = 0
    return int(FIXED_BYTES + MARGIN * (kept + max(working, results_file)))


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
