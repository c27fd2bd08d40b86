"""The Train page's network view: the network as TensorFlow Playground draws it (explorer.network_view), edited by
clicks, live while the run trains, and an ended run's replay.

- Not training (no run, or the session's run paused or ended), a `shortcuts` design in the form is drawn from the
  form's spec (`network_figure`) and a click edits it: between two nodes (a point whose customdata is
  [i:j, "add"]) adds that shortcut, on an arc ([i:j, "remove"]) removes it, through the design editor's `take_click`,
  so the address bar, the matrix and the run store agree and a paused run is rewired as after a matrix click.
  The clicks come from st.plotly_chart's point selection, as the matrix's do.
- Training, the view is the run's network drawn from its latest coefficients probe result (`run_figure`): the
  page's feed serves it as its "network" chart, or without a feed a fragment's timer redraws it. Another design
  (ANCRe, tau, ...) is drawn from the run's results only, and from the form's spec before its first run.
- An ended run's replay (`replay_figure` of the run as the run store holds it) is built only while its section is
  open: a 200-step replay is megabytes of frames.

So that a replay moves its arcs step by step, the page probes the coefficients at every logged step of a small
model whose topology learns them (`probe_every`), at most about MAX_SNAPSHOTS times a run.
"""

from __future__ import annotations

import functools
import math

import plotly.graph_objects as go
import streamlit as st
import torch

import explorer
from explorer.network_view import COEFFICIENTS_PROBE, click_meaning, network_figure, replay_figure
from explorer.registries import SpecError
from explorer_app import design_editor, figures, state

HEIGHT = 215  # px: the view above the design matrix, both in the design column of a 1280x720 screen
TALL = 400  # px: the view of a design drawn without the matrix (ANCRe, tau, ...), the column's to itself
REPLAY_HEIGHT = 640  # px: the replay (network, loss and its controls) at the page's full width
MAX_SNAPSHOTS = 200  # coefficient snapshots a run stores at most for its replay, evenly spaced
# Models up to this many parameters are built in the server to draw a design before it trains (the page builds
# nothing bigger: its jobs do), and probed at every logged step: each probe is a forward pass on 8 examples.
SMALL_MODEL = 1_000_000
CONFIG = {"displaylogo": False, "displayModeBar": False}
HINT = "click between two nodes to add that shortcut, on an arc to remove it"
RUNNING = ("queued", "starting", "running")  # a run the view follows (paused: the design is edited instead)


# ---- what is probed, and what is built here --------------------------------------------------------------------
def model_facts(spec) -> tuple[int, bool]:
    """(parameters, whether its topology learns coefficients) of the spec's model, built on the meta device (no
    memory, no weights drawn) once per spec: the page asks at every rerun, and a rerun kept short leaves a click
    less time to land in it."""
    return _model_facts(spec.to_json(indent=None))


@functools.lru_cache(maxsize=64)
def _model_facts(spec_json: str) -> tuple[int, bool]:
    from explorer.data import dims
    from explorer.nn.models import build_model
    from explorer.topology.base import Topology

    spec = explorer.ExperimentSpec.from_json(spec_json)
    with torch.device("meta"):
        model = build_model(spec, dims(spec.data))
    learned = any(p.requires_grad for m in model.modules() if isinstance(m, Topology) for p in m.parameters())
    return sum(p.numel() for p in model.parameters()), learned


def probe_every(spec, chosen: int) -> int:
    """The run's probe period: `chosen` (the page's "probe every"), or shorter for a small model whose topology
    learns its coefficients: every logged step, or every k-th so that at most about MAX_SNAPSHOTS are stored."""
    parameters, learned = model_facts(spec)
    if not learned or parameters > SMALL_MODEL:
        return chosen
    every = spec.train.log_every
    return min(chosen, every * math.ceil(spec.train.steps / (every * MAX_SNAPSHOTS)))


# ---- the figures ------------------------------------------------------------------------------------------------
def height(raw: dict) -> int:
    """The view's height for the form's values `raw`: HEIGHT above a shortcuts design's matrix, else TALL."""
    return HEIGHT if raw.get("topology", {}).get("name") == design_editor.TOPOLOGY else TALL


def _fit(fig: go.Figure, title: str, note: str, px: int) -> go.Figure:
    """`fig` (network_figure's) sized for the design column, `px` high: a title with `note` under it, and no
    caption (the matrix's caption below says what an arc i:j is)."""
    fig.layout.annotations = ()
    fig.update_traces(selector=dict(name="colour scale"), marker_colorbar=dict(
        len=1.0, y=0.5, yanchor="middle", thickness=12, nticks=4, title=dict(side="right")))
    return fig.update_layout(title=dict(text=title, subtitle=dict(text=note, font=dict(size=13)), font=dict(size=16),
                                        x=0.02, xanchor="left"),
                             height=px, margin=dict(l=10, r=10, t=58, b=24))


def design_figure(spec, px: int) -> go.Figure | None:
    """The network of the form's design as initialised (a shortcuts design: its weights), with the click hint; None
    for a model past SMALL_MODEL or one this server cannot build (its data, say). Kept for the last spec drawn."""
    key = spec.to_json()
    kept = st.session_state.get("network-design")
    if kept is None or kept[0] != key:
        fig = None
        try:
            if model_facts(spec)[0] <= SMALL_MODEL:
                fig = network_figure(spec)
        except SpecError:
            fig = None
        kept = st.session_state["network-design"] = (key, fig)
    if kept[1] is None:
        return None
    fig = go.Figure(kept[1])
    clickable = spec.topology.name == design_editor.TOPOLOGY
    what = explorer.shortcuts_text(explorer.parse_shortcuts(spec.topology.params["shortcuts"])) if clickable else \
        spec.topology.name
    note = HINT if clickable else "as initialised; press Train to watch it learn"
    return _fit(fig, f"Network: {what or 'no shortcut'}", note, px)


def run_figure(view, px: int) -> go.Figure | None:
    """The run's network at its latest coefficients probe result (None before the first), `px` high: arcs as wide
    as the coefficients it has learned so far."""
    result = view.probes.get(COEFFICIENTS_PROBE)
    if result is None:
        return None
    learned = bool(result.get("learnable", False))
    note = "arc width and colour: " + ("the coefficient learned so far" if learned else "the shortcut's weight")
    return _fit(network_figure(result), f"{view.label}: the network at step {view.probe_step}", note, px)


# ---- the page's parts -----------------------------------------------------------------------------------------
def _clicked(key: str, blocks: int) -> None:
    """A click on the network view: add or remove the pair its point names, as the point says (`take_click`)."""
    if not design_editor.current_chart("network-view", key):
        return
    points = st.session_state.get(key, {}).get("selection", {}).get("points", [])
    design_editor.count_click()
    picked = {click_meaning(point.get("customdata"), blocks) for point in points} - {None}
    if len(picked) != 1:  # a box or lasso, or a click on a node or a block
        return
    design_editor.take_click(*picked.pop())


def show_design(raw: dict, spec) -> None:
    """The form's design (in the current container): a shortcuts design clickable, another as initialised."""
    if spec is None:
        if raw.get("topology", {}).get("name") == design_editor.TOPOLOGY:
            st.caption("The network view draws a valid design: fix the field marked in the sidebar.")
        return
    fig = design_figure(spec, height(raw))
    if fig is None:
        return
    if spec.topology.name != design_editor.TOPOLOGY:
        st.plotly_chart(fig, key="network-initial", config=CONFIG, theme=None)
        return
    key = f"network-view-{design_editor.clicks()}"  # a new chart after each click: it starts unselected
    blocks = fig.layout.meta["n_blocks"]
    fig.update_layout(clickmode="event+select", dragmode=False)
    # plotly.js selects no point of a lines-only trace: the arcs get invisible markers along them to take clicks
    fig.update_traces(selector=lambda t: isinstance(t.meta, str) and t.x, mode="lines+markers",
                      marker=dict(size=12, color="rgba(0,0,0,0)"))
    st.plotly_chart(fig, key=key, on_select=lambda: _clicked(key, blocks), selection_mode="points", config=CONFIG,
                    theme=None)


def following(view) -> bool:
    """Whether the view follows the session's run (it trains, or waits to) rather than showing the form's design."""
    return view is not None and view.status in RUNNING


def show(raw: dict, spec, job, view, feed=None) -> None:
    """The network view (in the current container): the run's network while it trains (following `feed`, a
    live_feed link, where one is served), the form's design otherwise; a paused or ended run of the form's
    design, when that cannot be clicked (ANCRe, ...), keeps its last network."""
    clickable = raw.get("topology", {}).get("name") == design_editor.TOPOLOGY
    same = spec is not None and job is not None and spec.to_dict() == job.spec.to_dict()
    if view is not None and (following(view) or (same and not clickable)):
        fig = _run_figure_kept(view, height(raw))
        if fig is None and following(view):
            fig = design_figure(job.spec, height(raw))
        if fig is not None:
            figures.show(fig, key="train-network", downloads=False, live=True, feed=feed)
            return
    show_design(raw, spec)


def _run_figure_kept(view, px: int) -> go.Figure | None:
    """run_figure, built once per probe result and reused by the redraws between."""
    key = (view.id, view.probe_step, px)
    kept = st.session_state.get("network-run")
    if kept is None or kept[0] != key:
        kept = st.session_state["network-run"] = (key, run_figure(view, px))
    return kept[1]


def replay(job, view) -> None:
    """An ended run's replay section (in the current container): an expander whose figure is built, from the run
    store's record of the run, only while it is open."""
    if job is None or view is None or view.active or not view.run_id or not view.history_length:
        return
    box = st.expander("Replay this run: its loss and network, step by step", key="train-replay-open",
                      on_change="rerun", icon=":material/replay:")
    with box:
        if not box.open:
            return
        kept = st.session_state.get("network-replay")
        if kept is None or kept[0] != view.run_id:
            record = state.store().get(view.run_id)
            fig = replay_figure(record).update_layout(height=REPLAY_HEIGHT)
            kept = st.session_state["network-replay"] = (view.run_id, fig)
        figures.show(kept[1], key="train-replay", name=f"replay-{view.run_id[:8]}")
