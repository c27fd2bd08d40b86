"""Residual branches f_j and the small layers around them, each declaring its parameters' roles.

Weights are created empty: the init scheme (explorer.init) fills every parameter by its
role, from one generator, so the same seed gives the same weights whatever the topology.
Roles live in each module's `ROLES` (parameter name -> role).
"""

from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Module):
    """y = x W^T (+ b): a dense layer whose weight has a declared role."""

    def __init__(self, d_in: int, d_out: int, role: str, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.empty(d_out)) if bias else None
        self.ROLES = {"weight": role, "bias": "bias"}

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


class LowRank(nn.Module):
    """A rank-r linear map V = U W with W: r x d ("stem.in") and U: d x r ("stem.out")."""

    ROLES = {"down": "stem.in", "up": "stem.out"}

    def __init__(self, width: int, rank: int):
        super().__init__()
        self.down = nn.Parameter(torch.empty(rank, width))
        self.up = nn.Parameter(torch.empty(width, rank))

    def forward(self, x):
        return (x @ self.down.T) @ self.up.T


class Norm(nn.Module):
    """LayerNorm, RMSNorm or BatchNorm over the feature dimension, or nothing."""

    def __init__(self, kind: str, width: int):
        super().__init__()
        self.kind = kind
        if kind == "layernorm":
            self.norm = nn.LayerNorm(width)
        elif kind == "rmsnorm":
            self.norm = nn.RMSNorm(width)
        elif kind == "batchnorm":
            self.norm = nn.BatchNorm1d(width)
        else:
            self.norm = nn.Identity()
        self.norm.ROLES = {"weight": "norm", "bias": "norm"}

    def forward(self, x):
        return self.norm(x)


ACTIVATIONS = {"relu": torch.relu, "gelu": nn.functional.gelu}


class MLPBlock(nn.Module):
    """Pre-activation MLP branch f(x) = V act(W norm(x)) (+ biases); act is ReLU or GELU."""

    def __init__(self, width: int, hidden: int, norm: str, bias: bool, activation: str = "relu"):
        super().__init__()
        self.norm = Norm(norm, width)
        self.inner = Linear(width, hidden, "stem.in", bias)
        self.outer = Linear(hidden, width, "stem.out", bias)
        self.act = ACTIVATIONS[activation]

    def forward(self, x):
        return self.outer(self.act(self.inner(self.norm(x))))
