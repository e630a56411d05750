"""Exact conversions between moenum's arrays (float32 storage of bf16 or fp32 values) and torch."""
from __future__ import annotations

import numpy as np

RECIPE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def torch_dtype(recipe: str):
    import torch
    return getattr(torch, RECIPE_DTYPES[recipe])


def to_torch(a: np.ndarray, dtype, device):
    """float32 values that are exact in `dtype` (moenum's bf16 inputs are) -> a torch tensor."""
    import torch
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device=device, dtype=dtype)


def label(t) -> str:
    """moenum's dtype name of a torch tensor's values."""
    import torch
    names = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16"}
    if t.dtype not in names:
        raise TypeError(f"an external backend returned a {t.dtype} tensor (bf16, fp16, fp32 or fp64 expected)")
    return names[t.dtype]


def to_numpy(t) -> np.ndarray:
    """A torch tensor's values as float32 (exact for bf16/fp16/fp32) or float64."""
    import torch
    t = t.detach()
    return t.to("cpu", torch.float64 if t.dtype == torch.float64 else torch.float32).numpy()
