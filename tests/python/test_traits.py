"""The backend registry's traits (core/include/moenum/backend_traits.h) as Python sees them: every
registered backend, the oracles, the GPU backends known without CUDA, external backends."""
import pytest

import moenum
from moenum import _core, traits


def test_traits_of_every_registered_backend():
    from moenum.scenario_schema import SCHEMA
    recipes, bias_modes = set(SCHEMA["recipe"]["name"].choices), set(SCHEMA["recipe"]["bias_mode"].choices)
    all_traits = {t.name: t for t in _core.backends()}
    assert list(all_traits) == _core.backend_names()
    assert set(all_traits) == {"golden", "reference", "cpu.eigen", "gpu.grouped", "gpu.multistream"}
    for name, t in all_traits.items():
        assert t.role == ("oracle" if name in ("golden", "reference") else "under_test"), name
        assert t.device == ("gpu" if name.startswith("gpu.") else "cpu"), name
        assert t.layout_sensitive == (t.device == "gpu"), name
        assert t.stages and set(t.recipes) <= recipes and set(t.bias_modes) <= bias_modes, name
        assert traits.under_test(name) == (t.role == "under_test") and traits.known(name)
        assert _core.backend_traits(name).stages == t.stages
    assert set(all_traits["gpu.grouped"].recipes) == {"bf16", "mxfp8"}
    assert all_traits["gpu.grouped"].bias_modes == ["separate"]
    assert "act" not in all_traits["gpu.multistream"].stages and "act" in all_traits["cpu.eigen"].stages
    assert traits.known("torch:pkg.mod:make") and traits.under_test("torch:pkg.mod:make")
    assert not traits.known("gpu.magic") and traits.traits("torch:pkg.mod:make") is None
    with pytest.raises(_core.ConfigError) as info:
        _core.backend_traits("gpu.magic")
    assert info.value.key == "backends"


@pytest.mark.skipif(_core.built_with_cuda, reason="the GPU backends are built into this module")
def test_gpu_backends_are_known_without_cuda(tiny_config):
    sc = moenum.scenario.to_core(moenum.from_dict(tiny_config)[0])
    ok, disposition, reason = _core.backend_availability("gpu.multistream", sc)
    assert (ok, disposition) == (False, "not_run") and "without CUDA" in reason
