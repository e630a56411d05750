"""moenum.tc against MMA-Sim (mmasim, arXiv 2511.10909), bit for bit: at least 10^5 dot products per
format over random values, cancellation, wide exponent spread, subnormal products, ties at the
truncation points, special values and K that is not a multiple of the step. mmasim is installed by
scripts/test.sh (requirements-mmasim.txt); without it these tests skip."""
import numpy as np
import pytest

from moenum import tc

torch = pytest.importorskip("torch", reason="mmasim needs torch (pip install -r requirements-mmasim.txt)")
mmasim_ptx = pytest.importorskip("mmasim.nv_ptx", reason="mmasim not installed (pip install -r requirements-mmasim.txt)")

TORCH_DTYPE = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
INSTRUCTION = {"bf16": "m64n8k16.f32.bf16.bf16", "e4m3": "m64n8k32.f32.e4m3.e4m3", "e5m2": "m64n8k32.f32.e5m2.e5m2"}
# (exponent of the smallest normal, of the largest binade, mantissa bits) of each format
LIMITS = {"bf16": (-126, 127, 7), "e4m3": (-6, 8, 3), "e5m2": (-14, 15, 2)}
N = 25_000  # per case: four cases per format and K make well over 10^5 dot products


def to_fmt(x: np.ndarray, fmt: str) -> np.ndarray:
    """x rounded to fmt (finite inputs within range), as float32."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(TORCH_DTYPE[fmt]).float().numpy()


def mmasim_dot(a, b, c, fmt):
    op = mmasim_ptx.WGMMA("Hopper", INSTRUCTION[fmt])
    ta = torch.from_numpy(a).to(TORCH_DTYPE[fmt])
    tb = torch.from_numpy(b).to(TORCH_DTYPE[fmt])
    return op.dpa(ta, tb, torch.from_numpy(c.astype(np.float32))).numpy()


def values(rng, shape, fmt, e_lo, e_hi):
    """Random values of fmt with exponents uniform in [e_lo, e_hi] and random signs and mantissas."""
    e_min, e_max, mbits = LIMITS[fmt]
    m = 1 + rng.integers(0, 2**mbits, size=shape) / 2**mbits
    e = rng.integers(max(e_lo, e_min - mbits), min(e_hi, e_max) + 1, size=shape)
    x = rng.choice([-1.0, 1.0], size=shape) * m * np.exp2(e.astype(np.float64))
    if fmt == "e4m3":
        x = np.clip(x, -448, 448)
    return to_fmt(x, fmt)


def case(rng, kind, fmt, K):
    e_min, e_max, _ = LIMITS[fmt]
    c = rng.standard_normal(N).astype(np.float32)
    if kind == "random":
        a, b = to_fmt(rng.standard_normal((N, K)), fmt), to_fmt(rng.standard_normal((N, K)), fmt)
    elif kind == "cancellation":
        a = values(rng, (N, K), fmt, -3, 3)
        b = values(rng, (N, K), fmt, -3, 3)
        a[:, 1::2] = -a[:, 0::2][:, : a[:, 1::2].shape[1]]            # pairs that cancel, up to b's difference
        b[:, 1::2] = to_fmt(b[:, 0::2][:, : b[:, 1::2].shape[1]] * (1 + 2.0**-LIMITS[fmt][2]), fmt)  # one ulp apart
        exact = (a.astype(np.float64) * b).sum(axis=1)
        c = (-exact * (1 + np.exp2(-rng.integers(6, 40, size=N)))).astype(np.float32)  # all but cancels
    elif kind == "spread":
        lo, hi = (-60, 60) if fmt == "bf16" else (e_min, e_max)
        a, b = values(rng, (N, K), fmt, lo, hi), values(rng, (N, K), fmt, lo, hi)
        c = (c * np.exp2(rng.integers(-100, 100, size=N))).astype(np.float32)
    elif kind == "subnormal":
        # subnormal operands, and bf16 products that land around the fp32 subnormal range
        a = values(rng, (N, K), fmt, e_min - 8, e_min + 8)
        b = values(rng, (N, K), fmt, -16, 4) if fmt == "bf16" else values(rng, (N, K), fmt, e_min - 3, e_min + 1)
        c = (c * np.float32(2.0 ** (-140 if fmt == "bf16" else 2 * e_min)) * rng.integers(0, 2, size=N)).astype(np.float32)
    elif kind == "ties":
        # powers of two and short mantissas around the truncation points of the first term
        a = values(rng, (N, K), fmt, -4, 0)
        b = values(rng, (N, K), fmt, -30 if fmt == "bf16" else e_min, 0)
        c = np.exp2(rng.integers(-2, 3, size=N)).astype(np.float32) * rng.choice([-1, 1], size=N).astype(np.float32)
        c[::3] = 0.0
    elif kind == "special":
        a, b = to_fmt(rng.standard_normal((N, K)), fmt), to_fmt(rng.standard_normal((N, K)), fmt)
        specials = [np.nan] + ([np.inf, -np.inf] if fmt != "e4m3" else []) + [0.0, -0.0]
        for x in (a, b):
            where = rng.random((N, K)) < 0.002
            x[where] = rng.choice(specials, size=int(where.sum()))
        c[rng.random(N) < 0.01] = np.inf
        c[rng.random(N) < 0.01] = -0.0
    else:
        raise AssertionError(kind)
    return np.ascontiguousarray(a), np.ascontiguousarray(b), np.ascontiguousarray(c)


@pytest.mark.parametrize("fmt", ["bf16", "e4m3", "e5m2"])
@pytest.mark.parametrize("kind", ["random", "cancellation", "spread", "subnormal", "ties", "special"])
@pytest.mark.parametrize("K", [64, 37])
def test_dot_matches_mmasim_bit_for_bit(fmt, kind, K):
    rng = np.random.default_rng([sum(map(ord, fmt + kind)), K])
    a, b, c = case(rng, kind, fmt, K)
    got = tc.dot(a, b, c, fmt=fmt)
    want = mmasim_dot(a, b, c, fmt)
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, (f"{diff.size} of {N} differ; first at {diff[0]}: tc {got[diff[0]]!r} "
                            f"mmasim {want[diff[0]]!r}")
    finite = np.isfinite(want)
    assert finite.mean() > 0.5 and np.count_nonzero(want[finite]) > N // 4  # the case exercises real sums


@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
def test_the_comparison_tells_a_model_one_bit_off(fmt):
    """The cases are sharp enough to see one fraction bit: mmasim's own step with F - 1 differs."""
    from mmasim.arithmetic import fdpa
    rng = np.random.default_rng(5)
    a, b, c = case(rng, "spread", fmt, 64)
    op = mmasim_ptx.WGMMA("Hopper", INSTRUCTION[fmt]).arithmetic_op
    off = fdpa.MMA_T_FDPA(op.F - 1, op.rho, op.L_max, op.e_zero, op.a_type_ptx, op.b_type_ptx)
    wrong = off.dpa(torch.from_numpy(a).to(TORCH_DTYPE[fmt]), torch.from_numpy(b).to(TORCH_DTYPE[fmt]),
                    torch.from_numpy(c)).numpy()
    got = tc.dot(a, b, c, fmt=fmt)
    assert np.count_nonzero(got.view(np.uint32) != wrong.view(np.uint32)) > N // 100

