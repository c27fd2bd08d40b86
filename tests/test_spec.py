"""ExperimentSpec validation, round trips, editing, and the public registries."""

from __future__ import annotations

import json
import math

import pytest
import torch

import explorer
from explorer import ExperimentSpec, SpecError

PRESET_NAMES = list(explorer.registry("presets"))

# A spec that exercises non-default floats, bools, choices, rule strings and int fields.
CUSTOM_SPECS = {
    "floats-bools": {
        "data": {"name": "spirals", "n_train": 100, "n_val": 50, "turns": 2.5, "noise": 0.123456789},
        "model": {"name": "mlp", "depth": 3, "width": 16, "hidden_ratio": 1.37, "norm": "layernorm", "bias": False},
        "topology": {"name": "tau", "value": 0.3, "learnable": True},
        "init": {"name": "kaiming", "mode": "fan_out", "distribution": "uniform"},
        "optim": {"name": "sgd", "lr": 0.1234567891234, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-7},
        "train": {"steps": 37, "batch_size": 5, "seed": 12345, "log_every": 7, "diverge_factor": 123.456},
    },
    "rule-sqrt": {
        "model": {"name": "mlp-resnet", "depth": 5, "width": 8},
        "topology": {"name": "tau", "value": "1/sqrt(L)"},
    },
    "rule-quarter": {
        "model": {"name": "mlp-resnet", "depth": 5, "width": 8},
        "topology": {"name": "tau", "value": "1/L^0.25", "learnable": True},
        "optim": {"name": "adamw", "lr": 3e-4, "beta1": 0.85, "schedule": "cosine", "warmup_steps": 10},
    },
    "shortcuts-plus": {
        "data": {"name": "whitened-regression", "dim": 4, "n_train": 16, "n_val": 8, "rank": 2, "seed": 7},
        "model": {"name": "linear", "depth": 4, "width": 4},
        "topology": {"name": "shortcuts", "shortcuts": " 1:2+2:3, 0:4 "},
        "init": {"name": "normal", "std": 0.0123},
        "optim": {"name": "gd", "lr": 0.05},
    },
}


def _specs_for_round_trip():
    cases = [pytest.param(lambda: ExperimentSpec.default(), id="default")]
    cases += [pytest.param(lambda name=name: explorer.preset(name), id=f"preset:{name}") for name in PRESET_NAMES]
    cases += [pytest.param(lambda raw=raw: ExperimentSpec.from_dict(raw), id=key) for key, raw in CUSTOM_SPECS.items()]
    return cases


def _typed(value):
    """A nested structure with every leaf tagged by its exact type, so 1 != 1.0 != True."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return (type(value).__name__, repr(value))


# ---- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("make", _specs_for_round_trip())
@pytest.mark.parametrize(
    "to, back",
    [
        (lambda s: s.to_dict(), ExperimentSpec.from_dict),
        (lambda s: s.to_json(), ExperimentSpec.from_json),
        (lambda s: s.to_json(indent=None), ExperimentSpec.from_json),
        (lambda s: s.to_query(), ExperimentSpec.from_query),
    ],
    ids=["dict", "json", "json-compact", "query"],
)
def test_round_trip_is_exact(make, to, back):
    spec = make()
    again = back(to(spec))
    assert again == spec
    assert _typed(again.to_dict()) == _typed(spec.to_dict())  # same values *and* types


def test_presets_list_is_not_empty_and_each_preset_is_a_spec():
    assert PRESET_NAMES
    for name in PRESET_NAMES:
        assert isinstance(explorer.preset(name), ExperimentSpec)


def test_custom_spec_keeps_the_values_it_was_given():
    spec = ExperimentSpec.from_dict(CUSTOM_SPECS["floats-bools"])
    assert spec.optim.lr == 0.1234567891234
    assert spec.topology.value == 0.3 and isinstance(spec.topology.value, float)
    assert spec.topology.learnable is True
    assert spec.model.bias is False
    assert ExperimentSpec.from_dict(CUSTOM_SPECS["rule-sqrt"]).topology.value == "1/sqrt(L)"
    # the non-default values make it into the compact query
    query = spec.to_query()
    assert "optim.lr=0.1234567891234" in query
    assert "topology.value=0.3" in query


def test_default_query_is_empty_and_parses_to_default():
    spec = ExperimentSpec.default()
    assert spec.to_query() == ""
    assert ExperimentSpec.from_query("") == spec


def test_from_query_accepts_a_mapping_and_leading_question_mark():
    import urllib.parse

    spec = ExperimentSpec.from_dict(CUSTOM_SPECS["floats-bools"])
    query = spec.to_query()
    assert ExperimentSpec.from_query("?" + query) == spec
    mapping = {k: [v] for k, v in urllib.parse.parse_qsl(query)}
    assert ExperimentSpec.from_query(mapping) == spec


def test_default_spec_validates_and_to_json_is_plain_json():
    spec = ExperimentSpec.default()
    raw = json.loads(spec.to_json())
    assert set(raw) == {"data", "model", "topology", "init", "optim", "train"}
    assert ExperimentSpec.from_dict(raw) == spec
    # default() is the spec of an empty description
    assert ExperimentSpec.from_dict({}) == spec == ExperimentSpec.from_dict(None)


# ---- dotted paths --------------------------------------------------------------------

REQUIRED_PATHS = [
    "data.name", "model.name", "model.depth", "model.width", "topology.name", "init.name",
    "optim.name", "optim.lr", "train.steps", "train.batch_size", "train.seed", "train.device",
]


@pytest.mark.parametrize("path", REQUIRED_PATHS)
def test_required_paths_are_readable(path):
    spec = explorer.preset("ancre-fig2b-0:2")
    section, key = path.split(".")
    expected = getattr(spec, section).name if key == "name" else getattr(spec, section).params[key]
    assert spec.get(path) == expected
    assert spec.get(path) == spec.to_dict()[section][key]


def test_get_reflects_with_values():
    spec = ExperimentSpec.default().with_values({"model.depth": 5, "optim.lr": 0.25, "train.device": "cpu"})
    assert spec.get("model.depth") == 5
    assert spec.get("optim.lr") == 0.25
    assert spec.get("train.device") == "cpu"


@pytest.mark.parametrize("path", ["bogus.x", "model.bogus", "train.name"])
def test_get_unknown_path_raises(path):
    with pytest.raises(SpecError) as info:
        ExperimentSpec.default().get(path)
    assert info.value.path == path


# ---- registries ----------------------------------------------------------------------

KINDS = ["datasets", "models", "topologies", "inits", "optimizers", "presets"]


@pytest.mark.parametrize("kind", KINDS)
def test_registry_has_names_with_one_line_descriptions(kind):
    described = explorer.registry(kind).describe()
    assert described, kind
    for name, description in described.items():
        assert isinstance(name, str) and name
        assert isinstance(description, str) and description.strip()
        assert "\n" not in description, f"{kind}/{name} description is not one line"
    assert list(described) == list(explorer.registry(kind))


def test_registry_required_names():
    topologies = set(explorer.registry("topologies"))
    assert {"none", "cascaded", "tau", "shortcuts", "ancre", "grn-v1", "grn-v2", "grn-v3"} <= topologies
    assert {"linear", "lowrank", "mlp-resnet", "mlp"} <= set(explorer.registry("models"))


def test_registry_unknown_kind_raises():
    with pytest.raises(SpecError) as info:
        explorer.registry("bogus")
    for kind in KINDS:
        assert kind in info.value.message


# ---- SpecError cases -----------------------------------------------------------------

def _ancre():
    return explorer.preset("ancre-fig2b-0:2")  # linear, depth 3, width 8, whitened d = 8


def _dca_grn():
    return explorer.preset("dca-fig1a-grn-v1")  # lowrank, depth 10, width 100, rank 3, identity d = 100


def _tau():
    return explorer.preset("tau-fig1-1/L")  # mlp-resnet depth 10


def _default():
    return ExperimentSpec.default()


ERROR_CASES = [
    # (id, base spec (None = from_dict), changes, expected path, substrings of the message)
    ("unknown-section", None, {"bogus": {}}, "bogus", ["data", "model", "topology", "init", "optim", "train"]),
    ("unknown-model-name", None, {"model": {"name": "resnet"}}, "model.name",
     ["linear", "lowrank", "mlp-resnet", "mlp"]),
    ("unknown-topology-name", _default, {"topology.name": "grn-v9"}, "topology.name",
     ["none", "cascaded", "tau", "shortcuts", "ancre", "grn-v1"]),
    ("unknown-param", None, {"model": {"depht": 3}}, "model.depht", ["'depth'"]),
    ("unknown-param-optim", _default, {"optim.lrr": 0.1}, "optim.lrr", ["'lr'"]),
    ("depth-0", _default, {"model.depth": 0}, "model.depth", ["at least 1"]),
    ("lr-negative", _default, {"optim.lr": -1}, "optim.lr", ["at least 0"]),
    ("lr-nan", _default, {"optim.lr": float("nan")}, "optim.lr", ["finite"]),
    ("lr-inf-string", _default, {"optim.lr": "inf"}, "optim.lr", ["finite"]),
    ("lr-inf-float", _default, {"optim.lr": float("inf")}, "optim.lr", ["finite"]),
    ("int-nan", _default, {"train.steps": float("nan")}, "train.steps", ["integer"]),
    ("int-abc", _default, {"model.depth": "abc"}, "model.depth", ["integer", "'abc'"]),
    ("int-1.5", _default, {"model.depth": 1.5}, "model.depth", ["integer", "1.5"]),
    ("int-bool", _default, {"model.depth": True}, "model.depth", ["integer"]),
    ("bool-maybe", _default, {"model.bias": "maybe"}, "model.bias", ["true or false", "'maybe'"]),
    ("choice-bad", _default, {"train.device": "tpu"}, "train.device", ["auto", "cpu", "cuda"]),
    ("rule-bad", _default, {"topology.name": "tau", "topology.value": "1/L^2"}, "topology.value",
     ["1/L", "1/sqrt(L)", "1/L^0.25"]),
    ("shortcut-past-end", _ancre, {"topology.shortcuts": "0:5"}, "topology.shortcuts", ["0 <= i < j <= 3"]),
    ("shortcut-malformed", _ancre, {"topology.shortcuts": "0-2"}, "topology.shortcuts", ["'0:2'"]),
    ("shortcut-backwards", _ancre, {"topology.shortcuts": "2:1"}, "topology.shortcuts", ["i < j"]),
    ("linear-width", _ancre, {"model.width": 16}, "model.width", ["model.width=8"]),
    ("lowrank-width", _dca_grn, {"model.width": 50}, "model.width", ["model.width=100"]),
    ("lowrank-rank", _dca_grn, {"model.rank": 101}, "model.rank", ["at most 100"]),
    ("mlp-resnet-depth-1", _tau, {"model.depth": 1}, "model.depth", ["model.depth=2"]),
    ("grn-k", _dca_grn, {"topology.k": 11}, "topology.k", ["1..10"]),
    ("log-every", _default, {"train.log_every": 300}, "train.log_every", ["200 or less"]),
    ("batchnorm-batch-1", _default, {"model.norm": "batchnorm", "train.batch_size": 1}, "train.batch_size",
     ["train.batch_size=2"]),
    ("train-name", _default, {"train.name": "x"}, "train.name", ["no name"]),
    ("train-name-dict", None, {"train": {"name": "x"}}, "train.name", ["no name", "remove"]),
    ("classification-linear", _default, {"model.name": "linear"}, "model.name",
     ["whitened-regression", "identity", "affine"]),
    ("section-not-object", None, {"model": 3}, "model", ["object"]),
    ("with-values-no-dot", _default, {"model": 3}, "model", ["section.parameter"]),
]


@pytest.mark.parametrize("base, changes, path, needles", [pytest.param(*c[1:], id=c[0]) for c in ERROR_CASES])
def test_spec_errors_name_the_path_and_the_fix(base, changes, path, needles):
    with pytest.raises(SpecError) as info:
        if base is None:
            ExperimentSpec.from_dict(changes)
        else:
            base().with_values(changes)
    err = info.value
    assert err.path == path
    for needle in needles:
        assert needle in err.message, f"{needle!r} not in {err.message!r}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: device 'cuda' is valid here")
def test_cuda_device_without_cuda_is_an_error():
    with pytest.raises(SpecError) as info:
        ExperimentSpec.default().with_values({"train.device": "cuda"})
    assert info.value.path == "train.device"
    assert "cpu" in info.value.message and "auto" in info.value.message


def test_valid_edge_values_are_accepted():
    """The boundaries the errors above point to are themselves valid (the fix works)."""
    ExperimentSpec.default().with_values({"model.depth": 1, "optim.lr": 0.0, "train.log_every": 200})
    _ancre().with_values({"topology.shortcuts": "0:3"})
    _dca_grn().with_values({"topology.k": 10, "model.rank": 100})
    _tau().with_values({"model.depth": 2})
    ExperimentSpec.default().with_values({"model.norm": "batchnorm", "train.batch_size": 2})
    # full-batch optimizers ignore batch_size, so batchnorm with batch_size 1 is fine there
    ExperimentSpec.default().with_values({"model.norm": "batchnorm", "train.batch_size": 1, "optim.name": "gd"})


def test_spec_error_is_value_error_and_str_starts_with_path():
    with pytest.raises(ValueError) as info:
        ExperimentSpec.default().with_values({"model.depth": 0})
    err = info.value
    assert isinstance(err, SpecError)
    assert str(err).startswith("model.depth")
    assert str(err) == f"{err.path}: {err.message}"


def test_range_error_states_the_exact_bound():
    with pytest.raises(SpecError) as info:
        ExperimentSpec.default().with_values({"train.seed": 2**31})
    assert info.value.path == "train.seed"
    assert str(2**31 - 1) in info.value.message
    assert str(2**31) in info.value.message


# ---- with_values ---------------------------------------------------------------------


def test_with_values_parses_strings_with_the_parameter_type():
    spec = ExperimentSpec.default().with_values({
        "model.depth": "30", "optim.lr": "0.5", "model.bias": "false", "train.device": "cpu", "model.norm": "layernorm",
    })
    assert spec.model.depth == 30 and type(spec.model.depth) is int
    assert spec.optim.lr == 0.5 and type(spec.optim.lr) is float
    assert spec.model.bias is False
    assert spec.train.device == "cpu"
    assert spec.model.norm == "layernorm"
    tau = spec.with_values({"topology.name": "tau", "topology.value": "0.3", "topology.learnable": "true"})
    assert tau.topology.value == 0.3 and type(tau.topology.value) is float
    assert tau.topology.learnable is True
    assert spec.with_values({"topology.name": "tau", "topology.value": "1/L"}).topology.value == "1/L"


def test_with_values_returns_new_spec_and_leaves_original():
    spec = ExperimentSpec.default()
    before = spec.to_json()
    changed = spec.with_values({"model.depth": 3})
    assert spec.to_json() == before
    assert changed.model.depth == 3 and spec.model.depth != 3


def test_changing_section_name_resets_its_params_to_new_defaults():
    tau_defaults = explorer.registry("topologies")["tau"].defaults()
    ancre_defaults = explorer.registry("topologies")["ancre"].defaults()
    spec = ExperimentSpec.default().with_values({
        "topology.name": "tau", "topology.value": 0.3, "topology.learnable": True, "model.depth": 5,
    })
    assert dict(spec.topology.params) == {**tau_defaults, "value": 0.3, "learnable": True}

    ancre = spec.with_values({"topology.name": "ancre"})
    assert ancre.topology.name == "ancre"
    assert dict(ancre.topology.params) == ancre_defaults
    assert ancre.model.depth == 5  # other sections untouched

    back = ancre.with_values({"topology.name": "tau"})
    assert dict(back.topology.params) == tau_defaults  # 0.3 and learnable=True are gone


@pytest.mark.parametrize("order", ["name-first", "value-first"])
def test_changing_name_keeps_params_given_in_the_same_call(order):
    items = [("topology.name", "tau"), ("topology.value", "0.7")]
    if order == "value-first":
        items.reverse()
    spec = explorer.preset("ancre-fig2b-ancre").with_values(dict(items))
    assert spec.topology.name == "tau"
    assert spec.topology.value == 0.7
    assert spec.topology.learnable == explorer.registry("topologies")["tau"].defaults()["learnable"]


def test_changing_model_name_resets_model_params():
    spec = ExperimentSpec.default().with_values({"model.depth": 3, "model.hidden_ratio": 4.0})
    resnet = spec.with_values({"model.name": "mlp-resnet"})
    assert dict(resnet.model.params) == explorer.registry("models")["mlp-resnet"].defaults()
    kept = spec.with_values({"model.name": "mlp-resnet", "model.depth": 4})
    assert kept.model.depth == 4
    assert kept.model.width == explorer.registry("models")["mlp-resnet"].defaults()["width"]


def test_values_are_finite_after_validation():
    spec = ExperimentSpec.from_dict(CUSTOM_SPECS["floats-bools"])
    for section in spec.to_dict().values():
        for value in section.values():
            if isinstance(value, float):
                assert math.isfinite(value)


@pytest.mark.parametrize("text, path", [
    ('{"model": {"name": "mlp", "width": ' + "1" * 4301 + "}}", "model.width"),
    ('{"train": {"steps": -' + "9" * 6000 + "}}", "train.steps"),
    ('{"topology": {"name": "tau", "value": [1, ' + "2" * 5000 + "]}}", "topology.value[1]"),
])
def test_a_number_past_pythons_digit_limit_names_its_field(text, path):
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.from_json(text)
    assert refused.value.path == path
    assert "digits" in refused.value.message and "use a value in" in refused.value.message
    assert "sys." not in str(refused.value) and "int_max_str_digits" not in str(refused.value)


# ---- well-formed (a stored spec) vs runnable here ---------------------------------------------------------

def _on_cuda(**train):
    raw = ExperimentSpec.default().to_dict()
    raw["train"].update(device="cuda", **train)
    return raw


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: device 'cuda' runs here")
def test_a_stored_cuda_spec_loads_and_says_what_stops_it_here():
    raw = _on_cuda()
    with pytest.raises(SpecError) as new:
        ExperimentSpec.from_dict(raw)
    assert new.value.path == "train.device"
    stored = ExperimentSpec.from_dict(raw, runnable=False)
    assert stored.to_dict() == raw
    for device in (None, "cuda", "cuda:1", torch.device("cuda")):
        with pytest.raises(SpecError) as refused:
            stored.check_runnable(device)
        assert refused.value.path == "train.device" and "\n" not in str(refused.value)
        assert "cpu" in refused.value.message
    for device in ("cpu", "auto", torch.device("cpu")):
        stored.check_runnable(device)
    assert stored.train.device == "cuda"  # asking about another device leaves the spec as stored
    assert stored.with_values({"train.device": "cpu"}).train.device == "cpu"  # the fix, applied, is a new spec


@pytest.mark.parametrize("train, path", [({"log_every": 500}, "train.log_every"), ({"steps": 0}, "train.steps"),
                                         ({"stepz": 3}, "train.stepz")])
def test_a_stored_spec_is_still_checked_for_form(train, path):
    """Only what depends on this machine is left out: a cuda spec with a form error names the form error."""
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.from_dict(_on_cuda(**train), runnable=False)
    assert refused.value.path == path


def test_a_stored_spec_on_a_missing_data_folder_loads_and_names_data_path(tmp_path):
    raw = {"data": {"name": "mnist", "path": str(tmp_path / "gone")}, "model": {"name": "mlp", "depth": 2}}
    with pytest.raises(SpecError) as new:
        ExperimentSpec.from_dict(raw)
    assert new.value.path == "data.path"
    stored = ExperimentSpec.from_dict(raw, runnable=False)
    assert stored.data.path == str(tmp_path / "gone")
    with pytest.raises(SpecError) as refused:
        stored.check_runnable(device="cpu")
    assert refused.value.path == "data.path" and "\n" not in str(refused.value)


def test_a_stored_spec_naming_an_unregistered_entry_is_one_line_at_its_name():
    raw = {"model": {"name": "retired-model", "depth": 2}}
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.from_dict(raw, runnable=False)
    assert refused.value.path == "model.name" and "\n" not in str(refused.value)
    assert "retired-model" in refused.value.message and "registered" in refused.value.message


def test_check_runnable_refuses_a_device_a_spec_cannot_name():
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.default().check_runnable("tpu")
    assert refused.value.path == "device" and "auto, cpu, cuda" in refused.value.message


# ---- batch norm needs two values per channel in every batch ----------------------------------------

_AFFINE_BN = {"data.name": "affine", "data.dim": 4, "data.n_val": 4, "model.norm": "batchnorm", "model.depth": 2,
              "model.width": 4, "train.steps": 2, "train.log_every": 1}


@pytest.mark.parametrize("changes, path", [
    ({"data.n_train": 1}, "data.n_train"),  # min(batch_size=128, n_train=1) = 1
    ({"data.n_train": 1, "train.batch_size": 1}, "data.n_train"),
    ({"data.n_train": 1, "optim.name": "gd"}, "data.n_train"),  # full batch: the whole training set, 1 example
    ({"data.n_train": 2, "train.batch_size": 1}, "train.batch_size"),
], ids=["n_train-1", "both-1", "full-batch-n_train-1", "batch_size-1"])
def test_batch_norm_with_batches_of_one_example_is_refused_naming_the_field(changes, path):
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.default().with_values({**_AFFINE_BN, **changes})
    message = str(refused.value)
    assert refused.value.path == path and "\n" not in message
    assert f"set {path}" in message and "model.norm" in message and "2 or more" in message


def test_batch_norm_trains_with_the_smallest_batch_it_accepts():
    """Two training examples (batches of 2) train; so does a CIFAR ResNet on one image, whose batch norms
    normalise over every pixel of the feature maps as well."""
    run = explorer.train(ExperimentSpec.default().with_values({**_AFFINE_BN, "data.n_train": 2}))
    assert run.status == "finished"
    images = ExperimentSpec.default().with_values({
        "data.name": "shapes", "data.size": 16, "data.n_train": 1, "data.n_val": 2, "model.name": "resnet-cifar",
        "model.depth": 8, "model.width": 4, "train.steps": 2, "train.log_every": 1})
    assert explorer.train(images).status == "finished"


def test_the_fuzzers_batch_norm_spec_on_one_example_is_refused():
    """A spec the fuzzer drew (seed 404, spec 355, before the registries grew): it trained into torch's
    "Expected more than 1 value per channel when training"."""
    drawn = {"data": {"name": "affine", "dim": 100, "n_train": 1, "n_val": 1000},
             "model": {"name": "mlp", "width": 1214, "hidden_ratio": 2.0, "norm": "batchnorm", "bias": True},
             "topology": {"name": "ancre", "normalization": "ingoing"}, "init": {"name": "rezero"},
             "optim": {"name": "adagrad", "weight_decay": 0.0, "warmup_steps": 0},
             "train": {"batch_size": 128, "device": "cpu", "log_every": 2}}
    with pytest.raises(SpecError) as refused:
        ExperimentSpec.from_dict(drawn)
    assert refused.value.path == "data.n_train" and "batch norm" in refused.value.message


def test_the_train_page_refuses_batch_norm_on_one_example_in_one_line(open_page):
    from conftest import plain

    at = open_page("train", query={"data": "affine", "model.norm": "batchnorm"})
    at.number_input(key="spec:data.affine.n_train").set_value(1).run()
    assert not at.exception
    shown = [plain(e.value) for e in at.error if "data.n_train" in plain(e.value)]
    assert shown and all("\n" not in m.strip() and "batch norm" in m and "model.norm" in m for m in shown), shown
    assert at.button(key="train-start").disabled
    linked = open_page("train", query={"data": "affine", "data.n_train": "1", "model.norm": "batchnorm"})
    assert not linked.exception
    assert len([e for e in linked.error if "data.n_train" in plain(e.value)]) == 1  # the link's one line
