"""DCA's generalized residual networks GRN-v1, v2 and v3 (branch basis), optionally first-and-last-k."""

from __future__ import annotations

import torch
from torch import nn

from explorer.nn.mixing import Mixer, fast_path_ok
from explorer.registries import Param
from explorer.topology.base import K, TOPOLOGIES, Chunks, FirstLastK, Topology, branch_output, check_k

GATE_STD = 0.02  # gate_init="normal": GPT-2's std for the LM's linear maps, of which w_t (d -> 1) is one


@torch.no_grad()
def draw_gates(gates: torch.Tensor, gen: torch.Generator) -> None:
    """w ~ N(0, GATE_STD^2): relu(w^T x) is then small next to the weights b = 1, but active for about half of
    the inputs, so the gates get a gradient (at exactly 0 they get none)."""
    gates.copy_(torch.randn(gates.shape, generator=gen) * GATE_STD)


def gate_input(part: torch.Tensor, source_norm: str, axis: int) -> torch.Tensor:
    """What the gate w_t reads of each source: the source itself (the paper, Sec. 3.1, w_t^T G_t), or with
    source_norm="rms" its RMS normalisation over the features (`axis`), G / sqrt(mean(G^2) + eps) with eps the
    dtype's machine epsilon, as the unofficial implementation lucidrains/deep-cross-attention normalises each
    source before its gate (an RMSNorm whose scale, 1 at init, multiplies w: the same functions, no parameter
    here). Only the gate reads it; the sources are mixed as they are."""
    if source_norm == "none":
        return part
    return part * torch.rsqrt(part.square().mean(axis, keepdim=True) + torch.finfo(part.dtype).eps)


def slot_weights(b: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    """The effective weight of each slot for the probes: b averaged over features, plus each example's (and
    position's) gate; (slots, 1) without a gate."""
    base = b.mean(-1) if b.dim() == 2 else b
    return base[:, None] if gate is None else base[:, None] + gate.reshape(len(base), -1)


class GRN(Topology):
    """Generalized residual networks GRN-v1/v2/v3 (DCA Sec. 3.1), optionally first-and-last-k.

    For destination t (block t's input, or the output when t = L+1) with sources
    G_t = [x_0, d_1, ..., d_{t-1}]:
      v1: G_t b_t,                         b_t in R^t,     init ones
      v2: (G_t * b_t) 1,                   b_t in R^{d x t}, init ones
      v3: (G_t * (b_t + 1 relu(w_t^T G_t))) 1, w_t in R^d, init zeros
    (one input-dependent weight per source, shared across the d features). With k > 0,
    G_t holds x_0, the sum of the intermediate outputs and the last k outputs (Sec. 3.1,
    "Reducing memory and computation"). At initialisation v1 and v3 equal a standard
    residual network exactly, and so does v2.

    `source_norm`="rms" feeds the v3 gate each source RMS-normalised (gate_input), as an unofficial
    implementation does; "none" (the default) is the paper's relu(w_t^T G_t). With zero gates the two agree.

    Note on v3 (`gate_init`): the paper initialises w_t at exactly 0 (Sec. 3.1, the default
    "zero"). There ReLU's derivative is 0, so the gates receive no gradient and stay at 0:
    trained from it GRN-v3 follows GRN-v2 step for step. gate_init="normal" draws w_t from
    N(0, GATE_STD^2) instead (the unofficial implementation starts at exactly 0 too), so about
    half the gates are active at init and the input-dependent term learns.
    """

    basis = "branch"
    ROLES = {"weights": "mix", "gates": "mix"}

    def __init__(self, n_blocks: int, width: int, version: int, k: int = 0, gate_init: str = "zero",
                 source_norm: str = "none"):
        super().__init__(n_blocks)
        self.version = version
        self.k = k
        self.gate_init = gate_init
        self.source_norm = source_norm
        slots = n_blocks + 1 if k == 0 else k + 2
        shape = (n_blocks + 1, slots) if version == 1 else (n_blocks + 1, slots, width)
        self.weights = nn.Parameter(torch.ones(shape))  # row t-1: destination t
        if version == 3:
            self.gates = nn.Parameter(torch.zeros(n_blocks + 1, width))

    @property
    def input_dependent(self) -> bool:
        return self.version == 3

    def init_gates(self, gen):
        if self.version == 3 and self.gate_init == "normal":
            draw_gates(self.gates, gen)

    def _combine(self, part: torch.Tensor, b: torch.Tensor, gate_weights: torch.Tensor | None) -> torch.Tensor:
        """Sum over the n sources in `part` with their weights b: (n,) or (n, d).

        Features are the last axis of vectors and sequences (n, B, [T,] d) and the channel
        axis of images (n, B, C, H, W).
        """
        if b.dim() == 1:
            return torch.tensordot(b, part, dims=1)
        axis = 2 if part.dim() == 5 else part.dim() - 1
        shape = [1] * part.dim()
        shape[0], shape[axis] = b.shape
        weight = b.reshape(shape)
        if gate_weights is not None:  # one weight per source and example (and position), shared across features
            weight = weight + self._gate(part, gate_weights).unsqueeze(axis)
        return (part * weight).sum(0)

    def _gate(self, part: torch.Tensor, gate_weights: torch.Tensor) -> torch.Tensor:
        """relu(w^T G_t): one weight per source and example (and position), (n, B[, T]) or (n, B, H, W)."""
        axis = 2 if part.dim() == 5 else part.dim() - 1
        seen = gate_input(part, self.source_norm, axis)
        return torch.relu(torch.tensordot(seen.movedim(axis, -1), gate_weights, dims=1))

    def _mix(self, row: int, part: torch.Tensor, b: torch.Tensor, slot_sources: list[list[int]]) -> torch.Tensor:
        """Destination `row`'s mix of the sources in `part` with their slot weights b; recorded when probed."""
        gate = self.gates[row] if self.version == 3 else None
        if self.recording is not None:
            self.record(row, slot_sources, slot_weights(b, None if gate is None else self._gate(part, gate)))
        return self._combine(part, b, gate)

    def run(self, x0, blocks, acts):
        if self.k:
            return self._run_k(x0, blocks, acts)
        if self.version == 1 and fast_path_ok(x0):
            mixer = Mixer(nn.functional.pad(self.weights.T, (1, 0)), x0)  # weights[t - 1, i] -> mixer.weights[i, t]
            for t, block in enumerate(blocks, start=1):
                inp = mixer.mix(t)
                mixer.push(branch_output(inp, block(inp), acts[t - 1]))
            out = mixer.mix(self.n_blocks + 1)
            mixer.close()
            return out
        return self.run_reference(x0, blocks, acts)

    def run_reference(self, x0, blocks, acts):
        """Full history with plain autograd ops (GRN-v2/v3, torch.func, and the fast path's reference)."""
        history = Chunks()
        history.append(x0)

        def mix(row):
            total = None
            for start, part in history.parts():
                term = self._mix(row, part, self.weights[row, start:start + len(part)],
                                 [[start + i] for i in range(len(part))])
                total = term if total is None else total + term
            return total

        for t, block in enumerate(blocks, start=1):
            inp = mix(t - 1)
            history.append(branch_output(inp, block(inp), acts[t - 1]))
        return mix(self.n_blocks)

    def _run_k(self, x0, blocks, acts):
        """First-and-last-k: sources x_0, the running sum of the middle outputs, the last k outputs."""
        history = FirstLastK(x0, self.k)

        def mix(row):
            return self._mix(row, torch.stack(history.sources()), self.weights[row, history.slots()],
                             history.slot_sources())

        for t, block in enumerate(blocks, start=1):
            inp = mix(t - 1)
            history.push(branch_output(inp, block(inp), acts[t - 1]))
        return mix(self.n_blocks)

    def own_matrix(self):
        w = self.weights.detach().cpu().double()
        return FirstLastK.own_matrix((w if self.version == 1 else w.mean(-1)).numpy(), self.k)


GATE_INIT = Param("gate_init", "choice", "zero",
                  f"gate weights w at init: zero (the paper; ReLU's kink, so they get no gradient and stay 0) or "
                  f"normal (N(0, {GATE_STD}^2), so the input-dependent gates learn)", choices=("zero", "normal"))
SOURCE_NORM = Param("source_norm", "choice", "none",
                    "what the gate w reads of each source: none (the paper: the source) or rms (RMS-normalised over "
                    "the features, as the unofficial lucidrains/deep-cross-attention; equal at zero gates)",
                    choices=("none", "rms"))
for _version, _text, _examples in ((1, "learned scalar weight per earlier output", ({}, {"k": 1})),
                                   (2, "learned per-feature weights per earlier output", ({},))):
    TOPOLOGIES.register(f"grn-v{_version}", f"GRN-v{_version} (DCA): {_text}", (K,), check=check_k, examples=_examples)(
        lambda n_blocks, width, depth, k, _v=_version: GRN(n_blocks, width, _v, k))
TOPOLOGIES.register("grn-v3", "GRN-v3 (DCA): per-feature weights plus an input-dependent ReLU gate per earlier output",
                    (K, GATE_INIT, SOURCE_NORM), check=check_k,
                    examples=({}, {"k": 2}, {"gate_init": "normal"}, {"gate_init": "normal", "source_norm": "rms"}))(
    lambda n_blocks, width, depth, k, gate_init, source_norm: GRN(n_blocks, width, 3, k, gate_init, source_norm))
