"""Bad scenario files: exit code 2, one clear message naming the file, the line and the key, no
traceback, and no results file written."""
import textwrap

import pytest

from conftest import moenum_cli

import moenum

GOOD = """\
name: bad-input
seed: 1
model: {experts: 4, hidden: 32, ffn: 32, topk: 2}
tokens: 32
routing: {score: softmax, skew: {kind: zipf, s: 1.0}}
dispatch: {ep: 2, padding: none}
recipe: {name: bf16}
backends: [golden, reference]
"""

# (id, replace-this, with-this, expected line, expected key, expected words in the message)
CASES = [
    ("unknown_top_key", "seed: 1", "seed: 1\ncolour: blue", 3, "colour", "unknown key"),
    ("unknown_nested_key", "topk: 2}", "topk: 2, expertz: 3}", 3, "model.expertz", "unknown key"),
    ("wrong_type", "tokens: 32", "tokens: many", 4, "tokens", "must be an integer"),
    ("bool_for_int", "tokens: 32", "tokens: true", 4, "tokens", "must be an integer"),
    ("out_of_range", "topk: 2}", "topk: 0}", 3, "model.topk", "must be >= 1"),
    ("bad_choice", "name: bf16}", "name: fp4}", 7, "recipe.name", "not one of"),
    ("bad_results_choice", "backends:", "output: {results: tensors}\nbackends:", 8, "output.results", "not one of"),
    ("tokens_not_divisible_by_ep", "tokens: 32", "tokens: 33", 6, "dispatch.ep", "not divisible"),
    ("experts_not_divisible_by_ep", "ep: 2,", "ep: 8,", 6, "dispatch.ep", "not divisible"),
    ("topk_exceeds_experts", "topk: 2}", "topk: 5}", 3, "model.topk", "exceeds experts"),
    ("mxfp8_hidden_not_32", ["name: bf16}", "hidden: 32"], ["name: mxfp8}", "hidden: 48"], 3,
     "model.hidden", "multiple of 32"),
    ("missing_name", "name: bad-input\n", "", None, "name", "required"),
    ("bad_name", "name: bad-input", "name: Bad Input", 1, "name", "must match"),
    ("duplicate_key", "seed: 1", "seed: 1\nseed: 2", 3, "seed", "duplicate key"),
    ("sweep_unknown_key", "backends:", "sweep: {model.colour: [1, 2]}\nbackends:", 8,
     "sweep.model.colour", "can be swept"),
    ("sweep_not_list", "backends:", "sweep: {dispatch.ep: 2}\nbackends:", 8, "sweep.dispatch.ep",
     "non-empty list"),
    ("sweep_point_invalid", "backends:", "sweep:\n  dispatch.ep: [1, 3]\nbackends:", 9, "dispatch.ep",
     "not divisible"),
    ("counts_wrong_sum", "skew: {kind: zipf, s: 1.0}", "skew: {kind: counts, counts: [1, 2, 3, 4]}", 5,
     "routing.skew.counts", "sums to 10"),
    ("unknown_backend", "[golden, reference]", "[golden, reference, gpu.magic]", 8, "backends",
     "unknown backend"),
    ("baseline_not_run", "backends: [golden, reference]",
     "backends: [golden, reference]\ncompare: {baseline: gpu.grouped}", 9, "compare.baseline",
     "not among the backends"),
    ("padding_without_align", "padding: none", "padding: router", 6, "dispatch.align",
     "no default alignment"),
    ("invalid_yaml", "tokens: 32", "tokens: [32", None, None, "invalid YAML"),
    ("control_character", "tokens: 32", "tokens: 32\x15", 4, None, "character #x0015 is not allowed"),
    ("section_not_mapping", "recipe: {name: bf16}", "recipe: bf16", 7, "recipe", "must be a mapping"),
    ("sweep_into_section_not_mapping", ["recipe: {name: bf16}", "backends:"],
     ["recipe: bf16", "sweep: {recipe.grad_format: [bf16]}\nbackends:"], 7, "recipe",
     "must be a mapping, got str (sweep.recipe.grad_format sets a key inside it)"),
    ("negative_seed", "seed: 1", "seed: -1", 2, "seed", "must be >= 0"),
    ("bad_sample_word", "backends:", "verify: {sample: some}\nbackends:", 8, "verify.sample", "all, auto or"),
    ("zero_sample", "backends:", "verify: {sample: 0}\nbackends:", 8, "verify.sample", "all, auto or"),
    ("bool_sample", "backends:", "verify: {sample: true}\nbackends:", 8, "verify.sample", "got bool True"),
    ("bad_inv_scale", "name: bf16}", "name: mxfp8, inv_scale: exact}", 7, "recipe.inv_scale", "not one of"),
    ("bad_regime", "backends:", "inputs: {x: {regime: lognormal}}\nbackends:", 8, "inputs.x.regime",
     "not one of"),
    ("inf_scale", "backends:", "inputs: {x: {scale: .inf}}\nbackends:", 8, "inputs.x.scale",
     "must be a finite number, got inf (special values as inputs: inputs.<tensor>.regime: special)"),
    ("nan_scale", "backends:", "inputs: {x: {outliers: {scale: .nan}}}\nbackends:", 8,
     "inputs.x.outliers.scale", "must be a finite number, got nan"),
    ("exponent_without_dot", "backends:", "inputs: {x: {scale: 1e39}}\nbackends:", 8, "inputs.x.scale",
     "YAML reads 1e39 as text: write it with a dot and a signed exponent, e.g. 1.0e+39"),
    ("special_without_regime", "backends:", "inputs: {x: {special: {nan: 0.1}}}\nbackends:", 8,
     "inputs.x.special", "regime: special only"),
    ("special_fractions_over_1", "backends:",
     "inputs: {x: {regime: special, special: {nan: 0.6, inf: 0.5}}}\nbackends:", 8, "inputs.x.special",
     "add up to 1.1"),
    ("uniform_regime_normal_dist", "backends:", "inputs: {x: {regime: uniform, dist: normal}}\nbackends:", 8,
     "inputs.x.dist", "regime uniform"),
    ("inf_skew", "s: 1.0}", "s: .inf}", 5, "routing.skew.s", "must be a finite number"),
]


def _write(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_scenario_is_a_clear_error(tmp_path, case):
    _, old, new, line, key, words = case
    text = GOOD
    for o, n in zip(*((old, new) if isinstance(old, list) else ([old], [new]))):
        assert o in text
        text = text.replace(o, n, 1)
    path = _write(tmp_path, text)
    with pytest.raises(moenum.ScenarioError) as info:
        moenum.load_scenarios(path)
    err = info.value
    message = str(err)
    assert str(path) in message
    assert words in message, message
    if line is not None:
        assert err.line == line, message
        assert f"{path}:{line}:" in message
    if key is not None:
        assert err.key == key, message


def test_cli_exit_code_2_no_traceback_no_file(tmp_path):
    path = _write(tmp_path, GOOD.replace("tokens: 32", "tokens: 33"))
    out = tmp_path / "results"
    proc = moenum_cli("run", path, "-o", out)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}:6: dispatch.ep:" in proc.stderr
    assert proc.stderr.count("\n") == 1  # one clear message
    assert not out.exists() or not any(out.iterdir())


def test_cli_mxfp8_unaligned_segments_exit_2(tmp_path):
    """mxfp8 with padding none: the plan's segments are not multiples of 32 (found after routing)."""
    text = GOOD.replace("name: bf16}", "name: mxfp8}").replace("hidden: 32, ffn: 32", "hidden: 64, ffn: 64")
    path = _write(tmp_path, text)
    proc = moenum_cli("run", path, "-o", tmp_path / "results")
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "dispatch.padding" in proc.stderr and "aligned to 32" in proc.stderr
    assert f"{path}:6:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "results").glob("*.h5"))


def test_missing_file_and_empty_file(tmp_path):
    proc = moenum_cli("run", tmp_path / "nope.yaml")
    assert proc.returncode == 2 and "nope.yaml: no such file" in proc.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    proc = moenum_cli("run", empty)
    assert proc.returncode == 2 and "empty.yaml:1: the file is empty" in proc.stderr


def test_bad_arguments_exit_2(tmp_path):
    proc = moenum_cli("run", "scenarios/smoke.yaml", "--shard", "5/2", cwd=tmp_path)
    assert proc.returncode == 2
    proc = moenum_cli("run", "--bogus-flag")
    assert proc.returncode == 2


def test_existing_results_survive_bad_input(tmp_path, tiny_config):
    """A bad second run loses nothing the first one wrote."""
    res = moenum.run(moenum.from_dict(tiny_config)[0], out=tmp_path)
    before = res.path.read_bytes()
    bad = _write(tmp_path, GOOD.replace("tokens: 32", "tokens: 33"))
    proc = moenum_cli("run", bad, "-o", tmp_path)
    assert proc.returncode == 2
    assert res.path.read_bytes() == before


def test_router_padding_impossible_is_bad_input(tmp_path):
    """Found while planning the dispatch (C++): the C++ ConfigError's key field names the line."""
    text = GOOD.replace("padding: none", "padding: router, align: 32")
    path = _write(tmp_path, text)
    with pytest.raises(moenum._core.ConfigError) as info:
        moenum._core.prepare(moenum.scenario.to_core(moenum.load_scenarios(path)[0]))
    e = info.value
    assert (e.key, e.scenario) == ("dispatch.padding", "bad-input") and "dispatch.padding" not in e.message
    assert str(e) == f"scenario 'bad-input': dispatch.padding: {e.message}"
    proc = moenum_cli("run", path, "-o", tmp_path / "results")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == f"moenum: error: {path}:6: dispatch.padding: {e.message}\n"
    assert not list((tmp_path / "results").glob("*.h5"))


def test_special_values_where_they_mean_a_value(tmp_path):
    """YAML's .nan and .inf are values where a value is asked for (a special regime's stated value),
    1.0e+39 is a number (and becomes inf in bf16); the regimes reach the C++ struct."""
    text = GOOD.replace("backends:", "inputs:\n  x: {regime: special, special: {value: .nan, value_fraction: 0.5}}\n"
                        "  dy: {regime: special, special: {value: -.inf, value_fraction: 0.25}}\n"
                        "  w1: {regime: special, special: {value: 1.0e+39, value_fraction: 0.1}}\n"
                        "  w2: {regime: near_overflow}\nbackends:")
    sc = moenum.load_scenarios(_write(tmp_path, text))[0]
    x = sc.config["inputs"]["x"]
    assert x["regime"] == "special" and x["special"]["value"] != x["special"]["value"]  # NaN
    assert sc.config["inputs"]["dy"]["special"]["value"] == float("-inf")
    core = moenum.scenario.to_core(sc)
    assert core.inputs["w1"].special.value == 1e39 and core.inputs["w1"].special.value_fraction == 0.1
    assert core.inputs["w2"].regime == "near_overflow" and core.inputs["x"].regime == "special"
    assert core.inputs["x"].special.nan == 0.001  # the defaults of the other fractions
    # the stated values, rounded to bf16, are in the generated inputs
    p = moenum._core.prepare(core)
    import numpy as np
    xs, dys, w1 = (np.asarray(p.inputs[k]) for k in ("x", "dy", "w1"))
    assert 0.4 < np.isnan(xs).mean() < 0.6
    assert 0.15 < (dys == -np.inf).mean() < 0.35
    assert 0.05 < (w1 == np.inf).mean() < 0.15
