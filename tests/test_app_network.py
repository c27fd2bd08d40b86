"""The network view on the Train page (AppTest): drawn above the design matrix for a shortcuts design, edited by a
click between two nodes or on an arc (the form, the address bar and the matrix follow; a paused run is rewired),
following the run it trains, and an ended run's replay with a frame per logged step."""

import json

import explorer
from conftest import plain
from explorer_app import network_panel
from test_app_train import SHORTCUTS_TEXT, SIX_BLOCKS, drawn, query_of, spec_of, train_until_done, wait_for

# ANCRe's linear net (3 blocks, learned coefficients), short: its coefficients probed at every logged step
ANCRE = explorer.preset("ancre-fig2b-ancre").with_values({"train.steps": 60, "train.log_every": 5})


def network_chart(at):
    """The clickable network view (its key changes with each click)."""
    return next(c for c in at.get("plotly_chart") if (c.key or "").startswith("network-view"))


def figure(chart) -> dict:
    return json.loads(chart.proto.spec)


def click(at, pair: str, action: str):
    """Select the network view's point whose customdata is [pair, action], as the browser reports a click on it
    (a plotly point selection), and rerun."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    chart = network_chart(at)
    for n, trace in enumerate(figure(chart)["data"]):
        for k, data in enumerate(trace.get("customdata") or []):
            if data == [pair, action]:
                point = {"curve_number": n, "point_number": k, "point_index": k, "customdata": data}
                states = at._tree.get_widget_states()
                states.widgets.append(WidgetState(id=chart.proto.id, string_value=json.dumps(
                    {"selection": {"points": [point], "point_indices": [k], "box": [], "lasso": []}})))
                return at._run(states)
    raise AssertionError(f"the network view has no point [{pair}, {action}]")


def test_the_network_view_draws_the_forms_design_above_the_matrix(open_page):
    at = open_page("train", query=query_of(SIX_BLOCKS))
    assert not at.exception
    keys = [c.key or "" for c in at.get("plotly_chart")]
    network = figure(network_chart(at))
    assert network["layout"]["title"]["text"] == "Network: 0:3"
    assert "click between two nodes" in network["layout"]["title"]["subtitle"]["text"]
    assert network["layout"]["meta"]["shortcuts"] == ["0:3"] and network["layout"]["meta"]["n_blocks"] == 6
    assert len(network["layout"]["meta"]["addable"]) == 6 * 7 // 2 - 1
    matrix = next(k for k in keys if k.startswith("design-matrix"))
    assert keys.index(network_chart(at).key) < keys.index(matrix)  # above it, in the design column


def test_a_click_between_two_nodes_adds_the_shortcut_and_one_on_an_arc_removes_it(open_page):
    at = open_page("train", query=query_of(SIX_BLOCKS))
    click(at, "1:4", "add")
    assert not at.exception
    assert at.text_input(key=SHORTCUTS_TEXT).value == "0:3,1:4"
    assert spec_of(at).to_dict() == SIX_BLOCKS.with_values({"topology.shortcuts": "0:3,1:4"}).to_dict()  # the URL
    assert drawn(at) == {(0, 3), (1, 4)}  # the matrix
    network = figure(network_chart(at))
    assert set(network["layout"]["meta"]["shortcuts"]) == {"0:3", "1:4"}
    assert network["layout"]["title"]["text"] == "Network: 0:3,1:4"
    click(at, "0:3", "remove")  # a point on the arc 0:3
    assert at.text_input(key=SHORTCUTS_TEXT).value == "1:4" == spec_of(at).topology.params["shortcuts"]
    assert drawn(at) == {(1, 4)}
    click(at, "x_2", "")  # a node names no shortcut: nothing changes
    assert at.text_input(key=SHORTCUTS_TEXT).value == "1:4" and not at.exception


def test_a_click_taken_again_adds_its_shortcut_once(open_page):
    """The same click delivered twice (a rerun can deliver an event again) says "add 1:4" both times: the second,
    against a design that has 1:4, changes nothing."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    at = open_page("train", query=query_of(SIX_BLOCKS))
    before = figure(network_chart(at))
    n, k = next((n, k) for n, trace in enumerate(before["data"])
                for k, data in enumerate(trace.get("customdata") or []) if data == ["1:4", "add"])
    event = json.dumps({"selection": {"points": [{"curve_number": n, "point_number": k, "point_index": k,
                                                  "customdata": ["1:4", "add"]}], "point_indices": [k],
                                      "box": [], "lasso": []}})
    for _ in range(2):
        states = at._tree.get_widget_states()
        states.widgets.append(WidgetState(id=network_chart(at).proto.id, string_value=event))
        at = at._run(states)
        assert not at.exception
        assert at.text_input(key=SHORTCUTS_TEXT).value == "0:3,1:4" and drawn(at) == {(0, 3), (1, 4)}


def test_a_click_on_the_network_rewires_a_paused_run(open_page):
    spec = SIX_BLOCKS.with_values({"train.steps": 2000})  # long enough that Pause lands before the end
    at = open_page("train", query=query_of(spec))
    at.button(key="train-start").click().run()
    at.button(key="train-pause").click().run()
    view = wait_for(at, lambda v: v.status == "paused" and v.history)
    assert view.status == "paused", view.status
    held = view.steps_done
    click(at, "0:6", "add")  # paused: the view is the form's design again, clickable
    view = wait_for(at, lambda v: v.rewires or v.rewire_error)
    assert not at.exception and view.rewire_error is None
    assert [(r["step"], r["change"]) for r in view.rewires] == [(held, "+0:6")]
    assert any(f"Rewired at step {held}: +0:6" in plain(i.value) for i in at.info)
    at.button(key="train-stop").click().run()
    view = wait_for(at, lambda v: not v.active)
    record = explorer.RunStore().get(view.run_id)
    assert [(r["step"], r["topology"]["shortcuts"]) for r in record["rewires"]] == [(held, "0:3,0:6")]


def test_an_ancre_run_shows_its_learned_network_and_replays_it_frame_by_frame(open_page):
    at = open_page("train", query=query_of(ANCRE))
    assert any(f"probes every {ANCRE.train.log_every} steps" in plain(c.value) for c in at.caption)  # said before
    initial = next(c for c in at.get("plotly_chart") if c.key == "network-initial")
    assert figure(initial)["layout"]["title"]["text"] == "Network: ancre"  # before it trains: as initialised
    view = train_until_done(at)
    assert view.status == "finished" and not at.exception
    network = figure(next(c for c in at.get("plotly_chart") if c.key == "chart-train-network"))
    assert network["layout"]["title"]["text"].endswith(f"the network at step {ANCRE.train.steps}")
    arcs = [t for t in network["data"] if isinstance(t.get("meta"), str) and t.get("x")]
    assert {t["meta"] for t in arcs} == {f"{i}:{j}" for j in range(1, 4) for i in range(j)}
    # a small net that learns its coefficients: probed at every logged step, so its replay moves at each
    record = explorer.RunStore().get(view.run_id)
    snapshots = [p["step"] for p in record["probes"] if p["name"] == "coefficients"]
    assert snapshots == [row["step"] for row in record["history"]]

    assert not any(c.key == "chart-train-replay" for c in at.get("plotly_chart"))  # built only when opened
    assert any(e.label.startswith("Replay this run") for e in at.expander)
    at.session_state["train-replay-open"] = True
    at.run()
    replay = figure(next(c for c in at.get("plotly_chart") if c.key == "chart-train-replay"))
    assert len(replay["frames"]) == len(record["history"]) == ANCRE.train.steps // ANCRE.train.log_every + 1
    assert [f["name"] for f in replay["frames"]] == [str(row["step"]) for row in record["history"]]
    assert len(replay["layout"]["sliders"][0]["steps"]) == len(replay["frames"])
    assert "loss only" not in replay["layout"]["title"]["text"]


def test_the_coefficients_are_probed_at_every_logged_step_of_a_small_learned_design_at_most_200_times():
    linear = explorer.preset("ancre-fig2b-ancre")  # 2000 steps logged every 10
    assert network_panel.probe_every(linear, 50) == 10
    assert network_panel.probe_every(linear, 5) == 5  # a shorter period asked for is kept
    long = linear.with_values({"train.steps": 100_000})
    every = network_panel.probe_every(long, 100_000)
    assert every % 10 == 0 and long.train.steps // every + 1 <= network_panel.MAX_SNAPSHOTS + 1
    fixed = explorer.preset("ancre-fig2c-0:3")  # shortcuts with fixed weights: nothing to watch move
    assert network_panel.probe_every(fixed, 50) == 50
    assert network_panel.probe_every(fixed.with_values({"topology.learnable": True}), 50) == 10
