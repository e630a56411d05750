"""`megatron.sequential`: Megatron-core's own `SequentialMLP` experts on the local spec
(ColumnParallelLinear / RowParallelLinear), the real module, in one process (torch.distributed gloo,
world size 1, `parallel_state` with TP = PP = EP = 1). Configured as Megatron trains MoE layers:

- the fused weighted SwiGLU (`bias_activation_fusion`, Megatron's `weighted_bias_swiglu_impl`) where
  Megatron allows it; it rejects an FC1 bias, so with bias Megatron runs its unfused eager path
  (`silu(g) * l` rounded to the dtype before the probs multiply: moenum names that at stage `a`);
- gradient-accumulation fusion: weight gradients accumulated in fp32 into `main_grad`. Its kernel
  (apex's `fused_weight_gradient_mlp_cuda`) is CUDA-only; where it is missing, the adapter gives
  Megatron the same operation in torch (an fp32 GEMM of the dtype's values added to main_grad);
- the experts' linears take the explicit-expert-communication branch, as Megatron does whenever
  EP > 1: at EP = TP = 1 the other branch returns a view that `output += bias * probs` cannot modify
  in place (an autograd error in Megatron itself).

Bias gradients are what Megatron's autograd gives (the bias's dtype). Stages come from forward
hooks on the linears (capture.py)."""
from __future__ import annotations

import os
import tempfile
import warnings

import torch
import torch.nn.functional as F

from ..errors import NotRun, NotSupported


def _megatron():
    try:
        with warnings.catch_warnings():  # its "Apex / TransformerEngine not installed" notes say nothing here
            warnings.simplefilter("ignore", UserWarning)
            from megatron.core import parallel_state
            from megatron.core.models.backends import LocalSpecProvider
            from megatron.core.process_groups_config import ProcessGroupCollection
            from megatron.core.tensor_parallel import layers
            from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError as e:
        raise NotRun(f"megatron-core is not importable ({e}); pip install -r requirements-torch.txt") from None
    return parallel_state, LocalSpecProvider, ProcessGroupCollection, layers, TransformerConfig


class _Fp32WgradAccumulation:
    """apex's fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32 in torch: main_grad += dy^T . x
    with fp32 accumulation of the inputs' values."""

    @staticmethod
    def wgrad_gemm_accum_fp32(total_input, grad_output, main_grad):
        x = total_input.reshape(-1, total_input.shape[-1]).float()
        dy = grad_output.reshape(-1, grad_output.shape[-1]).float()
        main_grad.add_(dy.t() @ x)


def _one_process_parallel_state(parallel_state):
    """torch.distributed (gloo, world size 1) and Megatron's parallel state with every size 1."""
    import torch.distributed as dist
    if not dist.is_initialized():
        store = os.path.join(tempfile.mkdtemp(prefix="moenum-megatron-"), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                                 expert_model_parallel_size=1)


def _experts_config(TransformerConfig, spec, **options):
    """The TransformerConfig of one MoE layer's experts as the spec describes them (SwiGLU, the fused
    activation where Megatron allows it), plus each adapter's own options."""
    return TransformerConfig(
        num_layers=1, hidden_size=spec.hidden, ffn_hidden_size=spec.ffn, moe_ffn_hidden_size=spec.ffn,
        num_attention_heads=1, num_moe_experts=spec.num_local_experts, add_bias_linear=spec.bias,
        gated_linear_unit=True, activation_func=F.silu, bias_activation_fusion=not spec.bias,
        params_dtype=spec.dtype, bf16=spec.dtype == torch.bfloat16, perform_initialization=False, **options)


class MegatronSequentialExperts:
    def __init__(self, spec):
        if spec.recipe not in ("fp32", "bf16"):
            raise NotSupported(f"megatron.sequential runs fp32 and bf16, not {spec.recipe}")
        if spec.bias and spec.bias_mode != "separate":
            raise NotSupported("megatron.sequential adds the FC1 bias after the GEMM (bias_mode: separate)")
        parallel_state, LocalSpecProvider, ProcessGroupCollection, layers, TransformerConfig = _megatron()
        _one_process_parallel_state(parallel_state)
        if not getattr(layers, "_grad_accum_fusion_available", False):
            layers.fused_weight_gradient_mlp_cuda = _Fp32WgradAccumulation
            layers._grad_accum_fusion_available = True
        self.spec = spec
        config = _experts_config(TransformerConfig, spec, use_cpu_initialization=True,
                                 gradient_accumulation_fusion=True)
        experts = LocalSpecProvider().grouped_mlp_modules(False)
        pgs = ProcessGroupCollection.use_mpu_process_groups()
        self.module = experts(spec.num_local_experts, config, pg_collection=pgs).to(spec.device)
        for expert in self.module.local_experts:
            for lin in (expert.linear_fc1, expert.linear_fc2):
                lin.explicit_expert_comm = True

    def load_weights(self, w1, b1, w2, b2):
        with torch.no_grad():
            for e, expert in enumerate(self.module.local_experts):
                for lin, w, b in ((expert.linear_fc1, w1, b1), (expert.linear_fc2, w2, b2)):
                    lin.weight.copy_(w[e])
                    lin.weight.main_grad = torch.zeros_like(lin.weight, dtype=torch.float32)
                    lin.weight.grad = None
                    if b is not None:
                        lin.bias.copy_(b[e])
                        lin.bias.grad = None

    def __call__(self, hidden, tokens_per_expert, probs):
        output, output_bias = self.module(hidden, tokens_per_expert, probs)
        assert output_bias is None  # SequentialMLP adds the expert bias itself
        return output

    def weight_grads(self):
        experts = self.module.local_experts
        grads = {"dw1": torch.stack([e.linear_fc1.weight.main_grad for e in experts]),
                 "dw2": torch.stack([e.linear_fc2.weight.main_grad for e in experts])}
        if self.spec.bias:
            zero = lambda p: p.grad if p.grad is not None else torch.zeros_like(p)
            grads["db1"] = torch.stack([zero(e.linear_fc1.bias) for e in experts])
            grads["db2"] = torch.stack([zero(e.linear_fc2.bias) for e in experts])
        return grads


def make(spec):
    return MegatronSequentialExperts(spec)
