"""explorer.nn.reference computes what the models compute: for every registered model and topology the
reference forward, read from the built model's weights, gives the model's outputs and parameter gradients
(float64, every parameter perturbed so that no coefficient sits at its symmetric initial value)."""

import copy

import pytest
import torch

import explorer
from conftest import example_spec, model_examples, refusal, refused_combinations, section_id, valid_combinations
from explorer.nn import reference


def option_variants() -> list[tuple[str, dict]]:
    """Model options that take other paths through the reference: every value of each choice and bool parameter
    of each model other than its example's, one at a time, and two with every parameter moved at once (each
    to its first other value, each to its last)."""
    found = []
    for model, example in model_examples().items():
        others = {}
        for param in explorer.registry("models")[model].params:
            values = param.choices if param.kind == "choice" else (True, False) if param.kind == "bool" else ()
            current = example["model"].get(param.name, param.default)
            others[param.name] = [value for value in values if value != current]
        found += [(model, {name: value}) for name, values in others.items() for value in values]
        for pick in (0, -1):
            moved = {name: values[pick] for name, values in others.items() if values}
            if len(moved) > 1 and (model, moved) not in found:
                found.append((model, moved))
    return found


TOLERANCE = {"rtol": 1e-9, "atol": 1e-10}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: one thread


# every (model, topology example) pair the spec accepts; the others are checked to be refused in one line
PAIRS = [(c.model, c.topology) for c in valid_combinations()]
REFUSED = refused_combinations()


def build(model: str, topology: dict, seed: int = 0, init: str = "default", **model_values):
    """(spec, float64 model with every parameter perturbed, a few inputs)."""
    spec = explorer.ExperimentSpec.from_dict(example_spec(model, topology, init, **model_values))
    net, data = explorer.build(spec, device="cpu")
    net = net.double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    x = data.x_train[:3]
    return spec, net, x.double() if x.is_floating_point() else x


def gradients(output: torch.Tensor, net: torch.nn.Module, weights: torch.Tensor) -> list[torch.Tensor]:
    params = list(net.parameters())
    grads = torch.autograd.grad((output * weights).sum(), params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def assert_same(spec, net, x) -> None:
    """The reference's output and its gradients w.r.t. every parameter equal the model's."""
    out = net(x)
    ref = reference.forward(spec, net, x)
    torch.testing.assert_close(ref, out, **TOLERANCE)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    names = [name for name, _ in net.named_parameters()]
    for name, got, expected in zip(names, gradients(ref, net, weights), gradients(out, net, weights)):
        torch.testing.assert_close(got, expected, **TOLERANCE, msg=lambda m, name=name: f"gradient of {name}: {m}")


def test_every_model_and_topology_has_a_reference():
    topologies = [name for name in explorer.registry("topologies") if name not in reference.MIXINGS]
    assert not topologies, (f"no reference mixing for topologies {topologies}: write one in the topology's own file "
                            f"with @reference_mixing(name) from explorer.nn.reference")
    models = [name for name in explorer.registry("models") if name not in reference.FORWARDS]
    assert not models, (f"no reference forward for models {models}: write one with @reference_model(name) "
                        f"from explorer.nn.reference")


@pytest.mark.parametrize("model, topology", PAIRS, ids=[f"{m}-{section_id(t)}" for m, t in PAIRS])
def test_the_reference_is_the_model(model, topology):
    if topology["name"] not in reference.MIXINGS:
        pytest.fail(f"topology {topology['name']!r} has no reference mixing: write one in its own file with "
                    f"@reference_mixing({topology['name']!r}) from explorer.nn.reference")
    assert_same(*build(model, topology))


@pytest.mark.parametrize("combination", REFUSED, ids=lambda c: f"{c.model}-{section_id(c.topology)}")
def test_a_pair_the_spec_refuses_is_one_line_naming_a_field(combination):
    refused = combination.refused
    assert refused.path.split(".")[0] in ("model", "topology", "data", "init") and "\n" not in refused.message


VARIANTS = [(model, values, topology) for model, values in option_variants()
            for topology in ("cascaded", "ancre", "grn-v3", "dca")
            if refusal(example_spec(model, {"name": topology}, **values)) is None]


@pytest.mark.parametrize("model, values, topology", VARIANTS, ids=str)
def test_the_reference_follows_the_model_options(model, values, topology):
    assert_same(*build(model, {"name": topology}, **values))


def batch_norm_variant(model: str) -> dict:
    """The model's options with BatchNorm wherever a choice offers it (its other options as in its example)."""
    return {p.name: "batchnorm" for p in explorer.registry("models")[model].params
            if p.kind == "choice" and "batchnorm" in p.choices}


GATED = [(c.model, batch_norm_variant(c.model))
         for c in valid_combinations(topologies=[{"name": "cascaded"}], inits=["rezero"])]


@pytest.mark.parametrize("model, values", GATED, ids=str)
def test_gated_branches_and_eval_mode(model, values):
    """ReZero's gates multiply each branch; in eval mode BatchNorm reads its running averages."""
    spec, net, x = build(model, {"name": "cascaded"}, init="rezero", **values)
    net(x)  # a training-mode pass moves the running averages away from their initial values
    assert_same(spec, net.eval(), x)


def first_model(topology: dict) -> str:
    """The first registered model the spec accepts under this topology section."""
    return valid_combinations(topologies=[topology])[0].model


@pytest.mark.parametrize("topology", ["tau", "shortcuts", "ancre", "grn-v1", "grn-v3", "dca"])
def test_a_wrong_coefficient_is_seen(topology):
    """The comparison can fail: the reference read from a copy whose most influential topology coefficient
    moved by 1e-4 (for shortcuts: one shortcut left out) differs from the model."""
    section = {"name": topology, **({"learnable": True} if topology == "tau" else {})}
    spec, net, x = build(first_model(section), section)
    out = net(x)
    moved = copy.deepcopy(net)
    if topology == "shortcuts":
        moved.stack.topology.pairs = moved.stack.topology.pairs[1:]
    else:
        roles = explorer.roles(net)
        coefficients = {name: p for name, p in net.named_parameters() if roles[name] in ("mix", "scale")}
        grads = torch.autograd.grad(out.square().sum(), list(coefficients.values()))
        name, grad = max(zip(coefficients, grads), key=lambda item: item[1].abs().max())
        with torch.no_grad():
            moved.get_parameter(name).view(-1)[grad.abs().argmax()] += 1e-4
    with pytest.raises(AssertionError):
        torch.testing.assert_close(reference.forward(spec, moved, x), out, **TOLERANCE)


def test_a_wrong_mixing_fails_the_comparison(monkeypatch):
    """tau written as the plain residual (tau dropped) is caught, outputs and all."""
    spec, net, x = build(first_model({"name": "tau"}), {"name": "tau", "value": 0.5})
    assert_same(spec, net, x)
    monkeypatch.setitem(reference.MIXINGS, "tau", reference.MIXINGS["cascaded"])
    with pytest.raises(AssertionError):
        assert_same(spec, net, x)


def test_a_topology_without_a_reference_says_where_to_add_one():
    with pytest.raises(LookupError, match=r"@reference_mixing\('highway-to-nowhere'\)"):
        reference.mixing_of("highway-to-nowhere")
