"""Scenario files: load YAML, check every key against the schema (errors name file, line, key),
fill defaults, expand sweeps into one scenario per point, and convert to the C++ struct."""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ScenarioError

# Limits that keep a small file from taking the machine: YAML aliases can multiply a 1 kB file into
# billions of values, a sweep's product into more points than can be held.
MAX_YAML_NODES = 100_000
MAX_SWEEP_POINTS = 100_000
from .scenario_schema import (HOPPER_MMA_RECIPES, INPUT_REGIME, INPUT_TENSORS, MX_BLOCK, RECIPE_ALIGN, SCHEMA, SPECIAL_FRACTIONS,
                              Key)


@dataclass
class Scenario:
    """One expanded, validated scenario point: the full config dict plus where it came from."""
    config: dict
    file: str = "<api>"
    lines: dict = field(default_factory=dict, repr=False)  # dotted key -> line number
    sweep_point: dict = field(default_factory=dict)       # dotted key -> value, for campaigns

    @property
    def name(self) -> str:
        return self.config["name"]

    def line_of(self, key: str) -> int | None:
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return None

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(message, self.file, self.line_of(key), key)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.config, sort_keys=False)

    def get(self, dotted: str):
        node = self.config
        for part in dotted.split("."):
            node = node[part]
        return node

    def __getitem__(self, key):
        return self.config[key]


# ---- YAML with line numbers ------------------------------------------------------------------

def _line_map(node, prefix: str, lines: dict, file: str) -> None:
    """Record the 1-based line of every mapping key, and reject duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            dotted = f"{prefix}.{key}" if prefix else key
            if key in seen:
                raise ScenarioError("duplicate key", file, key_node.start_mark.line + 1, dotted)
            seen.add(key)
            lines[dotted] = key_node.start_mark.line + 1
            _line_map(value_node, dotted, lines, file)


def _expanded_size(node, file: str, memo: dict) -> int:
    """Nodes in the document with every alias expanded, counted without expanding: an alias is the
    same node object as its anchor, so each node's count is computed once."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a recursive alias counts once
    children = (node.value if isinstance(node, yaml.SequenceNode)
                else [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
    size = 1 + sum(_expanded_size(c, file, memo) for c in children)
    if size > MAX_YAML_NODES:
        raise ScenarioError(f"the YAML expands (through its aliases) to more than {MAX_YAML_NODES} values; "
                            f"a scenario needs a few hundred", file, node.start_mark.line + 1)
    memo[key] = size
    return size


def _parse_yaml(text: str, file: str) -> tuple[Any, dict]:
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # the reader refuses non-printable characters here already
        node = loader.get_single_node()
        if node is not None:
            _expanded_size(node, file, {})
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise ScenarioError(f"invalid YAML: {e.problem or e}", file, line) from None
    except yaml.reader.ReaderError as e:
        raise ScenarioError(f"invalid YAML: character #x{e.character:04x} is not allowed in YAML text",
                            file, text.count("\n", 0, e.position) + 1) from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"invalid YAML: {e}", file) from None
    except RecursionError:
        raise ScenarioError("invalid YAML: nested too deeply", file) from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict = {}
    if node is not None:
        _line_map(node, "", lines, file)
    return data, lines


# ---- validation against the schema -----------------------------------------------------------

def _type_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _looks_like_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_leaf(spec: Key, value, key: str, err) -> Any:
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        hint = ""
        if float in kinds and isinstance(value, str) and _looks_like_number(value):
            # YAML 1.1 (PyYAML) reads 1e39 as a string: a float needs a dot and a signed exponent
            hint = (f" (YAML reads {value} as text: write it with a dot and a signed exponent, "
                    f"e.g. {float(value):.1e})")
        raise err(key, f"must be {_type_name(spec.kind)}, got {type(value).__name__} {value!r}{hint}")
    if float in kinds and isinstance(value, int):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value) and not spec.nonfinite:
        raise err(key, f"must be a finite number, got {value} (special values as inputs: "
                       "inputs.<tensor>.regime: special)")
    if spec.choices and value not in spec.choices:
        raise err(key, f"'{value}' is not one of: {', '.join(spec.choices)}")
    if spec.check:
        problem = spec.check(value)
        if problem:
            raise err(key, problem)
    return value


def _apply_schema(schema: dict, data, prefix: str, err) -> dict:
    """Validate `data` against `schema`, returning a new dict with every default filled in."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise err(prefix, f"must be a mapping, got {type(data).__name__}")
    for key in data:
        if key not in schema:
            dotted = f"{prefix}.{key}" if prefix else str(key)
            known = ", ".join(schema)
            raise err(dotted, f"unknown key (known here: {known})")
    out = {}
    for key, spec in schema.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(spec, dict):
            out[key] = _apply_schema(spec, data.get(key), dotted, err)
        elif key in data and data[key] is not None:
            out[key] = _check_leaf(spec, data[key], dotted, err)
        elif spec.required:
            raise err(dotted, "required key is missing")
        else:
            out[key] = copy.deepcopy(spec.default)
    return out


def _normalise_shorthands(data: dict) -> dict:
    """`skew: zipf` means `skew: {kind: zipf}`."""
    routing = data.get("routing")
    if isinstance(routing, dict) and isinstance(routing.get("skew"), str):
        routing["skew"] = {"kind": routing["skew"]}
    return data


def _check_combinations(cfg: dict, err) -> None:
    """Cross-key rules that no single key can check (interfaces.md: impossible combinations)."""
    m, d, r = cfg["model"], cfg["dispatch"], cfg["recipe"]
    if m["topk"] > m["experts"]:
        raise err("model.topk", f"topk ({m['topk']}) exceeds experts ({m['experts']})")
    if cfg["tokens"] % d["ep"]:
        raise err("dispatch.ep", f"tokens ({cfg['tokens']}) not divisible by ep ({d['ep']})")
    if m["experts"] % d["ep"]:
        raise err("dispatch.ep", f"experts ({m['experts']}) not divisible by ep ({d['ep']})")
    outside = [r for r in d["ranks"] or () if not 0 <= r < d["ep"]]
    if outside:
        raise err("dispatch.ranks", f"rank {outside[0]} is not in [0, ep) = [0, {d['ep']})")
    if d["transport"] != "local" and d["ranks"]:
        raise err("dispatch.ranks", f"transport {d['transport']} runs every EP rank, one per process; "
                  f"dispatch.ranks simulates a subset with transport local")
    if d["align"] is None:
        d["align"] = RECIPE_ALIGN.get(r["name"], 0) if d["padding"] != "none" or r["name"] in RECIPE_ALIGN else 0
        if d["padding"] != "none" and d["align"] == 0:
            raise err("dispatch.align", f"padding '{d['padding']}' needs dispatch.align: recipe "
                      f"'{r['name']}' has no default alignment")
    elif d["padding"] != "none" and d["align"] == 0:
        raise err("dispatch.align", f"padding '{d['padding']}' needs align > 0")
    if r["name"] == "mxfp8":
        for key in ("hidden", "ffn"):
            if m[key] % MX_BLOCK:
                raise err(f"model.{key}", f"{key} ({m[key]}) must be a multiple of {MX_BLOCK} for mxfp8")
        if d["padding"] != "none" and d["align"] % MX_BLOCK:
            raise err("dispatch.align", f"align ({d['align']}) must be a multiple of {MX_BLOCK} for mxfp8")
    if r["accumulate"] == "hopper_mma":
        if r["name"] not in HOPPER_MMA_RECIPES:
            raise err("recipe.accumulate", f"hopper_mma models bf16 tensor-core GEMMs: recipe '{r['name']}' "
                      f"is not one of {', '.join(HOPPER_MMA_RECIPES)}")
        if r["bias_mode"] != "separate":
            raise err("recipe.accumulate", "hopper_mma models gpu.grouped's kernels, which add the FC1 bias "
                      "separately: bias_mode must be separate")
    skew = cfg["routing"]["skew"]
    if skew["kind"] == "counts":
        counts = skew["counts"]
        if counts is None:
            raise err("routing.skew.counts", "skew kind 'counts' needs a counts list")
        if len(counts) != m["experts"]:
            raise err("routing.skew.counts", f"has {len(counts)} entries, expected experts = {m['experts']}")
        if sum(counts) != cfg["tokens"] * m["topk"]:
            raise err("routing.skew.counts", f"sums to {sum(counts)}, expected tokens*topk = "
                      f"{cfg['tokens'] * m['topk']}")
        if max(counts) > cfg["tokens"]:
            raise err("routing.skew.counts", f"a count ({max(counts)}) exceeds tokens ({cfg['tokens']})")
    if skew["kind"] == "hot" and skew["experts"] > m["experts"]:
        raise err("routing.skew.experts", f"hot experts ({skew['experts']}) exceed experts ({m['experts']})")
    from . import _core, traits
    for b in cfg["backends"]:
        if not traits.known(b):
            raise err("backends", f"unknown backend '{b}' (known: {', '.join(_core.backend_names())}, "
                                  f"{', '.join(traits.BUNDLED_EXTERNAL)}, torch:PKG.MODULE:FACTORY)")
    if len(set(cfg["backends"])) != len(cfg["backends"]):
        raise err("backends", "lists a backend twice")
    if cfg["compare"]["baseline"] not in cfg["backends"]:
        raise err("compare.baseline", f"baseline '{cfg['compare']['baseline']}' is not among the backends")


def _validate_inputs(data, err) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise err("inputs", "must be a mapping of tensor name to regime")
    out = {}
    for tensor, regime in data.items():
        if tensor not in INPUT_TENSORS:
            raise err(f"inputs.{tensor}", f"unknown input tensor (known: {', '.join(INPUT_TENSORS)})")
        key = f"inputs.{tensor}"
        reg = _apply_schema(INPUT_REGIME, regime, key, err)
        given = regime or {}
        if "special" in given and reg["regime"] != "special":
            raise err(f"{key}.special", f"applies to regime: special only (regime here: {reg['regime']})")
        if reg["regime"] == "uniform" and given.get("dist", "uniform") != "uniform":
            raise err(f"{key}.dist", "regime uniform draws uniformly: leave dist out, or use regime normal")
        total = sum(reg["special"][f] for f in SPECIAL_FRACTIONS)
        if total > 1.0:
            raise err(f"{key}.special", f"the fractions add up to {total:g}, more than 1")
        # the filled config says what was drawn, so that the stored scenario_yaml loads back (replay)
        if reg["regime"] != "special":
            del reg["special"]
        if reg["regime"] == "uniform":
            reg["dist"] = "uniform"
        out[tensor] = reg
    return out


def validate_config(data, file: str = "<api>", lines: dict | None = None) -> dict:
    """Validate one (unexpanded) scenario mapping and return it with defaults filled in."""
    sc = Scenario({}, file, lines or {})
    err = sc.error
    if not isinstance(data, dict):
        raise ScenarioError("a scenario file must hold a mapping at the top level", file, 1)
    data = _normalise_shorthands(copy.deepcopy(data))
    sweep = data.pop("sweep", None)
    inputs = data.pop("inputs", None)
    cfg = _apply_schema(SCHEMA, data, "", err)
    cfg["inputs"] = _validate_inputs(inputs, err)
    if sweep is not None:
        cfg["sweep"] = sweep
    return cfg


# ---- sweeps ------------------------------------------------------------------------------------

def _schema_has(dotted: str) -> bool:
    node: Any = SCHEMA
    parts = dotted.split(".")
    if parts[0] == "inputs":
        return len(parts) >= 3 and parts[1] in INPUT_TENSORS
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True  # a leaf, or a whole section (then each value is a mapping)


def _set_dotted(d: dict, dotted: str, value, err) -> None:
    """Set `value` at `dotted` in the point; a section on the way that is not a mapping (`recipe: bf16`
    under a sweep of `recipe.grad_format`) is the file's error, named at that section."""
    parts = dotted.split(".")
    for depth, part in enumerate(parts[:-1], start=1):
        if d.get(part) is None:
            d[part] = {}
        d = d[part]
        if not isinstance(d, dict):
            section = ".".join(parts[:depth])
            raise err(section, f"must be a mapping, got {type(d).__name__} (sweep.{dotted} sets a key "
                               f"inside it)")
    d[parts[-1]] = value


def _format_value(v) -> str:
    """Point names stay one path-safe token: a mapping becomes (k=v;k=v), a list [a;b]."""
    if isinstance(v, dict):
        return "(" + ";".join(f"{k}={_format_value(x)}" for k, x in v.items()) + ")"
    if isinstance(v, list):
        return "[" + ";".join(_format_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def expand(data: dict, file: str, lines: dict, progress=None) -> list[Scenario]:
    """Validate and expand one scenario mapping into its sweep points; `progress(file, done, total)`
    is called after each point."""
    base_err = Scenario({}, file, lines).error
    if not isinstance(data, dict):
        raise ScenarioError("a scenario file must hold a mapping at the top level", file, 1)
    sweep = data.get("sweep")
    raw = {k: v for k, v in data.items() if k != "sweep"}
    if sweep is None:
        cfg = validate_config(raw, file, lines)
        sc = Scenario(cfg, file, lines)
        _check_combinations(cfg, sc.error)
        return [sc]
    if not isinstance(sweep, dict) or not sweep:
        raise base_err("sweep", "must be a non-empty mapping of dotted key to a list of values")
    for key, values in sweep.items():
        if not _schema_has(str(key)):
            raise base_err(f"sweep.{key}", "not a scenario key that can be swept")
        if not isinstance(values, list) or not values:
            raise base_err(f"sweep.{key}", "must be a non-empty list of values")
    keys = list(sweep)
    total = math.prod(len(sweep[k]) for k in keys)
    if total > MAX_SWEEP_POINTS:
        raise base_err("sweep", f"makes {total} scenario points, more than {MAX_SWEEP_POINTS}: split it "
                                f"into several files (and run them with --shard)")
    points = []
    for combo in itertools.product(*(sweep[k] for k in keys)):
        point = copy.deepcopy(_normalise_shorthands(copy.deepcopy(raw)))
        for key, value in zip(keys, combo):
            _set_dotted(point, key, value, base_err)
        suffix = ",".join(f"{k}={_format_value(v)}" for k, v in zip(keys, combo))
        # Errors inside a point point at the sweep line of the key that made the point.
        point_lines = dict(lines)
        for key in keys:
            for dotted in list(point_lines):
                if dotted == key or dotted.startswith(key + "."):
                    point_lines[dotted] = lines.get(f"sweep.{key}", lines.get(dotted))
            point_lines.setdefault(key, lines.get(f"sweep.{key}"))
        cfg = validate_config(point, file, point_lines)
        cfg["name"] = f"{cfg['name']}/{suffix}"
        sc = Scenario(cfg, file, point_lines, dict(zip(keys, combo)))
        _check_combinations(cfg, sc.error)
        points.append(sc)
        if progress:
            progress(file, len(points), total)
    return points


def load_scenarios(path, progress=None) -> list[Scenario]:
    """Load a scenario file (or a folder of them): validated, defaults filled, sweeps expanded. A
    results file (.h5) gives the one point it holds, to run it again. `progress`: see expand."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        if not files:
            raise ScenarioError("no scenario files (*.yaml) in this folder", str(path))
        return [sc for f in files for sc in load_scenarios(f, progress)]
    if path.suffix == ".h5":
        return [from_results_file(path)]
    file = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ScenarioError("no such file", file) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise ScenarioError(f"cannot read: {e}", file) from None
    data, lines = _parse_yaml(text, file)
    if data is None:
        raise ScenarioError("the file is empty", file, 1)
    return expand(data, file, lines, progress)


def from_results_file(path) -> Scenario:
    """The point a results file holds (its root attribute scenario_yaml: expanded, every default
    filled), to run it again. Its name is the point's, `name/key=value,...`: the part before the
    slash follows the name rule, the rest names the swept keys, whose values are in the scenario."""
    from .results_io import open_file
    with open_file(path) as f:
        text = str(f.attrs.get("scenario_yaml", ""))
    file = f"{path}:scenario_yaml"
    data, lines = _parse_yaml(text, file)
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ScenarioError("holds no scenario with a name", file, 1)
    name = data["name"]
    base, _, suffix = name.partition("/")
    cfg = validate_config({**data, "name": base}, file, lines)
    cfg["name"] = name
    sc = Scenario(cfg, file, lines)
    swept = [part.partition("=")[0] for part in suffix.split(",")] if suffix else []
    for key in swept:
        try:
            sc.sweep_point[key] = sc.get(key)
        except (KeyError, TypeError):
            pass  # not a key of this scenario: the name alone says it
    _check_combinations(cfg, sc.error)
    return sc


def from_dict(data: dict, name_hint: str = "<api>", progress=None) -> list[Scenario]:
    """Build scenarios from a Python mapping (campaign scripts), with the same checks."""
    return expand(copy.deepcopy(data), name_hint, {}, progress)


# ---- to the C++ struct -------------------------------------------------------------------------

def to_core(sc: Scenario):
    """Fill the pybind11 `_core.Scenario` from a validated config."""
    from . import _core
    c = sc.config
    core = _core.Scenario()
    core.name, core.description = c["name"], c["description"]
    core.seed = c["seed"]
    m = core.model
    for key in ("experts", "hidden", "ffn", "topk", "activation", "bias"):
        setattr(m, key, c["model"][key])
    core.model = m
    core.tokens = c["tokens"]
    routing = core.routing
    routing.score = c["routing"]["score"]
    routing.permute_experts = c["routing"]["permute_experts"]
    routing.topk_scaling = c["routing"]["topk_scaling"]
    skew, s = routing.skew, c["routing"]["skew"]
    skew.kind, skew.s, skew.alpha = s["kind"], s["s"], s["alpha"]
    skew.hot_experts, skew.hot_share = s["experts"], s["share"]
    skew.counts = s["counts"] or []
    routing.skew = skew
    core.routing = routing
    d = core.dispatch
    d.ep, d.padding, d.align = c["dispatch"]["ep"], c["dispatch"]["padding"], c["dispatch"]["align"]
    d.ranks = c["dispatch"]["ranks"] or []
    core.dispatch = d
    r = core.recipe
    for key in ("name", "scale_rounding", "grad_format", "bias_mode", "inv_scale", "accumulate"):
        setattr(r, key, c["recipe"][key])
    core.recipe = r
    core.weights = c["weights"]
    o = core.output
    o.inputs, o.intermediates, o.diffs = c["output"]["inputs"], c["output"]["intermediates"], c["output"]["diffs"]
    core.output = o
    ex = core.execution
    ex.device = c["execution"]["device"]
    core.execution = ex
    regimes = {}
    for tensor, reg in c["inputs"].items():
        ir = _core.InputRegime()
        ir.regime, ir.dist, ir.scale = reg["regime"], reg["dist"], reg["scale"]
        ir.outlier_fraction, ir.outlier_scale = reg["outliers"]["fraction"], reg["outliers"]["scale"]
        sp = ir.special
        for key, value in reg.get("special", {}).items():
            setattr(sp, key, value)
        ir.special = sp
        regimes[tensor] = ir
    core.inputs = regimes
    return core
