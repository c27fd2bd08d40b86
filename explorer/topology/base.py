"""What every topology shares: the registry, the Topology base class, the histories a mix reads, and the
helpers the model builders call (build_topology, is_shareable, check_topology). Topology files import only this."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from explorer.registries import Param, Registry, SpecError

TOPOLOGIES = Registry("topologies")

REFERENCE_CHUNK = 16  # the plain-op path stacks sources in chunks of this many (O(L/16) kernels per block)


@dataclass(frozen=True)
class Coefficients:
    """A topology's (L+1) x (L+1) coefficient matrices (rows: destinations, columns: sources)."""

    own: np.ndarray
    unrolled: np.ndarray
    basis: str  # "state" or "branch"


class Topology(nn.Module):
    """Base class: subclasses implement `run` and `own_matrix`, and answer what other code asks of them.

    Capabilities, as class attributes or methods a subclass overrides:

    * `basis`: "state" or "branch" (see explorer.topology);
    * `input_dependent`: its weights depend on the data (GRN-v3, DCA, Highway). Such a topology appends
      what each mix used to `recording` when it is a list (probes set it for one forward pass), through
      `record`: (destination row, the source indices behind each weight slot, per-slot weights over the
      batch (slots, N));
    * `branch_scales()`: the factor s_j on y_j in the state basis, x_j = s_j y_j + sum_i own[j, i] x_i;
    * `ROLES`: the role of each of its parameters, as every module declares them: "mix" for coefficients,
      "scale" for a scalar gate (which learns at the scalar-gate learning rate, explorer.optim).

    Values a run may vary without changing the computation's structure live in tensors (parameters or
    buffers), never in plain attributes, so members of a batched run (explorer.batched) can differ in them.
    """

    basis = "state"
    input_dependent = False
    ROLES: dict[str, str] = {}

    def __init__(self, n_blocks: int):
        super().__init__()
        self.n_blocks = n_blocks
        self.recording: list | None = None

    def record(self, row: int, slot_sources: list[list[int]], values: torch.Tensor) -> None:
        """Note the weights (slots, ...) each slot of destination `row` had on this batch, flattened per slot."""
        self.recording.append((row, slot_sources, values.detach().reshape(len(slot_sources), -1).double().cpu().numpy()))

    @abstractmethod
    def run(self, x0: torch.Tensor, blocks: nn.ModuleList, acts) -> torch.Tensor:
        """The network's output (before any head) for embedded input x0; acts[j - 1] follows block j's merge."""

    @abstractmethod
    def own_matrix(self) -> np.ndarray:
        """The coefficient matrix in the topology's own basis (see explorer.topology)."""

    def branch_scales(self) -> torch.Tensor:
        """s_1..s_L, the factor on each block's output in the state basis (all 1 unless a topology scales them)."""
        return torch.ones(self.n_blocks, dtype=torch.float64)

    def forced_reasons(self) -> dict[str, np.ndarray]:
        """Which coefficients the topology fixes whatever its parameters, grouped by why: {why: boolean (L+1) x (L+1)
        mask}. Entry [j, i] below the diagonal is the own-basis coefficient of source i in destination j; the diagonal
        [j, j] is the direct path, block j's own output into x_j (s_j, `branch_scales`, in the state basis). The
        heatmaps grey these out, so a value the topology imposes does not read as one that was learned. Default: a
        topology without trainable parameters fixes every entry, one with them none (subclasses that know say more)."""
        if any(p.requires_grad for p in self.parameters()):
            return {}
        size = self.n_blocks + 1
        return {"fixed by the topology (it learns no coefficients)": np.tril(np.ones((size, size), dtype=bool))}

    def coefficient_inputs(self) -> dict[str, np.ndarray]:
        """What the own coefficients are computed from, for the figures' equations (ANCRe: its logits, in the own
        matrix's orientation, and temperature); empty for a topology whose coefficients are its parameters."""
        return {}

    def init_gates(self, gen: torch.Generator) -> None:
        """Draw input-dependent gate weights that start random (gate_init="normal"); others keep their init."""

    @torch.no_grad()
    def coefficients(self) -> Coefficients:
        own = np.asarray(self.own_matrix(), dtype=np.float64)
        if self.basis == "branch":
            return Coefficients(own, own.copy(), "branch")
        size = self.n_blocks + 1
        scale = np.ones(size)
        scale[1:] = self.branch_scales().detach().cpu().double().numpy()
        if np.triu(np.nan_to_num(own, nan=0.0)).any():  # (NaN is true: a diverged topology is not a wrong one)
            raise ValueError("a state-basis topology mixes only earlier states: its own matrix must be strictly lower triangular")
        # (I - own) U = diag(scale), solved row by row as the stream computes it (x_j = s_j y_j + sum_i own[j, i] x_i):
        # exact zeros above the diagonal, where a general solver leaves round-off once coefficients are large.
        unrolled = np.diag(scale)
        for j in range(1, size):
            unrolled[j] += own[j, :j] @ unrolled[:j]
        return Coefficients(own, unrolled, "state")


# --------------------------------------------------------------------------------------
# histories a mix reads
# --------------------------------------------------------------------------------------
class Chunks:
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


def weighted_sum(history: Chunks, weights: torch.Tensor) -> torch.Tensor:
    """sum_i weights[i] * history[i] for a 1-d weight vector over the whole history."""
    total = None
    for start, part in history.parts():
        w = weights[start:start + len(part)]
        term = torch.tensordot(w, part, dims=1)
        total = term if total is None else total + term
    return total


class FirstLastK:
    """The branch-basis history G_t = [x_0, d_1, ..., d_{t-1}], whole (k = 0) or first-and-last-k (DCA Sec. 3.1,
    "Reducing memory and computation": x_0, the sum of the middle outputs and the last k outputs).

    A mix gives each source a weight slot: with k = 0 slot i is source i; with k > 0 slot 0 is x_0, slot 1
    the middle sum and slots 2..k+1 the last k outputs (oldest first), so a destination with fewer than k
    outputs behind it uses the last of those slots. GRN and DCA keep their sources here.
    """

    def __init__(self, x0: torch.Tensor, k: int):
        self.x0, self.k = x0, k
        self.middle: torch.Tensor | None = None
        self.last: list[torch.Tensor] = []
        self.n_outputs = 0  # outputs d_1, d_2, ... pushed so far

    def push(self, d: torch.Tensor) -> None:
        """Add what a block added to the stream; with k > 0 the oldest of the last k moves into the middle sum."""
        self.n_outputs += 1
        self.last.append(d)
        if self.k and len(self.last) > self.k:
            oldest = self.last.pop(0)
            self.middle = oldest if self.middle is None else self.middle + oldest

    def sources(self) -> list[torch.Tensor]:
        return [self.x0] + ([self.middle] if self.middle is not None else []) + self.last

    def slots(self) -> list[int]:
        """The weight slot of each current source."""
        if self.k == 0:
            return list(range(len(self.last) + 1))
        return [0] + ([1] if self.middle is not None else []) + list(range(2 + self.k - len(self.last), 2 + self.k))

    def slot_sources(self) -> list[list[int]]:
        """The source indices behind each current source: [0], the middle outputs summed (if any), one each after."""
        row, n_last = self.n_outputs, len(self.last)
        middle = [list(range(1, row + 1 - n_last))] if self.middle is not None else []
        return [[0]] + middle + [[i] for i in range(row + 1 - n_last, row + 1)]

    @staticmethod
    def own_matrix(rows: np.ndarray, k: int) -> np.ndarray:
        """The (L+1) x (L+1) own matrix from each destination's slot weights rows[r, slot] (r = 0..L)."""
        size = len(rows)
        own = np.zeros((size, size))
        for row in range(size):  # destination row: sources 0..row
            n_sources = row + 1
            if k == 0:
                own[row, :n_sources] = rows[row, :n_sources]
                continue
            n_last = min(k, n_sources - 1)
            own[row, 0] = rows[row, 0]
            own[row, 1:n_sources - n_last] = rows[row, 1]
            own[row, n_sources - n_last:n_sources] = rows[row, 2 + k - n_last:2 + k]
        return own


K = Param("k", "int", 0, "first-and-last-k: keep x_0, the sum of the middle outputs and the last k (0 = all outputs)",
          low=0, high=100_000)


def check_k(params, n_blocks):
    """First-and-last-k (GRN, DCA): k may not exceed the blocks."""
    if params["k"] > n_blocks:
        raise SpecError("topology.k", f"k={params['k']} exceeds the {n_blocks} blocks of the model; "
                                      f"use 0 (all outputs) or 1..{n_blocks}")


# --------------------------------------------------------------------------------------
# the main stem
# --------------------------------------------------------------------------------------
def _identity(x):
    return x


def branch_output(inp: torch.Tensor, y: torch.Tensor, act) -> torch.Tensor:
    """What a block added to the stream in the branch basis: d = act(inp + y) - inp (= y for a linear stem)."""
    return y if act is _identity else act(inp + y) - inp


def stem_activation(name: str):
    """The main-stem activation applied after each merge: identity or ReLU."""
    return {"none": _identity, "relu": torch.relu}[name]


def feature_axis(x: torch.Tensor) -> int:
    """The axis of a stream tensor that holds the features: channels of images (B, C, H, W), else the last."""
    return 1 if x.dim() == 4 else x.dim() - 1


# --------------------------------------------------------------------------------------
# what the model builders and the spec checks call
# --------------------------------------------------------------------------------------
def depth_rule(value, depth: int) -> float:
    """A tau value: a number, or a rule of the model depth L."""
    if isinstance(value, str):
        return {"1/L": 1 / depth, "1/sqrt(L)": depth ** -0.5, "1/L^0.25": depth ** -0.25}[value]
    return float(value)


def build_topology(section, n_blocks: int, width: int, depth: int, whole_layers: bool = False) -> Topology:
    """Instantiate a spec's topology section for a stack of `n_blocks` blocks of width `width`.

    Every factory is called as factory(n_blocks, width, depth, **params). whole_layers: the blocks are
    whole residual layers (Transformer blocks at block level) whose own residual a topology declaring
    `layer_residual` (ANCRe) keeps, as its paper does; its factory then also gets layer_residual=True.
    """
    entry = TOPOLOGIES[section.name]
    extra = {"layer_residual": True} if whole_layers and entry.info.layer_residual else {}
    return entry.factory(n_blocks, width, depth, **section.params, **extra)


def is_shareable(section) -> bool:
    """Whether one instance can serve several stacks: its parameters do not depend on the block count."""
    return TOPOLOGIES[section.name].info.shareable


def check_topology(section, n_blocks: int) -> None:
    """The topology's own check against the number of blocks it will span (SpecError naming the field)."""
    check = TOPOLOGIES[section.name].info.check
    if check:
        check(section.params, n_blocks)

