"""The chain x_j = act(x_{j-1} + s y_j) and its relatives: none, skipless, cascaded and tau."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from explorer.registries import DEPTH_RULES, Param
from explorer.topology.base import TOPOLOGIES, Topology, depth_rule


class Chain(Topology):
    """x_j = act(x_{j-1} + s * y_j) (cascaded, tau), act(s * (x_{j-1} + y_j)) (tau after the addition), or act(y_j) (none).

    cascaded: the standard residual x_j = x_{j-1} + y_j (He et al.; ANCRe's "cascaded" baseline, Sec. 3.1).
    tau: the tau paper's h_l = relu(h_{l-1} + tau W_l h_{l-1}) (Sec. 2, with act = ReLU on the MLP-ResNet),
    placement="after" its Transformer without normalisation, x <- tau (x + f(x)) (Appendix H). A ResNet's
    down-sampling blocks outside the chain get the same scaling through `scale_branch` (the official code).
    tau is the parameter `tau` when learnable, else the buffer `scale` (a tensor, so batched members may
    differ in it); cascaded and none have neither.
    """

    ROLES = {"tau": "scale"}

    def __init__(self, n_blocks: int, skip: bool, scale: float | None = None, learnable: bool = False,
                 after: bool = False):
        super().__init__(n_blocks)
        self.skip = skip
        self.after = after
        self.learnable = learnable
        self.scaled = scale is not None
        if learnable:
            self.tau = nn.Parameter(torch.tensor(float(scale)))
            # One tau shared by all blocks; its gradient is averaged over blocks (tau paper, Sec. 5.2).
            self.tau.register_hook(lambda grad: grad / max(n_blocks, 1))
        elif self.scaled:
            self.register_buffer("scale", torch.tensor(float(scale)), persistent=False)

    @property
    def tau_value(self) -> torch.Tensor | None:
        """tau: the learnable parameter or the fixed buffer; None without a scale."""
        return self.tau if self.learnable else self.scale if self.scaled else None

    def branch_scales(self) -> torch.Tensor:
        if not self.scaled:
            return super().branch_scales()
        return self.tau_value.detach().double().cpu().expand(self.n_blocks)

    def scale_branch(self, y: torch.Tensor) -> torch.Tensor:
        """tau * y for a residual block outside the chain (a ResNet's down-sampling blocks: the tau paper's code
        scales every block's branch); y unchanged without a skip, without a scale or with placement=after."""
        if not self.skip or not self.scaled or self.after:
            return y
        return y * self.tau_value

    def run(self, x0, blocks, acts):
        x = x0
        if not self.skip:
            for block, act in zip(blocks, acts):
                x = act(block(x))
            return x
        if not self.scaled:
            for block, act in zip(blocks, acts):
                x = act(x + block(x))
            return x
        tau = self.tau_value
        for block, act in zip(blocks, acts):
            y = block(x)
            x = act((x + y) * tau) if self.after else act(torch.addcmul(x, tau, y))
        return x

    def own_matrix(self):
        size = self.n_blocks + 1
        if not self.skip:
            return np.zeros((size, size))
        return np.eye(size, k=-1) * (float(self.tau_value) if self.after else 1.0)


TOPOLOGIES.register("none", "no residual connection: input_j = y_{j-1} (plain; a Transformer block keeps its inner "
                            "attention-to-MLP skip, see skipless)", shareable=True, residual=False)(
    lambda n_blocks, width, depth: Chain(n_blocks, skip=False))
TOPOLOGIES.register("skipless", "Transformers only: no residual on attention or MLP (Cutting the Skip); the blocks are "
                                "the attention and MLP sub-blocks", residual=False, transformer_only=True, level="module")(
    lambda n_blocks, width, depth: Chain(n_blocks, skip=False))
TOPOLOGIES.register("cascaded", "standard residual: input_j = x_0 + y_1 + ... + y_{j-1}", shareable=True)(
    lambda n_blocks, width, depth: Chain(n_blocks, skip=True))


@TOPOLOGIES.register(
    "tau",
    "residual with the branch scaled by tau (a number or 1/L, 1/sqrt(L), 1/L^0.25), fixed or learnable",
    (
        Param("value", "rule", "1/sqrt(L)", f"tau: a number or one of {', '.join(DEPTH_RULES)} (L = model depth)", low=0.0, high=100.0),
        Param("learnable", "bool", False, "learn one shared tau (initialised from its rule, gradient averaged over blocks, lr / 10)"),
        Param("placement", "choice", "branch", "branch: x + tau f(x) (the tau paper's ResNet); after: tau (x + f(x)), "
                                               "after each residual addition (its Transformer without normalisation, "
                                               "Appendix H)", choices=("branch", "after")),
    ),
    shareable=True,
    examples=({"value": 0.3}, {"value": "1/L", "learnable": True}, {"value": 0.5, "placement": "after"}),
)
def _tau(n_blocks, width, depth, value, learnable, placement):
    return Chain(n_blocks, skip=True, scale=depth_rule(value, depth), learnable=learnable, after=placement == "after")
