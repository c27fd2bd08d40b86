"""Probes: each against a direct computation on a small model."""

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import explorer
from explorer import plots
from explorer.probes import PROBES, probe, validation_tensors
from explorer.topology import DCA

LINEAR = {"data": {"name": "whitened-regression", "dim": 6, "n_train": 12, "n_val": 8, "rank": 3},
          "model": {"name": "linear", "depth": 4, "width": 6}, "init": {"name": "normal", "std": 0.3}}
MLP_RESNET = {"data": {"name": "spirals", "n_train": 32, "n_val": 16},
              "model": {"name": "mlp-resnet", "depth": 5, "width": 6}, "init": {"name": "kaiming"}}
MLP = {"data": {"name": "spirals", "n_train": 32, "n_val": 16},
       "model": {"name": "mlp", "depth": 3, "width": 6}, "init": {"name": "kaiming"}}
VIT = {"data": {"name": "shapes", "size": 16, "n_train": 16, "n_val": 8},
       "model": {"name": "vit", "depth": 2, "width": 32, "heads": 2, "patch": 4}}


def build(raw, **changes):
    return explorer.build(explorer.ExperimentSpec.from_dict({**raw, **changes}))


def dense_stack_singular_values(model, inputs, per_row=False):
    """Reference: one dense autograd Jacobian of f(x0) = model.stack(x0) per input, then svdvals."""
    model.eval()
    with torch.no_grad():
        x0 = model.embed(inputs)
    shape = x0.shape[1:]
    values = []
    for x in x0:
        def f(z):
            return model.stack(z.view(1, *shape)).reshape(-1)

        if per_row:
            # One fresh forward per row: the Mixer fast path (ANCRe, GRN-v1) gives wrong gradients on a
            # second backward through a retained graph, which autograd.functional.jacobian relies on.
            rows = []
            for i in range(x.numel()):
                z = x.flatten().clone().requires_grad_()
                rows.append(torch.autograd.grad(f(z)[i], z)[0])
            jac = torch.stack(rows)
        else:
            with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel's repeated backward is slow
                jac = torch.autograd.functional.jacobian(f, x.flatten())
        values.append(torch.linalg.svdvals(jac.double()))
    return torch.stack(values).numpy()


# --------------------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------------------
SMALL_MODELS = (MLP, VIT)  # every registered probe applies to one of these at least


def applicable(name):
    """(model, inputs, tensor options) of the first small model probe `name` applies to (a probe that does not
    apply raises a SpecError on `probe`), and its result there."""
    for raw in SMALL_MODELS:
        model, data = build(raw)
        x = data.x_val[:8]
        tensors = validation_tensors(name, data, len(x))
        try:
            return model, x, tensors, probe(model, x, name, **tensors)
        except explorer.SpecError as error:
            assert error.path.startswith("probe"), error
    pytest.fail(f"probe {name!r} applies to none of the small models; add one it applies to to SMALL_MODELS")


@pytest.mark.parametrize("name", list(explorer.registry("probes")))
def test_every_probe_declares_its_options_and_returns_numpy_arrays(name):
    entry = explorer.registry("probes")[name]
    assert entry is PROBES[name] and entry.description
    assert all(p.coerce(p.default, f"probe.{p.name}") == p.default for p in entry.params)
    _, _, _, result = applicable(name)
    assert result and all(isinstance(key, str) and isinstance(v, np.ndarray) for key, v in result.items())


def test_bad_names_and_options_raise_spec_errors():
    model, data = build(LINEAR)
    x = data.x_val[:2]
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "jacobain")
    assert error.value.path == "probe" and "jacobian" in error.value.message and "coefficients" in error.value.message
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "jacobian", k=-1)
    assert error.value.path == "probe.k" and "at least 0" in error.value.message
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "jacobian", max_input=2)
    assert error.value.path == "probe.max_input" and "max_inputs" in error.value.message
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "dead", task="ranking")
    assert error.value.path == "probe.task" and "classification" in error.value.message
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "dead", targets=[1.0, 2.0])
    assert error.value.path == "probe.targets"
    with pytest.raises(explorer.SpecError) as error:
        probe(model, x, "attention")
    assert error.value.path == "probe" and "needs a Transformer (gpt or vit)" in error.value.message


@pytest.mark.parametrize("name", list(explorer.registry("probes")))
def test_probes_restore_the_mode_and_leave_gradients_alone(name):
    model, x, tensors, _ = applicable(name)
    model.train()
    model.head.eval()  # a mixed state comes back as it was
    modes = {key: module.training for key, module in model.named_modules()}
    first, *others = model.parameters()
    marker = torch.ones_like(first)
    first.grad = marker
    probe(model, x, name, **tensors)
    assert {key: module.training for key, module in model.named_modules()} == modes
    assert first.grad is marker and all(p.grad is None for p in others)


# --------------------------------------------------------------------------------------
# jacobian
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, changes", [
    (LINEAR, {}),
    (MLP_RESNET, {}),
    (LINEAR, {"topology": {"name": "ancre"}}),
    (MLP, {"topology": {"name": "grn-v3"}}),
], ids=["linear", "mlp-resnet", "ancre", "grn-v3"])
def test_jacobian_matches_a_dense_autograd_jacobian(raw, changes):
    model, data = build(raw, **changes)
    topology = model.stack.topology
    with torch.no_grad():  # move off the symmetric initial point so the mixing weights matter
        for name, p in topology.named_parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    x = data.x_val[:5]
    result = probe(model, x, "jacobian", max_inputs=3)
    expected = dense_stack_singular_values(model, x[:3], per_row=True)
    assert result["singular_values"].shape == expected.shape == (3, 6)
    np.testing.assert_allclose(result["singular_values"], expected, rtol=1e-5, atol=1e-6 * expected.max())
    np.testing.assert_allclose(result["chi"], (expected ** 2).mean(1), rtol=1e-5)
    top = probe(model, x, "jacobian", max_inputs=3, k=2)
    np.testing.assert_allclose(top["singular_values"], result["singular_values"][:, :2])
    np.testing.assert_allclose(top["chi"], result["chi"])


def test_jacobian_of_a_cascaded_linear_net_is_the_product_of_identity_plus_weights():
    model, data = build(LINEAR)
    product = torch.eye(6, dtype=torch.float64)
    for block in model.stack.blocks:
        product = (torch.eye(6, dtype=torch.float64) + block.weight.detach().double()) @ product
    result = probe(model, data.x_val, "jacobian", max_inputs=2)
    expected = torch.linalg.svdvals(product).numpy()
    np.testing.assert_allclose(result["singular_values"], np.stack([expected, expected]), rtol=1e-5)


def test_jacobian_of_a_vit_covers_the_block_stack_only():
    model, data = build(VIT, model={**VIT["model"], "width": 8, "patch": 8})
    x = data.x_val[:2]
    result = probe(model, x, "jacobian")
    tokens, width = 5, 8  # 4 patches and the class token: the stream, not the image nor the logits
    assert result["singular_values"].shape == (2, tokens * width)
    expected = dense_stack_singular_values(model, x)
    np.testing.assert_allclose(result["singular_values"], expected, rtol=1e-5, atol=1e-5 * expected.max())


# --------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------
def test_weights_match_numpy_rank_and_svd():
    model, data = build(MLP, init={"name": "idinit"})
    result = probe(model, data.x_val, "weights")
    roles = explorer.roles(model)
    params = dict(model.named_parameters())
    expected = [n for n in params if roles[n] in explorer.nn.base.WEIGHT_ROLES]
    assert list(result["names"]) == expected
    width = max(min(params[n].shape) for n in expected)
    assert result["singular_values"].shape == (len(expected), width)
    for row, name in enumerate(expected):
        w = params[name].detach().numpy()
        assert tuple(result["shapes"][row]) == w.shape
        s = np.linalg.svd(w, compute_uv=False)
        np.testing.assert_allclose(result["singular_values"][row, :len(s)], s, rtol=1e-6)
        assert np.isnan(result["singular_values"][row, len(s):]).all()
        assert result["rank"][row] == np.linalg.matrix_rank(w)
        if w.shape[0] == w.shape[1]:
            assert result["residual_rank"][row] == np.linalg.matrix_rank(w - np.eye(len(w), dtype=w.dtype))
        else:
            assert np.isnan(result["residual_rank"][row])
    loose = probe(model, data.x_val, "weights", tol=1e3)
    assert (loose["rank"] == 0).all()


def test_weights_reshape_conv_kernels_and_see_identity_inits():
    model, data = build({"data": {"name": "shapes", "size": 16, "n_train": 8, "n_val": 4},
                         "model": {"name": "resnet-cifar", "depth": 8, "width": 4}, "init": {"name": "idinit"}})
    result = probe(model, data.x_val, "weights")
    params = dict(model.named_parameters())
    for row, name in enumerate(result["names"]):
        p = params[name].detach()
        assert tuple(result["shapes"][row]) == (p.shape[0], p[0].numel())
        assert result["rank"][row] == np.linalg.matrix_rank(p.reshape(p.shape[0], -1).numpy())


# --------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------
def test_norms_match_a_hand_loop_over_a_cascaded_linear_net():
    model, data = build(LINEAR)
    x = data.x_val
    result = probe(model, x, "norms")
    inputs, outputs, stds = [], [], []
    with torch.no_grad():
        h = x.double()
        for block in model.stack.blocks:
            y = h @ block.weight.double().T
            inputs.append(h.norm(dim=1).mean())
            outputs.append(y.norm(dim=1).mean())
            stds.append(y.std())
            h = h + y
    inputs = torch.stack(inputs).numpy()
    np.testing.assert_allclose(result["input_norm"], inputs, rtol=1e-5)
    np.testing.assert_allclose(result["relative_input_norm"], inputs / inputs[0], rtol=1e-5)
    assert result["relative_input_norm"][0] == 1.0
    np.testing.assert_allclose(result["output_norm"], torch.stack(outputs).numpy(), rtol=1e-5)
    np.testing.assert_allclose(result["relative_output_norm"], torch.stack(outputs).numpy() / outputs[0].item(),
                               rtol=1e-5)
    np.testing.assert_allclose(result["output_std"], torch.stack(stds).numpy(), rtol=1e-5)


def test_norms_cover_every_stage_of_a_resnet():
    model, data = build({"data": {"name": "shapes", "size": 16, "n_train": 8, "n_val": 4},
                         "model": {"name": "resnet-cifar", "depth": 14, "width": 4}})
    result = probe(model, data.x_val, "norms")
    n_blocks = sum(len(s.blocks) for s in model.stack.stacks)
    assert n_blocks > len(model.stack.stacks[0].blocks)
    assert all(v.shape == (n_blocks,) for v in result.values())


# --------------------------------------------------------------------------------------
# dead
# --------------------------------------------------------------------------------------
def reference_dead(model, loss_of):
    model.eval()
    roles = explorer.roles(model)
    named = [(n, p) for n, p in model.named_parameters() if roles[n] in explorer.nn.base.WEIGHT_ROLES]
    grads = torch.autograd.grad(loss_of(model), [p for _, p in named], allow_unused=True)
    model.zero_grad(set_to_none=True)
    return [int((g == 0).sum()) for g in grads]


def test_dead_counts_exact_zero_gradients_of_the_task_or_proxy_loss():
    digits = {"data": {"name": "digits"}, "model": {"name": "mlp-resnet", "depth": 4, "width": 32}}
    counts = {}
    for init in ("zero", "idinit"):
        model, data = build(digits, init={"name": init})
        x, y = data.x_train[:64], data.y_train[:64]
        result = probe(model, x, "dead", targets=y)
        expected = reference_dead(model, lambda m: torch.nn.functional.cross_entropy(m(x), y))
        assert list(result["dead_weights"]) == expected
        assert list(result["total_weights"]) == [p.numel() for p in model.parameters() if p.dim() == 2]
        proxy = probe(model, x, "dead")
        assert list(proxy["dead_weights"]) == reference_dead(model, lambda m: 0.5 * m(x).pow(2).mean())
        stack_rows = [r for r, n in enumerate(result["names"]) if n.startswith("stack.")]
        counts[init] = result["dead_weights"][stack_rows].sum()
    # ZerO's zero-padded identities leave more of the stack without gradient than IDInit's
    # (neither is dead-free on digits: constant pixels and ReLU zeros kill some weights).
    assert counts["zero"] > counts["idinit"]


def test_a_zeroed_branch_end_kills_the_whole_branch_start():
    model, data = build(MLP)
    with torch.no_grad():
        model.stack.blocks[1].outer.weight.zero_()
    result = probe(model, data.x_train, "dead", targets=data.y_train, task="classification")
    row = list(result["names"]).index("stack.blocks.1.inner.weight")
    assert result["dead_weights"][row] == result["total_weights"][row]
    assert result["dead_rows"][row] == model.stack.blocks[1].inner.weight.shape[0]
    other = list(result["names"]).index("stack.blocks.0.inner.weight")
    assert result["dead_rows"][other] < model.stack.blocks[0].inner.weight.shape[0]


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------
def test_attention_maps_of_a_gpt_are_causal_stochastic_matrices():
    model, data = build({"data": {"name": "text", "context": 12, "max_chars": 3000, "n_val": 4},
                         "model": {"name": "gpt", "depth": 2, "width": 16, "heads": 2}})
    result = probe(model, data.x_val, "attention")
    maps = result["maps"]
    assert maps.shape == (2, 2, 12, 12)
    np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-6)
    assert np.all(np.triu(maps, 1) == 0)
    assert result["kappa"].shape == result["diagonal"].shape == result["entropy"].shape == (2, 2)
    # reference for the first layer: the map of the embedded first input
    attn = model.stack.blocks[0].attn
    first = attn.attention_map(model.embed(data.x_val[:1]))[0].double().numpy()
    np.testing.assert_allclose(maps[0], first, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(result["kappa"][0], np.linalg.cond(first), rtol=1e-6)
    np.testing.assert_allclose(result["diagonal"][0], np.diagonal(first, axis1=-2, axis2=-1).mean(-1), rtol=1e-6)
    plogp = np.where(first > 0, first * np.log(np.where(first > 0, first, 1.0)), 0.0)
    np.testing.assert_allclose(result["entropy"][0], -plogp.sum(-1).mean(-1), rtol=1e-6)


def test_skipless_mimetic_init_makes_vit_attention_diagonal():
    default, data = build(VIT)
    skipless, _ = build(VIT, init={"name": "skipless"}, topology={"name": "skipless"})
    a = probe(default, data.x_val, "attention")
    b = probe(skipless, data.x_val, "attention")
    assert len(skipless.stack.blocks) == 4  # module level: attention and MLP sub-blocks ...
    assert b["maps"].shape == (2, 2, 17, 17)  # ... of which two attend
    np.testing.assert_allclose(a["maps"].sum(-1), 1.0, rtol=1e-6)
    assert b["diagonal"].mean() > 1.3 * a["diagonal"].mean()
    assert b["entropy"].mean() < a["entropy"].mean()


# --------------------------------------------------------------------------------------
# coefficients
# --------------------------------------------------------------------------------------
def test_coefficients_of_cascaded_and_ancre():
    model, data = build(LINEAR)
    result = probe(model, data.x_val, "coefficients")
    np.testing.assert_allclose(result["unrolled"], np.tril(np.ones((5, 5))))
    np.testing.assert_allclose(result["own"], np.eye(5, k=-1))
    assert np.all(result["log_ratio"].max(1) == 0)
    assert np.all(np.isneginf(result["log_ratio"][np.triu_indices(5, 1)]))

    model, data = build(LINEAR, topology={"name": "ancre"})
    with torch.no_grad():
        model.stack.topology.logits.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
    result = probe(model, data.x_val, "coefficients")
    c = model.stack.topology.coefficients()
    np.testing.assert_allclose(result["own"], model.stack.topology.probabilities().detach().double().numpy().T)
    np.testing.assert_allclose(result["unrolled"], c.unrolled)
    with np.errstate(divide="ignore"):
        expected = np.log(np.abs(c.unrolled) / np.abs(c.unrolled).max(1, keepdims=True))
    np.testing.assert_allclose(result["log_ratio"], expected)
    assert np.allclose(result["log_ratio"].max(1), 0)


def test_coefficients_of_a_resnet_read_the_first_stage():
    model, data = build({"data": {"name": "shapes", "size": 16, "n_train": 8, "n_val": 4},
                         "model": {"name": "resnet-cifar", "depth": 14, "width": 4}})
    result = probe(model, data.x_val, "coefficients")
    topology = model.stack.stacks[0].topology  # cascaded is shared by the three stages
    np.testing.assert_allclose(result["unrolled"], topology.coefficients().unrolled)
    assert result["unrolled"].shape == (topology.n_blocks + 1,) * 2
    assert list(result["blocks"]) == [f"block {j}" for j in range(1, topology.n_blocks + 1)]  # the first stage's


@pytest.mark.parametrize("topology", [{"name": "grn-v3"}, {"name": "grn-v3", "k": 1}, {"name": "dca"},
                                      {"name": "dca", "k": 1}])
def test_input_dependent_weights_are_averaged_over_the_batch(topology):
    model, data = build({
        "data": {"name": "text", "context": 8, "max_chars": 5000},
        "model": {"name": "gpt", "depth": 3, "width": 8, "heads": 2}, "topology": topology,
        "train": {"steps": 2, "log_every": 1}})
    x = data.x_val[:3]
    at_init = probe(model, x, "coefficients")
    assert np.allclose(at_init["batch_weights"], at_init["own"])  # zero gates: b alone
    assert np.allclose(at_init["batch_quantiles"][0], at_init["own"])
    topo = model.stack.topology
    with torch.no_grad():
        topo.gates.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    moved = probe(model, x, "coefficients")
    # Destination 1 (block 1's input) reads x_0 alone: its weight is b + relu(w . x_0), averaged over tokens.
    x0 = model.embed(x).detach()
    w = topo.gates[:, 0] if isinstance(topo, DCA) else topo.gates[0:1]
    expected = (torch.relu(x0 @ w.T).mean() + 1.0).item()
    assert moved["batch_weights"][0, 0] == pytest.approx(expected, rel=1e-5)
    assert (moved["batch_quantiles"][2] >= moved["batch_quantiles"][0]).all()


def test_jacobian_refuses_a_stream_too_large_to_differentiate_quickly():
    model, data = build(VIT, model={**VIT["model"], "width": 8, "patch": 8})
    with pytest.raises(explorer.SpecError) as refused:
        probe(model, data.x_val[:2], "jacobian", max_dim=39)
    assert refused.value.path == "probe.max_dim" and "40 numbers per example" in refused.value.message
    assert probe(model, data.x_val[:2], "jacobian", max_dim=40)["singular_values"].shape == (2, 40)


# --------------------------------------------------------------------------------------
# one block numbering (explorer.plots' docstring): blocks 1..L, the input as "input"
# --------------------------------------------------------------------------------------
def block_numbers(labels) -> list[int]:
    """The block numbers named by figure labels such as "block 3" or "block 3 attn", in order."""
    return [int(str(label).split()[1]) for label in labels if str(label) != "input"]


SMALL_VIT = {"data.n_train": 64, "data.n_val": 32}


@pytest.mark.parametrize("preset, subblocks", [("skip-table1-skip", False), ("skip-table1-skipless", True)])
def test_a_six_block_vit_is_drawn_as_blocks_1_to_6(preset, subblocks):
    spec = explorer.preset(preset).with_values(SMALL_VIT)
    assert spec.model.params["depth"] == 6
    model, data = explorer.build(spec)
    norms = probe(model, data.x_val[:8], "norms")
    fig = plots.probe_figures("norms", norms)[0]
    x = list(fig.data[0].x)
    if subblocks:  # skipless runs at module level: attention and MLP of each block, each labelled
        assert x == [f"block {j} {part}" for j in range(1, 7) for part in ("attn", "mlp")]
    else:
        assert x == [f"block {j}" for j in range(1, 7)]
    assert list(fig.layout.xaxis.categoryarray) == x
    heatmap = plots.probe_figures("coefficients", probe(model, data.x_val[:4], "coefficients"))[0]
    assert list(heatmap.data[0].x) == ["input", *x] and list(heatmap.data[0].y) == ["input", *x]
    pca = probe(model, data.x_val[:16], "pca", masks=data.masks_val[:16])
    grid, miou = plots.probe_figures("pca", pca)
    rows = [grid.layout[f"yaxis{'' if i == 0 else i + 1}"].title.text for i in range(0, len(grid.data), 4)]
    assert rows == ["images", "input"] + [f"block {j}" for j in range(1, 7)]  # the images, the embedded input, blocks
    assert list(miou.data[0].x) == ["input"] + [f"block {j}" for j in range(1, 7)]
    attention = plots.probe_figures("attention", probe(model, data.x_val[:1], "attention"))[0]
    titles = [a.text for a in attention.layout.annotations]
    assert sorted(set(block_numbers(t.split(",")[0] for t in titles))) == list(range(1, 7))


def test_a_gpt_and_an_mlp_resnet_are_drawn_as_blocks_1_to_l():
    gpt = explorer.preset("ancre-table2-cascaded")
    resnet = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 7})
    for spec, blocks in ((gpt, gpt.model.params["depth"]), (resnet, 6)):  # the MLP-ResNet's depth counts its stems
        model, data = explorer.build(spec)
        fig = plots.probe_figures("norms", probe(model, data.x_val[:4], "norms"))[0]
        assert list(fig.data[0].x) == [f"block {j}" for j in range(1, blocks + 1)]
        assert block_numbers(fig.data[1].x) == list(range(1, blocks + 1))


@pytest.mark.parametrize("normalization, single", [("ingoing", (1, 0)), ("outgoing", (3, 2)), ("none", None)])
def test_the_coefficients_probe_says_which_coefficients_the_topology_forces_and_why(normalization, single):
    spec = explorer.preset("ancre-fig2b-ancre").with_values({"topology.normalization": normalization})
    model, data = explorer.build(spec)
    r = probe(model, data.x_val[:4], "coefficients")
    expected = np.eye(4, dtype=bool)  # the direct paths
    if single:
        expected[single] = True  # a softmax over one candidate is 1 whatever its logit
        assert r["own"][single] == pytest.approx(1.0)
        assert "single" in str(r["forced_reasons"][r["forced_reason"][single]])
    np.testing.assert_array_equal(r["forced"], expected)
    assert np.all((r["forced_reason"] >= 0) == r["forced"]) and str(r["basis"]) == "state"
    np.testing.assert_allclose(r["logits"], model.stack.topology.logits.detach().numpy().T)
    cascaded, _ = explorer.build(explorer.preset("ancre-fig2b-cascaded"))
    fixed = probe(cascaded, data.x_val[:4], "coefficients")
    assert fixed["forced"][np.tril_indices(4)].all() and "logits" not in fixed  # nothing in it is learned
