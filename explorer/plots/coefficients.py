"""The connection-coefficient figures of the coefficients probe: the heatmap of who feeds whom
(`coefficient_heatmap`, each cell's hover giving the equation that made its value: paths of own coefficients,
a softmax of logits), which of its matrices to draw (`coefficient_basis`), and where a learned topology put
its mass (`mass_summary`, text)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from explorer.plots.common import _finish, wrap_title
from explorer.topology.shortcuts import SOURCE_STATE, TARGET_STATE, describe_shortcut, state_label, target_label

COEFFICIENT_BASES = ("unrolled", "own", "log_ratio")
MAX_CELL_TEXT = 13  # matrices up to this size (12 blocks: the presets' sizes) print each value in its cell
MAX_PATHS_SHOWN = 3  # an unrolled cell's hover lists its largest paths, then how many more there are
MAX_PATH_SIZE = 33  # above this size an unrolled cell's hover gives its path count, not the paths (cost grows as L^3)
MAX_TERMS_SHOWN = 4  # a softmax's denominator lists this many terms, then how many more
FORCED_GREY = "#c8c8c8"
MAX_TICK_LABELS = 16  # a heatmap labels at most this many states per axis (more overlap at a projector's size)
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
