"""MXFP8 block quantization, bit for bit as numerics.md section 5 (the C++ rules in core/include/moenum/mx.h).

    codes, scales = moenum.mx.quantize(x, fmt="e4m3", axis=-1, scale_rounding="rceil", inv_scale="te_kernel")
    x2 = moenum.mx.dequantize(codes, scales, fmt="e4m3", axis=-1)

Every 32 consecutive elements along ``axis`` share one E8M0 scale (uint8, value 2^(code-127)); the
elements become FP8 codes (uint8, E4M3 or E5M2) of ``x`` times the block's inverse scale. Scales keep
the plain layout: the shape of ``x`` with ``axis`` divided by 32.

``inv_scale`` picks that inverse scale (the scenario key recipe.inv_scale): ``te_kernel``, the default,
is TransformerEngine's kernel rule (``exp2f_rcp``: 1.0 for code 0, +0.0 for code 0xFE), so a block with
0 < amax <= fmt_max * 2^-127 quantizes to zeros and a block holding +-inf to NaN (the infs) and zeros;
``spec`` is 2^(127-code) exactly (2^127 for code 0, 2^-127 for 0xFE: +-inf -> +-fmt_max).
"""
from __future__ import annotations

import numpy as np

from . import _core

__all__ = ["quantize", "dequantize", "FORMATS", "SCALE_ROUNDINGS", "INV_SCALES", "BLOCK", "FMT_MAX"]

BLOCK = 32
FORMATS = ("e4m3", "e5m2")
SCALE_ROUNDINGS = ("rceil", "floor")
INV_SCALES = ("te_kernel", "spec")  # the first is the default
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def _check_fmt(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown MXFP8 format {fmt!r}: expected one of {FORMATS}")


def _normalize_axis(axis: int, ndim: int, what: str) -> int:
    if ndim == 0:
        raise ValueError(f"{what} must have at least one dimension to block along")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {what} with {ndim} dimension(s)")
    return axis % ndim


def _as_2d_last(a: np.ndarray, axis: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """The array with `axis` moved last, C-contiguous, as 2-D (rows, len along axis); and its N-D shape."""
    moved = np.moveaxis(a, axis, -1)
    rows = int(np.prod(moved.shape[:-1], dtype=np.int64))  # explicit: -1 is ambiguous for empty arrays
    return np.ascontiguousarray(moved).reshape(rows, moved.shape[-1]), moved.shape


def _restore(a2: np.ndarray, moved_shape: tuple[int, ...], axis: int) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a2.reshape(moved_shape), -1, axis))


def quantize(x, fmt: str = "e4m3", axis: int = -1, scale_rounding: str = "rceil",
             inv_scale: str = "te_kernel") -> tuple[np.ndarray, np.ndarray]:
    """MXFP8-quantize ``x`` in blocks of 32 along ``axis``, elements multiplied by the ``inv_scale``
    rule's inverse of the block scale (module docstring).

    ``x`` is float32 (dtypes that convert to float32 exactly, such as float16 or bfloat16, are accepted;
    float64 is refused rather than silently rounded). Its length along ``axis`` must be a multiple of 32.
    Returns ``(codes, scales)``: uint8 FP8 codes shaped like ``x`` and uint8 E8M0 scales shaped like ``x``
    with ``axis`` divided by 32.
    """
    _check_fmt(fmt)
    if scale_rounding not in SCALE_ROUNDINGS:
        raise ValueError(f"unknown scale_rounding {scale_rounding!r}: expected one of {SCALE_ROUNDINGS}")
    if inv_scale not in INV_SCALES:
        raise ValueError(f"unknown inv_scale {inv_scale!r}: expected one of {INV_SCALES}")
    x = np.asarray(x)
    if x.dtype != np.float32:
        if not np.can_cast(x.dtype, np.float32, casting="safe"):
            raise TypeError(f"moenum.mx.quantize takes float32 input, got {x.dtype}: convert it explicitly "
                            "(x.astype(np.float32)) if rounding to float32 first is what you want")
        x = x.astype(np.float32)
    ax = _normalize_axis(axis, x.ndim, "x")
    n = x.shape[ax]
    if n % BLOCK != 0:
        raise ValueError(f"MXFP8 blocks are {BLOCK} elements along axis {axis}, but x has length {n} there "
                         f"(shape {x.shape}): the length must be a multiple of {BLOCK}")
    x2, moved = _as_2d_last(x, ax)
    codes2, scales2 = _core.mx_quantize(x2, fmt, scale_rounding, inv_scale=inv_scale)
    codes = _restore(codes2, moved, ax)
    scales = _restore(scales2, moved[:-1] + (n // BLOCK,), ax)
    return codes, scales


def dequantize(codes, scales, fmt: str = "e4m3", axis: int = -1) -> np.ndarray:
    """float32 values ``fp8(codes) * 2^(scales-127)``, the inverse of :func:`quantize` on its outputs.

    Exact in float32 (a product past the float32 range is inf); scale 0xFF gives NaN.
    """
    _check_fmt(fmt)
    codes = np.asarray(codes)
    scales = np.asarray(scales)
    for name, a in (("codes", codes), ("scales", scales)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name} must be uint8, got {a.dtype}")
    ax = _normalize_axis(axis, codes.ndim, "codes")
    n = codes.shape[ax]
    if n % BLOCK != 0:
        raise ValueError(f"codes have length {n} along axis {axis} (shape {codes.shape}), "
                         f"not a multiple of {BLOCK}")
    want = codes.shape[:ax] + (n // BLOCK,) + codes.shape[ax + 1:]
    if scales.shape != want:
        raise ValueError(f"scales have shape {scales.shape}; codes of shape {codes.shape} blocked along axis "
                         f"{axis} need scales of shape {want}")
    c2, moved = _as_2d_last(codes, ax)
    s2, _ = _as_2d_last(scales, ax)
    return _restore(_core.mx_dequantize(c2, s2, fmt), moved, ax)
