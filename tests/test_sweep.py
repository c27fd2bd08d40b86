"""Sweeps: the grid x seeds, both backends, failures and divergence recorded, Ctrl-C, the CLI."""

import json
import multiprocessing
import time

import pytest

import explorer
from explorer import sweeps
from explorer.cli import main
from explorer.runs import RunStore

BASE = explorer.preset("ancre-fig2b-0:2").with_values({"train.steps": 30})


def test_trials_are_the_grid_product_times_seeds():
    items = sweeps.trials(BASE, {"model.depth": [3, 4], "optim.lr": [0.01, 0.05]}, seeds=2)
    assert len(items) == 8
    labels = [label for label, _ in items]
    assert labels[0] == "model.depth=3 optim.lr=0.01 seed=0" and labels[-1] == "model.depth=4 optim.lr=0.05 seed=1"
    last = items[-1][1]
    assert (last.model.depth, last.optim.lr, last.train.seed) == (4, 0.05, 1)
    with pytest.raises(explorer.SpecError) as err:
        sweeps.trials(BASE, {"model.depth": []})
    assert err.value.path == "grid.model.depth"
    with pytest.raises(explorer.SpecError):
        sweeps.trials(BASE, {"model.depth": ["zero"]})


def test_local_pool_records_every_trial_as_it_finishes():
    seen = []
    rows = sweeps.sweep(BASE, {"topology.shortcuts": ["0:1", "0:2"]}, seeds=2, workers=2, progress=False,
                        callback=seen.append, label="t")
    assert [r["label"] for r in rows] == [f"topology.shortcuts={s} seed={k}" for s in ("0:1", "0:2") for k in (0, 1)]
    assert len(seen) == 4 and all(r["status"] == "finished" for r in rows)
    store = RunStore()
    stored = {r["id"]: r for r in store.list()}
    assert set(stored) == {r["run_id"] for r in rows}
    for row in rows:
        record = store.get(row["run_id"])
        assert record["label"] == f"t {row['label']}"
        assert record["history"][-1]["loss"] == pytest.approx(row["final_loss"])
        assert store.load_checkpoint(row["run_id"])["step"] == 30
    by_label = {r["label"]: r["final_val_loss"] for r in rows}
    assert by_label["topology.shortcuts=0:2 seed=0"] < by_label["topology.shortcuts=0:1 seed=0"]  # the paper's gap


def test_a_failed_trial_is_recorded_and_the_others_go_on(monkeypatch):
    real = sweeps._run_group

    def flaky(specs, batched, threads):
        if specs[0]["train"]["seed"] == 1:
            raise_in_worker = [{"status": "failed", "error": "RuntimeError: out of luck\n..."}]
            return raise_in_worker
        return real(specs, batched, threads)

    monkeypatch.setattr(sweeps, "_run_group", flaky)
    rows = sweeps.sweep(BASE, seeds=3, workers=1, progress=False)
    assert [r["status"] for r in rows] == ["finished", "failed", "finished"]
    assert RunStore().get(rows[1]["run_id"])["status"] == "failed"


def test_worker_errors_become_failed_results_not_crashes():
    broken = BASE.to_dict()
    broken["model"]["depth"] = -1  # fails in the worker's from_dict
    assert sweeps._run_group([broken], False, 1)[0]["status"] == "failed"


def test_a_diverging_trial_is_a_result():
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30, "train.steps": 20})
    rows = sweeps.sweep(spec, seeds=1, workers=1, progress=False)
    assert rows[0]["status"] == "diverged" and rows[0]["diverged_at"] is not None


def test_ctrl_c_stops_the_pool_and_keeps_what_finished():
    def interrupt(row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweeps.sweep(BASE.with_values({"train.steps": 200}), seeds=6, workers=2, progress=False, callback=interrupt)
    assert len(RunStore().list()) == 1  # the one trial recorded before the interrupt
    deadline = time.monotonic() + 60  # the workers were terminated by the sweep; give a loaded machine time
    def sweep_children():  # the web app's job workers (explorer-worker), started by other tests, are not the pool's
        return [c for c in multiprocessing.active_children() if c.is_alive() and c.name != "explorer-worker"]

    while sweep_children() and time.monotonic() < deadline:
        time.sleep(0.1)  # a worker still starting when it was terminated shows up late (active_children reaps)
    assert not sweep_children()


def test_ray_backend_runs_the_trials_on_a_local_ray(local_ray):
    rows = sweeps.sweep(BASE, {"topology.shortcuts": ["0:1", "0:2"]}, backend="ray", workers=2, progress=False)
    assert [r["status"] for r in rows] == ["finished", "finished"]
    assert {r["id"] for r in RunStore().list()} == {r["run_id"] for r in rows}


def test_cli_sweep_json_lists_the_trial_summaries(capsys):
    code = main(["sweep", "--preset", "ancre-fig2b-0:2", "--set", "train.steps=20", "--grid", "model.depth=3,4",
                 "--workers", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(out)
    assert [r["label"] for r in rows] == ["model.depth=3 seed=0", "model.depth=4 seed=0"]
    assert all(r["status"] == "finished" and r["run_id"] for r in rows)
    assert main(["sweep", "--preset", "ancre-fig2b-0:2", "--grid", "model.depth"]) == 2


def test_batched_seeds_give_the_same_trials_as_separate_ones():
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 6, "model.width": 16,
                                                              "train.steps": 20, "train.log_every": 10})
    separate = sweeps.sweep(spec, {"optim.lr": [0.01, 0.02]}, seeds=2, workers=1, progress=False)
    batched = sweeps.sweep(spec, {"optim.lr": [0.01, 0.02]}, seeds=2, workers=1, batched=True, progress=False)
    assert [r["status"] for r in batched] == ["finished"] * 4
    for a, b in zip(separate, batched):
        assert a["label"] == b["label"]
        assert b["final_loss"] == pytest.approx(a["final_loss"], rel=1e-5)


def test_a_designs_grid_runs_each_design_and_its_rows_fill_the_grid_figure():
    import numpy as np

    from explorer import plots

    base, grid = sweeps.design_grid(explorer.preset("ancre-fig2c-0:3").with_values({"train.steps": 20}),
                                    ["0:1", "1:4, 0:3"])
    assert grid == {"topology.shortcuts": ["0:1", "0:3,1:4"]}
    rows = sweeps.sweep(base, grid, seeds=2, workers=1, progress=False)
    assert [(r["point"]["topology.shortcuts"], r["point"]["seed"]) for r in rows] == \
        [("0:1", 0), ("0:1", 1), ("0:3+1:4", 0), ("0:3+1:4", 1)]
    for row in rows:
        assert row["final_loss"] == pytest.approx(RunStore().get(row["run_id"])["history"][-1]["loss"])
    heatmap = plots.grid_figure(rows, "topology.shortcuts", "seed").data[0]
    assert list(heatmap.y) == ["0:1", "0:3+1:4"] and list(heatmap.x) == ["seed 0", "seed 1"]
    losses = np.array([[r["final_loss"] for r in rows[:2]], [r["final_loss"] for r in rows[2:]]])
    np.testing.assert_allclose(10 ** np.array(heatmap.z), losses, rtol=1e-9)  # log colour, exact values
    assert [list(line) for line in heatmap.text] == [[f"{v:.3g}" for v in line] for line in losses]
    mean = plots.grid_figure(rows, "topology.shortcuts").data[0]
    assert list(mean.x) == ["seed mean"]
    np.testing.assert_allclose(10 ** np.array(mean.z)[:, 0], losses.mean(axis=1), rtol=1e-9)
    with pytest.raises(explorer.SpecError) as err:
        sweeps.design_grid(base, ["0:3,1:4", "1:4+0:3"])
    assert err.value.path == "topology.shortcuts" and "0:3+1:4 is listed twice" in err.value.message
    with pytest.raises(explorer.SpecError) as err:
        sweeps.design_grid(base, ["0:6"])
    assert err.value.path == "topology.shortcuts" and "design '0:6'" in err.value.message


def test_the_grid_figure_marks_a_diverged_cell_and_over_two_fields_averages_the_seeds():
    from explorer import plots

    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"train.steps": 20})
    rows = sweeps.sweep(spec, {"model.depth": ["4", "30"], "optim.lr": ["0.01"]}, seeds=2, workers=1, progress=False)
    deep = [r for r in rows if r["point"]["model.depth"] == 30]
    assert {r["status"] for r in deep} == {"diverged"}  # Theorem 4: tau = 1/L^0.25 is too large at depth 30
    fig = plots.grid_figure(rows, "model.depth", "optim.lr", metric="final_loss")
    heatmap, marks = fig.data
    assert list(heatmap.y) == ["4", "30"] and list(heatmap.x) == ["0.01"]
    shallow = [r["final_loss"] for r in rows if r["point"]["model.depth"] == 4]
    assert 10 ** heatmap.z[0][0] == pytest.approx(sum(shallow) / 2, rel=1e-9)
    assert "mean of 2 runs" in heatmap.customdata[0][0]
    assert heatmap.z[1][0] is None or heatmap.z[1][0] != heatmap.z[1][0]  # not coloured
    assert marks.marker.symbol == "x" and list(marks.y) == ["30"]
    for row in deep:
        assert f"diverged at step {row['diverged_at']}" in marks.customdata[0]
    with pytest.raises(ValueError, match="metric"):
        plots.grid_figure(rows, "model.depth", metric="accuracy")


def test_parse_grid_splits_designs_on_semicolons():
    assert sweeps.parse_grid(["topology.shortcuts=0:3,1:4; 0:2", "model.depth=3,4"]) == \
        {"topology.shortcuts": ["0:3,1:4", "0:2"], "model.depth": ["3", "4"]}
