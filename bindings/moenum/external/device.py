"""Which torch device an external backend runs on: `NAME@DEVICE` in the backend list, else
MOENUM_DEVICE (what `moenum run --device` sets, so that worker processes see it too), else the
adapter's own default (CUDA for GPU-only adapters, otherwise the CPU)."""
from __future__ import annotations

import os

from .errors import NotRun

DEVICE_ENV = "MOENUM_DEVICE"


def split_device(name: str) -> tuple[str, str | None]:
    """`torch.loop@cuda` -> ("torch.loop", "cuda"); a name without a device -> (name, None)."""
    base, sep, dev = name.rpartition("@")
    return (base, dev) if sep and base else (name, None)


def resolve_device(requested: str | None, default: str):
    """The torch.device to run on; NotRun when CUDA is asked for and absent."""
    import torch
    dev = torch.device(requested or os.environ.get(DEVICE_ENV) or default)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise NotRun(f"no CUDA device here (asked for {dev})")
    return dev
