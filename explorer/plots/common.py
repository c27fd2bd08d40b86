"""What every figure family shares: the template, the run colours, number formats, axis styles and
wrapping. `PALETTE` and `run_colors` give a run one colour across figures; `_log_axis` is the one log-axis
style; `_finish` applies the template and the title; `wrap_title` breaks a long title into lines; the small
validators (`_vector`, `_curve_dict`, `_number`) turn bad input into a ValueError naming the argument."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

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

TITLE_LINE_CHARS = 48  # a wrapped title's longest line: it fits a half-width app column at 1280 px


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
