"""External backends under test: PyTorch, Megatron-core and TransformerEngine experts, and a user's
own module (`torch:PKG.MODULE:FACTORY` or the `moenum.backends` entry-point group), run through
moenum's dispatch and combine and verified like the built-in backends (interfaces.md, "External
backends under test").

| file | holds |
|---|---|
| spec.py | `ExpertsSpec`, what a factory gets |
| plugins.py | a backend name -> its factory |
| device.py | which torch device a backend runs on |
| harness.py | dispatch, the module's forward and backward, the result dict |
| capture.py | stage capture through forward hooks |
| combine.py | moenum's combine of y and dx |
| dtypes.py | exact conversions between moenum's arrays and torch |
| adapters/ | the bundled adapters: torch.loop, torch.grouped_mm, megatron.sequential, megatron.te_grouped |
"""
from __future__ import annotations

from .errors import NotRun, NotSupported
from .spec import ExpertsSpec

__all__ = ["ExpertsSpec", "NotRun", "NotSupported", "run_backend"]


def run_backend(name: str, prepared, cfg: dict) -> dict:
    """One external backend's result dict ({outputs, stages, attrs, seconds}), or {disposition,
    reason} when it cannot run here (not_run) or does not implement the recipe (not_supported).
    Errors of the module itself propagate: the runner reports them as the backend's error."""
    from ..disposition import NOT_RUN, NOT_SUPPORTED
    from .device import resolve_device, split_device
    from .plugins import load_factory
    base, requested = split_device(name)
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"disposition": NOT_RUN, "reason": "torch is not installed (pip install -r requirements-torch.txt)"}
    factory = load_factory(base)
    try:
        getattr(factory, "check_available", lambda: None)()
        device = resolve_device(requested, getattr(factory, "default_device", "cpu"))
        from .harness import run_module
        return run_module(factory, prepared, cfg, device)
    except NotRun as e:
        return {"disposition": NOT_RUN, "reason": str(e)}
    except (NotSupported, NotImplementedError) as e:
        return {"disposition": NOT_SUPPORTED, "reason": str(e) or f"{base} does not implement this"}
