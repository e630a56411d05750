"""A linear layer as production MoE training runs it: forward and dgrad GEMMs in the recipe's dtype,
the weight gradient accumulated in fp32 into the fp32 master weight (Megatron's main_grad with
gradient-accumulation fusion), so wgrads are never rounded to bf16."""
from __future__ import annotations

import torch


class LinearFp32Wgrad(torch.autograd.Function):
    """y = x . w^T in x's dtype; dx = dy . w in that dtype; dw = dy^T . x accumulated in fp32."""

    @staticmethod
    def forward(ctx, x, w_master):
        w = w_master.to(x.dtype)
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        return dy @ w, dy.t().float() @ x.float()


def linear(x, w_master):
    return LinearFp32Wgrad.apply(x, w_master)


def fp32_masters(*tensors):
    """fp32 master weights (None stays None): the GEMMs use their dtype's copies, the gradients stay fp32."""
    return tuple(None if t is None else torch.nn.Parameter(t.float()) for t in tensors)
