"""The memory a spec's data and training need is estimated and capped before anything is
allocated (EXPLORER_MAX_DATA_MB, EXPLORER_MAX_MODEL_MB), in the API, the CLI and the app."""

import psutil
import pytest

import explorer
from explorer import budget
from explorer.cli import main

ISSUE_EXAMPLES = [  # the issue's inputs that exhausted memory, as --set changes on the default spec
    {"data.name": "identity", "data.dim": "4096", "data.n_train": "1000000", "model.width": "64"},
    {"data.name": "identity", "data.dim": "4096", "data.n_train": "50000"},
    {"model.depth": "10000", "model.width": "65536"},
    {"data.name": "shapes", "data.size": "128", "data.n_train": "200000", "model.name": "vit"},
]


@pytest.mark.parametrize("changes", ISSUE_EXAMPLES)
def test_the_api_refuses_before_allocating(changes):
    spec = explorer.ExperimentSpec.default().with_values(changes)
    rss = psutil.Process().memory_info().rss
    with pytest.raises(explorer.SpecError) as refused:
        explorer.build(spec)
    assert refused.value.path.split(".")[0] in ("data", "model")
    assert "EXPLORER_MAX_" in refused.value.message
    assert psutil.Process().memory_info().rss - rss < 200e6  # nothing of the GBs asked for was allocated


@pytest.mark.parametrize("changes", ISSUE_EXAMPLES)
def test_the_cli_refuses_in_one_line(capsys, changes):
    sets = [f"--set={key}={value}" for key, value in changes.items()]
    code = main(["train", "--preset", "tau-fig1-1/L", *sets, "--no-record", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "EXPLORER_MAX_" in err and "--max-" in err


def test_the_cli_flag_sets_the_cap(capsys, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_DATA_MB", "512")  # the flag sets it for the process: undone after the test
    short = ["--preset", "tau-fig1-1/L", "--set", "train.steps=2", "--set", "train.log_every=1", "--no-record",
             "--quiet"]
    code = main(["train", *short, "--set", "data.name=mnist1d", "--set", "data.num_samples=20000",
                 "--max-data-mb", "1"])
    _, err = capsys.readouterr()
    assert code == 2 and "data." in err and "limit of 1 MB" in err
    code = main(["train", *short, "--max-data-mb", "10"])
    capsys.readouterr()
    assert code == 0


def test_every_preset_fits_the_default_caps():
    for name in explorer.registry("presets"):
        budget.check(explorer.preset(name))


def test_the_estimate_is_not_below_what_is_allocated():
    spec = explorer.ExperimentSpec.default().with_values(
        {"data.name": "identity", "data.dim": 200, "data.n_train": 5000, "model.width": 64})
    _, data = explorer.build(spec)
    assert budget.data_bytes(spec) >= data.nbytes > 0.5 * budget.data_bytes(spec)


def test_a_misset_variable_is_a_spec_error(monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_DATA_MB", "lots")
    with pytest.raises(explorer.SpecError, match="EXPLORER_MAX_DATA_MB"):
        budget.check(explorer.ExperimentSpec.default())


def test_a_full_batch_optimizer_counts_the_whole_training_set():
    spec = explorer.ExperimentSpec.default().with_values(
        {"data.name": "text", "model.name": "gpt", "optim.name": "gd", "train.steps": 1, "train.log_every": 1,
         "train.batch_size": 1})
    rss = psutil.Process().memory_info().rss
    with pytest.raises(explorer.SpecError) as refused:
        explorer.build(spec)
    assert psutil.Process().memory_info().rss - rss < 200e6
    assert refused.value.path == "optim.name"
    for fix in ("whole training set", "data.max_chars", "optim.name=sgd", "model.width", "EXPLORER_MAX_MODEL_MB"):
        assert fix in refused.value.message
    budget.check(spec.with_values({"optim.name": "sgd"}))  # one window per step fits


def test_every_probe_declares_what_it_costs_on_every_model():
    """The budget asks each probe its cost (ProbeInfo.cost) and each model its positions (ModelInfo.positions):
    nothing is sized by a name, so every pair has a finite, positive estimate."""
    from test_budget_rss import spec_of

    probes = explorer.registry("probes")
    for model in explorer.registry("models"):
        spec = spec_of(model, "adam")
        costs = budget.probe_bytes(spec, {name: {} for name in probes}, 4)
        assert set(costs) == set(probes)
        for name, cost in costs.items():
            assert isinstance(cost, int) and 0 <= cost < 10**12, (model, name, cost)
        assert costs["norms"] > 0, model


def test_the_positions_a_model_declares_scale_its_estimate():
    """A ViT's activations grow with its tokens: halving the patch quadruples the patches it declares."""
    vit = explorer.ExperimentSpec.default().with_values({"model.name": "vit", "data.name": "shapes", "data.size": 16,
                                                         "model.width": 32, "model.depth": 2, "model.patch": 4})
    small, large = budget.activation_bytes(vit), budget.activation_bytes(vit.with_values({"model.patch": 2}))
    assert large > 3 * small


@pytest.mark.parametrize("kind, missing", [("probes", "cost"), ("models", "positions")])
def test_an_entry_that_does_not_say_what_it_costs_is_refused_when_it_registers(kind, missing):
    registry = explorer.registry(kind)
    with pytest.raises(TypeError, match=repr(missing)):
        registry.make_info("an-undeclared-entry", {"n_blocks": lambda p, t: 1} if kind == "models" else {})
