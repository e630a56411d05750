"""`megatron.te_grouped`: Megatron-core's `TEGroupedMLP` on TransformerEngine's `GroupedLinear`
(CUDA), set up like megatron.sequential (one process, parallel_state of size 1). Where
TransformerEngine is not importable it is not_run with the reason; mxfp8 only where TE has it
(Blackwell), else not_supported."""
from __future__ import annotations

import torch

from ..errors import NotRun, NotSupported
from .megatron_sequential import _experts_config, _megatron, _one_process_parallel_state


def check_available():
    """NotRun with the reason where TransformerEngine (or Megatron's TE spec) is not importable."""
    try:
        import transformer_engine  # noqa: F401
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider  # noqa: F401
    except ImportError as e:
        raise NotRun(f"TransformerEngine is not importable here ({e})") from None


class MegatronTEGroupedExperts:
    def __init__(self, spec):
        check_available()
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider
        if spec.recipe not in ("fp32", "bf16"):
            raise NotSupported(f"megatron.te_grouped runs fp32 and bf16 here, not {spec.recipe}")
        parallel_state, _, ProcessGroupCollection, _, TransformerConfig = _megatron()
        _one_process_parallel_state(parallel_state)
        self.spec = spec
        config = _experts_config(TransformerConfig, spec, moe_grouped_gemm=True, gradient_accumulation_fusion=False)
        experts = TESpecProvider().grouped_mlp_modules(True)
        pgs = ProcessGroupCollection.use_mpu_process_groups()
        self.module = experts(spec.num_local_experts, config, pg_collection=pgs).to(spec.device)

    def _params(self, lin, kind):
        return [getattr(lin, f"{kind}{e}") for e in range(self.spec.num_local_experts)]

    def load_weights(self, w1, b1, w2, b2):
        with torch.no_grad():
            for lin, w, b in ((self.module.linear_fc1, w1, b1), (self.module.linear_fc2, w2, b2)):
                for e, p in enumerate(self._params(lin, "weight")):
                    p.copy_(w[e])
                if b is not None:
                    for e, p in enumerate(self._params(lin, "bias")):
                        p.copy_(b[e])

    def __call__(self, hidden, tokens_per_expert, probs):
        output, output_bias = self.module(hidden, tokens_per_expert, probs)
        assert output_bias is None
        return output

    def weight_grads(self):
        stack = lambda lin, kind: torch.stack([p.grad if p.grad is not None else torch.zeros_like(p)
                                               for p in self._params(lin, kind)])
        g = {"dw1": stack(self.module.linear_fc1, "weight"), "dw2": stack(self.module.linear_fc2, "weight")}
        if self.spec.bias:
            g.update(db1=stack(self.module.linear_fc1, "bias"), db2=stack(self.module.linear_fc2, "bias"))
        return g


def make(spec):
    return MegatronTEGroupedExperts(spec)


make.default_device = "cuda"
make.check_available = check_available
