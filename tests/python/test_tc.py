"""moenum.tc on cases worked out by hand from the model's rules (core/include/moenum/tc.h); the
comparison with MMA-Sim over 10^5 cases per format is test_tc_mmasim.py."""
import numpy as np
import pytest

from moenum import tc


def dot1(a, b, c, fmt="bf16"):
    return float(tc.dot(np.array([a], np.float32), np.array([b], np.float32), np.array([c], np.float32), fmt=fmt)[0])


def test_products_are_truncated_at_25_fraction_bits_below_the_step_maximum():
    # c = 1 sets e_max = 0: a product 2^-25 keeps its one bit, four of them make one fp32 ulp of 1
    assert dot1([2.0**-12] * 4, [2.0**-13] * 4, 1.0) == 1 + 2.0**-23
    # 2^-26 lies below the 25 kept bits: eight of them (exactly 2^-23 in all) add nothing
    assert dot1([2.0**-13] * 8, [2.0**-13] * 8, 1.0) == 1.0
    # the sum is rounded toward zero: 1 + 3 * 2^-25 -> 1, and likewise for negatives
    assert dot1([2.0**-12] * 3, [2.0**-13] * 3, 1.0) == 1.0
    assert dot1([2.0**-12] * 7, [-(2.0**-13)] * 7, -1.0) == -(1 + 2.0**-23)


def test_steps_of_16_chain_in_k_order():
    # step 1: 1 + 16 * 2^-26 (each truncated to 0) = 1; step 2 likewise: order and step size matter
    assert dot1([2.0**-13] * 32, [2.0**-13] * 32, 1.0) == 1.0
    # the same products in front of a step that carries the 1 from c
    a = [1.0] + [2.0**-13] * 15 + [2.0**-12] * 16
    b = [1.0] + [2.0**-13] * 15 + [2.0**-13] * 16
    assert dot1(a, b, 0.0) == 1 + 2.0**-21  # 16 * 2^-25 in the second step; the first's 2^-26s are lost


def test_e4m3_steps_keep_13_bits_and_return_e8m13():
    # 32 products of 1 * 2^-14 = 2^-14 each below c = 1: truncated to 2^-13 bits: 0 each
    assert dot1([2.0**-7] * 32, [2.0**-7] * 32, 1.0, fmt="e4m3") == 1.0
    # the fp32 c itself is truncated to 13 fraction bits
    assert dot1([0.0] * 32, [0.0] * 32, 1 + 2.0**-20, fmt="e4m3") == 1.0


def test_zero_is_positive_and_nan_is_canonical():
    assert np.signbit(dot1([0.0] * 16, [-1.0] * 16, -0.0)) == False  # noqa: E712
    out = tc.dot(np.array([[np.nan] + [1.0] * 15], np.float32), np.ones((1, 16), np.float32),
                 np.zeros(1, np.float32))
    assert out.view(np.uint32)[0] == 0x7FFFFFFF
    assert dot1([np.inf] + [1.0] * 15, [1.0] * 16, 0.0) == np.inf
    assert np.isnan(dot1([np.inf, -np.inf], [1.0, 1.0], 0.0))
    assert np.isnan(dot1([np.inf], [0.0], 0.0))


def test_bad_input_is_a_clear_error():
    a = np.ones((2, 16), np.float32)
    with pytest.raises(ValueError, match=r"a\[1, 3\] = 1.00390625 is not a value of bf16"):
        bad = a.copy()
        bad[1, 3] = 1 + 2.0**-8
        tc.dot(bad, a, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"b\[0, 0\] = 500 is not a value of e4m3"):
        bad = a.copy()
        bad[0, 0] = 500
        tc.dot(a, bad, np.zeros(2, np.float32), fmt="e4m3")
    with pytest.raises(ValueError, match="inf is not a value of e4m3"):
        bad = a.copy()
        bad[0, 0] = np.inf
        tc.dot(bad, a, np.zeros(2, np.float32), fmt="e4m3")
    with pytest.raises(ValueError, match=r"b must have a's shape \(2, 16\), got \(2, 15\)"):
        tc.dot(a, a[:, :15], np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"c must be 1-D \[N\] with N = 2"):
        tc.dot(a, a, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="must be float32"):
        tc.dot(a.astype(np.float64), a, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="unknown fmt 'fp16'"):
        tc.dot(a, a, np.zeros(2, np.float32), fmt="fp16")
    with pytest.raises(ValueError, match="unknown arch 'sm100'"):
        tc.dot(a, a, np.zeros(2, np.float32), arch="sm100")
