"""Our models against the forwards of the papers' reference code, written out here from that code (float64).

The tau paper's official no-BN CIFAR ResNet (dayu11/tau-ResNet) adds four learnable scalar biases to every
block; the unofficial DCA implementation (lucidrains/deep-cross-attention) RMS-normalises each source before
the GRN-v3 gate, which the spec's `source_norm: rms` selects. docs/references.md lists what is compared where.
"""

import pytest
import torch
from torch.nn import functional as F

import explorer
from explorer.nn import Stack, reference
from explorer.topology import stem_activation

TOLERANCE = {"rtol": 0.0, "atol": 1e-10}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: one thread


# ---------------------------------------------------------------------------- tau paper: the no-BN ResNet
TAU_LEARNABLE = {"name": "tau", "value": "1/sqrt(L)", "learnable": True}  # the official no-BN network's tau


def no_bn_resnet(topology=None, shortcut="pool-bn", depth=14):
    return explorer.ExperimentSpec.from_dict({
        "data": {"name": "digits-images"},
        "model": {"name": "resnet-cifar", "depth": depth, "width": 4, "norm": "none", "shortcut": shortcut},
        "topology": topology or TAU_LEARNABLE, "init": {"name": "kaiming"}})


def branches(model):
    """(BasicBlock, stride) of every residual block in the network's order: a stage's blocks, then a transition."""
    found = []
    for part in model.stack:
        found += [(block, 1) for block in part.blocks] if isinstance(part, Stack) else [(part.branch, 2)]
    return found


def official_block(x, conv1, conv2, biases, tau, stride):
    """The official BasicBlock_NoBN.forward: conv1(x + bias1a), relu(. + bias1b), (conv2(. + bias2a) + bias2b) * tau,
    plus the identity (stride 2: avgpool(1, stride 2), concatenated with as many zero channels), then relu."""
    b1a, b1b, b2a, b2b = biases
    out = F.conv2d(x + b1a, conv1, stride=stride, padding=1)
    out = torch.relu(out + b1b)
    out = (F.conv2d(out + b2a, conv2, padding=1) + b2b) * tau
    identity = x
    if stride != 1:
        identity = F.avg_pool2d(x, 1, stride=stride)
        identity = torch.cat((identity, torch.zeros_like(identity)), 1)
    return torch.relu(out + identity)


def official_network(model, x, tau):
    """ResNet_NoBN.forward on our model's weights: relu(conv1(x)), the blocks, global average pool, fc."""
    h = torch.relu(F.conv2d(x, model.embed[0].weight, padding=1))
    for block, stride in branches(model):
        biases = [getattr(block, name) for name in ("bias1a", "bias1b", "bias2a", "bias2b")]
        h = official_block(h, block.conv1.weight, block.conv2.weight, biases, tau, stride)
    fc = model.head[2]
    return h.mean((2, 3)) @ fc.weight.T + fc.bias


def tau_of(model, topology):
    return model.stack[0].topology.tau if topology.get("learnable") else 1.0


@pytest.mark.parametrize("shortcut", ["pool-bn", "pad"])
@pytest.mark.parametrize("topology", [TAU_LEARNABLE, {"name": "cascaded"}], ids=["tau-learnable", "cascaded"])
def test_no_bn_resnet_with_nonzero_biases_is_the_official_network(topology, shortcut):
    spec = no_bn_resnet(topology, shortcut)
    model, data = explorer.build(spec)
    model = model.double()
    x = data.x_train[:4].double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for block, _ in branches(model):
            for name in block.BIASES:
                getattr(block, name).fill_(0.1 + 0.05 * torch.randn((), generator=gen, dtype=torch.float64).item())
        if topology.get("learnable"):
            model.stack[0].topology.tau.fill_(0.37)
        expected = official_network(model, x, tau_of(model, topology))
        assert torch.allclose(model(x), expected, **TOLERANCE)
        assert torch.allclose(reference.forward(spec, model, x), expected, **TOLERANCE)
        for block, _ in branches(model):  # without the biases the network is another function
            for name in block.BIASES:
                getattr(block, name).zero_()
        assert (model(x) - expected).abs().max() > 1e-3


def test_no_bn_biases_start_at_zero_where_the_block_is_the_bias_free_block():
    model, data = explorer.build(no_bn_resnet())
    model = model.double()
    blocks = branches(model)
    assert len(blocks) == 6  # ResNet-14: 3 stages of 2 blocks
    for block, stride in blocks:
        assert [getattr(block, name).item() for name in block.BIASES] == [0.0] * 4
        assert all(getattr(block, name).requires_grad for name in block.BIASES)
        z = torch.randn(3, block.conv1.weight.shape[1], 8, 8, dtype=torch.float64)
        with torch.no_grad():
            bias_free = F.conv2d(torch.relu(F.conv2d(z, block.conv1.weight, stride=stride, padding=1)),
                                 block.conv2.weight, padding=1)
            assert torch.equal(block(z), bias_free)
    x = data.x_train[:4].double()
    with torch.no_grad():
        assert torch.allclose(model(x), official_network(model, x, model.stack[0].topology.tau), **TOLERANCE)


def test_no_bn_biases_learn_at_the_scalar_rate_and_batchnorm_blocks_have_none():
    """The official training script gives the biases (and tau) a tenth of the learning rate."""
    from explorer.optim import SCALAR_LR_FACTOR, build_optimizer

    spec = no_bn_resnet()
    model, data = explorer.build(spec)
    roles = explorer.roles(model)
    biases = [n for n in roles if n.rsplit(".", 1)[-1] in ("bias1a", "bias1b", "bias2a", "bias2b")]
    assert len(biases) == 4 * 6 and {roles[n] for n in biases} == {"scale"}
    optimizer, _ = build_optimizer(model, spec.optim, 10)
    lrs = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    params = dict(model.named_parameters())
    assert all(lrs[id(params[n])] == pytest.approx(spec.optim.lr * SCALAR_LR_FACTOR) for n in biases)
    F.cross_entropy(model(data.x_train[:16]), data.y_train[:16]).backward()
    assert all(params[n].grad is not None and params[n].grad.abs() > 0 for n in biases)
    with_bn, _ = explorer.build(no_bn_resnet().with_values({"model.norm": "batchnorm"}))
    assert not any("bias1" in n or "bias2" in n for n, _ in with_bn.named_parameters())


def test_a_no_bn_state_without_the_biases_loads_them_as_zero():
    """Weights saved from a block without the biases (a checkpoint of such a run) load as the same function."""
    model, data = explorer.build(no_bn_resnet())
    state = {k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[-1] not in model.stack[0].blocks[0].BIASES}
    fresh, _ = explorer.build(no_bn_resnet().with_values({"train.seed": 1}))
    with torch.no_grad():
        for block, _ in branches(fresh):
            block.bias1b.fill_(0.5)
    fresh.load_state_dict(state)
    x = data.x_train[:4]
    with torch.no_grad():
        assert all(getattr(b, n).item() == 0.0 for b, _ in branches(fresh) for n in b.BIASES)
        assert torch.equal(fresh(x), model(x))
    partial = dict(state, **{"stack.0.blocks.0.bias1a": torch.zeros(())})
    with pytest.raises(RuntimeError, match="bias1b"):  # some biases but not all: a state of another model
        fresh.load_state_dict(partial)


def test_a_stored_no_bn_run_without_the_biases_loads_its_weights_and_refuses_to_resume_in_one_line(
        tmp_path, monkeypatch):
    """A run recorded by a model whose no-BN blocks had no biases (simulated by such a block): its weights load
    (probes, comparisons), and resuming it says in one line why it cannot (its optimizer state has fewer parameters)."""
    import threading

    from explorer import runs
    from explorer.nn import conv

    class BiasFree(conv.BasicBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for name in self.BIASES if self.scalar_biases else ():
                delattr(self, name)
            self.scalar_biases, self.ROLES = False, {}

    spec = no_bn_resnet(depth=8).with_values({"train.steps": 20, "train.log_every": 5, "train.batch_size": 16})
    store = runs.RunStore(tmp_path / "store")
    with monkeypatch.context() as patch:
        patch.setattr(conv, "BasicBlock", BiasFree)
        stop, recorder = threading.Event(), runs.StoreRecorder(store)
        old = explorer.train(spec, callbacks=[recorder, lambda e: e.kind == "log" and e.step == 10 and stop.set()],
                             stop=stop)
        recorder.release()
    assert old.status == "stopped" and not any("bias1" in n for n, _ in old.model.named_parameters())
    model, data = explorer.build(store.spec(recorder.run_id))
    model.load_state_dict(store.load_checkpoint(recorder.run_id)["model"])
    with torch.no_grad():
        assert torch.equal(model.eval()(data.x_val[:4]), old.model.eval()(data.x_val[:4]))
    with pytest.raises(runs.StoreError) as refused:
        runs.resume(recorder.run_id, store)
    message = str(refused.value)
    assert "cannot resume" in message and "does not fit" in message and "\n" not in message


# ---------------------------------------------------------------------------- DCA: source_norm "rms"
def rms(g):
    """RMSNorm over the last axis with its scale at 1 and eps = machine epsilon (torch.nn.RMSNorm's default)."""
    return g / torch.sqrt(g.square().mean(-1, keepdim=True) + torch.finfo(g.dtype).eps)


def gated_mix(sources, b, w, source_norm, axis=-1):
    """sum_i G_i * (b_i + relu(w^T n(G_i))), n = rms or nothing, b_i per feature: the GRN-v3 mix (DCA Sec. 3.1).
    The features are `axis` of each source (the channels of images)."""
    n = rms if source_norm == "rms" else (lambda g: g)
    last = [g.movedim(axis, -1) for g in sources]
    return sum(g * (b[i] + torch.relu(n(g) @ w)[..., None]) for i, g in enumerate(last)).movedim(-1, axis)


def linear_grn(source_norm="none", gate_init="normal", seed=0):
    return explorer.ExperimentSpec.from_dict({
        "data": {"name": "whitened-regression", "dim": 6, "n_train": 8, "n_val": 8},
        "model": {"name": "linear", "depth": 4, "width": 6},
        "topology": {"name": "grn-v3", "gate_init": gate_init, "source_norm": source_norm},
        "train": {"seed": seed}})


@pytest.mark.parametrize("source_norm", ["none", "rms"])
def test_grn_v3_gate_reads_the_sources_as_source_norm_says(source_norm):
    model, data = explorer.build(linear_grn(source_norm))
    model = model.double()
    topo = model.stack.topology
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        topo.gates.mul_(20.0)  # the gates a visible part of every mix
        topo.weights.copy_(0.5 * torch.rand(topo.weights.shape, generator=gen, dtype=torch.float64) + 0.25)
    x = data.x_train[:5].double() * 2.0  # sources away from unit RMS, so normalising them matters
    sources = [x]
    for t, layer in enumerate(model.stack.blocks):
        sources.append(gated_mix(sources, topo.weights[t], topo.gates[t], source_norm) @ layer.weight.T)
    expected = gated_mix(sources, topo.weights[-1], topo.gates[-1], source_norm)
    other = gated_mix(sources, topo.weights[-1], topo.gates[-1], "rms" if source_norm == "none" else "none")
    with torch.no_grad():
        assert torch.allclose(model(x), expected, **TOLERANCE)
        assert (other - expected).abs().max() > 1e-3  # the two gates are different functions here


def dca_gpt(source_norm="none", gate_init="normal"):
    return explorer.ExperimentSpec.from_dict({
        "data": {"name": "text", "context": 6, "max_chars": 2000, "n_val": 8},
        "model": {"name": "gpt", "depth": 2, "width": 8, "heads": 2, "mlp_ratio": 2},
        "topology": {"name": "dca", "gate_init": gate_init, "source_norm": source_norm}})


def test_dca_rms_gates_are_the_normalised_gate_of_each_query_key_and_value_mix():
    """DCA's three GRN-v3 mixes per block and its output mix, every gate reading rms(G_i), on a stand-in block
    f(q, k, v) that tells its three inputs apart; the stem is linear, so d_t = f(q_t, k_t, v_t)."""
    model, _ = explorer.build(dca_gpt("rms"))
    topo = model.stack.topology.double()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        topo.gates.mul_(40.0)
        topo.out_gates.mul_(40.0)
        topo.weights.copy_(torch.rand(topo.weights.shape, generator=gen, dtype=torch.float64) + 0.5)
    a, b, c = (torch.randn(8, 8, generator=gen, dtype=torch.float64) / 3 for _ in range(3))
    blocks = [lambda q, k, v: torch.tanh(q @ a + k @ b + v @ c)] * topo.n_blocks
    x0 = 2.0 * torch.randn(3, 6, 8, generator=gen, dtype=torch.float64)
    sources = [x0]
    for t, f in enumerate(blocks):
        q, k, v = (gated_mix(sources, topo.weights[m, t], topo.gates[m, t], "rms") for m in range(3))
        sources.append(f(q, k, v))
    expected = gated_mix(sources, topo.out_weights, topo.out_gates, "rms")
    identity = lambda z: z  # noqa: E731
    with torch.no_grad():
        assert torch.allclose(topo.run(x0, blocks, [identity] * topo.n_blocks), expected, **TOLERANCE)
        assert (gated_mix(sources, topo.out_weights, topo.out_gates, "none") - expected).abs().max() > 1e-3


@pytest.mark.parametrize("spec_of", [linear_grn, dca_gpt], ids=["grn-v3", "dca"])
def test_source_norm_changes_nothing_at_zero_gates_and_something_at_random_ones(spec_of):
    """The paper's init (w = 0): relu(0) = 0 whatever the gate reads, so both forms are the same network."""
    outputs = {}
    for gate_init in ("zero", "normal"):
        for source_norm in ("none", "rms"):
            model, data = explorer.build(spec_of(source_norm=source_norm, gate_init=gate_init))
            with torch.no_grad():
                outputs[gate_init, source_norm] = model(data.x_train[:4])
    assert torch.equal(outputs["zero", "none"], outputs["zero", "rms"])
    assert not torch.allclose(outputs["normal", "none"], outputs["normal", "rms"], atol=1e-6)


def test_grn_v3_rms_gate_normalises_image_sources_over_channels():
    """On images the features are the channels: each pixel's gate reads its channel vector RMS-normalised."""
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "digits-images"}, "model": {"name": "resnet-cifar", "depth": 8, "width": 3},
        "topology": {"name": "grn-v3", "gate_init": "normal", "source_norm": "rms"}})
    model, data = explorer.build(spec)
    model = model.double().eval()
    topo = model.stack.stacks[0].topology
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        topo.gates.mul_(50.0)
        topo.weights.copy_(torch.rand(topo.weights.shape, generator=gen, dtype=torch.float64) + 0.5)
        x = data.x_train[:3].double()
        assert torch.allclose(model(x), reference.forward(spec, model, x), **TOLERANCE)
        kernel = torch.randn(3, 3, 3, 3, generator=gen, dtype=torch.float64) / 3
        blocks = [lambda h: torch.tanh(F.conv2d(h, kernel, padding=1))] * topo.n_blocks
        x0 = 2.0 * torch.randn(2, 3, 4, 4, generator=gen, dtype=torch.float64)
        sources = [x0]
        for t, f in enumerate(blocks):
            sources.append(f(gated_mix(sources, topo.weights[t], topo.gates[t], "rms", axis=1)))
        expected = gated_mix(sources, topo.weights[-1], topo.gates[-1], "rms", axis=1)
        got = topo.run(x0, blocks, [stem_activation("none")] * topo.n_blocks)
        assert torch.allclose(got, expected, **TOLERANCE)


def gpt_raw(topology: dict) -> dict:
    return {**dca_gpt().to_dict(), "topology": topology}


def test_source_norm_is_a_declared_choice_of_the_gated_topologies_only():
    refused = {}
    for topology in ({"name": "grn-v3", "source_norm": "layer"}, {"name": "dca", "source_norm": "RMS"},
                     {"name": "grn-v2", "source_norm": "rms"}):
        with pytest.raises(explorer.SpecError) as error:
            explorer.ExperimentSpec.from_dict(gpt_raw(topology))
        refused[topology["name"]] = error.value
    assert all(e.path == "topology.source_norm" and "\n" not in str(e) for e in refused.values())
    assert "none, rms" in str(refused["grn-v3"]) and "none, rms" in str(refused["dca"])
    entries = explorer.registry("topologies")
    for name in ("grn-v3", "dca"):  # what the command line and the app's form are built from
        param = entries[name].param("source_norm")
        assert param.default == "none" and param.choices == ("none", "rms")
    assert dca_gpt().with_values({"topology.source_norm": "rms"}).topology.params["source_norm"] == "rms"
