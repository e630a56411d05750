"""Classification of compared elements (numerics.md §7; architecture.md style notes).

Every element of a backend's tensor, compared with the value recomputed from that backend's own inputs
(teacher forcing), falls in exactly one class, tested in this order:

  bitwise_equal     the same bits (fp32 bit pattern; NaN equals NaN).
  scale_off_by_one  MXFP8 stages: the element's block scale (E8M0) is one code away from the reference's
                    scale; the scale and all 32 elements of its block take this class (scales are
                    compared first: one wrong scale explains up to 32 wrong codes).
  tie_flip          the two values are neighbours in the stage's dtype and the reference's value before
                    its last rounding lies exactly on their midpoint (the tie went the other way); in a
                    GEMM or reduction stage only inside the bound interval (a tie flip outside it is a
                    bound violation: no accumulator within the bound produces it).
  within_bound      GEMM and reduction stages: inside the per-element bound interval [lo, hi].
  bound_violation   anything else. For a bit-exact stage (elementwise, quantization) the bound is zero, so
                    every difference that is not a tie flip is a violation.

A bit-exact stage passes when every element is bitwise_equal; a GEMM or reduction stage passes when no
element is a bound_violation.
"""
from __future__ import annotations

import numpy as np

CLASSES = ("bitwise_equal", "scale_off_by_one", "tie_flip", "within_bound", "bound_violation")
EQUAL, SCALE, TIE, WITHIN, VIOLATION = range(5)
U32 = 2.0 ** -24  # unit roundoff of the fp32 accumulator


def gamma(n, u: float = U32):
    """gamma(n) = n*u / (1 - n*u) (elementwise for arrays)."""
    nu = np.asarray(n, dtype=np.float64) * u
    if np.any(nu >= 1.0):
        raise ValueError("gamma(n, u) needs n*u < 1")
    return nu / (1.0 - nu)


# ---- positions on a format's grid ----------------------------------------------------------------

def ordinal(values, dtype: str) -> np.ndarray:
    """Integer position of each value on the grid of `dtype` (monotone; +0 and -0 both 0).

    bf16 and fp32 values are taken as float32 (they are exact there); fp64 as float64."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == "fp64":
        i = v.view(np.int64).astype(np.int64)
        mag = i & np.int64(0x7FFFFFFFFFFFFFFF)
        return np.where(i < 0, -mag, mag)
    i = v.astype(np.float32).view(np.int32).astype(np.int64)
    mag = i & 0x7FFFFFFF
    o = np.where(i < 0, -mag, mag)
    return o // 65536 if dtype == "bf16" else o  # bf16 values have 16 zero low bits


def from_ordinal(o, dtype: str) -> np.ndarray:
    o = np.asarray(o, dtype=np.int64)
    if dtype == "fp64":
        mag = np.abs(o)
        bits = np.where(o < 0, mag | np.int64(-0x8000000000000000), mag)
        return bits.astype(np.int64).view(np.float64)
    if dtype == "bf16":
        o = o * 65536
    mag = np.abs(o)
    bits = np.where(o < 0, mag | 0x80000000, mag).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


def step_ulps(values, n: int, dtype: str) -> np.ndarray:
    """Move each value n steps along the grid of `dtype` (n < 0: down)."""
    return from_ordinal(ordinal(values, dtype) + int(n), dtype)


def ulp_distance(a, b, dtype: str) -> np.ndarray:
    return np.abs(ordinal(a, dtype) - ordinal(b, dtype))


def same_bits(a, b, dtype: str = "fp32") -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    if dtype == "fp64":
        eq = a.view(np.uint64) == b.view(np.uint64)
    else:
        eq = a.astype(np.float32).view(np.uint32) == b.astype(np.float32).view(np.uint32)
    return eq | both_nan


# ---- fp32 rounding helpers for bound intervals ---------------------------------------------------

def half_ulp_f32(c) -> np.ndarray:
    """Half the fp32 spacing at |c| (the spacing of |c|'s binade, subnormal spacing below 2^-126)."""
    _, e = np.frexp(np.abs(np.asarray(c, dtype=np.float64)))
    return np.ldexp(1.0, np.maximum(e - 1, -126) - 24)


def ceil_f32(x) -> np.ndarray:
    """Smallest fp32 value >= x (fp64 in, fp64 out)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    f = np.where(f.astype(np.float64) < x, np.nextafter(f, np.float32(np.inf)), f)
    return f.astype(np.float64)


def floor_f32(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    f = np.where(f.astype(np.float64) > x, np.nextafter(f, np.float32(-np.inf)), f)
    return f.astype(np.float64)


def accumulator_interval(c32, absprod, K):
    """Where an fp32 accumulator of K terms may land: [lo, hi] on the fp32 grid.

    The exact sum e lies within half an fp32 ulp of its correctly rounded value c32, and any fp32
    summation order (products rounded or exact, FMA or not, any tree) lands within gamma(K) * sum|a_k b_k|
    of e (Higham, Thm 3.1). The slack is widened by 1e-12 relative for the fp64 arithmetic here."""
    c32 = np.asarray(c32, dtype=np.float64)
    slack = (gamma(K) * np.asarray(absprod, dtype=np.float64) + half_ulp_f32(c32)) * (1.0 + 1e-12)
    return ceil_f32(c32 - slack), floor_f32(c32 + slack)


# ---- classification ----------------------------------------------------------------------------

def is_tie_flip(value, ref, pre, dtype: str) -> np.ndarray:
    """value and ref neighbours on the dtype grid, and pre exactly on their midpoint."""
    value = np.asarray(value, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    pre = np.asarray(pre, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        adjacent = ulp_distance(value, ref, dtype) == 1
        mid = (value + ref) * 0.5
        return adjacent & np.isfinite(mid) & (pre == mid)


def classify(value, ref, dtype: str, pre=None, lo=None, hi=None, scale_off=None) -> np.ndarray:
    """The class code (CLASSES index) of every element; all arrays broadcast to value's shape.

    dtype: the stage's logical dtype (bf16, fp32, fp64, or an FP8 format for codes: then value/ref
    are codes and only equality and scale_off apply). pre: the reference value before its last
    rounding (ties). lo, hi: the bound interval (GEMM and reduction stages). scale_off: bool mask of
    elements whose MX block scale is one code off."""
    value = np.asarray(value, dtype=np.float64)
    ref = np.broadcast_to(np.asarray(ref, dtype=np.float64), value.shape)
    cls = np.full(value.shape, VIOLATION, dtype=np.int8)
    fdtype = dtype if dtype in ("bf16", "fp32", "fp64") else None
    if fdtype:
        equal = same_bits(value, ref, fdtype)
    else:
        equal = value == ref
    cls[equal] = EQUAL
    rest = ~equal
    if scale_off is not None:  # the whole block, equal codes included: its values all changed
        so = np.broadcast_to(scale_off, value.shape)
        cls[so] = SCALE
        rest &= ~so
    if lo is not None and hi is not None:  # a bounded stage: outside the interval is a violation
        with np.errstate(invalid="ignore"):
            rest &= (value >= lo) & (value <= hi)
        cls[rest] = WITHIN
    if fdtype and pre is not None:
        tie = rest & is_tie_flip(value, ref, np.broadcast_to(pre, value.shape), fdtype)
        cls[tie] = TIE
    return cls


def counts(cls: np.ndarray) -> dict:
    """{class name: count}."""
    c = np.bincount(np.asarray(cls, dtype=np.int64).ravel(), minlength=len(CLASSES))
    return {name: int(c[i]) for i, name in enumerate(CLASSES)}


def classify_mx(codes, scales, ref_codes, ref_scales, axis: int = -1, block: int = 32):
    """MXFP8 codes and scales against the reference's, scales first.

    Returns (code_classes, scale_classes): a scale one code off is scale_off_by_one and so is every
    code of its block; other scale differences are violations (and their blocks' differing codes too);
    codes are otherwise equal or violations (a quantization stage is bit-exact)."""
    codes, scales = np.asarray(codes), np.asarray(scales)
    ref_codes, ref_scales = np.asarray(ref_codes), np.asarray(ref_scales)
    if codes.shape != ref_codes.shape or scales.shape != ref_scales.shape:
        raise ValueError(f"shape mismatch: codes {codes.shape} vs {ref_codes.shape}, "
                         f"scales {scales.shape} vs {ref_scales.shape}")
    ds = scales.astype(np.int64) - ref_scales.astype(np.int64)
    off = np.abs(ds) == 1
    scale_cls = np.where(ds == 0, EQUAL, np.where(off, SCALE, VIOLATION)).astype(np.int8)
    off_codes = np.repeat(off, block, axis=axis)
    code_cls = classify(codes.astype(np.float64), ref_codes.astype(np.float64), "codes", scale_off=off_codes)
    return code_cls, scale_cls
