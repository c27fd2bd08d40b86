"""explorer.diagnose: the papers' quantities measured on real models, and explanations that name a rule only
where one accounts for the run."""

import math

import numpy as np
import pytest
import torch

import explorer


def measured_growth(spec) -> float:
    """||h_n|| / ||h_0|| of the stack at initialisation, measured here independently of the library."""
    model, data = explorer.build(spec, device="cpu")
    model.eval()
    with torch.no_grad():
        h0 = model.embed(data.x_val[:64])
        hn = model.stack(h0)
    return math.sqrt(float(hn.double().pow(2).sum()) / float(h0.double().pow(2).sum()))


def tau_spec(rule: str, **values):
    return explorer.preset(f"tau-fig1-{rule}").with_values({"model.depth": 30, "train.steps": 20, **values})


def test_a_diverging_tau_run_is_explained_by_the_tau_paper_with_its_numbers():
    spec = tau_spec("1/L^0.25")
    run = explorer.train(spec)
    assert run.status == "diverged"
    diagnosis = explorer.diagnose(spec, run=run)
    growth = measured_growth(spec)
    quantity = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    assert quantity.value == pytest.approx(growth, rel=1e-5)
    text = diagnosis.explain(run)
    assert "tau paper" in text and "Theorem 4" in text and "Sec. 3.3" in text
    assert f"{growth:.3g}x" in text
    assert f"1/sqrt(L) = {30 ** -0.5:.2f}" in text and "0.18" in text
    assert "Try tau = 1/sqrt(L)" in text
    assert "lr 0.001" in text  # the paper's Figure 1 learning rate, against this run's 0.01
    assert [q.verdict for q in diagnosis.quantities if q.name == "tau vs 1/sqrt(L)"] == ["differs"]
    # the explanation is the same whether the outcome comes from the Run or from a stored record's dict
    assert explorer.diagnose(spec).explain(run.summary()) == text


def test_tau_at_the_threshold_trains_and_its_growth_is_within_the_bound():
    spec = tau_spec("1/sqrt(L)")
    run = explorer.train(spec)
    assert run.status == "finished"
    diagnosis = explorer.diagnose(spec, run=run)
    quantity = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    assert quantity.verdict == "consistent"
    assert quantity.value == pytest.approx(measured_growth(spec), rel=1e-5)
    blocks = spec.model.params["depth"] - 1
    weights = explorer.build(spec, device="cpu")[0].stack.blocks[0].weight
    g = float(weights.detach().double().pow(2).mean()) * weights.shape[1]
    bound = math.sqrt(explorer.theory.predicted_norm_growth(blocks, 30 ** -0.5, weight_variance=g).upper[-1])
    assert quantity.value <= bound
    assert diagnosis.explanations() == []
    assert "nothing to explain" in diagnosis.explain(run)


def test_a_divergence_no_rule_covers_is_not_given_a_cause():
    spec = explorer.preset("tau-fig1-1/L").with_values({"model.depth": 3, "train.steps": 20, "optim.lr": 50.0})
    run = explorer.train(spec)
    assert run.status == "diverged"
    diagnosis = explorer.diagnose(spec, run=run)
    assert diagnosis.explanations() == []
    text = diagnosis.explain()
    assert text.startswith("No rule of the papers explains")
    assert "learning rate" in text and "not a diagnosis" in text
    assert "Theorem 4" not in text and "Try tau" not in text


def test_ancre_gets_its_shortcut_mass_and_regime():
    for name, k in (("ancre-fig2b-ancre", 3), ("ancre-fig2c-ancre", 4)):
        spec = explorer.preset(name)
        diagnosis = explorer.diagnose(spec)
        quantity = diagnosis.quantity("input shortcut mass at init")
        model, _ = explorer.build(spec, device="cpu")
        own = explorer.probe(model, torch.zeros(1, 8), "coefficients")["own"]
        assert quantity.value == pytest.approx(float(own[k - 1, 0]))
        assert f"0:{k - 1}" in quantity.predicted and "Theorem 3.3" in quantity.predicted
    single = explorer.diagnose(explorer.preset("ancre-fig2b-0:1")).quantity("input shortcut mass at init")
    assert "Theorem 3.2" in single.predicted and single.value == 0
    assert explorer.diagnose(explorer.preset("tau-fig1-1/L")).quantity("input shortcut mass at init") is None


def test_a_skipless_vit_gets_its_attention_conditioning_against_proposition_1():
    spec = explorer.preset("skip-table1-digits-skipless")
    diagnosis = explorer.diagnose(spec, jacobian=False)
    quantity = diagnosis.quantity("attention kappa at init (median over blocks and heads)")
    model, data = explorer.build(spec, device="cpu")
    kappa = explorer.probe(model, data.x_val[:1], "attention")["kappa"]
    assert quantity.value == pytest.approx(float(np.median(kappa)))
    assert "Proposition 1" in quantity.paper
    assert [rule.quantity for rule in diagnosis.rules] == [quantity.name]  # diffuse logits, no skips
    # the paper's init makes the logits diagonally dominant: the rule no longer fires
    fixed = explorer.diagnose(explorer.preset("skip-table1-digits-skipless-init"), jacobian=False)
    assert fixed.rules == ()
    assert diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init").verdict == "n/a"  # not the tau model
