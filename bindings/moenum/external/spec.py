"""What an external experts module is built for: `moenum.ExpertsSpec`, the argument of FACTORY(spec)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExpertsSpec:
    """The local experts of one EP rank, as a factory sees them (interfaces.md, "External backends").

    Weights come later through load_weights(w1, b1, w2, b2) in the layouts of numerics.md §1, local
    experts only: w1 [E_local, 2F, H], w2 [E_local, H, F], b1 [E_local, 2F], b2 [E_local, H]."""
    num_local_experts: int
    hidden: int
    ffn: int
    activation: str            # "swiglu": act = silu(g) * l with [g, l] = chunk(h, 2)
    bias: bool
    recipe: str                # fp32 | bf16 | mxfp8
    device: Any                # torch.device
    dtype: Any                 # torch.dtype of the hidden rows, weights and the output
    ep_rank: int = 0
    ep_size: int = 1
    first_expert: int = 0      # global id of local expert 0
    bias_mode: str = "separate"  # FC1 bias after the rounded GEMM (separate) or in its epilogue
