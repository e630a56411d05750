"""`torch.grouped_mm`: the layer on `torch._grouped_mm` with device-side offsets (the token counts
never leave the GPU), bf16, CUDA only. Forward and dgrad GEMMs in bf16; the weight gradients as an
grouped GEMM of the fp32 values (main_grad semantics, as linear.py). Elementwise steps as torch.loop.
`torch.grouped_mm@cpu` runs torch's CPU fallback of the same operator."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear import Fp32MasterExperts


def _col_major(w):
    """[G, R, C] with column-major inner matrices, the layout _grouped_mm's second operand wants."""
    return w.transpose(1, 2).contiguous().transpose(1, 2)


class GroupedLinearFp32Wgrad(torch.autograd.Function):
    """y[rows of g] = x[rows of g] . w[g]^T for each group g (offs: cumulative row ends, int32)."""

    @staticmethod
    def forward(ctx, x, w_master, offs):
        w = w_master.to(x.dtype)
        ctx.save_for_backward(x, w, offs)
        return torch._grouped_mm(x, w.transpose(1, 2), offs=offs)

    @staticmethod
    def backward(ctx, dy):
        x, w, offs = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch._grouped_mm(dy, _col_major(w), offs=offs)
        # bf16 grouped GEMMs write bf16 only: the wgrad runs on the fp32 values (exact) instead
        dw = torch._grouped_mm(dy.t().float(), x.float(), offs=offs)
        return dx, dw, None


class TorchGroupedMmExperts(Fp32MasterExperts):
    name = "torch.grouped_mm"
    recipes = ("bf16",)

    def forward(self, hidden, tokens_per_expert, probs):
        offs = torch.cumsum(tokens_per_expert, 0).to(torch.int32)
        rows = hidden.shape[0]
        expert_of_row = torch.repeat_interleave(torch.arange(len(tokens_per_expert), device=hidden.device),
                                                tokens_per_expert, output_size=rows)
        h = GroupedLinearFp32Wgrad.apply(hidden, self.w1, offs)
        if self.spec.bias:
            h = (h.float() + self.b1[expert_of_row]).to(hidden.dtype)
        g, l = h.chunk(2, dim=-1)
        act = F.silu(g.float()) * l.float()
        a = (act * probs[:, None]).to(hidden.dtype)
        o = GroupedLinearFp32Wgrad.apply(a, self.w2, offs)
        out = (o.float() + self.b2[expert_of_row] * probs[:, None]).to(hidden.dtype) if self.spec.bias else o
        h.retain_grad()
        a.retain_grad()
        self._saved = {"h": h, "act": act, "a": a, "o": o}
        return out

    def stages(self):
        st = {k: v.detach() for k, v in self._saved.items()}
        for k, dk in (("h", "dh"), ("a", "da")):
            if self._saved[k].grad is not None:
                st[dk] = self._saved[k].grad
        return st


def make(spec):
    return TorchGroupedMmExperts(spec)


make.default_device = "cuda"
