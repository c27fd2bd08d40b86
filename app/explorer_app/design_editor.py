"""The Train page's shortcut editor: draw a `shortcuts` topology by clicking the cells i:j of a matrix.

A drawn design is nothing but the form's `topology.shortcuts` text, written in its canonical form
(`explorer.shortcuts_text`): it lands in the address bar, the run store, Compare and `explorer train --set`
as a typed one does, and the form validates it the same way. The matrix has a row per target state x_j (block j's
output, 1..L) and a column per source state x_i (0 = the input .. L-1), as `explorer.SHORTCUT_NOTATION` defines
i:j; every cell i:j with i < j is clickable, the cells j-1:j included: the identity skip around block j, the
standard residual's (as in the preset ancre-fig2b-0:1). Each cell's hover is `explorer.describe_shortcut`'s
sentence. Plotly heatmaps emit no point clicks under Streamlit's selection, so a scatter trace of one marker per
clickable cell takes the clicks.

While the session's run is paused, a changed design rewires the running model (`rewire_if_edited`): the
job queue's `rewire` changes its shortcuts at the step it holds, keeping its block weights.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import streamlit as st

import explorer
from explorer.nn.base import n_blocks
from explorer.registries import SpecError
from explorer_app import messages, spec_form, state

TOPOLOGY = "shortcuts"
NAME_KEY = f"{spec_form.PREFIX}topology.name"
TEXT_KEY = spec_form.widget_key("topology", TOPOLOGY, "shortcuts")
LEARNABLE_KEY = spec_form.widget_key("topology", TOPOLOGY, "learnable")
CLICKS = "design-clicks"  # how many clicks were taken: a part of the matrix's key, so each figure starts unselected
DRAWN = "design-drawn"  # {the matrix's key: the design text it shows}: what a click on it means
SELECTED = "design-selected"  # the shortcut the weight input edits, as "i:j"
WEIGHT = "design-weight"
LEARNABLE = "design-learnable"
ON, OFF, CHAIN = "#1c83e1", "#9aa0a6", "#e8eaed"
MARKER_DY = 0.4  # a marker sits below its cell's label, in the same cell (a click rounds to the cell)


def model_blocks(raw: dict) -> int | None:
    """How many blocks the form's model has under a shortcuts topology; None while the model's fields are invalid."""
    try:
        spec = explorer.ExperimentSpec.from_dict({**raw, "topology": {"name": TOPOLOGY, "shortcuts": "0:1"}},
                                                 runnable=False)
        return n_blocks(spec)
    except (SpecError, KeyError, TypeError, ValueError):
        return None


def design_text() -> str:
    """The form's `topology.shortcuts` text (its default before the field was drawn)."""
    default = next(p.default for p in explorer.registry("topologies")[TOPOLOGY].params if p.name == "shortcuts")
    return str(st.session_state.get(TEXT_KEY, default))


def current_design(blocks: int | None = None) -> dict[tuple[int, int], float]:
    """The form's design as {(i, j): weight}; {} while its text does not parse (the form shows why)."""
    try:
        return explorer.parse_shortcuts(design_text(), blocks)
    except SpecError:
        return {}


def toggled(design: dict[tuple[int, int], float], cell: tuple[int, int]) -> dict[tuple[int, int], float]:
    """The design with the shortcut `cell` removed if it has it, else added with weight 1."""
    changed = dict(design)
    if cell in changed:
        del changed[cell]
    else:
        changed[cell] = 1.0
    return changed


def cell_text(cell: tuple[int, int]) -> str:
    return f"{cell[0]}:{cell[1]}"


def clickable(blocks: int) -> list[tuple[int, int]]:
    """The cells a click toggles: every i:j with i < j (j - 1:j is the identity skip around block j, the
    standard residual's; the block itself is always there)."""
    return [(i, j) for j in range(1, blocks + 1) for i in range(j)]


def design_figure(blocks: int, design: dict[tuple[int, int], float], selected: tuple[int, int] | None = None) -> go.Figure:
    """The design as a matrix: rows the target state x_j (block j's output, 1..L), columns the source state x_i
    (0 = the input .. L-1), every cell labelled i:j and hovered with `explorer.describe_shortcut`'s sentence.

    A shortcut's cell is coloured by its weight (a diverging scale centred at 0); the cells j - 1:j, the skips
    around one block (the standard residual's), are grey while off and say "around block j"; the cells above
    (i >= j) are blank. A scatter trace puts one marker on each clickable cell:
    filled where the design has the shortcut, open where not; the selected one (the weight input's) is ringed.
    """
    sources, targets = list(range(blocks)), list(range(1, blocks + 1))
    weight = np.full((blocks, blocks), np.nan)
    chain = np.full((blocks, blocks), np.nan)
    labels = [["" for _ in sources] for _ in targets]  # the shortcut cells' labels
    chain_labels = [["" for _ in sources] for _ in targets]  # the grey skips', smaller: three lines in a cell
    said = [["" for _ in sources] for _ in targets]  # the chain cells' hovers
    for j in targets:
        for i in range(j):
            on = design.get((i, j))
            if i == j - 1 and on is None:
                chain[j - 1, i] = 0.0
                chain_labels[j - 1][i] = f"{i}:{j}<br>around<br>block {j}"  # three short lines fit a narrow cell
                said[j - 1][i] = (f"{explorer.describe_shortcut(i, j, blocks)}: the identity skip around block {j} "
                                  "(the standard residual's)")
            else:
                weight[j - 1, i] = 0.0 if on is None else on
                labels[j - 1][i] = f"{i}:{j}" if on is None or on == 1.0 else f"{i}:{j}<br>×{on:g}"
    span = max([abs(w) for w in design.values() if math.isfinite(w)] + [1.0])
    fig = go.Figure()
    fig.add_trace(go.Heatmap(x=sources, y=targets, z=chain, colorscale=[[0, CHAIN], [1, CHAIN]], showscale=False,
                             text=chain_labels, texttemplate="%{text}", textfont=dict(size=11, color="#5f6368"),
                             customdata=said, hovertemplate="%{customdata}<extra></extra>",
                             xgap=2, ygap=2, name="chain"))
    fig.add_trace(go.Heatmap(x=sources, y=targets, z=weight, colorscale="RdBu", reversescale=True, zmid=0.0,
                             zmin=-span, zmax=span, text=labels, texttemplate="%{text}", textfont=dict(size=13),
                             colorbar=dict(title=dict(text="weight"), thickness=14), xgap=2, ygap=2, hoverinfo="skip",
                             name="weights"))
    cells = clickable(blocks)
    fig.add_trace(go.Scatter(
        x=[i for i, _ in cells], y=[j + MARKER_DY for _, j in cells], mode="markers", name="shortcuts",
        customdata=[[i, j, "remove" if (i, j) in design else "add",
                     explorer.describe_shortcut(i, j, blocks, design.get((i, j), 1.0))] for i, j in cells],
        marker=dict(size=11, symbol=["circle" if c in design else "circle-open" for c in cells],
                    color=[ON if c in design else OFF for c in cells],
                    line=dict(width=[3 if c == selected else 1.5 for c in cells],
                              color=["#f9ab00" if c == selected else (ON if c in design else OFF) for c in cells])),
        hovertemplate="%{customdata[3]}<br>click to %{customdata[2]} this shortcut<extra></extra>"))
    fig.update_layout(
        title=dict(text=f"Design: {explorer.shortcuts_text(design) or 'no shortcut'}"),
        xaxis=dict(title=dict(text=f"from {explorer.state_label(0)} or x_i (block i's output)"), tickmode="array",
                   tickvals=sources,
                   range=[-0.5, blocks - 0.5], fixedrange=True, showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text="into x_j (block j's output)"), tickmode="array", tickvals=targets,
                   range=[blocks + 0.5, 0.5], fixedrange=True, showgrid=False, zeroline=False),
        height=min(110 + 55 * blocks, 640), margin=dict(l=60, r=20, t=40, b=50), showlegend=False,
        plot_bgcolor="white", clickmode="event+select", dragmode=False)
    return fig


# ---- the widgets' callbacks (they run before the form is drawn, the only time its fields may be set) --------
def _write(design: dict[tuple[int, int], float]) -> None:
    st.session_state[TEXT_KEY] = explorer.shortcuts_text(design)


def count_click() -> None:
    """Count a click on a drawing of the design (the matrix, the network view): their keys change with the count,
    so each is drawn again unselected."""
    st.session_state[CLICKS] = st.session_state.get(CLICKS, 0) + 1


def clicks() -> int:
    return st.session_state.get(CLICKS, 0)


def toggle(cell: tuple[int, int]) -> None:
    """Add or remove the shortcut `cell` in the form's text and select it. A widget callback's work (it runs
    before the form is drawn)."""
    design = toggled(current_design(), cell)
    _write(design)
    st.session_state[SELECTED] = cell_text(cell) if cell in design else None


def take_click(cell: tuple[int, int], action: str) -> None:
    """A click on a drawing of the design (the matrix, the network view) that said it would `action` ("add" or
    "remove") the shortcut `cell`: done only while it still means that against the form's design, so the same
    click taken twice (an event delivered again by a rerun) adds or removes the shortcut once."""
    if (action == "remove") == (cell in current_design()):
        toggle(cell)


def current_chart(prefix: str, key: str) -> bool:
    """Whether `key` is the drawing now on the page (`prefix` + the click count): a selection event of a drawing
    that a click has already replaced (the same event delivered again by an interrupted rerun) is not a click."""
    return key == f"{prefix}-{clicks()}"


def _clicked(key: str, blocks: int) -> None:
    """A click on the matrix: add the clicked cell's shortcut if the drawing clicked lacked it, else remove it
    (`take_click`)."""
    if not current_chart("design-matrix", key):
        return
    points = st.session_state.get(key, {}).get("selection", {}).get("points", [])
    count_click()
    cells = {(int(round(p["x"])), int(round(p["y"]))) for p in points if "x" in p and "y" in p}
    cells &= set(clickable(blocks))
    if len(cells) != 1:  # a box or lasso, or a click beside the markers
        return
    cell = cells.pop()
    try:
        shown = explorer.parse_shortcuts(st.session_state.get(DRAWN, {}).get(key, ""))
    except SpecError:
        shown = {}
    take_click(cell, "remove" if cell in shown else "add")


def _weighted() -> None:
    """The weight input changed: give the selected shortcut its weight."""
    selected = st.session_state.get(SELECTED)
    design = current_design()
    cells = {cell_text(c): c for c in design}
    if selected in cells:
        design[cells[selected]] = float(st.session_state[WEIGHT])
        _write(design)


def _learnable() -> None:
    st.session_state[LEARNABLE_KEY] = bool(st.session_state[LEARNABLE])


def _draw_shortcuts() -> None:
    """Switch the form's topology to `shortcuts` (its design starts at the topology's default)."""
    st.session_state[NAME_KEY] = TOPOLOGY


def _has_param(name: str) -> bool:
    return any(p.name == name for p in explorer.registry("topologies")[TOPOLOGY].params)


def render(raw: dict) -> None:
    """The editor (in the current container) for the form's values `raw`: a button that switches the form to a
    shortcuts topology, or the matrix of the design, the selected shortcut's weight and the learnable toggle."""
    if raw.get("topology", {}).get("name") != TOPOLOGY:
        st.button("Draw shortcuts", key="design-draw", icon=":material/draw:", on_click=_draw_shortcuts,
                  help="Switch the residual topology to shortcuts and draw them on a matrix of layers.")
        return
    blocks = model_blocks(raw)
    if blocks is None:
        st.caption("Fix the architecture's fields in the sidebar to draw shortcuts on its layers.")
        return
    design = {cell: w for cell, w in current_design().items() if cell[1] <= blocks}  # the form names any pair past L
    names = [cell_text(cell) for cell in design]
    if st.session_state.get(SELECTED) not in names:
        st.session_state[SELECTED] = names[-1] if names else None
    selected = st.session_state[SELECTED]
    cell = next((c for c in design if cell_text(c) == selected), None)
    key = f"design-matrix-{clicks()}"
    st.session_state[DRAWN] = {key: explorer.shortcuts_text(design)}
    st.plotly_chart(design_figure(blocks, design, cell), key=key, on_select=lambda: _clicked(key, blocks),
                    selection_mode="points", config={"displaylogo": False, "displayModeBar": False}, theme=None)
    st.caption(f"Click a cell i:j to add or remove that shortcut ({blocks} blocks): {explorer.SHORTCUT_NOTATION}. "
               "A grey cell j-1:j is the identity skip around block j, the standard residual's. The design is the "
               "sidebar's **shortcuts** field: type there to paste one.")
    if not names:
        return
    left, middle, right = st.columns([1, 1, 1], vertical_alignment="bottom")
    left.selectbox("shortcut", names, key=SELECTED, help="The shortcut the weight applies to (the last one clicked).")
    if st.session_state.get(WEIGHT + ":for") != (selected, design[cell]):
        st.session_state[WEIGHT] = float(design[cell])  # follow the selection, and the text typed in the sidebar
        st.session_state[WEIGHT + ":for"] = (selected, design[cell])
    middle.number_input("weight", key=WEIGHT, format="%g", step=0.1, on_change=_weighted,
                        help="w_ij in x_j = act(y_j + sum_i w_ij x_i); 1 is the plain identity shortcut.")
    if _has_param("learnable"):
        st.session_state[LEARNABLE] = bool(st.session_state.get(LEARNABLE_KEY, False))
        right.toggle("learnable", key=LEARNABLE, on_change=_learnable,
                     help="Train each shortcut's weight with the model, starting from the weight drawn.")


# ---- the design challenge ----------------------------------------------------------------------------------
TRIES = "challenge-tries"  # job id -> the session's scored run of a challenge design (its table row), or None


def scored_tries(jobs) -> tuple[list[dict], list[str]]:
    """This session's ended runs, each judged once (explorer.challenge.judge): the scored ones (steps to the target
    loss, None: not reached) best first, each design once, and one line per run that is not scored saying why.
    Kept in the session only: another browser has its own table."""
    from explorer import challenge

    tries = st.session_state.setdefault(TRIES, {})
    for job in jobs:
        if job.id in tries or getattr(job, "kind", None) != "train" or job.active:
            continue
        view = job.view()
        tries[job.id] = {**challenge.judge(job.spec, view.history, view.status, view.rewires), "label": view.label}
    unscored = [f"{row['label']}: {row['why']}" for row in tries.values() if "why" in row]
    return challenge.ranked(row for row in tries.values() if "why" not in row), unscored


def _load_challenge() -> None:
    """Put the challenge's set-up in the form, with its topology switched to shortcuts to draw on."""
    from explorer import challenge

    spec_form.load_into_widgets(challenge.CHALLENGE.base)
    st.session_state[NAME_KEY] = TOPOLOGY
    st.session_state.pop("train-loaded-preset", None)


def challenge_refusal(spec) -> SpecError | None:
    """Why the form's experiment, the challenge's set-up with other shortcuts, breaks the challenge's rules (e.g.
    too many shortcuts); None when it keeps them or is another experiment."""
    from explorer import challenge

    if spec is None or spec.topology.name != TOPOLOGY:
        return None
    others = {k: v for k, v in spec.to_dict().items() if k != "topology"}
    if others != {k: v for k, v in challenge.CHALLENGE.base.to_dict().items() if k != "topology"}:
        return None
    try:
        challenge.challenge_spec(spec.topology.params["shortcuts"])
    except SpecError as error:
        return error
    return None


def unscored_setup(spec) -> SpecError | None:
    """Why a run of the form would not be scored, for a form that is the challenge's linear net on its data with a
    field changed (e.g. another learning rate); None for a challenge run, or for another experiment altogether."""
    from explorer import challenge

    base = challenge.CHALLENGE.base
    if spec is None or (spec.model.name, spec.data.to_dict()) != (base.model.name, base.data.to_dict()):
        return None
    try:
        challenge.design_of(spec)
    except SpecError as error:
        return error
    return None


CLASS_NAME = "class-name"  # the display name typed for the class board
CLASS_POSTED = "class-posted"  # (class started at, job ids this session put on the board)
CLASS_MESSAGE = "class-message"  # why the last name or post was refused


def _name_changed() -> None:
    """The display name field's callback: the class board shows this browser's runs under it."""
    try:
        state.classroom().set_name(state.student(), st.session_state.get(CLASS_NAME, ""))
        st.session_state.pop(CLASS_MESSAGE, None)
    except SpecError as error:
        st.session_state[CLASS_MESSAGE] = messages.spec_error(error)


def post_to_class(room, tries: dict) -> None:
    """Put this session's judged runs (`scored_tries`'s rows) on the class board, each once, once the student has
    a name there."""
    owner = state.student()
    if owner is None or owner not in room.names:
        return
    started, posted = st.session_state.get(CLASS_POSTED, (None, set()))
    if started != room.started:
        posted = set()
    for job_id, row in tries.items():
        if job_id in posted:
            continue
        try:
            state.classroom().post(owner, job_id, row.get("label", ""), row)
        except SpecError as error:
            st.session_state[CLASS_MESSAGE] = messages.spec_error(error)
            break
        posted.add(job_id)
    st.session_state[CLASS_POSTED] = (room.started, posted)


def class_board_table(room, top: int | None = None) -> list[dict]:
    """The class board's rows as a table shows them (st.dataframe shows cells as text, never as markdown)."""
    from explorer import challenge, classroom

    task = challenge.CHALLENGE
    return [{"rank": row["rank"], "name": row["name"], "design": row["design"],
             f"steps to {task.target_loss:g}": "not reached" if row["steps"] is None else row["steps"],
             "last loss": challenge.loss_text(row["final_loss"])}
            for row in classroom.board(room)[:top]]


def class_part(room) -> None:
    """A running class's part of the challenge: the display name and the class board's best rows."""
    owner = state.student()
    if CLASS_NAME not in st.session_state and owner in room.names:
        st.session_state[CLASS_NAME] = room.names[owner]
    from explorer.classroom import NAME_CHARS

    st.text_input("Your name on the class board", key=CLASS_NAME, max_chars=NAME_CHARS, on_change=_name_changed,
                  placeholder="any name; press Enter",
                  help="Your challenge runs go to the class board under this name (this browser, all its tabs).")
    if st.session_state.get(CLASS_MESSAGE):
        st.caption(f"Not on the class board: {st.session_state[CLASS_MESSAGE]}")
    rows = class_board_table(room, top=10)
    if rows:
        st.dataframe(rows, hide_index=True, key="class-board")
    else:
        st.caption("The class board is empty: name yourself and train a design.")


def challenge_panel(jobs, spec) -> None:
    """The design challenge (in the current container): the task, a button that loads its set-up, whether the
    form's design keeps the rules, the session's table of designs tried and, on request, the papers' answer.
    While a class runs (explorer.classroom), a display name puts the session's runs on the class board, and the
    answer shows once the teacher reveals it."""
    from explorer import challenge

    task = challenge.CHALLENGE
    st.markdown(f"**{task.text}** Draw the design on the matrix above, press **Train**, and it is scored here: "
                f"the first step whose training loss is at most {task.target_loss:g}. The set-up (data, "
                f"{task.depth} linear layers, gradient descent, {task.base.train.steps} steps) is the challenge's: "
                "change only the shortcuts.")
    st.button("Load the challenge", key="challenge-load", icon=":material/flag:", on_click=_load_challenge)
    refused, changed = challenge_refusal(spec), unscored_setup(spec)
    if refused is not None:
        st.warning(f"Not a challenge design: {messages.spec_error(refused)}", icon=":material/block:")
    elif changed is not None:
        st.caption(f"A run of the form will not be scored: {messages.spec_error(changed)}")
    rows, unscored = scored_tries(jobs)
    if rows:
        st.dataframe([{"design": r["design"], "shortcuts": r["shortcuts"],
                       f"steps to {task.target_loss:g}": "not reached" if r["steps"] is None else r["steps"],
                       "last loss": challenge.loss_text(r["final_loss"])}
                      for r in rows],
                     hide_index=True, key="challenge-table")
    else:
        st.caption("Your scored designs appear here (this session only).")
    if unscored:
        st.markdown("**Not scored:**\n" + "\n".join(f"- {messages.escape(line)}" for line in unscored))
    room = state.classroom().read()
    if room.open:
        post_to_class(room, st.session_state.get(TRIES, {}))
        class_part(state.classroom().read())
    if room.open and not room.revealed:
        st.caption("The papers' answer shows here once your teacher reveals it.")
    elif st.toggle("Show the papers' answer", key="challenge-reveal"):
        answer = challenge.reference(measure=False)  # the server trains nothing itself: Train it to measure it
        tried = next((r for r in rows if r["design"] == answer["design"] and r["steps"] is not None), None)
        steps = "train it to see its steps" if tried is None else f"{tried['steps']} steps in your table"
        st.info(f"**{answer['design']}** ({steps}). {answer['why']}", icon=":material/school:")
        compared = challenge.against_answer(rows)
        if compared is not None:
            st.markdown(f"**{messages.escape(compared)}**")
