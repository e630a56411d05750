"""The `_core.pyi` stubs name exactly the public attributes of the compiled module."""
import ast

import moenum
from conftest import ROOT


def test_stub_lists_every_public_name():
    tree = ast.parse((ROOT / "bindings" / "moenum" / "_core.pyi").read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "__all__")
    public = {n for n in dir(moenum._core) if not n.startswith("_")}
    assert public == set(listed), (sorted(public - set(listed)), sorted(set(listed) - public))
