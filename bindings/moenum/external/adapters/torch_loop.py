"""`torch.loop`: the layer in plain PyTorch, one matmul per expert in the recipe's dtype, autograd
backward (wgrads in fp32, linear.py); CPU or GPU. The activation, probs multiply and FC2 bias follow
numerics.md §1 (fp32 from the dtype's values, one rounding each)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear import Fp32MasterExperts, linear


class TorchLoopExperts(Fp32MasterExperts):
    name = "torch.loop"
    recipes = ("fp32", "bf16")

    def _expert(self, e, x, p):
        s = self.spec
        h = linear(x, self.w1[e])
        if s.bias:
            if s.bias_mode == "epilogue":  # fp32 accumulator + bias, one rounding
                h = (x.float() @ self.w1[e].t() + self.b1[e]).to(x.dtype) if s.dtype != torch.float32 \
                    else x @ self.w1[e].t() + self.b1[e]
            else:
                h = (h.float() + self.b1[e]).to(x.dtype)
        g, l = h.chunk(2, dim=-1)
        act = F.silu(g.float()) * l.float()
        a = (act * p[:, None]).to(x.dtype)
        o = linear(a, self.w2[e])
        out = (o.float() + self.b2[e] * p[:, None]).to(x.dtype) if s.bias else o
        return h, act, a, o, out

    def forward(self, hidden, tokens_per_expert, probs):
        counts = tokens_per_expert.tolist()  # the loop needs host counts
        parts = {k: [] for k in ("h", "act", "a", "o")}
        outs, start = [], 0
        for e, n in enumerate(counts):
            h, act, a, o, out = self._expert(e, hidden[start:start + n], probs[start:start + n])
            h.retain_grad()
            a.retain_grad()
            for k, v in zip(parts, (h, act, a, o)):
                parts[k].append(v)
            outs.append(out)
            start += n
        self._saved = parts
        return torch.cat(outs)

    def stages(self):
        st = {k: torch.cat([v.detach() for v in parts]) for k, parts in self._saved.items()}
        for k, dk in (("h", "dh"), ("a", "da")):
            grads = [v.grad if v.grad is not None else torch.zeros_like(v) for v in self._saved[k]]
            if any(v.grad is not None for v in self._saved[k]):
                st[dk] = torch.cat(grads)
        return st


def make(spec):
    return TorchLoopExperts(spec)
