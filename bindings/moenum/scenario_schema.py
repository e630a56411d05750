"""The scenario file schema (interfaces.md): every key, its type, its range and its default.

One table drives validation, defaults and sweep-key checking, so a new key is one new line here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

NAME_RE = re.compile(r"^[a-z0-9_.-]+$")
INPUT_TENSORS = ("x", "w1", "b1", "w2", "b2", "dy")


@dataclass(frozen=True)
class Key:
    """One leaf key: a type, a default, and an optional check returning an error text or None.
    Numbers must be finite (YAML .nan / .inf are refused) unless nonfinite is set."""
    kind: type | tuple
    default: Any = None
    required: bool = False
    choices: tuple = ()
    check: Callable[[Any], str | None] | None = None
    doc: str = ""
    nonfinite: bool = False


def at_least(lo):
    return lambda v: None if v >= lo else f"must be >= {lo}, got {v}"


def in_range(lo, hi, lo_open=False):
    def check(v):
        ok = (v > lo if lo_open else v >= lo) and v <= hi
        return None if ok else f"must be in {'(' if lo_open else '['}{lo}, {hi}], got {v}"
    return check


def positive(v):
    return None if v > 0 else f"must be > 0, got {v}"


def valid_name(v):
    return None if NAME_RE.match(v) else f"'{v}' must match [a-z0-9_.-]+"


def int_list(v):
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in v):
        return "must be a list of non-negative integers"
    return None


def sample_spec(v):
    if isinstance(v, bool) or (isinstance(v, str) and v not in ("all", "auto")) or (isinstance(v, int) and v <= 0):
        return f"must be all, auto or a positive number of elements per (stage, expert), got {v!r}"
    return None


def rank_list(v):
    if not v or not all(isinstance(c, int) and not isinstance(c, bool) for c in v):
        return "must be a non-empty list of EP rank numbers"
    twice = [r for i, r in enumerate(v) if r in v[:i]]
    if twice:
        return f"lists rank {twice[0]} twice"
    return None


def str_list(v):
    return None if v and all(isinstance(c, str) for c in v) else "must be a non-empty list of names"


NUM = (int, float)

# Nested dicts are sections; Key objects are leaves. `inputs` and `sweep` are handled specially.
SCHEMA: dict[str, Any] = {
    "name": Key(str, required=True, check=valid_name),
    "description": Key(str, ""),
    "seed": Key(int, 0, check=at_least(0)),
    "model": {
        "experts": Key(int, 8, check=at_least(1)),
        "hidden": Key(int, 64, check=at_least(1)),
        "ffn": Key(int, 64, check=at_least(1)),
        "topk": Key(int, 2, check=at_least(1)),
        "activation": Key(str, "swiglu", choices=("swiglu",)),
        "bias": Key(bool, True),
    },
    "tokens": Key(int, 64, check=at_least(1)),
    "routing": {
        "score": Key(str, "softmax", choices=("softmax", "softmax_pre", "sigmoid")),
        "skew": {
            "kind": Key(str, "uniform", choices=("uniform", "zipf", "hot", "dirichlet", "counts")),
            "s": Key(NUM, 0.0, check=at_least(0)),
            "experts": Key(int, 1, check=at_least(1)),
            "share": Key(NUM, 0.5, check=in_range(0, 1)),
            "alpha": Key(NUM, 1.0, check=positive),
            "counts": Key(list, None, check=int_list),
        },
        "permute_experts": Key(bool, False),
        "topk_scaling": Key(NUM, 1.0, check=positive),
    },
    "dispatch": {
        "ep": Key(int, 1, check=at_least(1)),
        "padding": Key(str, "none", choices=("none", "router", "router_post", "module", "hybridep")),
        "align": Key(int, None, check=at_least(0)),  # default from the recipe
        "ranks": Key(list, None, check=rank_list),   # simulate only these EP ranks (default: all)
        # local: every EP rank simulated in one process; mpi / nccl: one process per EP rank under
        # mpirun -np <ep> or srun (moenum.ep), rows moved by MPI_Alltoallv or NCCL send/recv
        "transport": Key(str, "local", choices=("local", "mpi", "nccl")),
    },
    "recipe": {
        "name": Key(str, "bf16", choices=("fp32", "bf16", "mxfp8")),
        "scale_rounding": Key(str, "rceil", choices=("rceil", "floor")),
        "grad_format": Key(str, "e4m3", choices=("e4m3", "e5m2")),
        "bias_mode": Key(str, "separate", choices=("separate", "epilogue")),
        # MXFP8 inverse scale (numerics.md §5): te_kernel, TransformerEngine's kernel rule (1.0 for code
        # 0, +0.0 for 0xFE), or spec (2^(127-code) exactly); moenum.mx.quantize(inv_scale=...)
        "inv_scale": Key(str, "te_kernel", choices=("te_kernel", "spec")),
        # The reference's GEMM accumulator (numerics.md §6): ideal (the exact sum, rounded once to
        # fp32) or hopper_mma (gpu.grouped's CUTLASS sm90 kernels modelled bit for bit on the
        # tensor-core model of moenum.tc: bf16 and mxfp8, bias_mode separate); under hopper_mma the
        # GEMM stages of the backends that model covers are checked bitwise
        "accumulate": Key(str, "ideal", choices=("ideal", "hopper_mma")),
    },
    "weights": Key(str, "single", choices=("single", "discrete")),
    # registered backends (moenum._core.backend_names()) and external ones (moenum.external): torch.loop,
    # torch.grouped_mm, megatron.sequential, megatron.te_grouped, torch:PKG.MODULE:FACTORY, names of the
    # moenum.backends entry-point group; NAME@DEVICE picks an external backend's torch device
    "backends": Key(list, ["golden", "reference"], check=str_list),
    "compare": {
        "baseline": Key(str, "reference"),
    },
    "output": {
        "inputs": Key(bool, False),
        "intermediates": Key(bool, False),
        "diffs": Key(str, "summary", choices=("summary", "full")),
        # full: every backend's outputs and gradients under /results/<backend>/; summary: only the
        # groups' attributes (disposition, reason, seconds, ...), with the tables and checks as ever.
        # For production shapes, whose tensors are tens of GB per point; such a point takes no part in
        # the campaign's cross-point invariance checks, which compare the tensors.
        "results": Key(str, "full", choices=("full", "summary")),
    },
    # Where golden and reference compute their fp64 GEMMs (reference/device_gemm.h): auto = the GPU when
    # this build has CUDA and a device is usable, else the CPU; gpu without one is an environment
    # failure (exit 3). The reference is bitwise the same on either; golden agrees to about 1e-12.
    "execution": {
        "device": Key(str, "auto", choices=("auto", "cpu", "gpu")),
    },
    # Verification (moenum.verify, moenum.stages): teacher-forced stage checks of the backends under
    # test (they keep their stage tensors while they run; the tensors are written to the file only
    # with output.intermediates; without stage checks they are not_verified), and the per-point
    # invariance reruns (single vs discrete weights for the layout-sensitive backends).
    "verify": {
        "stages": Key(bool, True),
        "invariance": Key(bool, True),
        # GEMM stages: all elements, a sample of N elements per (stage, expert), or auto (all unless the
        # stage's recomputation exceeds 2^31 multiply-adds, then 65536); core/verify/stage_check.h
        "sample": Key((str, int), "auto", check=sample_spec),
    },
}

# inputs.<tensor> (core/include/moenum/scenario.h InputRegime, drawn in core/src/problem.cpp):
#   normal, uniform  dist (regime uniform: uniform) times the tensor's default std times scale
#   subnormal        dist * 2^-130 * scale: bf16/fp32 subnormals        near_overflow  dist * 2^124 * scale
#   special          as normal, with the fractions of `special` replaced by special values
INPUT_REGIMES = ("normal", "uniform", "subnormal", "near_overflow", "special")
INPUT_REGIME: dict[str, Any] = {
    "regime": Key(str, "normal", choices=INPUT_REGIMES),
    "dist": Key(str, "normal", choices=("normal", "uniform")),
    "scale": Key(NUM, 1.0, check=positive),
    "outliers": {
        "fraction": Key(NUM, 0.0, check=in_range(0, 1)),
        "scale": Key(NUM, 1.0, check=positive),
    },
    # regime special only; each fraction of the elements, independently; their sum at most 1
    "special": {
        "nan": Key(NUM, 0.001, check=in_range(0, 1)),
        "inf": Key(NUM, 0.001, check=in_range(0, 1)),        # +inf or -inf, even odds
        "subnormal": Key(NUM, 0.01, check=in_range(0, 1)),   # +-k * 2^-133, 1 <= k < 128
        "huge": Key(NUM, 0.001, check=in_range(0, 1)),       # +-[2^127, 1.99 * 2^127], finite
        "value": Key(NUM, 0.0, nonfinite=True),              # a stated value (.nan, -.inf, 3.0e38) ...
        "value_fraction": Key(NUM, 0.0, check=in_range(0, 1)),  # ... at this fraction
    },
}
SPECIAL_FRACTIONS = ("nan", "inf", "subnormal", "huge", "value_fraction")

# Default alignment per recipe when padding is asked for (numerics.md §3).
RECIPE_ALIGN = {"mxfp8": 32}
MX_BLOCK = 32
# recipe.accumulate: hopper_mma models bf16 tensor-core GEMMs (mxfp8 on Hopper: bf16 GEMMs on the exact
# dequantized operands, core/gpu/grouped_mlp.h)
HOPPER_MMA_RECIPES = ("bf16", "mxfp8")
