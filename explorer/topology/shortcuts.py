"""A fixed set of shortcuts i:j between layer outputs (the ANCRe case study), each with a weight."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from explorer.registries import NUMBER, Param, SpecError, check_text, quote
from explorer.topology.base import TOPOLOGIES, Topology

_HINT = "write i:j pairs like '0:2' or '1:2,2:3', each with an optional weight like '0:3*0.5'"
_SPACE = " \t\n\r\f\v"
# One token per match: a run of spaces, an unsigned number, or any other single character. The alternatives start
# on different characters and none repeats another, so scanning a text takes time linear in its length.
_TOKEN = re.compile(r"([ \t\n\r\f\v]+)|(" + NUMBER + r")|(.)", re.S)
_INDEX = re.compile(r"[0-9]+")


class Shortcuts(Topology):
    """A set of shortcuts i:j with weights w_ij: x_j = act(y_j + sum_{i in S_j} w_ij x_i), no other skip
    (SHORTCUT_NOTATION; `describe_shortcut` says it for one shortcut).

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


def parse_shortcuts(text: str, n_blocks: int | None = None, path: str = "topology.shortcuts",
                    hint: str = _HINT) -> dict[tuple[int, int], float]:
    """Parse "0:2", "1:2,2:3" (also "1:2+2:3" or "1:2 2:3") or "0:3*0.5,1:4" into {(i, j): weight} (weight 1 when
    none is given; "" is none), in the order written, checking 0 <= i < j <= n_blocks, finite weights and that no
    pair repeats. The only definition of the syntax: the topologies' parameters call it too. It reads the text
    once, left to right (at most MAX_TEXT_CHARS ASCII characters); a SpecError names `path` and quotes the item,
    with `hint` saying what to write."""
    weights: dict[tuple[int, int], float] = {}
    for i, j, weight, written in _items(check_text(str(text), path), path, hint):
        if i >= j:
            raise SpecError(path, f"shortcut {i}:{j} must go forward (i < j)")
        if n_blocks is not None and j > n_blocks:
            raise SpecError(path, f"shortcut {i}:{j} ends at layer {j} but the model has {n_blocks} blocks; "
                                  f"use pairs with 0 <= i < j <= {n_blocks}")
        if not math.isfinite(weight):
            raise SpecError(path, f"shortcut {i}:{j} has weight {quote(written)}, which is not a finite number; "
                                  f"give a weight like {i}:{j}*0.5")
        if (i, j) in weights:
            raise SpecError(path, f"shortcut {i}:{j} is listed twice; list each i:j once "
                                  f"(give it a weight with {i}:{j}*w)")
        weights[(i, j)] = weight
    return weights


def _items(text: str, path: str, hint: str) -> list[tuple[int, int, float, str]]:
    """(i, j, weight, weight as written) of each item of a shortcut list; SpecError at the first malformed one.

    Items are `i:j` or `i:j*w` (spaces allowed around ':' and '*'; a sign touches its number), separated by ',',
    '+' or spaces."""
    tokens = [(m.lastindex, m[0], m.start()) for m in _TOKEN.finditer(text) if m.lastindex != 1]  # spaces dropped
    number, n = 2, len(tokens)

    def at(k: int) -> tuple[int, str]:
        """(kind, text) of token k; (0, "") past the end."""
        return tokens[k][:2] if k < n else (0, "")

    def malformed(first: int, bad: int) -> SpecError:
        """The item from token `first` to the separator after token `bad`, quoted."""
        begin = tokens[first][2]
        stop = tokens[bad][2] + 1 if bad < n else len(text)
        while stop < len(text) and text[stop] not in _SPACE + ",":
            stop += 1
        return SpecError(path, f"{quote(text[begin:stop].strip())} is not a shortcut; {hint}")

    def stray(separator: int, where: str) -> SpecError:
        _, token, start = tokens[separator]
        return SpecError(path, f"the {token!r} at character {start + 1} has no shortcut {where} it; {hint}")

    items = []
    k = 0
    while k < n:
        first = k
        if at(k)[1] in (",", "+"):
            raise stray(k, "before")
        for place, want in ((k, "index"), (k + 1, ":"), (k + 2, "index")):  # i:j
            kind, token = at(place)
            if not (token == ":" if want == ":" else kind == number and _INDEX.fullmatch(token)):
                raise malformed(first, place)
        i, j = int(tokens[first][1]), int(tokens[first + 2][1])
        k = first + 3
        written = "1"
        if at(k)[1] == "*":  # a weight: a number, signed by a '+' or '-' right before it
            k += 1
            sign = ""
            if at(k)[1] in ("+", "-") and at(k + 1)[0] == number and tokens[k + 1][2] == tokens[k][2] + 1:
                sign, k = tokens[k][1], k + 1
            if at(k)[0] != number:
                raise malformed(first, k)
            written, k = sign + tokens[k][1], k + 1
        items.append((i, j, float(written), written))
        if at(k)[1] in (",", "+"):
            if k + 1 == n:
                raise stray(k, "after")
            k += 1
        elif k < n and at(k)[0] != number:  # the next item starts with a number; anything else is a typo
            raise malformed(first, k)
    return items


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


# The notation i:j, stated once; every surface (the app's editor and heatmaps, the challenge, the notebooks' board)
# quotes these. States x_0 (the embedded input) .. x_L; block j reads x_{j-1} and computes y_j = f_j(x_{j-1}); a
# shortcut i:j adds w_ij x_i to block j's output before its activation: x_j = act(y_j + sum_i w_ij x_i). So 0:2 on
# three linear blocks is x_2 = W_2 W_1 x_0 + x_0, ANCRe's L_2 = ||W_3 (W_2 W_1 + I) X - Y||^2 / 2 (Sec. 3.1).
SOURCE_STATE = "x_i (x_0 the input, else block i's output)"
TARGET_STATE = "block j's output, x_j, which block j+1 reads"
SHORTCUT_NOTATION = f"i:j adds the state {SOURCE_STATE} to {TARGET_STATE} (after the last block: the network's output)"


def _block_name(k: int, blocks: Sequence[str] | None) -> str:
    return f"block {k}" if blocks is None else str(blocks[k - 1])


def state_label(k: int, blocks: Sequence[str] | None = None) -> str:
    """The state x_k by name: "x_0 (the input)", "x_2 (block 2's output)"; `blocks` names the blocks when they are
    not "block 1" .. "block L" (e.g. a Transformer's sub-blocks)."""
    k = int(k)
    return "x_0 (the input)" if k == 0 else f"x_{k} ({_block_name(k, blocks)}'s output)"


def target_label(j: int, n_blocks: int, blocks: Sequence[str] | None = None) -> str:
    """Where a shortcut i:j lands: "block 2's output, x_2, which block 3 reads", or for j = n_blocks "..., x_5, the
    network's output"."""
    j, n_blocks = int(j), int(n_blocks)
    if not 1 <= j <= n_blocks:
        raise ValueError(f"j must be a block 1..{n_blocks}, got {j}")
    then = "the network's output" if j == n_blocks else f"which {_block_name(j + 1, blocks)} reads"
    return f"{_block_name(j, blocks)}'s output, x_{j}, {then}"


def describe_shortcut(i: int, j: int, n_blocks: int, weight: float = 1.0, blocks: Sequence[str] | None = None) -> str:
    """One sentence saying what the shortcut i:j (times `weight`) does on a net of `n_blocks` blocks, e.g.
    "0:2 adds x_0 (the input) to block 2's output, x_2, which block 3 reads" (SHORTCUT_NOTATION in general)."""
    i, j = int(i), int(j)
    if not 0 <= i < j:
        raise ValueError(f"a shortcut i:j needs 0 <= i < j, got {i}:{j}")
    name = shortcuts_text({(i, j): float(weight)})
    times = "" if float(weight) == 1.0 else f"{_number_text(weight)} times "
    return f"{name} adds {times}{state_label(i, blocks)} to {target_label(j, n_blocks, blocks)}"


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


def _some_shortcuts(text: str, path: str) -> None:
    """The shortcuts topology's list: well formed, with at least one shortcut."""
    if not parse_shortcuts(text, path=path):
        raise SpecError(path, f"is empty; {_HINT} (a net without shortcuts is topology.name=none)")


@TOPOLOGIES.register(
    "shortcuts",
    "an explicit list of shortcuts i:j between layer outputs (ANCRe case study), e.g. 0:2, 1:2,2:3 or 0:3*0.5",
    (Param("shortcuts", "str", "0:2", "comma-separated i:j pairs, 0 is the input, each with an optional weight "
                                      "(default 1), e.g. '0:2', '1:2,2:3' or '0:3*0.5,1:4'",
           parse=_some_shortcuts),
     Param("learnable", "bool", False, "learn each shortcut's weight (one coefficient per shortcut, started at its "
                                       "weight, trained with the model)")),
    check=_check_shortcuts,
    examples=({"shortcuts": "0:1"}, {"shortcuts": "0:2,1:2"}, {"shortcuts": "0:1*0.5,0:2*-1", "learnable": True}),
)
def _shortcuts(n_blocks, width, depth, shortcuts, learnable=False):
    return Shortcuts(n_blocks, parse_shortcuts(shortcuts, n_blocks), learnable)
