"""ANCRe: every shortcut i:j with learnable, normalised coefficients."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from explorer.nn.mixing import Mixer, fast_path_ok
from explorer.registries import Param
from explorer.topology.base import TOPOLOGIES, Chunks, Topology, weighted_sum
from explorer.topology.shortcuts import parse_shortcuts

_LOGITS_HINT = "write i:j*v pairs like '0:2*1' or '0:3*1,1:3*-1' (or leave it empty for a uniform start)"


class ANCRe(Topology):
    """All shortcuts i:j with learnable, softmax-normalised coefficients (ANCRe, Sec. 4.1).

    p_ij = softmax(c_ij / temperature) over the sources i < j of each layer j (ingoing,
    Eq. 7-8) or over the destinations j > i of each source i (outgoing, Eq. 6). The logits
    c start at 0, so every normalisation starts uniform, unless `logits` sets some of them (e.g. {(0, 2): 1.0} puts
    nearly all of layer 2's mass on 0:2 at temperature 0.01). normalization="none" uses
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

    ROLES = {"logits": "mix"}

    def __init__(self, n_blocks: int, normalization: str = "ingoing", temperature: float = 0.01,
                 layer_residual: bool = False, logits: dict[tuple[int, int], float] | None = None):
        super().__init__(n_blocks)
        self.normalization = normalization
        self.temperature = temperature
        self.layer_residual = layer_residual
        size = n_blocks + 1
        self.logits = nn.Parameter(torch.zeros(size, size))  # logits[i, j]: source i -> destination j
        self.initial_logits = dict(logits or {})
        with torch.no_grad():
            for (i, j), value in self.initial_logits.items():
                self.logits[i, j] = value
        self.register_buffer("mask", torch.ones(size, size).triu(1).bool(), persistent=False)

    def probabilities(self, logits: torch.Tensor | None = None) -> torch.Tensor:
        """P[i, j] (zero where i >= j), of the topology's logits or of `logits` given."""
        scaled = (self.logits if logits is None else logits) / self.temperature
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
        history = Chunks()
        history.append(x0)
        x = x0
        for j, block in enumerate(blocks, start=1):
            y = block(x) + weighted_sum(history, p[:j, j])
            x = acts[j - 1](x + y if self.layer_residual else y)
            history.append(x)
        return x

    def own_matrix(self):
        own = self.probabilities().detach().cpu().double().numpy().T
        return own + np.eye(len(own), k=-1) if self.layer_residual else own

    def forced_reasons(self):
        """The direct paths (coefficient 1), and a softmax over a single candidate: ingoing, x_1 reads only x_0;
        outgoing, x_{L-1} feeds only x_L; either way that coefficient is 1 whatever its logit."""
        size = self.n_blocks + 1
        reasons = {"direct path: block j's own output enters x_j with coefficient 1, fixed by the topology":
                   np.eye(size, dtype=bool)}
        if self.normalization != "none" and size > 1:
            single = np.zeros((size, size), dtype=bool)
            if self.normalization == "ingoing":
                single[1, 0] = True
                why = "softmax over a single source: x_1 reads only x_0, so p_01 = 1 whatever its logit"
            else:
                single[size - 1, size - 2] = True
                why = (f"softmax over a single destination: x_{size - 2} feeds only x_{size - 1}, so "
                       f"p_{size - 2},{size - 1} = 1 whatever its logit")
            reasons[why] = single
        return reasons

    def coefficient_inputs(self):
        """logits[j, i] = c_ij (the own matrix's orientation), the temperature, the normalisation and whether the
        layer's own residual adds 1 to the coefficient of x_{j-1}."""
        inputs = {"logits": self.logits.detach().cpu().double().numpy().T, "temperature": np.array(float(self.temperature)),
                  "normalization": np.array(self.normalization), "layer_residual": np.array(bool(self.layer_residual))}
        if self.initial_logits:  # a drawn start: the figures measure the change from it, not from uniform
            start = torch.zeros_like(self.logits)
            for (i, j), value in self.initial_logits.items():
                start[i, j] = value
            own = self.probabilities(start).detach().cpu().double().numpy().T
            inputs["initial_own"] = own + np.eye(len(own), k=-1) if self.layer_residual else own
        return inputs


def _read_logits(text: str, path: str, n_blocks: int | None = None) -> dict[tuple[int, int], float]:
    """{(i, j): c_ij} from the i:j*v text of `logits` (the shortcut syntax); SpecError naming `path`."""
    return parse_shortcuts(text, n_blocks, path, _LOGITS_HINT)


def _check_logits(params, n_blocks):
    """Each logit i:j must be a candidate shortcut of the model (0 <= i < j <= n_blocks)."""
    _read_logits(params["logits"], "topology.logits", n_blocks)


@TOPOLOGIES.register(
    "ancre",
    "ANCRe: all shortcuts i:j with learnable softmax-normalised coefficients",
    (
        Param("normalization", "choice", "ingoing", "softmax over sources (ingoing), destinations (outgoing), or none (may diverge)",
              choices=("ingoing", "outgoing", "none")),
        Param("temperature", "float", 0.01, "softmax temperature of the coefficients (0.01: the official code's default "
                                            "and the paper's language models; the linear case-study presets set theirs)",
              low=1e-4, high=100.0),
        Param("logits", "str", "", "initial logits c_ij as i:j*v pairs, e.g. '0:2*1' (the others start at 0; empty: "
                                   "a uniform start)",
              parse=_read_logits),
    ),
    layer_residual=True,
    check=_check_logits,
    examples=({}, {"normalization": "outgoing"}, {"normalization": "none", "temperature": 0.1}),
)
def _ancre(n_blocks, width, depth, normalization, temperature, logits="", layer_residual=False):
    initial = _read_logits(logits, "topology.logits", n_blocks)
    return ANCRe(n_blocks, normalization, temperature, layer_residual, initial)
