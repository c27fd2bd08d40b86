"""DeepCrossAttention: three GRN-v3 mixes give each Transformer block its query, key and value inputs."""

from __future__ import annotations

import torch
from torch import nn

from explorer.topology.base import K, TOPOLOGIES, FirstLastK, Topology, branch_output, check_k
from explorer.topology.grn import GATE_INIT, SOURCE_NORM, draw_gates, gate_input, slot_weights


class DCA(Topology):
    """DeepCrossAttention (DCA Sec. 3.2, Figure 4): three GRN-v3 mixes per Transformer block.

    For block t the sources are G_t = [x_0, d_1, ..., d_{t-1}] (all of them, or with k > 0 the
    first and last-k: x_0, the sum of the middle outputs and the last k). Three independent
    GRN-v3 mixes of G_t give the query, key and value inputs q_t, k_t, v_t, and the block runs
    h = q_t + attn(q_t, k_t, v_t), out = h + mlp(h); what it adds to the stream is
    d_t = out - q_t, so "the inputs are not added to the outputs of the decoder block, but
    are included in the inputs of both the attention and the feed forward module". The
    network output is one more GRN-v3 mix of G_{L+1}.

    At initialisation (weights b = 1, gates w = 0) every mix is the plain sum x_{t-1}, so
    DCA is exactly the standard pre-norm Transformer. As for GRN-v3, the zero-initialised
    gates sit at ReLU's kink and receive no gradient, so the input-dependent part stays inert;
    gate_init="normal" starts them at N(0, GATE_STD^2) (see GRN). The attention normalises the
    query, key and value inputs each with its own norm (explorer.nn.transformer.Attention).
    source_norm="rms" feeds every gate the sources RMS-normalised over the features (see
    explorer.topology.grn.gate_input), as the unofficial lucidrains/deep-cross-attention does.
    """

    basis = "branch"
    input_dependent = True
    ROLES = {"weights": "mix", "gates": "mix", "out_weights": "mix", "out_gates": "mix"}
    INPUTS = ("query", "key", "value")

    def __init__(self, n_blocks: int, width: int, k: int = 0, gate_init: str = "zero", source_norm: str = "none"):
        super().__init__(n_blocks)
        self.k = k
        self.gate_init = gate_init
        self.source_norm = source_norm
        slots = n_blocks + 1 if k == 0 else k + 2
        self.weights = nn.Parameter(torch.ones(3, n_blocks, slots, width))  # [input, block t-1, source slot, feature]
        self.gates = nn.Parameter(torch.zeros(3, n_blocks, width))
        self.out_weights = nn.Parameter(torch.ones(slots, width))
        self.out_gates = nn.Parameter(torch.zeros(width))

    def init_gates(self, gen):
        if self.gate_init == "normal":
            draw_gates(self.gates, gen)
            draw_gates(self.out_gates, gen)

    @staticmethod
    def _mix(part: torch.Tensor, b: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """sum_i part_i * (b_i + gate_i): per-feature weights b (n, d) plus one input-dependent weight per token."""
        shape = (b.shape[0],) + (1,) * (part.dim() - 2) + (b.shape[1],)
        return (part * (b.view(shape) + gate.unsqueeze(-1))).sum(0)

    def run(self, x0, blocks, acts):
        history = FirstLastK(x0, self.k)
        for t, block in enumerate(blocks, start=1):
            part, slots = torch.stack(history.sources()), history.slots()
            seen = gate_input(part, self.source_norm, -1)
            gates = torch.relu(seen @ self.gates[:, t - 1].T)  # (n, ..., 3): the three inputs' gates at once
            if self.recording is not None:
                for m in range(3):
                    self.record(t - 1, history.slot_sources(), slot_weights(self.weights[m, t - 1, slots], gates[..., m]))
            q, k, v = (self._mix(part, self.weights[m, t - 1, slots], gates[..., m]) for m in range(3))
            history.push(branch_output(q, block(q, k, v), acts[t - 1]))
        part, slots = torch.stack(history.sources()), history.slots()
        gate = torch.relu(gate_input(part, self.source_norm, -1) @ self.out_gates)
        if self.recording is not None:
            self.record(self.n_blocks, history.slot_sources(), slot_weights(self.out_weights[slots], gate))
        return self._mix(part, self.out_weights[slots], gate)

    def own_matrix(self):
        """Rows 0..L-1: block inputs (query, key and value weights averaged, and over features); row L: the output."""
        rows = torch.cat([self.weights.detach().mean((0, 3)), self.out_weights.detach().mean(1, keepdim=True).T])
        return FirstLastK.own_matrix(rows.cpu().double().numpy(), self.k)


TOPOLOGIES.register("dca", "Transformers only: DeepCrossAttention, three GRN-v3 mixes give each block's query, key and "
                           "value inputs (k > 0: k-DCA)", (K, GATE_INIT, SOURCE_NORM), check=check_k,
                    transformer_only=True, separate_qkv_inputs=True,
                    examples=({}, {"k": 1}, {"gate_init": "normal"}, {"gate_init": "normal", "source_norm": "rms"}))(
    lambda n_blocks, width, depth, k, gate_init, source_norm: DCA(n_blocks, width, k, gate_init, source_norm))
