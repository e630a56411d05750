"""A linear layer as production MoE training runs it: forward and dgrad GEMMs in the recipe's dtype,
the weight gradient accumulated in fp32 into the fp32 master weight (Megatron's main_grad with
gradient-accumulation fusion), so wgrads are never rounded to bf16."""
from __future__ import annotations

import torch

from ..errors import NotSupported


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


class Fp32MasterExperts(torch.nn.Module):
    """What the bundled torch adapters share: the recipes they run, fp32 master weights whose .grad
    are the weight gradients, and the tensors of the last forward kept for stages()."""

    name = ""
    recipes: tuple = ()

    def __init__(self, spec):
        super().__init__()
        if spec.recipe not in self.recipes:
            raise NotSupported(f"{self.name} runs {' and '.join(self.recipes)}, not {spec.recipe}")
        self.spec = spec
        self._saved = {}

    def load_weights(self, w1, b1, w2, b2):
        self.w1, self.b1, self.w2, self.b2 = fp32_masters(w1, b1, w2, b2)

    def weight_grads(self):
        g = {"dw1": self.w1.grad, "dw2": self.w2.grad}
        if self.spec.bias:
            g.update(db1=self.b1.grad, db2=self.b2.grad)
        return g
