"""Per-matrix and per-block numbers: singular-value spectra (`spectra`, numerical zeros on a floor),
histograms of log singular values over training (`log_singular_value_histograms`), a quantity against depth
(`norms_by_layer`), numerical ranks (`rank_plot`) and dead weights (`dead_weights`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from explorer.plots.common import (
    _FMT, NUMERICAL_ZERO, PALETTE, _axis_title, _curve_dict, _finish, _log_axis, _plotted_y, _resolve_colors,
    _spacing, _vector, wrap_title,
)


def spectra(
    curves: Mapping[str, Any],
    title: str,
    log_y: bool = True,
    colors: Mapping[str, str] | None = None,
    zero: float = NUMERICAL_ZERO,
    matrices: Mapping[str, str] | None = None,
) -> go.Figure:
    """Singular-value spectra, one line per label: index i (1 = largest) on x, sigma_i on y.

    The arrays are drawn as given (they should be sorted descending). Values below `zero` x the
    largest singular value of their curve are numerical zeros: on a log axis they are drawn on a
    dotted floor at that level (open markers, hover gives the true value) and a note says how many,
    so round-off (1e-20, 1e-54) does not squash the useful range. A long title is wrapped (`wrap_title`): the
    Jacobian probes put their numbers in it. Each point's hover says which matrix it is a
    singular value of (`matrices`: label -> e.g. "W of stack.blocks.0 (the layer's weight)"; default the label) and
    the curve's condition number sigma_max / sigma_min over its values, with the numbers.
    """
    data = _curve_dict("curves", curves)
    palette = _resolve_colors(list(data), colors)
    fig = go.Figure()
    zeros, floors = 0, []
    for label, y in data.items():
        x = np.arange(1, y.size + 1)
        finite = y[np.isfinite(y)]
        top = float(np.abs(finite).max()) if finite.size else 0.0
        floor = zero * top if log_y and top > 0 else None  # each matrix's own sigma_max
        low = (~np.isfinite(y) | (y < floor)) if floor is not None else np.zeros(y.size, bool)
        if low.any():
            floors.append(floor)
        zeros += int(low.sum())
        maths = _spectrum_maths(label, finite, (matrices or {}).get(label))
        fig.add_trace(go.Scatter(
            x=x, y=np.where(low, np.nan, y), mode="lines+markers", name=label, legendgroup=label,
            line=dict(color=palette[label]), marker=dict(size=4),
            hovertemplate=f"σ_%{{x}} = %{{y:{_FMT}}}{maths}<extra>{label}</extra>",
        ))
        if low.any():
            fig.add_trace(go.Scatter(
                x=x[low], y=np.full(int(low.sum()), floor), customdata=y[low], mode="markers", legendgroup=label,
                name=f"{label}: numerical zeros", showlegend=False,
                marker=dict(size=6, symbol="circle-open", color=palette[label]),
                hovertemplate=f"σ_%{{x}} = %{{customdata:{_FMT}}} (numerical zero){maths}<extra>{label}</extra>",
            ))
    fig.update_xaxes(title_text="index i (1 = largest singular value)")
    if log_y:
        fig.update_yaxes(**_log_axis(_plotted_y(fig)), title_text=_axis_title("singular value σ_i", True))
    else:
        fig.update_yaxes(type="linear", title_text="singular value σ_i")
    if zeros:
        for floor in sorted(set(floors)):
            fig.add_hline(y=floor, line=dict(color="#7f7f7f", dash="dot", width=1))
        # in the plot's top right corner, where a descending spectrum leaves room, not on the floor among the
        # markers it counts; two short lines fit a narrow app column, and a white box keeps it readable over a line
        fig.add_annotation(xref="paper", yref="paper", x=1.0, y=1.0, xanchor="right", yanchor="top", align="right",
                           showarrow=False, font=dict(size=11, color="#555"), bgcolor="rgba(255,255,255,0.85)",
                           text=f"{zeros} numerical zero(s): σ < {zero:.1e} × σ_max of their matrix,"
                                "<br>drawn as open circles on a dotted floor")
    return _finish(fig, wrap_title(title))


def _spectrum_maths(label: str, values: np.ndarray, matrix: str | None) -> str:
    """A spectrum point's hover after its value: the matrix it is a singular value of, and the condition number
    sigma_max / sigma_min over the curve's values, with the numbers."""
    text = f"<br>singular value of {matrix or label}"
    if values.size:
        top, bottom = float(values.max()), float(values.min())
        kappa = top / bottom if bottom > 0 else math.inf
        text += (f"<br>κ = σ_max / σ_min (over its {values.size} values) = {top:.4g} / {bottom:.4g} = "
                 + (f"{kappa:.4g}" if math.isfinite(kappa) else "∞ (σ_min = 0)"))
    return text


def log_singular_value_histograms(per_epoch: Sequence[tuple[str, Any]], title: str) -> go.Figure:
    """Small multiples of histograms of log10(singular value), one panel per entry (IDInit Fig. 18).

    All panels share their bins and x axis so how the spectrum spreads over training is
    comparable; panels are coloured along a sequential scale since the entries are ordered.
    Zero (and non-finite) singular values have no logarithm and are left out; the panel title
    says how many.
    """
    if isinstance(per_epoch, Mapping) or not isinstance(per_epoch, Sequence) or not per_epoch:
        raise ValueError("per_epoch must be a non-empty list of (label, 1-d array) pairs")
    entries = []
    for i, item in enumerate(per_epoch):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"per_epoch[{i}] must be a (label, 1-d array) pair")
        values = _vector(f"per_epoch[{i}]", item[1])
        keep = np.isfinite(values) & (values > 0)
        entries.append((str(item[0]), np.log10(values[keep]), int((~keep).sum())))
    logs = np.concatenate([e[1] for e in entries])
    lo, hi = (float(logs.min()), float(logs.max())) if logs.size else (-1.0, 1.0)
    size = (hi - lo) / 40 if hi > lo else 0.05
    bins = dict(start=lo - size / 2, end=hi + size / 2, size=size)
    n = len(entries)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    names = [label + (f" ({dropped} zero σ omitted)" if dropped else "") for label, _, dropped in entries]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, shared_xaxes="all",
                        horizontal_spacing=_spacing(cols, 0.06), vertical_spacing=_spacing(rows, 0.12))
    shades = sample_colorscale("Viridis", [i / max(n - 1, 1) * 0.9 for i in range(n)])
    for i, (label, values, _) in enumerate(entries):
        fig.add_trace(go.Histogram(
            x=values, xbins=bins, autobinx=False, name=label, marker=dict(color=shades[i]),
            showlegend=False,
            hovertemplate=f"log10 σ in %{{x}}<br>count %{{y}}<extra>{label}</extra>",
        ), row=i // cols + 1, col=i % cols + 1)
    for i in range(n):
        if i + cols >= n:  # the bottom panel of its column
            fig.update_xaxes(title_text="log10(singular value)", row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(title_text="count", col=1)
    return _finish(fig, title, height=max(300, 250 * rows + 100), bargap=0.02)

def norms_by_layer(
    curves: Mapping[str, Any],
    title: str,
    ylabel: str = "relative norm",
    log_y: bool = False,
    colors: Mapping[str, str] | None = None,
    labels: Sequence[str] | None = None,
    equations: Mapping[str, Sequence[str]] | None = None,
) -> go.Figure:
    """A per-block quantity (e.g. ||h_l|| / ||h_0||) against depth, one line per label.

    The x axis is categorical: `labels` name the entries in order (a probe's own labels, e.g. "input",
    "block 1 attn"); without them "block 1".."block n". A curve shorter than the labels takes the first ones.
    `equations` (label -> one text per point) adds to each point's hover how its value was computed, with the
    numbers (the norms probe's figure gives the norm's formula and the ratio).
    """
    data = _curve_dict("curves", curves)
    longest = max(y.size for y in data.values())
    names = [f"block {i}" for i in range(1, longest + 1)] if labels is None else [str(n) for n in labels]
    if len(names) < longest:
        raise ValueError(f"labels has {len(names)} entries for a curve of {longest} values")
    palette = _resolve_colors(list(data), colors)
    fig = go.Figure()
    for label, y in data.items():
        maths = list((equations or {}).get(label, ()))
        if maths and len(maths) != y.size:
            raise ValueError(f"equations[{label!r}] has {len(maths)} texts for {y.size} values")
        fig.add_trace(go.Scatter(
            x=names[:y.size], y=y, mode="lines+markers", name=label, line=dict(color=palette[label]),
            customdata=maths or None,
            hovertemplate=f"%{{x}}<br>{ylabel} %{{y:{_FMT}}}{'<br>%{customdata}' if maths else ''}<extra>{label}</extra>",
        ))
    fig.update_xaxes(title_text="block", type="category", categoryorder="array", categoryarray=names)
    fig.update_yaxes(**(_log_axis(_plotted_y(fig)) if log_y else dict(type="linear")),
                     title_text=_axis_title(ylabel, log_y))
    return _finish(fig, title)


def rank_plot(names: Sequence[str], ranks: Sequence[Any], full_ranks: Sequence[Any], title: str) -> go.Figure:
    """Bars of each weight matrix's numerical rank in front of a grey bar of its full rank min(m, n)."""
    names = [str(n) for n in names]
    rank = _vector("ranks", ranks)
    full = _vector("full_ranks", full_ranks)
    if not names:
        raise ValueError("names must not be empty")
    if rank.size != len(names):
        raise ValueError(f"ranks has {rank.size} entries for {len(names)} names")
    if full.size != len(names):
        raise ValueError(f"full_ranks has {full.size} entries for {len(names)} names")
    if np.any(rank < 0) or np.any(rank > full):
        raise ValueError("ranks must lie between 0 and full_ranks")
    ratio = np.divide(rank, full, out=np.zeros_like(rank), where=full > 0)
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=names, y=full, name="full rank", width=0.8, marker=dict(color="#d9d9d9"),
        hovertemplate="%{x}<br>full rank %{y}<extra></extra>",
    ))
    fig.add_trace(go.Bar(
        x=names, y=rank, name="numerical rank", width=0.5, marker=dict(color=PALETTE[0]),
        customdata=np.stack([full, ratio], axis=1),
        hovertemplate="%{x}<br>numerical rank %{y} of %{customdata[0]} (%{customdata[1]:.1%})<extra></extra>",
    ))
    fig.update_xaxes(title_text="weight matrix", type="category")
    fig.update_yaxes(title_text="rank (number of singular values)")
    return _finish(fig, title, barmode="overlay")


def dead_weights(names: Sequence[str], dead: Sequence[Any], total: Sequence[Any], title: str) -> go.Figure:
    """Bars of the fraction of each weight matrix's entries whose loss gradient is exactly zero (the dead
    probe, IDInit Fig. 5); hover gives the counts. The y axis says "dead weights", never "rank"."""
    names = [str(n) for n in names]
    dead, total = _vector("dead", dead), _vector("total", total)
    if not names or dead.size != len(names) or total.size != len(names):
        raise ValueError(f"names, dead and total must have one entry per matrix, got {len(names)}, {dead.size}, "
                         f"{total.size}")
    fraction = np.divide(dead, total, out=np.zeros(len(names)), where=total > 0)
    fig = go.Figure(go.Bar(x=names, y=fraction, marker=dict(color=PALETTE[3]), name="dead weights",
                           customdata=np.stack([dead, total], axis=1),
                           hovertemplate="%{x}<br>%{customdata[0]} of %{customdata[1]} dead (%{y:.1%})<extra></extra>"))
    fig.update_xaxes(title_text="weight matrix", type="category")
    fig.update_yaxes(title_text="dead weights (fraction with zero gradient)", range=[0, 1], tickformat=".0%")
    return _finish(fig, title)
