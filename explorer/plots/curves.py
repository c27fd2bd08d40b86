"""Curves over a shared x: a run's training curves against step (`loss_curves`, with its divergence and
rewire markers and an optional moving average, `ema`) and closed-form results over a swept quantity
(`theory_curves`, with a difference panel)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.plots.common import (
    _FMT, _axis_title, _curve_dict, _finish, _label_side, _line_mode, _log_axis, _number, _plotted_y,
    _resolve_colors, _short_list, _vector,
)


def _series(history: Sequence[Mapping[str, Any]], key: str, log_y: bool) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` in `history`, skipping missing/non-finite (and on log-y non-positive) values."""
    steps, values = [], []
    for row in history:
        value = _number(row.get(key))
        if value is None or (log_y and value <= 0):
            continue
        steps.append(int(row["step"]))
        values.append(value)
    return steps, values


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with TensorBoard's debiasing: s_t = w s_{t-1} + (1 - w) v_t, shown as
    s_t / (1 - w^t), so the first point is the first value rather than a value pulled towards 0."""
    out, last = [], 0.0
    for t, value in enumerate(values, start=1):
        last = weight * last + (1.0 - weight) * float(value)
        out.append(last / (1.0 - weight ** t))
    return out


def loss_curves(
    runs: Sequence[Mapping[str, Any]],
    metric: str = "loss",
    log_x: bool = True,
    log_y: bool = True,
    colors: Mapping[str, str] | None = None,
    show_val: bool = True,
    title: str | None = None,
    smoothing: float = 0.0,
) -> go.Figure:
    """Training curves of `metric` against step, one line per run (what `Run.summary()` gives + "label").

    A solid line per run, plus a dashed line of `"val_" + metric` when the history has it (and
    `show_val`). Step 0 cannot sit on a log-x axis, so with `log_x` every point is drawn at
    step + 1 (the axis title says so; hover shows the true step) rather than dropping the
    initial loss. Missing and non-finite values are skipped, not drawn as 0 (on a log-y axis
    non-positive values are skipped too). A diverged run gets an "x" marker labelled "diverged at
    step N" at its divergence step, drawn at the loss it exploded to (the run's "diverged_loss")
    when that is finite, else above every plotted value, so the axis shows the explosion; its
    legend name says "(diverged at step N)". `smoothing` in [0, 1) draws each training curve as
    its exponential moving average (weight `smoothing`, debiased as TensorBoard does) with the raw
    curve faint behind it; validation curves are not smoothed. A run rewired while it trained (its
    "rewires", with the design it started from in "initial_spec", else "spec") gets a dashed vertical line
    at each rewire's step, labelled with what changed ("+0:6", "-1:4", "0:3*0.5").
    """
    from explorer.topology.shortcuts import describe_change

    if not 0.0 <= float(smoothing) < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if isinstance(runs, Mapping) or not isinstance(runs, Sequence) or not runs:
        raise ValueError("runs must be a non-empty list of dicts with 'label' and 'history'")
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or "label" not in run or "history" not in run:
            raise ValueError(f"runs[{i}] must be a dict with 'label' and 'history'")
        if any(not isinstance(row, Mapping) or "step" not in row for row in run["history"]):
            raise ValueError(f"runs[{i}]['history'] rows must be dicts with a 'step'")
    labels = [str(run["label"]) for run in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"runs must have distinct labels, got {labels}")
    palette = _resolve_colors(labels, colors)
    shift = 1 if log_x else 0
    val_key = f"val_{metric}"
    fig = go.Figure()
    diverged = []  # (label, colour, step, loss at divergence if known)
    rewired = []  # (colour, step, what changed)
    for label, run in zip(labels, runs):
        history = run["history"]
        color = palette[label]
        status = run.get("status")
        diverged_at = run.get("diverged_at")
        if status == "diverged" and diverged_at is None and history:
            diverged_at = int(history[-1]["step"])
        if status == "diverged":
            name = f"{label} (diverged at step {diverged_at})"
        elif status in ("stopped", "running"):
            name = f"{label} ({status})"
        else:
            name = label
        steps, values = _series(history, metric, log_y)
        if smoothing > 0 and values:
            fig.add_trace(go.Scatter(
                x=[s + shift for s in steps], y=values, customdata=steps, mode=_line_mode(values),
                name=f"{label} (raw)", legendgroup=label, showlegend=False, opacity=0.25, line=dict(color=color),
                hovertemplate=f"step %{{customdata}}<br>raw {metric} %{{y:{_FMT}}}<extra>{label}</extra>",
            ))
        shown = ema(values, smoothing) if smoothing > 0 else values
        fig.add_trace(go.Scatter(
            x=[s + shift for s in steps], y=shown, customdata=steps, mode=_line_mode(values), name=name,
            legendgroup=label, line=dict(color=color),
            hovertemplate=(f"step %{{customdata}}<br>{metric} %{{y:{_FMT}}}"
                           f"{' (smoothed)' if smoothing > 0 else ''}<extra>{label}</extra>"),
        ))
        val_steps, val_values = _series(history, val_key, log_y)
        if show_val and val_values:
            fig.add_trace(go.Scatter(
                x=[s + shift for s in val_steps], y=val_values, customdata=val_steps, mode=_line_mode(val_values),
                name=f"{label} ({val_key})", legendgroup=label, line=dict(color=color, dash="dash"),
                hovertemplate=f"step %{{customdata}}<br>{val_key} %{{y:{_FMT}}}<extra>{label}</extra>",
            ))
        if status == "diverged" and diverged_at is not None:
            diverged.append((label, color, int(diverged_at), _number(run.get("diverged_loss"))))
        design = (run.get("initial_spec") or run.get("spec") or {}).get("topology")
        for change in run.get("rewires") or []:
            what = change.get("change") or describe_change(design, change["topology"])
            rewired.append((color, int(change["step"]), what))
            design = change["topology"]
    plotted = _plotted_y(fig)
    top = max(plotted) if plotted else 1.0
    xs = [float(x) for t in fig.data for x in t.x] + [step + shift for _, _, step, _ in diverged]
    for label, color, step, exploded in diverged:
        # at the value the loss exploded to when it is known and finite, else above everything plotted:
        # the marker sits at the top of the axis, where the explosion went, never among the plotted losses
        y = exploded if exploded is not None and (not log_y or exploded > 0) else (top * 10 if log_y else top * 1.5 + 1)
        what = f"{metric} {y:.4g}" if exploded is not None else f"{metric} non-finite or past diverge_factor"
        fig.add_trace(go.Scatter(
            x=[step + shift], y=[y], customdata=[step], mode="markers+text", text=[f"diverged at step {step}"],
            textposition=_label_side(step + shift, xs, log_x), textfont=dict(color=color), cliponaxis=False,
            name=f"{label}: diverged", legendgroup=label, showlegend=False,
            marker=dict(symbol="x", size=14, color=color, line=dict(width=1, color=color)),
            hovertemplate=f"diverged at step %{{customdata}}<br>{what}<extra>{label}</extra>",
        ))
    for color, step, what in rewired:  # on a log axis a shape takes the data value, an annotation its log10
        x = step + shift if log_x else step
        fig.add_shape(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                      line=dict(color=color, width=1, dash="dash"))
        fig.add_annotation(x=math.log10(x) if log_x else x, xref="x", y=1, yref="paper", yanchor="bottom", text=what,
                           showarrow=False,
                           font=dict(color=color), hovertext=f"rewired at step {step}: {what}")
    x_title = "step + 1 (log scale; step 0 drawn at 1)" if log_x else "step"
    fig.update_xaxes(**(_log_axis() if log_x else dict(type="linear")), title_text=x_title)
    fig.update_yaxes(**(_log_axis(_plotted_y(fig)) if log_y else dict(type="linear")), title_text=_axis_title(metric, log_y))
    return _finish(fig, title or f"Training {metric} vs step: {_short_list(labels)}",
                   hovermode="closest",  # legend below the plot: a long "(diverged at step N)" is not clipped
                   legend=dict(title=dict(text="run"), orientation="h", yanchor="top", y=-0.25, x=0))


def theory_curves(
    x: Any,
    curves: Mapping[str, Any],
    title: str,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    log_y: bool = False,
    colors: Mapping[str, str] | None = None,
    difference: Sequence[str] = (),
    difference_label: str = "difference",
) -> go.Figure:
    """Closed-form results as lines over a shared x (label -> y array of the same length as x).

    Curves named in `difference` (e.g. "DCA - Transformer") are drawn in a panel of their own below,
    on their own linear axis `difference_label` with a zero line: a gain of 0.001 on the losses' axis
    would read as a flat line at zero.
    """
    xs = _vector("x", x)
    data = _curve_dict("curves", curves)
    for label, y in data.items():
        if y.size != xs.size:
            raise ValueError(f"curves[{label!r}] has {y.size} values for {xs.size} x values")
    unknown = [d for d in difference if d not in data]
    if unknown:
        raise ValueError(f"difference names curves that are not given: {unknown}")
    palette = _resolve_colors(list(data), colors)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.08) \
        if difference else go.Figure()
    main = [label for label in data if label not in difference]
    for label, y in data.items():
        trace = go.Scatter(
            x=xs, y=y, mode="lines+markers" if label in difference else "lines", name=label,
            line=dict(color=palette[label]),
            hovertemplate=f"{xlabel} %{{x:{_FMT}}}<br>{ylabel if label in main else difference_label} "
                          f"%{{y:{_FMT}}}<extra>{label}</extra>",
        )
        if difference:
            fig.add_trace(trace, row=2 if label in difference else 1, col=1)
        else:
            fig.add_trace(trace)
    main_y = [v for label in main for v in data[label] if math.isfinite(v)]
    x_style = _log_axis(xs) if log_x else dict(type="linear")
    if difference:
        fig.update_xaxes(**x_style)
        fig.update_xaxes(title_text=_axis_title(xlabel, log_x), row=2, col=1)
        fig.update_yaxes(**(_log_axis(main_y) if log_y else dict(type="linear")),
                         title_text=_axis_title(ylabel, log_y), row=1, col=1)
        fig.update_yaxes(type="linear", title_text=difference_label, zeroline=True, zerolinecolor="#999",
                         row=2, col=1)
        return _finish(fig, title, height=520)
    fig.update_xaxes(**x_style, title_text=_axis_title(xlabel, log_x))
    fig.update_yaxes(**(_log_axis(main_y) if log_y else dict(type="linear")), title_text=_axis_title(ylabel, log_y))
    return _finish(fig, title)
