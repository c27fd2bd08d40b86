"""The Compare page (AppTest): launching a grid that fills in, refusing bad grids, overlaying stored runs."""

import json
import time
import urllib.parse

import numpy as np
import pytest

import explorer
from explorer import plots
from conftest import plain, plotly_array

FAST_PRESET = "idinit-fig5-idiz"  # digits, a 4-layer MLP: about a second for 20 steps


def charts(at) -> dict[str, dict]:
    """Every plotly chart on the page by its title."""
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return {spec["layout"]["title"]["text"]: spec for spec in specs}


def solid_lines(chart: dict) -> dict[str, dict]:
    """The loss (not validation) line of each run, by its legend name."""
    return {trace["name"]: trace for trace in chart["data"]
            if trace.get("mode") in ("lines", "lines+markers") and "dash" not in trace.get("line", {})}


def lower_triangle(matrix) -> np.ndarray:
    z = plotly_array(matrix)
    return z[np.tril_indices(len(z))]


def set_up_grid(at, topologies: list[str], steps: int = 20):
    at.selectbox(key="compare-preset").set_value(FAST_PRESET).run()
    at.multiselect(key="compare-topologies").set_value(topologies)
    at.number_input(key=f"compare-steps:{FAST_PRESET}").set_value(steps)
    return at.run()


def wait_for_grid(at, timeout: float = 300.0):
    deadline = time.time() + timeout
    while any(job.view().active for job in at.session_state["compare-grid"]["jobs"]):
        assert time.time() < deadline, "the grid did not finish in time"
        time.sleep(0.3)
    return at.run()


def test_an_empty_store_shows_what_to_do(open_page):
    at = open_page("compare")
    assert not at.exception
    assert any("has not started any runs" in info.value for info in at.info)
    assert not at.get("plotly_chart")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception
    assert any("run store is empty" in info.value for info in at.info)


def test_a_grid_queues_beyond_the_limit_trains_and_fills_the_comparison(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "1")
    at = set_up_grid(open_page("compare"), ["cascaded", "none"])
    assert at.button(key="compare-launch").label == "Launch 2 runs"
    at.button(key="compare-launch").click().run()
    assert not at.exception
    assert any("wait for a training slot" in info.value for info in at.info)  # one trains, one waits

    at = wait_for_grid(at)
    assert not at.exception
    stored = {record["label"]: explorer.RunStore().get(record["id"]) for record in explorer.RunStore().list()}
    assert sorted(stored) == ["grid 1: cascaded seed 0", "grid 1: none seed 0"]
    for label, record in stored.items():
        assert record["status"] == "finished" and record["steps_done"] == 20
        assert record["spec"]["topology"]["name"] == label.split()[2]
    assert at.get("progress")[0].proto.value == 100

    shown = charts(at)
    for title in ("Grid 1: training loss", "Compare: training loss"):
        lines = solid_lines(shown[title])
        assert sorted(lines) == sorted(stored)
        for label, trace in lines.items():
            assert trace["y"] == [row["loss"] for row in stored[label]["history"]]
    # cascaded and none learn nothing: the default basis is unrolled; the title is "label<br><sub>basis, step N</sub>"
    heatmaps = {title.split("<br>")[0]: chart for title, chart in shown.items() if "<sub>unrolled, step" in title}
    assert sorted(heatmaps) == sorted(stored)
    for label, chart in heatmaps.items():
        recorded = [p for p in stored[label]["probes"] if p["name"] == "coefficients"][-1]["result"]["unrolled"]
        np.testing.assert_allclose(lower_triangle(chart["data"][0]["z"]), lower_triangle(recorded))
    spectra = [chart for title, chart in shown.items() if title.startswith("Input-output Jacobian spectra")][0]
    # one line per run; numerical zeros (a plain net's round-off) are drawn on a floor by a second trace
    lines = [trace for trace in spectra["data"] if not trace["name"].endswith(": numerical zeros")]
    assert sorted(trace["name"] for trace in lines) == sorted(stored)
    floors = {trace["name"].split(": numerical zeros")[0]: trace for trace in spectra["data"]
              if trace["name"].endswith(": numerical zeros")}
    for trace in lines:
        recorded = [p for p in stored[trace["name"]]["probes"] if p["name"] == "jacobian"][-1]["result"]
        sv, y = recorded["singular_values"][0], plotly_array(trace["y"])
        np.testing.assert_allclose(y[np.isfinite(y)], sv[np.isfinite(y)])
        if not np.isfinite(y).all():  # the rest are on the floor, their true values on hover
            np.testing.assert_allclose(plotly_array(floors[trace["name"]]["customdata"]), sv[~np.isfinite(y)])

    other = open_page("compare")  # another browser session: its own (empty) list of runs
    assert any("has not started any runs" in info.value for info in other.info)


def test_a_grid_above_the_cap_or_with_an_invalid_value_is_refused(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_SESSION", "12")  # the grid's own cap (a session's is tested elsewhere)
    at = set_up_grid(open_page("compare"), ["cascaded", "none", "tau", "shortcuts", "ancre"])
    at.number_input(key="compare-seeds").set_value(3).run()
    assert not at.exception
    assert any("15 runs" in error.value and "at most 12" in error.value for error in at.error)
    assert at.button(key="compare-launch").disabled

    at.number_input(key="compare-seeds").set_value(1)
    at.multiselect(key="compare-topologies").set_value(["cascaded", "dca"]).run()
    assert not at.exception
    assert any("topology.name" in plain(error.value) and "Transformers" in error.value for error in at.error)
    assert at.button(key="compare-launch").disabled

    at.radio(key="compare-axes").set_value("depth x tau").run()
    at.multiselect(key="compare-depths").set_value(["4", "abc"]).run()
    assert not at.exception
    assert any("model.depth" in plain(error.value) for error in at.error)
    assert at.button(key="compare-launch").disabled

    at.multiselect(key="compare-depths").set_value(["4", "6"]).run()
    assert not at.error
    assert at.button(key="compare-launch").label == "Launch 6 runs"  # 2 depths x the 3 tau rules
    assert not at.button(key="compare-launch").disabled
    assert explorer.RunStore().list() == []


def test_overlaying_stored_runs_draws_each_and_marks_divergence(open_page):
    fast = explorer.preset(FAST_PRESET).with_values({"train.steps": 10})
    diverging = explorer.preset("tau-fig1-1/L").with_values({"topology.name": "cascaded", "train.steps": 20})
    runs = {
        "a": explorer.train(fast, callbacks=[explorer.StoreRecorder(label="a")]),
        "b": explorer.train(fast.with_values({"topology.name": "none"}), callbacks=[explorer.StoreRecorder(label="b")]),
        "c": explorer.train(diverging, callbacks=[explorer.StoreRecorder(label="c")]),
    }
    assert runs["c"].status == "diverged"
    stored = {record["label"]: explorer.RunStore().get(record["id"]) for record in explorer.RunStore().list()}

    at = open_page("compare")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception
    assert sorted(at.multiselect(key="compare-runs").value) == sorted(record["id"] for record in stored.values())

    shown = charts(at)
    lines = solid_lines(shown["Compare: training loss"])
    diverged_at = stored["c"]["diverged_at"]
    assert sorted(lines) == ["a", "b", f"c (diverged at step {diverged_at})"]
    assert lines["a"]["y"] == [row["loss"] for row in stored["a"]["history"]]
    assert any(f"**c** at step {diverged_at}" in info.value for info in at.info)
    assert not at.error

    # no probes were recorded: the heatmaps and spectra come from each run's checkpoint
    heatmaps = [title for title in shown if "<sub>unrolled, step" in title]
    assert sorted(heatmaps) == ["a<br><sub>unrolled, step 10</sub>", "b<br><sub>unrolled, step 10</sub>",
                                f"c<br><sub>unrolled, step {stored['c']['steps_done']}</sub>"]  # where it stopped
    spectra = [chart for title, chart in shown.items() if title.startswith("Input-output Jacobian spectra")][0]
    by_label = {trace["name"]: plotly_array(trace["y"]) for trace in spectra["data"]
                if not trace["name"].endswith(": numerical zeros")}  # those sit on a floor, drawn apart
    assert sorted(by_label) == ["a", "b"]  # c's weights are not finite after diverging: said, not drawn
    assert any("No Jacobian spectrum for c:" in plain(caption.value) for caption in at.caption)
    for label in ("a", "b"):
        run = runs[label]
        expected = explorer.probe(run.model, run.data.x_val[:8], "jacobian", max_inputs=1)["singular_values"][0]
        shown = np.isfinite(by_label[label])
        assert shown.sum() > 0
        np.testing.assert_allclose(by_label[label][shown], expected[shown], rtol=1e-6)


def test_the_grid_starts_from_the_train_pages_set_up(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 7, "train.steps": 40})
    at = open_page("train", query=dict(urllib.parse.parse_qsl(spec.to_query())))
    at.switch_page("views/compare.py").run()
    assert not at.exception
    assert at.radio(key="compare-base").value == "the Train page's set-up"
    assert any("mlp-resnet depth 7" in caption.value and "40 steps" in caption.value for caption in at.caption)
    at.radio(key="compare-axes").set_value("depth x tau").run()
    assert at.multiselect(key="compare-depths").value == ["7"]
    assert at.button(key="compare-launch").label == "Launch 3 runs"  # depth 7 x the 3 tau rules


def test_smoothing_axis_scales_and_the_runs_table_select_what_is_overlaid(open_page):
    fast = explorer.preset(FAST_PRESET).with_values({"train.steps": 20, "train.log_every": 2})
    for label, values in (("a", {}), ("b", {"topology.name": "none"}), ("c", {"optim.lr": 0.05})):
        explorer.train(fast.with_values(values), callbacks=[explorer.StoreRecorder(label=label)])
    stored = {record["label"]: record for record in explorer.RunStore().list()}
    at = open_page("compare")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception

    # the runs table: every listed run with its spec values and final metrics
    table = at.dataframe[0].value
    assert sorted(table["run"]) == ["a", "b", "c"]
    row = table.set_index("run").loc["c"]
    assert row["lr"] == pytest.approx(0.05) and row["topology"] == fast.topology.name
    assert row["loss"] == pytest.approx(stored["c"]["final"]["loss"])

    # smoothing: the EMA over a faint raw curve
    at.slider(key="compare-smoothing").set_value(0.6).run()
    assert not at.exception
    fig = charts(at)["Compare: training loss"]
    raw = next(t for t in fig["data"] if t["name"] == "a (raw)")
    smooth = next(t for t in fig["data"] if t["name"] == "a")
    np.testing.assert_allclose(plotly_array(smooth["y"]), plots.ema(plotly_array(raw["y"]), 0.6))

    # log / linear axes
    assert fig["layout"]["yaxis"]["type"] == "log"
    at.radio(key="compare-y-scale").set_value("linear").run()
    at.radio(key="compare-x-scale").set_value("linear").run()
    layout = charts(at)["Compare: training loss"]["layout"]
    assert layout["yaxis"]["type"] == "linear" and layout["xaxis"]["type"] == "linear"

    # the ids the table's selection callback maps rows to are the table's rows, in order (AppTest cannot tick
    # a dataframe row: the selection itself is pressed in the browser test)
    ids = at.session_state["compare-table-ids"]
    assert [run_id[:8] for run_id in ids] == list(at.dataframe[0].value["id"])


def test_every_registered_topology_is_offered_and_a_plug_in_one_trains_in_a_grid(open_page):
    """The grid's topologies are the registry's, so a topology added in its own file (Highway) is offered and
    trains here with no edit to the page."""
    at = open_page("compare")
    assert list(at.multiselect(key="compare-topologies").options) == list(explorer.registry("topologies"))
    at = set_up_grid(at, ["highway"])
    at.button(key="compare-launch").click().run()
    at = wait_for_grid(at)
    assert not at.exception
    (record,) = [explorer.RunStore().get(run["id"]) for run in explorer.RunStore().list()]
    assert record["spec"]["topology"]["name"] == "highway"
    assert record["status"] == "finished" and record["steps_done"] == 20


def test_a_diverged_tau_run_is_explained_on_compare(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 20})
    run = explorer.train(spec, callbacks=[explorer.StoreRecorder(label="deep tau")])
    assert run.status == "diverged"
    growth = explorer.diagnose(spec).quantity("stream growth ||h_n|| / ||h_0|| at init")
    at = open_page("compare")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception
    line = next(plain(c.value) for c in at.caption if plain(c.value).startswith("**deep tau**:"))
    assert "Theorem 4" in line and "Sec. 3.3" in line and growth.measured in line and "1/sqrt(L) = 0.18" in line


def test_the_runs_table_shows_missing_values_as_a_dash_and_numbers_at_a_fixed_precision(open_page):
    """A run that did not diverge has no "diverged at" and a regression run no validation accuracy: those cells
    read "-", not "None"; the metric columns carry a fixed number format (so 0.05719... reads 0.05719)."""
    fast = explorer.preset(FAST_PRESET).with_values({"train.steps": 10, "train.log_every": 5})
    explorer.train(fast, callbacks=[explorer.StoreRecorder(label="finished")])
    at = open_page("compare")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception
    table = at.dataframe[0]
    row = table.value.set_index("run").loc["finished"]
    assert row["diverged at"] is None or row["diverged at"] != row["diverged at"]  # missing: what "-" stands for
    assert table.proto.placeholder == "-"
    formats = {name: json.loads(table.proto.columns)[name].get("type_config", {}).get("format")
               for name in ("lr", "loss", "val loss", "val accuracy", "steps", "diverged at")}
    assert formats == {"lr": "%.3g", "loss": "%.4g", "val loss": "%.4g", "val accuracy": "%.3f", "steps": "%d",
                       "diverged at": "%d"}


DESIGN_BASE = "ancre-fig2c-0:3"  # a 4-block linear net on the shortcuts topology


def test_a_designs_grid_expands_to_one_run_per_design_and_seed(open_page, monkeypatch):
    """Typed designs (any spelling) and a preset's design become grid points on the base's shortcuts topology,
    each labelled by its canonical text; the grid trains and fills a heatmap with one value per design and seed."""
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_SESSION", "6")
    at = open_page("compare")
    at.selectbox(key="compare-preset").set_value(DESIGN_BASE).run()
    at.radio(key="compare-axes").set_value("designs x seeds").run()
    at.text_area(key="compare-designs").set_value("0:1; 1:4 , 0:3")
    at.multiselect(key="compare-design-presets").set_value(["ancre-fig2b-0:2"])
    at.number_input(key="compare-seeds").set_value(2)
    at.number_input(key=f"compare-steps:{DESIGN_BASE}").set_value(15).run()
    assert not at.exception and not at.error
    assert at.button(key="compare-launch").label == "Launch 6 runs"
    at.button(key="compare-launch").click().run()
    at = wait_for_grid(at)
    assert not at.exception
    base = explorer.preset(DESIGN_BASE)
    stored = {record["label"]: explorer.RunStore().get(record["id"]) for record in explorer.RunStore().list()}
    designs = {"0:1": "0:1", "0:3+1:4": "0:3,1:4", "0:2": "0:2"}
    assert sorted(stored) == sorted(f"grid 1: {label} seed {seed}" for label in designs for seed in (0, 1))
    for label, record in stored.items():
        design, seed = label.split()[2], int(label.split()[-1])
        expected = base.with_values({"topology.shortcuts": designs[design], "train.seed": seed, "train.steps": 15})
        assert explorer.ExperimentSpec.from_dict(record["spec"]) == expected
        assert record["status"] == "finished"

    heatmap = charts(at)["Grid 1: final loss per cell"]["data"][0]
    assert heatmap["y"] == ["0:1", "0:3+1:4", "0:2"] and heatmap["x"] == ["seed 0", "seed 1"]
    shown = 10 ** plotly_array(heatmap["z"])  # a loss is coloured on a log scale
    for i, design in enumerate(heatmap["y"]):
        for j in (0, 1):
            final = stored[f"grid 1: {design} seed {j}"]["final"]["loss"]
            np.testing.assert_allclose(shown[i, j], final, rtol=1e-6)
            assert heatmap["text"][i][j] == f"{final:.3g}"
    (cells,) = [table.value for table in at.dataframe if "topology.shortcuts" in table.value.columns]
    assert len(cells) == 6 and sorted(set(cells["topology.shortcuts"])) == ["0:1", "0:2", "0:3+1:4"]

    at.radio(key="compare-grid-seeds").set_value("seed mean").run()
    mean = charts(at)["Grid 1: final loss per cell"]["data"][0]
    assert mean["x"] == ["seed mean"]
    for i, design in enumerate(mean["y"]):
        losses = [stored[f"grid 1: {design} seed {j}"]["final"]["loss"] for j in (0, 1)]
        np.testing.assert_allclose(10 ** plotly_array(mean["z"])[i, 0], np.mean(losses), rtol=1e-6)


def test_a_designs_grid_refuses_repeats_and_designs_past_the_last_block(open_page):
    at = open_page("compare")
    at.selectbox(key="compare-preset").set_value(DESIGN_BASE).run()
    at.radio(key="compare-axes").set_value("designs x seeds").run()
    for typed, words in (("0:2\n0:3,1:4\n1:4 0:3", "0:3+1:4 is listed twice"),
                         ("0:2; 0:5", "design '0:5': shortcut 0:5 ends at layer 5 but the model has 4 blocks"),
                         ("0:2; 0:3,0:3", "shortcut 0:3 is listed twice"),
                         ("0:2; zero", "design 'zero'")):
        at.text_area(key="compare-designs").set_value(typed).run()
        assert not at.exception
        (error,) = at.error
        assert plain(error.value).count("\n") == 0
        assert "topology.shortcuts" in plain(error.value) and words in plain(error.value)
        assert at.button(key="compare-launch").disabled
    at.text_area(key="compare-designs").set_value("0:2").run()
    at.multiselect(key="compare-design-presets").set_value(["ancre-fig2b-0:2"]).run()  # the same design again
    assert any("0:2 is listed twice" in plain(error.value) for error in at.error)
    assert explorer.RunStore().list() == []


def test_a_designs_text_past_the_length_cap_is_one_line_naming_the_box(open_page):
    """A pasted wall of text is refused before it is split: one message naming the box, nothing to launch."""
    at = open_page("compare")
    at.selectbox(key="compare-preset").set_value(DESIGN_BASE).run()
    at.radio(key="compare-axes").set_value("designs x seeds").run()
    at.text_area(key="compare-designs").set_value("0:1*1111111111," * 400 + "x").run()
    assert not at.exception
    (error,) = at.error
    assert "Designs" in plain(error.value) and "at most" in plain(error.value)
    assert "unexpected error" not in plain(error.value)
    assert at.button(key="compare-launch").disabled


def test_the_train_pages_design_is_offered_to_a_designs_grid(open_page):
    spec = explorer.preset(DESIGN_BASE).with_values({"topology.shortcuts": "1:4,0:2"})
    at = open_page("train", query=dict(urllib.parse.parse_qsl(spec.to_query())))
    at.switch_page("views/compare.py").run()
    at.radio(key="compare-axes").set_value("designs x seeds").run()
    assert "the Train page's design: 0:2+1:4" in at.multiselect(key="compare-design-presets").options
    at.multiselect(key="compare-design-presets").set_value(["the Train page's design"])
    at.text_area(key="compare-designs").set_value("0:1").run()
    assert not at.exception and not at.error
    assert at.button(key="compare-launch").label == "Launch 2 runs"


def test_an_any_field_grid_validates_each_axis_with_the_fields_own_message(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_SESSION", "12")
    at = set_up_grid(open_page("compare"), ["cascaded"], steps=10)
    at.radio(key="compare-axes").set_value("any field x any field").run()
    assert not at.exception
    assert "train.seed" not in at.selectbox(key="compare-field-0").options  # the seeds are the grid's own axis
    at.selectbox(key="compare-field-0").set_value("optim.lr").run()
    assert "optim.lr" not in at.selectbox(key="compare-field-1").options  # two different fields
    at.selectbox(key="compare-field-1").set_value("init.name").run()
    at.text_input(key="compare-values-0:optim.lr").set_value("0.01, fast")
    at.text_input(key="compare-values-1:init.name").set_value("default").run()
    assert not at.exception
    (error,) = at.error
    expected = None
    try:
        explorer.preset(FAST_PRESET).with_values({"optim.lr": "fast"})
    except explorer.SpecError as refused:
        expected = refused.message
    assert "optim.lr" in plain(error.value) and expected and expected in plain(error.value)
    assert at.button(key="compare-launch").disabled

    at.text_input(key="compare-values-0:optim.lr").set_value("0.01, 0.010").run()
    assert any("optim.lr" in plain(e.value) and "listed twice" in plain(e.value) for e in at.error)
    at.text_input(key="compare-values-1:init.name").set_value("default, bogus").run()
    at.text_input(key="compare-values-0:optim.lr").set_value("0.01, 0.05").run()
    assert any("init.name" in plain(e.value) and "bogus" in plain(e.value) for e in at.error)

    at.text_input(key="compare-values-1:init.name").set_value("default, orthogonal")
    at.number_input(key="compare-seeds").set_value(4).run()
    assert any("16 runs" in e.value and "at most 12" in e.value for e in at.error)  # capped before anything queues
    at.number_input(key="compare-seeds").set_value(1).run()
    assert not at.error
    assert at.button(key="compare-launch").label == "Launch 4 runs"
    at.button(key="compare-launch").click().run()
    at = wait_for_grid(at)
    assert not at.exception
    stored = [explorer.RunStore().get(record["id"]) for record in explorer.RunStore().list()]
    assert sorted((r["spec"]["optim"]["lr"], r["spec"]["init"]["name"]) for r in stored) == \
        [(0.01, "default"), (0.01, "orthogonal"), (0.05, "default"), (0.05, "orthogonal")]
    heatmap = charts(at)["Grid 1: final loss per cell"]["data"][0]
    assert heatmap["y"] == ["0.01", "0.05"] and heatmap["x"] == ["default", "orthogonal"]
    by_cell = {(r["spec"]["optim"]["lr"], r["spec"]["init"]["name"]): r["final"]["loss"] for r in stored}
    np.testing.assert_allclose(10 ** plotly_array(heatmap["z"]),
                               [[by_cell[(lr, init)] for init in ("default", "orthogonal")] for lr in (0.01, 0.05)],
                               rtol=1e-6)


def test_the_grids_choices_come_back_after_another_page(open_page):
    """Streamlit drops a widget's value while another page shows: the page keeps its choices and puts them back."""
    at = set_up_grid(open_page("compare"), ["cascaded", "none"], steps=15)
    at.number_input(key="compare-seeds").set_value(2).run()
    at.radio(key="compare-axes").set_value("any field x any field").run()
    at.selectbox(key="compare-field-0").set_value("optim.lr").run()
    at.text_input(key="compare-values-0:optim.lr").set_value("0.01, 0.05").run()
    field_1 = at.selectbox(key="compare-field-1").value
    launch = at.button(key="compare-launch").label
    at.switch_page("views/theory.py").run()
    at.switch_page("views/compare.py").run()
    assert not at.exception
    assert at.selectbox(key="compare-preset").value == FAST_PRESET
    assert at.radio(key="compare-axes").value == "any field x any field"
    assert at.selectbox(key="compare-field-0").value == "optim.lr"
    assert at.selectbox(key="compare-field-1").value == field_1
    assert at.text_input(key="compare-values-0:optim.lr").value == "0.01, 0.05"
    assert at.number_input(key="compare-seeds").value == 2
    assert at.number_input(key=f"compare-steps:{FAST_PRESET}").value == 15
    assert at.button(key="compare-launch").label == launch
    at.radio(key="compare-axes").set_value("topologies x seeds").run()  # an axis not drawn since: kept as well
    assert at.multiselect(key="compare-topologies").value == ["cascaded", "none"]


def test_a_3x3_grid_past_the_session_cap_is_refused_in_one_sentence_with_the_limit_and_the_fix(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS_PER_SESSION", "4")  # the default: a 3x3 grid is past it
    at = open_page("compare")
    at.selectbox(key="compare-preset").set_value("tau-fig1-1/sqrt(L)").run()
    at.radio(key="compare-axes").set_value("depth x tau").run()
    at.multiselect(key="compare-depths").set_value(["2", "4", "8"])
    at.multiselect(key="compare-taus").set_value(["1/L", "1/sqrt(L)", "1/L^0.25"]).run()
    assert not at.exception
    (error,) = at.error
    assert plain(error.value) == ("This grid has 9 runs (3 x 3), but this server lets one session queue at most 4 "
                                  "runs (EXPLORER_MAX_JOBS_PER_SESSION): remove values from an axis or lower Seeds.")
    assert at.button(key="compare-launch").disabled


def test_a_diverged_run_is_described_one_way_wherever_compare_lists_it(open_page):
    """Logged every 10 steps, a run that diverged at step 3 has logged step 10: every place says "diverged at
    step 3 of 10", none "10 steps"."""
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 10,
                                                             "train.log_every": 10})
    run = explorer.train(spec, callbacks=[explorer.StoreRecorder(label="tau deep")])
    assert run.status == "diverged" and run.steps_done == 10 and run.diverged_at < 10
    at = open_page("compare")
    at.toggle(key="compare-all-runs").set_value(True).run()
    assert not at.exception
    said = f"diverged at step {run.diverged_at} of 10"
    (option,) = at.multiselect(key="compare-runs").options
    assert said in option and "10 steps" not in option, option
    row = at.dataframe[0].value.set_index("run").loc["tau deep"]
    assert row["status"] == said and row["steps"] == run.diverged_at == row["diverged at"]
    assert any(f"at step {run.diverged_at} of 10" in plain(i.value) for i in at.info if "Diverged" in i.value)
