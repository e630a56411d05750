"""MXFP8 formats against independent oracles (numerics.md section 5).

FP8: ml_dtypes (float8_e4m3fn, float8_e5m2) rounds to nearest even but sends overflow to NaN (e4m3fn)
or inf (e5m2); the satfinite rule is applied here on top: a non-NaN input whose ml_dtypes result is
not finite becomes +-max normal, and every NaN becomes 0x7F. 0x7F is the canonical NaN for BOTH
formats: it is what PTX cvt.rn.satfinite.{e4m3,e5m2}x2.f32 writes, and for E5M2 it is S.11111.11, a NaN.
E8M0 rceil: exact 2^ceil(log2(amax/fmt_max)) from float64 comparisons (exact: every operand is a
power of two times a short integer) and from fractions, except at the documented subnormal edge.
"""
from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from moenum import _core, mx

FMTS = ["e4m3", "e5m2"]
ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
MAX_CODE = {"e4m3": 0x7E, "e5m2": 0x7B}
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
R_BITS = {"e4m3": 0x3B124925, "e5m2": 0x37924925}
EMAX = {"e4m3": 8, "e5m2": 15}


def f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def all_bf16_as_f32() -> np.ndarray:
    return f32(np.arange(65536, dtype=np.uint32) << 16)


def oracle_encode(x: np.ndarray, fmt: str) -> np.ndarray:
    """ml_dtypes cast, then satfinite and the canonical NaN applied by hand."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = x.astype(ML[fmt])
    codes = c.view(np.uint8).copy()
    sign = ((x.view(np.uint32) >> 31).astype(np.uint8) << 7).astype(np.uint8)
    overflowed = ~np.isfinite(c.astype(np.float32)) & ~np.isnan(x)
    codes[overflowed] = sign[overflowed] | MAX_CODE[fmt]
    codes[np.isnan(x)] = 0x7F
    return codes


def fp8_values(fmt: str) -> np.ndarray:
    """All finite non-negative FP8 values, ascending (codes 0 .. max code)."""
    return np.arange(MAX_CODE[fmt] + 1, dtype=np.uint8).view(ML[fmt]).astype(np.float32)


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_encode_every_bf16_matches_ml_dtypes(fmt):
    x = all_bf16_as_f32()
    got = _core.fp8_encode(x, fmt)
    want = oracle_encode(x, fmt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} mismatches, first bf16 0x{int(x[bad[0]].view(np.uint32)) >> 16:04x}: " \
                          f"got 0x{got[bad[0]]:02x} want 0x{want[bad[0]]:02x}"


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_encode_midpoints_and_neighbours_match_ml_dtypes(fmt):
    v = fp8_values(fmt).astype(np.float64)
    mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)  # exact: at most 5 significant bits
    beyond = np.float32(FMT_MAX[fmt] + (v[-1] - v[-2]) / 2)  # the would-be tie above max normal
    pts = np.concatenate([mid, v.astype(np.float32), [beyond]])
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(0)), np.nextafter(pts, np.float32(np.inf))])
    pts = np.concatenate([pts, -pts]).astype(np.float32)
    np.testing.assert_array_equal(_core.fp8_encode(pts, fmt), oracle_encode(pts, fmt))


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_encode_random_fp32_patterns_match_ml_dtypes(fmt):
    bits = np.random.default_rng(2024).integers(0, 2**32, size=1 << 21, dtype=np.uint64).astype(np.uint32)
    x = f32(bits)
    np.testing.assert_array_equal(_core.fp8_encode(x, fmt), oracle_encode(x, fmt))


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_encode_specials(fmt):
    mx_code = MAX_CODE[fmt]
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30, 0.0, -0.0, 1e-45, -1e-45], np.float32)
    want = [mx_code, 0x80 | mx_code, 0x7F, 0x7F, mx_code, 0x80 | mx_code, 0x00, 0x80, 0x00, 0x80]
    np.testing.assert_array_equal(_core.fp8_encode(x, fmt), np.array(want, np.uint8))


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_decode_every_code_matches_ml_dtypes(fmt):
    codes = np.arange(256, dtype=np.uint8)
    got = _core.fp8_decode(codes, fmt)
    want = codes.view(ML[fmt]).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # signed zeros too


def test_e8m0_decode_every_code():
    codes = np.arange(256, dtype=np.uint8)
    got = _core.e8m0_to_f32(codes)
    want = np.ldexp(1.0, codes[:255].astype(np.int64) - 127).astype(np.float32)  # 2^-127 is exact in fp32
    np.testing.assert_array_equal(got[:255], want)
    assert np.isnan(got[255])
    assert got[0].view(np.uint32) == 0x00400000
    if hasattr(ml_dtypes, "float8_e8m0fnu"):  # an independent decoder where ml_dtypes has one
        ml = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
        np.testing.assert_array_equal(got[:255], ml[:255])
        assert np.isnan(ml[255])


def test_e8m0_inverse_scales():
    codes = np.arange(256, dtype=np.uint8)
    inv = _core.e8m0_inv_scale(codes, "spec")
    np.testing.assert_array_equal(inv[:255] * _core.e8m0_to_f32(codes)[:255], np.ones(255, np.float32))
    assert inv[0] == np.float32(2.0**127)
    assert inv[254].view(np.uint32) == 0x00400000  # 2^-127, an fp32 subnormal
    assert np.isnan(inv[255])
    te = _core.e8m0_inv_scale(codes, "te_kernel")  # TransformerEngine's ptx.cuh exp2f_rcp
    assert te[0] == 1.0 and te[254].view(np.uint32) == 0 and te[255] == -np.inf
    np.testing.assert_array_equal(te[1:254], inv[1:254])
    np.testing.assert_array_equal(_core.e8m0_inv_scale(codes).view(np.uint32), te.view(np.uint32))  # the default
    with pytest.raises(ValueError, match="inv_scale"):
        _core.e8m0_inv_scale(codes, "exact")


def exact_rceil_code(amax: np.ndarray, fmt: str) -> np.ndarray:
    """127 + ceil(log2(amax/fmt_max)), clamped to [0, 254]: the least n with amax <= fmt_max * 2^n.
    float64 holds amax and fmt_max * 2^n exactly, so the comparisons are exact."""
    a = amax.astype(np.float64)
    n = np.ceil(np.log2(a / FMT_MAX[fmt])).astype(np.int64)  # a guess, off by one at most
    for _ in range(2):
        n = np.where(a > np.ldexp(FMT_MAX[fmt], n), n + 1, n)
        n = np.where(a <= np.ldexp(FMT_MAX[fmt], n - 1), n - 1, n)
    return np.clip(n + 127, 0, 254)


def fraction_rceil_code(amax: float, fmt: str) -> int:
    r = Fraction(amax) / Fraction(FMT_MAX[fmt])
    n = r.numerator.bit_length() - r.denominator.bit_length() - 1  # 2^n <= r up to one step
    while Fraction(2) ** n < r:
        n += 1
    while Fraction(2) ** (n - 1) >= r:
        n -= 1
    return min(max(n + 127, 0), 254)


def amax_sweep(fmt: str) -> np.ndarray:
    """Every 509th positive finite fp32 pattern, plus +-64 ulps around fmt_max*2^k for every k."""
    dense = np.arange(1, 0x7F800000, 509, dtype=np.uint32)
    k = np.arange(-149, 128)
    centres = FMT_MAX[fmt] * np.ldexp(1.0, k)
    centres = centres[(centres >= 2.0**-149) & (centres <= np.finfo(np.float32).max)]
    centres = centres.astype(np.float32).view(np.uint32).astype(np.int64)
    near = (centres[:, None] + np.arange(-64, 65)[None, :]).ravel()
    near = near[(near > 0) & (near < 0x7F800000)].astype(np.uint32)
    return f32(np.concatenate([dense, near]))


@pytest.mark.parametrize("fmt", FMTS)
def test_rceil_equals_exact_ceil_on_dense_sweep_except_subnormal_edge(fmt):
    amax = amax_sweep(fmt)
    got = _core.e8m0_from_amax(amax, fmt, "rceil").astype(np.int64)
    want = exact_rceil_code(amax, fmt)
    s = amax * f32(R_BITS[fmt])  # fp32 product, as the rule computes it
    differ = got != want
    # The only differences: amax*R is an fp32 subnormal rounded onto 2^-127 (code 0, exact 1).
    assert np.all(s[differ] < np.float32(2.0**-126))
    assert np.all(got[differ] == 0) and np.all(want[differ] == 1)
    assert differ.sum() >= 1  # the sweep does reach the edge
    # fractions agree with the float64 oracle on a sample spread over the whole range
    idx = np.random.default_rng(5).choice(amax.size, 3000, replace=False)
    for i in idx:
        assert fraction_rceil_code(float(amax[i]), fmt) == want[i]


@pytest.mark.parametrize("fmt", FMTS)
def test_rceil_subnormal_edge(fmt):
    lo = np.float32(FMT_MAX[fmt] * 2.0**-127)  # amax/fmt_max == 2^-127 exactly: code 0, exact
    edge = np.nextafter(lo, np.float32(np.inf))  # exact ceil says code 1 ...
    after = np.nextafter(edge, np.float32(np.inf))
    codes = _core.e8m0_from_amax(np.array([lo, edge, after], np.float32), fmt, "rceil")
    assert list(codes) == [0, 0, 1]  # ... but amax*R rounds onto 2^-127: code 0
    assert fraction_rceil_code(float(edge), fmt) == 1
    # ... and under the spec rule that block saturates (amax * 2^127 > max normal); under te_kernel,
    # the default, code 0 means inverse 1.0: the block quantizes to zero
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = edge
    q, s = mx.quantize(x, fmt=fmt, inv_scale="spec")
    assert s[0, 0] == 0 and q[0, 3] == MAX_CODE[fmt]
    q, s = mx.quantize(x, fmt=fmt)
    assert s[0, 0] == 0 and not np.any(q)


def test_rceil_bit_recipe_examples():
    s = f32([0, 1, 0x00400000, 0x00400001, 0x007FFFFF, 0x00800000, 0x00800001, 0x3F800000, 0x3FC00000,
             0x7F000000, 0x7F000001, 0x7F7FFFFF, 0x7F800000, 0x7FC00000])
    want = [0, 0, 0, 1, 1, 1, 2, 127, 128, 254, 254, 254, 254, 255]
    np.testing.assert_array_equal(_core.e8m0_from_f32_rceil(s), np.array(want, np.uint8))


@pytest.mark.parametrize("fmt", FMTS)
def test_floor_is_ocp_exponent_rule(fmt):
    amax = amax_sweep(fmt)[::7]
    got = _core.e8m0_from_amax(amax, fmt, "floor").astype(np.int64)
    expfield = (amax.view(np.uint32) >> 23).astype(np.int64)  # floor(log2) for normals
    np.testing.assert_array_equal(got, np.clip(expfield - EMAX[fmt], 0, 254))
    normal = expfield > 0
    fl = np.floor(np.log2(amax[normal].astype(np.float64))).astype(np.int64)
    np.testing.assert_array_equal(got[normal], np.clip(fl - EMAX[fmt] + 127, 0, 254))


def test_floor_examples_and_saturation():
    codes = _core.e8m0_from_amax(np.array([1.0, 448, 511, 512, 0, np.inf, np.nan, 3.4e38], np.float32), "e4m3",
                                 "floor")
    assert list(codes) == [119, 127, 127, 128, 0, 254, 255, 246]
    codes = _core.e8m0_from_amax(np.array([57344, 65535, 65536, 1.0], np.float32), "e5m2", "floor")
    assert list(codes) == [127, 127, 128, 112]
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = [500.0, -1.0]
    q, s = mx.quantize(x, scale_rounding="floor")  # floor keeps 500 at scale 1: saturates to 448
    assert s[0, 0] == 127 and q[0, 0] == 0x7E and q[0, 1] == 0xB8
    q, s = mx.quantize(x, scale_rounding="rceil")  # rceil picks scale 2: 250 -> 256
    assert s[0, 0] == 128 and q[0, 0] == _core.fp8_encode(np.array([250.0], np.float32), "e4m3")[0]


def test_mx_is_public():
    import moenum
    assert "mx" in moenum.__all__ and moenum.mx is mx
