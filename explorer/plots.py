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

from explorer.topology.shortcuts import SOURCE_STATE, TARGET_STATE, describe_shortcut, state_label, target_label

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
    "mass_summary",
    "grid_figure",
    "GRID_METRICS",
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
    "wrap_title",
    "claim_figure",
    "per_seed_summary",
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


# --------------------------------------------------------------------------- coefficients


COEFFICIENT_BASES = ("unrolled", "own", "log_ratio")
MAX_CELL_TEXT = 13  # matrices up to this size (12 blocks: the presets' sizes) print each value in its cell
MAX_PATHS_SHOWN = 3  # an unrolled cell's hover lists its largest paths, then how many more there are
MAX_PATH_SIZE = 33  # above this size an unrolled cell's hover gives its path count, not the paths (cost grows as L^3)
MAX_TERMS_SHOWN = 4  # a softmax's denominator lists this many terms, then how many more
FORCED_GREY = "#c8c8c8"
MAX_TICK_LABELS = 16  # a heatmap labels at most this many states per axis (more overlap at a projector's size)
TITLE_LINE_CHARS = 48  # a wrapped title's longest line: it fits a half-width app column at 1280 px
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def coefficient_basis(result: Mapping[str, Any], basis: str = "default") -> str:
    """Which matrix of a coefficients-probe result to draw: `basis` itself, or for "default" the learned
    coefficients (`own`) of a learnable topology (ANCRe, GRN, DCA, learnable tau), whose unrolled view
    is all ones by construction and hides what was learned, and `unrolled` otherwise."""
    if basis != "default":
        if basis not in COEFFICIENT_BASES:
            raise ValueError(f"basis must be 'default' or one of {', '.join(COEFFICIENT_BASES)}, got {basis!r}")
        return basis
    return "own" if bool(np.asarray(result.get("learnable", False))) else "unrolled"


def _sub(k: int) -> str:
    return str(k).translate(_SUBSCRIPTS)


def _g(value: float) -> str:
    """A number in an equation: 3 significant digits."""
    return f"{value:.3g}"


def _state_basis(result: Mapping[str, Any]) -> bool:
    """Whether a coefficients result is in the state basis (its own matrix mixes states; unrolled differs from it)."""
    if "basis" in result:
        return str(np.asarray(result["basis"])) == "state"
    own, unrolled = np.asarray(result["own"], float), np.asarray(result["unrolled"], float)
    return not np.array_equal(own, unrolled, equal_nan=True)


def _shown_own(result: Mapping[str, Any]) -> np.ndarray:
    """The own matrix as the heatmap shows it: in the state basis its diagonal holds the direct path s_j (block j's
    own output into x_j, the unrolled matrix's diagonal), so a path has the same value, and colour, in both bases."""
    own = np.array(result["own"], dtype=float)
    if _state_basis(result) and "unrolled" in result:
        np.fill_diagonal(own, np.diagonal(np.asarray(result["unrolled"], dtype=float)))
    return own


def _coefficient_scale(values: np.ndarray) -> dict[str, Any]:
    """A colour scale fitted to the finite values: sequential white to red over [0, max] when none is negative,
    else diverging and symmetric about 0 (blue negative, red positive)."""
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if low >= 0:
        return dict(colorscale="Reds", zmin=0.0, zmax=high if high > 0 else 1.0)
    top = max(abs(low), abs(high))
    return dict(colorscale="RdBu", reversescale=True, zmin=-top, zmax=top, zmid=0.0)


def _paths(own: np.ndarray, source: int, keep: int) -> tuple[list[list], list[int]]:
    """For every destination j >= source: the `keep` paths source = k_0 < k_1 < ... < k_m = j with the largest
    |product of own[k_{t+1}, k_t]| as (nodes, product), and how many paths there are (zero coefficients cut a path)."""
    size = len(own)
    best: list[list] = [[] for _ in range(size)]
    count = [0] * size
    best[source], count[source] = [([source], 1.0)], 1
    for b in range(source + 1, size):
        found = []
        for a in range(source, b):
            weight = own[b, a]
            if count[a] and weight != 0 and math.isfinite(weight):
                count[b] += count[a]
                found += [(nodes + [b], product * weight) for nodes, product in best[a]]
        found.sort(key=lambda path: -abs(path[1]))
        best[b] = found[:keep]
    return best, count


def _path_equation(own: np.ndarray, unrolled: np.ndarray, i: int, j: int, best: list, count: int) -> str:
    """u(i,j) as the sum over paths from i to j of the products of own coefficients a(k,k') along each, times the
    branch scale s_i, with this run's numbers: "a(0,2) + a(0,1)·a(1,2) = 0.5 + 0.5·1 = 1"."""
    value = unrolled[j, i]
    if i == j:
        return f"direct path: s{_sub(j)} = {_g(value)}"
    if not count:
        return f"no path from {i} to {j}: 0"
    if not best:  # too large to list
        return f"sum over {count} paths of the products of own coefficients along each = {_g(value)}"
    names = ["·".join(f"a({a},{b})" for a, b in zip(nodes, nodes[1:])) for nodes, _ in best]
    numbers = ["·".join(_g(own[b, a]) for a, b in zip(nodes, nodes[1:])) for nodes, _ in best]
    more = f" + … ({count - len(best)} more path{'s' if count - len(best) > 1 else ''})" if count > len(best) else ""
    symbolic, numeric = " + ".join(names) + more, " + ".join(numbers) + (" + …" if more else "")
    scale = unrolled[i, i]
    if i > 0 and scale != 1:
        symbolic, numeric = f"s{_sub(i)}·({symbolic})", f"{_g(scale)}·({numeric})"
    return f"u({i},{j}) = {symbolic}<br>= {numeric} = {_g(value)}"


def _softmax_equation(result: Mapping[str, Any], i: int, j: int) -> str:
    """ANCRe's a(i,j) from its logits: softmax over the sources of j (ingoing) or the destinations of i (outgoing)
    of c / T, or exp(c_ij / T) without normalisation; plus 1 on a(j-1,j) where the layer keeps its own residual."""
    logits, t = np.asarray(result["logits"], float), float(result["temperature"])
    how = str(np.asarray(result.get("normalization", "ingoing")))
    residual = bool(np.asarray(result.get("layer_residual", False))) and i == j - 1
    term = f"exp(c({i},{j})/T)"
    if how == "none":
        with np.errstate(over="ignore", invalid="ignore"):  # a diverged run's logits: inf, shown as such
            p = float(np.exp(logits[j, i] / t))
        equation = f"{term} = exp({_g(logits[j, i])}/{_g(t)}) = {_g(p)}"
    else:
        others = [(k, j) for k in range(j)] if how == "ingoing" else [(i, k) for k in range(i + 1, len(logits))]
        over = "k<" + str(j) if how == "ingoing" else "k>" + str(i)
        pair = "c(k,{j})".format(j=j) if how == "ingoing" else f"c({i},k)"
        shown = [f"exp({_g(logits[b, a])}/{_g(t)})" for a, b in others[:MAX_TERMS_SHOWN]]
        if len(others) > MAX_TERMS_SHOWN:
            shown.append(f"… ({len(others) - MAX_TERMS_SHOWN} more)")
        scaled = np.array([logits[b, a] for a, b in others]) / t
        with np.errstate(over="ignore", invalid="ignore"):  # shifted by the largest: no overflow where it is finite
            top = scaled.max() if np.isfinite(scaled).all() else 0.0
            p = float(np.exp(logits[j, i] / t - top) / np.exp(scaled - top).sum())
        equation = (f"softmax: {term} / Σ_{over} exp({pair}/T)<br>= exp({_g(logits[j, i])}/{_g(t)}) / "
                    f"({' + '.join(shown)}) = {_g(p)}")
    return f"a({i},{j}) = 1 + p({i},{j}), p({i},{j}) = {equation}" if residual else f"a({i},{j}) = {equation}"


def _cell_head(i: int, j: int, names: list[str], source: str, state: bool) -> str:
    """What cell (j, i) of a coefficient heatmap is, in the words of `describe_shortcut`: in the state basis the
    shortcut i:j itself; a branch output y_i (source "y") or a branch-basis mix otherwise."""
    blocks, n_blocks, pair = names[1:], len(names) - 1, f"<b>{i}:{j}</b>"
    if j == 0:
        return f"{pair} {state_label(0)}"
    if i < j and source == "x" and state:
        return pair + describe_shortcut(i, j, n_blocks, blocks=blocks)[len(f"{i}:{j}"):]
    into = target_label(j, n_blocks, blocks) if state else \
        "the network's output" if j == n_blocks else f"the input of {blocks[j]}"
    if i == j:
        return f"{pair} y_{j} = f_{j}(x_{j - 1}), the direct path into {into}"
    what = state_label(0) if i == 0 else f"y_{i} ({blocks[i - 1]}'s own output)" if source == "y" else \
        state_label(i, blocks)
    return f"{pair} {what} in {into}"


def _coefficient_hover(z: np.ndarray, result: Mapping[str, Any] | None, basis: str, names: list[str]) -> np.ndarray:
    """Each cell's hover: the shortcut i:j it is, and the equation that produced its value, with this run's numbers."""
    n = len(z)
    state = result is None or "own" not in result or _state_basis(result)
    hover = np.full((n, n), "", dtype=object)
    own = unrolled = None
    if result is not None and "own" in result and "unrolled" in result:
        own, unrolled = np.asarray(result["own"], float), np.asarray(result["unrolled"], float)
    paths = {}
    if basis == "unrolled" and own is not None and state and np.isfinite(own).all():
        keep = MAX_PATHS_SHOWN if n <= MAX_PATH_SIZE else 0
        paths = {i: _paths(own, i, keep) for i in range(n)}
    forced = np.asarray(result["forced"], bool) if result is not None and "forced" in result else None
    reasons = [str(r) for r in np.ravel(result.get("forced_reasons", []))] if result is not None else []
    index = np.asarray(result["forced_reason"]) if result is not None and "forced_reason" in result else None
    for j in range(n):
        for i in range(j + 1):
            source = "y" if result is not None and basis == "unrolled" and i > 0 and state else "x"
            head = _cell_head(i, j, names, source, state)
            value = z[j, i]
            if basis == "log_ratio":
                line = f"log(|u({i},{j})| / max_k |u(k,{j})|) = "
                if unrolled is not None and np.isfinite(unrolled[j]).all():
                    line += f"log({_g(abs(unrolled[j, i]))} / {_g(np.abs(unrolled[j]).max())}) = "
                line += _g(value) if math.isfinite(value) else "−∞ (no path)"
            elif basis == "unrolled" and i in paths:
                best, count = paths[i]
                line = _path_equation(own, unrolled, i, j, best[j], count[j])
            elif basis == "own" and i == j and state:
                line = f"direct path: s{_sub(j)} = {_g(value)}"
            elif basis == "own" and result is not None and "logits" in result:
                line = _softmax_equation(result, i, j)
            else:
                line = f"{'a' if basis == 'own' else 'u'}({i},{j}) = {_g(value)}"
            if forced is not None and forced[j, i]:
                why = reasons[int(index[j, i])] if index is not None and 0 <= int(index[j, i]) < len(reasons) else \
                    "fixed by the topology"
                line += f"<br><i>forced: {why}</i>"
            elif forced is not None and basis == "own" and not (i == j and state):
                line += "<br>learned"
            hover[j, i] = f"{head}<br>{line}"
    return hover


def _forced_cells(result: Mapping[str, Any] | None, basis: str, n: int) -> np.ndarray | None:
    """Which cells of `basis` the topology fixes: the own coefficients it declares forced; an unrolled coefficient
    when every own coefficient on every path from i to j (the block from i to j) is forced. None when unknown."""
    if result is None or "forced" not in result or basis == "log_ratio":
        return None
    forced = np.tril(np.asarray(result["forced"], dtype=bool))
    if forced.shape != (n, n):
        return None
    if basis == "own":
        return forced
    cells = np.zeros((n, n), dtype=bool)
    for j in range(n):
        for i in range(j + 1):
            cells[j, i] = bool(forced[i:j + 1, i:j + 1][np.tril_indices(j - i + 1)].all())
    return cells


def wrap_title(text: str, width: int = TITLE_LINE_CHARS) -> str:
    """`text` broken into lines of at most `width` characters at spaces (plotly titles do not wrap, and a long one
    is cut at the figure's edge). Lines it already has (<br>) are kept; a line holding other HTML tags is left as
    it is, and a single word longer than `width` gets a line of its own."""
    lines = []
    for part in str(text).split("<br>"):
        lines.extend([part] if "<" in part or len(part) <= width else _word_lines(part, width))
    return "<br>".join(lines)


def _word_lines(text: str, width: int) -> list[str]:
    """`text` cut at spaces into lines of at most `width` characters (a longer word gets a line of its own)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]


def _state_ticks(states: list[str], labels: list[str]) -> dict[str, Any]:
    """A heatmap axis's ticks: every state's label up to MAX_TICK_LABELS states, else every k-th one (the input
    first), so the labels do not overlap; the hover still names every cell."""
    step = math.ceil(len(states) / MAX_TICK_LABELS)
    return dict(tickmode="array", tickvals=states[::step], ticktext=labels[::step])


def coefficient_heatmap(
    matrix: Any,
    title: str,
    log_ratio: bool = False,
    blocks: Sequence[str] | None = None,
    result: Mapping[str, Any] | None = None,
    basis: str | None = None,
) -> go.Figure:
    """Heatmap of an (L+1) x (L+1) connection-coefficient matrix (who feeds whom), cell (j, i) the shortcut i:j.

    Rows are destinations and columns sources, both the states x_0 (the input) .. x_L (after block L, the output),
    named as every figure names blocks (`blocks`, e.g. "block 2 attn" for a Transformer's sub-block at module
    level; default "block 1" ... "block L"). State j reads only states 0..j, so the upper triangle is blank. Up to
    MAX_CELL_TEXT states (12 blocks) each cell prints its value; past MAX_TICK_LABELS states the axes label every
    k-th state, and a long title is wrapped (`wrap_title`). The colour scale fits the values: sequential
    from 0 to the largest when none is negative, diverging about 0 only when signs occur.
    With `log_ratio` the matrix is ANCRe's log(c_ij / c_max,j) view: values <= 0 on a sequential scale whose top is
    0, -inf (a zero coefficient) shown blank.

    `result` (the coefficients probe's result `matrix` comes from, `basis` naming which of its matrices: "own",
    "unrolled" or "log_ratio", found by value when left out) adds the maths: each cell's hover shows the equation
    that made it with this run's numbers (an unrolled coefficient as the sum over paths of the products of own
    coefficients, ANCRe's as a softmax of its logits); the own view's diagonal holds the direct path s_j, as the
    unrolled one does, and both use one colour scale, so a path has the same colour in both bases; cells the
    topology forces (the probe's `forced`) are greyed, their hover saying why, unless every cell is forced (a fixed
    topology: then the colours show its structure). The first trace holds `matrix`'s values; the direct paths and
    the greyed cells are drawn over it by the traces "direct path" and "forced".
    """
    try:
        z = np.array(matrix, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"matrix must be a square 2-d array of numbers: {exc}") from None
    if z.ndim != 2 or z.shape[0] != z.shape[1] or z.shape[0] == 0:
        raise ValueError(f"matrix must be a non-empty square (L+1) x (L+1) array, got shape {z.shape}")
    n = z.shape[0]
    if blocks is None and result is not None and "blocks" in result:
        blocks = result["blocks"]
    names = [f"block {j}" for j in range(1, n)] if blocks is None else [str(b) for b in np.ravel(blocks)]
    if len(names) != n - 1:
        raise ValueError(f"blocks must name the matrix's {n - 1} blocks (one fewer than its size), got {len(names)}")
    states = ["input", *names]
    if result is not None:
        if basis is None:
            basis = next((key for key in COEFFICIENT_BASES if key in result and np.shape(result[key]) == z.shape
                          and np.array_equal(np.asarray(result[key], float), z, equal_nan=True)), None)
        if basis not in COEFFICIENT_BASES or basis not in result:
            raise ValueError(f"basis must name which of the result's matrices ({', '.join(k for k in COEFFICIENT_BASES if k in result)}) "
                             f"matrix is, got {basis!r}")
    basis = basis or ("log_ratio" if log_ratio else "unrolled")
    state = result is None or "own" not in result or _state_basis(result)
    z[np.triu_indices(n, k=1)] = np.nan
    shown = z.copy()
    if basis == "own" and result is not None and state and "unrolled" in result:
        shown[np.diag_indices(n)] = np.diagonal(np.asarray(result["unrolled"], dtype=float))
    if log_ratio:
        finite = z[np.isfinite(z)]
        if finite.size and finite.max() > 1e-6:
            raise ValueError("matrix with log_ratio=True must hold log(c / c_max) values <= 0, "
                             f"got a maximum of {finite.max():.4g}")
        z[np.isneginf(z)] = np.nan
        shown[np.isneginf(shown)] = np.nan
        scale = dict(colorscale="Viridis", zmax=0.0, colorbar=dict(title=dict(text="log(c_ij / c_max,j)")))
    else:
        fitted = shown[np.tril_indices(n)]
        if result is not None and basis in ("own", "unrolled") and "own" in result and "unrolled" in result:
            both = [_shown_own(result), np.asarray(result["unrolled"], dtype=float)]
            fitted = np.concatenate([m[np.tril_indices(n)] for m in both if m.shape == (n, n)])
        scale = dict(**_coefficient_scale(fitted), colorbar=dict(title=dict(text="coefficient")))
    text = np.where(np.isfinite(shown), np.vectorize(lambda v: f"{v:.2g}", otypes=[object])(shown), "") \
        if n <= MAX_CELL_TEXT else None
    hover = _coefficient_hover(shown, result, basis, states)
    forced = _forced_cells(result, basis, n)
    grey = forced is not None and forced[np.tril_indices(n)].any() and not forced[np.tril_indices(n)].all()
    grey_cells = forced if grey else np.zeros((n, n), dtype=bool)
    direct = np.eye(n, dtype=bool) & ~grey_cells if not np.array_equal(shown, z, equal_nan=True) else \
        np.zeros((n, n), dtype=bool)
    cells = dict(x=states, y=states, customdata=hover, hoverongaps=False, xgap=1, ygap=1,
                 hovertemplate="%{customdata}<extra></extra>")

    def layer(where):  # the trace's cells: `where`, each value printed once
        if text is not None:
            cells.update(text=np.where(where, text, ""), texttemplate="%{text}")
        return cells

    fig = go.Figure(go.Heatmap(z=z, name=basis, **layer(~(grey_cells | direct)), **scale))
    if direct.any():  # the own view's direct paths s_j, over the own matrix's zero diagonal, in the same colours
        fig.add_trace(go.Heatmap(z=np.where(direct, shown, np.nan), name="direct path", **layer(direct),
                                 **{**scale, "showscale": False}))
    if grey:  # on top of the forced cells
        fig.add_trace(go.Heatmap(z=np.where(forced, np.where(np.isfinite(shown), shown, 0.0), np.nan), name="forced",
                                 colorscale=[[0, FORCED_GREY], [1, FORCED_GREY]], showscale=False, **layer(forced)))
    source = "y" if result is not None and basis == "unrolled" and state else "x"  # branch outputs, when known
    fig.update_xaxes(title_text=f"source: the state {SOURCE_STATE}" if source == "x" else
                     "source: x_0 (the input), or y_i (block i's own output)", type="category", side="bottom",
                     **_state_ticks(states, [f"{'x' if k == 0 else source}{_sub(k)} {name}"
                                             for k, name in enumerate(states)]))
    fig.update_yaxes(title_text=f"destination: {TARGET_STATE}" if state else
                     "destination: the input of block j+1 (the last row: the output)", type="category",
                     autorange="reversed", scaleanchor="x",
                     **_state_ticks(states, [f"x{_sub(k)} {name}" for k, name in enumerate(states)]))
    return _finish(fig, wrap_title(title))


NO_PREFERENCE = 0.05  # mass_summary: learned coefficients all within this of their start have not chosen yet


def mass_summary(result: Mapping[str, Any], top: int = 5) -> str:
    """Where the mass went, for a coefficients result with learned shortcuts (ANCRe): the `top` learned shortcuts i:j
    by coefficient, one line each, with the change since initialisation. The initial coefficient is the result's
    `initial_own` where the probe gives it, else a uniform softmax: 1 / (the sources of j) ingoing, 1 / (the
    destinations of i) outgoing, 1 without normalisation (logits start at 0). The layer's own residual (+1 on
    a(j-1, j)) is left out; when no coefficient moved NO_PREFERENCE from its start, a last line says that this
    means no preference yet. "" for a result without learned shortcut coefficients."""
    if "logits" not in result and "initial_own" not in result:
        return ""
    own = np.array(result["own"], dtype=float)
    n = len(own)
    if bool(np.asarray(result.get("layer_residual", False))):
        own -= np.eye(n, k=-1)
    how = str(np.asarray(result.get("normalization", "ingoing")))
    if "initial_own" in result:
        initial = np.asarray(result["initial_own"], dtype=float)
    else:
        j, i = np.indices((n, n))
        initial = 1.0 / j.clip(1) if how == "ingoing" else 1.0 / (n - 1 - i).clip(1) if how == "outgoing" \
            else np.ones((n, n))
    forced = np.asarray(result.get("forced", np.zeros((n, n), bool)), dtype=bool)
    cells = [(j, i) for j in range(n) for i in range(j) if not forced[j, i] and math.isfinite(own[j, i])]
    if not cells:
        return ""
    cells.sort(key=lambda c: -own[c])
    lines = [f"where the mass went: the top {min(top, len(cells))} of {len(cells)} learned shortcuts by coefficient "
             f"(change since initialisation)"]
    for j, i in cells[:top]:
        change = own[j, i] - initial[j, i]
        lines.append(f"{i}:{j}  x{_sub(j)} ← x{_sub(i)}  {own[j, i]:.3f} (init {initial[j, i]:.3f}, "
                     f"{'+' if change >= 0 else '−'}{abs(change):.3f})")
    moved = max(abs(own[c] - initial[c]) for c in cells)
    if moved < NO_PREFERENCE:
        lines.append(f"no preference yet: every learned coefficient is within {moved:.3f} of its start (under "
                     f"{NO_PREFERENCE:g}). Near-uniform coefficients mean ANCRe has not chosen, not that every "
                     f"shortcut is equally good; a lower temperature (the paper's 0.1) or more steps sharpen the "
                     f"choice.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- spectra


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


# --------------------------------------------------------------------------- norms, ranks


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


def per_seed_summary(per_seed: Mapping[str, Sequence[Any]]) -> str:
    """A one-line summary of per-seed numbers: each quantity's mean over seeds (its range when the seeds differ),
    e.g. "val accuracy skip: 0.92 (0.89 to 0.93); val accuracy skipless: 0.08 (0.08 to 0.09)". A quantity whose
    seeds each give a list ("val acc / final loss": [acc, loss]) is summarised part by part; flags are counted,
    missing values shown as "-"; the line is cut at about 300 characters. The measured line of a claim that
    gives no summary of its own (explorer.papers.claims and `verdict_table` both use it)."""
    parts = []
    for name, values in per_seed.items():
        pieces = []
        for label, column in _per_seed_parts(str(name), list(values or [])):
            text = _seed_values_text(column)
            if text:
                pieces.append((label, text))
        if len(pieces) > 1 and ": " in pieces[0][0]:  # parts of one quantity: "prefix: a x, b y"
            prefix = pieces[0][0].rsplit(": ", 1)[0]
            parts.append(f"{prefix}: " + ", ".join(f"{label.rsplit(': ', 1)[-1]} {text}" for label, text in pieces))
        else:
            parts.extend(f"{label}: {text}" for label, text in pieces)
    text = "; ".join(parts)
    return text if len(text) <= 300 else text[:297].rsplit(";", 1)[0] + "; ..."


def _seed_values_text(values: Sequence[Any]) -> str:
    """One quantity over the seeds: "0.917 (0.89 to 0.93)", "20", "2 of 3" (flags), "-, 1.94e+03, -" (missing
    values), or "" when there is nothing to show."""
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    flags = [v for v in values if isinstance(v, bool)]
    if numbers and len(numbers) == len(values):
        mean = sum(numbers) / len(numbers)
        low, high = min(numbers), max(numbers)
        spread = f" ({low:.3g} to {high:.3g})" if len(numbers) > 1 and f"{low:.3g}" != f"{high:.3g}" else ""
        return f"{mean:.3g}{spread}"
    if flags and len(flags) == len(values):
        return f"{sum(flags)} of {len(flags)}"
    if numbers and all(v is None or isinstance(v, (int, float)) for v in values):
        return ", ".join("-" if v is None else f"{v:.3g}" for v in values)
    return ""


def _per_seed_parts(name: str, values: list) -> list[tuple[str, list]]:
    """A per-seed quantity as (label, one value per seed) parts: itself, or, where each seed gives a list of k
    values, k parts named from the name's last "a / b" list ("L=10: val acc / final loss" -> "L=10: val acc" and
    "L=10: final loss"; else "name [i]"). A seed without a value (None) is None in every part."""
    lists = [v for v in values if isinstance(v, (list, tuple))]
    if not lists or any(v is not None and not isinstance(v, (list, tuple)) for v in values) \
            or len({len(v) for v in lists}) != 1:
        return [(name, values)]
    k = len(lists[0])
    head, _, tail = name.rpartition(": ")
    names = tail.split(" / ")
    labels = [f"{head}: {n}" if head else n for n in names] if len(names) == k else [f"{name} [{i}]" for i in range(k)]
    return [(label, [None if v is None else v[i] for v in values]) for i, label in enumerate(labels)]


def verdict_table(rows: Sequence[Mapping[str, Any]], show_claim: bool = True) -> str:
    """Claim results as one HTML table, the same in the notebooks, on the static site and on the app's Papers page.

    A row needs only "verdict"; it may have "id", "section", "summary" (the one-line measured summary),
    "measured" (name -> number), "per_seed" (quantity -> one value per seed, as explorer.papers.claims gives it;
    or a list, one entry per seed), "reason" (why the verdict came out so), "rule", "threshold", "expected",
    "setup", "float_spread" ({"text": ...}, explorer.papers.claims), "note" and "seconds"; missing fields are left
    blank. Each row reads, at 1280x720, as: the verdict;
    the measured summary as its first, larger line (from the per-seed numbers, `per_seed_summary`, when the row
    has no summary), the named measured numbers and "why" (the reason, one line per part of a combined verdict);
    the per-seed numbers as a small table under them, one line per quantity and a column per seed (folded in a
    "per seed" toggle beyond PER_SEED_SHOWN quantities); the rule, threshold and
    set-up folded in a <details> "rule" toggle (plain HTML: it opens in a notebook, on the static site and in
    st.html). Every text is HTML-escaped, so claim text such as "||W|| < 1" shows literally. Verdicts: holds
    (green), does-not-hold (red), inconclusive (violet, never green), not-tested (ochre), error (grey); an
    unknown verdict shows in grey as written.
    """
    import html

    header = (["claim"] if show_claim else []) + ["verdict", "measured, why, and the numbers per seed", "s"]
    body = []
    for row in rows:
        verdict = str(row.get("verdict", "error"))
        colour, label = VERDICT_STYLES.get(verdict, ("#6e7781", verdict))
        seeds = row.get("per_seed") or []
        summary = str(row.get("summary") or "") or (per_seed_summary(seeds) if isinstance(seeds, Mapping) else "")
        lines = [f"<div class='measured' style='font-size:1.08em;font-weight:600;margin-bottom:0.3em'>"
                 + "<br>".join(html.escape(part.strip()) for part in summary.split(" | ")) + "</div>"] if summary else []
        named = [f"<b>{html.escape(str(k))}</b>: {_cell(v)}" for k, v in (row.get("measured") or {}).items()]
        if named:
            lines.append(f"<div class='named' style='font-size:0.9em'>{'; '.join(named)}</div>")
        if row.get("reason"):
            parts = str(row["reason"]).split("; [") if str(row["reason"]).startswith("[") else [str(row["reason"])]
            why = "<br>".join(html.escape(("[" if i else "") + part) for i, part in enumerate(parts))
            lines.append(f"<div class='why' style='margin-top:0.3em'><b>why:</b> {why}</div>")
        lines.append(_per_seed_table(seeds))
        spread = (row.get("float_spread") or {}).get("text")
        if spread:
            lines.append(f"<div class='float-spread' style='font-size:0.9em'><b>float-level spread:</b> "
                         f"{html.escape(str(spread))}</div>")
        note = str(row.get("note") or "").split("\nTraceback", 1)[0].strip()
        if note:
            lines.append(f"<div class='note' style='font-size:0.9em'><b>note:</b> {html.escape(note)}</div>")
        folded = [f"<b>{name}:</b> {html.escape(str(row[k]))}" for k, name in
                  (("rule", "rule"), ("threshold", "threshold"), ("expected", "expected"), ("setup", "set-up"))
                  if row.get(k)]
        if folded:
            lines.append("<details class='rule' style='margin-top:0.3em'><summary>rule</summary>"
                         f"<div style='font-size:0.88em'>{'<br>'.join(folded)}</div></details>")
        cells = ([f"<b>{html.escape(str(row.get('id', '')))}</b><br><small>{html.escape(str(row.get('section', '')))}</small>"]
                 if show_claim else [])
        cells += [f"<span class='verdict verdict-{html.escape(verdict)}' style='color:{colour}'><b>{html.escape(label)}</b></span>",
                  "".join(lines), _cell(row.get("seconds"))]
        body.append("<tr>" + "".join(f"<td style='text-align:left;vertical-align:top;padding:0.4em'>{c}</td>"
                                     for c in cells) + "</tr>")
    head = "".join(f"<th style='text-align:left;padding:0.4em'>{h}</th>" for h in header)
    return (f"<table class='explorer-verdicts' style='border-collapse:collapse;line-height:1.35'><thead><tr>{head}"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>")


def recorded_table(recorded: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The recorded full-mode rows of the claims in `rows` (the verdicts just run, usually in fast mode) as HTML:
    a line saying when and where they were recorded, one sentence per claim whose verdict here differs from the
    recorded one (which mode is the evidence, and why the two can differ), then `verdict_table` of the recorded
    rows. `recorded` is explorer.papers.claims.recorded(paper): {"about": ..., "rows": [...]}."""
    import html

    about = recorded.get("about") or {}
    by_id = {(r.get("paper"), r.get("id")): r for r in recorded.get("rows") or []}
    shown = [by_id[key] for key in ((r.get("paper"), r.get("id")) for r in rows) if key in by_id]
    stale = [str(r["id"]) for r in shown if r.get("stale")]
    modes = "; ".join(sorted({str(r.get("mode", "")).removeprefix("full mode, ") for r in shown})) or "no row recorded"
    lines = [f"<p><b>Full-mode result recorded with the package</b> ({html.escape(modes)}): "
             f"{html.escape(str(about.get('date', '?')))}, commit {html.escape(str(about.get('commit', '?')))}"
             + (f". <b>Stale</b>, the check changed after it was recorded: {html.escape(', '.join(stale))}"
                if stale else "") + "</p>"]
    for row in rows:
        sentence = mode_difference(row, by_id.get((row.get("paper"), row.get("id"))))
        if sentence:
            lines.append(f"<p class='mode-difference'><b>{html.escape(str(row.get('id')))}</b>: "
                         f"{html.escape(sentence)}</p>")
    return "".join(lines) + verdict_table(shown)


def mode_difference(row: Mapping[str, Any], full: Mapping[str, Any] | None) -> str:
    """One sentence when `row` (a claim just run) and `full` (its recorded full-mode row) disagree: both verdicts,
    which one is the evidence and why they can differ; "" when they agree or nothing was recorded."""
    if full is None or full.get("verdict") == row.get("verdict"):
        return ""
    here, there = (VERDICT_STYLES.get(str(r.get("verdict")), ("", str(r.get("verdict"))))[1] for r in (row, full))
    if str(row.get("mode", "")).startswith("fast"):
        why = ("One seed cannot measure the seed-to-seed noise, so fast mode decides only beyond a wide margin and "
               "runs smaller set-ups; the full-mode row, on several seeds, is the evidence.")
    else:
        why = ("Both ran in full mode: the check or the machine differs from the recording (compare the per-seed "
               "numbers; `explorer claims --reproduce` reruns a recorded seed).")
    return f"This run ({row.get('mode', '')}) says {here}; the recorded full mode says {there}. {why}"


PER_SEED_SHOWN = 8  # a verdict's per-seed table of more quantities is folded (the summary line gives their means)


def _per_seed_table(seeds: Mapping[str, Sequence[Any]] | Sequence[Any]) -> str:
    """The per-seed numbers as a compact nested table: a line per quantity and a column per seed (a list-valued
    entry, "val acc / final loss", as "0.8 /" over "0.31"), in a "per seed" toggle beyond PER_SEED_SHOWN quantities; a
    plain list as "seed i: value" lines."""
    import html

    if not isinstance(seeds, Mapping):
        return "<div class='per-seed'>" + "<br>".join(f"seed {i}: {_cell(v)}" for i, v in enumerate(seeds)) + "</div>"
    if not seeds:
        return ""
    n = max((len(values or []) for values in seeds.values()), default=0)

    def value(v: Any) -> str:  # a pair ("val acc / final loss") stacked, so that many seeds fit a narrow column
        return " /<br>".join(_cell(x) for x in v) if isinstance(v, (list, tuple)) else _cell(v)

    style = "style='padding:0.05em 0.5em 0.05em 0;text-align:left;font-weight:normal;white-space:nowrap'"
    head = f"<tr><th {style}></th>" + "".join(f"<th {style}>seed {i}</th>" for i in range(n)) + "</tr>"
    lines = "".join(f"<tr><td style='padding:0.05em 0.5em 0.05em 0'>{html.escape(str(name))}</td>"
                    + "".join(f"<td {style}>{value(v)}</td>" for v in (values or [])) + "</tr>"
                    for name, values in seeds.items())
    table = (f"<table class='per-seed' style='font-size:0.85em;border-collapse:collapse;margin:0.3em 0 0 0'>"
             f"<thead>{head}</thead><tbody>{lines}</tbody></table>")
    if len(seeds) > PER_SEED_SHOWN:
        return (f"<details class='per-seed' style='margin-top:0.3em'><summary>per seed ({len(seeds)} quantities)"
                f"</summary>{table}</details>")
    return table


#: What a per-seed quantity measures, read from its name: the first of these words it contains names the
#: axis it is drawn on in `claim_figure` (a name with none is grouped by its first word).
CLAIM_MEASURES: tuple[tuple[str, str], ...] = (
    ("loss ratio", "loss ratio"), ("rises", "loss rises"), ("steps", "steps"), ("accuracy", "accuracy"),
    ("val acc", "accuracy"), ("miou", "mIoU"), ("gain", "gain"), ("loss", "loss"), ("share", "share"),
    ("growth", "growth"), ("exponent", "exponent"), ("depth", "depth"), ("kappa", "condition number"),
)


def _claim_measure(label: str) -> str:
    lower = label.lower()
    for word, measure in CLAIM_MEASURES:
        if word in lower:
            return measure
    return label.split()[0].split("(")[0] if label.split() else label


def _claim_axis_title(measure: str, labels: Sequence[str]) -> str:
    """An axis's title: the words its quantities' names begin with ("val loss", "rank(theta1 - I)"), without an
    arm's "eps =" or "at width", where those words name what is measured (they contain the measure's word, or
    the measure is no word of `CLAIM_MEASURES`); else the measure ("accuracy")."""
    common = []
    for column in zip(*(label.split() for label in labels)):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    if common and common[-1] == "=":  # "..., eps =": the arm's variable, not the quantity
        common = common[:-2]
    prefix = " ".join(common).rsplit(" at ", 1)[0].rstrip(",:;")
    words = [word for word, m in CLAIM_MEASURES if m == measure]
    if len(labels) > 1 and prefix and (not words or any(word in prefix.lower() for word in words)):
        return prefix
    return measure


def _wrap(text: str, width: int = 36) -> str:
    """`text` broken into lines of about `width` characters, joined with <br> (a tick label): after its last ": "
    first ("lr 0.01, 1/L @ L=10:" / "val acc"), then at spaces."""
    if len(text) > width and ": " in text:
        head, tail = text.rsplit(": ", 1)
        return f"{_wrap(head + ':', width)}<br>{_wrap(tail, width)}"
    return "<br>".join(_word_lines(text, width))


def claim_figure(row: Mapping[str, Any]) -> go.Figure | None:
    """The numbers a claim's verdict rests on: a strip plot of its per-seed numbers, a line per quantity and a
    marker per seed (hover: the seed and its value), the quantities grouped by what they measure (`CLAIM_MEASURES`:
    accuracies, losses, steps... each on its own axis; a log axis where a group spans more than two decades).
    A list-valued entry ("val acc / final loss": [acc, loss] per seed) is split into its parts. Flags and missing
    values are left out (the quantity's label says on how many seeds a value is missing). None when the row has
    no per-seed numbers to draw: nothing is drawn that was not measured."""
    seeds = row.get("per_seed")
    if not isinstance(seeds, Mapping):
        return None
    groups: dict[str, list[tuple[str, list]]] = {}
    for name, values in seeds.items():
        for label, column in _per_seed_parts(str(name), list(values or [])):
            if any(isinstance(v, bool) for v in column):
                continue
            numbers = [_number(v) for v in column]
            if any(v is not None for v in numbers):
                groups.setdefault(_claim_measure(label), []).append((label, numbers))
    if not groups:
        return None
    n_seeds = max(len(column) for quantities in groups.values() for _, column in quantities)
    sizes = [len(quantities) for quantities in groups.values()]
    fig = make_subplots(rows=len(groups), cols=1, row_heights=[s / sum(sizes) for s in sizes],
                        vertical_spacing=min(0.12, 0.35 / len(groups)) if len(groups) > 1 else 0.0)
    colours = run_colors([f"seed {i}" for i in range(n_seeds)])
    for index, (measure, quantities) in enumerate(groups.items(), start=1):
        labels = []
        for label, column in quantities:
            missing = sum(v is None for v in column)
            labels.append(_wrap(label + (f" (no value on {missing} of {len(column)} seeds)" if missing else "")))
        values = [v for _, column in quantities for v in column if v is not None]
        log = min(values) > 0 and max(values) / min(values) > 100
        for seed in range(n_seeds):
            xs = [column[seed] if seed < len(column) else None for _, column in quantities]
            shown = [(x, y) for x, y in zip(xs, labels) if x is not None]
            if not shown:
                continue
            fig.add_trace(go.Scatter(
                x=[x for x, _ in shown], y=[y for _, y in shown], mode="markers", name=f"seed {seed}",
                legendgroup=f"seed {seed}", showlegend=index == 1,
                marker=dict(size=11, color=colours[f"seed {seed}"], opacity=0.85, line=dict(width=1, color="white")),
                hovertemplate=f"%{{y}}<br>seed {seed}: %{{x:{_FMT}}}<extra></extra>"), row=index, col=1)
        fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels[::-1], automargin=True,
                         tickfont=dict(size=13), row=index, col=1)
        title = _claim_axis_title(measure, [label for label, _ in quantities])
        fig.update_xaxes(title=dict(text=_axis_title(title, log), font=dict(size=14)), tickfont=dict(size=13),
                         automargin=True, row=index, col=1, **(_log_axis(values) if log else {}))
    return _finish(fig, "The numbers per seed",
                   height=150 + 34 * sum(sizes) + 70 * len(groups), font=dict(size=14),
                   margin=dict(l=10, r=20, t=50, b=40),
                   legend=dict(orientation="h", yanchor="top", y=-0.08 - 60 / (150 + 34 * sum(sizes) + 70 * len(groups)),
                               xanchor="left", x=0.0))


GRID_METRICS = {"final_loss": "final loss", "final_val_loss": "final validation loss",
                "final_val_accuracy": "final validation accuracy"}  # a grid row's metrics (explorer.sweeps rows)


def grid_figure(rows: Sequence[Mapping[str, Any]], y: str, x: str | None = None, metric: str = "final_loss",
                title: str | None = None) -> go.Figure:
    """A grid's runs as one heatmap of `metric` over two of its axes, each cell's value printed in it.

    `rows` are explorer.sweeps rows (`result_row`): "point" (the run's value on each grid axis and its "seed"),
    "status", "diverged_at" and the metric. `y` and `x` name axes of the point (e.g. "topology.shortcuts" and
    "seed"); runs that share a cell (the seeds, when `x` is not "seed") are averaged, and with `x=None` every run
    of a `y` value shares one "seed mean" column. A cell with a diverged run is left uncoloured and marked x,
    "diverged at step N" on hover; a cell with no value yet says what its runs are doing (queued, running, ...).
    The colour scale is sequential, the better end bright: a loss on a log scale, an accuracy linear.
    """
    if metric not in GRID_METRICS:
        raise ValueError(f"metric must be one of {', '.join(GRID_METRICS)}, got {metric!r}")
    if not rows:
        raise ValueError("rows is empty: give the grid's rows (explorer.sweeps.result_row)")
    for axis in (y, x):
        if axis is not None and any(axis not in row["point"] for row in rows):
            raise ValueError(f"axis {axis!r} is not in every row's point; axes: {', '.join(rows[0]['point'])}")

    def category(axis: str | None, value: Any) -> str:
        if axis is None:
            return "seed mean"
        text = f"{value:g}" if isinstance(value, float) else str(value)
        return f"seed {text}" if axis == "seed" else text

    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        cells.setdefault((category(y, row["point"][y]), category(x, x and row["point"][x])), []).append(row)
    ys = list(dict.fromkeys(key[0] for key in cells))
    xs = list(dict.fromkeys(key[1] for key in cells))
    name = GRID_METRICS[metric]
    values = np.full((len(ys), len(xs)), np.nan)
    text = [[""] * len(xs) for _ in ys]
    hover = [[f"{y_}<br>{x_}<br>no run" for x_ in xs] for y_ in ys]
    marks: list[tuple[str, str, str]] = []
    for (y_, x_), members in cells.items():
        i, j = ys.index(y_), xs.index(x_)
        diverged = [row for row in members if row["status"] == "diverged"]
        found = [float(row[metric]) for row in members if row["status"] != "diverged" and _number(row.get(metric)) is not None]
        lines = [f"{row['label']}: " + (f"diverged at step {row['diverged_at']}" if row in diverged else
                                         f"{row['status']}, {name} " + ("-" if _number(row.get(metric)) is None
                                                                       else f"{float(row[metric]):{_FMT}}"))
                 for row in members]
        if diverged:
            marks.append((x_, y_, "<br>".join(lines)))
        elif found:
            values[i, j] = float(np.mean(found))
            text[i][j] = f"{values[i, j]:.3g}"
            if len(found) > 1:
                lines.insert(0, f"mean of {len(found)} runs: {values[i, j]:{_FMT}}")
        else:
            text[i][j] = "/".join(dict.fromkeys(row["status"] for row in members))
        hover[i][j] = f"<b>{y_} · {x_}</b><br>" + "<br>".join(lines)
    is_loss = "loss" in metric
    log = is_loss and bool(np.isfinite(values).any()) and bool((values[np.isfinite(values)] > 0).all())
    z = np.log10(values) if log else values
    finite = z[np.isfinite(z)]
    colorbar: dict[str, Any] = {"title": {"text": name + (" (log scale)" if log else "")}}
    if log and finite.size:
        ticks = np.unique(np.linspace(finite.min(), finite.max(), 5))
        colorbar.update(tickvals=ticks.tolist(), ticktext=[f"{10 ** t:.3g}" for t in ticks])
    fig = go.Figure(go.Heatmap(
        z=z.tolist(), x=xs, y=ys, text=text, texttemplate="%{text}", textfont={"size": 14},
        customdata=hover, hovertemplate="%{customdata}<extra></extra>", hoverongaps=True,
        colorscale="Viridis", reversescale=is_loss, colorbar=colorbar, xgap=2, ygap=2))
    if marks:
        fig.add_trace(go.Scatter(
            x=[m[0] for m in marks], y=[m[1] for m in marks], mode="markers", name="diverged",
            marker={"symbol": "x", "size": 18, "color": "#c0392b", "line": {"width": 1, "color": "#7b241c"}},
            customdata=[m[2] for m in marks], hovertemplate="%{customdata}<extra>diverged</extra>", showlegend=False))
    x_title = "seeds averaged" if x is None else x
    return _finish(fig, title or f"Grid: {name} by {y} and {x_title}",
                   xaxis={"type": "category", "title": {"text": x_title}, "side": "bottom"},
                   yaxis={"type": "category", "title": {"text": y}, "autorange": "reversed", "automargin": True},
                   height=min(max(160 + 56 * len(ys), 320), 680), margin={"l": 80, "r": 30, "t": 70, "b": 60})
