"""The Train page (AppTest): form <-> spec <-> URL, training a run live, refusals and divergence."""

import json
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

import explorer
from conftest import plain, plotly_array

ROOT = Path(__file__).resolve().parents[1]
FAST = {"train.steps": 30, "train.log_every": 5, "model.depth": 6}


def query_of(spec) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(spec.to_query()))


def spec_of(at) -> explorer.ExperimentSpec:
    """The spec the page wrote to its URL."""
    return explorer.ExperimentSpec.from_query({key: at.query_params[key] for key in at.query_params})


def train_until_done(at, timeout: float = 300.0):
    at.button(key="train-start").click().run()
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = at.session_state["train-job"]
        if not job.view().active:
            break
        time.sleep(0.3)
    at.run()
    return at.session_state["train-job"].view()


def charts(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def test_widgets_write_the_spec_to_the_url(open_page):
    at = open_page("train")
    assert not at.exception
    at.selectbox(key="spec:model.name").set_value("mlp-resnet").run()
    at.number_input(key="spec:model.mlp-resnet.depth").set_value(12).run()
    at.selectbox(key="spec:topology.name").set_value("tau").run()
    at.selectbox(key="spec:topology.tau.value:mode").set_value("1/L").run()
    at.number_input(key="spec:optim.adam.lr").set_value(0.01).run()
    expected = explorer.ExperimentSpec.default().with_values(
        {"model.name": "mlp-resnet", "model.depth": 12, "topology.name": "tau", "topology.value": "1/L", "optim.lr": 0.01})
    assert not at.exception
    assert spec_of(at).to_dict() == expected.to_dict()


def test_a_shared_url_sets_up_the_same_experiment(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 17, "train.seed": 3})
    at = open_page("train", query=query_of(spec))
    assert not at.exception
    assert at.selectbox(key="spec:model.name").value == "mlp-resnet"
    assert at.number_input(key="spec:model.mlp-resnet.depth").value == 17
    assert at.selectbox(key="spec:topology.tau.value:mode").value == "1/L^0.25"
    assert at.number_input(key="spec:train.-.seed").value == 3
    assert spec_of(at).to_dict() == spec.to_dict()


def test_choosing_a_preset_fills_the_form_at_once_and_says_which(open_page):
    """No second click: what the form holds (and Train trains) is the chosen preset, and the sidebar says so,
    until the form is edited."""
    at = open_page("train")
    name = "tau-fig1-1/L^0.25"
    at.selectbox(key="train-preset").set_value(name).run()
    assert not at.exception, at.exception
    assert spec_of(at).to_dict() == explorer.preset(name).to_dict()
    assert at.selectbox(key="spec:topology.tau.value:mode").value == "1/L^0.25"
    assert at.selectbox(key="train-preset").value == "(keep the form)"
    assert any(f"Started from the preset {name}." in plain(c.value) for c in at.caption)
    at.number_input(key="spec:train.-.seed").set_value(7).run()
    assert any(f"Started from the preset {name}, then edited." in plain(c.value) for c in at.caption)


def test_a_preset_link_loads_the_preset(open_page):
    at = open_page("train", query={"preset": "ancre-fig2c-ancre"})
    assert spec_of(at).to_dict() == explorer.preset("ancre-fig2c-ancre").to_dict()
    assert at.selectbox(key="spec:topology.name").value == "ancre"
    assert any("Started from the preset ancre-fig2c-ancre." in plain(c.value) for c in at.caption)


def test_a_preset_link_applies_the_fields_it_also_names(open_page):
    """?preset=NAME&field=value&...: the preset, with those fields changed (none is dropped)."""
    query = {"preset": "ancre-fig2c-ancre", "train.steps": "321", "topology.temperature": "0.5", "train.seed": "4"}
    at = open_page("train", query=query)
    assert not at.exception and not at.error
    expected = explorer.preset("ancre-fig2c-ancre").with_values(
        {"train.steps": 321, "topology.temperature": 0.5, "train.seed": 4})
    assert spec_of(at).to_dict() == expected.to_dict() != explorer.preset("ancre-fig2c-ancre").to_dict()
    assert any("Started from the preset ancre-fig2c-ancre, then edited." in plain(c.value) for c in at.caption)
    bad = open_page("train", query={"preset": "ancre-fig2c-ancre", "train.steps": "-3"})
    assert any("train.steps" in plain(e.value) for e in bad.error)  # a bad field is named, not dropped


def test_an_invalid_link_says_so_and_keeps_a_valid_form(open_page):
    at = open_page("train", query={"model.depth": "0"})
    assert not at.exception
    assert any("model.depth" in plain(e.value) and "not valid" in plain(e.value) for e in at.error)
    assert not at.button(key="train-start").disabled


def test_train_produces_a_stored_run_with_loss_chart_and_heatmap(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values(FAST)
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    assert not at.exception
    assert view.status == "finished" and view.steps_done == 30
    titles = [c["layout"]["title"]["text"] for c in charts(at)]
    assert any("loss" in t for t in titles), titles
    assert any("Shortcut coefficients" in t for t in titles), titles
    loss = next(c for c in charts(at) if "loss" in c["layout"]["title"]["text"])
    assert loss["data"][0]["customdata"] == [row["step"] for row in view.history]
    record = explorer.RunStore().get(view.run_id)
    assert record["status"] == "finished"
    assert [row["step"] for row in record["history"]] == [row["step"] for row in view.history]
    assert {row["name"] for row in record["probes"]} == {"coefficients", "norms"}  # the default live probe
    assert "Finished 30 steps" in at.success[0].value
    assert {"Spec (JSON)", "Run (JSON)", "History (CSV)"} <= {b.proto.label for b in at.get("download_button")}


def test_a_bad_combination_shows_the_message_and_disables_train(open_page):
    at = open_page("train")
    at.selectbox(key="spec:topology.name").set_value("skipless").run()
    assert not at.exception
    with pytest.raises(explorer.SpecError) as expected:
        explorer.ExperimentSpec.default().with_values({"topology.name": "skipless"})
    messages = [plain(e.value) for e in at.error]
    assert any(expected.value.message in m and expected.value.path in m for m in messages), messages
    assert at.button(key="train-start").disabled


def test_server_caps_refuse_too_many_steps(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_STEPS", "100")
    at = open_page("train")
    at.number_input(key="spec:train.-.steps").set_value(500).run()
    assert any("train.steps" in plain(e.value) and "EXPLORER_MAX_STEPS" in plain(e.value) for e in at.error)
    assert at.button(key="train-start").disabled


def test_a_probe_that_does_not_apply_is_left_out_with_a_note(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values(FAST)
    at = open_page("train", query=query_of(spec))
    at.selectbox(key="train-probe").set_value("attention").run()
    view = train_until_done(at)
    assert not at.exception
    assert view.status == "finished" and set(view.probes) == {"coefficients"}
    assert any("without the live probe **attention**" in w.value for w in at.warning)


def test_a_diverging_run_is_shown_as_diverged(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 40, "train.log_every": 1})
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    reference = explorer.train(spec)
    assert reference.status == "diverged"
    assert view.status == "diverged" and view.diverged_at == reference.diverged_at
    assert not at.exception
    assert any(f"Diverged at step {reference.diverged_at}" in w.value for w in at.warning)
    # the progress bar says where it diverged, not "step 10 of 40" as if it were still going
    progress = at.get("progress")[0].proto.text
    assert f"diverged at step {reference.diverged_at}" in progress and " of 40 ·" not in progress
    # the loss chart's divergence marker sits at the loss the run exploded to, the top of the axis
    loss = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if ": loss" in json.loads(c.proto.spec)["layout"]["title"]["text"])
    marker = next(t for t in loss["data"] if t["name"].endswith(": diverged"))
    curve = [v for t in loss["data"] if not t["name"].endswith(": diverged") for v in plotly_array(t["y"]) if v == v]
    assert marker["y"][0] >= max(curve) > 100 * curve[0]  # the explosion is on the axis


def test_every_registry_entry_is_offered_by_the_form(open_page):
    at = open_page("train")
    for section, kind in (("data", "datasets"), ("model", "models"), ("topology", "topologies"), ("init", "inits"),
                          ("optim", "optimizers")):
        assert at.selectbox(key=f"spec:{section}.name").options == list(explorer.registry(kind)), section
    at.selectbox(key="spec:topology.name").set_value("ancre").run()
    declared = [p.name for p in explorer.registry("topologies")["ancre"].params]
    drawn = [w.key.rsplit(".", 1)[1] for kind in ("selectbox", "number_input", "toggle", "text_input")
             for w in at.get(kind) if getattr(w, "key", None) and w.key.startswith("spec:topology.ancre.")]
    assert sorted(drawn) == sorted(declared)


@pytest.mark.parametrize("changes", [
    {"model.name": "gpt", "data.name": "text", "model.depth": 2},
    {"model.name": "vit", "data.name": "shapes", "model.depth": 2},
    {"model.name": "resnet-cifar", "data.name": "digits-images", "model.depth": 8, "model.width": 4},
], ids=["gpt", "vit", "resnet-cifar"])
def test_other_architectures_train_from_the_page(open_page, changes):
    spec = explorer.ExperimentSpec.default().with_values(
        {**changes, "train.steps": 10, "train.log_every": 5, "train.batch_size": 16})
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    assert not at.exception
    assert view.status == "finished" and view.steps_done == 10 and "coefficients" in view.probes


def test_a_misconfigured_limit_is_a_message_not_a_traceback(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_STEPS", "lots")
    at = open_page("train")
    assert not at.exception
    assert "EXPLORER_MAX_STEPS: 'lots' is not valid" in plain(at.error[0].value)


def test_app_starts_from_a_relative_script_path(tmp_path):
    """AppTest.from_file("app/streamlit_app.py") from the project folder (as in a REPL): every page is found."""
    script = (
        "import sys\n"
        "sys.path.insert(0, 'app')\n"
        "from streamlit.testing.v1 import AppTest\n"
        "at = AppTest.from_file('app/streamlit_app.py', default_timeout=120)\n"
        "at.run()\n"
        "at.switch_page('views/theory.py').run()\n"
        "print('EXCEPTIONS', len(at.exception))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "EXCEPTIONS 0" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_diverging_tau_run_shows_the_papers_diagnosis(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 20})
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    assert view.status == "diverged" and not at.exception
    diagnosis = explorer.diagnose(spec)
    growth = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    warning = plain(next(w.value for w in at.warning if "Diverged at step" in w.value))
    assert "Theorem 4" in warning and "Sec. 3.3" in warning and "tau paper" in warning
    assert growth.measured in warning and "1/sqrt(L) = 0.18" in warning
    expander = next(e for e in at.expander if e.label.startswith("Diagnosis"))
    table = expander.table[0].value
    row = table[table["quantity"] == growth.name].iloc[0]
    assert row["measured"] == growth.measured and "Theorems 1 and 4" in row["paper"]
    cached = at.session_state["train-diagnosis"]
    at.run()  # a rerun reuses the diagnosis computed when the run ended
    assert at.session_state["train-diagnosis"] is cached


def test_the_step_button_says_it_trains_one_logging_interval(open_page):
    """Pause and Step act at logged steps: the Step button's label and help give the interval (train.log_every
    optimiser steps) of the form's set-up, and of the run once one trains."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({**FAST, "train.log_every": 7})
    at = open_page("train", query=query_of(spec))
    step = at.button(key="train-step")
    assert step.label == "Step +7" and step.disabled
    assert "7 optimiser step" in step.help and "logging interval" in step.help
    view = train_until_done(at)
    assert view.status == "finished" and not at.exception
    assert at.button(key="train-step").label == "Step +7"
    logged = [row["step"] for row in view.history]
    assert set(b - a for a, b in zip(logged[:-2], logged[1:-1])) == {7}  # what Step advances while paused


# ---- the shortcut editor ---------------------------------------------------------------------------
SHORTCUTS_TEXT = "spec:topology.shortcuts.shortcuts"
SIX_BLOCKS = explorer.preset("ancre-fig2c-0:3").with_values({"model.depth": 6, "train.steps": 40, "train.log_every": 5})


def design_matrix(at) -> dict:
    """The editor's matrix (its figure's JSON and the chart element)."""
    chart = next(c for c in at.get("plotly_chart") if (c.key or "").startswith("design-matrix"))
    return {"element": chart, "figure": json.loads(chart.proto.spec)}


def click_cell(at, i: int, j: int):
    """Click the marker of cell i:j as the browser reports it (a plotly point selection), and rerun."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    figure = design_matrix(at)["figure"]
    markers = next(n for n, t in enumerate(figure["data"]) if t["type"] == "scatter")
    states = at._tree.get_widget_states()
    point = {"curve_number": markers, "point_index": 0, "x": i, "y": j}
    states.widgets.append(WidgetState(id=design_matrix(at)["element"].proto.id, string_value=json.dumps(
        {"selection": {"points": [point], "point_indices": [0], "box": [], "lasso": []}})))
    return at._run(states)


def drawn(at) -> set[tuple[int, int]]:
    """The cells whose marker the matrix draws filled (the shortcuts it shows)."""
    trace = next(t for t in design_matrix(at)["figure"]["data"] if t["type"] == "scatter")
    return {(int(x), int(y)) for x, y, symbol in zip(trace["x"], trace["y"], trace["marker"]["symbol"])
            if symbol == "circle"}


def test_clicking_the_design_matrix_toggles_shortcuts_in_the_form_and_the_url(open_page):
    at = open_page("train", query=query_of(SIX_BLOCKS))
    assert not at.exception
    figure = design_matrix(at)["figure"]
    trace = next(t for t in figure["data"] if t["type"] == "scatter")
    cells = {(int(x), round(y)) for x, y in zip(trace["x"], trace["y"])}
    assert cells == {(i, j) for j in range(1, 7) for i in range(j)}  # every i < j, the skips around a block too
    labels = next(t for t in figure["data"] if t["name"] == "chain")["text"]
    label = labels[1][1].replace("<br>", " ")
    assert label.startswith("1:2") and "around block 2" in label  # the skip around one block says so
    assert drawn(at) == {(0, 3)}
    click_cell(at, 1, 4)
    assert at.text_input(key=SHORTCUTS_TEXT).value == "0:3,1:4" and not at.exception
    assert spec_of(at).to_dict() == SIX_BLOCKS.with_values({"topology.shortcuts": "0:3,1:4"}).to_dict()
    assert drawn(at) == {(0, 3), (1, 4)}
    click_cell(at, 0, 3)  # a second click on a shortcut removes it
    assert at.text_input(key=SHORTCUTS_TEXT).value == "1:4" == spec_of(at).topology.params["shortcuts"]
    click_cell(at, 2, 3)  # the skip around block 3 (as in the preset ancre-fig2b-0:1) is drawn like any other
    assert at.text_input(key=SHORTCUTS_TEXT).value == "1:4,2:3"


def test_drawing_0_2_gives_the_papers_preset(open_page):
    """From a net without shortcuts: Draw shortcuts, clear the default design, click 0:2: the same spec as the
    preset ancre-fig2b-0:2 (same seed, so the same run)."""
    at = open_page("train", query={"preset": "ancre-fig2b-none"})
    at.button(key="design-draw").click().run()
    assert at.selectbox(key="spec:topology.name").value == "shortcuts"
    for cell in sorted(drawn(at)):
        click_cell(at, *cell)
    assert drawn(at) == set()
    click_cell(at, 0, 2)
    assert not at.exception
    assert spec_of(at).to_dict() == explorer.preset("ancre-fig2b-0:2").to_dict()


def test_the_weight_input_weights_the_selected_shortcut(open_page):
    at = open_page("train", query=query_of(SIX_BLOCKS))
    click_cell(at, 1, 4)
    assert at.selectbox(key="design-selected").value == "1:4"  # the last click selects
    at.number_input(key="design-weight").set_value(0.5).run()
    assert at.text_input(key=SHORTCUTS_TEXT).value == "0:3,1:4*0.5"
    assert explorer.parse_shortcuts(spec_of(at).topology.params["shortcuts"]) == {(0, 3): 1.0, (1, 4): 0.5}
    at.selectbox(key="design-selected").set_value("0:3").run()
    assert at.number_input(key="design-weight").value == 1.0  # the input follows the selection
    at.number_input(key="design-weight").set_value(-2.0).run()
    assert at.text_input(key=SHORTCUTS_TEXT).value == "0:3*-2,1:4*0.5"
    weights = next(t for t in design_matrix(at)["figure"]["data"] if t["name"] == "weights")
    assert plotly_array(weights["z"])[2, 0] == -2.0 and plotly_array(weights["z"])[3, 1] == 0.5  # rows j-1, columns i
    at.toggle(key="design-learnable").set_value(True).run()
    assert spec_of(at).topology.params["learnable"] is True


@pytest.mark.parametrize("typed", ["0:3,0:3", "0:3,1:7", "0:3*x"])
def test_an_invalid_design_is_refused_in_one_line_naming_the_field(open_page, typed):
    at = open_page("train", query=query_of(SIX_BLOCKS))
    at.text_input(key=SHORTCUTS_TEXT).set_value(typed).run()
    assert not at.exception
    with pytest.raises(explorer.SpecError) as expected:
        SIX_BLOCKS.with_values({"topology.shortcuts": typed})
    assert expected.value.path == "topology.shortcuts"
    shown = [plain(e.value) for e in at.error if "topology.shortcuts" in plain(e.value)]
    assert shown and all("\n" not in m and expected.value.message in m for m in shown), shown
    assert at.button(key="train-start").disabled
    assert spec_of(at).to_dict() == SIX_BLOCKS.to_dict()  # the URL keeps the last valid design


def test_the_design_challenge_scores_the_sessions_designs(open_page):
    """Load the challenge, draw a design, train it: the session's table scores it as explorer.challenge does
    the same design trained by the library; a design past the challenge's shortcut limit is refused in one line."""
    from explorer import challenge

    at = open_page("train")
    at.button(key="challenge-load").click().run()
    assert at.selectbox(key="spec:topology.name").value == "shortcuts" and not at.exception
    for cell in sorted(drawn(at)):
        click_cell(at, *cell)
    design = f"0:{challenge.CHALLENGE.depth - 1}"
    click_cell(at, *map(int, design.split(":")))
    assert spec_of(at).to_dict() == challenge.challenge_spec(design).to_dict()
    view = train_until_done(at)
    assert view.status == "finished" and not at.exception
    expected = challenge.score(explorer.train(challenge.challenge_spec(design)))
    table = next(e for e in at.expander if e.label == "Design challenge").dataframe[0].value
    row = table.iloc[0]
    assert row["design"] == design and len(table) == 1
    assert row["last loss"] == f"{view.history[-1]['loss']:.3g}" and "e-" in row["last loss"]  # 3 digits, as 4e-13
    assert row[f"steps to {challenge.CHALLENGE.target_loss:g}"] == (expected if expected is not None else "not reached")
    too_many = "0:2,0:3,1:4"
    at.text_input(key=SHORTCUTS_TEXT).set_value(too_many).run()
    with pytest.raises(explorer.SpecError) as refused:
        challenge.challenge_spec(too_many)
    warnings = [plain(w.value) for w in at.warning if "Not a challenge design" in plain(w.value)]
    assert len(warnings) == 1 and "topology.shortcuts" in warnings[0] and refused.value.message in warnings[0]
    at.toggle(key="challenge-reveal").set_value(True).run()
    answer = challenge.reference()
    assert any(answer["design"] in plain(i.value) and answer["why"] in plain(i.value) for i in at.info)


def wait_for(at, condition, timeout: float = 120.0):
    """Poll the session's job's view until `condition(view)`; rerun the page and return the view."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        view = at.session_state["train-job"].view()
        if condition(view):
            break
        time.sleep(0.2)
    at.run()
    return at.session_state["train-job"].view()


def test_a_design_edited_while_paused_rewires_the_run(open_page):
    spec = SIX_BLOCKS.with_values({"train.steps": 2000})  # long enough that Pause lands before the end
    at = open_page("train", query=query_of(spec))
    at.button(key="train-start").click().run()
    at.button(key="train-pause").click().run()  # a queued run pauses at its first logged step
    view = wait_for(at, lambda v: v.status == "paused" and v.history)
    assert view.status == "paused", view.status
    held = view.steps_done
    click_cell(at, 0, 6)
    view = wait_for(at, lambda v: v.rewires or v.rewire_error)
    assert not at.exception and view.rewire_error is None
    assert [(r["step"], r["change"]) for r in view.rewires] == [(held, "+0:6")]
    assert any(f"Rewired at step {held}: +0:6" in plain(i.value) for i in at.info)
    assert at.button(key="train-pause").label == "Resume"  # Pause and Resume are one button
    at.button(key="train-pause").click().run()
    view = wait_for(at, lambda v: not v.active)
    assert view.status == "finished" and view.steps_done == spec.train.steps
    loss = next(c for c in charts(at) if ": loss" in c["layout"]["title"]["text"])
    assert any("+0:6" in (a.get("text") or "") for a in loss["layout"].get("annotations", []))
    record = explorer.RunStore().get(view.run_id)
    assert [(r["step"], r["topology"]["shortcuts"]) for r in record["rewires"]] == [(held, "0:3,0:6")]


def leave_and_come_back(at, page: str = "papers"):
    """Another page, then Train by the sidebar's link (which carries no query string)."""
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, at.exception
    at.query_params.clear()
    at.switch_page("views/train.py")
    return at.run()


def test_the_form_and_its_address_come_back_after_another_page(open_page):
    """A preset link, a field edited and a live probe chosen; Papers; Train again: the same form, address and
    sidebar note, not the default experiment."""
    name = "ancre-fig2b-ancre"
    at = open_page("train", query={"preset": name})
    at.number_input(key="spec:train.-.seed").set_value(5).run()
    at.selectbox(key="train-probe").set_value("weights").run()
    expected = explorer.preset(name).with_values({"train.seed": 5})
    assert expected.to_dict() != explorer.ExperimentSpec.default().to_dict()
    leave_and_come_back(at)
    assert not at.exception, at.exception
    assert at.selectbox(key="spec:model.name").value == expected.model.name
    assert at.selectbox(key="spec:topology.name").value == "ancre"
    assert at.number_input(key="spec:train.-.seed").value == 5
    assert spec_of(at).to_dict() == expected.to_dict()  # the address bar holds it again
    assert at.selectbox(key="train-probe").value == "weights"
    assert any(f"Started from the preset {name}, then edited." in plain(c.value) for c in at.caption)
    at.number_input(key="spec:train.-.seed").set_value(0).run()  # the preset again: the note says so
    assert any(f"Started from the preset {name}." in plain(c.value) for c in at.caption)


def test_a_link_opened_after_another_page_wins_over_the_kept_form(open_page):
    at = open_page("train", query={"preset": "ancre-fig2b-ancre"})
    at.switch_page("views/papers.py").run()
    at.query_params.clear()
    at.query_params["preset"] = "ancre-fig2c-ancre"
    at.switch_page("views/train.py").run()
    assert not at.exception
    assert spec_of(at).to_dict() == explorer.preset("ancre-fig2c-ancre").to_dict()


def test_the_result_says_when_the_form_has_changed_since_its_run(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values(FAST)
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    assert view.status == "finished"

    def changed() -> list[str]:
        return [plain(i.value) for i in at.info if "the form has changed since" in plain(i.value)]

    assert not changed()
    leave_and_come_back(at, "inside")  # the form comes back as it was: still the run's
    assert not changed() and at.success
    at.number_input(key="spec:train.-.seed").set_value(9).run()
    assert changed() == [f"This result is of {view.label}; the form has changed since: Train to run the form's "
                         "set-up."]
    at.number_input(key="spec:train.-.seed").set_value(spec.train.seed).run()
    assert not changed()


def in_page_order(node):
    """The page's elements and blocks in the order the reader sees them."""
    yield node
    for child in getattr(node, "children", {}).values():
        yield from in_page_order(child)


def test_a_diverged_tau_run_shows_three_lines_then_the_detail_folded(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 20})
    at = open_page("train", query=query_of(spec))
    view = train_until_done(at)
    assert view.status == "diverged" and not at.exception
    diagnosis = explorer.diagnose(spec)
    lines = diagnosis.summary_lines(view)
    assert len(lines) == 3 and lines[0].startswith("The stream grew")
    elements = list(in_page_order(at.main))
    warning = next(w for w in at.warning if "Diverged at step" in w.value)
    shown = plain(warning.value).split("\n")
    assert shown[-4:] == ["", *(f"- {line}" for line in lines)]  # a list of its own after the page's words
    detail = next(e for e in at.expander if e.label == "Diagnosis: why, in detail")
    position = {id(e): i for i, e in enumerate(elements)}
    assert position[id(warning)] < position[id(detail)]
    assert not detail.proto.expanded  # folded
    assert [plain(m.value) for m in detail.markdown] == [diagnosis.explain(view)]
    table = detail.table[0].value
    assert list(table.columns)[0] == "verdict" and "n/a" not in set(table["verdict"])
    assert list(table["quantity"]) == [q.name for q in diagnosis.quantities]


def test_the_challenge_panel_says_when_a_design_in_the_table_beat_the_answer(open_page):
    """The session's table holds the answer and a faster design (as two trained runs leave it): the revealed
    answer gives its steps from the table and says which design beat it."""
    from explorer import challenge

    answer = challenge.REFERENCE_DESIGN
    at = open_page("train")
    at.session_state["challenge-tries"] = {
        "run-1": {"design": answer, "shortcuts": 1, "steps": 144, "final_loss": 4e-13, "label": "linear #1"},
        "run-2": {"design": "0:2,0:4", "shortcuts": 2, "steps": 135, "final_loss": 5e-13, "label": "linear #2"}}
    at.run()
    panel = next(e for e in at.expander if e.label == "Design challenge")
    assert list(panel.dataframe[0].value["last loss"]) == ["5e-13", "4e-13"]
    at.toggle(key="challenge-reveal").set_value(True).run()
    assert not at.exception
    panel = next(e for e in at.expander if e.label == "Design challenge")
    assert any(f"{answer}** (144 steps in your table)" in i.value for i in panel.info)
    said = [plain(m.value).strip("*") for m in panel.markdown if "beat the answer" in plain(m.value)]
    assert said == [challenge.against_answer(challenge.ranked(at.session_state["challenge-tries"].values()))], said
    assert "0:2,0:4 reached 1e-06 in 135 steps against 0:4 in 144" in said[0]


def test_the_challenge_panel_says_before_a_run_why_the_form_will_not_be_scored(open_page):
    from explorer import challenge

    spec = challenge.challenge_spec("0:4").with_values({"optim.lr": 0.02})
    at = open_page("train", query=query_of(spec))
    panel = next(e for e in at.expander if e.label == "Design challenge")
    lines = [plain(c.value) for c in panel.caption if "will not be scored" in plain(c.value)]
    assert len(lines) == 1 and "optim.lr" in lines[0] and "0.02" in lines[0], lines
    at = open_page("train", query=query_of(challenge.challenge_spec("0:4")))
    panel = next(e for e in at.expander if e.label == "Design challenge")
    assert not [c for c in panel.caption if "will not be scored" in plain(c.value)]
