"""Topologies: exactness at initialisation, coefficient matrices against the real computation.

The generic properties run over every registered topology with the example parameters it declares
(`TopologyInfo.examples`), so a new topology is under them without editing this file; the equations of
each paper are checked by hand below them.
"""

import json

import numpy as np
import pytest
import torch

import explorer
from conftest import model_examples, topology_examples, valid_combinations, vector_models
from explorer.topology import parse_shortcuts

SMALL = {"data": {"name": "whitened-regression", "dim": 6, "n_train": 12, "n_val": 8, "rank": 3},
         "model": {"name": "linear", "depth": 4, "width": 6},
         "init": {"name": "normal", "std": 0.3}, "optim": {"name": "gd", "lr": 0.01},
         "train": {"steps": 5, "log_every": 1}}


# every registered model with one residual stream of vectors, at the sizes of SMALL (its example's other values)
MODELS = {name: {**model_examples()[name]["model"], "depth": SMALL["model"]["depth"], "width": SMALL["model"]["width"]}
          for name in vector_models()}
TOPOLOGIES = explorer.registry("topologies")
# every topology example the spec accepts on these models, and every (model, topology example) pair it accepts
PAIRS = [(c.model, c.topology) for c in valid_combinations(MODELS)]
ALL_TOPOLOGIES = [t for t in topology_examples() if all((model, t) in PAIRS for model in MODELS)]


def ids(topology):
    return "-".join(str(v) for v in topology.values())


def spec_for(model="linear", topology=None, **extra):
    raw = {**SMALL, "model": MODELS[model], "topology": topology or {"name": "cascaded"}, **extra}
    data = model_examples()[model]["data"]
    if data["name"] != SMALL["data"]["name"]:  # a model of another task: its example's data, a few more points
        raw["data"] = {**data, "n_train": 32, "n_val": 16}
        raw["init"] = {"name": "kaiming"}
    return explorer.ExperimentSpec.from_dict(raw)


def block_weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".topology." not in f".{n}"}


@pytest.mark.parametrize("model_name", list(MODELS))
def test_same_seed_same_block_weights_whatever_the_topology(model_name):
    reference = block_weights(explorer.build(spec_for(model_name))[0])
    for topology in ALL_TOPOLOGIES:
        weights = block_weights(explorer.build(spec_for(model_name, topology))[0])
        assert weights.keys() == reference.keys()
        for name in weights:
            assert torch.equal(weights[name], reference[name]), (topology, name)


@pytest.mark.parametrize("model_name, topology", PAIRS, ids=[f"{m}-{ids(t)}" for m, t in PAIRS])
def test_every_topology_runs_and_answers_its_coefficients(model_name, topology):
    """A finite output of the model's shape, (L+1) x (L+1) coefficients in a known basis, one branch scale
    per block, and the batch's weights recorded exactly when the topology depends on the input."""
    model, data = explorer.build(spec_for(model_name, topology))
    topo = model.stack.topology
    x = data.x_val[:5]
    with torch.no_grad():
        out = model(x)
    assert out.shape == (5, data.output_dim) and torch.isfinite(out).all()
    size = len(model.stack.blocks) + 1
    c = topo.coefficients()
    assert c.basis in ("state", "branch") and c.own.shape == c.unrolled.shape == (size, size)
    assert np.isfinite(c.unrolled).all()
    assert topo.branch_scales().shape == (size - 1,)
    result = explorer.probe(model, x, "coefficients")
    assert ("batch_weights" in result) == topo.input_dependent
    if topo.input_dependent:
        weights = result["batch_weights"]
        assert weights.shape == (size, size) and np.isfinite(weights).all()
        assert np.count_nonzero(weights[1:]) >= size - 1, "every destination after x_0 records what it read"


@pytest.mark.parametrize("topology", ALL_TOPOLOGIES, ids=ids)
def test_every_topology_parameter_has_a_role_and_scalar_gates_learn_slower(topology):
    """Topology parameters are "mix" or "scale", and every "scale" one gets the scalar-gate learning rate."""
    from explorer.optim import SCALAR_LR_FACTOR, build_optimizer

    spec = spec_for("mlp-resnet", topology)
    model, _ = explorer.build(spec)
    roles = explorer.roles(model)
    assert set(roles) == {n for n, _ in model.named_parameters()}
    assert {r for n, r in roles.items() if ".topology." in f".{n}"} <= {"mix", "scale"}
    optimizer, _ = build_optimizer(model, spec.optim, 10)
    lrs = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        expected = spec.optim.lr * (SCALAR_LR_FACTOR if roles[name] == "scale" else 1.0)
        assert lrs[id(p)] == pytest.approx(expected), name


def test_every_topology_is_listed_by_the_command_line(capsys):
    from explorer.cli import main

    assert main(["list", "topologies", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == set(TOPOLOGIES) and "highway" in TOPOLOGIES


def test_misspelt_metadata_is_an_error_at_registration():
    with pytest.raises(TypeError, match="'shareble'.*shareable"):
        TOPOLOGIES.register("typo", "a topology whose metadata is misspelt", shareble=True)
    with pytest.raises(TypeError, match="'dims' is required"):
        explorer.registry("datasets").register("typo", "a dataset that does not say its dimensions")
    assert "typo" not in TOPOLOGIES and "typo" not in explorer.registry("datasets")


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("topology", [{"name": "grn-v1"}, {"name": "grn-v2"}, {"name": "grn-v3"},
                                      {"name": "grn-v3", "k": 1}, {"name": "grn-v1", "k": 2}])
def test_grn_equals_the_standard_residual_network_at_init(model_name, topology):
    cascaded, data = explorer.build(spec_for(model_name))
    grn, _ = explorer.build(spec_for(model_name, topology))
    x = data.x_train
    with torch.no_grad():
        expected, got = cascaded(x), grn(x)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    # ...and not trivially: changing a GRN weight changes the output
    with torch.no_grad():
        grn.stack.topology.weights.mul_(0.5)
        assert not torch.allclose(grn(x), expected, atol=1e-4)


def test_mlp_resnet_is_the_tau_paper_network():
    spec = spec_for("mlp-resnet", {"name": "tau", "value": "1/sqrt(L)"})
    model, data = explorer.build(spec)
    x = data.x_train
    a = model.embed[0].weight
    ws = [b.weight for b in model.stack.blocks]
    w_last, b_out = model.head[0][0].weight, model.head[1].weight
    tau = spec.model.depth ** -0.5
    h = torch.relu(x @ a.T)
    for w in ws:
        h = torch.relu(h + tau * h @ w.T)
    expected = torch.relu(h @ w_last.T) @ b_out.T
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=1e-6)
    assert len(ws) == spec.model.depth - 1


def test_kaiming_fan_out_gives_the_papers_variances():
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "digits"}, "model": {"name": "mlp-resnet", "depth": 3, "width": 512},
        "init": {"name": "kaiming", "mode": "fan_out"}})
    model, _ = explorer.build(spec)
    m, d = 512, 10
    assert model.embed[0].weight.std().item() == pytest.approx((2 / m) ** 0.5, rel=0.02)
    assert model.stack.blocks[0].weight.std().item() == pytest.approx((2 / m) ** 0.5, rel=0.02)
    assert model.head[1].weight.std().item() == pytest.approx((2 / d) ** 0.5, rel=0.05)


def _recorded_stream(model, x):
    """Inputs and outputs of every block (hooks), for checking coefficients against reality."""
    inputs, outputs = [], []

    def record(module, args, output):
        inputs.append(args[0])
        outputs.append(output)

    hooks = [b.register_forward_hook(record) for b in model.stack.blocks]
    with torch.no_grad():
        out = model.stack(x)
    for h in hooks:
        h.remove()
    return inputs, outputs, out


@pytest.mark.parametrize("topology", ALL_TOPOLOGIES, ids=ids)
def test_unrolled_coefficients_describe_the_actual_stream(topology):
    """With a linear stem, input of block r+1 = sum_i U[r, i] y_i (y_0 = x_0), output = row L.

    In float64, and each error bounded relative to the size of the terms summed (sum_i |U[r, i]| |y_i|):
    with normalization=none the coefficients reach e^15, so sums in another order (another CPU,
    another thread count) differ by more than any fixed absolute tolerance, while a wrong
    coefficient would be off by the size of a whole term."""
    model, data = explorer.build(spec_for("linear", topology))
    model = model.double()
    topo = model.stack.topology
    if topo.input_dependent:
        pytest.skip("its weights depend on the data: the coefficients probe records them per batch")
    width = model.stack.blocks[0].weight.shape[0]
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # move away from the symmetric init so every coefficient matters
        for p in topo.parameters():
            if p.dim() >= 2 and p.shape[-1] == width:  # per-feature weights: make them equal across features
                p.copy_((torch.rand(p.shape[:-1], generator=gen) + 0.5).unsqueeze(-1).expand_as(p))
            else:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5 if p.dim() else p + 0.1)
    x = data.x_train.double()
    inputs, outputs, out = _recorded_stream(model, x)
    unrolled = torch.tensor(topo.coefficients().unrolled, dtype=torch.float64)
    sources = torch.stack([x] + outputs)  # y_0 = x_0, y_1..y_L
    predicted = torch.einsum("ri,ibd->rbd", unrolled, sources)
    size = torch.einsum("ri,ibd->rbd", unrolled.abs(), sources.abs()) + 1e-12
    for r, actual in enumerate([*inputs, out]):
        worst = ((predicted[r] - actual).abs() / size[r]).max().item()
        assert worst < 1e-6, f"input of block {r + 1}: relative error {worst:.2e}"


def test_known_coefficient_matrices():
    L = 4
    cascaded = explorer.build(spec_for("linear", {"name": "cascaded"}))[0].stack.topology.coefficients()
    assert np.array_equal(cascaded.unrolled, np.tril(np.ones((L + 1, L + 1))))
    assert np.array_equal(cascaded.own, np.eye(L + 1, k=-1))
    none = explorer.build(spec_for("linear", {"name": "none"}))[0].stack.topology.coefficients()
    assert np.array_equal(none.unrolled, np.eye(L + 1))
    tau = explorer.build(spec_for("linear", {"name": "tau", "value": 0.5}))[0].stack.topology.coefficients()
    expected = np.tril(np.full((L + 1, L + 1), 0.5))
    expected[:, 0] = 1.0
    assert np.allclose(tau.unrolled, expected)
    short = explorer.build(spec_for("linear", {"name": "shortcuts", "shortcuts": "0:2"}))[0].stack.topology.coefficients()
    expected = np.eye(L + 1)
    expected[2, 0] = 1.0
    assert np.array_equal(short.unrolled, expected)
    for spec in (spec_for("linear", {"name": "grn-v1"}), spec_for("linear", {"name": "grn-v3", "k": 1})):
        coefficients = explorer.build(spec)[0].stack.topology.coefficients()
        assert coefficients.basis == "branch"
        assert np.array_equal(coefficients.unrolled, np.tril(np.ones((L + 1, L + 1))))


def test_ancre_normalisations():
    for normalization, axis in (("ingoing", 0), ("outgoing", 1)):
        topo = explorer.build(spec_for("linear", {"name": "ancre", "normalization": normalization}))[0].stack.topology
        with torch.no_grad():
            topo.logits.normal_()
        p = topo.probabilities().detach().numpy()
        assert np.allclose(np.triu(p, 1), p), "only forward shortcuts i < j"
        sums = p.sum(axis=axis)
        valid = sums[1:] if axis == 0 else sums[:-1]  # x_0 has no sources; x_L has no destinations
        assert np.allclose(valid, 1.0, atol=1e-6)
    uniform = explorer.build(spec_for("linear", {"name": "ancre"}))[0].stack.topology.probabilities()
    assert torch.allclose(uniform[:3, 3], torch.full((3,), 1 / 3))
    unnormalised = explorer.build(spec_for("linear", {"name": "ancre", "normalization": "none"}))[0].stack.topology
    assert torch.equal(unnormalised.probabilities(), torch.ones(5, 5).triu(1))


def test_learnable_tau_is_shared_averaged_and_slower():
    spec = spec_for("mlp-resnet", {"name": "tau", "value": "1/L", "learnable": True})
    model, data = explorer.build(spec)
    tau = model.stack.topology.tau
    assert tau.item() == pytest.approx(1 / spec.model.depth)
    loss = model(data.x_train).pow(2).sum()
    # gradient of the shared tau, computed by hand as the sum over blocks, then averaged
    (total,) = torch.autograd.grad(loss, [tau])  # hooks apply: averaged
    with torch.no_grad():
        raw = model.stack.topology
    n_blocks = spec.model.depth - 1
    tau_copy = torch.tensor(tau.item(), requires_grad=True)
    h = model.embed(data.x_train)
    for block in model.stack.blocks:
        h = torch.relu(h + tau_copy * block(h))
    (summed,) = torch.autograd.grad(model.head(h).pow(2).sum(), [tau_copy])
    assert total.item() == pytest.approx(summed.item() / n_blocks, rel=1e-4)
    assert raw is model.stack.topology
    from explorer.optim import build_optimizer
    optimizer, _ = build_optimizer(model, spec.optim, 10)
    lrs = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert lrs[id(tau)] == pytest.approx(spec.optim.lr / 10)


def test_parse_shortcuts():
    assert parse_shortcuts("1:2+2:3") == parse_shortcuts("1:2, 2:3") == {(1, 2): 1.0, (2, 3): 1.0}
    with pytest.raises(explorer.SpecError, match="0 <= i < j <= 3"):
        parse_shortcuts("0:4", 3)


def test_roles_cover_every_parameter():
    for model_name, topology in PAIRS:
        model, _ = explorer.build(spec_for(model_name, topology))
        roles = explorer.roles(model)
        assert set(roles) == {n for n, _ in model.named_parameters()}
        assert {r for n, r in roles.items() if ".topology." in f".{n}"} <= {"mix", "scale"}
    roles = explorer.roles(explorer.build(spec_for("lowrank"))[0])
    assert sorted(set(roles.values())) == ["stem.in", "stem.out"]
    roles = explorer.roles(explorer.build(spec_for("mlp-resnet"))[0])
    assert roles["embed.0.weight"] == "embed" and roles["head.1.weight"] == "head"
    assert roles["stack.blocks.0.weight"] == "stem.out" and roles["head.0.0.weight"] == "main"


@pytest.mark.parametrize("topology", [{"name": "ancre"}, {"name": "ancre", "normalization": "outgoing"},
                                      {"name": "ancre", "normalization": "none", "temperature": 10.0},
                                      {"name": "grn-v1"}])
@pytest.mark.parametrize("model_name", ["linear", "mlp-resnet"])
def test_fast_dense_mix_matches_plain_autograd(model_name, topology):
    """The buffered GEMM mix gives the same outputs and gradients as the plain-op reference, over several chunks."""
    from explorer.nn.mixing import CHUNK

    model_section = {**MODELS[model_name], "depth": 2 * CHUNK + 3}
    spec = spec_for(model_name, topology).with_values({f"model.{k}": v for k, v in model_section.items() if k != "name"})
    model, data = explorer.build(spec)
    topo = model.stack.topology
    with torch.no_grad():  # break the symmetric init so every weight matters
        for p in topo.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    x = data.x_train
    x0 = model.embed(x).detach().requires_grad_(True)

    def outputs_and_grads(run):
        model.zero_grad()
        x0.grad = None
        out = run(x0, model.stack.blocks, model.stack.acts)
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        return out.detach(), x0.grad.clone(), {n: p.grad.clone() for n, p in model.stack.named_parameters()}

    def close(a, b):  # float32 sums in another order: relative to the tensor's scale
        return (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7

    fast = outputs_and_grads(topo.run)
    reference = outputs_and_grads(topo.run_reference)
    assert close(fast[0], reference[0]) and close(fast[1], reference[1])
    for name in fast[2]:
        assert close(fast[2][name], reference[2][name]), name


def test_torch_func_jacobian_works_on_dense_topologies():
    """torch.func cannot trace the fast path's buffer; the topology falls back to plain ops there."""
    from torch.func import jacrev

    for topology in ({"name": "ancre"}, {"name": "grn-v1"}):
        model, data = explorer.build(spec_for("linear", topology))
        x = data.x_train[0]
        jac = jacrev(model.stack)(x)
        dense = torch.autograd.functional.jacobian(lambda v: model.stack.topology.run_reference(
            v, model.stack.blocks, model.stack.acts), x)
        assert torch.allclose(jac, dense, atol=1e-5)


def test_fast_mix_with_two_graphs_alive_at_once():
    """Pooled buffers are only reused once the graph that reads them is gone."""
    model, data = explorer.build(spec_for("linear", {"name": "ancre"}).with_values({"model.depth": 12}))
    xa, xb = data.x_train[:6], data.x_train[6:]
    weights = torch.linspace(-1, 1, 6)
    out_a, out_b = model(xa), model(xb)  # both graphs alive
    ((out_a * weights).sum() + (out_b * weights).sum() ** 2).backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    topo, blocks, act = model.stack.topology, model.stack.blocks, model.stack.acts
    ref_a, ref_b = topo.run_reference(xa, blocks, act), topo.run_reference(xb, blocks, act)
    ((ref_a * weights).sum() + (ref_b * weights).sum() ** 2).backward()
    for name, grad in fast.items():
        assert torch.allclose(grad, model.get_parameter(name).grad, rtol=1e-4, atol=1e-5), name


def test_dense_topologies_train_identically_in_parallel_threads():
    """Runs in several threads (as the app trains) must not share the mixer's pooled buffers."""
    import threading

    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "spirals", "n_train": 128, "n_val": 32}, "model": {"name": "mlp", "depth": 20, "width": 16},
        "topology": {"name": "ancre"}, "optim": {"name": "adam", "lr": 0.01},
        "train": {"steps": 30, "log_every": 10, "batch_size": 32}})
    alone = [row["loss"] for row in explorer.train(spec).history]
    results = [None] * 3

    def work(index):
        results[index] = [row["loss"] for row in explorer.train(spec).history]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r == alone for r in results), (alone, results)


@pytest.mark.parametrize("topology", [{"name": "ancre"}, {"name": "grn-v1"}])
def test_fast_path_gives_the_same_gradients_on_a_second_backward_of_one_graph(topology):
    model, data = explorer.build(spec_for("linear", topology))
    with torch.no_grad():
        for p in model.stack.topology.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = data.x_train.clone().requires_grad_()
    out = model.stack(x)
    first = torch.autograd.grad(out[:, 0].sum(), x, retain_graph=True)[0]
    second = torch.autograd.grad(out[:, 0].sum(), x, retain_graph=True)[0]
    other = torch.autograd.grad(out[:, 1].sum(), x)[0]
    fresh = torch.autograd.grad(model.stack(x)[:, 1].sum(), x)[0]
    assert torch.allclose(first, second, atol=1e-6)
    assert torch.allclose(other, fresh, atol=1e-6)


# ---------------------------------------------------------------------------- GRN-v3's gates (DCA Sec. 3.1)
def test_grn_v3_is_the_papers_equation_with_random_gates():
    """g_t = (G_t * (b_t + 1 relu(w_t^T G_t))) 1 with G_t = [x_0, y_1, ..., y_{t-1}], y = g_{L+1} (linear stem)."""
    model, data = explorer.build(spec_for("linear", {"name": "grn-v3", "gate_init": "normal"}))
    topo = model.stack.topology
    with torch.no_grad():
        topo.gates.mul_(50.0)  # make the gates a visible part of every mix
        topo.weights.copy_(torch.rand(topo.weights.shape, generator=torch.Generator().manual_seed(3)) + 0.5)
    x = data.x_train[:7]
    sources = [x]

    def mix(t):  # destination t (1-based), weights row t-1
        b, w = topo.weights[t - 1], topo.gates[t - 1]
        return sum(g * (b[i] + torch.relu(g @ w)[:, None]) for i, g in enumerate(sources))

    for t, layer in enumerate(model.stack.blocks, start=1):
        sources.append(mix(t) @ layer.weight.T)
    with torch.no_grad():
        assert torch.allclose(model(x), mix(len(sources)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gate_init", ["zero", "normal"])
def test_grn_v3_gates_learn_only_from_a_nonzero_init(gate_init):
    """The paper's w_t = 0 sits at ReLU's kink: its gradient is exactly 0 (GRN-v3 trains as GRN-v2); N(0, 0.02^2) is not."""
    model, data = explorer.build(spec_for("linear", {"name": "grn-v3", "gate_init": gate_init}))
    gates = model.stack.topology.gates
    if gate_init == "zero":
        assert torch.equal(gates, torch.zeros_like(gates))
    else:
        assert 0.01 < gates.std().item() < 0.03 and abs(gates.mean().item()) < 0.01
    model(data.x_train).pow(2).mean().backward()
    assert (gates.grad == 0).all() if gate_init == "zero" else gates.grad.abs().max() > 0


def test_a_topologys_scalar_gate_learns_at_the_scalar_rate_whatever_its_name():
    """The role comes from the topology's ROLES, as for every module, not from the parameter's name."""
    from explorer.optim import SCALAR_LR_FACTOR, build_optimizer
    from explorer.topology import Chain

    class GainedChain(Chain):
        ROLES = {"gain": "scale"}

        def __init__(self, n_blocks):
            super().__init__(n_blocks, skip=True)
            self.gain = torch.nn.Parameter(torch.tensor(1.0))

    spec = spec_for("linear")
    model, _ = explorer.build(spec)
    model.stack.topology = GainedChain(len(model.stack.blocks))
    assert explorer.roles(model)["stack.topology.gain"] == "scale"
    optimizer, _ = build_optimizer(model, spec.optim, 10)
    lrs = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert lrs[id(model.stack.topology.gain)] == pytest.approx(spec.optim.lr * SCALAR_LR_FACTOR)


# ---------------------------------------------------------------------------- Highway (Srivastava et al. 2015)
def test_highway_is_the_papers_equation():
    """Eq. 2-3: x_j = H(x) T(x) + x (1 - T(x)) with T(x) = sigmoid(W_T x + b_T) per block and feature, written out
    by hand on the tau paper's MLP-ResNet (H(x) = W_j x, a ReLU after every merge), in float64."""
    model, data = explorer.build(spec_for("mlp-resnet", {"name": "highway"}))
    model = model.double()
    topo = model.stack.topology
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():  # an input-dependent gate that differs per block and feature
        topo.gate_weight.copy_(torch.randn(topo.gate_weight.shape, generator=gen, dtype=torch.float64))
        topo.gate_bias.copy_(torch.randn(topo.gate_bias.shape, generator=gen, dtype=torch.float64))
    x = data.x_train[:7].double()
    h = torch.relu(x @ model.embed[0].weight.T)
    for j, layer in enumerate(model.stack.blocks):
        t = 1 / (1 + torch.exp(-(h @ topo.gate_weight[j].T + topo.gate_bias[j])))
        h = torch.relu((h @ layer.weight.T) * t + h * (1 - t))
    with torch.no_grad():
        assert torch.allclose(model.stack(model.embed(x)), h, rtol=1e-12, atol=1e-12)
        assert torch.allclose(model(x), model.head(h), rtol=1e-12, atol=1e-12)
        cascaded = explorer.build(spec_for("mlp-resnet"))[0].double()
        assert not torch.allclose(cascaded(x), model(x), atol=1e-3)


def test_highway_starts_near_the_carry_path_and_its_gate_learns():
    """b_T = -2, W_T = 0: every block starts as x_j = (1 - s) x_{j-1} + s y_j with s = sigmoid(-2), which the
    coefficients show; the gate's weights get a gradient from there (sigmoid has no kink)."""
    model, data = explorer.build(spec_for("linear", {"name": "highway", "gate_bias": -2.0}))
    topo = model.stack.topology
    s = 1 / (1 + np.exp(2.0))
    c = topo.coefficients()
    assert c.basis == "state"
    assert np.allclose(np.diag(c.own, -1), 1 - s) and np.allclose(np.diag(c.unrolled)[1:], s)
    x = data.x_train
    h = x
    for layer in model.stack.blocks:
        h = (1 - s) * h + s * (h @ layer.weight.T)
    with torch.no_grad():
        assert torch.allclose(model(x), h, atol=1e-6)
    model(x).pow(2).sum().backward()
    assert topo.gate_weight.grad.abs().max() > 0 and topo.gate_bias.grad.abs().max() > 0


def test_weighted_shortcuts_unroll_with_their_weights():
    """x_2 = y_2 + 0.5 x_0 and x_3 = y_3 - x_1 = y_3 - y_1: the unrolled matrix carries each weight once."""
    spec = explorer.preset("ancre-fig2b-0:2").with_values({"topology.shortcuts": "0:2*0.5,1:3*-1"})
    coefficients = explorer.build(spec)[0].stack.topology.coefficients()
    assert coefficients.own[2].tolist() == [0.5, 0, 0, 0] and coefficients.own[3].tolist() == [0, -1, 0, 0]
    assert coefficients.unrolled[2].tolist() == [0.5, 0, 1, 0] and coefficients.unrolled[3].tolist() == [0, -1, 0, 1]
    with pytest.raises(explorer.SpecError, match="listed twice") as caught:
        spec.with_values({"topology.shortcuts": "1:3,0:2,1:3*2"})
    assert caught.value.path == "topology.shortcuts"
