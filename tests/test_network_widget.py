"""The network widget's logic without a browser (explorer.network_widget): what a click on each kind of point of the
network view asks for, the design after it, the design text and the figure kept in step, the refusals (one
SpecError naming the field), and Train: the loss curve and the score, and a learned topology's arcs redrawn from
its coefficients. tests/test_notebooks_network_browser.py clicks the same widget in JupyterLab."""

from __future__ import annotations

import pytest

import explorer
from explorer import challenge
from explorer.network_widget import NetworkWidget, click_of, clicked, design_spec, design_weights
from explorer.registries import SpecError

pytest.importorskip("ipywidgets")

DESIGN = {(0, 2): -1.0, (1, 4): 1.0}  # the challenge's net (5 blocks) with a negative and a plain shortcut


@pytest.fixture(scope="module")
def figure():
    return explorer.network_figure(design_spec(None, DESIGN))


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def _arcs(fig) -> set[str]:
    """The arcs drawn (arc traces with points), as "i:j"."""
    return {t.meta for t in fig.data if isinstance(t.meta, str) and t.x}


def test_a_click_between_two_nodes_adds_exactly_that_pair(figure):
    add = _trace(figure, "add a shortcut")
    missing = {(i, j) for j in range(1, 6) for i in range(j)} - set(DESIGN)
    seen = set()
    for index, (name, _) in enumerate(add.customdata):
        pair, action = click_of(add, index)
        assert action == "add" and f"{pair[0]}:{pair[1]}" == name
        assert clicked(DESIGN, (pair, action), weight=0.5) == {**DESIGN, pair: 0.5}
        seen.add(pair)
    assert seen == missing  # every pair the design lacks, once
    assert clicked(DESIGN, ((0, 2), "add"), weight=3.0) == DESIGN  # a pair already there keeps its weight


def test_a_click_on_an_arc_or_its_top_removes_it(figure):
    for name in ("0:2", "1:4"):
        arc = _trace(figure, name)
        pair = tuple(int(k) for k in name.split(":"))
        for index in range(1, len(arc.x) - 1):  # the line, between its ends
            assert click_of(arc, index) == (pair, "remove")
        assert clicked(DESIGN, (pair, "remove")) == {p: w for p, w in DESIGN.items() if p != pair}
    apex = _trace(figure, "shortcuts")
    assert {click_of(apex, k) for k in range(len(apex.x))} == {((0, 2), "remove"), ((1, 4), "remove")}


def test_a_click_on_a_node_a_block_or_an_arcs_end_does_nothing(figure):
    for name in ("states", "blocks", "stem", "colour scale"):
        trace = _trace(figure, name)
        assert all(click_of(trace, k) is None for k in range(len(trace.x)))
    arc = _trace(figure, "0:2")
    assert click_of(arc, 0) is None and click_of(arc, len(arc.x) - 1) is None  # on the nodes x_0 and x_2
    assert click_of(arc, len(arc.x)) is None and click_of(arc, -1) is None
    assert clicked(DESIGN, None) == DESIGN
    net = NetworkWidget("0:4")
    assert net.click(click_of(_trace(net.figure, "states"), 2)) == "0:4" and _arcs(net.figure) == {"0:4"}


def test_the_design_text_round_trips_and_stays_in_step_with_the_figure():
    for text, canonical in [("0:4", "0:4"), ("1:4 , 0:3*0.5", "0:3*0.5,1:4"), ("0:4*1", "0:4"), ("none", "none"),
                            ("", "none"), ("0:2*-1,0:4", "0:2*-1,0:4")]:
        weights = design_weights(text, 5)
        assert (explorer.shortcuts_text(weights) or "none") == canonical
        spec = design_spec(None, weights)
        assert challenge.design_of(spec) == canonical  # the challenge's own spec of that design
    net = NetworkWidget("0:4")
    traces = len(net.figure.data)
    net.text.value = "1:4 , 0:3*0.5"  # typed
    assert net.design == net.text.value == "0:3*0.5,1:4" and _arcs(net.figure) == {"0:3", "1:4"}
    net.weight.value = 2.0
    assert net.click(((0, 3), "add")) == "0:3*0.5,1:4"  # there already: it keeps its weight
    apex = _trace(net.figure, "shortcuts")
    net.click(click_of(apex, [c[0] for c in apex.customdata].index("1:4")))
    assert net.design == net.text.value == "0:3*0.5" and _arcs(net.figure) == {"0:3"}
    add = _trace(net.figure, "add a shortcut")
    net.click(click_of(add, [c[0] for c in add.customdata].index("2:5")))
    assert net.design == net.text.value == "0:3*0.5,2:5*2" and _arcs(net.figure) == {"0:3", "2:5"}
    assert sorted(net.figure.layout.meta["shortcuts"]) == ["0:3", "2:5"]
    assert len(net.figure.data) == traces  # redrawn in place: the same traces
    assert net.spec.topology.params["shortcuts"] == "0:3*0.5,2:5*2"
    net.set_design("none")
    assert net.text.value == "none" and not _arcs(net.figure) and net.spec.topology.name == "none"


def test_a_spec_design_is_edited_in_its_own_net():
    spec = explorer.preset("ancre-fig2c-0:3").with_values({"topology.shortcuts": "0:2*-1,1:4",
                                                           "topology.learnable": True})
    assert design_spec(spec, {}).topology.name == "none"
    wired = design_spec(spec, {(0, 3): 0.5})
    assert wired.topology.params == {"shortcuts": "0:3*0.5", "learnable": True}
    assert wired.model.to_dict() == spec.model.to_dict()
    net = NetworkWidget(spec)
    assert net.design == "0:2*-1,1:4" and net.learned
    net.click(((0, 4), "add"))
    assert net.design == "0:2*-1,0:4,1:4" and net.spec.topology.params["learnable"] is True


@pytest.mark.parametrize("make, field", [
    (lambda: design_weights("0:9", 5), "topology.shortcuts"),
    (lambda: design_weights("0:2,0:2", 5), "topology.shortcuts"),
    (lambda: design_weights(4, 5), "topology.shortcuts"),
    (lambda: NetworkWidget("0:1,0:2,0:3"), "topology.shortcuts"),  # the challenge allows two
    (lambda: NetworkWidget("2:1"), "topology.shortcuts"),
    (lambda: NetworkWidget(4), "design"),
    (lambda: design_spec(explorer.preset("ancre-fig2b-ancre"), {(0, 1): 1.0}), "topology.name"),
    (lambda: NetworkWidget(explorer.preset("ancre-fig2c-0:3").with_values({"model.depth": 20})), "model.depth"),
    (lambda: NetworkWidget(explorer.preset("ancre-fig2b-ancre")).set_design("0:1"), "topology.name"),
])
def test_bad_input_is_one_line_naming_the_field(make, field):
    with pytest.raises(SpecError) as error:
        make()
    assert error.value.path == field and "\n" not in str(error.value)


def test_a_refused_design_changes_nothing_and_says_why():
    net = NetworkWidget("0:3,0:4")
    add = _trace(net.figure, "add a shortcut")
    net.click(click_of(add, [c[0] for c in add.customdata].index("0:1")))  # a third shortcut
    assert net.design == net.text.value == "0:3,0:4" and _arcs(net.figure) == {"0:3", "0:4"}
    assert "topology.shortcuts" in net.message.value and "at most 2" in net.message.value
    net.text.value = "0:7"  # typed, off the net
    assert net.design == "0:3,0:4" and _arcs(net.figure) == {"0:3", "0:4"}
    assert net.message.value.startswith("not drawn: topology.shortcuts") and net.button.disabled
    net.text.value = "0:4"
    assert not net.button.disabled and _arcs(net.figure) == {"0:4"}


def test_train_draws_the_loss_curve_and_the_score():
    net = NetworkWidget("0:4*2")  # reaches the target in a few dozen steps
    run = net.train()
    steps = challenge.score(run)
    assert run is net.run and steps is not None and challenge.design_of(run.spec) == "0:4*2"
    curve = net.loss.data[0]
    assert list(curve.x) == [row["step"] for row in run.history] and curve.y[-1] <= challenge.CHALLENGE.target_loss
    assert net.loss.layout.title.text == f"Training loss of 0:4*2: reached 1e-06 at step {steps}"
    assert net.progress.value == run.steps_done == steps and net.progress.bar_style == "success"
    assert not net.button.disabled


def test_a_learned_topology_redraws_its_arcs_from_the_coefficients_it_learns():
    spec = explorer.preset("ancre-fig2b-ancre").with_values({"train.steps": 40, "train.log_every": 10})
    net = NetworkWidget(spec)
    assert not net.editable and net.learned and net.text.disabled
    before = {t.meta: t.line.width for t in net.figure.data if isinstance(t.meta, str) and t.x}
    assert net.click(((0, 1), "remove")) == "none" and _arcs(net.figure) == set(before)  # clicks edit no design
    run = net.train()
    assert run.status == "finished" and [p["step"] for p in run.probe_history][-1] == 40
    after = {t.meta: t.line.width for t in net.figure.data if isinstance(t.meta, str) and t.x}
    last = explorer.network_figure(run.probe_history[-1]["result"])
    assert after == {t.meta: t.line.width for t in last.data if isinstance(t.meta, str) and t.x} != before
    assert "at step 40" in net.figure.layout.title.text


def test_figures_on_the_same_pairs_have_the_same_traces():
    """network_figure(..., pairs=...): one arc trace per listed pair, empty where the design lacks it, so the widget
    redraws another design in place; a design's own shortcut left out of `pairs` is refused."""
    pairs = [(i, j) for j in range(1, 6) for i in range(j)]
    one = explorer.network_figure(design_spec(None, {(0, 4): 1.0}), pairs=pairs)
    two = explorer.network_figure(design_spec(None, DESIGN), pairs=pairs)
    assert [t.name for t in one.data] == [t.name for t in two.data]
    assert [t.meta for t in one.data if isinstance(t.meta, str)] == [f"{i}:{j}" for i, j in pairs]
    assert _arcs(one) == {"0:4"} and _arcs(two) == {"0:2", "1:4"}
    with pytest.raises(ValueError, match="add 1:4"):
        explorer.network_figure(design_spec(None, DESIGN), pairs=[(0, 2)])
