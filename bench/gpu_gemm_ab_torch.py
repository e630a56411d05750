"""gpu.grouped's forward grouped GEMM and torch._grouped_mm in one process, round by round.

python3 bench/gpu_gemm_ab_torch.py BUILD/libmoenum_gemm_capi.so

The shapes and counts of bench/gpu_peer_torch.py. Each round times every engine (CUDA events on
torch's stream), in an order that rotates round by round, so both sides run under the same load and
the same gaps; 3 warm-up rounds, median of 20. Two protocols: one call per timing, the GPU idle
between timings (`calls` 1), and bursts of 5 back to back, as a layer's GEMMs run (`calls` 5, the
time per call). moenum's engines run through the C entry point of bench/gpu_gemm_capi.cu on torch's
tensors. Prints CSV shape,dist,calls,engine,ms,tflops,vs_torch,differing (differing: elements whose
bits differ from torch's output; the same per-element K order gives 0).
"""
import ctypes
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_peer_torch import SHAPES, make_counts  # noqa: E402

# The automatic choice without the rows on the host, so never the strided batch that equal counts
# can run (grouped_sm90.h, equal_groups_rows): the grouped kernels alone.
ROWS_UNTOLD = "gpu.grouped.rows_untold"
# (engine, tile as sm90::tile_name names it, sub-groups per group, tiles per run; -1 = automatic)
AUTOMATIC_ENGINES = [("gpu.grouped", "auto", -1, -1), (ROWS_UNTOLD, "auto", -1, -1)]
FORCED_ENGINES = [("gpu.grouped.pingpong", "128x128 pingpong 1x2", -1, 1),
                  ("gpu.grouped.pingpong_whole", "128x128 pingpong 1x2", 1, 1),
                  ("gpu.grouped.pingpong_m2", "128x128 pingpong 2x1", -1, 1),
                  ("gpu.grouped.wide", "128x256 coop 1x2", -1, 1),
                  ("gpu.grouped.wide_m2", "128x256 coop 2x1", -1, 1),
                  ("gpu.grouped.wide_m2_whole", "128x256 coop 2x1", 1, 1),
                  ("gpu.grouped.pingpong_t", "128x128 pingpong 1x2 transposed", -1, 1),
                  ("gpu.grouped.pingpong_t_r2", "128x128 pingpong 1x2 transposed", -1, 2),
                  ("gpu.grouped.pingpong_t_r4", "128x128 pingpong 1x2 transposed", -1, 4),
                  ("gpu.grouped.pingpong_t_r8", "128x128 pingpong 1x2 transposed", -1, 8),
                  ("gpu.grouped.pingpong_t_m2", "128x128 pingpong 2x1 transposed", -1, 1),
                  ("gpu.grouped.pingpong192", "128x192 pingpong 1x2", -1, 1),
                  ("gpu.grouped.pingpong_t192", "192x128 pingpong 1x2 transposed", -1, 1),
                  ("gpu.grouped.pingpong_t192_r2", "192x128 pingpong 1x2 transposed", -1, 2),
                  ("gpu.grouped.pingpong_t192_r4", "192x128 pingpong 1x2 transposed", -1, 4)]
ENGINES = AUTOMATIC_ENGINES + FORCED_ENGINES
# Each forced tile also running equal small groups as its strided batch (grouped_sm90.h,
# PlanOptions::strided_batch; on uniform counts of at most 512 rows per group, the batch alone):
# ENGINE.batch, timed only where MOENUM_GEMM_BENCH_ENGINES names it.
BATCH_ENGINES = [(f"{engine}.batch", f"{tile} + strided batch", chunks, run)
                 for engine, tile, chunks, run in FORCED_ENGINES if (chunks, run) == (-1, 1)]
# The automatic choice with its strided batch's L2 priorities forced (grouped_sm90.h, BatchL2; the
# rule: batch_l2_rule), timed only where MOENUM_GEMM_BENCH_ENGINES names them.
L2_ENGINES = [(f"gpu.grouped.l2_weights_{w}_rows_{r}", f"auto + L2 weights {w} rows {r}", -1, -1)
              for w, r in (("normal", "normal"), ("first", "normal"), ("first", "last"), ("normal", "last"))]
# The automatic choice with its strided batch's tiles on every CTA of the launch, not on the fewest
# clusters for its waves (grouped_fprop.cu, batch_clusters): timed only where named.
EVERY_CTA_ENGINES = [("gpu.grouped.batch_every_cta", "auto + batch on every CTA", -1, -1)]
# MOENUM_GEMM_BENCH_ENGINES=name,name,... asks for those forced engines only (ASKED_ENGINES; none
# without it), which ENGINES then keeps beside the automatic choices, as in bench/gpu_gemm_bench.cu:
# short sweeps.
_ASKED = [n for n in os.environ.get("MOENUM_GEMM_BENCH_ENGINES", "").split(",") if n]
ASKED_ENGINES = [e for e in FORCED_ENGINES + BATCH_ENGINES + L2_ENGINES + EVERY_CTA_ENGINES if e[0] in _ASKED]
if _ASKED:
    ENGINES = AUTOMATIC_ENGINES + ASKED_ENGINES


def load_capi(path):
    """bench/gpu_gemm_capi.cu's library, its functions typed for ctypes."""
    lib = ctypes.CDLL(path)
    lib.moenum_fprop_new.restype = ctypes.c_void_p
    lib.moenum_fprop_new.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.moenum_fprop_run.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_void_p] * 3
    lib.moenum_fprop_free.argtypes = [ctypes.c_void_p]
    lib.moenum_fprop_tile.argtypes = [ctypes.c_char_p]
    return lib


def tile_values(lib, names):
    """{tile name: its sm90::Tile value}, or None (after saying which) if the library lacks one."""
    tiles = {tile: lib.moenum_fprop_tile(tile.encode()) for tile in names}
    unknown = [tile for tile, value in tiles.items() if value < 0]
    if unknown:
        print(f"the library has no tile named {', '.join(unknown)}", file=sys.stderr)
        return None
    return tiles


def operands(g, m, n, k, device="cuda"):
    """The bench's bf16 operands: the rows A [m, k] and the weights B [g, n, k], uniform in [-1/8, 1/8)."""
    a = (torch.rand(m, k, device=device) - 0.5).mul_(0.25).to(torch.bfloat16)
    b = (torch.rand(g, n, k, device=device) - 0.5).mul_(0.25).to(torch.bfloat16)
    return a, b


def routing(g, m, zipf, device="cuda"):
    """make_counts' rows per group as torch takes them (int32 cumulative ends) and as moenum does
    (int64 counts, and int64 offsets with groups + 1 entries)."""
    counts = make_counts(g, m, zipf)
    offs32 = torch.tensor(counts, device=device, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    counts64 = torch.tensor(counts, device=device, dtype=torch.int64)
    offsets64 = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), counts64.cumsum(0)])
    return offs32, counts64, offsets64


def moenum_plan(lib, tile, chunks, run, a, b, d, counts64, offsets64, sm_count=-1, rows_told=True):
    """(a call running moenum's plan of that tile, sub-groups, run and grid SMs (-1: all) on A = a,
    B = b into d, on torch's current stream, telling it the rows of a unless rows_told is False; the
    plan's handle, for moenum_fprop_free). Raises if no plan is made."""
    g, n, k = b.shape
    rows = a.shape[0] if rows_told else 0
    h = lib.moenum_fprop_new(tile, chunks, run, sm_count, g, n, k, ctypes.c_void_p(b.data_ptr()))
    if not h:
        raise RuntimeError("moenum_fprop_new failed")
    stream = torch.cuda.current_stream().cuda_stream

    def call():
        if lib.moenum_fprop_run(h, a.data_ptr(), d.data_ptr(), rows, counts64.data_ptr(), offsets64.data_ptr(), stream):
            raise RuntimeError("moenum_fprop_run failed")
    return call, h


def median_ms(calls, names, burst):
    """Median ms per call of each engine, timing `burst` back-to-back calls, rounds rotating the order."""
    times = {e: [] for e in names}
    for r in range(23):
        for e in names[r % len(names):] + names[:r % len(names)]:
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(burst):
                calls[e]()
            t1.record()
            t1.synchronize()
            if r >= 3:
                times[e].append(t0.elapsed_time(t1) / burst)
    return {e: sorted(v)[len(v) // 2] for e, v in times.items()}


def open_capi(library, usage, tile_names):
    """(the library at `library` via load_capi, tile_values of tile_names); exits after saying why
    when `library` is missing or lacks a tile (2) or there is no CUDA device (3)."""
    if library is None:
        print(usage, file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        sys.exit(3)
    lib = load_capi(library)
    tiles = tile_values(lib, tile_names)
    if tiles is None:
        sys.exit(2)
    return lib, tiles


def main():
    library = sys.argv[1] if len(sys.argv) == 2 else None
    lib, tiles = open_capi(library, __doc__, [tile for _, tile, _, _ in ENGINES])
    print("shape,dist,calls,engine,ms,tflops,vs_torch,differing")
    for name, g, m, n, k in SHAPES:
        a, b = operands(g, m, n, k)
        bt = b.transpose(-2, -1)
        for zipf in (False, True):
            # when each shape starts, to line the GPU's clock and power samples up with it
            print(f"{time.strftime('%Y/%m/%d %H:%M:%S')} {name} {'zipf1.2' if zipf else 'uniform'}", file=sys.stderr)
            offs32, counts64, offsets64 = routing(g, m, zipf)
            outs = {"torch._grouped_mm": torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
            calls = {"torch._grouped_mm": lambda: torch._grouped_mm(a, bt, offs=offs32, out_dtype=torch.bfloat16)}
            handles = []
            for engine, tile, chunks, run in ENGINES:
                outs[engine] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                calls[engine], h = moenum_plan(lib, tiles[tile], chunks, run, a, b, outs[engine], counts64, offsets64,
                                               rows_told=engine != ROWS_UNTOLD)
                handles.append(h)
            names = list(calls)
            ref = outs["torch._grouped_mm"].view(torch.int16)
            for burst in (1, 5):
                med = median_ms(calls, names, burst)
                for e in names:
                    tflops = 2.0 * m * n * k / (med[e] * 1e-3) / 1e12
                    diff = int((outs[e].view(torch.int16) != ref).sum())
                    print(f"{name},{'zipf1.2' if zipf else 'uniform'},{burst},{e},{med[e]:.4f},{tflops:.1f},"
                          f"{med['torch._grouped_mm'] / med[e]:.3f},{diff}", flush=True)
            for h in handles:
                lib.moenum_fprop_free(h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
