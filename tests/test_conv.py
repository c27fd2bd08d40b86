"""Convolutional models: ResNet-(6n+2) structure, topologies per stage, shortcuts, All-CNN, zero-gamma."""

import pytest
import torch

import explorer
from conftest import section_id, topology_examples
from explorer.nn import Stack

IMAGES = {"name": "digits-images"}


def resnet(topology=None, **model):
    return explorer.ExperimentSpec.from_dict({
        "data": IMAGES, "model": {"name": "resnet-cifar", "depth": 14, "width": 4, **model},
        "topology": topology or {"name": "cascaded"}, "init": {"name": "kaiming"},
        "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "train": {"steps": 12, "log_every": 4, "batch_size": 32}})


def expected_resnet_parameters(n, w, c_in=3, classes=10, projection=False):
    """Counted from He et al.'s description, independently of the code: convs, BN scale+shift, FC."""
    conv = lambda a, b, k=3: a * b * k * k  # noqa: E731
    count = conv(c_in, w) + 2 * w  # stem conv + BN
    for stage, c in enumerate((w, 2 * w, 4 * w)):
        c_prev = c if stage == 0 else c // 2
        count += conv(c_prev, c) + conv(c, c) + 4 * c  # first block of the stage
        count += (n - 1) * (2 * conv(c, c) + 4 * c)
        if stage and projection:
            count += conv(c_prev, c, 1) + 2 * c
    return count + 4 * w * classes + classes


@pytest.mark.parametrize("shortcut", ["pad", "projection", "pool-bn"])
def test_resnet20_has_the_papers_structure(shortcut):
    spec = explorer.ExperimentSpec.from_dict({"data": {"name": "shapes", "n_train": 16, "n_val": 8},
                                              "model": {"name": "resnet-cifar", "shortcut": shortcut}})
    assert spec.model.depth == 20 and spec.model.width == 16  # the model's own defaults
    model, data = explorer.build(spec)
    stacks = [m for m in model.modules() if isinstance(m, Stack)]
    assert [len(s.blocks) for s in stacks] == [3, 2, 2]  # 9 blocks with the two transitions
    count = sum(p.numel() for p in model.parameters())
    classes = data.output_dim
    pool_bn = 2 * (16 + 32) if shortcut == "pool-bn" else 0  # BN over the input channels of the two transitions
    assert count == expected_resnet_parameters(3, 16, classes=classes, projection=shortcut == "projection") + pool_bn
    if shortcut == "pad":  # "0.27M" in He et al.'s Table 6, for CIFAR-10's 10 classes
        assert abs(count + 65 * (10 - classes) - 0.27e6) / 0.27e6 < 0.02
    assert model(data.x_train[:2]).shape == (2, classes)


# every topology example (TopologyInfo.examples) the spec accepts on the ResNet
TOPOLOGIES = topology_examples("resnet-cifar")


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=section_id)
@pytest.mark.parametrize("norm", ["batchnorm", "none"])
def test_every_topology_trains_inside_the_stages(topology, norm):
    """ResNet-20: stages of 3, 2 and 2 blocks under the topology (the examples fit two blocks); without
    normalisation it takes a smaller step (at 0.05 with momentum 0.9 GRN-v3's random gates blow it up)."""
    spec = resnet(topology, depth=20, norm=norm, shortcut="pad" if norm == "none" else "projection")
    run = explorer.train(spec.with_values({"optim.lr": 0.05 if norm == "batchnorm" else 0.02}))
    assert run.status == "finished"
    assert run.history[-1]["loss"] < run.history[0]["loss"]


@pytest.mark.parametrize("topology", [{"name": "grn-v1"}, {"name": "grn-v2"}, {"name": "grn-v3"}])
def test_grn_equals_the_resnet_at_init(topology):
    reference, data = explorer.build(resnet())
    model, _ = explorer.build(resnet(topology))
    reference.eval(), model.eval()
    x = data.x_train[:16]
    with torch.no_grad():
        assert torch.allclose(model(x), reference(x), atol=1e-5)


def test_learnable_tau_is_one_scalar_for_the_whole_network():
    model, _ = explorer.build(resnet({"name": "tau", "value": "1/sqrt(L)", "learnable": True}))
    scales = [n for n, role in explorer.roles(model).items() if role == "scale"]
    assert scales == ["stack.0.topology.tau"]
    assert model.stack[0].topology.tau.item() == pytest.approx((3 * 2) ** -0.5)  # L = 3n residual blocks


def test_zero_padding_shortcut_is_subsample_and_pad():
    model, data = explorer.build(resnet(shortcut="pad", norm="none"))
    transition = model.stack[1]
    with torch.no_grad():
        for p in transition.branch.parameters():
            p.zero_()
        x = torch.relu(torch.randn(2, 4, 8, 8))
        out = transition(x)
    assert out.shape == (2, 8, 4, 4)
    assert torch.equal(out[:, :4], x[:, :, ::2, ::2]) and torch.count_nonzero(out[:, 4:]) == 0


@pytest.mark.parametrize("learnable", [False, True])
def test_down_sampling_blocks_are_the_tau_papers_with_tau_on_the_branch(learnable):
    """Official tau-ResNet block with stride 2: relu(cat(BN(avgpool_1x1,s2(x)), 0) + tau * bn2(conv2(relu(bn1(conv1(x)))))).
    The old transition added its branch without tau."""
    from torch.nn import functional as F

    model, _ = explorer.build(resnet({"name": "tau", "value": 0.3, "learnable": learnable}, shortcut="pool-bn"))
    transition = model.stack[1]
    x = torch.relu(torch.randn(4, 4, 8, 8, generator=torch.Generator().manual_seed(0)))
    br = transition.branch
    with torch.no_grad():
        for bn in (br.norm1, br.norm2, transition.project[1]):  # non-trivial affine norms
            bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.2, 0.2)

    def bn(z, layer):
        return F.batch_norm(z, None, None, layer.weight, layer.bias, training=True, eps=layer.eps)

    y = bn(F.conv2d(torch.relu(bn(F.conv2d(x, br.conv1.weight, stride=2, padding=1), br.norm1)),
                    br.conv2.weight, padding=1), br.norm2)
    shortcut = bn(F.avg_pool2d(x, 1, stride=2), transition.project[1])
    expected = torch.relu(torch.cat([shortcut, torch.zeros_like(shortcut)], 1) + 0.3 * y)
    out = transition(x)
    assert torch.allclose(out, expected, atol=1e-5)
    if learnable:  # the one shared tau also learns from the down-sampling blocks
        out.sum().backward()
        assert model.stack[0].topology.tau.grad.abs() > 0


def test_zero_gamma_zeroes_each_branch_at_init():
    spec = resnet().with_values({"init.name": "zero-gamma"})
    model, data = explorer.build(spec)
    model.eval()
    x0 = model.embed(data.x_train[:4])
    with torch.no_grad():
        for block in model.stack[0].blocks:
            assert torch.count_nonzero(block(x0)) == 0
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert any(torch.count_nonzero(m.weight) > 0 for m in norms), "only the branch-closing norms are zeroed"


def test_allconv_structure_and_validation():
    spec = explorer.ExperimentSpec.from_dict({"data": IMAGES, "model": {"name": "allconv", "width": 8},
                                              "topology": {"name": "none"}})
    model, data = explorer.build(spec)
    convs = [m for m in model.modules() if type(m).__name__ == "Conv"]
    assert len(convs) == 9 and [c.weight.shape[-1] for c in convs] == [3] * 7 + [1, 1]
    assert model(data.x_train[:3]).shape == (3, 10)
    with pytest.raises(explorer.SpecError) as err:
        spec.with_values({"topology.name": "cascaded"})
    assert err.value.path == "topology.name"


@pytest.mark.parametrize("change, path", [({"model.depth": 15}, "model.depth"), ({"data.name": "digits"}, "data.name")])
def test_conv_models_refuse_what_does_not_fit(change, path):
    with pytest.raises(explorer.SpecError) as err:
        resnet().with_values(change)
    assert err.value.path == path
