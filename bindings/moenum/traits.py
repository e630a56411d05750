"""What moenum knows about each backend without running it: the traits of the C++ registry
(core/include/moenum/backend_traits.h). External backends (`torch:...`) are not in the registry; they
are backends under test whose traits are unknown."""
from __future__ import annotations

import functools

from . import _core

EXTERNAL_PREFIX = "torch:"


def is_external(name: str) -> bool:
    return name.startswith(EXTERNAL_PREFIX)


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
