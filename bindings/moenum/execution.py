"""`execution.device`: where the oracles (golden, reference) compute their fp64 GEMMs. The rule that
resolves `auto` (the GPU when this build has CUDA and a device is usable, else the CPU) lives once, in
C++ (reference/device_gemm.h); here it only refuses, before anything runs, a point that asks for a GPU
this machine cannot give it (exit 3)."""
from __future__ import annotations

from .errors import EnvironmentFailure


def resolve(device: str) -> str:
    """`cpu` or `gpu`: what execution.device `device` means on this machine; EnvironmentFailure for
    `gpu` without a usable CUDA GPU (or without CUDA in this build)."""
    from . import _core
    ok, resolved, reason = _core.execution_device(device)
    if not ok:
        raise EnvironmentFailure(reason)
    return resolved


def require_devices(points) -> None:
    """Refuse the first point whose execution.device cannot be honoured here."""
    for sc in points:
        try:
            resolve(sc.config["execution"]["device"])
        except EnvironmentFailure as e:
            raise EnvironmentFailure(f"scenario point {sc.name}: {e} (refused before running it)") from None
