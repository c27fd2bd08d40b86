"""A fixed set of shortcuts i:j between layer outputs (the ANCRe case study)."""

from __future__ import annotations

import re

import numpy as np

from explorer.registries import Param, SpecError
from explorer.topology.base import TOPOLOGIES, Topology


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


def _check_shortcuts(params, n_blocks):
    parse_shortcuts(params["shortcuts"], n_blocks)


@TOPOLOGIES.register(
    "shortcuts",
    "an explicit list of shortcuts i:j between layer outputs (ANCRe case study), e.g. 0:2 or 1:2,2:3",
    (Param("shortcuts", "str", "0:2", "comma-separated i:j pairs, 0 is the input, e.g. '0:2' or '1:2,2:3'",
           pattern=r"\s*\d+:\d+((\s*[,+]\s*|\s+)\d+:\d+)*\s*", pattern_hint="write i:j pairs like '0:2' or '1:2,2:3'"),),
    check=_check_shortcuts,
    examples=({"shortcuts": "0:1"}, {"shortcuts": "0:2,1:2"}),
)
def _shortcuts(n_blocks, width, depth, shortcuts):
    return Shortcuts(n_blocks, parse_shortcuts(shortcuts, n_blocks))
