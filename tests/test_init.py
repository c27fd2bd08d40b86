"""Init schemes: by role, per-role overrides, zero-initialised gates, and a sweep over the registry."""

import pytest
import torch

import explorer

# every registered model's own tiny spec (ModelInfo.example): (model section, data section)
VECTOR_MODELS = {name: ({"name": name, **entry.info.example["model"]}, dict(entry.info.example["data"]))
                 for name, entry in explorer.registry("models").items()}
# (model, scheme) pairs that do not apply, and must say so with a SpecError at init.name
ATTENTION_SCHEMES = ("mimetic", "skipless")
NOT_APPLICABLE = {("allconv", "rezero"), ("allconv", "skipinit")} | {
    (model, "zero-gamma") for model in ("linear", "lowrank", "mlp-resnet", "mlp", "allconv", "gpt", "vit")} | {
    (model, scheme) for model in ("linear", "lowrank", "mlp-resnet", "mlp", "resnet-cifar", "allconv")
    for scheme in ATTENTION_SCHEMES}


def spec(model="mlp", init=None, topology=None, **train):
    model_section, data = VECTOR_MODELS[model]
    topology = topology or {"name": "none" if model == "allconv" else "cascaded"}
    return explorer.ExperimentSpec.from_dict({
        "data": data, "model": model_section, "init": init or {"name": "default"},
        "topology": topology, "optim": {"name": "adam", "lr": 0.01},
        "train": {"steps": 10, "log_every": 5, "batch_size": 16, **train}})


@pytest.mark.parametrize("init", list(explorer.registry("inits")))
@pytest.mark.parametrize("model", list(VECTOR_MODELS))
def test_every_scheme_runs_on_every_model(model, init):
    if (model, init) in NOT_APPLICABLE:
        with pytest.raises(explorer.SpecError) as err:
            spec(model, {"name": init})
        assert err.value.path == "init.name"
        return
    run = explorer.train(spec(model, {"name": init}))
    assert run.status in ("finished", "diverged")
    assert torch.isfinite(torch.tensor(run.history[0]["loss"]))


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
