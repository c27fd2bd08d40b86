"""Init schemes: by role, per-role overrides, zero-initialised gates, and a sweep over the registry."""

import pytest
import torch

import explorer
from conftest import combinations, example_spec, home_topology

MODELS = explorer.registry("models")
INITS = explorer.registry("inits")


# every registered model's example under its home topology, with every registered scheme
SWEEP = [c for model in MODELS for c in combinations([model], [home_topology(model)], inits=None)]
RUNS = [(c.model, c.init) for c in SWEEP if c.refused is None]
REFUSED = [(c.model, c.init) for c in SWEEP if c.refused is not None]


def spec(model="mlp", init=None, topology=None, **train):
    raw = example_spec(model, topology or home_topology(model), init or {"name": "default"})
    return explorer.ExperimentSpec.from_dict({
        **raw, "optim": {"name": "adam", "lr": 0.01}, "train": {"steps": 10, "log_every": 5, "batch_size": 16, **train}})


@pytest.mark.parametrize("model, init", RUNS, ids=[f"{m}-{i}" for m, i in RUNS])
def test_every_scheme_runs_on_every_model(model, init):
    run = explorer.train(spec(model, {"name": init}))
    assert run.status in ("finished", "diverged")
    assert torch.isfinite(torch.tensor(run.history[0]["loss"]))


@pytest.mark.parametrize("model, init", REFUSED, ids=[f"{m}-{i}" for m, i in REFUSED])
def test_a_scheme_that_does_not_apply_says_so_at_init_name(model, init):
    """Only a scheme that declares a check (InitInfo.check) refuses a model, in one line naming init.name."""
    with pytest.raises(explorer.SpecError) as err:
        spec(model, {"name": init})
    assert err.value.path == "init.name" and "\n" not in err.value.message
    assert INITS[init].info.check is not None


def test_attention_schemes_apply_exactly_to_the_transformers():
    attention = {name for name, entry in INITS.items() if entry.info.attention is not None}
    assert attention, "no scheme fills attention modules"
    for model, init in RUNS + REFUSED:
        if init in attention:
            assert ((model, init) in RUNS) == MODELS[model].info.transformer, (model, init)


def test_gated_schemes_apply_exactly_where_there_is_a_skip_path():
    gated = {name for name, entry in INITS.items() if entry.info.gates}
    assert gated, "no scheme adds gates"
    for model, init in RUNS + REFUSED:
        if init in gated:
            residual = explorer.registry("topologies")[home_topology(model)["name"]].info.residual
            assert ((model, init) in RUNS) == residual, (model, init)


def test_overrides_give_a_role_another_scheme():
    model, _ = explorer.build(spec("mlp", {"name": "normal", "std": 0.5, "overrides": "head=orthogonal"}))
    head = model.head[1].weight
    assert torch.allclose(head @ head.T, torch.eye(head.shape[0]), atol=1e-5)  # orthogonal rows
    assert model.embed.weight.std().item() == pytest.approx(0.5, rel=0.3)  # the rest keeps the main scheme
    plain, _ = explorer.build(spec("mlp", {"name": "normal", "std": 0.5}))
    assert not torch.allclose(plain.head[1].weight @ plain.head[1].weight.T, torch.eye(head.shape[0]), atol=1e-2)


@pytest.mark.parametrize("overrides, fix", [("hed=orthogonal", "weight role"), ("head=nope", "valid names"),
                                            ("head=rezero", "init.name"), ("head orthogonal", "role=scheme")])
def test_bad_overrides_name_the_field(overrides, fix):
    with pytest.raises(explorer.SpecError) as err:
        spec("mlp", {"name": "default", "overrides": overrides})
    assert err.value.path == "init.overrides" and fix in err.value.message


@pytest.mark.parametrize("scheme", ["rezero", "skipinit"])
@pytest.mark.parametrize("topology", [{"name": "cascaded"}, {"name": "ancre"}, {"name": "grn-v1"}])
def test_zero_gates_make_each_residual_stack_the_identity_at_init(scheme, topology):
    model, data = explorer.build(spec("mlp", {"name": scheme}, topology))
    x0 = model.embed(data.x_train)
    with torch.no_grad():
        assert torch.allclose(model.stack(x0), x0, atol=1e-6)
    gates = [p for n, p in model.named_parameters() if explorer.roles(model)[n] == "scale"]
    assert len(gates) == len(model.stack.blocks)
    model(data.x_train).pow(2).sum().backward()
    assert all(g.grad is not None and g.grad.abs().item() > 0 for g in gates), "the gates must learn"


def test_gates_need_a_residual_topology():
    with pytest.raises(explorer.SpecError) as err:
        spec("mlp", {"name": "rezero"}, {"name": "none"})
    assert err.value.path == "init.name" and "topology" in err.value.message


def test_same_seed_same_weights_with_and_without_gates():
    plain, _ = explorer.build(spec("mlp", {"name": "default"}))
    gated, _ = explorer.build(spec("mlp", {"name": "rezero"}))
    gated_weights = {n.replace(".block.", "."): p for n, p in gated.named_parameters() if not n.endswith("alpha")}
    for name, p in plain.named_parameters():
        assert torch.equal(p, gated_weights[name]), name


def test_idinit_residual_mlp_is_the_identity_on_its_stems_at_init():
    model, data = explorer.build(spec("mlp", {"name": "idinit"}).with_values({"model.width": 16}))
    x0 = model.embed(data.x_train)
    with torch.no_grad():
        branch_outputs = [block(x0) for block in model.stack.blocks]
        out = model.stack(x0)
    scale = x0.abs().max().item()
    assert max(b.abs().max().item() for b in branch_outputs) < 1e-4 * scale  # IDIZ: O(eps) per branch
    assert torch.allclose(out, x0, atol=1e-4 * scale)
    first = model.stack.blocks[0].inner.weight  # stem.in: padded identity (hidden 32 x width 16, tau = 1)
    assert torch.allclose(first[:16], torch.eye(16), atol=1e-4) and torch.allclose(first[16:], torch.eye(16), atol=1e-4)


def test_fixup_scales_by_the_models_own_depth():
    for depth in (4, 16):
        s = spec("mlp", {"name": "fixup"}).with_values({"model.depth": depth, "model.width": 64, "model.norm": "none"})
        model, _ = explorer.build(s)
        inner = torch.cat([b.inner.weight.flatten() for b in model.stack.blocks])
        he = (2 / 64) ** 0.5
        assert inner.std().item() == pytest.approx(he * depth ** -0.5, rel=0.05), depth  # L^(-1/(2m-2)), m = 2
        assert all(torch.count_nonzero(b.outer.weight) == 0 for b in model.stack.blocks)
        assert torch.count_nonzero(model.head[1].weight) == 0


def test_trunc_normal_is_cutting_the_skips_default_init():
    """Cutting the Skip's "default" init: N(0, 0.02^2) truncated at +-2 std (its std is then 0.02 * 0.8796...)."""
    import math

    model, _ = explorer.build(explorer.preset("skip-table1-skip"))
    weights = torch.cat([p.detach().flatten() for n, role in explorer.roles(model).items()
                         for p in [dict(model.named_parameters())[n]] if role in ("embed", "attn.q", "stem.in", "head")])
    phi, mass = math.exp(-2) / math.sqrt(2 * math.pi), math.erf(2 / math.sqrt(2))
    expected_std = 0.02 * math.sqrt(1 - 2 * 2 * phi / mass)  # variance of a normal truncated at +-2 sigma
    assert weights.abs().max() <= 2 * 0.02 + 1e-7
    assert abs(weights.mean().item()) < 0.001 and abs(weights.std().item() / expected_std - 1) < 0.03
    skipless, _ = explorer.build(explorer.preset("skip-table1-skipless-init"))
    head = skipless.head[-1].weight  # the paper's init leaves the head at that default
    assert head.abs().max() <= 2 * 0.02 + 1e-7 and abs(head.std().item() / expected_std - 1) < 0.15
