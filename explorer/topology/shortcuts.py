"""A fixed set of shortcuts i:j between layer outputs (the ANCRe case study), each with a weight."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from explorer.registries import Param, SpecError
from explorer.topology.base import TOPOLOGIES, Topology

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_ITEM = rf"\d+\s*:\s*\d+(?:\s*\*\s*{_NUMBER})?"
SHORTCUTS_PATTERN = rf"\s*{_ITEM}((\s*[,+]\s*|\s+){_ITEM})*\s*"  # what a Param of i:j pairs accepts
_HINT = "write i:j pairs like '0:2' or '1:2,2:3', each with an optional weight like '0:3*0.5'"


class Shortcuts(Topology):
    """A set of shortcuts i:j with weights w_ij: x_j = act(y_j + sum_{i in S_j} w_ij x_i), no other skip.

    ANCRe's case study (Sec. 3.1-3.2, Figure 2b/2c): e.g. 0:1 gives L_1 = ||W_3 W_2 (W_1 + I) X - Y||^2 / 2 and
    0:2 gives L_2 = ||W_3 (W_2 W_1 + I) X - Y||^2 / 2 on the 3-layer linear network (every w = 1). On whole
    Transformer blocks the inner attention-to-MLP skip stays and no layer residual is added (no paper defines it
    there). The weights are fixed (a buffer, so batched members may differ in them) or, with `learnable`, one
    parameter per shortcut, started at its weight and trained with the model.
    """

    ROLES = {"weights": "mix"}

    def __init__(self, n_blocks: int, weights: Mapping[tuple[int, int], float] | list[tuple[int, int]],
                 learnable: bool = False):
        super().__init__(n_blocks)
        if not isinstance(weights, Mapping):
            weights = {pair: 1.0 for pair in weights}
        self.pairs = sorted(weights)
        self.learnable = bool(learnable)
        values = torch.tensor([float(weights[pair]) for pair in self.pairs], dtype=torch.get_default_dtype())
        if self.learnable:
            self.weights = nn.Parameter(values)
        else:  # comes from the spec, so it is not saved with the model
            self.register_buffer("weights", values, persistent=False)
        self.sources = {j: [(k, i) for k, (i, jj) in enumerate(self.pairs) if jj == j] for j in range(1, n_blocks + 1)}
        self.kept = {i for i, _ in self.pairs}  # states some later layer reads

    def run(self, x0, blocks, acts):
        states = {0: x0}
        x = x0
        for j, block in enumerate(blocks, start=1):
            y = block(x)
            for k, i in self.sources[j]:
                y = y + self.weights[k] * states[i]
            x = acts[j - 1](y)
            if j in self.kept:
                states[j] = x
        return x

    def weight_map(self) -> dict[tuple[int, int], float]:
        """{(i, j): w_ij}, the learned values when the weights are learnable."""
        return dict(zip(self.pairs, self.weights.detach().cpu().double().tolist()))

    def forced_reasons(self):
        """Fixed weights: every entry, as the base class says. Learnable ones: the direct paths (coefficient 1) and
        the pairs the design leaves out (0) are fixed; only the listed shortcuts learn."""
        if not self.learnable:
            return super().forced_reasons()
        size = self.n_blocks + 1
        absent = np.tril(np.ones((size, size), dtype=bool), k=-1)
        for i, j in self.pairs:
            absent[j, i] = False
        return {"direct path: block j's own output enters x_j with coefficient 1, fixed by the topology":
                np.eye(size, dtype=bool),
                "no shortcut i:j in this design: its coefficient is fixed at 0": absent}

    def own_matrix(self):
        own = np.zeros((self.n_blocks + 1,) * 2)
        for (i, j), w in self.weight_map().items():
            own[j, i] = w
        return own


def parse_shortcuts(text: str, n_blocks: int | None = None,
                    path: str = "topology.shortcuts") -> dict[tuple[int, int], float]:
    """Parse "0:2", "1:2,2:3" (also "1:2+2:3") or "0:3*0.5,1:4" into {(i, j): weight} (weight 1 when none is
    given; "" is none), in the order written, checking 0 <= i < j <= n_blocks, finite weights and that no pair
    repeats."""
    weights: dict[tuple[int, int], float] = {}
    if not str(text).strip():
        return weights
    text = re.sub(r"\s*([*:+,])\s*", r"\1", str(text).strip())
    items = [item for chunk in re.split(r"[,\s]+", text) for item in re.split(r"\+(?=\d+:)", chunk)]
    for item in items:
        match = re.fullmatch(rf"(\d+):(\d+)(?:\*({_NUMBER}))?", item)
        if not match:
            raise SpecError(path, f"{item!r} is not a shortcut; {_HINT}")
        i, j = int(match[1]), int(match[2])
        weight = 1.0 if match[3] is None else float(match[3])
        if i >= j:
            raise SpecError(path, f"shortcut {i}:{j} must go forward (i < j)")
        if n_blocks is not None and j > n_blocks:
            raise SpecError(path, f"shortcut {i}:{j} ends at layer {j} but the model has {n_blocks} blocks; "
                                  f"use pairs with 0 <= i < j <= {n_blocks}")
        if not math.isfinite(weight):
            raise SpecError(path, f"shortcut {i}:{j} has weight {match[3]}, which is not a finite number; "
                                  f"give a weight like {i}:{j}*0.5")
        if (i, j) in weights:
            raise SpecError(path, f"shortcut {i}:{j} is listed twice; list each i:j once "
                                  f"(give it a weight with {i}:{j}*w)")
        weights[(i, j)] = weight
    return weights


def _number_text(w: float) -> str:
    """The shortest text that reads back as `w`: "0.5", "2", "-1e-05"."""
    text = repr(float(w))
    return text[:-2] if text.endswith(".0") else text


def shortcuts_text(weights: Mapping[tuple[int, int], float]) -> str:
    """The canonical text of {(i, j): weight}: pairs sorted, "*w" left out where w == 1 (parse_shortcuts reads it
    back to the same weights), e.g. {(1, 4): 1.0, (0, 3): 0.5} -> "0:3*0.5,1:4"."""
    items = []
    for (i, j), w in sorted(weights.items()):
        items.append(f"{int(i)}:{int(j)}" if float(w) == 1.0 else f"{int(i)}:{int(j)}*{_number_text(w)}")
    return ",".join(items)


def describe_change(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """What changed from one topology section to the next, in a few characters: "+0:6", "-1:4", "0:3*0.5"
    between shortcut lists, "learnable" when the weights start learning; otherwise the parameters that changed
    ("ancre", "temperature=0.1")."""
    before = dict(before or {})
    if before.get("name") == after.get("name") == "shortcuts":
        old, new = parse_shortcuts(before.get("shortcuts", "")), parse_shortcuts(after.get("shortcuts", ""))
        changes = [f"+{shortcuts_text({pair: new[pair]})}" for pair in sorted(new.keys() - old.keys())]
        changes += [f"-{i}:{j}" for i, j in sorted(old.keys() - new.keys())]
        changes += [f"{i}:{j}*{_number_text(new[(i, j)])}" for i, j in sorted(old.keys() & new.keys())
                    if old[(i, j)] != new[(i, j)]]
        if bool(before.get("learnable")) != bool(after.get("learnable")):
            changes.append("learnable" if after.get("learnable") else "fixed")
        return ",".join(changes) or "no change"
    if before.get("name") != after.get("name"):
        shown = {k: v for k, v in after.items() if k != "name"}
        return str(after.get("name")) + (f" {shortcuts_text(parse_shortcuts(shown['shortcuts']))}"
                                          if after.get("name") == "shortcuts" else "")
    return ",".join(f"{k}={v}" for k, v in after.items() if k != "name" and before.get(k) != v) or "no change"


def _check_shortcuts(params, n_blocks):
    parse_shortcuts(params["shortcuts"], n_blocks)


@TOPOLOGIES.register(
    "shortcuts",
    "an explicit list of shortcuts i:j between layer outputs (ANCRe case study), e.g. 0:2, 1:2,2:3 or 0:3*0.5",
    (Param("shortcuts", "str", "0:2", "comma-separated i:j pairs, 0 is the input, each with an optional weight "
                                      "(default 1), e.g. '0:2', '1:2,2:3' or '0:3*0.5,1:4'",
           pattern=SHORTCUTS_PATTERN, pattern_hint=_HINT),
     Param("learnable", "bool", False, "learn each shortcut's weight (one coefficient per shortcut, started at its "
                                       "weight, trained with the model)")),
    check=_check_shortcuts,
    examples=({"shortcuts": "0:1"}, {"shortcuts": "0:2,1:2"}, {"shortcuts": "0:1*0.5,0:2*-1", "learnable": True}),
)
def _shortcuts(n_blocks, width, depth, shortcuts, learnable=False):
    return Shortcuts(n_blocks, parse_shortcuts(shortcuts, n_blocks), learnable)
