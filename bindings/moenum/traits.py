"""What moenum knows about each backend without running it: the traits of the C++ registry
(core/include/moenum/backend_traits.h). External backends (the bundled PyTorch/Megatron adapters and
`torch:PKG.MODULE:FACTORY`) are not in the registry; they are backends under test (moenum.external)."""
from __future__ import annotations

import functools

from . import _core
from .external.device import split_device
from .external.plugins import BUNDLED, TORCH_PREFIX as EXTERNAL_PREFIX, entry_point_names

BUNDLED_EXTERNAL = tuple(BUNDLED)  # the bundled external adapters (moenum/external/adapters/)


def is_external(name: str) -> bool:
    """A backend that moenum runs through PyTorch: bundled, a user's `torch:PKG.MODULE:FACTORY`, or
    one a package registers in the `moenum.backends` entry-point group."""
    base = split_device(name)[0]
    if base.startswith(EXTERNAL_PREFIX) or base in BUNDLED_EXTERNAL:
        return True
    return base not in _registered() and base in entry_point_names()


def elementwise_rule(name: str) -> str:
    """How a backend's elementwise stages (act, a, out, dh) are checked: "bitwise" for moenum's own
    backends (they share its functions), "interval" for code that does not
    (core/verify/elementwise_interval.h)."""
    return "interval" if is_external(name) else "bitwise"


def gemm_rule(name: str, accumulate: str) -> str:
    """How a backend's GEMM stages are checked under the scenario's recipe.accumulate: "hopper_mma"
    (bitwise against that model) when its GEMMs follow that mode's model bit for bit (the trait
    modelled_accumulate: gpu.grouped and the reference under hopper_mma), else "bound" (numerics.md §7)."""
    t = traits(name)
    return accumulate if t is not None and accumulate in t.modelled_accumulate else "bound"


@functools.lru_cache(maxsize=None)
def _registered() -> frozenset:
    return frozenset(_core.backend_names())


def known(name: str) -> bool:
    """A registered backend (built into this module or not: GPU backends are known without CUDA) or an
    external one."""
    return name in _registered() or is_external(name)


def traits(name: str):
    """The registry's `_core.BackendTraits`, or None for an external or unknown backend."""
    return _core.backend_traits(name) if name in _registered() else None


def under_test(name: str) -> bool:
    """Everything but the oracles (golden, reference), which are the yardsticks."""
    t = traits(name)
    return t is None or t.role == "under_test"


def layout_sensitive(name: str) -> bool:
    """Whether single vs discrete weights can change the backend's result (then it is rerun with the
    other layout)."""
    t = traits(name)
    return t is not None and t.layout_sensitive
