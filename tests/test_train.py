"""The trainer: histories, divergence as a result, stopping, determinism, no per-step sync, presets."""

import json
import math
import threading

import numpy as np
import pytest
import torch

import explorer
from conftest import example_spec, model_examples, section_id, valid_combinations, vector_models
from explorer.training import loss_function

TINY = {"data": {"name": "whitened-regression", "dim": 4, "n_train": 16, "n_val": 8, "rank": 2},
        "model": {"name": "linear", "depth": 3, "width": 4}, "topology": {"name": "shortcuts", "shortcuts": "0:2"},
        "init": {"name": "normal", "std": 0.1}, "optim": {"name": "gd", "lr": 0.05},
        "train": {"steps": 40, "log_every": 10}}


def tiny(**changes):
    return explorer.ExperimentSpec.from_dict(TINY).with_values(changes)


def test_history_rows_and_summary():
    run = explorer.train(tiny())
    assert run.status == "finished" and run.steps_done == 40
    assert [row["step"] for row in run.history] == [0, 10, 20, 30, 40]
    assert all({"step", "loss", "val_loss", "time"} <= row.keys() for row in run.history)
    assert run.history[-1]["loss"] < run.history[0]["loss"] / 10
    summary = json.loads(json.dumps(run.summary(), allow_nan=False))
    assert summary["status"] == "finished" and summary["steps"] == 40
    assert summary["final_loss"] == run.history[-1]["loss"]
    assert explorer.ExperimentSpec.from_dict(summary["spec"]) == run.spec


def test_step_zero_is_the_initial_loss_and_logged_losses_are_exact():
    spec = tiny()
    model, data = explorer.build(spec)
    with torch.no_grad():
        initial = loss_function(data.task)(model(data.x_train), data.y_train).item()
    run = explorer.train(spec)
    assert run.history[0]["loss"] == pytest.approx(initial, rel=1e-6)
    with torch.no_grad():  # full-batch GD: the last logged loss is the loss of the final weights
        final = loss_function(data.task)(run.model(data.x_train), data.y_train).item()
    assert run.history[-1]["loss"] == pytest.approx(final, rel=1e-5)


def test_same_seed_same_history_other_seed_differs():
    spec = explorer.preset("tau-fig1-1/L").with_values({"train.steps": 20, "model.depth": 4})
    a, b = explorer.train(spec), explorer.train(spec)
    assert [r["loss"] for r in a.history] == [r["loss"] for r in b.history]
    c = explorer.train(spec.with_values({"train.seed": 1}))
    assert [r["loss"] for r in c.history] != [r["loss"] for r in a.history]


def test_divergence_is_a_result_with_its_step():
    run = explorer.train(tiny(**{"optim.lr": 50.0, "train.steps": 200}))
    assert run.status == "diverged"
    assert run.diverged_at is not None and 0 < run.diverged_at <= 200
    assert run.history[-1]["step"] >= run.diverged_at
    summary = run.summary()
    json.dumps(summary, allow_nan=False)  # non-finite numbers become None
    assert summary["diverged_at"] == run.diverged_at


def test_divergence_is_pinned_to_the_exact_step():
    """Loss explosion is found at the step it happened even between logging steps."""
    spec = tiny(**{"optim.lr": 3.0, "train.steps": 200, "train.log_every": 50, "train.diverge_factor": 10.0})
    run = explorer.train(spec)
    assert run.status == "diverged"
    every = explorer.train(spec.with_values({"train.log_every": 1}))
    assert every.diverged_at == run.diverged_at


def test_ancre_without_normalisation_may_diverge_but_never_raises():
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "digits"}, "model": {"name": "mlp", "depth": 24, "width": 32},
        "topology": {"name": "ancre", "normalization": "none"}, "optim": {"name": "sgd", "lr": 0.5},
        "train": {"steps": 30, "log_every": 5}})
    run = explorer.train(spec)
    assert run.status in ("diverged", "finished")
    assert run.status == "diverged", "2^24 growth of the unnormalised sum should blow up"


def test_stop_event_and_callback_stop_between_steps():
    stop = threading.Event()

    def stop_at_20(event):
        if event.kind == "log" and event.step == 20:
            stop.set()

    run = explorer.train(tiny(**{"train.steps": 1000, "train.log_every": 10}), callbacks=[stop_at_20], stop=stop)
    assert run.status == "stopped" and run.steps_done == 20

    def raise_at_30(event):
        if event.kind == "log" and event.step == 30:
            raise explorer.StopTraining

    run = explorer.train(tiny(**{"train.steps": 1000}), callbacks=[raise_at_30])
    assert run.status == "stopped" and run.history[-1]["step"] == 30


def test_events_arrive_in_order():
    kinds = []
    explorer.train(tiny(), callbacks=[lambda e: kinds.append((e.kind, e.step))])
    assert kinds[0] == ("start", 0) and kinds[-1] == ("end", 40)
    assert [s for k, s in kinds if k == "log"] == [0, 10, 20, 30, 40]


def test_step_loop_does_not_sync_every_step(monkeypatch):
    """Reading values from the device happens per logging interval, not per step."""
    counts = {"n": 0}
    for name in ("item", "__float__", "__bool__", "cpu", "tolist"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            counts["n"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    base = explorer.ExperimentSpec.from_dict({**TINY, "optim": {"name": "sgd", "lr": 0.01},
                                              "train": {"steps": 100, "log_every": 50, "batch_size": 4}})
    explorer.train(base)
    short = counts["n"]
    counts["n"] = 0
    explorer.train(base.with_values({"train.steps": 400, "train.log_every": 200}))
    assert counts["n"] <= short + 2, f"{counts['n']} reads for 4x the steps (vs {short})"


@pytest.mark.parametrize("optimizer", ["gd", "sgd", "adam", "adamw", "adagrad", "soap"])
@pytest.mark.parametrize("schedule", [{"optim.schedule": "constant"}, {"optim.schedule": "cosine", "optim.warmup_steps": 5}])
def test_every_optimizer_and_schedule_reduces_the_loss(optimizer, schedule):
    lr = 0.05 if optimizer in ("gd", "sgd") else 0.02
    spec = tiny(**{"optim.name": optimizer, "optim.lr": lr, "train.steps": 60, **schedule})
    run = explorer.train(spec)
    assert run.status == "finished"
    assert run.history[-1]["loss"] < run.history[0]["loss"]


def test_cosine_schedule_with_warmup_shape():
    from explorer.optim import build_optimizer

    spec = tiny(**{"optim.name": "sgd", "optim.lr": 1.0, "optim.schedule": "cosine", "optim.warmup_steps": 10,
                   "train.steps": 100})
    model, _ = explorer.build(spec)
    optimizer, schedule = build_optimizer(model, spec.optim, spec.train.steps)
    lrs = []
    for _ in range(100):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[55] == pytest.approx(0.5, abs=0.02) and lrs[-1] < 0.01


def test_build_gives_a_module_and_batches():
    model, data = explorer.build(explorer.preset("tau-fig1-1/L"))
    x, y = data.batch(32)
    assert x.shape == (32, 64) and y.shape == (32,)
    assert model(x).shape == (32, 10)
    assert next(model.parameters()).device.type == ("cuda" if torch.cuda.is_available() else "cpu")


# Each preset's model, topology, init and optimizer, trained on a small sample of its own data (at most these
# many examples, characters and a batch this large); the data sets at full scale are checked by FULL_SCALE.
SMALL_DATA = {"data.n_train": 64, "data.n_val": 16, "data.max_chars": 20000, "data.val_fraction": 0.05,
              "train.batch_size": 16}


def small_data(spec: explorer.ExperimentSpec) -> dict:
    """The SMALL_DATA values that make `spec` smaller (a field it has, whose value is larger or unbounded)."""
    values = spec.to_dict()
    changes = {}
    for path, small in SMALL_DATA.items():
        section, field = path.split(".")
        value = values[section].get(field)
        if value is not None and (value > small or value == 0 and field == "max_chars"):
            changes[path] = small
    return changes


@pytest.mark.parametrize("name", list(explorer.registry("presets")))
def test_every_preset_trains_a_few_steps(name):
    spec = explorer.preset(name)
    small = spec.with_values({**small_data(spec), "train.steps": 3, "train.log_every": 3})
    assert small.model == spec.model and small.topology == spec.topology and small.init == spec.init
    run = explorer.train(small)
    assert run.status in ("finished", "diverged")
    assert len(run.history) >= 1 and math.isfinite(run.history[0]["loss"])


# one preset per data set of the presets, its data at full scale: the first of each, and for text the plain
# Transformer (the ANCRe cascades cost several times more per step)
FULL_SCALE = {"text": "dca-table7-transformer"}
for _name in explorer.registry("presets"):
    FULL_SCALE.setdefault(explorer.preset(_name).data.name, _name)


@pytest.mark.parametrize("name", sorted(FULL_SCALE.values()))
def test_a_preset_of_each_data_set_trains_at_full_data_scale(name):
    run = explorer.train(explorer.preset(name).with_values({"train.steps": 3, "train.log_every": 1}))
    assert run.status in ("finished", "diverged")
    assert [row["step"] for row in run.history] == [0, 1, 2, 3][:len(run.history)]
    assert math.isfinite(run.history[0]["loss"]) and math.isfinite(run.history[0]["val_loss"])


# every (model, topology example) pair the spec accepts, over the models of one stream of vectors
PAIRS = [(c.model, c.topology) for c in valid_combinations(vector_models())]
WIDTH = 16


def trained_spec(model: str, topology: dict) -> explorer.ExperimentSpec:
    """The model's example at width 16 (a data dimension tied to the width with it) on 64 training points."""
    raw = example_spec(model, topology, "kaiming", width=WIDTH)
    example = model_examples()[model]
    if example["data"].get("dim") == example["model"]["width"]:
        raw["data"]["dim"] = WIDTH
    dataset = explorer.registry("datasets")[raw["data"]["name"]]
    raw["data"].update({name: n for name, n in (("n_train", 64), ("n_val", 16)) if dataset.param(name)})
    return explorer.ExperimentSpec.from_dict({**raw, "optim": {"name": "adam", "lr": 0.01},
                                              "train": {"steps": 20, "log_every": 5, "batch_size": 16}})


@pytest.mark.parametrize("model, topology", PAIRS, ids=[f"{m}-{section_id(t)}" for m, t in PAIRS])
def test_every_topology_trains_on_every_model(model, topology):
    run = explorer.train(trained_spec(model, topology))
    assert run.status == "finished"
    assert run.history[-1]["loss"] < run.history[0]["loss"]


def test_live_probes_run_at_logged_steps_and_reach_the_listeners():
    spec = explorer.preset("ancre-fig2b-ancre").with_values({"train.steps": 20, "train.log_every": 5})
    seen = []
    run = explorer.train(spec, callbacks=[lambda e: seen.append((e.kind, e.step, sorted(e.probes)))],
                         probes={"coefficients": {}, "jacobian": {"k": 3}}, probe_every=10, probe_inputs=4)
    steps = [(row["step"], row["name"]) for row in run.probe_history]
    assert steps == [(0, "coefficients"), (0, "jacobian"), (10, "coefficients"), (10, "jacobian"),
                     (20, "coefficients"), (20, "jacobian")]
    assert ("log", 10, ["coefficients", "jacobian"]) in seen and ("log", 5, []) in seen
    first, last = run.probe_history[0]["result"]["own"], run.probe_history[-2]["result"]["own"]
    assert not np.allclose(first, last)  # ANCRe's coefficients moved while training
    assert run.probe_history[1]["result"]["singular_values"].shape == (4, 3)


def test_live_probes_refuse_unknown_names_before_training():
    with pytest.raises(explorer.SpecError) as err:
        explorer.train(explorer.preset("ancre-fig2b-ancre"), probes={"jacobain": {}})
    assert err.value.path == "probes"


def test_train_records_the_loss_it_diverged_at():
    run = explorer.train(explorer.preset("tau-fig1-1/L^0.25").with_values(
        {"model.depth": 30, "train.steps": 20, "train.log_every": 10}))
    assert run.status == "diverged"
    first = run.history[0]["loss"]
    assert not math.isfinite(run.diverged_loss) or run.diverged_loss > run.spec.train.diverge_factor * first
    assert run.summary()["diverged_loss"] == (run.diverged_loss if math.isfinite(run.diverged_loss) else None)


def test_an_optimizer_whose_statistics_break_ends_the_run_as_diverged():
    """SOAP factorises its gradient statistics (eigh); once they hold non-finite values the update is undefined:
    the run is diverged at the next step (its loss NaN), not a LinAlgError out of explorer.train."""
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "spirals", "n_train": 48, "n_val": 16}, "model": {"name": "mlp", "depth": 9, "width": 16},
        "init": {"name": "normal", "std": 8.56}, "optim": {"name": "soap", "lr": 21.63, "precondition_frequency": 4},
        "train": {"steps": 6, "batch_size": 16, "seed": 230, "log_every": 1}})
    run = explorer.train(spec)
    assert run.status == "diverged" and run.diverged_at is not None and run.diverged_at <= spec.train.steps
    assert run.history[-1]["step"] == run.diverged_at
