"""Probes on diverged, all-zero and degenerate models return what is defined and say what is not; the fuzzer
drives random, hostile and diverging specs through training and every probe without a raw exception."""

import json
import math

import numpy as np
import pytest
import torch

import explorer
from explorer import fuzz, plots
from explorer.probes import undefined, validation_tensors

DIVERGING = {"optim": {"name": "sgd", "lr": 1e3},  # a diverge_factor this large stops only at a non-finite loss
             "train": {"steps": 60, "log_every": 1, "diverge_factor": 1e300, "batch_size": 16}}
MLP = {"data": {"name": "spirals", "n_train": 32, "n_val": 16}, "model": {"name": "mlp", "depth": 3, "width": 8}}
VIT = {"data": {"name": "shapes", "size": 16, "n_train": 16, "n_val": 8},
       "model": {"name": "vit", "depth": 2, "width": 16, "heads": 2, "patch": 8, "norm": "none"}}
OPTIONS = {"param-jacobian": {"part": "mlp"}}  # the part every model has


def probe_all(model, data, inputs=4, x=None) -> dict:
    """{probe: its result} for every registered probe that applies to the model, on the first `inputs` validation
    examples (or `x`); the others must refuse with a SpecError. Each result's figures must draw, and every
    quantity it calls undefined must be in it."""
    results = {}
    x = data.x_val[:inputs] if x is None else x
    for name in explorer.registry("probes"):
        try:
            result = explorer.probe(model, x, name, **validation_tensors(name, data, len(x)), **OPTIONS.get(name, {}))
        except explorer.SpecError as error:
            assert error.path.startswith("probe") and "\n" not in error.message, error
            continue
        reasons = undefined(result)
        assert set(reasons) <= set(result), (name, reasons)
        assert all(why and "\n" not in why for why in reasons.values()), reasons
        figures = plots.probe_figures(name, result)
        assert figures and all(("undefined" in fig.layout.title.text) == bool(reasons) for fig in figures), name
        results[name] = result
    return results


def diverged(raw):
    run = explorer.train(explorer.ExperimentSpec.from_dict({**raw, **DIVERGING}))
    assert run.status == "diverged" and not math.isfinite(run.diverged_loss)
    return run


@pytest.mark.parametrize("raw", [MLP, VIT], ids=["mlp", "vit"])
def test_every_probe_on_a_diverged_run_returns_the_weights_and_marks_what_overflowed(raw):
    run = diverged(raw)
    results = probe_all(run.model, run.data)
    assert {"jacobian", "weights", "norms", "dead", "coefficients", "param-jacobian"} <= set(results)
    weights = results["weights"]
    assert (weights["nonfinite"] == 0).all() and np.isfinite(weights["singular_values"]).any(axis=1).all()
    assert not undefined(weights)  # the weights of this run are finite, only its activations overflow
    for name, result in results.items():
        for key in undefined(result):
            assert np.isnan(result[key]).any(), (name, key)  # NaN marks where it is undefined
    norms = results["norms"]
    overflowed = np.isnan(norms["output_norm"])
    assert overflowed.any() and "output_norm" in undefined(norms)
    assert np.isfinite(norms["output_norm"][~overflowed]).all()
    assert "chi" in undefined(results["jacobian"]) and "dead_weights" in undefined(results["dead"])


def test_non_finite_weights_leave_the_finite_matrices_measured():
    run = diverged(MLP)
    model = run.model
    with torch.no_grad():
        model.stack.blocks[1].inner.weight[0, 0] = math.nan
        model.stack.blocks[2].outer.weight[1, 1] = math.inf
    results = probe_all(model, run.data)
    weights = results["weights"]
    names = list(weights["names"])
    bad = [names.index("stack.blocks.1.inner.weight"), names.index("stack.blocks.2.outer.weight")]
    assert weights["nonfinite"][bad].tolist() == [1, 1]
    assert np.isnan(weights["singular_values"][bad]).all() and np.isnan(weights["rank"][bad]).all()
    good = [i for i in range(len(names)) if i not in bad]
    assert np.isfinite(weights["rank"][good]).all()
    params = dict(model.named_parameters())
    assert weights["rank"][good].tolist() == [np.linalg.matrix_rank(params[names[i]].detach().numpy()) for i in good]
    assert "2 of" in undefined(weights)["singular_values"] and "stack.blocks.1.inner.weight" in \
        undefined(weights)["singular_values"]
    assert undefined(results["param-jacobian"])  # the stack runs through the poisoned blocks


@pytest.mark.parametrize("raw", [MLP, VIT], ids=["mlp", "vit"])
def test_an_all_zero_model_has_no_relative_norms_and_no_condition_number(raw):
    model, data = explorer.build(explorer.ExperimentSpec.from_dict(raw))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    results = probe_all(model, data)
    weights = results["weights"]
    assert (weights["rank"] == 0).all() and not undefined(weights)  # zero matrices: rank 0, defined
    norms = undefined(results["norms"])
    assert {"relative_input_norm", "relative_output_norm"} <= set(norms) and "norm 0" in norms["relative_input_norm"]
    assert (results["norms"]["input_norm"] == 0).all()
    conditioning = results["param-jacobian"]
    assert np.isnan(conditioning["input_kappa"]) and "rank 0" in undefined(conditioning)["input_kappa"]


@pytest.mark.parametrize("raw", [MLP, VIT], ids=["mlp", "vit"])
def test_a_single_or_constant_input_is_probed(raw):
    model, data = explorer.build(explorer.ExperimentSpec.from_dict(raw))
    single = probe_all(model, data, inputs=1)
    assert single["jacobian"]["singular_values"].shape[0] == 1
    if "pca" in single:  # the dense probe needs 4 images: its score is undefined, the maps are not
        assert "miou" in undefined(single["pca"]) and "rgb" not in undefined(single["pca"])
    constant = probe_all(model, data, x=torch.zeros_like(data.x_val[:4]))
    assert np.isfinite(constant["jacobian"]["chi"]).all() and not undefined(constant["weights"])


def test_a_batch_without_examples_is_refused_with_a_spec_error():
    model, data = explorer.build(explorer.ExperimentSpec.from_dict(MLP))
    for inputs in (torch.tensor(1.0), data.x_val[:0]):
        with pytest.raises(explorer.SpecError) as error:
            explorer.probe(model, inputs, "norms")
        assert error.value.path == "inputs"


def test_the_fuzzer_meets_every_outcome_and_no_raw_exception():
    result = fuzz.fuzz(64, seed=0)
    assert result["raw_exceptions"] == [], fuzz.summary(result)
    counts = result["counts"]
    assert sum(counts[k] for k in ("refused", "trained", "diverged")) == result["specs"] == 64
    missing = [key for key in fuzz.OUTCOMES if key != "raw exceptions" and counts[key] == 0]
    assert not missing, fuzz.summary(result)  # the draw reaches refusals, divergence, and probes of each kind
    assert all(entry["example"] for entry in result["undefined"].values())
    json.dumps(result, default=repr)  # the report is written as JSON


def test_a_spec_draws_the_same_for_a_seed_and_index_and_stays_small():
    assert fuzz.draw(5, 17) == fuzz.draw(5, 17)
    assert [fuzz.draw(5, i) for i in range(5)] != [fuzz.draw(6, i) for i in range(5)]
    wide = explorer.ExperimentSpec.from_dict({"data": {"name": "whitened-regression", "dim": 8, "n_train": 5000},
                                              "model": {"name": "mlp", "depth": 40, "width": 512},
                                              "train": {"steps": 1000, "log_every": 500}})
    small = fuzz.small(wide)
    assert small.model.depth == fuzz.CAPS["depth"] and small.model.width == fuzz.CAPS["width"]
    assert small.data.n_train == fuzz.CAPS["n_train"] and small.train.steps == fuzz.CAPS["steps"]
    assert small.train.log_every <= small.train.steps and small.train.device == "cpu"
    resnet = explorer.ExperimentSpec.from_dict({"data": {"name": "digits-images"},
                                                "model": {"name": "resnet-cifar", "depth": 20}})
    assert fuzz.small(resnet).model.depth == 8  # 9, the cap, is no 6n+2: the next lower depth that is
