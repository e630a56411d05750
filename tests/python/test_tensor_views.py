"""Tensors cross from C++ to Python without a copy: numpy views of their storage, in the storage's
dtype, writable, alive for as long as any array of them is."""
import gc

import numpy as np

import moenum
from moenum import _core

from conftest import with_changes

STORAGE = {"fp64": np.float64, "fp32": np.float32, "bf16": np.float32,
           "e4m3": np.uint8, "e5m2": np.uint8, "e8m0": np.uint8}


def prepared(cfg, **changes):
    sc = moenum.from_dict(with_changes(cfg, **changes))[0]
    return _core.prepare(moenum.scenario.to_core(sc))


def test_inputs_are_views_of_the_problem(tiny_config):
    p = prepared(tiny_config)
    a, b = p.inputs["x"], p.inputs["x"]
    assert a.dtype == np.float32 and a.flags.writeable and not a.flags.owndata
    assert np.shares_memory(a, b), "two reads of the inputs see the same storage"
    del p
    gc.collect()
    assert np.isfinite(a).all(), "the array keeps the inputs alive"


def test_backend_results_are_views_in_their_storage_dtype(tiny_config):
    p = prepared(tiny_config, recipe__name="mxfp8", dispatch__padding="module", dispatch__align=32)
    for backend in ("golden", "reference"):
        out = _core.run_backend(backend, p, True)
        arrays = {**out["outputs"], **out["stages"]}
        assert arrays
        for name, (values, dtype) in arrays.items():
            assert values.dtype == STORAGE[dtype], (backend, name, dtype, values.dtype)
            assert values.flags.writeable and not values.flags.owndata, (backend, name)
        if backend == "reference":
            assert out["stages"]["fc1_fprop.A.codes"][0].dtype == np.uint8
        y, _ = out["outputs"]["y"]
        want = y.copy()
        del out, arrays
        gc.collect()
        assert np.array_equal(y, want), "the array keeps the backend's result alive"


def test_each_result_tensor_has_its_own_owner(tiny_config):
    """Dropping a backend's stage arrays frees their memory even while its outputs are kept: no two
    arrays of one result share an owner."""
    p = prepared(tiny_config)
    out = _core.run_backend("reference", p, True)
    arrays = [v for v, _ in [*out["outputs"].values(), *out["stages"].values()]]
    assert len(arrays) > 10
    owners = {id(a.base) for a in arrays}
    assert len(owners) == len(arrays)
