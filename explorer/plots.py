"""Plotly figure builders for probe results and training histories.

Every function here is a pure function of plain Python / numpy inputs (so it does not depend
on the rest of the package) and returns a `plotly.graph_objects.Figure`; nothing here trains,
probes or decomposes anything, it only lays out numbers that were computed elsewhere. The
Streamlit app and the notebooks share these builders so a figure looks the same in both. A probe's
figures are declared beside the probe with `figure_for` (this module imports no probe); `probe_figures`
looks them up, and draws a probe that declared none as a table of its numbers.

Conventions shared by every figure:

* `template="plotly_white"`, a title saying what is shown, axis titles naming the quantity and
  its scale ("(log scale)"), and a hovertemplate that shows the exact values (6 significant
  digits).
* One colour per run: `run_colors(labels)` assigns colours from a fixed qualitative palette in
  label order, and every multi-run builder takes an optional `colors` mapping (label -> colour)
  so the app can keep the same colour for a run across all of its figures.
* Bad input raises ValueError naming the offending argument.
* Blocks are numbered 1..L as the spec counts them (`explorer.nn.base.n_blocks`; for a Transformer L =
  `model.depth`, a block being attention + MLP at either `model.level`). The embedded input, where a
  figure draws it, is labelled "input", never "block 0". Where a probe measures sub-blocks (the
  `norms` probe on a Transformer at module level, e.g. skipless) each keeps its own entry, labelled
  "block 3 attn" and "block 3 mlp", rather than being summed away. The probes return these labels
  (`labels`) or whole-block indices (the `pca` probe's `blocks`: 0 = the input, b = after block b),
  and every figure shows them as they are: axis categories, row titles, hover text.

`export`, `to_html_bytes` and `to_png_bytes` save figures. HTML is self-contained (plotly.js
is embedded, no CDN) because the app must work offline; PNG needs the optional `kaleido`
package and a Chromium/Chrome browser, and raises RuntimeError saying so when they are missing.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

__all__ = [
    "PALETTE",
    "PROBE_FIGURES",
    "attention_maps",
    "coefficient_basis",
    "coefficient_heatmap",
    "ema",
    "dead_weights",
    "export",
    "figure_bundle",
    "figure_for",
    "log_singular_value_histograms",
    "loss_curves",
    "notebook_mode",
    "norms_by_layer",
    "numbers_table",
    "pca_grid",
    "probe_figures",
    "rank_plot",
    "run_colors",
    "show_in",
    "spectra",
    "state_labels",
    "theory_curves",
    "to_html_bytes",
    "to_png_bytes",
    "training_progress",
    "verdict_table",
]

#: The fixed qualitative palette runs are coloured from: D3 "category10" then its ten lighter partners
#: ("tab20"), so a figure of up to 20 lines (e.g. 12 weight spectra) repeats no colour; cycled beyond.
#: Hard-coded so colours do not change with the plotly version.
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)
#: Singular values below NUMERICAL_ZERO x the largest one are numerical zeros (float32 round-off):
#: spectra draw them on a floor at that level, with a note, instead of stretching the axis to 1e-50.
NUMERICAL_ZERO = float(np.finfo(np.float32).eps)
TEMPLATE = "plotly_white"
MAX_DECADE_LABELS = 8  # a log axis labels at most about this many powers of ten (more overlap in a short figure)
_FMT = ".6g"  # hover number format: enough digits to read the exact value
PNG_FIX = (
    "PNG export needs the optional `kaleido` package and a Chromium/Chrome browser: "
    "`pip install kaleido`, plus a browser (Debian: `apt-get install chromium`, or run "
    "`plotly_get_chrome`)."
)


# --------------------------------------------------------------------------- helpers


def run_colors(labels: Sequence[str]) -> dict[str, str]:
    """Label -> colour from `PALETTE`, in label order (the same order always gives the same colours)."""
    colors: dict[str, str] = {}
    for label in labels:
        if label not in colors:
            colors[label] = PALETTE[len(colors) % len(PALETTE)]
    return colors


def _resolve_colors(labels: Sequence[str], colors: Mapping[str, str] | None) -> dict[str, str]:
    """Colours for `labels`: the caller's mapping where it has the label, else unused palette colours."""
    if colors is None:
        return run_colors(labels)
    if not isinstance(colors, Mapping):
        raise ValueError(f"colors must be a mapping label -> colour, got {type(colors).__name__}")
    out = {label: colors[label] for label in labels if label in colors}
    used = set(out.values())
    free = [c for c in PALETTE if c not in used] or list(PALETTE)
    missing = [label for label in dict.fromkeys(labels) if label not in out]
    for k, label in enumerate(missing):
        out[label] = free[k % len(free)]
    return out


def _axis_title(text: str, log: bool) -> str:
    return f"{text} (log scale)" if log else text


def _log_axis(values: Any = None) -> dict[str, Any]:
    """The one log-axis style: labels at powers of ten written as 10^k (no "8 9 1" minor labels, no SI
    prefixes such as "100n"), every power up to MAX_DECADE_LABELS decades and every n-th beyond. An axis
    spanning less than a decade has at most one power of ten in it, so it is labelled at three to seven round
    values instead (`_round_ticks`: 1.2, 1.4, 1.6 for losses 1.21-1.58)."""
    style = dict(type="log", exponentformat="power", showexponent="all", minor=dict(showgrid=True))
    arr = np.asarray([v for v in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(v) and v > 0]) \
        if values is not None else np.array([])
    decades = float(np.log10(arr.max() / arr.min())) if arr.size else 0.0
    if arr.size and decades < 1.0:
        ticks = _round_ticks(float(arr.min()), float(arr.max()))
        style.update(tickmode="array", tickvals=ticks, ticktext=[f"{t:.4g}" for t in ticks])
    else:  # every power of ten up to 8 decades, then every second, third...: 10^k labels never overlap
        style["dtick"] = max(1, math.ceil(decades / MAX_DECADE_LABELS))
    return style


def _round_ticks(low: float, high: float) -> list[float]:
    """Three to seven round values (steps of 1, 2 or 5 times a power of ten) in [low, high], widened by 10%
    on each side in log terms (the axis pads its range); a single value gets itself and its neighbours."""
    pad = (high / low) ** 0.1 if high > low else 1.2
    low, high = low / pad, high * pad
    step = 10.0 ** math.ceil(math.log10(high - low))
    while True:
        for factor in (1.0, 0.5, 0.2):
            ticks = np.arange(math.ceil(low / (step * factor)), math.floor(high / (step * factor)) + 1) * step * factor
            ticks = ticks[ticks > 0]
            if len(ticks) >= 3:
                return [float(f"{t:.6g}") for t in ticks]
        step /= 10.0


def _plotted_y(fig: go.Figure) -> list[float]:
    return [float(v) for t in fig.data if getattr(t, "y", None) is not None for v in t.y if _number(v) is not None]


def _line_mode(values: Sequence[Any]) -> str:
    """A lone point draws no line: give it a marker so a run logged once (or diverged early) is visible."""
    return "lines+markers" if len(values) == 1 else "lines"


def _label_side(x: float, xs: Sequence[float], log_x: bool) -> str:
    """Where a marker's label goes so it stays inside the plot area: below and to the right of a marker in the
    left half of the x range, to the left of one in the right half (a run that diverged at its last logged
    step sits at the right edge). The trace also sets cliponaxis=False, so a label near an edge is not cut."""
    if log_x:
        x, xs = math.log10(x), [math.log10(v) for v in xs if v > 0]
    low, high = min(xs, default=x), max(xs, default=x)
    return "bottom left" if high > low and x > (low + high) / 2 else "bottom right"


def _finish(fig: go.Figure, title: str, **layout: Any) -> go.Figure:
    _apply_template(fig)
    fig.update_layout(title=dict(text=title), **layout)
    return fig


def _apply_template(fig: go.Figure) -> None:
    """Give `fig` the project's template without re-validating it. Assigning a template validates and
    deep-copies its whole tree (60-190 ms a figure on a small CPU, most of a figure's cost); the app redraws
    its charts three times a second while a run trains, so that copy took CPU from the training. The template
    is plotly's own, already valid: plotly skips the same check when it applies its default template
    (`BaseFigure._initialize_layout_template`). Where a plotly version lacks the switch, this is the plain
    (slower) assignment."""
    layout = fig.layout
    validate = getattr(layout, "_validate", True)
    layout._validate = False
    try:
        layout.template = pio.templates[TEMPLATE]
    finally:
        layout._validate = validate


def _vector(name: str, value: Any) -> np.ndarray:
    """`value` as a 1-d float array, or ValueError naming the argument."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-d array of numbers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-d, got shape {arr.shape}")
    return arr


def _curve_dict(name: str, curves: Any) -> dict[str, np.ndarray]:
    """A label -> 1-d array mapping, validated."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(f"{name} must be a non-empty dict label -> 1-d array")
    return {str(label): _vector(f"{name}[{label!r}]", y) for label, y in curves.items()}


def _short_list(labels: Sequence[str], keep: int = 3) -> str:
    labels = list(labels)
    head = ", ".join(labels[:keep])
    return head if len(labels) <= keep else f"{head} + {len(labels) - keep} more"


def _number(value: Any) -> float | None:
    """A finite float, or None for None / NaN / inf / non-numbers (what gets skipped)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _spacing(n: int, wanted: float) -> float:
    """Subplot spacing that plotly accepts for `n` rows/columns (must be < 1 / (n - 1))."""
    return wanted if n <= 1 else min(wanted, 0.9 / (n - 1))


# --------------------------------------------------------------------------- loss curves


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
    curve faint behind it; validation curves are not smoothed.
    """
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
    x_title = "step + 1 (log scale; step 0 drawn at 1)" if log_x else "step"
    fig.update_xaxes(**(_log_axis() if log_x else dict(type="linear")), title_text=x_title)
    fig.update_yaxes(**(_log_axis(_plotted_y(fig)) if log_y else dict(type="linear")), title_text=_axis_title(metric, log_y))
    return _finish(fig, title or f"Training {metric} vs step: {_short_list(labels)}",
                   hovermode="closest",  # legend below the plot: a long "(diverged at step N)" is not clipped
                   legend=dict(title=dict(text="run"), orientation="h", yanchor="top", y=-0.25, x=0))


# --------------------------------------------------------------------------- coefficients


COEFFICIENT_BASES = ("unrolled", "own", "log_ratio")


def coefficient_basis(result: Mapping[str, Any], basis: str = "default") -> str:
    """Which matrix of a coefficients-probe result to draw: `basis` itself, or for "default" the learned
    coefficients (`own`) of a learnable topology (ANCRe, GRN, DCA, learnable tau), whose unrolled view
    is all ones by construction and hides what was learned, and `unrolled` otherwise."""
    if basis != "default":
        if basis not in COEFFICIENT_BASES:
            raise ValueError(f"basis must be 'default' or one of {', '.join(COEFFICIENT_BASES)}, got {basis!r}")
        return basis
    return "own" if bool(np.asarray(result.get("learnable", False))) else "unrolled"


def coefficient_heatmap(
    matrix: Any,
    title: str,
    log_ratio: bool = False,
    blocks: Sequence[str] | None = None,
) -> go.Figure:
    """Heatmap of an (L+1) x (L+1) connection-coefficient matrix (who feeds whom).

    Rows are destinations (row r = the input of block r+1, the last row = the output), columns are
    sources (column 0 = the stream's input x0, column j = the output y_j of block j). Destination r
    can only read sources 0..r, so the upper triangle is blanked (NaN). Blocks are named as every
    figure names them: `blocks` (a coefficients probe's "blocks", e.g. "block 2 attn" for a
    Transformer's sub-block at module level), default "block 1" ... "block L".
    With `log_ratio` the matrix is ANCRe's log(c_ij / c_max,j) view: values <= 0 on a sequential
    scale whose top is 0, -inf (a zero coefficient) shown blank. Otherwise a diverging scale
    centred at 0, so sign and size read at a glance.
    """
    try:
        z = np.array(matrix, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"matrix must be a square 2-d array of numbers: {exc}") from None
    if z.ndim != 2 or z.shape[0] != z.shape[1] or z.shape[0] == 0:
        raise ValueError(f"matrix must be a non-empty square (L+1) x (L+1) array, got shape {z.shape}")
    n = z.shape[0]
    names = [f"block {j}" for j in range(1, n)] if blocks is None else [str(b) for b in np.ravel(blocks)]
    if len(names) != n - 1:
        raise ValueError(f"blocks must name the matrix's {n - 1} blocks (one fewer than its size), got {len(names)}")
    sources, destinations = ["input", *names], [*names, "output"]
    z[np.triu_indices(n, k=1)] = np.nan
    if log_ratio:
        finite = z[np.isfinite(z)]
        if finite.size and finite.max() > 1e-6:
            raise ValueError("matrix with log_ratio=True must hold log(c / c_max) values <= 0, "
                             f"got a maximum of {finite.max():.4g}")
        z[np.isneginf(z)] = np.nan
        scale = dict(colorscale="Viridis", zmax=0.0, colorbar=dict(title=dict(text="log(c_ij / c_max,j)")))
        value_name = "log(c/c_max)"
    else:
        scale = dict(colorscale="RdBu", reversescale=True, zmid=0.0,
                     colorbar=dict(title=dict(text="coefficient")))
        value_name = "c"
    fig = go.Figure(go.Heatmap(
        z=z, x=sources, y=destinations, hoverongaps=False, xgap=1, ygap=1,
        hovertemplate=f"source %{{x}}<br>destination %{{y}}<br>{value_name} = %{{z:{_FMT}}}<extra></extra>",
        **scale,
    ))
    fig.update_xaxes(title_text="source: the input x0, or a block's output", type="category", side="bottom")
    fig.update_yaxes(title_text="destination: a block's input, or the output", type="category",
                     autorange="reversed", scaleanchor="x")
    return _finish(fig, title)


# --------------------------------------------------------------------------- spectra


def spectra(
    curves: Mapping[str, Any],
    title: str,
    log_y: bool = True,
    colors: Mapping[str, str] | None = None,
    zero: float = NUMERICAL_ZERO,
) -> go.Figure:
    """Singular-value spectra, one line per label: index i (1 = largest) on x, sigma_i on y.

    The arrays are drawn as given (they should be sorted descending). Values below `zero` x the
    largest singular value of their curve are numerical zeros: on a log axis they are drawn on a
    dotted floor at that level (open markers, hover gives the true value) and a note says how many,
    so round-off (1e-20, 1e-54) does not squash the useful range.
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
        fig.add_trace(go.Scatter(
            x=x, y=np.where(low, np.nan, y), mode="lines+markers", name=label, legendgroup=label,
            line=dict(color=palette[label]), marker=dict(size=4),
            hovertemplate=f"i = %{{x}}<br>σ_i = %{{y:{_FMT}}}<extra>{label}</extra>",
        ))
        if low.any():
            fig.add_trace(go.Scatter(
                x=x[low], y=np.full(int(low.sum()), floor), customdata=y[low], mode="markers", legendgroup=label,
                name=f"{label}: numerical zeros", showlegend=False,
                marker=dict(size=6, symbol="circle-open", color=palette[label]),
                hovertemplate=f"i = %{{x}}<br>σ_i = %{{customdata:{_FMT}}} (numerical zero)<extra>{label}</extra>",
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
    return _finish(fig, title)


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


# --------------------------------------------------------------------------- norms, ranks


def norms_by_layer(
    curves: Mapping[str, Any],
    title: str,
    ylabel: str = "relative norm",
    log_y: bool = False,
    colors: Mapping[str, str] | None = None,
    labels: Sequence[str] | None = None,
) -> go.Figure:
    """A per-block quantity (e.g. ||h_l|| / ||h_0||) against depth, one line per label.

    The x axis is categorical: `labels` name the entries in order (a probe's own labels, e.g. "input",
    "block 1 attn"); without them "block 1".."block n". A curve shorter than the labels takes the first ones.
    """
    data = _curve_dict("curves", curves)
    longest = max(y.size for y in data.values())
    names = [f"block {i}" for i in range(1, longest + 1)] if labels is None else [str(n) for n in labels]
    if len(names) < longest:
        raise ValueError(f"labels has {len(names)} entries for a curve of {longest} values")
    palette = _resolve_colors(list(data), colors)
    fig = go.Figure()
    for label, y in data.items():
        fig.add_trace(go.Scatter(
            x=names[:y.size], y=y, mode="lines+markers", name=label, line=dict(color=palette[label]),
            hovertemplate=f"%{{x}}<br>{ylabel} %{{y:{_FMT}}}<extra>{label}</extra>",
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


# --------------------------------------------------------------------------- image grids


def attention_maps(maps: Any, title: str, max_heads: int = 4) -> go.Figure:
    """Grid of attention-weight heatmaps: rows = blocks (1 = first), columns = the first `max_heads` heads.

    `maps` is (blocks, heads, T, T) or (heads, T, T) with rows = queries, columns = keys. All
    panels share one colour scale fixed at 0..1 so weights compare across layers and heads.
    """
    try:
        a = np.asarray(maps, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"maps must be a numeric array: {exc}") from None
    if a.ndim == 3:
        a = a[None]
    if a.ndim != 4 or a.shape[-1] != a.shape[-2] or 0 in a.shape:
        raise ValueError(f"maps must be (blocks, heads, T, T) or (heads, T, T), got shape {np.shape(maps)}")
    if int(max_heads) < 1:
        raise ValueError(f"max_heads must be >= 1, got {max_heads}")
    layers, heads = a.shape[:2]
    shown = min(heads, int(max_heads))
    fig = make_subplots(
        rows=layers, cols=shown,
        subplot_titles=[f"block {l + 1}, head {h + 1}" for l in range(layers) for h in range(shown)],
        horizontal_spacing=_spacing(shown, 0.04), vertical_spacing=_spacing(layers, 0.08),
    )
    for l in range(layers):
        for h in range(shown):
            fig.add_trace(go.Heatmap(
                z=a[l, h], zmin=0.0, zmax=1.0, colorscale="Viridis", showscale=(l == 0 and h == 0),
                colorbar=dict(title=dict(text="weight")), name=f"block {l + 1} head {h + 1}",
                hovertemplate=(f"block {l + 1}, head {h + 1}<br>query %{{y}}<br>key %{{x}}"
                               f"<br>weight %{{z:{_FMT}}}<extra></extra>"),
            ), row=l + 1, col=h + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="key position", row=layers)
    fig.update_yaxes(title_text="query position", col=1)
    suffix = f" (first {shown} of {heads} heads)" if shown < heads else ""
    return _finish(fig, title + suffix, height=max(350, 230 * layers + 120), width=max(450, 230 * shown + 150))


def pca_grid(images: Any, row_labels: Sequence[str], col_labels: Sequence[str], title: str,
             inputs: Any = None) -> go.Figure:
    """A rows x cols grid of RGB images, e.g. PCA feature maps of a skip vs a skipless model side by side.

    `images` is (rows, cols, H, W, 3) float RGB in [0, 1]; each panel is a `go.Image` whose z is
    the image scaled to 0..255 (uint8), the range `go.Image` expects. Row labels go on the
    left, column labels above the top row. `inputs` (cols, H', W', 3) in [0, 1], e.g. the `pca`
    probe's `images`, adds a first row "images" with the images the maps were computed from (at
    their own resolution: each panel keeps its aspect ratio, so a 4 x 4 map sits under its 16 x 16 image).
    """
    arr = _rgb("images", images, 5)
    rows, cols = arr.shape[:2]
    if len(row_labels) != rows:
        raise ValueError(f"row_labels has {len(row_labels)} entries for {rows} rows")
    if len(col_labels) != cols:
        raise ValueError(f"col_labels has {len(col_labels)} entries for {cols} columns")
    grid, names = list(arr), [str(r) for r in row_labels]
    if inputs is not None:
        first = _rgb("inputs", inputs, 4)
        if len(first) < cols:
            raise ValueError(f"inputs has {len(first)} images for {cols} columns")
        grid, names = [first[:cols], *grid], ["images", *names]
    fig = make_subplots(rows=len(grid), cols=cols, column_titles=[str(c) for c in col_labels],
                        horizontal_spacing=_spacing(cols, 0.02),
                        vertical_spacing=_spacing(len(grid), 0.04))
    for r, row in enumerate(grid):
        pixels = np.round(np.clip(row, 0.0, 1.0) * 255).astype(np.uint8)
        for c in range(cols):
            fig.add_trace(go.Image(
                z=pixels[c], name=f"{names[r]} / {col_labels[c]}",
                hovertemplate=(f"{names[r]} / {col_labels[c]}<br>pixel x %{{x}}, y %{{y}}"
                               "<br>RGB %{z}<extra></extra>"),
            ), row=r + 1, col=c + 1)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    for r, label in enumerate(names):
        fig.update_yaxes(title_text=label, row=r + 1, col=1)
    return _finish(fig, title, height=max(300, 200 * len(grid) + 100), width=max(400, 200 * cols + 120))


def _rgb(name: str, images: Any, ndim: int) -> np.ndarray:
    """`images` as a float array of `ndim` dimensions ending in RGB, every value finite and in [0, 1]."""
    try:
        arr = np.asarray(images, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array: {exc}") from None
    shape = "(rows, cols, H, W, 3)" if ndim == 5 else "(images, H, W, 3)"
    if arr.ndim != ndim or arr.shape[-1] != 3 or 0 in arr.shape:
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
        raise ValueError(f"{name} must hold finite RGB values in [0, 1]")
    return arr


# --------------------------------------------------------------------------- theory


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


# --------------------------------------------------------------------------- probe results


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


# --------------------------------------------------------------------------- export


def _png_ready() -> None:
    if importlib.util.find_spec("kaleido") is None:
        raise RuntimeError(f"kaleido is not installed. {PNG_FIX}")


def to_html_bytes(fig: go.Figure) -> bytes:
    """The figure as a self-contained HTML page (plotly.js embedded, works offline), UTF-8 bytes."""
    return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")


def to_png_bytes(fig: go.Figure) -> bytes:
    """The figure as PNG bytes; RuntimeError naming the fix when kaleido or a browser is missing."""
    _png_ready()
    try:
        return fig.to_image(format="png")
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise RuntimeError(f"PNG export failed ({exc}). {PNG_FIX}") from exc


def export(fig: go.Figure, path: str | Path) -> Path:
    """Write `fig` to `path`: self-contained HTML for ".html", PNG for ".png"; returns the path.

    HTML embeds plotly.js (no CDN) so the file opens offline. PNG needs kaleido and a
    Chromium/Chrome browser; without them this raises RuntimeError naming the fix.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        fig.write_html(path, include_plotlyjs=True, full_html=True)
    elif suffix == ".png":
        _png_ready()
        try:
            fig.write_image(path, format="png")
        except Exception as exc:
            raise RuntimeError(f"PNG export failed ({exc}). {PNG_FIX}") from exc
    else:
        raise ValueError(f"path must end with .html or .png, got {str(path)!r}")
    return path


# --------------------------------------------------------------------------- notebooks

RENDERER = "explorer"  # the plotly renderer `notebook_mode()` registers and makes the default


def figure_bundle(fig: go.Figure) -> dict[str, Any]:
    """The MIME bundle a notebook output of `fig` carries: plotly's JSON and an HTML fallback.

    JupyterLab draws the plotly JSON (interactive, with the jupyterlab-plotly renderer); an export
    (`jupyter nbconvert --to html`, the notebooks' static site) or a code host that only knows
    HTML uses `text/html`: the figure's div and the script that draws it, without plotly.js
    itself, which `notebook_mode()` puts in the notebook once.
    """
    from plotly.io import to_html
    from plotly.io.base_renderers import PlotlyRenderer

    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else dict(fig)
    bundle = PlotlyRenderer().to_mimebundle(dict(fig_dict))
    bundle["text/html"] = to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                                  default_width="100%", default_height=525, validate=False)
    return bundle


def _plotly_js_once() -> None:
    """Display plotly.js inline (no CDN) in the current cell: the HTML fallbacks draw with it."""
    from IPython.display import HTML, display
    from plotly.offline import get_plotlyjs

    display(HTML("<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"
                 f"<script type=\"text/javascript\">{get_plotlyjs()}</script>"))


def notebook_mode() -> None:
    """Make every figure a notebook shows survive export (call once, in a notebook's first cell).

    Registers and selects the plotly renderer `RENDERER`, whose output carries both plotly's JSON
    and an HTML fallback (`figure_bundle`), and shows plotly.js once, inline, in the calling cell,
    so an exported notebook draws its figures offline. Without it `fig.show()` writes the plotly
    JSON alone, which `nbconvert --to html` and code hosts drop.
    """
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class _Renderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return figure_bundle(go.Figure(fig_dict, skip_invalid=True))

    pio.renderers[RENDERER] = _Renderer()
    pio.renderers.default = RENDERER
    _plotly_js_once()


def show_in(out: Any, *items: Any) -> None:
    """Replace what an `ipywidgets.Output` shows with `items` (figures and strings), in order.

    The widget's outputs are set directly (a figure as `figure_bundle`, a string as text), so the
    figure redraws in JupyterLab (where `out.append_display_data(fig)` left an empty entry: a
    plotly figure displays itself in the running cell instead) and under nbclient (where
    `with out:` capture can stall the cell, jupyter/nbclient#312).
    """
    outputs = []
    for item in items:
        if isinstance(item, str):
            outputs.append({"output_type": "stream", "name": "stdout", "text": item if item.endswith("\n") else item + "\n"})
        elif isinstance(item, go.Figure):
            outputs.append({"output_type": "display_data", "data": figure_bundle(item), "metadata": {}})
        else:
            raise ValueError(f"show_in takes plotly figures and strings, got {type(item).__name__}")
    out.outputs = tuple(outputs)


PROGRESS_WIDTH = 30  # characters of a notebook widget's text progress bar


def training_progress(out: Any, label: str, total: int) -> Callable[[Any], None]:
    """A callback for `explorer.train(spec, callbacks=[...])` that shows the run's progress in the notebook
    widget's `ipywidgets.Output` `out`: a text bar, the step and the last logged loss, updated at every logged
    step (`train.log_every`). It replaces what `out` showed, so the previous figure does not sit there while the
    next run trains; draw the new figure with `show_in` when the run returns. Reads only the event's `kind`,
    `step` and `metrics`."""
    total = max(int(total), 1)
    show_in(out, f"{label}: starting...")

    def on_event(event: Any) -> None:
        if event.kind not in ("log", "end"):
            return
        done = min(max(int(event.step), 0), total)
        filled = round(PROGRESS_WIDTH * done / total)
        loss = _number((event.metrics or {}).get("loss"))
        text = f"{label}: [{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] step {done} of {total}"
        text += f", loss {loss:.4g}" if loss is not None else ""
        show_in(out, text + (" - done, drawing..." if event.kind == "end" else ""))

    return on_event


# --------------------------------------------------------------------------- claim verdicts

#: verdict -> (colour, label). "inconclusive" has its own colour, never green: the check could not
#: decide at this scale (too few seeds, seeds disagree), which is not a claim that holds; "not-tested": no set-up
#: here tests the paper's statement itself.
VERDICT_STYLES: dict[str, tuple[str, str]] = {
    "holds": ("#1a7f37", "holds"),
    "does-not-hold": ("#cf222e", "does not hold at this scale"),
    "inconclusive": ("#8250df", "inconclusive"),
    "not-tested": ("#9a6700", "not tested at this scale"),
    "error": ("#6e7781", "error"),
}


def _cell(value: Any) -> str:
    """A measured value as escaped text: 4 significant digits, lists and dicts spelled out."""
    import html

    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{html.escape(str(k))}: {_cell(v)}" for k, v in value.items())
    return html.escape(str(value))


def verdict_table(rows: Sequence[Mapping[str, Any]], show_claim: bool = True) -> str:
    """Claim results as one HTML table, the same in the notebooks and on the app's Papers page.

    A row needs only "verdict"; it may have "id", "section", "summary" (the one-line measured summary, shown first
    under "measured"), "measured" (name -> number), "per_seed"
    (quantity -> one value per seed, as explorer.papers.claims gives it; or a list, one entry per seed),
    "rule", "threshold" and "reason" (how the verdict was decided and why), "expected", "setup", "note"
    and "seconds"; missing fields are left blank. Every text is HTML-escaped, so claim text such as
    "||W|| < 1" shows literally. Verdicts: holds (green), does-not-hold (red), inconclusive (violet,
    never green), not-tested (ochre), error (grey); an unknown verdict shows in grey as written.
    """
    import html

    header = (["claim"] if show_claim else []) + ["verdict", "measured", "per seed", "rule / expected", "note", "s"]
    body = []
    for row in rows:
        verdict = str(row.get("verdict", "error"))
        colour, label = VERDICT_STYLES.get(verdict, ("#6e7781", verdict))
        measured = "<br>".join(([html.escape(str(row["summary"]))] if row.get("summary") else []) +
                               [f"<b>{html.escape(str(k))}</b>: {_cell(v)}" for k, v in (row.get("measured") or {}).items()])
        seeds = row.get("per_seed") or []
        if isinstance(seeds, Mapping):  # quantity -> [seed 0, seed 1, ...]
            per_seed = "<br>".join(f"<b>{html.escape(str(k))}</b>: " + ", ".join(_cell(v) for v in (values or []))
                                   for k, values in seeds.items())
        else:
            per_seed = "<br>".join(f"seed {i}: {_cell(v)}" for i, v in enumerate(seeds))
        rule = "<br>".join(html.escape(f"{label}{row[k]}") for k, label in
                           (("rule", ""), ("threshold", "threshold: "), ("reason", "why: "), ("expected", "expected: "))
                           if row.get(k))
        note = html.escape(" ".join(str(row[k]) for k in ("setup", "note") if row.get(k))).split("\nTraceback", 1)[0]
        cells = ([f"<b>{html.escape(str(row.get('id', '')))}</b><br><small>{html.escape(str(row.get('section', '')))}</small>"]
                 if show_claim else [])
        cells += [f"<span class='verdict verdict-{html.escape(verdict)}' style='color:{colour}'><b>{html.escape(label)}</b></span>",
                  measured, per_seed, f"<small>{rule}</small>", f"<small>{note}</small>",
                  _cell(row.get("seconds"))]
        body.append("<tr>" + "".join(f"<td style='text-align:left;vertical-align:top'>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th style='text-align:left'>{h}</th>" for h in header)
    return f"<table class='explorer-verdicts'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
