"""Error metrics between a backend's tensor and another's (interfaces.md, error table columns).

ULP distances are measured in the coarser of the two logical dtypes, at the other tensor's value,
so "1 ulp of bf16" means the same thing whichever backend is the baseline.
"""
from __future__ import annotations

import numpy as np

# significand bits (with the implicit one) and minimum normal exponent of each logical dtype
FORMATS = {"fp64": (53, -1022), "fp32": (24, -126), "bf16": (8, -126)}
COARSENESS = ["fp64", "fp32", "bf16"]

COLUMNS = ["backend", "other", "tensor", "expert", "n", "max_abs", "max_rel", "mean_abs", "rel_fro",
           "calc_diff", "max_ulp", "ulp_le0", "ulp_le1", "ulp_le2", "ulp_gt2", "bitwise_equal",
           "bound_violations", "disposition"]


def coarser(a: str, b: str) -> str:
    ia = COARSENESS.index(a) if a in COARSENESS else 1
    ib = COARSENESS.index(b) if b in COARSENESS else 1
    return COARSENESS[max(ia, ib)]


def ulp_spacing(ref: np.ndarray, dtype: str) -> np.ndarray:
    """Distance between adjacent values of `dtype` at |ref| (subnormal spacing below the normals)."""
    p, emin = FORMATS[dtype]
    _, e = np.frexp(np.abs(ref))          # |ref| = m * 2^e, m in [0.5, 1)
    exponent = np.maximum(e - 1, emin)    # floor(log2|ref|), clamped to the normal range
    return np.ldexp(1.0, exponent - (p - 1))


def calc_diff(a: np.ndarray, b: np.ndarray) -> float:
    """DeepGEMM's calc_diff: 1 - cosine-like similarity, 0 for identical tensors."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    denom = float(np.dot(a, a) + np.dot(b, b))
    return 0.0 if denom == 0.0 else 1.0 - 2.0 * float(np.dot(a, b)) / denom


def ulp_buckets(ulps: np.ndarray, skip_nan: bool = False) -> dict:
    """The ULP columns of a table: the largest distance (NaN if any distance is NaN, unless
    skip_nan) and the counts at 0, (0, 1], (1, 2] and beyond 2 ulp (NaN distances count there)."""
    if skip_nan:
        with np.errstate(invalid="ignore"):
            max_ulp = float(np.nanmax(ulps)) if ulps.size else 0.0
    else:
        max_ulp = float(ulps.max()) if ulps.size else 0.0
    return {"max_ulp": max_ulp,
            "ulp_le0": int(np.count_nonzero(ulps == 0)),
            "ulp_le1": int(np.count_nonzero((ulps > 0) & (ulps <= 1))),
            "ulp_le2": int(np.count_nonzero((ulps > 1) & (ulps <= 2))),
            "ulp_gt2": int(np.count_nonzero(~(ulps <= 2)))}


def compare(a: np.ndarray, b: np.ndarray, dtype: str) -> dict:
    """All summary metrics of `a` (the backend) against `b` (the other), element by element."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    n = a.size
    row = {"n": n}
    if n == 0:
        row.update(max_abs=0.0, max_rel=0.0, mean_abs=0.0, rel_fro=0.0, calc_diff=0.0, max_ulp=0.0,
                   ulp_le0=0, ulp_le1=0, ulp_le2=0, ulp_gt2=0, bitwise_equal=0)
        return row
    diff = np.abs(a - b)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, diff)
    nonzero = b != 0
    rel = diff[nonzero] / np.abs(b[nonzero])
    norm_b = float(np.linalg.norm(b))
    ulps = diff / ulp_spacing(b, dtype)
    row.update(
        max_abs=float(diff.max()),
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()),
        rel_fro=float(np.linalg.norm(a - b) / norm_b) if norm_b > 0 else float(np.linalg.norm(a - b)),
        calc_diff=calc_diff(a, b),
        **ulp_buckets(ulps),
        bitwise_equal=int(np.count_nonzero((a == b) & (np.signbit(a) == np.signbit(b)) | both_nan)),
    )
    return row
