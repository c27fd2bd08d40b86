"""Sub-block conditioning (Cutting the Skip Eq. 5-9): exact J_l and K_l, and the Lanczos estimate against them."""

import math

import numpy as np
import pytest
import torch

import explorer
from explorer.probes import probe
from explorer.probes.conditioning import kappa, lanczos_ritz_values


def build(model, data, topology="cascaded", init="default"):
    return explorer.build(explorer.ExperimentSpec.from_dict({
        "data": data, "model": model, "topology": {"name": topology}, "init": {"name": init},
        "train": {"steps": 2, "log_every": 1}}))


MLP = ({"name": "mlp", "depth": 2, "width": 6, "hidden_ratio": 1.0, "bias": False}, {"name": "spirals", "n_val": 16})
VIT = ({"name": "vit", "depth": 1, "width": 8, "heads": 2, "patch": 8},
       {"name": "shapes", "size": 16, "n_train": 8, "n_val": 8})


def test_lanczos_ritz_values_reach_the_spectrum_of_a_known_matrix():
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(30, 30, generator=gen, dtype=torch.float64))
    eig = torch.logspace(-3, 2, 30, dtype=torch.float64)
    a = (q * eig) @ q.T
    ritz = lanczos_ritz_values(lambda v: a @ v, 30, 30, torch.Generator().manual_seed(1))
    assert ritz[-1] == pytest.approx(100.0, rel=1e-8) and ritz[0] == pytest.approx(1e-3, rel=1e-6)
    few = lanczos_ritz_values(lambda v: a @ v, 30, 8, torch.Generator().manual_seed(1))
    assert few[-1] == pytest.approx(100.0, rel=1e-3) and few[0] >= 1e-3 * (1 - 1e-9)  # interlacing: from above


def test_kappa_leaves_out_exact_zeros_and_reports_the_rank():
    assert kappa(np.array([4.0, 2.0, 1.0, 1e-12]), 1e-6) == (4.0, 3)
    k, rank = kappa(np.zeros(3), 1e-6)  # a zero Jacobian has an empty range: no condition number
    assert math.isnan(k) and rank == 0


def test_exact_param_jacobian_matches_a_dense_jacobian_of_the_branch_parameters():
    model, data = build(*MLP)
    x = data.x_val[:4]
    result = probe(model, x, "param-jacobian", part="mlp", block=2, max_inputs=4, method="exact")  # 1 = first
    block = model.stack.blocks[1]
    names = [n for n, _ in block.named_parameters()]
    params = [p.detach() for _, p in block.named_parameters()]
    x0 = model.embed(x).detach()

    def f(*values):
        return torch.func.functional_call(model.stack, {f"blocks.1.{n}": v for n, v in zip(names, values)}, (x0,))

    jac = torch.autograd.functional.jacobian(f, tuple(params))
    dense = torch.cat([j.reshape(x0.numel(), -1) for j in jac], dim=1).double()
    expected = torch.linalg.svdvals(dense).numpy()
    assert np.allclose(result["param_singular_values"], expected, rtol=1e-5, atol=1e-6 * expected[0])
    assert result["exact"].tolist() == [1, 1]


@pytest.mark.parametrize("topology", ["grn-v1", "ancre"])
def test_param_jacobian_through_a_topology_with_a_fast_path_matches_a_row_by_row_jacobian(topology):
    """GRN-v1 and ANCRe mix the stream with an autograd.Function, which torch.func cannot differentiate: the
    probe must take their plain-autograd path."""
    model, data = build(*MLP, topology=topology)
    with torch.no_grad():  # off the symmetric initial mix, so the coefficients matter
        for p in model.stack.topology.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    x = data.x_val[:2]
    result = probe(model, x, "param-jacobian", part="mlp", block=2, max_inputs=2, method="exact")
    block, x0 = model.stack.blocks[1], model.embed(x).detach()
    rows = []
    for i in range(model.stack(x0).numel()):  # a fresh forward per row: one backward through each graph
        grads = torch.autograd.grad(model.stack(x0).reshape(-1)[i], list(block.parameters()))
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    expected = torch.linalg.svdvals(torch.stack(rows).double()).numpy()
    assert np.allclose(result["param_singular_values"], expected, rtol=1e-5, atol=1e-6 * expected[0])


@pytest.mark.parametrize("spec, part, inputs", [(MLP, "mlp", 4), (VIT, "attention", 2)])
def test_lanczos_kappa_is_within_ten_percent_of_the_exact_value(spec, part, inputs):
    model, data = build(*spec)
    x = data.x_val[:inputs]
    exact = probe(model, x, "param-jacobian", part=part, max_inputs=inputs, method="exact", rtol=1e-4)
    estimate = probe(model, x, "param-jacobian", part=part, max_inputs=inputs, method="lanczos", iterations=400,
                     rtol=1e-4)
    assert estimate["exact"].tolist() == [0, 0]
    for key in ("param_kappa", "input_kappa"):
        assert float(estimate[key]) == pytest.approx(float(exact[key]), rel=0.10), key


def test_attention_probe_refuses_models_without_attention_and_bad_blocks():
    model, data = build(*MLP)
    with pytest.raises(explorer.SpecError) as err:
        probe(model, data.x_val[:2], "param-jacobian", part="attention")
    assert err.value.path == "probe.part"
    with pytest.raises(explorer.SpecError) as err:
        probe(model, data.x_val[:2], "param-jacobian", part="mlp", block=5)
    assert err.value.path == "probe.block"


def test_a_param_jacobian_interrupted_midway_leaves_the_model_as_it_was(monkeypatch):
    """The probe swaps parameters in and out of a module to form J_l; an error inside that swap (a time limit,
    a failing jvp) must not leave the probed model holding plain tensors where its parameters were."""
    from explorer.probes import conditioning

    def fails_inside(fn, flat, *args, **kwargs):  # evaluates the swapped-in forward once, then stops
        fn(flat)
        raise RuntimeError("interrupted")

    monkeypatch.setattr(conditioning, "_kappa_of", fails_inside)
    spec = explorer.preset("skip-table1-digits-skip").with_values({"model.depth": 2, "train.steps": 1,
                                                                   "train.log_every": 1})
    model, data = explorer.build(spec)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(RuntimeError, match="interrupted"):
        probe(model, data.x_val[:4], "param-jacobian")
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    assert all(isinstance(p, torch.nn.Parameter) and p.is_leaf for p in after.values())
    assert all(torch.equal(after[name], value) for name, value in before.items())
