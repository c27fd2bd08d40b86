"""The network view (explorer.network_view) as a notebook widget: click to edit a shortcut design, then train it.

    from explorer.network_widget import NetworkWidget
    net = NetworkWidget("0:4")    # the design challenge's linear net (explorer.challenge) with the shortcut 0:4
    net = NetworkWidget(spec)     # or any spec: a shortcuts (or none) topology is edited by clicks
    net                           # displays it
    net.design                    # the design as topology.shortcuts text: "0:3,0:4", "none"
    net.train()                   # what its Train button does; returns the Run

The figure is a plotly FigureWidget of `network_figure` with one arc trace for every pair i < j, so a new design
or a new coefficient redraws it in place. A click between two nodes (on the invisible marker where the arc i:j would
peak) adds the shortcut i:j with the weight in the weight box; a click on an arc (its line or the dot at its top)
removes it; a click on a node, a block or an arc's ends (they lie on the nodes) does nothing. A shortcut's weight
is set by typing the design ("0:4*2"): the design box and the figure follow each other, and a design the rules
refuse is one line naming topology.shortcuts. Train trains the design through the library (the challenge's
`train_design`, or `explorer.train`) with a progress bar and the loss curve drawn as it goes; where the topology
learns its coefficients (ANCRe, learnable shortcuts) the arcs are redrawn from the coefficients probe at each
logged step. The logic is in plain functions (`click_of`, `clicked`, `design_weights`, `design_spec`).
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from explorer.challenge import CHALLENGE, PATH, challenge_spec, score, train_design
from explorer.network_view import (CLICK_ACTIONS, COEFFICIENTS_PROBE, click_meaning, coefficients_result,
                                   learned_coefficients, network_figure)
from explorer.registries import SpecError
from explorer.spec import ExperimentSpec
from explorer.topology import parse_shortcuts, shortcuts_text
from explorer.training import Run, train

__all__ = ["NetworkWidget", "click_of", "clicked", "design_spec", "design_weights"]

EDITABLE = ("shortcuts", "none")  # the topologies whose design clicks edit
MAX_BLOCKS = 16  # the widget draws nets up to this many blocks (one arc trace per pair: 136 traces)
REDRAW_SECONDS = 0.25  # while training, the figures redraw at most this often (the progress bar at every log)
HEIGHT, LOSS_HEIGHT = 380, 300  # px


# --------------------------------------------------------------------------- the logic, without widgets


def design_weights(design: Any, n_blocks: int) -> dict[tuple[int, int], float]:
    """{(i, j): weight} of a design's text ("0:4", "0:3*0.5,1:4"; "" or "none": no shortcut) on a net of `n_blocks`
    blocks; a SpecError naming topology.shortcuts says what is wrong with it."""
    if not isinstance(design, str):
        raise SpecError(PATH, f"a design is text such as '0:2' or '0:3*0.5,1:4', not {type(design).__name__}")
    if design.strip().lower() in ("", "none"):
        return {}
    return parse_shortcuts(design, n_blocks, PATH)


def click_of(trace: Any, index: int) -> tuple[tuple[int, int], str] | None:
    """((i, j), "add" or "remove"): what a click on point `index` of `trace` (a trace of `network_figure`) asks for,
    from the point's customdata [i:j, action]; None for a node, a block, the stem or an arc's two ends (they lie on
    the nodes x_i and x_j, where a click means the node)."""
    data = list(trace.customdata) if trace.customdata is not None else []
    if not 0 <= index < len(data) or (trace.mode == "lines" and index in (0, len(data) - 1)):
        return None
    return click_meaning(list(data[index]))


def clicked(weights: Mapping[tuple[int, int], float], click: tuple[tuple[int, int], str] | None,
            weight: float = 1.0) -> dict[tuple[int, int], float]:
    """The design `weights` ({(i, j): weight}) after `click` (`click_of`'s): "add" adds i:j at `weight` (a pair
    already there keeps its own), "remove" removes it; None leaves the design as it is."""
    design = dict(weights)
    if click is None:
        return design
    pair, action = click
    if action == "add":
        design.setdefault(pair, float(weight))
    elif action == "remove":
        design.pop(pair, None)
    else:
        raise ValueError(f"a click's action is one of {', '.join(CLICK_ACTIONS)}, got {action!r}")
    return design


def design_spec(base: ExperimentSpec | None, weights: Mapping[tuple[int, int], float]) -> ExperimentSpec:
    """The spec that trains the design `weights`: the challenge's (`challenge_spec`, its rules enforced) when
    `base` is None, else `base` wired with it (topology shortcuts with that list, keeping its `learnable`; none
    when there is no shortcut). A SpecError names the field."""
    text = shortcuts_text(weights)
    if base is None:
        return challenge_spec(text or "none")
    if base.topology.name not in EDITABLE:
        raise SpecError("topology.name", f"is {base.topology.name!r}: clicks edit a design of topology shortcuts "
                                         "or none; set topology.name=shortcuts to draw one")
    if not text:
        return base.with_values({"topology.name": "none"})
    values = {"topology.name": "shortcuts", "topology.shortcuts": text}
    if base.topology.name == "shortcuts":
        values["topology.learnable"] = base.topology.params.get("learnable", False)
    return base.with_values(values)


def _pairs(n_blocks: int) -> list[tuple[int, int]]:
    """Every pair i < j of a net of `n_blocks` blocks, in the order the network view draws arcs (by j, then i)."""
    return [(i, j) for j in range(1, n_blocks + 1) for i in range(j)]


def _restyle(widget: go.FigureWidget, fig: go.Figure) -> None:
    """Redraw the FigureWidget `widget` as `fig` (a network figure on the same pairs: the same traces), in place."""
    with widget.batch_update():
        for old, new in zip(widget.data, fig.data):
            values = new.to_plotly_json()
            values.pop("type", None)
            old.update(values, overwrite=True)
        widget.layout.title.text = fig.layout.title.text
        widget.layout.meta = fig.layout.meta


# --------------------------------------------------------------------------- the widget


class NetworkWidget:
    """The network view of a design with clicks that edit it, a design box, a weight box, Train, a progress bar
    and the loss curve (see the module's docstring).

    `design` is the challenge's design as text ("0:4"; "none": the plain chain) or an ExperimentSpec; `weight` is
    the weight a click gives a new shortcut."""

    def __init__(self, design: str | ExperimentSpec = "0:4", weight: float = 1.0) -> None:
        import ipywidgets as widgets  # the notebooks' extra (pip install .[notebooks])

        if isinstance(design, ExperimentSpec):
            self.base: ExperimentSpec | None = design
            self.spec, topology = design, design.topology
            self.editable = topology.name in EDITABLE
            self.weights = parse_shortcuts(topology.params["shortcuts"]) if topology.name == "shortcuts" else {}
        elif isinstance(design, str):
            self.base, self.editable = None, True
            self.weights = design_weights(design, CHALLENGE.depth)
            self.spec = design_spec(None, self.weights)
        else:
            raise SpecError("design", f"expected the challenge's design as text such as '0:4', or an "
                                      f"ExperimentSpec, got {type(design).__name__}")
        result, _ = coefficients_result(self.spec)
        self.n_blocks = len(result["own"]) - 1
        if self.n_blocks > MAX_BLOCKS:
            raise SpecError("model.depth", f"the network widget draws nets of up to {MAX_BLOCKS} blocks, this one "
                                           f"has {self.n_blocks}: use a shallower net, or explorer.network_figure")
        self.learned = learned_coefficients(result)
        self.pairs = _pairs(self.n_blocks)
        self.run: Run | None = None
        self._steps: list[int] = []
        self._losses: list[float | None] = []
        self._drawn = 0.0
        self._probed: tuple[int, dict] | None = None  # (step, coefficients) probed and not drawn yet

        self.figure = go.FigureWidget(network_figure(result, title=self._title(), pairs=self.pairs))
        self.figure.update_layout(height=HEIGHT, margin=dict(t=60, b=50), clickmode="event", dragmode=False)
        for trace in self.figure.data:
            trace.on_click(self._on_click)
        self.text = widgets.Text(value=self.design, description="design", continuous_update=False,
                                 disabled=not self.editable, tooltip="the design as topology.shortcuts text, e.g. "
                                 "0:3,0:4 or 0:4*2 (a weight after *); press Enter to draw it")
        self.text.observe(self._on_typed, names="value")
        self.weight = widgets.BoundedFloatText(value=float(weight), min=-10.0, max=10.0, step=0.1,
                                               description="weight", disabled=not self.editable,
                                               tooltip="the weight of a shortcut a click adds (x_j gets + w x_i)")
        self.message = widgets.HTML()
        self.button = widgets.Button(description="Train", button_style="primary",
                                     tooltip="train this design; the loss curve is drawn as it trains")
        self.button.on_click(self.train)
        self.progress = widgets.IntProgress(value=0, min=0, max=self.spec.train.steps, description="progress")
        self.status = widgets.HTML("not trained yet: press Train")
        self.loss = go.FigureWidget(go.Scatter(x=[], y=[], mode="lines", name="training loss"))
        self.loss.update_layout(height=LOSS_HEIGHT, title=dict(text="Training loss: press Train"),
                                xaxis=dict(title=dict(text="step")),
                                yaxis=dict(title=dict(text="training loss"), type="log", exponentformat="power"),
                                margin=dict(t=50, b=40, l=60, r=20), plot_bgcolor="white", showlegend=False)
        if self.base is None:
            self.loss.add_hline(y=CHALLENGE.target_loss, line=dict(dash="dot", color="#888"),
                                annotation_text=f"target {CHALLENGE.target_loss:g}")
        intro = (f"<b>{html.escape(CHALLENGE.text)}</b><br>" if self.base is None else "")
        intro += ("Click between two nodes to add that shortcut, on an arc to remove it (hover says what each adds "
                  "where), or type the design; then press Train." if self.editable else
                  f"Topology {html.escape(self.spec.topology.name)}: press Train to watch it learn.")
        self.box = widgets.VBox([widgets.HTML(intro), self.figure,
                                 widgets.HBox([self.text, self.weight, self.button]), self.message,
                                 widgets.HBox([self.progress, self.status]), self.loss])
        self.box.add_class("explorer-network-widget")
        self._show_design()

    # ---- the design ---------------------------------------------------------------------------------------------
    @property
    def design(self) -> str:
        """The design as topology.shortcuts text ("0:3,0:4", "0:4*2"; "none" without a shortcut)."""
        return shortcuts_text(self.weights) or "none"

    def _title(self) -> str:
        if not self.editable:
            return f"Network: {self.spec.topology.name}, {self.n_blocks} blocks"
        return f"Network: {self.design}" + ("" if self.base is not None else " (the challenge's linear net)")

    def set_design(self, design: str) -> str:
        """Draw `design` (text, as in the design box); returns its canonical text. A SpecError naming
        topology.shortcuts refuses a design that does not parse or that the rules refuse, and changes nothing."""
        if not self.editable:
            raise SpecError("topology.name", f"is {self.spec.topology.name!r}: only a design of topology shortcuts "
                                             "or none is edited")
        self._draw(design_weights(design, self.n_blocks))
        return self.design

    def click(self, click: tuple[tuple[int, int], str] | None) -> str:
        """Apply a click (`click_of`'s ((i, j), action)) at the weight box's weight; returns the design's text. A
        design the rules refuse (a third shortcut in the challenge) is not drawn: the message says why."""
        if click is None or not self.editable:
            return self.design
        try:
            self._draw(clicked(self.weights, click, float(self.weight.value)))
        except SpecError as error:
            self.message.value = f"not drawn: {html.escape(str(error))}"
        return self.design

    def _draw(self, weights: dict[tuple[int, int], float]) -> None:
        spec = design_spec(self.base, weights)  # refuses a design the rules refuse, before anything changes
        result, _ = coefficients_result(spec)
        self.weights, self.spec, self.learned = dict(weights), spec, learned_coefficients(result)
        _restyle(self.figure, network_figure(result, title=self._title(), pairs=self.pairs))
        self._show_design()

    def _show_design(self) -> None:
        if self.text.value != self.design and self.editable:
            self.text.value = self.design
        self.button.disabled = False
        count = len(self.weights)
        rule = f" (at most {CHALLENGE.max_shortcuts})" if self.base is None else ""
        self.message.value = (f"design <code>{html.escape(self.design)}</code>: {count} shortcut"
                              f"{'' if count == 1 else 's'}{rule}" if self.editable else "")

    def _on_click(self, trace: Any, points: Any, _state: Any = None) -> None:
        for index in points.point_inds:
            self.click(click_of(trace, index))

    def _on_typed(self, change: dict) -> None:
        if change["new"] == self.design:
            return
        try:
            self.set_design(change["new"])
        except SpecError as error:
            self.button.disabled = True  # the box and the figure differ until the design is fixed
            self.message.value = f"not drawn: {html.escape(str(error))}"

    # ---- training -----------------------------------------------------------------------------------------------
    def train(self, _: Any = None) -> Run | None:
        """Train the drawn design (the challenge's `train_design`, or `explorer.train` with the coefficients probed
        at each logged step where the topology learns them), with the progress bar and the loss curve drawn as it
        goes; returns the Run (None, with the reason in the message, when the design is refused)."""
        spec, label = self.spec, self.design if self.editable else self.spec.topology.name
        self._steps, self._losses, self._drawn, self._probed = [], [], 0.0, None
        self.progress.max, self.progress.value, self.progress.bar_style = spec.train.steps, 0, ""
        self.status.value = f"{html.escape(label)}: starting..."
        with self.loss.batch_update():
            self.loss.data[0].x, self.loss.data[0].y = [], []
            self.loss.layout.title.text = f"Training loss of {label}: training..."
        self.button.disabled = True
        try:
            if self.base is None:
                run = train_design(self.design, callbacks=[self._on_event])
            else:
                probes = {COEFFICIENTS_PROBE: {}} if self.learned else None
                run = train(spec, callbacks=[self._on_event], probes=probes, probe_every=spec.train.log_every)
        except SpecError as error:
            self.message.value = f"not trained: {html.escape(str(error))}"
            return None
        finally:
            self.button.disabled = False
        self.run = run
        self._draw_loss()
        if self.base is None:
            steps = score(run)
            result = (f"reached {CHALLENGE.target_loss:g} at step {steps}" if steps is not None else
                      f"did not reach {CHALLENGE.target_loss:g} within {CHALLENGE.base.train.steps} steps")
            self.progress.bar_style = "success" if steps is not None else "warning"
        else:
            final = run.final.get("loss")
            result = f"{run.status} after {run.steps_done} steps" + (
                f", loss {final:.3g}" if final is not None and math.isfinite(final) else "")
            self.progress.bar_style = {"finished": "success", "diverged": "danger"}.get(run.status, "warning")
        self.loss.layout.title.text = f"Training loss of {label}: {result}"
        self.status.value = f"{html.escape(label)}: {result}"
        return run

    def _on_event(self, event: Any) -> None:
        """A training callback: the progress bar at every logged step, the loss curve and (where the coefficients
        are probed) the arcs at most every REDRAW_SECONDS."""
        if event.kind not in ("log", "end"):
            return
        loss = (event.metrics or {}).get("loss")
        if event.kind == "log" and loss is not None:
            self._steps.append(int(event.step))
            self._losses.append(float(loss) if math.isfinite(loss) else None)
        self.progress.value = min(int(event.step), self.progress.max)
        self.status.value = f"step {int(event.step)} of {self.progress.max}" + (
            f", loss {loss:.4g}" if loss is not None and math.isfinite(loss) else "")
        if COEFFICIENTS_PROBE in (event.probes or {}):
            self._probed = (int(event.step), event.probes[COEFFICIENTS_PROBE])
        now = time.monotonic()
        if now - self._drawn >= REDRAW_SECONDS or event.kind == "end":
            self._drawn = now
            self._draw_loss()
            if self._probed is not None:  # the latest coefficients
                step, result = self._probed
                title = f"Network: {self.spec.topology.name} at step {step} (learned coefficients)"
                _restyle(self.figure, network_figure(result, title=title, pairs=self.pairs))
                self._probed = None

    def _draw_loss(self) -> None:
        with self.loss.batch_update():
            self.loss.data[0].x, self.loss.data[0].y = list(self._steps), list(self._losses)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)
