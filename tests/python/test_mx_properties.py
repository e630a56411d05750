"""Properties of moenum.mx.quantize / dequantize (hypothesis), and the layout plumbing.

The end-to-end oracle below is written independently of the C++: block amax with NaNs masked by
numpy, the scale code from the exact ceil (float64 comparisons) with the documented subnormal edge,
2^(127-code) from np.ldexp (with TransformerEngine's exp2f_rcp edges for inv_scale="te_kernel": 1.0 for
code 0, +0.0 for code 254), and the FP8 cast by ml_dtypes with satfinite applied by hand.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from moenum import _core, mx

FMTS = ["e4m3", "e5m2"]
ROUNDINGS = ["rceil", "floor"]
INV_SCALES = ["te_kernel", "spec"]
ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
MAX_CODE = {"e4m3": 0x7E, "e5m2": 0x7B}
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
R = {"e4m3": np.uint32(0x3B124925).view(np.float32), "e5m2": np.uint32(0x37924925).view(np.float32)}
EMAX = {"e4m3": 8, "e5m2": 15}
FLT_MAX = float(np.finfo(np.float32).max)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- strategies --------------------------------------------------------------------------------------------

@st.composite
def typical(draw, max_rows=4, max_blocks=3):
    """Blocks at any magnitude with a spread inside each block: mantissa * 2^(local + shift)."""
    rows = draw(st.integers(1, max_rows))
    n = 32 * draw(st.integers(1, max_blocks))
    mant = draw(arrays(np.float32, (rows, n), elements=st.floats(-2, 2, width=32)))
    local = draw(arrays(np.int32, (rows, n), elements=st.integers(-12, 12)))
    shift = draw(st.integers(-110, 100))
    return np.ldexp(mant, local + shift).astype(np.float32)


wild = st.integers(1, 3).flatmap(lambda rows: arrays(
    np.float32, (rows, 32 * 2), elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
finite_blocks = st.one_of(typical(), wild)

with_specials = st.integers(1, 3).flatmap(lambda rows: arrays(
    np.float32, (rows, 64), elements=st.one_of(
        st.floats(width=32), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38,
                                              FLT_MAX, 448.0, 57344.0]))))


# ---- an independent reference ------------------------------------------------------------------------------

def oracle_encode(x, fmt):
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = x.astype(ML[fmt])
    codes = c.view(np.uint8).copy()
    sign = ((x.view(np.uint32) >> 31).astype(np.uint8) << 7).astype(np.uint8)
    over = ~np.isfinite(c.astype(np.float32)) & ~np.isnan(x)
    codes[over] = sign[over] | MAX_CODE[fmt]
    codes[np.isnan(x)] = 0x7F
    return codes


def ref_scale_codes(amax, fmt, rounding):
    a = amax.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if rounding == "rceil":
            n = np.ceil(np.log2(a / FMT_MAX[fmt]))
            n = np.where(np.isfinite(n), n, 0).astype(np.int64)
            for _ in range(2):  # make it the least n with a <= fmt_max * 2^n, exactly
                n = np.where(a > np.ldexp(FMT_MAX[fmt], n), n + 1, n)
                n = np.where(a <= np.ldexp(FMT_MAX[fmt], n - 1), n - 1, n)
            code = np.clip(n + 127, 0, 254)
            # the subnormal edge: amax*R rounded in fp32 to <= 2^-127 means code 0
            code = np.where(amax * R[fmt] <= np.float32(2.0**-127), 0, code)
        else:
            fl = np.floor(np.log2(a))
            fl = np.where(np.isfinite(fl), fl, 0).astype(np.int64)
            code = np.clip(fl - EMAX[fmt] + 127, 0, 254)
    code = np.where(a == 0, 0, code)
    code = np.where(np.isinf(a), 254, code)
    return code.astype(np.uint8)


def ref_inv_scale(code, inv_scale):
    inv = np.ldexp(np.float32(1), 127 - code.astype(np.int32)).astype(np.float32)  # 2^-127 is an fp32 subnormal
    if inv_scale == "te_kernel":  # TransformerEngine common/util/ptx.cuh exp2f_rcp
        inv = np.where(code == 0, np.float32(1), np.where(code == 254, np.float32(0), inv)).astype(np.float32)
    return inv


def ref_quantize(x, fmt, rounding, inv_scale="te_kernel"):
    b = x.reshape(-1, 32)
    amax = np.where(np.isnan(b), np.float32(0), np.abs(b)).max(axis=1)
    code = ref_scale_codes(amax, fmt, rounding)
    inv = ref_inv_scale(code, inv_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = b * inv[:, None]
    return oracle_encode(scaled, fmt).reshape(x.shape), code.reshape(x.shape[0], -1)


def decoded(q, fmt):
    return q.view(ML[fmt]).astype(np.float64)


def block_view(a):
    return a.reshape(a.shape[0], -1, 32)


# ---- properties ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("inv_scale", INV_SCALES)
@SETTINGS
@given(x=st.one_of(finite_blocks, with_specials))
def test_quantize_matches_independent_reference(fmt, rounding, inv_scale, x):
    q, s = mx.quantize(x, fmt=fmt, scale_rounding=rounding, inv_scale=inv_scale)
    rq, rs = ref_quantize(x, fmt, rounding, inv_scale)
    np.testing.assert_array_equal(s, rs)
    np.testing.assert_array_equal(q, rq)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@SETTINGS
@given(x=finite_blocks)
def test_dequantized_values_stay_in_block_range(fmt, rounding, x):
    q, s = mx.quantize(x, fmt=fmt, scale_rounding=rounding)
    y = mx.dequantize(q, s, fmt=fmt)
    exact = decoded(q, fmt) * np.ldexp(1.0, s.astype(np.int64) - 127).repeat(32, axis=1)
    bound = FMT_MAX[fmt] * np.ldexp(1.0, s.astype(np.int64) - 127).repeat(32, axis=1)
    assert np.all(np.abs(exact) <= bound)
    # float32 dequantization is exact, except that a value past FLT_MAX is inf (amax near FLT_MAX)
    fits = np.abs(exact) <= FLT_MAX
    np.testing.assert_array_equal(y[fits].astype(np.float64), exact[fits])
    assert np.all(np.isinf(y[~fits]))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@SETTINGS
@given(x=finite_blocks)
def test_requantizing_dequantized_values_is_idempotent(fmt, rounding, x):
    # A property of the spec rule: te_kernel zeros every block whose scale drops to code 0.
    q, s = mx.quantize(x, fmt=fmt, scale_rounding=rounding, inv_scale="spec")
    y = mx.dequantize(q, s, fmt=fmt)
    assume(np.all(np.isfinite(y)))
    q2, s2 = mx.quantize(y, fmt=fmt, scale_rounding=rounding, inv_scale="spec")
    # values always come back
    np.testing.assert_array_equal(mx.dequantize(q2, s2, fmt=fmt).view(np.uint32), y.view(np.uint32))
    # and the very bytes where (q, s) is canonical: the block max above fmt_max/2 (rceil) or at least
    # 2^emax (floor). Otherwise the scale may drop (e.g. 230 -> 224 = 448/2 takes the next scale down).
    bmax = np.abs(block_view(decoded(q, fmt))).max(axis=2)
    canon = bmax > FMT_MAX[fmt] / 2 if rounding == "rceil" else bmax >= 2.0 ** EMAX[fmt]
    np.testing.assert_array_equal(s2[canon], s[canon])
    np.testing.assert_array_equal(block_view(q2)[canon], block_view(q)[canon])
    assert np.all(s2[~canon] <= s[~canon])


@st.composite
def canonical_pairs(draw, fmt, lowest_scale=0):
    """Valid canonical (codes, scales): finite codes, each block holding one code above fmt_max/2
    (codes 0x78 .. max code for both formats, which is also >= 2^emax), scales from lowest_scale that
    keep the values inside fp32."""
    rows, nb = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    finite = [c for c in range(256) if np.isfinite(np.uint8(c).view(ML[fmt]).astype(np.float32))]
    q = draw(arrays(np.uint8, (rows, nb, 32), elements=st.sampled_from(finite)))
    big = draw(arrays(np.uint8, (rows, nb), elements=st.integers(0x78, MAX_CODE[fmt])))
    neg = draw(arrays(np.bool_, (rows, nb)))
    where = draw(arrays(np.int64, (rows, nb), elements=st.integers(0, 31)))
    for i in range(rows):
        for j in range(nb):
            q[i, j, where[i, j]] = big[i, j] | (0x80 if neg[i, j] else 0)
    top = 127 + 127 - EMAX[fmt] - 1  # 448 * 2^(top-127) stays below 2^128
    s = draw(arrays(np.uint8, (rows, nb), elements=st.integers(lowest_scale, top)))
    return q.reshape(rows, nb * 32), s


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("inv_scale", INV_SCALES)
@SETTINGS
@given(data=st.data())
def test_quantize_inverts_dequantize_on_canonical_pairs(fmt, rounding, inv_scale, data):
    # te_kernel: a code-0 block quantizes to zeros (inverse 1.0), so only scales from 1 come back
    q, s = data.draw(canonical_pairs(fmt, lowest_scale=1 if inv_scale == "te_kernel" else 0))
    q2, s2 = mx.quantize(mx.dequantize(q, s, fmt=fmt), fmt=fmt, scale_rounding=rounding, inv_scale=inv_scale)
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_array_equal(q2, q)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@SETTINGS
@given(x=typical(), data=st.data())
def test_scaling_by_power_of_two_shifts_the_scale_code(fmt, rounding, x, data):
    # Exact scaling only: flush fp32 subnormals to zero first, then pick k so that every nonzero
    # element stays a finite fp32 normal after multiplying by 2^k.
    tiny = np.float32(2.0**-126)
    x = np.where(np.abs(x) < tiny, np.float32(0), x).astype(np.float32)
    nz = np.abs(x[x != 0]).astype(np.float64)
    assume(nz.size > 0)
    lo = int(np.ceil(-126 - np.log2(nz.min())))
    hi = int(np.floor(np.log2(FLT_MAX / nz.max())))
    assume(lo <= hi)
    k = data.draw(st.integers(max(lo, -60), min(hi, 60)) if max(lo, -60) <= min(hi, 60) else st.just(0))
    y = np.ldexp(x, k).astype(np.float32)
    assert np.array_equal(np.ldexp(y, -k), x)
    q, s = mx.quantize(x, fmt=fmt, scale_rounding=rounding)
    qk, sk = mx.quantize(y, fmt=fmt, scale_rounding=rounding)
    live = np.abs(block_view(x)).max(axis=2) > 0  # zero blocks keep code 0
    s_i, sk_i = s.astype(np.int64), sk.astype(np.int64)
    in_range = live & (s_i >= 2) & (s_i <= 253) & (s_i + k >= 2) & (s_i + k <= 253)
    np.testing.assert_array_equal(sk_i[in_range], s_i[in_range] + k)
    np.testing.assert_array_equal(block_view(qk)[in_range], block_view(q)[in_range])
    np.testing.assert_array_equal(sk_i[~live], 0)


# ---- special blocks through the public API ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_zero_block(fmt):
    x = np.zeros((2, 32), np.float32)
    x[1, 4] = -0.0
    q, s = mx.quantize(x, fmt=fmt)
    assert np.all(s == 0)
    assert q[1, 4] == 0x80 and np.count_nonzero(q) == 1  # -0 keeps its sign


@pytest.mark.parametrize("fmt", FMTS)
def test_nan_in_block(fmt):
    x = np.linspace(-3, 5, 32, dtype=np.float32)[None, :].copy()
    clean = x.copy()
    x[0, [1, 9]] = [np.nan, -np.nan]
    clean[0, [1, 9]] = 0
    q, s = mx.quantize(x, fmt=fmt)
    qc, sc = mx.quantize(clean, fmt=fmt)
    assert s[0, 0] == sc[0, 0]  # NaN elements don't count toward amax
    assert q[0, 1] == 0x7F and q[0, 9] == 0x7F
    keep = np.ones(32, bool)
    keep[[1, 9]] = False
    np.testing.assert_array_equal(q[0, keep], qc[0, keep])
    y = mx.dequantize(q, s, fmt=fmt)
    assert np.isnan(y[0, 1]) and np.isnan(y[0, 9])


@pytest.mark.parametrize("fmt", FMTS)
def test_inf_block(fmt):
    x = np.linspace(-3, 5, 32, dtype=np.float32)[None, :].copy()
    x[0, 0], x[0, 31] = np.inf, -np.inf
    q, s = mx.quantize(x, fmt=fmt, inv_scale="spec")
    assert s[0, 0] == 0xFE
    assert q[0, 0] == MAX_CODE[fmt] and q[0, 31] == 0x80 | MAX_CODE[fmt]
    assert np.all((q[0, 1:31] & 0x7F) == 0)  # ordinary finite elements flush to +-0
    # TransformerEngine's kernel rule, the default (inverse scale +0): inf -> NaN, finite -> +-0
    for qt, st_ in (mx.quantize(x, fmt=fmt), mx.quantize(x, fmt=fmt, inv_scale="te_kernel"),
                    _core.mx_quantize(x, fmt, "rceil")):
        assert st_[0, 0] == 0xFE and qt[0, 0] == 0x7F and qt[0, 31] == 0x7F
        np.testing.assert_array_equal(qt[0, 1:31], np.where(x[0, 1:31] < 0, 0x80, 0x00))
    y = mx.dequantize(qt, st_, fmt=fmt)
    assert np.isnan(y[0, 0]) and np.isnan(y[0, 31]) and np.all(y[0, 1:31] == 0)


@pytest.mark.parametrize("fmt", FMTS)
def test_fp32_subnormal_inputs(fmt):
    x = (np.arange(1, 33, dtype=np.uint32) * np.uint32(0x3FFFF)).view(np.float32)[None, :].copy()
    x[0, ::3] *= -1
    q, s = mx.quantize(x, fmt=fmt, inv_scale="spec")
    assert s[0, 0] == 0  # amax*R far below 2^-127
    scaled = (x.astype(np.float64) * 2.0**127).astype(np.float32)  # exact
    np.testing.assert_array_equal(q, oracle_encode(scaled, fmt))
    assert np.count_nonzero(q & 0x7F) > 16
    # te_kernel (the default): code 0 means inverse 1.0, so the whole block quantizes to +-0
    qt, st_ = mx.quantize(x, fmt=fmt)
    assert st_[0, 0] == 0
    np.testing.assert_array_equal(qt, np.where(np.signbit(x), 0x80, 0x00))


@pytest.mark.parametrize("fmt", FMTS)
def test_tiny_amax_block_edge(fmt):
    """The largest code-0 amax (just above fmt_max * 2^-127) zeros its block under te_kernel; one fp32
    step higher is code 1, where both rules agree."""
    a = np.float32(FMT_MAX[fmt] * 2.0**-127)
    while mx.quantize(np.full((1, 32), np.nextafter(a, np.float32(1)), np.float32), fmt=fmt)[1][0, 0] == 0:
        a = np.nextafter(a, np.float32(1))
    x = np.linspace(-1, 1, 32, dtype=np.float32)[None, :] * a
    q, s = mx.quantize(x, fmt=fmt)
    assert s[0, 0] == 0 and np.all((q & 0x7F) == 0)
    qs, ss = mx.quantize(x, fmt=fmt, inv_scale="spec")
    assert ss[0, 0] == 0 and np.count_nonzero(qs & 0x7F) > 16
    x[0, 0] = -np.nextafter(a, np.float32(1))
    q, s = mx.quantize(x, fmt=fmt)
    qs, ss = mx.quantize(x, fmt=fmt, inv_scale="spec")
    assert s[0, 0] == ss[0, 0] == 1
    np.testing.assert_array_equal(q, qs)


@pytest.mark.parametrize("fmt", FMTS)
def test_max_normal_saturation(fmt):
    m = FMT_MAX[fmt]
    x = np.zeros((3, 32), np.float32)
    x[0, 0] = m  # amax exactly fmt_max: scale 1, max code
    x[1, 0] = np.float32(m) * np.float32(1 + 2.0**-20)  # just above: next scale, code of ~fmt_max/2
    x[2, :] = FLT_MAX  # largest finite: no NaN, no inf in the codes
    q, s = mx.quantize(x, fmt=fmt)
    assert s[0, 0] == 127 and q[0, 0] == MAX_CODE[fmt]
    assert s[1, 0] == 128
    assert np.all(q[2] != 0x7F) and np.all((q[2] & 0x7F) <= MAX_CODE[fmt])
    # ... but dequantizing that block overflows fp32: 2^128 is not a float32
    assert np.all(np.isinf(mx.dequantize(q, s, fmt=fmt)[2]))


# ---- layouts ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_rowwise_vs_columnwise_via_transpose(fmt, rounding):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((96, 160)) * np.exp2(rng.integers(-20, 20, (96, 160)))).astype(np.float32)
    x[rng.random(x.shape) < 0.01] = np.nan
    x[rng.random(x.shape) < 0.005] = -np.inf
    qc, sc = mx.quantize(x, fmt=fmt, axis=0, scale_rounding=rounding)
    qr, sr = mx.quantize(np.ascontiguousarray(x.T), fmt=fmt, axis=-1, scale_rounding=rounding)
    assert qc.shape == x.shape and sc.shape == (3, 160)
    np.testing.assert_array_equal(qc, qr.T)
    np.testing.assert_array_equal(sc, sr.T)
    # the C++ columnwise loop gives the same bytes as the transposed rowwise one
    qk, sk = _core.mx_quantize(x, fmt, rounding, columnwise=True)
    np.testing.assert_array_equal(qk, qc)
    np.testing.assert_array_equal(sk, sc)
    yk = _core.mx_dequantize(qk, sk, fmt, columnwise=True)
    y = mx.dequantize(qc, sc, fmt=fmt, axis=0)
    np.testing.assert_array_equal(yk.view(np.uint32), y.view(np.uint32))
    np.testing.assert_array_equal(y, mx.dequantize(qr, sr, fmt=fmt).T)


def test_nd_axis_handling():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 64, 5, 2)).astype(np.float32)
    q, s = mx.quantize(x, axis=1)
    assert q.shape == x.shape and s.shape == (3, 2, 5, 2) and q.flags.c_contiguous
    moved = np.moveaxis(x, 1, -1)
    qm, sm = mx.quantize(moved)
    np.testing.assert_array_equal(np.moveaxis(q, 1, -1), qm)
    np.testing.assert_array_equal(np.moveaxis(s, 1, -1), sm)
    np.testing.assert_array_equal(mx.dequantize(q, s, axis=1), np.moveaxis(mx.dequantize(qm, sm), -1, 1))
    np.testing.assert_array_equal(mx.quantize(x, axis=-3)[0], q)
    # non-contiguous input views are fine
    xv = x[:, :, ::2, :]
    np.testing.assert_array_equal(mx.quantize(xv, axis=1)[0], mx.quantize(xv.copy(), axis=1)[0])
    # empty arrays
    q0, s0 = mx.quantize(np.zeros((0, 32), np.float32))
    assert q0.shape == (0, 32) and s0.shape == (0, 1)
    q0, s0 = mx.quantize(np.zeros((4, 0), np.float32))
    assert q0.shape == (4, 0) and s0.shape == (4, 0)


def test_input_errors():
    with pytest.raises(ValueError, match="multiple of 32"):
        mx.quantize(np.zeros((4, 48), np.float32))
    with pytest.raises(ValueError, match="multiple of 32"):
        mx.quantize(np.zeros((40, 32), np.float32), axis=0)
    with pytest.raises(ValueError, match="out of range"):
        mx.quantize(np.zeros((4, 32), np.float32), axis=2)
    with pytest.raises(ValueError, match="format"):
        mx.quantize(np.zeros((4, 32), np.float32), fmt="e3m4")
    with pytest.raises(ValueError, match="scale_rounding"):
        mx.quantize(np.zeros((4, 32), np.float32), scale_rounding="nearest")
    with pytest.raises(ValueError, match="inv_scale"):
        mx.quantize(np.zeros((4, 32), np.float32), inv_scale="exact")
    with pytest.raises(TypeError, match="float32"):
        mx.quantize(np.zeros((4, 32), np.float64))
    with pytest.raises(ValueError, match="scales"):
        mx.dequantize(np.zeros((4, 64), np.uint8), np.zeros((4, 3), np.uint8))
    # exact upcasts are accepted
    h = np.linspace(-2, 2, 64, dtype=np.float16).reshape(2, 32)
    np.testing.assert_array_equal(mx.quantize(h)[0], mx.quantize(h.astype(np.float32))[0])
    b = h.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(mx.quantize(b)[0], mx.quantize(b.astype(np.float32))[0])


@pytest.mark.parametrize("fmt", FMTS)
def test_result_independent_of_threading(fmt):
    """One large call (split over OpenMP threads) equals row-by-row calls (each too small to split)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 4096)) * np.exp2(rng.integers(-30, 30, (64, 1)))).astype(np.float32)
    x[rng.random(x.shape) < 0.001] = np.nan
    q, s = mx.quantize(x, fmt=fmt)
    for i in range(0, 64, 7):
        qi, si = mx.quantize(x[i:i + 1], fmt=fmt)
        np.testing.assert_array_equal(qi[0], q[i])
        np.testing.assert_array_equal(si[0], s[i])
    qc, sc = _core.mx_quantize(np.ascontiguousarray(x.T), fmt, "rceil", columnwise=True)
    np.testing.assert_array_equal(qc, q.T)
    np.testing.assert_array_equal(sc, s.T)
