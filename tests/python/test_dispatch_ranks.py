"""dispatch.ranks (interfaces.md, additions 2026-12; issue 8 acceptance 4): simulating a subset of the EP
ranks reproduces those ranks' experts bit for bit against the full run, and their partial y/dx add up
to the full run's."""
import copy
import textwrap

import h5py
import numpy as np
import pytest

import moenum
from moenum import _core, verify
from moenum.scenario import to_core

from conftest import moenum_cli, with_changes

BACKENDS = ("golden", "reference", "cpu.eigen")
GRADS = ("dw1", "dw2", "db1", "db2")
E = 8

BASE = {
    "name": "ranks", "seed": 11,
    "model": {"experts": E, "hidden": 64, "ffn": 32, "topk": 2, "bias": True},
    # 32 tokens per source rank at EP 4: router padding to 32 rows always finds enough tokens
    "tokens": 128,
    "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 1.0}},
    "dispatch": {"ep": 2, "padding": "none"},
    "recipe": {"name": "bf16"},
    "backends": list(BACKENDS),
}

# (recipe, padding, align): mxfp8 needs aligned segments, so no `none`; bf16 has no default align
POINTS = [("bf16", "none", None), ("bf16", "router", 16), ("bf16", "module", 16), ("bf16", "hybridep", 16),
          ("mxfp8", "router", 32), ("mxfp8", "module", 32), ("mxfp8", "hybridep", 32)]


def config(recipe="bf16", padding="none", align=None, ep=2, ranks=None) -> dict:
    dispatch = {"ep": ep, "padding": padding}
    if align is not None:
        dispatch["align"] = align
    if ranks is not None:
        dispatch["ranks"] = ranks
    return with_changes(BASE, recipe__name=recipe, dispatch=dispatch)


def outputs(cfg: dict, backends=BACKENDS) -> dict:
    """backend -> output name -> array, straight from the backends (no verification)."""
    prepared = _core.prepare(to_core(moenum.from_dict(cfg)[0]))
    return {b: {t: v for t, (v, _) in _core.run_backend(b, prepared, False)["outputs"].items()} for b in backends}


def bits(a: np.ndarray) -> np.ndarray:
    """Bit patterns, so that -0 and +0 differ."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def topk_idx(cfg: dict) -> np.ndarray:
    return np.asarray(_core.prepare(to_core(moenum.from_dict(cfg)[0])).topk_idx)


@pytest.mark.parametrize("ep", [2, 4])
@pytest.mark.parametrize("recipe,padding,align", POINTS, ids=[f"{r}-{p}" for r, p, _ in POINTS])
def test_each_rank_reproduces_its_experts_bitwise(recipe, padding, align, ep):
    full_cfg = config(recipe, padding, align, ep)
    full = outputs(full_cfg)
    idx = topk_idx(full_cfg)
    per_rank = E // ep
    whole_seen = 0
    for r in range(ep):
        part = outputs(config(recipe, padding, align, ep, ranks=[r]))
        mine = np.zeros(E, dtype=bool)
        mine[r * per_rank:(r + 1) * per_rank] = True
        pairs = mine[idx]  # routed (token, slot) pairs of rank r's experts
        # tokens whose every expert lives on rank r: their combine sums the same rows as the full run
        whole_tokens = pairs.all(axis=1)
        whole_seen += int(whole_tokens.sum())
        for b in BACKENDS:
            where = f"{b}, rank {r}"
            for t in GRADS:
                np.testing.assert_array_equal(bits(part[b][t][mine]), bits(full[b][t][mine]), err_msg=f"{where}: {t}")
                assert not np.any(part[b][t][~mine]), f"{where}: {t} of experts on other ranks must stay zero"
            np.testing.assert_array_equal(bits(part[b]["dprobs"][pairs]), bits(full[b]["dprobs"][pairs]),
                                          err_msg=f"{where}: dprobs")
            assert not np.any(part[b]["dprobs"][~pairs]), f"{where}: dprobs of other ranks' experts must stay zero"
            for t in ("y", "dx"):
                np.testing.assert_array_equal(bits(part[b][t][whole_tokens]), bits(full[b][t][whole_tokens]),
                                              err_msg=f"{where}: {t} of tokens routed only to rank {r}")
                untouched = ~pairs.any(axis=1)
                assert not np.any(part[b][t][untouched]), f"{where}: {t} of tokens that rank {r} never received"
    assert whole_seen > 0  # the bitwise y/dx comparison above compared something


@pytest.mark.parametrize("ep", [2, 4])
@pytest.mark.parametrize("padding,align", [("none", None), ("router", 16), ("router_post", 16), ("module", 16),
                                           ("hybridep", 16)])
def test_golden_partial_sums_over_every_rank_add_up_to_the_full_run(padding, align, ep):
    full = outputs(config("bf16", padding, align, ep), ("golden",))["golden"]
    parts = [outputs(config("bf16", padding, align, ep, ranks=[r]), ("golden",))["golden"] for r in range(ep)]
    for t in ("y", "dx"):
        total = sum(p[t] for p in parts)
        scale = np.max(np.abs(full[t]))
        assert np.max(np.abs(total - full[t])) <= 1e-12 * scale, t
        assert np.linalg.norm(total - full[t]) <= 1e-12 * np.linalg.norm(full[t]), t
    for t in (*GRADS, "dprobs"):  # each element computed by exactly one rank: the sum is exact
        np.testing.assert_array_equal(sum(p[t] for p in parts), full[t], err_msg=t)


def test_listing_every_rank_is_the_full_run(tmp_path):
    full = outputs(config(ep=4))
    every = outputs(config(ep=4, ranks=[3, 1, 0, 2]))
    for b in BACKENDS:
        for t, v in full[b].items():
            np.testing.assert_array_equal(bits(every[b][t]), bits(v), err_msg=f"{b}: {t}")
    res = moenum.run(moenum.from_dict(with_changes(config(ep=4, ranks=[3, 1, 0, 2]), name="every"))[0], out=tmp_path)
    with h5py.File(res.path, "r") as f:
        assert not f.attrs["partial_sums"]
        assert list(f.attrs["simulated_ranks"]) == [0, 1, 2, 3]


@pytest.mark.parametrize("recipe,padding,align", [("bf16", "router", 16), ("mxfp8", "hybridep", 32)])
def test_partial_run_verifies_and_says_so_in_the_file(tmp_path, recipe, padding, align):
    """The whole pipeline on a partial point: every backend passes (the stage checks of cpu.eigen run
    on the restricted plan), the file says which ranks ran, and the error table covers only their
    experts."""
    cfg = with_changes(config(recipe, padding, align, ep=4, ranks=[2]), output={"inputs": True})
    res = moenum.run(moenum.from_dict(cfg)[0], out=tmp_path)
    assert res.passed, (res.disposition, res.check_details)
    assert set(res.disposition.values()) == {"passed"}
    assert "stage.cpu.eigen" in res.checks
    with h5py.File(res.path, "r") as f:
        assert f.attrs["partial_sums"]
        assert list(f.attrs["simulated_ranks"]) == [2]
        for r in range(4):
            g = f[f"dispatch/rank_{r}"]
            assert bool(g.attrs["simulated"]) == (r == 2)
            assert (g["row_token"].size > 0) == (r == 2)
            assert (g["tokens_per_expert"][()].sum() > 0) == (r == 2)
        assert f["results/reference/dw1"].shape == (E, 64, 64)
    experts = set(res.errors.expert.unique()) - {-1}
    assert experts == {4, 5}
    assert set(res.errors[res.errors.expert == -1].tensor) == {"y", "dx", *GRADS, "dprobs"}
    back = moenum.open_results(res.path)
    assert back.errors.shape == res.errors.shape


def test_full_run_file_names_every_rank(tmp_path):
    res = moenum.run(moenum.from_dict(config(ep=2))[0], out=tmp_path)
    with h5py.File(res.path, "r") as f:
        assert not f.attrs["partial_sums"]
        assert list(f.attrs["simulated_ranks"]) == [0, 1]
        assert all(bool(f[f"dispatch/rank_{r}"].attrs["simulated"]) for r in range(2))


def test_plan_flags_follow_the_python_rule():
    from moenum.ranks import partial_experts, simulated_ranks
    for ep, ranks in [(2, None), (4, [3, 1]), (4, [0, 1, 2, 3]), (8, [5])]:
        sc = moenum.from_dict(config(ep=ep, ranks=ranks))[0]
        cfg, plan = sc.config, _core.prepare(to_core(sc)).plan
        flags = [r for r, rank in enumerate(plan["ranks"]) if rank["simulated"]]
        assert flags == simulated_ranks(cfg)
        experts = partial_experts(cfg)
        if experts is None:
            assert len(flags) == ep
        else:
            assert experts == [e for e in range(E) if e // (E // ep) in flags]


def test_invariances_compare_partial_points_only_with_the_same_experts(tmp_path):
    """EP 2 rank 0 and EP 4 ranks 0+1 computed the same experts with zero padding: they must agree bit
    for bit (ep_zero_padding, golden); a full point and another partial point must not join them."""
    results = []
    for name, ep, ranks in [("full", 2, None), ("ep2-r0", 2, [0]), ("ep4-r01", 4, [0, 1]), ("ep4-r0", 4, [0]),
                            ("ep4-r23", 4, [2, 3])]:
        cfg = with_changes(config("bf16", "module", 16, ep, ranks), name=f"inv-{name}",
                           verify={"stages": False})
        results.append(moenum.run(moenum.from_dict(cfg)[0], out=tmp_path))
    checks = verify.invariance_checks(results)
    assert all(ok for ok, _ in checks.values()), {k: d for k, (ok, d) in checks.items() if not ok}
    kinds = {name.split("(")[0] for name in checks}
    assert kinds == {"invariance.ep_zero_padding", "invariance.golden"}, checks
    for _, detail in checks.values():  # "... across N points (a, b)"
        members = set(detail[detail.rindex("(") + 1:-1].split(", "))
        assert members == {"inv-ep2-r0", "inv-ep4-r01"}, detail


def test_invariance_catches_a_differing_partial_point(tmp_path):
    results = []
    for name, ep, ranks in [("a", 2, [1]), ("b", 4, [2, 3])]:
        cfg = with_changes(config("bf16", "module", 16, ep, ranks), name=f"bad-{name}", verify={"stages": False})
        results.append(moenum.run(moenum.from_dict(cfg)[0], out=tmp_path))
    with h5py.File(results[1].path, "r+") as f:
        ds = f["results/cpu.eigen/y"]
        v = ds[()]
        v[np.nonzero(v)[0][0], 0] += 1.0
        ds[...] = v
    failed = [k for k, (ok, _) in verify.invariance_checks(results).items() if not ok]
    assert any(k.startswith("invariance.ep_zero_padding(") for k in failed), failed


GOOD = textwrap.dedent("""\
    name: bad-ranks
    model: {experts: 4, hidden: 32, ffn: 32, topk: 2}
    tokens: 32
    dispatch: {ep: 2, padding: none, ranks: RANKS}
    backends: [golden, reference]
    """)


@pytest.mark.parametrize("ranks,words", [("[2]", "not in [0, ep)"), ("[-1]", "not in [0, ep)"),
                                         ("[1, 0, 1]", "lists rank 1 twice"), ("[]", "non-empty list"),
                                         ("0", "must be a list"), ("[true]", "non-empty list"),
                                         ("[0.5]", "non-empty list")])
def test_bad_ranks_exit_2_naming_the_key(tmp_path, ranks, words):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("RANKS", ranks))
    proc = moenum_cli("run", path, "-o", tmp_path / "results")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{path}:4: dispatch.ranks:" in proc.stderr and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "results").glob("*.h5"))


def test_bad_ranks_in_a_sweep_point_name_the_sweep_line(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(GOOD.replace("ranks: RANKS", "ranks: [0]") + "sweep:\n  dispatch.ranks: [[0], [5]]\n")
    with pytest.raises(moenum.ScenarioError) as info:
        moenum.load_scenarios(path)
    assert info.value.key == "dispatch.ranks" and info.value.line == 7, str(info.value)


def test_the_cpp_side_rejects_bad_ranks_too():
    """Scenarios built through the API skip the YAML checks; prepare() still refuses them."""
    core = to_core(moenum.from_dict(config(ep=2))[0])
    for bad in ([2], [-1], [0, 0]):
        d = core.dispatch
        d.ranks = bad
        core.dispatch = d
        with pytest.raises(_core.ConfigError, match="dispatch.ranks"):
            _core.prepare(core)


def test_sweeping_ranks_names_the_points():
    cfg = copy.deepcopy(config(ep=2))
    cfg["sweep"] = {"dispatch.ranks": [[0], [1]]}
    names = [sc.name for sc in moenum.from_dict(cfg)]
    assert names == ["ranks/dispatch.ranks=[0]", "ranks/dispatch.ranks=[1]"]
