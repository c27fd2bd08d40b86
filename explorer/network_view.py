"""The network itself, as TensorFlow Playground draws it: the states x_0 .. x_L as nodes in a row, each block as a
box between the two states it joins, and every shortcut i:j as an arc above the row from x_i to x_j, where x_j is
formed (SHORTCUT_NOTATION). `network_figure` draws one design or one trained run; `replay_figure` replays a
finished run from what it recorded: its loss curve step by step and, where it recorded coefficient snapshots,
the arcs at each logged step.

An arc's width and colour come from the coefficient it carries, read as `coefficient_heatmap` reads the
coefficients probe's result: the own matrix (a plain shortcut design's fixed weights, a learned topology's learned
coefficients) on the heatmap's colour scale, and each arc's hover is that heatmap cell's hover. Every clickable
trace names its shortcut in `customdata` ([i:j, "add" or "remove"] per point) so an app can turn a click into an
edit of the design; `layout.meta` lists the figure's shortcuts and the ones it could add.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from explorer.plots.coefficients import (FORCED_GREY, MAX_CELL_TEXT, MAX_TICK_LABELS, _coefficient_hover,
                                         _coefficient_scale, _g, _shown_own, _sub)
from explorer.plots.common import _finish, wrap_title
from explorer.plots.curves import loss_curves
from explorer.probes import probe
from explorer.spec import ExperimentSpec
from explorer.registries import SpecError
from explorer.topology.shortcuts import (SHORTCUT_NOTATION, describe_change, parse_shortcuts, state_label,
                                         target_label)
from explorer.training import Run, build

__all__ = ["CLICK_ACTIONS", "COEFFICIENTS_PROBE", "click_meaning", "learned_coefficients", "network_figure",
           "replay_figure"]

COEFFICIENTS_PROBE = "coefficients"  # the probe whose results the network view draws
CLICK_ACTIONS = ("add", "remove")  # what a clickable point's customdata [i:j, action] says a click does
PROBE_INPUTS = 8  # validation examples the coefficients probe reads (input-dependent mixes average over them)
ARC_POINTS = 13  # points along one arc's half ellipse
MIN_WIDTH = 0.8  # an arc's width at coefficient 0, in pixels
MAX_WIDTH = 9.0  # at the largest |coefficient|, on nets up to 12 blocks
PALE_END = 0.25  # the colour scale's palest part is skipped: an arc that pale would vanish on the white page
TITLE_CHARS = 90  # a full-width figure's title line at 1280 px
CAPTION_CHARS = 150  # a caption line (13 px) at 1280 px
REPLAY_SECONDS = 8.0  # a replay at 1x plays for about this long
FRAME_MS = (30, 1000)  # the shortest and longest frame at 1x, in ms
SPEEDS = (0.5, 1.0, 4.0)
NODE_COLOR, BLOCK_FILL, BLOCK_LINE, STEM_COLOR = "#333333", "#e3ebf5", "#4a6fa5", "#9aa0a6"


# --------------------------------------------------------------------------- what is drawn


def coefficients_result(source: Any) -> tuple[dict[str, Any], str]:
    """The coefficients probe's result for `source` and a short name of its design: a Run (its model as it
    stands), an ExperimentSpec (its model as initialised) or a coefficients result itself (name "")."""
    if isinstance(source, Run):
        return probe(source.model, source.data.x_val[:PROBE_INPUTS], COEFFICIENTS_PROBE), _design_name(source.spec)
    if isinstance(source, ExperimentSpec):
        model, data = build(source, device="cpu")
        return probe(model, data.x_val[:PROBE_INPUTS], COEFFICIENTS_PROBE), _design_name(source)
    if isinstance(source, Mapping) and "own" in source:
        return dict(source), ""
    raise ValueError("source must be an explorer Run, an ExperimentSpec or the coefficients probe's result "
                     f"(a dict with 'own'), got {type(source).__name__}")


def _design_name(spec: ExperimentSpec) -> str:
    """"shortcuts 0:3", "ancre": the topology as `describe_change` names a new one."""
    return describe_change(None, spec.topology.to_dict())


def _blocks(result: Mapping[str, Any]) -> list[str]:
    n = len(np.asarray(result["own"]))
    blocks = [str(b) for b in np.ravel(result["blocks"])] if "blocks" in result else []
    return blocks if len(blocks) == n - 1 else [f"block {j}" for j in range(1, n)]


def arcs_of(result: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """{(i, j): coefficient} of the shortcuts a coefficients result has: every own coefficient i < j that is not 0
    or that the topology learns (a learned one may pass through 0; one the topology fixes at 0 is no shortcut)."""
    own = np.asarray(result["own"], dtype=float)
    n = len(own)
    forced = np.asarray(result["forced"], dtype=bool) if "forced" in result else np.ones((n, n), dtype=bool)
    return {(i, j): float(own[j, i]) for j in range(1, n) for i in range(j) if own[j, i] != 0 or not forced[j, i]}


def click_meaning(customdata: Any, n_blocks: int | None = None) -> tuple[tuple[int, int], str] | None:
    """((i, j), "add" or "remove"): what a click on a point whose customdata is `customdata` asks for (the
    figure's [i:j, action]); None for a point that edits nothing (a node, a block) or names no single pair of a
    net of `n_blocks` blocks."""
    if not isinstance(customdata, (list, tuple)) or len(customdata) != 2 or customdata[1] not in CLICK_ACTIONS:
        return None
    try:
        pairs = list(parse_shortcuts(str(customdata[0]), n_blocks))
    except SpecError:
        return None
    return (pairs[0], str(customdata[1])) if len(pairs) == 1 else None


def learned_coefficients(result: Mapping[str, Any]) -> bool:
    """Whether a coefficients probe result holds coefficients the model learns (else fixed weights)."""
    return bool(np.asarray(result.get("learnable", False)))


# --------------------------------------------------------------------------- geometry and style


def _rise(span: int) -> float:
    """An arc's height over the row: grows as the square root of its span, so short arcs stay visible beside long
    ones, and every arc's apex ((i + j) / 2, rise(j - i)) is a point of its own."""
    return math.sqrt(span)


def _arc_xy(i: int, j: int) -> tuple[list[float], list[float]]:
    """Points along the half ellipse from x_i to x_j (drawn as a spline through them)."""
    theta = np.linspace(math.pi, 0.0, ARC_POINTS)
    return ((i + j) / 2 + (j - i) / 2 * np.cos(theta)).tolist(), (_rise(j - i) * np.sin(theta)).tolist()


@functools.lru_cache(maxsize=4096)
def _sample(scale: str, where: float) -> str:
    return sample_colorscale(scale, [where])[0]


class _Style:
    """An arc's colour and width from its coefficient: `coefficient_heatmap`'s colour scale fitted to `values`
    (white to red when none is negative, else blue-white-red about 0) with its palest PALE_END left out, and a
    width growing linearly in |coefficient| from MIN_WIDTH to MAX_WIDTH, thinner on nets deeper than 12 blocks
    (their arcs overlap more). A non-finite coefficient is grey, thin and dotted."""

    def __init__(self, values: Sequence[float], n_blocks: int):
        finite = np.array([v for v in values if math.isfinite(v)] or [0.0])
        scale = _coefficient_scale(finite)
        self.diverging = "zmid" in scale
        self.low, self.high = float(scale["zmin"]), float(scale["zmax"])
        self.largest = float(np.abs(finite).max()) or 1.0
        self.widest = MAX_WIDTH * min(1.0, math.sqrt(12 / max(n_blocks, 1)))

    def color(self, value: float) -> str:
        if not math.isfinite(value):
            return FORCED_GREY
        if self.diverging:  # symmetric about 0: -high .. high
            t = max(-1.0, min(1.0, value / self.high))
            where = 0.5 + 0.5 * math.copysign(PALE_END + (1 - PALE_END) * abs(t), t) if t else 0.5
            return _sample("RdBu_r", round(where, 3))
        return _sample("Reds", round(PALE_END + (1 - PALE_END) * max(0.0, min(1.0, value / self.high)), 3))

    def width(self, value: float) -> float:
        if not math.isfinite(value):
            return MIN_WIDTH
        return MIN_WIDTH + (self.widest - MIN_WIDTH) * min(1.0, abs(value) / self.largest)

    def line(self, value: float) -> dict[str, Any]:
        return dict(color=self.color(value), width=self.width(value), dash="solid" if math.isfinite(value) else "dot",
                    shape="spline")

    def colorscale(self) -> list[list]:
        """The colour bar's scale: the arcs' colours sampled from low to high."""
        return [[float(t), self.color(self.low + t * (self.high - self.low))] for t in np.linspace(0, 1, 21)]


# --------------------------------------------------------------------------- traces


def _sizes(n_blocks: int) -> tuple[float, float]:
    """(node, block box) marker sizes in pixels, from the ~1150 px a 1280 px figure gives the row."""
    unit = 1150 / (n_blocks + 1.2)
    return min(18.0, max(6.0, unit * 0.3)), min(30.0, max(7.0, unit * 0.42))


def _traces(result: Mapping[str, Any], pairs: Sequence[tuple[int, int]], style: _Style) -> list[dict[str, Any]]:
    """The network's traces, as plain dicts in drawing order: the main stem, one arc per pair in `pairs` (empty
    where `result` lacks that shortcut, so a replay's frames update the same traces), the block boxes, the state
    nodes, the arcs' apexes (a dot, the value printed up to MAX_CELL_TEXT states), the pairs the design could add
    (invisible markers at the apex their arc would have) and the colour bar. An arc's, apex's and block's hover
    is `coefficient_heatmap`'s hover of that cell."""
    n_blocks, blocks = len(np.asarray(result["own"])) - 1, _blocks(result)
    hover = _coefficient_hover(_shown_own(result), result, "own", ["input", *blocks])
    arcs = arcs_of(result)
    node, box = _sizes(n_blocks)
    every = math.ceil((n_blocks + 1) / MAX_TICK_LABELS)  # label every k-th state, as the heatmap labels its axes
    scatter = dict(type="scatter", showlegend=False)
    stem = dict(scatter, name="stem", x=[0, n_blocks], y=[0, 0], mode="lines", hoverinfo="skip",
                line=dict(color=STEM_COLOR, width=1.5))
    lines = []
    for i, j in pairs:
        name = f"{i}:{j}"
        if (i, j) in arcs:
            x, y = _arc_xy(i, j)
            lines.append(dict(scatter, name=name, meta=name, x=x, y=y, mode="lines", customdata=[[name, "remove"]] * len(x),
                              hovertemplate=f"{hover[j, i]}<extra></extra>", line=style.line(arcs[(i, j)])))
        else:
            lines.append(dict(scatter, name=name, meta=name, x=[], y=[], mode="lines", customdata=[],
                              hovertemplate="", line=style.line(0.0)))
    boxes = dict(scatter, name="blocks", x=[j - 0.5 for j in range(1, n_blocks + 1)], y=[0.0] * n_blocks,
                 mode="markers+text" if n_blocks + 1 <= MAX_TICK_LABELS else "markers",
                 text=[f"f{_sub(j)}" for j in range(1, n_blocks + 1)], textfont=dict(size=14, color=BLOCK_LINE),
                 customdata=[[name, ""] for name in blocks], hovertext=[hover[j, j] for j in range(1, n_blocks + 1)],
                 hovertemplate="<b>%{customdata[0]}</b><br>%{hovertext}<extra></extra>",
                 marker=dict(symbol="square", size=box, color=BLOCK_FILL, line=dict(color=BLOCK_LINE, width=1.5)))
    nodes = dict(scatter, name="states", x=list(range(n_blocks + 1)), y=[0.0] * (n_blocks + 1), mode="markers+text",
                 text=[f"x{_sub(k)}" if k % every == 0 or k == n_blocks else "" for k in range(n_blocks + 1)],
                 textposition="bottom center", textfont=dict(size=15), cliponaxis=False,
                 customdata=[[f"x_{k}", ""] for k in range(n_blocks + 1)],
                 hovertext=[state_label(k, blocks) + (", the network's output" if k == n_blocks else "")
                            for k in range(n_blocks + 1)],
                 hovertemplate="%{hovertext}<extra></extra>", marker=dict(size=node, color=NODE_COLOR))
    shown = [pair for pair in pairs if pair in arcs]
    small = n_blocks + 1 <= MAX_CELL_TEXT
    apex = dict(scatter, name="shortcuts", x=[(i + j) / 2 for i, j in shown], y=[_rise(j - i) for i, j in shown],
                mode="markers+text" if small else "markers", text=[_g(arcs[p]) for p in shown],
                textposition="top center", textfont=dict(size=14), cliponaxis=False,
                customdata=[[f"{i}:{j}", "remove"] for i, j in shown], hovertext=[hover[j, i] for i, j in shown],
                hovertemplate="%{hovertext}<br><i>click: remove %{customdata[0]}</i><extra></extra>",
                marker=dict(size=7 if small else 4, color=[style.color(arcs[p]) for p in shown],
                            line=dict(color="white", width=1 if small else 0)))
    absent = [(i, j) for j in range(1, n_blocks + 1) for i in range(j) if (i, j) not in arcs]
    addable = dict(scatter, name="add a shortcut", x=[(i + j) / 2 for i, j in absent],
                   y=[_rise(j - i) for i, j in absent], mode="markers", marker=dict(size=12, color="rgba(0,0,0,0)"),
                   customdata=[[f"{i}:{j}", "add"] for i, j in absent],
                   hovertext=[f"<b>{i}:{j}</b> is not in this design; it would add {state_label(i, blocks)} to "
                              f"{target_label(j, n_blocks, blocks)}" for i, j in absent],
                   hovertemplate="%{hovertext}<br><i>click: add %{customdata[0]}</i><extra></extra>")
    what = "learned<br>coefficient" if learned_coefficients(result) else "weight"
    bar = dict(scatter, name="colour scale", x=[None], y=[None], mode="markers", hoverinfo="skip",
               marker=dict(colorscale=style.colorscale(), cmin=style.low, cmax=style.high, color=[style.low],
                           showscale=True, colorbar=dict(title=dict(text=what), thickness=14, len=0.5, y=1.0,
                                                         yanchor="top")))
    return [stem, *lines, boxes, nodes, apex, addable, bar]


def _network_axes(n_blocks: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(x axis, y axis) of the network view: the row at y = 0 with room for its labels, the tallest arc's apex
    and its value below the top."""
    hidden = dict(visible=False, showgrid=False, zeroline=False)
    top = _rise(n_blocks) * 1.1 + 0.2
    return dict(range=[-0.6, n_blocks + 0.6], **hidden), dict(range=[-0.12 * top, top], **hidden)


def _notation(learned: bool) -> str:
    """The caption: what an arc is (SHORTCUT_NOTATION) and what its width and colour show."""
    return f"Arc i:j: {SHORTCUT_NOTATION}. Width and colour: {'its learned coefficient' if learned else 'its weight'}."


def _meta(result: Mapping[str, Any]) -> dict[str, Any]:
    """What an app reads back: the block count, the design's shortcuts and the pairs it could add, as "i:j"."""
    n = len(np.asarray(result["own"]))
    arcs = arcs_of(result)
    return {"n_blocks": n - 1, "shortcuts": [f"{i}:{j}" for i, j in arcs],
            "addable": [f"{i}:{j}" for j in range(1, n) for i in range(j) if (i, j) not in arcs]}


def network_figure(source: Any, title: str | None = None, pairs: Sequence[tuple[int, int]] | None = None) -> go.Figure:
    """The network of `source` (a Run as trained so far, an ExperimentSpec as initialised, or a coefficients
    probe result): states x_0 .. x_L as nodes, blocks f_j as boxes between x_{j-1} and x_j, every shortcut i:j as
    an arc from x_i to x_j whose width and colour give its weight or learned coefficient (`_Style`), the value
    printed at its apex up to MAX_CELL_TEXT states. Hovering an arc, its apex or a block gives
    `coefficient_heatmap`'s hover of that cell: what the shortcut adds where (`describe_shortcut`) and its number,
    with the equation that made it. Each pair i:j the design lacks has an invisible marker at the apex its arc
    would have, customdata [i:j, "add"]; arcs and apexes carry [i:j, "remove"]; `layout.meta` lists both. States
    are labelled every k-th one past MAX_TICK_LABELS.

    `pairs` gives one arc trace to each pair i:j listed, in that order (empty where the design lacks it), in place
    of one per shortcut of the design: figures of different designs on the same pairs then have the same traces,
    so a widget redraws one in place. It must list every shortcut of the design."""
    result, design = coefficients_result(source)
    n_blocks = len(np.asarray(result["own"])) - 1
    arcs = arcs_of(result)
    learned = learned_coefficients(result)
    if pairs is None:
        pairs = list(arcs)
    else:
        pairs = [(int(i), int(j)) for i, j in pairs]
        left_out = [f"{i}:{j}" for i, j in arcs if (i, j) not in pairs]
        if left_out:
            raise ValueError(f"pairs must list every shortcut of the design; add {', '.join(left_out)}")
    fig = go.Figure(_traces(result, pairs, _Style(list(arcs.values()), n_blocks)))
    xaxis, yaxis = _network_axes(n_blocks)
    fig.add_annotation(xref="paper", yref="paper", x=0, y=0, yshift=-4, xanchor="left", yanchor="top", align="left",
                       showarrow=False, font=dict(size=13, color="#444"),
                       text=wrap_title(_notation(learned), CAPTION_CHARS))
    head = (f"Network{f' ({design})' if design else ''}: {n_blocks} blocks, {len(arcs)} shortcut arcs "
            f"({'learned coefficients' if learned else 'weights'})")
    return _finish(fig, wrap_title(title or head, TITLE_CHARS), xaxis=xaxis, yaxis=yaxis, hovermode="closest",
                   plot_bgcolor="white", margin=dict(l=20, r=20, t=70, b=60), meta=_meta(result))


# --------------------------------------------------------------------------- replay


def _recorded(run_or_history: Any, probe_name: str) -> tuple[dict[str, Any], list[tuple[int, dict]]]:
    """(the run as `loss_curves` reads it, [(step, result)] of its `probe_name` snapshots in step order) of a Run
    or of a stored run's record (a dict with "history" and "probes" or "probe_history", as RunStore.get gives)."""
    if isinstance(run_or_history, Run):
        run = run_or_history
        curve = {**run.summary(), "history": run.history, "label": _design_name(run.spec)}
        entries = run.probe_history
    elif isinstance(run_or_history, Mapping) and "history" in run_or_history:
        curve = {"label": "run", **run_or_history}
        spec = run_or_history.get("spec")
        if "label" not in run_or_history and isinstance(spec, Mapping) and "topology" in spec:
            curve["label"] = describe_change(None, spec["topology"])
        entries = run_or_history.get("probe_history", run_or_history.get("probes")) or []
    else:
        raise ValueError("run_or_history must be an explorer Run or a stored run (a dict with 'history' and "
                         f"'probes'), got {type(run_or_history).__name__}")
    if not curve["history"]:
        raise ValueError("run_or_history has no logged step to replay: train it first")
    snapshots = sorted(((int(e["step"]), e["result"]) for e in entries if e.get("name") == probe_name),
                       key=lambda snapshot: snapshot[0])
    return curve, snapshots


def _snapshot_at(snapshots: list[tuple[int, dict]], step: int) -> dict:
    """The last snapshot taken at or before `step` (the first one, before any was taken)."""
    best = snapshots[0][1]
    for taken, result in snapshots:
        if taken > step:
            break
        best = result
    return best


def _up_to(trace: go.Scatter, step: int) -> dict[str, Any]:
    """A loss trace's points up to `step` (its customdata holds each point's step); a lone point of a line gets a
    marker, as `loss_curves` draws one."""
    keep = [k for k, s in enumerate(trace.customdata or ()) if s is not None and s <= step]
    mode = "lines+markers" if len(keep) == 1 and trace.mode == "lines" else trace.mode
    return dict(type="scatter", x=[trace.x[k] for k in keep], y=[trace.y[k] for k in keep],
                customdata=[trace.customdata[k] for k in keep], mode=mode)


def _span(values: Sequence[Any], log: bool) -> list[float]:
    """A fixed axis range holding `values` (in log10 units on a log axis), padded by 5%."""
    kept = [math.log10(v) if log else v for v in values
            if v is not None and math.isfinite(v) and (v > 0 or not log)]
    low, high = (min(kept), max(kept)) if kept else (0.0, 1.0)
    pad = 0.05 * (high - low) if high > low else 0.5
    return [low - pad, high + pad]


def _controls(names: list[str], frame_ms: float) -> tuple[list[dict], list[dict]]:
    """(update menus, sliders) under the figure: replay from the start, pause, play on from here at each speed
    of SPEEDS, and a slider over the logged steps."""

    def play(ms: float, from_start: bool = False) -> list:
        # no mode="immediate" here: plotly.js then rejects every queued frame's promise (an error in the page)
        return [None, dict(frame=dict(duration=ms, redraw=True), transition=dict(duration=0),
                           fromcurrent=not from_start)]

    buttons = [dict(label="⟲ replay", method="animate", args=play(frame_ms, from_start=True)),
               dict(label="❚❚ pause", method="animate",
                    args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")])]
    buttons += [dict(label=f"▶ {speed:g}x", method="animate", args=play(frame_ms / speed)) for speed in SPEEDS]
    menus = [dict(type="buttons", direction="left", x=0.0, xanchor="left", y=-0.13, yanchor="top",
                  showactive=False, pad=dict(t=0, r=10), font=dict(size=13), buttons=buttons)]
    steps = [dict(label=name, method="animate",
                  args=[[name], dict(frame=dict(duration=0, redraw=True), mode="immediate", transition=dict(duration=0))])
             for name in names]
    sliders = [dict(active=len(names) - 1, steps=steps, x=0.42, len=0.58, y=-0.1, yanchor="top", pad=dict(t=0, b=0),
                    currentvalue=dict(prefix="step ", xanchor="right", font=dict(size=14)), font=dict(size=11))]
    return menus, sliders


def _frame_parts(parts: list[dict], n_pairs: int, moving: bool) -> tuple[list[dict], list[int]]:
    """What one frame changes in the network's traces (`_traces` order), and their indices: each arc's line and
    hover (its points too when the design changes during the run), the blocks' hover, the apexes, and the
    addable pairs when the design changes."""
    arcs = range(1, 1 + n_pairs)
    boxes, apex, addable = 1 + n_pairs, 3 + n_pairs, 4 + n_pairs
    keys = ("line", "hovertemplate") + (("x", "y", "customdata") if moving else ())
    data = [dict(type="scatter", **{key: parts[k][key] for key in keys}) for k in arcs]
    data.append(dict(type="scatter", hovertext=parts[boxes]["hovertext"]))
    data.append({**parts[apex]})
    indices = [*arcs, boxes, apex]
    if moving:
        data.append({**parts[addable]})
        indices.append(addable)
    return data, indices


def replay_figure(run_or_history: Any, probe_name: str = COEFFICIENTS_PROBE, title: str | None = None,
                  seconds: float = REPLAY_SECONDS, log_x: bool = True, log_y: bool = True) -> go.Figure:
    """A finished run replayed from what it recorded: one animation frame per logged step, each showing the loss
    curve (`loss_curves`, on fixed axes) up to that step and, when the run recorded `probe_name` snapshots, the
    network view's arcs (`network_figure`) from the last snapshot at or before that step, on one scale for the
    whole run. explorer.train(spec, probes={"coefficients": {}}, probe_every=spec.train.log_every) records one at
    every logged step. A run with none shows the loss only, and its title says so. Buttons under the figure
    replay from the start, pause, and play on at 0.5x, 1x and 4x (1x: about `seconds` in all); a slider scrubs
    through the steps. As drawn before any frame plays, the figure shows the run's last step.

    `run_or_history` is a Run or a stored run (a dict with "history" and "probes", as RunStore.get returns)."""
    curve, snapshots = _recorded(run_or_history, probe_name)
    steps = [int(row["step"]) for row in curve["history"]]
    loss = loss_curves([curve], log_x=log_x, log_y=log_y, title="")
    network = bool(snapshots)
    fig = make_subplots(rows=2 if network else 1, cols=1, row_heights=[0.55, 0.45] if network else None,
                        vertical_spacing=0.12)
    xref, yref = ("x2", "y2") if network else ("x", "y")
    frames = [dict(name=str(step), data=[], traces=[]) for step in steps]
    if network:
        results = [_snapshot_at(snapshots, step) for step in steps]
        designs = [arcs_of(r) for r in results]
        pairs = sorted({pair for arcs in designs for pair in arcs}, key=lambda pair: (pair[1], pair[0]))
        n_blocks = len(np.asarray(results[-1]["own"])) - 1
        style = _Style([v for arcs in designs for v in arcs.values()], n_blocks)
        moving = any(set(arcs) != set(designs[0]) for arcs in designs)
        parts = None
        for frame, result in zip(frames, results):
            parts = _traces(result, pairs, style)
            frame["data"], frame["traces"] = _frame_parts(parts, len(pairs), moving)
        fig.add_traces(parts)  # the last step's network
        xaxis, yaxis = _network_axes(n_blocks)
        fig.update_layout(xaxis=xaxis, yaxis=yaxis)
    first = len(fig.data)
    for trace in loss.data:
        fig.add_trace(trace.update(xaxis=xref, yaxis=yref))
    for frame, step in zip(frames, steps):
        frame["data"] += [_up_to(trace, step) for trace in loss.data]
        frame["traces"] += list(range(first, first + len(loss.data)))
    xs = [v for trace in loss.data for v in trace.x or ()]
    ys = [v for trace in loss.data for v in trace.y or ()]
    fig.layout[xref.replace("x", "xaxis")].update({**loss.layout.xaxis.to_plotly_json(), "range": _span(xs, log_x)})
    fig.layout[yref.replace("y", "yaxis")].update({**loss.layout.yaxis.to_plotly_json(), "range": _span(ys, log_y)})
    for shape in loss.layout.shapes:  # rewire lines and what changed
        fig.add_shape(shape.update(xref=xref, yref=f"{yref} domain"))
    for note in loss.layout.annotations:
        fig.add_annotation(note.update(xref=xref, yref=f"{yref} domain"))
    fig.frames = frames
    menus, sliders = _controls([frame["name"] for frame in frames],
                               min(max(seconds * 1000 / len(steps), FRAME_MS[0]), FRAME_MS[1]))
    if network:
        what = "learned coefficients" if learned_coefficients(results[-1]) else "weights"
        head = f"Replay of {curve['label']}: the network's {what} (top) and the loss (bottom) at each logged step"
    else:
        head = (f"Replay of {curve['label']}: loss only (the run recorded no {probe_name} snapshots; train with "
                f"probes={{'{probe_name}': {{}}}}, probe_every=log_every to replay its network)")
    top = fig.layout[yref.replace("y", "yaxis")].domain[1]
    return _finish(fig, wrap_title(title or head, TITLE_CHARS), updatemenus=menus, sliders=sliders,
                   hovermode="closest", plot_bgcolor="white", margin=dict(l=60, r=20, t=80, b=110),
                   legend=dict(orientation="h", x=1, xanchor="right", y=top, yanchor="bottom"),
                   meta=_meta(results[-1]) if network else {})
