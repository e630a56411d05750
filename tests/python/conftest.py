import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def moenum_cli(*args, cwd=None, timeout=600):
    """Run the installed `moenum` command as a user would: a fresh process."""
    exe = shutil.which("moenum", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "moenum"]  # not pip-installed (GPU machine)
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


@pytest.fixture
def tiny_config():
    """A small valid scenario mapping; tests change one thing at a time."""
    return {
        "name": "tiny",
        "seed": 5,
        "model": {"experts": 4, "hidden": 32, "ffn": 32, "topk": 2, "bias": True},
        "tokens": 32,
        "routing": {"score": "softmax", "skew": {"kind": "zipf", "s": 0.8}},
        "dispatch": {"ep": 2, "padding": "none"},
        "recipe": {"name": "bf16"},
        "backends": ["golden", "reference"],
        "output": {"inputs": True},
    }


def with_changes(cfg: dict, **changes) -> dict:
    """A deep copy of a scenario mapping with nested keys replaced: `recipe__name="mxfp8"` sets
    cfg["recipe"]["name"]."""
    cfg = copy.deepcopy(cfg)
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg
