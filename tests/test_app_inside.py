"""The Inside page (AppTest): probing a stored run's weights (a job in a worker) and scrubbing its recorded probes."""

import inspect
import json
import shutil
import time
from pathlib import Path

import numpy as np

import explorer
from explorer.nn import reference
from conftest import plotly_array


def stored_run(spec, **probes):
    run = explorer.train(spec, callbacks=[explorer.StoreRecorder(label="stored")], probes=probes or None, probe_every=2)
    return run, explorer.RunStore().list()[0]["id"]


def probe(at, timeout: float = 300.0):
    """Click Probe and wait for the probe job to end (AppTest runs no timers), then rerun: its results drawn."""
    at.button(key="inside-run-probes").click().run()
    job = at.session_state["inside-job"] if "inside-job" in at.session_state else None
    deadline = time.time() + timeout
    while job is not None and job.active and time.time() < deadline:
        time.sleep(0.2)
    return at.run()


def test_an_empty_store_says_what_to_do(open_page):
    at = open_page("inside")
    assert not at.exception
    assert "Train" in at.info[0].value


def test_probes_read_the_stored_weights(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 5, "train.steps": 12})
    run, run_id = stored_run(spec)
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    at.multiselect(key="inside-probes").set_value(["jacobian", "norms"]).run()
    at.slider(key="inside-inputs").set_value(4).run()
    probe(at)
    assert not at.exception
    expected = explorer.probe(run.model.eval(), run.data.x_val[:4], "jacobian")
    assert f"mean chi {expected['chi'].mean():.4g}" in [c.value for c in at.caption]
    spectra = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    first = next(s for s in spectra if "Jacobian spectrum" in s["layout"]["title"]["text"])
    y = plotly_array(first["data"][0]["y"])  # numerical zeros (NaN here) are drawn on a floor by another trace
    assert np.isfinite(y).sum() > 0
    assert np.allclose(y[np.isfinite(y)], expected["singular_values"][0][np.isfinite(y)], rtol=1e-5)
    assert any("norms by block" in s["layout"]["title"]["text"] for s in spectra)


def test_the_code_this_model_runs_shows_its_topology_mixing(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 2, "train.log_every": 1})
    stored_run(spec)
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    assert not at.exception
    shown = [c.value.strip() for c in next(e for e in at.expander if e.label == "The code this model runs").code]
    assert inspect.getsource(reference.mixing_of(spec.topology.name)).strip() in shown
    assert inspect.getsource(reference.mixing_of("cascaded")).strip() not in shown
    assert inspect.getsource(reference.forward_of(spec.model.name)).strip() in shown


def test_a_probe_that_does_not_apply_is_a_warning(open_page):
    stored_run(explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 4, "train.log_every": 2}))
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    at.multiselect(key="inside-probes").set_value(["attention"]).run()
    probe(at)
    assert not at.exception
    assert any("attention does not apply" in w.value for w in at.warning)


def test_recorded_probes_can_be_scrubbed_by_step(open_page):
    spec = explorer.preset("ancre-fig2c-ancre").with_values({"train.steps": 6, "train.log_every": 2})
    run, _ = stored_run(spec, coefficients={})
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    steps = at.select_slider(key="inside-recorded-step").options
    assert [int(s) for s in steps] == sorted({row["step"] for row in run.probe_history})
    at.select_slider(key="inside-recorded-step").set_value(steps[0]).run()
    heatmap = json.loads(at.get("plotly_chart")[-1].proto.spec)
    # ANCRe learns its coefficients: the heatmap shows them (own basis), not the all-ones unrolled view
    first = next(row["result"]["own"] for row in run.probe_history if row["step"] == int(steps[0]))
    z = plotly_array(heatmap["data"][0]["z"])
    assert np.allclose(np.nan_to_num(z), np.nan_to_num(np.where(np.tril(np.ones_like(first)) > 0, first, np.nan)))


def test_the_pca_grid_draws_the_input_images_above_the_maps_of_the_input_and_blocks_1_to_l(open_page):
    spec = explorer.preset("skip-sec5-skipless").with_values({"data.n_train": 32, "data.n_val": 16, "train.steps": 2,
                                                              "train.log_every": 1})
    run, _ = stored_run(spec)
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    at.multiselect(key="inside-probes").set_value(["pca"]).run()
    at.slider(key="inside-inputs").set_value(8).run()
    probe(at)
    assert not at.exception
    grid = next(s for s in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
                if "PCA feature maps" in s["layout"]["title"]["text"])
    cols = 4
    rows = [grid["layout"]["yaxis" + ("" if r == 0 else str(r * cols + 1))]["title"]["text"]
            for r in range(len(grid["data"]) // cols)]
    assert rows == ["images", "input"] + [f"block {j}" for j in range(1, spec.model.params["depth"] + 1)]
    expected = explorer.probe(run.model.eval(), run.data.x_val[:8], "pca")["images"]
    for c in range(cols):  # the first row is the validation images the maps were computed from
        z = plotly_array(grid["data"][c]["z"]).reshape(expected[c].shape)
        assert np.array_equal(z, np.round(expected[c] * 255))
    assert plotly_array(grid["data"][cols]["z"]).size < z.size  # a map has one pixel per 4 x 4 patch


def test_a_run_trained_on_a_gpu_is_probed_here_on_cpu(open_page, explorer_home):
    """The store a GPU machine wrote (tests/data/cuda_store: train.device=cuda, CUDA tensors in its checkpoint)
    opens on Inside, and its probes run on this server's CPU with the trained weights."""
    shutil.copytree(Path(__file__).parent / "data" / "cuda_store", explorer_home, dirs_exist_ok=True)
    store = explorer.RunStore()
    [record] = store.list()
    model, data = explorer.build(store.spec(record["id"]), device="cpu")
    model.load_state_dict(store.load_checkpoint(record["id"])["model"])
    expected = explorer.probe(model.eval(), data.x_val[:4], "coefficients")
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    at.multiselect(key="inside-probes").set_value(["coefficients", "norms"]).run()
    at.slider(key="inside-inputs").set_value(4).run()
    probe(at)
    assert not at.exception and not [w.value for w in at.warning]
    shown = at.session_state["inside-results"]
    assert set(shown["results"]) == {"coefficients", "norms"} and shown["step"] == record["steps_done"]
    for key, value in expected.items():  # the trained coefficients, as this process computes them
        if np.asarray(value).dtype.kind == "f":
            np.testing.assert_allclose(shown["results"]["coefficients"][key], value, rtol=1e-6)
        else:
            np.testing.assert_array_equal(shown["results"]["coefficients"][key], value)


def test_a_run_whose_data_is_gone_opens_and_says_why_it_cannot_be_probed(open_page, explorer_home):
    """A run trained on a text file in this server's data folder, deleted since: its record and experiment
    show; Probe says, in one line, which field stops it on this server, and queues nothing."""
    (explorer_home / "data").mkdir(exist_ok=True)
    corpus = explorer_home / "data" / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    spec = explorer.preset("dca-table7-transformer").with_values(
        {"data.name": "text", "data.path": str(corpus), "train.steps": 2, "train.log_every": 1,
         "model.depth": 2, "model.width": 16})
    stored_run(spec)
    corpus.unlink()
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    assert not at.exception and str(corpus) in at.expander[0].code[0].value  # its experiment, as stored
    at.multiselect(key="inside-probes").set_value(["norms"]).run()
    at.button(key="inside-run-probes").click().run()
    [warning] = [w.value.replace("\\", "") for w in at.warning if "Not probed here" in w.value]  # (unescaped)
    assert "data.path" in warning and "does not exist" in warning and "\n" not in warning
    assert "inside-job" not in at.session_state


def test_the_diagnosis_of_a_diverged_run_is_shown_with_its_numbers(open_page):
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 20})
    run, _ = stored_run(spec)
    assert run.status == "diverged"
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    assert not at.exception
    expected = explorer.diagnose(spec)
    growth = expected.quantity("stream growth ||h_n|| / ||h_0|| at init")
    shown = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "Diverged" in shown and "Theorem 4" in shown and "Sec. 3.3" in shown
    assert growth.measured in shown and f"1/sqrt(L) = {30 ** -0.5:.2f}" in shown and "lr 0.001" in shown
    lines = expected.summary_lines(run)  # the three lines, as on Train; the paragraph is folded below
    assert all(line in shown for line in lines) and expected.explain(run) not in shown
    detail = next(e for e in at.expander if e.label.startswith("Diagnosis"))
    assert detail.label == "Diagnosis: why, in detail" and not detail.proto.expanded
    assert [m.value.replace("\\", "") for m in detail.markdown] == [expected.explain(run)]
    table = detail.table[0].value
    assert list(table["quantity"]) == [q.name for q in expected.quantities]
    assert list(table["measured"]) == [q.measured for q in expected.quantities]


def test_a_run_that_trained_gets_the_table_but_no_explanation(open_page):
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 5, "train.steps": 12})
    run, _ = stored_run(spec)
    assert run.status == "finished" and not explorer.diagnosis.outcome(run).failed
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    assert not at.exception
    assert not any("Diverged" in w.value or "Stalled" in w.value for w in at.warning)
    table = next(e for e in at.expander if e.label.startswith("Diagnosis")).table[0].value
    verdicts = dict(zip(table["quantity"], table["verdict"]))
    assert verdicts["tau vs 1/sqrt(L)"].startswith("agrees: tau = ")  # the verdict in words


def test_the_choices_come_back_after_another_page(open_page):
    """Streamlit drops a widget's value while another page shows: the page keeps its choices and puts them back."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 2, "train.log_every": 1})
    stored_run(spec)
    _, run_id = stored_run(spec.with_values({"train.seed": 1}))
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    older = next(i for i in at.selectbox(key="inside-run").options if run_id[:8] not in i)
    at.selectbox(key="inside-run").set_value(older).run()
    at.multiselect(key="inside-probes").set_value(["norms"]).run()
    at.slider(key="inside-inputs").set_value(4).run()
    chosen = at.selectbox(key="inside-run").value
    at.switch_page("views/theory.py").run()
    at.switch_page("views/inside.py").run()
    assert not at.exception
    assert at.toggle(key="inside-all").value is True
    assert at.selectbox(key="inside-run").value == chosen != run_id  # not the newest, which is listed first
    assert at.multiselect(key="inside-probes").value == ["norms"]
    assert at.slider(key="inside-inputs").value == 4
