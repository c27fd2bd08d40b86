"""The registry of probe figures: a probe declares its figure builder with `figure_for`, `probe_figures`
draws a result with it, and a probe that declared none is drawn as `numbers_table`; `state_labels` names stream
states as every figure does."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import plotly.graph_objects as go

from explorer.plots.common import _finish


def state_labels(indices: Any) -> list[str]:
    """Labels of stream states by index: 0 -> "input" (the embedded input), b -> "block b" (after block b)."""
    return ["input" if int(b) == 0 else f"block {int(b)}" for b in np.asarray(indices).reshape(-1)]


#: probe name -> `draw(result, head) -> [figures]`, declared beside each probe with `figure_for`.
PROBE_FIGURES: dict[str, Callable[[dict[str, np.ndarray], str], list[go.Figure]]] = {}
_TABLE_VALUES = 12  # the generic table shows this many values of an array, then how many there are


def figure_for(probe: str) -> Callable:
    """Decorator: `draw(result, head)` is probe `probe`'s figure builder (`probe_figures` calls it).

    `result` is the probe's result with every value a numpy array; `head` ("step 40: " or "") prefixes each
    title. The probe's module declares it beside the probe, so a probe and its figures live in one place.
    """

    def add(draw: Callable[[dict[str, np.ndarray], str], list[go.Figure]]) -> Callable:
        if probe in PROBE_FIGURES:
            raise ValueError(f"probe {probe!r} has its figures declared twice")
        PROBE_FIGURES[probe] = draw
        return draw

    return add


def probe_figures(name: str, result: Mapping[str, Any], label: str = "") -> list[go.Figure]:
    """The figures of one probe's result (what `explorer.probe(model, x, name)` returns), from the builder the
    probe declared with `figure_for`; a probe that declared none gets `numbers_table` of its result, so a new
    probe is shown before anyone draws it. `label` (e.g. the run's name) prefixes each title."""
    head = f"{label}: " if label else ""
    r = {key: np.asarray(value) for key, value in result.items()}
    draw = PROBE_FIGURES.get(name)
    if draw is None:
        return [numbers_table(r, f"{head}{name} probe: its numbers (it declares no figure)")]
    return draw(r, head)


def numbers_table(result: Mapping[str, Any], title: str) -> go.Figure:
    """Any probe result as a table: each quantity, its shape and its first values (4 significant digits)."""
    names, shapes, values = [], [], []
    for key, value in result.items():
        arr = np.asarray(value)
        flat = arr.reshape(-1)
        shown = ", ".join(_table_value(v) for v in flat[:_TABLE_VALUES])
        if flat.size > _TABLE_VALUES:
            shown += f", ... ({flat.size} values)"
        names.append(str(key))
        shapes.append(" x ".join(str(n) for n in arr.shape) or "scalar")
        values.append(shown)
    fig = go.Figure(go.Table(
        columnwidth=[2, 1, 6],
        header=dict(values=["quantity", "shape", "values"], align="left"),
        cells=dict(values=[names, shapes, values], align="left"),
    ))
    return _finish(fig, title)


def _table_value(value: Any) -> str:
    number = value.item() if isinstance(value, np.generic) else value
    if isinstance(number, float):
        return f"{number:.4g}"
    return str(number)
