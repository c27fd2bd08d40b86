"""The network view and the replay figure (explorer.network_view) on real small runs: the arcs are the design's
shortcuts, their widths follow |coefficient|, their hovers say what each adds and its number, the clickable
markers name the pair they stand for, and a replay has one frame per logged step."""

from __future__ import annotations

import pytest

import explorer
from explorer.network_view import click_meaning, network_figure, replay_figure
from explorer.plots import MAX_TICK_LABELS

DESIGN = "0:2*-1,0:3*0.5,1:4"  # a plain shortcut design on 4 blocks: one negative, one half, one full weight
STEPS, LOG_EVERY = 40, 10


def _spec(preset: str, **values):
    return explorer.preset(preset).with_values({"train.steps": STEPS, "train.log_every": LOG_EVERY, **values})


@pytest.fixture(scope="module")
def ancre_run():
    """ANCRe's linear preset, its coefficients recorded at every logged step."""
    return explorer.train(_spec("ancre-fig2b-ancre"), probes={"coefficients": {}}, probe_every=LOG_EVERY)


@pytest.fixture(scope="module")
def design_spec():
    return _spec("ancre-fig2c-0:3", **{"topology.shortcuts": DESIGN})


def _arcs(fig) -> dict[str, object]:
    """The arc traces by their i:j (each names its shortcut in `meta`); only drawn ones (with points)."""
    return {t.meta: t for t in fig.data if isinstance(t.meta, str) and t.x}


def _by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_arcs_are_the_designs_shortcuts(design_spec, ancre_run):
    fig = network_figure(design_spec)
    pairs = explorer.parse_shortcuts(DESIGN)
    names = {f"{i}:{j}" for i, j in pairs}
    assert set(_arcs(fig)) == names and len(_arcs(fig)) == len(pairs)
    assert set(fig.layout.meta["shortcuts"]) == names and fig.layout.meta["n_blocks"] == 4
    assert {c[0] for c in _by_name(fig, "shortcuts").customdata} == names
    # ANCRe learns a coefficient for every pair i < j of its 3 blocks
    assert set(_arcs(network_figure(ancre_run))) == {f"{i}:{j}" for j in range(1, 4) for i in range(j)}


def test_widths_grow_with_the_absolute_coefficient(design_spec, ancre_run):
    arcs = _arcs(network_figure(design_spec))
    assert arcs["0:2"].line.width == arcs["1:4"].line.width > arcs["0:3"].line.width  # |-1| = |1| > |0.5|
    assert arcs["0:2"].line.color != arcs["1:4"].line.color  # the sign shows in the colour
    result = explorer.probe(ancre_run.model, ancre_run.data.x_val[:8], "coefficients")
    arcs = _arcs(network_figure(result))
    size = [(abs(result["own"][int(name.split(":")[1]), int(name.split(":")[0])]), t.line.width)
            for name, t in arcs.items()]
    widths = [w for _, w in sorted(size)]
    assert widths == sorted(widths) and widths[-1] > widths[0]


def test_hover_names_the_shortcut_and_its_number(design_spec):
    fig = network_figure(design_spec)
    weights = explorer.parse_shortcuts(DESIGN)
    for (i, j), w in weights.items():
        hover = _arcs(fig)[f"{i}:{j}"].hovertemplate
        sentence = explorer.describe_shortcut(i, j, 4)
        assert f"<b>{i}:{j}</b>" in hover and sentence[len(f"{i}:{j}"):] in hover
        assert f"a({i},{j}) = {w:.3g}" in hover
    apex = _by_name(fig, "shortcuts")
    assert all(f"<b>{c[0]}</b>" in h for c, h in zip(apex.customdata, apex.hovertext))


def test_clickable_markers_carry_the_pair(design_spec):
    fig = network_figure(design_spec)
    design = {f"{i}:{j}" for i, j in explorer.parse_shortcuts(DESIGN)}
    add = _by_name(fig, "add a shortcut")
    pairs = [tuple(int(k) for k in c[0].split(":")) for c in add.customdata]
    assert {f"{i}:{j}" for i, j in pairs} == {f"{i}:{j}" for j in range(1, 5) for i in range(j)} - design
    assert all(c[1] == "add" for c in add.customdata)
    assert list(add.x) == [(i + j) / 2 for i, j in pairs]  # midway between x_i and x_j
    points = list(zip(add.x, add.y)) + list(zip(_by_name(fig, "shortcuts").x, _by_name(fig, "shortcuts").y))
    assert len(set(points)) == len(points) == 10  # one place per pair: a click names one shortcut
    assert set(fig.layout.meta["addable"]) == {c[0] for c in add.customdata}
    for name, arc in _arcs(fig).items():
        assert {tuple(c) for c in arc.customdata} == {(name, "remove")}


def test_replay_has_a_frame_per_logged_step_and_the_arcs_move(ancre_run):
    fig = replay_figure(ancre_run)
    assert len(ancre_run.history) == STEPS // LOG_EVERY + 1
    assert len(fig.frames) == len(ancre_run.history) == len(fig.layout.sliders[0].steps)
    assert [f.name for f in fig.frames] == [str(row["step"]) for row in ancre_run.history]
    assert "loss only" not in fig.layout.title.text
    arc_index = [k for k, t in enumerate(fig.data) if isinstance(t.meta, str)]

    def arcs(frame):
        return {k: (d.line.width, d.hovertemplate) for k, d in zip(frame.traces, frame.data) if k in arc_index}

    first, last = arcs(fig.frames[0]), arcs(fig.frames[-1])
    assert set(first) == set(last) == set(arc_index) and first != last
    assert last == {k: (fig.data[k].line.width, fig.data[k].hovertemplate) for k in arc_index}  # drawn: the end
    loss = next(t for t in fig.data if t.name == "ancre")
    shown = [len(d.x) for f in fig.frames for k, d in zip(f.traces, f.data) if fig.data[k] is loss]
    assert shown == list(range(1, len(ancre_run.history) + 1))  # the curve grows a point a step
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert any("pause" in label for label in labels) and {"▶ 0.5x", "▶ 1x", "▶ 4x"} <= set(labels)
    speeds = {b.label: b.args[1]["frame"]["duration"] for b in fig.layout.updatemenus[0].buttons if "x" in b.label}
    assert speeds["▶ 0.5x"] > speeds["▶ 1x"] > speeds["▶ 4x"]


def test_replay_of_a_stored_record_matches_the_run(ancre_run):
    record = {"history": ancre_run.history, "probes": ancre_run.probe_history, "label": "ancre"}
    fig, same = replay_figure(record), replay_figure(ancre_run)
    assert len(fig.frames) == len(same.frames)
    assert [d.line.width for d in fig.frames[-1].data if d.line.width] == \
           [d.line.width for d in same.frames[-1].data if d.line.width]


def test_a_run_without_coefficients_replays_the_loss_only(design_spec):
    run = explorer.train(design_spec)
    fig = replay_figure(run)
    assert "loss only" in fig.layout.title.text
    assert len(fig.frames) == len(run.history)
    assert not _arcs(fig) and all(t.name not in ("shortcuts", "blocks") for t in fig.data)
    assert [len(f.data[0].x) for f in fig.frames][:2] == [1, 2]


def test_a_deep_net_stays_legible():
    deep = explorer.preset("ancre-fig2c-0:3").with_values({"model.depth": 64, "topology.shortcuts": "0:8,8:64,5:6"})
    fig = network_figure(deep)
    labels = [t for t in _by_name(fig, "states").text if t]
    assert len(labels) <= MAX_TICK_LABELS + 1 and labels[0] == "x₀" and labels[-1] == "x₆₄"
    widest_deep = max(t.line.width for t in _arcs(fig).values())
    widest = max(t.line.width for t in _arcs(network_figure(explorer.preset("ancre-fig2c-0:3"))).values())
    assert widest_deep < widest
    assert set(_arcs(fig)) == {"0:8", "8:64", "5:6"}


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="source"):
        network_figure("0:2")
    with pytest.raises(ValueError, match="run_or_history"):
        replay_figure({"history": []})


def test_a_points_customdata_says_what_a_click_on_it_does():
    assert click_meaning(["0:3", "add"], 5) == ((0, 3), "add")
    assert click_meaning(("1:4", "remove")) == ((1, 4), "remove")
    assert click_meaning(["x_2", ""]) is None  # a node
    assert click_meaning(["0:9", "add"], 5) is None  # no such pair on a net of 5 blocks
    assert click_meaning(["0:1,0:2", "add"]) is None and click_meaning("0:3") is None
