"""Finding an external backend's factory by name: the bundled adapters, `torch:PKG.MODULE:FACTORY`,
and the `moenum.backends` entry-point group (a package ships adapters by declaring
`[project.entry-points."moenum.backends"] my.experts = "my_pkg.experts:make"`)."""
from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from ..errors import ScenarioError

ENTRY_POINT_GROUP = "moenum.backends"
TORCH_PREFIX = "torch:"

BUNDLED = {
    "torch.loop": "moenum.external.adapters.torch_loop:make",
    "torch.grouped_mm": "moenum.external.adapters.torch_grouped_mm:make",
    "megatron.sequential": "moenum.external.adapters.megatron_sequential:make",
    "megatron.te_grouped": "moenum.external.adapters.megatron_te_grouped:make",
}


@functools.lru_cache(maxsize=None)
def entry_point_names() -> frozenset:
    return frozenset(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def factory_path(name: str) -> str:
    """`PKG.MODULE:FACTORY` of a backend name."""
    if name in BUNDLED:
        return BUNDLED[name]
    if name.startswith(TORCH_PREFIX):
        path = name[len(TORCH_PREFIX):]
        if path.count(":") != 1 or not all(path.split(":")):
            raise ScenarioError(f"'{name}': an external backend is torch:PKG.MODULE:FACTORY", key="backends")
        return path
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.value
    raise ScenarioError(f"unknown external backend '{name}'", key="backends")


def load_factory(name: str):
    """The factory callable; ScenarioError (exit 2) when the module or attribute does not exist."""
    module_name, attr = factory_path(name).split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):  # the module itself is missing, not one it imports
            raise ScenarioError(f"'{name}': no module named '{module_name}'", key="backends") from None
        raise
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ScenarioError(f"'{name}': '{module_name}' has no callable '{attr}'", key="backends")
    return factory
