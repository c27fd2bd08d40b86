"""Topologies: how each block's input is made from the outputs before it.

A network is a stack of blocks f_1..f_L. x_0 is the embedded input and y_j = f_j(input_j)
the output of block j. The papers write the history in two bases:

* state basis (ANCRe, the i:j shortcuts, cascaded, tau): x_j = act_j(s * y_j + sum_{i<j} P[i, j] x_i),
  the input of block j is x_{j-1} and the network output is x_L;
* branch basis (DCA's GRN): input_t = mix_t(x_0, d_1, ..., d_{t-1}) and the output is
  mix_{L+1}(x_0, d_1, ..., d_L), where d_t = act_t(input_t + y_t) - input_t is what block t
  added to the stream (d_t = y_t when the main stem is linear).

`act_j` is the main-stem operation after block j's merge (identity; ReLU for the MLP-ResNet
of the tau paper; a normalisation for post-norm Transformers), a block option rather than a
topology: `run` receives one per block. With a linear stem the two bases are
related by a cumulative sum, which is what `coefficients()` reports:

* `own`: an (L+1) x (L+1) matrix in the topology's own basis. Rows are destinations
  (row r is the input of block r+1, the last row the network output), columns sources
  (column 0 is x_0). In the state basis own[r, i] = P[i, r]; in the branch basis it holds
  the mixing weights (GRN-v2/v3 averaged over features; GRN-v3's input-dependent term needs
  data and is left to the probes).
* `unrolled`: the same destinations written in the branch basis (x_0, y_1, ..., y_L), so any two
  topologies can be compared on one picture. For a non-linear stem this is the linear
  skeleton of the wiring.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from explorer.nn.mixing import Mixer, fast_path_ok
from explorer.registries import DEPTH_RULES, Param, Registry, SpecError

TOPOLOGIES = Registry("topologies")

REFERENCE_CHUNK = 16  # the plain-op path stacks sources in chunks of this many (O(L/16) kernels per block)


@dataclass(frozen=True)
class Coefficients:
    """A topology's (L+1) x (L+1) coefficient matrices (rows: destinations, columns: sources)."""

    own: np.ndarray
    unrolled: np.ndarray
    basis: str  # "state" or "branch"


class Topology(nn.Module):
    """Base class: subclasses implement `run` and `own_matrix`.

    Topologies with input-dependent weights (GRN-v3, DCA) append what each mix used to
    `recording` when it is a list (probes set it for one forward pass): (destination row,
    the source indices behind each weight slot, per-slot weights over the batch (slots, N)).
    """

    basis = "state"

    def __init__(self, n_blocks: int):
        super().__init__()
        self.n_blocks = n_blocks
        self.recording: list | None = None

    def _record(self, row: int, slot_sources: list[list[int]], b: torch.Tensor, gate: torch.Tensor | None) -> None:
        """Note the effective weight of each slot: b averaged over features, plus the gate of each example/position."""
        with torch.no_grad():
            base = b.mean(-1) if b.dim() == 2 else b
            values = base[:, None].expand(len(base), 1) if gate is None else base[:, None] + gate.reshape(len(base), -1)
            self.recording.append((row, slot_sources, values.detach().double().cpu().numpy()))

    @abstractmethod
    def run(self, x0: torch.Tensor, blocks: nn.ModuleList, acts) -> torch.Tensor:
        """The network's output (before any head) for embedded input x0; acts[j - 1] follows block j's merge."""

    @abstractmethod
    def own_matrix(self) -> np.ndarray:
        """The coefficient matrix in the topology's own basis (see the module docstring)."""

    def branch_scale(self) -> float:
        return 1.0

    def init_gates(self, gen: torch.Generator) -> None:
        """Draw input-dependent gate weights that start random (gate_init="normal"); others keep their init."""

    @torch.no_grad()
    def coefficients(self) -> Coefficients:
        own = np.asarray(self.own_matrix(), dtype=np.float64)
        if self.basis == "branch":
            return Coefficients(own, own.copy(), "branch")
        size = self.n_blocks + 1
        scale = np.full(size, self.branch_scale())
        scale[0] = 1.0
        if np.triu(own).any():
            raise ValueError("a state-basis topology mixes only earlier states: its own matrix must be strictly lower triangular")
        # (I - own) U = diag(scale), solved row by row as the stream computes it (x_j = s_j y_j + sum_i own[j, i] x_i):
        # exact zeros above the diagonal, where a general solver leaves round-off once coefficients are large.
        unrolled = np.diag(scale)
        for j in range(1, size):
            unrolled[j] += own[j, :j] @ unrolled[:j]
        return Coefficients(own, unrolled, "state")


class _Chunks:
    """A growing history of same-shaped tensors kept as stacked chunks.

    Dense mixes read every earlier source. Stacking the whole history at every block
    would copy O(L^2) tensors; chunks are stacked once when full, so a mix costs one
    kernel per chunk plus a stack of the short open chunk.
    """

    def __init__(self):
        self.full: list[torch.Tensor] = []  # each (REFERENCE_CHUNK, *shape)
        self.open: list[torch.Tensor] = []

    def append(self, t: torch.Tensor) -> None:
        self.open.append(t)
        if len(self.open) == REFERENCE_CHUNK:
            self.full.append(torch.stack(self.open))
            self.open = []

    def __len__(self) -> int:
        return REFERENCE_CHUNK * len(self.full) + len(self.open)

    def parts(self):
        """(start index, stacked tensor) pairs covering the whole history in order."""
        for k, chunk in enumerate(self.full):
            yield k * REFERENCE_CHUNK, chunk
        if self.open:
            yield REFERENCE_CHUNK * len(self.full), torch.stack(self.open)


def _weighted_sum(history: _Chunks, weights: torch.Tensor) -> torch.Tensor:
    """sum_i weights[i] * history[i] for a 1-d weight vector over the whole history."""
    total = None
    for start, part in history.parts():
        w = weights[start:start + len(part)]
        term = torch.tensordot(w, part, dims=1)
        total = term if total is None else total + term
    return total


# --------------------------------------------------------------------------------------
# state-basis topologies
# --------------------------------------------------------------------------------------
class Chain(Topology):
    """x_j = act(x_{j-1} + s * y_j) (cascaded, tau), act(s * (x_{j-1} + y_j)) (tau after the addition), or act(y_j) (none).

    cascaded: the standard residual x_j = x_{j-1} + y_j (He et al.; ANCRe's "cascaded" baseline, Sec. 3.1).
    tau: the tau paper's h_l = relu(h_{l-1} + tau W_l h_{l-1}) (Sec. 2, with act = ReLU on the MLP-ResNet),
    placement="after" its Transformer without normalisation, x <- tau (x + f(x)) (Appendix H). A ResNet's
    down-sampling blocks outside the chain get the same scaling through `scale_branch` (the official code).
    """

    def __init__(self, n_blocks: int, skip: bool, scale: float = 1.0, learnable: bool = False, after: bool = False):
        super().__init__(n_blocks)
        self.skip = skip
        self.after = after
        self.learnable = learnable
        if learnable:
            self.tau = nn.Parameter(torch.tensor(float(scale)))
            # One tau shared by all blocks; its gradient is averaged over blocks (tau paper, Sec. 5.2).
            self.tau.register_hook(lambda grad: grad / max(n_blocks, 1))
        else:
            self.scale = float(scale)

    def branch_scale(self) -> float:
        return float(self.tau) if self.learnable else self.scale

    def scale_branch(self, y: torch.Tensor) -> torch.Tensor:
        """tau * y for a residual block outside the chain (a ResNet's down-sampling blocks: the tau paper's code
        scales every block's branch); y unchanged without a skip or with placement=after."""
        if not self.skip or self.after:
            return y
        return y * self.tau if self.learnable else y * self.scale

    def run(self, x0, blocks, acts):
        x = x0
        if not self.skip:
            for block, act in zip(blocks, acts):
                x = act(block(x))
            return x
        scale = self.tau if self.learnable else self.scale
        for block, act in zip(blocks, acts):
            y = block(x)
            if self.after:
                x = act((x + y) * scale)
            elif self.learnable:
                x = act(torch.addcmul(x, self.tau, y))
            elif self.scale == 1.0:
                x = act(x + y)
            else:
                x = act(torch.add(x, y, alpha=self.scale))
        return x

    def own_matrix(self):
        size = self.n_blocks + 1
        if not self.skip:
            return np.zeros((size, size))
        return np.eye(size, k=-1) * (self.branch_scale() if self.after else 1.0)


class Shortcuts(Topology):
    """A fixed set of shortcuts i:j: x_j = act(y_j + sum_{i in S_j} x_i), no other skip.

    ANCRe's case study (Sec. 3.1-3.2, Figure 2b/2c): e.g. 0:1 gives L_1 = ||W_3 W_2 (W_1 + I) X - Y||^2 / 2 and
    0:2 gives L_2 = ||W_3 (W_2 W_1 + I) X - Y||^2 / 2 on the 3-layer linear network. On whole Transformer blocks
    the inner attention-to-MLP skip stays and no layer residual is added (no paper defines it there).
    """

    def __init__(self, n_blocks: int, pairs: list[tuple[int, int]]):
        super().__init__(n_blocks)
        self.pairs = sorted(set(pairs))
        self.sources = {j: [i for i, jj in self.pairs if jj == j] for j in range(1, n_blocks + 1)}
        self.kept = {i for i, _ in self.pairs}  # states some later layer reads

    def run(self, x0, blocks, acts):
        states = {0: x0}
        x = x0
        for j, block in enumerate(blocks, start=1):
            y = block(x)
            for i in self.sources[j]:
                y = y + states[i]
            x = acts[j - 1](y)
            if j in self.kept:
                states[j] = x
        return x

    def own_matrix(self):
        own = np.zeros((self.n_blocks + 1,) * 2)
        for i, j in self.pairs:
            own[j, i] = 1.0
        return own


class ANCRe(Topology):
    """All shortcuts i:j with learnable, softmax-normalised coefficients (ANCRe, Sec. 4.1).

    p_ij = softmax(c_ij / temperature) over the sources i < j of each layer j (ingoing,
    Eq. 7-8) or over the destinations j > i of each source i (outgoing, Eq. 6). The logits
    c start at 0, so every normalisation starts uniform. normalization="none" uses
    p_ij = exp(c_ij / temperature) without the normaliser: every shortcut starts at full
    strength and nothing bounds them (Table 4's ablation; it may diverge).

    Two forms, chosen by what a block is:

    * plain layers (the linear case study, Sec. 3-4, Eq. 7): x_j = act(y_j + sum_{i<j} p_ij x_i);
      the shortcuts are the only skips (`layer_residual=False`);
    * whole residual layers (Transformers at block level, Sec. 5 and the official code
      zhangyilang/ANCRe, ancre/ancre.py and llm/pretraining/modeling_llama.py: the shortcut sum
      is added to the decoder layer's output, which already holds the layer's own residual):
      h_j = layer_j(h_{j-1}) + sum_{i<j} p_ij h_i with layer_j(h) = h + y_j(h), i.e.
      x_j = act(x_{j-1} + y_j + sum_{i<j} p_ij x_i) (`layer_residual=True`). The model says
      which (see explorer.nn.transformer); at init (uniform p) layer j reads 1 + 1/j of x_{j-1}.
    """

    def __init__(self, n_blocks: int, normalization: str = "ingoing", temperature: float = 0.01,
                 layer_residual: bool = False):
        super().__init__(n_blocks)
        self.normalization = normalization
        self.temperature = temperature
        self.layer_residual = layer_residual
        size = n_blocks + 1
        self.logits = nn.Parameter(torch.zeros(size, size))  # logits[i, j]: source i -> destination j
        self.register_buffer("mask", torch.ones(size, size).triu(1).bool(), persistent=False)

    def probabilities(self) -> torch.Tensor:
        """P[i, j] (zero where i >= j)."""
        scaled = self.logits / self.temperature
        if self.normalization == "none":
            return torch.exp(scaled) * self.mask
        dim = 0 if self.normalization == "ingoing" else 1
        return torch.softmax(scaled.masked_fill(~self.mask, float("-inf")), dim=dim).nan_to_num(0.0) * self.mask

    def run(self, x0, blocks, acts):
        p = self.probabilities()
        if fast_path_ok(x0):
            mixer = Mixer(p, x0)
            x = x0
            for j, block in enumerate(blocks, start=1):
                y = block(x) + mixer.mix(j)
                x = acts[j - 1](x + y if self.layer_residual else y)
                mixer.push(x)
            mixer.close()
            return x
        return self.run_reference(x0, blocks, acts, p)

    def run_reference(self, x0, blocks, acts, p=None):
        """The same computation with plain autograd ops (used under torch.func, and to test the fast path)."""
        p = self.probabilities() if p is None else p
        history = _Chunks()
        history.append(x0)
        x = x0
        for j, block in enumerate(blocks, start=1):
            y = block(x) + _weighted_sum(history, p[:j, j])
            x = acts[j - 1](x + y if self.layer_residual else y)
            history.append(x)
        return x

    def own_matrix(self):
        own = self.probabilities().detach().cpu().double().numpy().T
        return own + np.eye(len(own), k=-1) if self.layer_residual else own


# --------------------------------------------------------------------------------------
# branch-basis topologies (DCA's generalized residual networks)
# --------------------------------------------------------------------------------------
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

    Note on v3 (`gate_init`): the paper initialises w_t at exactly 0 (Sec. 3.1, the default
    "zero"). There ReLU's derivative is 0, so the gates receive no gradient and stay at 0:
    trained from it GRN-v3 follows GRN-v2 step for step. gate_init="normal" draws w_t from
    N(0, GATE_STD^2) instead (the unofficial reference implementation also left the exact zero),
    so about half the gates are active at init and the input-dependent term learns.
    """

    basis = "branch"

    def __init__(self, n_blocks: int, width: int, version: int, k: int = 0, gate_init: str = "zero"):
        super().__init__(n_blocks)
        self.version = version
        self.k = k
        self.gate_init = gate_init
        slots = n_blocks + 1 if k == 0 else k + 2
        shape = (n_blocks + 1, slots) if version == 1 else (n_blocks + 1, slots, width)
        self.weights = nn.Parameter(torch.ones(shape))  # row t-1: destination t
        if version == 3:
            self.gates = nn.Parameter(torch.zeros(n_blocks + 1, width))

    def init_gates(self, gen):
        if self.version == 3 and self.gate_init == "normal":
            draw_gates(self.gates, gen)

    @staticmethod
    def _combine(part: torch.Tensor, b: torch.Tensor, gate_weights: torch.Tensor | None) -> torch.Tensor:
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
            weight = weight + GRN._gate(part, gate_weights).unsqueeze(axis)
        return (part * weight).sum(0)

    @staticmethod
    def _gate(part: torch.Tensor, gate_weights: torch.Tensor) -> torch.Tensor:
        """relu(w^T G_t): one weight per source and example (and position), (n, B[, T]) or (n, B, H, W)."""
        axis = 2 if part.dim() == 5 else part.dim() - 1
        return torch.relu(torch.tensordot(part.movedim(axis, -1), gate_weights, dims=1))

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
        rows = self.weights.unbind(0)
        gates = self.gates.unbind(0) if self.version == 3 else [None] * len(rows)
        history = _Chunks()
        history.append(x0)

        def mix(row):
            total = None
            for start, part in history.parts():
                b = rows[row][start:start + len(part)]
                if self.recording is not None:
                    gate = None if gates[row] is None else self._gate(part, gates[row])
                    self._record(row, [[start + i] for i in range(len(part))], b, gate)
                term = self._combine(part, b, gates[row])
                total = term if total is None else total + term
            return total

        for t, block in enumerate(blocks, start=1):
            inp = mix(t - 1)
            history.append(branch_output(inp, block(inp), acts[t - 1]))
        return mix(self.n_blocks)

    def _run_k(self, x0, blocks, acts):
        """First-and-last-k: sources x_0, the running sum of the middle outputs, the last k outputs."""
        rows = self.weights.unbind(0)
        gates = self.gates.unbind(0) if self.version == 3 else [None] * len(rows)
        middle, last = None, []

        def mix(row):
            sources = [x0] + ([middle] if middle is not None else []) + last
            b = rows[row]  # slots: 0 = x_0, 1 = middle sum, 2.. = last k (oldest first)
            b = torch.cat([b[:1], b[1:2], b[2 + self.k - len(last):]]) if middle is not None \
                else torch.cat([b[:1], b[2 + self.k - len(last):]])
            part = torch.stack(sources)
            if self.recording is not None:
                gate = None if gates[row] is None else self._gate(part, gates[row])
                self._record(row, k_slot_sources(row, len(last), middle is not None), b, gate)
            return self._combine(part, b, gates[row])

        for t, block in enumerate(blocks, start=1):
            inp = mix(t - 1)
            last.append(branch_output(inp, block(inp), acts[t - 1]))
            if len(last) > self.k:
                oldest = last.pop(0)
                middle = oldest if middle is None else middle + oldest
        return mix(self.n_blocks)

    def own_matrix(self):
        size = self.n_blocks + 1
        w = self.weights.detach().cpu().double()
        w = w if self.version == 1 else w.mean(-1)
        own = np.zeros((size, size))
        for row in range(size):  # destination row: sources 0..row
            n_sources = row + 1
            if self.k == 0:
                own[row, :n_sources] = w[row, :n_sources].numpy()
                continue
            n_last = min(self.k, n_sources - 1)
            own[row, 0] = w[row, 0]
            own[row, 1:n_sources - n_last] = w[row, 1]
            for m in range(n_last):
                own[row, n_sources - n_last + m] = w[row, 2 + self.k - n_last + m]
        return own


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
    """

    basis = "branch"
    INPUTS = ("query", "key", "value")

    def __init__(self, n_blocks: int, width: int, k: int = 0, gate_init: str = "zero"):
        super().__init__(n_blocks)
        self.k = k
        self.gate_init = gate_init
        slots = n_blocks + 1 if k == 0 else k + 2
        self.weights = nn.Parameter(torch.ones(3, n_blocks, slots, width))  # [input, block t-1, source slot, feature]
        self.gates = nn.Parameter(torch.zeros(3, n_blocks, width))
        self.out_weights = nn.Parameter(torch.ones(slots, width))
        self.out_gates = nn.Parameter(torch.zeros(width))

    def init_gates(self, gen):
        if self.gate_init == "normal":
            draw_gates(self.gates, gen)
            draw_gates(self.out_gates, gen)

    def _slots(self, n_last: int, has_middle: bool) -> list[int]:
        """Weight slots of the current sources (full history: 0..t-1; k-DCA: x_0, middle, last k)."""
        if self.k == 0:
            return list(range(n_last + 1))
        return [0] + ([1] if has_middle else []) + list(range(2 + self.k - n_last, 2 + self.k))

    @staticmethod
    def _mix(part: torch.Tensor, b: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """sum_i part_i * (b_i + gate_i): per-feature weights b (n, d) plus one input-dependent weight per token."""
        shape = (b.shape[0],) + (1,) * (part.dim() - 2) + (b.shape[1],)
        return (part * (b.view(shape) + gate.unsqueeze(-1))).sum(0)

    def run(self, x0, blocks, acts):
        sources_last, middle = [], None  # k-DCA keeps the last k outputs and the sum of the ones before

        def sources():
            return [x0] + ([middle] if middle is not None else []) + sources_last

        for t, block in enumerate(blocks, start=1):
            part = torch.stack(sources())
            slots = self._slots(len(sources_last), middle is not None)
            gates = torch.relu(part @ self.gates[:, t - 1].T)  # (n, ..., 3): the three inputs' gates at once
            if self.recording is not None:
                for m in range(3):
                    self._record(t - 1, k_slot_sources(t - 1, len(sources_last), middle is not None),
                                 self.weights[m, t - 1, slots], gates[..., m])
            q, k, v = (self._mix(part, self.weights[m, t - 1, slots], gates[..., m]) for m in range(3))
            d = branch_output(q, block(q, k, v), acts[t - 1])
            sources_last.append(d)
            if self.k and len(sources_last) > self.k:
                oldest = sources_last.pop(0)
                middle = oldest if middle is None else middle + oldest
        part = torch.stack(sources())
        slots = self._slots(len(sources_last), middle is not None)
        gate = torch.relu(part @ self.out_gates)
        if self.recording is not None:
            self._record(self.n_blocks, k_slot_sources(self.n_blocks, len(sources_last), middle is not None),
                         self.out_weights[slots], gate)
        return self._mix(part, self.out_weights[slots], gate)

    def own_matrix(self):
        """Rows 0..L-1: block inputs (query, key and value weights averaged, and over features); row L: the output."""
        size = self.n_blocks + 1
        rows = torch.cat([self.weights.detach().mean((0, 3)), self.out_weights.detach().mean(1, keepdim=True).T])
        own = np.zeros((size, size))
        for row in range(size):
            n_sources = row + 1
            w = rows[row].cpu().double().numpy()
            if self.k == 0:
                own[row, :n_sources] = w[:n_sources]
                continue
            n_last = min(self.k, n_sources - 1)
            own[row, 0] = w[0]
            own[row, 1:n_sources - n_last] = w[1]
            for m in range(n_last):
                own[row, n_sources - n_last + m] = w[2 + self.k - n_last + m]
        return own


GATE_STD = 0.02  # gate_init="normal": GPT-2's std for the LM's linear maps, of which w_t (d -> 1) is one


@torch.no_grad()
def draw_gates(gates: torch.Tensor, gen: torch.Generator) -> None:
    """w ~ N(0, GATE_STD^2): relu(w^T x) is then small next to the weights b = 1, but active for about half of
    the inputs, so the gates get a gradient (at exactly 0 they get none)."""
    gates.copy_(torch.randn(gates.shape, generator=gen) * GATE_STD)


def k_slot_sources(row: int, n_last: int, has_middle: bool) -> list[list[int]]:
    """The sources behind each weight slot of destination `row` (sources 0..row): x_0, then the
    middle outputs summed into one slot (if any), then the last n_last outputs one each."""
    middle = [list(range(1, row + 1 - n_last))] if has_middle else []
    return [[0]] + middle + [[i] for i in range(row + 1 - n_last, row + 1)]


def _identity(x):
    return x


def branch_output(inp: torch.Tensor, y: torch.Tensor, act) -> torch.Tensor:
    """What a block added to the stream in the branch basis: d = act(inp + y) - inp (= y for a linear stem)."""
    return y if act is _identity else act(inp + y) - inp


def stem_activation(name: str):
    """The main-stem activation applied after each merge: identity or ReLU."""
    return {"none": _identity, "relu": torch.relu}[name]


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------
def depth_rule(value, depth: int) -> float:
    """A tau value: a number, or a rule of the model depth L."""
    if isinstance(value, str):
        return {"1/L": 1 / depth, "1/sqrt(L)": depth ** -0.5, "1/L^0.25": depth ** -0.25}[value]
    return float(value)


def parse_shortcuts(text: str, n_blocks: int | None = None, path: str = "topology.shortcuts") -> list[tuple[int, int]]:
    """Parse "0:2" or "1:2,2:3" (also "1:2+2:3") into pairs, checking 0 <= i < j <= n_blocks."""
    pairs = []
    for item in re.split(r"[,+\s]+", text.strip()):
        match = re.fullmatch(r"(\d+):(\d+)", item)
        if not match:
            raise SpecError(path, f"{item!r} is not a shortcut; write i:j pairs like '0:2' or '1:2,2:3'")
        i, j = int(match[1]), int(match[2])
        if i >= j:
            raise SpecError(path, f"shortcut {i}:{j} must go forward (i < j)")
        if n_blocks is not None and j > n_blocks:
            raise SpecError(path, f"shortcut {i}:{j} ends at layer {j} but the model has {n_blocks} blocks; "
                                  f"use pairs with 0 <= i < j <= {n_blocks}")
        pairs.append((i, j))
    return pairs


def _check_k(params, n_blocks):
    if params["k"] > n_blocks:
        raise SpecError("topology.k", f"k={params['k']} exceeds the {n_blocks} blocks of the model; "
                                      f"use 0 (all outputs) or 1..{n_blocks}")


def _check_shortcuts(params, n_blocks):
    parse_shortcuts(params["shortcuts"], n_blocks)


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
)
def _tau(n_blocks, width, depth, value, learnable, placement):
    return Chain(n_blocks, skip=True, scale=depth_rule(value, depth), learnable=learnable, after=placement == "after")


@TOPOLOGIES.register(
    "shortcuts",
    "an explicit list of shortcuts i:j between layer outputs (ANCRe case study), e.g. 0:2 or 1:2,2:3",
    (Param("shortcuts", "str", "0:2", "comma-separated i:j pairs, 0 is the input, e.g. '0:2' or '1:2,2:3'",
           pattern=r"\s*\d+:\d+((\s*[,+]\s*|\s+)\d+:\d+)*\s*", pattern_hint="write i:j pairs like '0:2' or '1:2,2:3'"),),
    check=_check_shortcuts,
)
def _shortcuts(n_blocks, width, depth, shortcuts):
    return Shortcuts(n_blocks, parse_shortcuts(shortcuts, n_blocks))


@TOPOLOGIES.register(
    "ancre",
    "ANCRe: all shortcuts i:j with learnable softmax-normalised coefficients",
    (
        Param("normalization", "choice", "ingoing", "softmax over sources (ingoing), destinations (outgoing), or none (may diverge)",
              choices=("ingoing", "outgoing", "none")),
        Param("temperature", "float", 0.01, "softmax temperature of the coefficients (0.01: the official code's default "
                                            "and the paper's language models; the linear case-study presets set theirs)",
              low=1e-4, high=100.0),
    ),
    layer_residual=True,
)
def _ancre(n_blocks, width, depth, normalization, temperature, layer_residual=False):
    return ANCRe(n_blocks, normalization, temperature, layer_residual)


_K = Param("k", "int", 0, "first-and-last-k: keep x_0, the sum of the middle outputs and the last k (0 = all outputs)",
           low=0, high=100_000)
_GATE_INIT = Param("gate_init", "choice", "zero",
                   f"gate weights w at init: zero (the paper; ReLU's kink, so they get no gradient and stay 0) or "
                   f"normal (N(0, {GATE_STD}^2), so the input-dependent gates learn)", choices=("zero", "normal"))
for _version, _text in ((1, "learned scalar weight per earlier output"),
                        (2, "learned per-feature weights per earlier output")):
    TOPOLOGIES.register(f"grn-v{_version}", f"GRN-v{_version} (DCA): {_text}", (_K,), check=_check_k)(
        lambda n_blocks, width, depth, k, _v=_version: GRN(n_blocks, width, _v, k))
TOPOLOGIES.register("grn-v3", "GRN-v3 (DCA): per-feature weights plus an input-dependent ReLU gate per earlier output",
                    (_K, _GATE_INIT), check=_check_k)(
    lambda n_blocks, width, depth, k, gate_init: GRN(n_blocks, width, 3, k, gate_init))


TOPOLOGIES.register("dca", "Transformers only: DeepCrossAttention, three GRN-v3 mixes give each block's query, key and "
                           "value inputs (k > 0: k-DCA)", (_K, _GATE_INIT), check=_check_k, transformer_only=True,
                    separate_inputs=True)(
    lambda n_blocks, width, depth, k, gate_init: DCA(n_blocks, width, k, gate_init))


def build_topology(section, n_blocks: int, width: int, depth: int, whole_layers: bool = False) -> Topology:
    """Instantiate a spec's topology section for a stack of `n_blocks` blocks of width `width`.

    whole_layers: the blocks are whole residual layers (Transformer blocks at block level) whose own
    residual a topology registered with `layer_residual=True` (ANCRe) keeps, as its paper does.
    """
    entry = TOPOLOGIES[section.name]
    extra = {"layer_residual": True} if whole_layers and entry.extra.get("layer_residual") else {}
    return entry.factory(n_blocks, width, depth, **section.params, **extra)


def is_shareable(section) -> bool:
    """Whether one instance can serve several stacks: its parameters do not depend on the block count."""
    return bool(TOPOLOGIES[section.name].extra.get("shareable"))


def check_topology(section, n_blocks: int) -> None:
    check = TOPOLOGIES[section.name].extra.get("check")
    if check:
        check(section.params, n_blocks)

