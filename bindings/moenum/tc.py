"""A bit-exact model of Hopper tensor-core accumulation (numerics.md §6; core/include/moenum/tc.h).

    out = moenum.tc.dot(a, b, c, arch="sm90", fmt="bf16")   # a, b float32 [N, K], c float32 [N]

Each of the N dot products starts from its accumulator ``c[i]`` and chains the instruction's fused
steps over K in order: bf16 (wgmma k16) 16 products per step, exact products aligned to the step's
largest exponent and truncated to 25 fraction bits, round toward zero to fp32; e4m3/e5m2 (wgmma k32)
32 products, 13 fraction bits, round toward zero to E8M13. The semantics are MMA-Sim's (``mmasim``,
arXiv 2511.10909), validated there on the hardware; the tests compare bit for bit with it.
"""
from __future__ import annotations

import numpy as np

from . import _core

FORMATS = ("bf16", "e4m3", "e5m2")
ARCHS = ("sm90",)


def dot(a, b, c, arch: str = "sm90", fmt: str = "bf16") -> np.ndarray:
    """float32 [N]: c chained through the fused steps over a[i] . b[i] (see the module docstring).
    ValueError for an unknown arch or fmt, shapes that do not fit ([N, K], [N, K], [N]) or an element
    of a or b that is not a value of fmt (NaN is; inf only in bf16 and e5m2)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown fmt {fmt!r}: expected one of {FORMATS}")
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: expected one of {ARCHS}")
    arrays = []
    for name, x in (("a", a), ("b", b), ("c", c)):
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ValueError(f"{name} must be float32 (values of {fmt}), got {x.dtype}")
        arrays.append(np.ascontiguousarray(x))
    return _core.tc_dot(*arrays, arch=arch, fmt=fmt)
