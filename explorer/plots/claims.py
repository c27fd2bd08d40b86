"""The figures and tables of claim verdicts: the HTML verdict table shared by the notebooks, the static
site and the app (`verdict_table`, `recorded_table`, `mode_difference`, `per_seed_summary`), the strip plot of a
claim's per-seed numbers (`claim_figure`) and a grid's runs as one heatmap (`grid_figure`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.plots.common import _FMT, _axis_title, _finish, _log_axis, _number, run_colors, _word_lines

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
    blank. `show_claim=False` is one claim whose heading and verdict badge the page shows around the table (the
    app's Papers page): the claim and verdict columns are left out, so the text column keeps its width beside the
    figure. Each row reads, at 1280x720, as: the verdict;
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

    header = (["claim", "verdict"] if show_claim else []) + ["measured, why, and the numbers per seed", "s"]
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
        cells = ([f"<b>{html.escape(str(row.get('id', '')))}</b><br><small>{html.escape(str(row.get('section', '')))}</small>",
                  f"<span class='verdict verdict-{html.escape(verdict)}' style='color:{colour}'><b>{html.escape(label)}</b></span>"]
                 if show_claim else [])
        cells += ["".join(lines), _cell(row.get("seconds"))]
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
    ("loss ratio", "loss ratio"), ("rises", "loss rises"), ("speed-up", "speed-up"), ("share of steps", "share"),
    ("steps", "steps"), ("accuracy", "accuracy"),
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
    while common and common[-1] in ("in", "of", "at", "for", "to", "with"):  # "speed-up in" [steps / wall time]
        common = common[:-1]
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


_AXIS_GAP_PX = 80  # between one quantity group's axis and the next group's first row, in pixels


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
    # each axis's tick labels and title need _AXIS_GAP_PX under it, whatever the figure's height (in a narrow
    # column plotly tilts the tick labels, which then need more)
    height = 150 + 34 * sum(sizes) + (70 + _AXIS_GAP_PX) * len(groups)
    plot_px = height - 90  # the top and bottom margins below
    fig = make_subplots(rows=len(groups), cols=1, row_heights=[s / sum(sizes) for s in sizes],
                        vertical_spacing=_AXIS_GAP_PX / plot_px if len(groups) > 1 else 0.0)
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
                         nticks=5, automargin=True, row=index, col=1, **(_log_axis(values) if log else {}))
    return _finish(fig, "The numbers per seed", height=height, font=dict(size=14),
                   margin=dict(l=10, r=20, t=50, b=40),
                   legend=dict(orientation="h", yanchor="top", y=-0.08 - 60 / height, xanchor="left", x=0.0))


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
