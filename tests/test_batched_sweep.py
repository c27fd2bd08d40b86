"""Every model x topology example the registries give, trained as a stacked batch of two seeds, matches each
member's separate `explorer.train` run (history, status, final weights, and live probes); a model batched training
cannot stack (BatchNorm) is refused with a SpecError naming the field."""

from __future__ import annotations

import pytest
import torch

import explorer
from conftest import home_topology, section_id, valid_combinations
from explorer.batched import train_batched
from test_batched import assert_matches_separate

TRAIN = {"steps": 4, "log_every": 2, "batch_size": 8, "device": "cpu"}
# Plain SGD, whose update is the gradient: Adam would blow a gradient that is zero in exact arithmetic (a key's
# bias under the softmax) up from float noise into full-size steps, which differ between stacked and single runs.
OPTIM = {"name": "sgd", "lr": 0.05}
SMALL = {"n_train": 32, "n_val": 8}  # a data set that takes these sizes gets them


def seeds(raw: dict) -> list[explorer.ExperimentSpec]:
    """A combination's raw spec on a small sample of its data, trained a few steps, under seeds 0 and 1."""
    raw = {**raw, "data": dict(raw["data"]), "optim": dict(OPTIM), "train": dict(TRAIN)}
    dataset = explorer.registry("datasets")[raw["data"]["name"]]
    raw["data"].update({name: n for name, n in SMALL.items() if dataset.param(name)})
    spec = explorer.ExperimentSpec.from_dict(raw)
    return [spec.with_values({"train.seed": seed}) for seed in (0, 1)]


def batchnorm(spec: explorer.ExperimentSpec) -> bool:
    """Whether the spec's model has BatchNorm, which batched training refuses (it updates state in its forward)."""
    model, _ = explorer.build(spec)
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def fast_share(combinations) -> set[tuple[str, str]]:
    """(model, topology id) of the combinations the fast tier runs: each topology example on the first model that
    takes it, and each model on its home topology; the slow tier runs the others."""
    first = {}
    for c in combinations:
        first.setdefault(section_id(c.topology), c.model)
    return {(model, topology) for topology, model in first.items()} | \
        {(model, section_id(home_topology(model))) for model in explorer.registry("models")}


COMBINATIONS = valid_combinations()
FAST = fast_share(COMBINATIONS)
CASES = [pytest.param(c.raw, id=f"{c.model}-{section_id(c.topology)}",
                      marks=() if (c.model, section_id(c.topology)) in FAST else pytest.mark.slow)
         for c in COMBINATIONS]


@pytest.mark.parametrize("raw", CASES)
def test_each_batched_member_matches_its_separate_run(raw):
    specs = seeds(raw)
    if batchnorm(specs[0]):
        with pytest.raises(explorer.SpecError, match="BatchNorm") as refused:
            train_batched(specs)
        assert refused.value.path == "model.norm"
        return
    assert_matches_separate(specs)


@pytest.mark.parametrize("name", list(explorer.registry("probes")))
def test_batched_members_get_the_probe_results_of_their_separate_runs(name):
    """Each registered probe, live on a ViT with ANCRe: a model every probe reads (attention maps, patch tokens,
    learned coefficients)."""
    raw = next(c.raw for c in COMBINATIONS if c.model == "vit" and c.topology == {"name": "ancre"})
    runs = assert_matches_separate(seeds(raw), probes={name: {}}, probe_every=2, probe_inputs=2)
    assert [row["step"] for row in runs[0].probe_history] == [0, 2, 4]
