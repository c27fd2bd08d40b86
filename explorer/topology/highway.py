"""Highway: a learned, input-dependent gate per block mixes the carried stream and the block's output.

This file is the whole topology: the class, its registration (with the examples every topology test
runs) and its readable reference forward. `explorer.topology` imports every module in this folder, so
a topology written like this one is in the spec, the CLI, the app and the tests with no other file edited.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from explorer.nn.reference import reference_mixing
from explorer.registries import Param
from explorer.topology.base import TOPOLOGIES, Topology, feature_axis


def transform_gate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """T(x) = sigmoid(W_T x + b_T), one gate per feature (per channel and pixel of images)."""
    axis = feature_axis(x)
    return torch.sigmoid(F.linear(x.movedim(axis, -1), weight, bias)).movedim(-1, axis)


class Highway(Topology):
    """Highway networks (Srivastava, Greff & Schmidhuber 2015, "Highway Networks", Eq. 2-3):

        x_j = act(y_j * T_j(x_{j-1}) + x_{j-1} * (1 - T_j(x_{j-1}))),  T_j(x) = sigmoid(W_T,j x + b_T,j),

    with y_j = f_j(x_{j-1}) the block's output (for a whole Transformer block, what the block adds), the
    carry gate C = 1 - T as in the paper's Eq. 3, and T per feature and input-dependent. b_T starts at
    `gate_bias` (negative: the paper suggests -1 to -3, so the network starts close to carrying its input
    through) and W_T at 0: every block then starts with the same gate sigmoid(b_T), the weights of the blocks
    stay the same whatever the topology, and W_T learns from the first step (sigmoid has no kink).

    In the state basis the data-independent part (W_T x = 0) gives own[j, j - 1] = 1 - sigmoid(b_T,j) and
    the branch scale s_j = sigmoid(b_T,j), averaged over features; the probes record the gates of a batch.
    """

    input_dependent = True
    ROLES = {"gate_weight": "mix", "gate_bias": "mix"}

    def __init__(self, n_blocks: int, width: int, gate_bias: float = -2.0):
        super().__init__(n_blocks)
        self.gate_weight = nn.Parameter(torch.zeros(n_blocks, width, width))  # W_T of block j: gate_weight[j - 1]
        self.gate_bias = nn.Parameter(torch.full((n_blocks, width), float(gate_bias)))

    def run(self, x0, blocks, acts):
        x = x0
        for j, (block, act) in enumerate(zip(blocks, acts), start=1):
            t = transform_gate(x, self.gate_weight[j - 1], self.gate_bias[j - 1])
            if self.recording is not None:  # the carry weight 1 - T of the state x_{j-1} in x_j
                self.record(j, [[j - 1]], (1 - t).mean(feature_axis(t)))
            x = act(x + t * (block(x) - x))
        return x

    def branch_scales(self):
        return torch.sigmoid(self.gate_bias.detach()).mean(-1).double().cpu()

    def own_matrix(self):
        own = np.zeros((self.n_blocks + 1,) * 2)
        own[np.arange(1, self.n_blocks + 1), np.arange(self.n_blocks)] = 1 - self.branch_scales().numpy()
        return own


@TOPOLOGIES.register(
    "highway",
    "Highway: x_j = T(x) y_j + (1 - T(x)) x_{j-1} with a learned input-dependent gate T(x) = sigmoid(W_T x + b_T) "
    "per block and feature",
    (Param("gate_bias", "float", -2.0, "b_T at init (the paper: -1 to -3, so that each block starts by carrying "
                                       "its input through)", low=-10.0, high=10.0),),
    examples=({}, {"gate_bias": 0.0}),
)
def _highway(n_blocks, width, depth, gate_bias):
    return Highway(n_blocks, width, gate_bias)


@reference_mixing("highway")
def highway_reference(topology, x0, blocks, acts):
    """Eq. 2 of Highway Networks written out: y = H(x) T(x) + x C(x), with C = 1 - T (Eq. 3)."""
    x = x0
    for j, (f, act) in enumerate(zip(blocks, acts)):
        t = transform_gate(x, topology.gate_weight[j], topology.gate_bias[j])
        x = act(f(x) * t + x * (1 - t))
    return x
