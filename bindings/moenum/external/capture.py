"""Stage capture through forward hooks, for experts modules built of torch.nn.Modules.

A submodule named `linear_fc1` (Megatron's name) gives `h` (its output; when it returns
(output, bias), as Megatron's linears with skip_bias_add do, `h = output + bias`, the addition the
MLP performs next) and `dh` (the gradient at its output); one named `linear_fc2` gives `a` (its
input), `da` (the gradient at its input) and `o` (its output without bias). A module calls them once
per expert or once for all: the captures are concatenated in call order, which is row order."""
from __future__ import annotations

import torch


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


class HookCapture:
    """Installed on a module for one forward + backward; `stages()` concatenates what it saw."""

    def __init__(self, module):
        self.forward: dict[str, list] = {"h": [], "a": [], "o": []}
        self.backward: dict[str, dict] = {"dh": {}, "da": {}}
        self.handles = []
        if not isinstance(module, torch.nn.Module):
            module = getattr(module, "module", None)
        if not isinstance(module, torch.nn.Module):
            return
        for name, sub in module.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "linear_fc1":
                self.handles.append(sub.register_forward_hook(self._fc1))
            elif leaf == "linear_fc2":
                self.handles.append(sub.register_forward_hook(self._fc2))

    def _grad_hook(self, stage: str, slot: int, tensor):
        if tensor.requires_grad:
            tensor.register_hook(lambda g: self.backward[stage].__setitem__(slot, g.detach().clone()))

    def _fc1(self, _mod, _inputs, output):
        h = _first(output)
        bias = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
        slot = len(self.forward["h"])
        self._grad_hook("dh", slot, h)
        with torch.no_grad():
            self.forward["h"].append((h + bias if bias is not None else h).detach().clone())

    def _fc2(self, _mod, inputs, output):
        a = _first(inputs)
        slot = len(self.forward["a"])
        self._grad_hook("da", slot, a)
        self.forward["a"].append(a.detach().clone())
        self.forward["o"].append(_first(output).detach().clone())

    def stages(self) -> dict:
        out = {k: torch.cat(v) for k, v in self.forward.items() if v}
        for k, grads in self.backward.items():
            fwd = self.forward["h" if k == "dh" else "a"]
            # autograd calls no hook for an expert that got no rows
            parts = [grads.get(i, torch.empty_like(f) if f.shape[0] == 0 else None) for i, f in enumerate(fwd)]
            if fwd and all(p is not None for p in parts):
                out[k] = torch.cat(parts)
        return out

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
