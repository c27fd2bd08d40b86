"""explorer.diagnose: the papers' quantities measured on real models, and explanations that name a rule only
where one accounts for the run."""

import math
import re

import numpy as np
import pytest
import torch

import explorer


def measured_growth(spec) -> float:
    """||h_n|| / ||h_0|| of the stack at initialisation, measured here independently of the library: the root of
    the mean per-example squared ratio (what the tau paper's theorems bound), on 128 validation examples."""
    model, data = explorer.build(spec, device="cpu")
    model.eval()
    with torch.no_grad():
        h0 = model.embed(data.x_val[:128]).double()
        hn = model.stack(h0.float()).double()
    ratios = [float(hn[i].pow(2).sum() / h0[i].pow(2).sum()) for i in range(len(h0))]
    return math.sqrt(sum(ratios) / len(ratios))


def test_the_diagnosis_and_the_papers_page_give_one_number_for_the_same_seed():
    """The Train page's diagnosis and the tau claim's recorded R(L=30) (Papers page) measure one quantity."""
    from explorer.papers import tau

    for rule in ("1/L^0.25", "1/sqrt(L)"):
        spec = tau_spec(rule, **{"train.seed": 1})
        diagnosed = explorer.diagnose(spec, jacobian=False).quantity("stream growth ||h_n|| / ||h_0|| at init").value
        claimed = math.sqrt(float(tau.init_norm_ratio(rule, 30, seed=1)["ratio2"].mean()))
        assert diagnosed == pytest.approx(claimed, rel=1e-5), rule


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


def test_the_tau_explanation_names_the_learning_rate_and_what_it_changes():
    # the presets' lr 0.01 diverges at depth 30; at the paper's lr 0.001 the same depth trains, and depth 100 does not
    fast = explorer.train(tau_spec("1/L^0.25"))
    slow = explorer.train(tau_spec("1/L^0.25", **{"optim.lr": 0.001, "train.steps": 100}))
    deeper_spec = tau_spec("1/L^0.25", **{"optim.lr": 0.001, "model.depth": 100})
    deeper = explorer.train(deeper_spec)
    assert (fast.status, slow.status, deeper.status) == ("diverged", "finished", "diverged")
    assert slow.summary()["final_val_accuracy"] > 0.3
    text = explorer.diagnose(tau_spec("1/L^0.25"), jacobian=False).explain(fast)
    assert "this run trains with lr 0.01" in text and "10x the paper's Figure 1 rate 0.001 (Sec. 5.1)" in text
    assert "Try lr 0.001" in text and "Theorem 4, Sec. 3.3" in text
    assert f"the stream grew {measured_growth(tau_spec('1/L^0.25')):.3g}x" in text
    diagnosis = explorer.diagnose(deeper_spec, jacobian=False)
    text = diagnosis.explain(deeper)
    growth = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    assert growth.value == pytest.approx(measured_growth(deeper_spec), rel=1e-5)
    assert f"already uses the paper's Figure 1 rate lr 0.001 (Sec. 5.1): with the stream grown {growth.measured} " \
           f"at depth 100" in text and "Try lr" not in text
    rates = {q.name: q for q in diagnosis.quantities}["learning rate vs the paper's"]
    assert (rates.value, rates.verdict, "Sec. 5.1" in rates.paper) == (0.001, "consistent", True)


def dca_spec(topology: str, **values):
    """DCA's low-rank linear model at a size a hand computation checks: d = 8, two layers of rank 1 (r_* = 2)."""
    return explorer.ExperimentSpec.from_dict({
        "data": {"name": "whitened-regression", "dim": 8, "n_train": 64, "n_val": 64, "rank": 8, "seed": 3},
        "model": {"name": "lowrank", "depth": 2, "width": 8, "rank": 1},
        "topology": {"name": topology},
        "init": {"name": "xavier"},
        "optim": {"name": "adam", "lr": 0.01},
        "train": {"steps": 300, "batch_size": 64, "log_every": 50, "seed": 0},
    }).with_values(values)


def hand_target(spec) -> np.ndarray:
    """A from y = A x on the whitened training inputs (X^T X / n = I): A = Y^T X / n."""
    _, data = explorer.build(spec, device="cpu")
    x, y = data.x_train.double().numpy(), data.y_train.double().numpy()
    return y.T @ x / len(x)


def tail_energy(matrix: np.ndarray, keep: int) -> float:
    return float(np.sum(np.linalg.svd(matrix, compute_uv=False)[keep:] ** 2))


def test_dca_rank_and_excess_risk_match_a_hand_computation_on_a_resnet_run():
    spec = dca_spec("cascaded")
    run = explorer.train(spec)
    assert run.status == "finished"
    diagnosis = explorer.diagnose(spec, run=run)
    v = [(b.up.detach().double() @ b.down.detach().double()).numpy() for b in run.model.stack.blocks]
    a_hat = (np.eye(8) + v[1]) @ (np.eye(8) + v[0])  # Theorem 4.1's prod_t (I + V_t)
    target = hand_target(spec)
    rank = diagnosis.quantity("rank of the blocks' part M = A_hat - D after training")
    assert rank.value == np.linalg.matrix_rank(a_hat - np.eye(8)) == 2
    assert rank.verdict == "consistent" and "<= 2" in rank.predicted and "Theorem 4.1 (Sec. 4.1)" in rank.paper
    risk = diagnosis.quantity("excess risk ||A - A_hat||_F^2 after training")
    assert risk.value == pytest.approx(float(np.sum((target - a_hat) ** 2)), rel=1e-4)
    floor = tail_energy(target - np.eye(8), 2)  # ER*(C_res): Eckart-Young on A - I
    assert f"ER*(C_res) = {floor:.4g}" in risk.predicted and risk.value >= floor
    assert risk.verdict == "consistent"
    initial = diagnosis.quantity("excess risk ||A - A_hat||_F^2 at init")
    assert initial.value > risk.value  # training lowered it


def test_dca_gain_of_a_grn_v1_run_is_set_against_theorem_4_2():
    spec = dca_spec("grn-v1", **{"train.steps": 1500})
    run = explorer.train(spec)
    diagnosis = explorer.diagnose(spec, run=run)
    target = hand_target(spec)
    u, s, vt = np.linalg.svd(target - np.eye(8))
    delta = target - np.eye(8) - (u[:, :2] * s[:2]) @ vt[:2]
    guaranteed = float(np.trace(delta)) ** 2 / (8 - 2)  # Theorem 4.2's GRN-v1 term tr(Delta)^2 / (d - r_*)
    gain = diagnosis.quantity("gain over the best ResNet ER*(C_res) - ER after training")
    risk = diagnosis.quantity("excess risk ||A - A_hat||_F^2 after training")
    assert gain.value == pytest.approx(tail_energy(target - np.eye(8), 2) - risk.value, rel=1e-6)
    assert f">= {guaranteed:.4g}" in gain.predicted and "Theorem 4.2" in gain.paper
    assert gain.verdict == ("consistent" if gain.value >= guaranteed * (1 - 1e-3) else "differs")
    # GRN-v1's read-out weights the input by alpha: D = alpha I, and what the blocks add keeps rank <= r_*
    assert diagnosis.quantity("rank of the blocks' part M = A_hat - D after training").value <= 2


def test_a_dca_run_stalled_at_its_class_optimum_is_explained_by_theorem_4_1():
    spec = dca_spec("none", **{"train.steps": 1500})
    run = explorer.train(spec)
    diagnosis = explorer.diagnose(spec, run=run)
    risk = diagnosis.quantity("excess risk ||A - A_hat||_F^2 after training")
    floor = tail_energy(hand_target(spec), 1)  # ER*(C_base): the best rank-1 map
    assert floor <= risk.value <= 1.05 * floor
    # the same model, read as a run whose loss hardly moved (continued from its floor): a stall the class explains
    stalled = {"status": "finished", "diverged_at": None, "history": [{"step": 0, "loss": 1.0}, {"step": 50, "loss": 0.99}]}
    text = diagnosis.explain(stalled)
    assert "Theorem 4.1 (Sec. 4.1)" in text and f"ER* = {floor:.4g}" in text and "Try GRN-v1" in text
    assert diagnosis.explain(run) == "The run neither diverged nor stalled: nothing to explain."


def test_a_diverging_dca_run_no_rule_covers_is_not_given_a_cause():
    spec = dca_spec("cascaded", **{"optim.name": "sgd", "optim.lr": 100.0, "train.steps": 20, "train.log_every": 1})
    run = explorer.train(spec)
    assert run.status == "diverged"
    diagnosis = explorer.diagnose(spec, run=run)
    assert diagnosis.explanations() == []
    text = diagnosis.explain()
    assert text.startswith("No rule of the papers explains") and "not a diagnosis" in text
    initial = diagnosis.quantity("excess risk ||A - A_hat||_F^2 at init")
    final = diagnosis.quantity("excess risk ||A - A_hat||_F^2 after training")
    assert not (final.value <= initial.value)  # the divergence shows in DCA's quantity (grown, or not finite) ...
    assert f"excess risk ||A - A_hat||_F^2 after training {final.measured}" in text  # ... which is reported
    assert "Try" not in text.split("Generic suspects")[0] and "floor" not in text  # and not taken for a cause


def numbers(text: str) -> list[str]:
    """The numbers a text quotes, as written (30.8x reads 30.8, 1.76e+03x reads 1.76e+03)."""
    return re.findall(r"\d+(?:\.\d+)?(?:e[+-]\d+)?", text)


def assert_projector_lines(lines: list[str], paragraph: str) -> None:
    """Three lines of at most SUMMARY_WIDTH characters, quoting only numbers the paragraph quotes."""
    assert len(lines) == 3, lines
    assert all(len(line) <= explorer.diagnosis.SUMMARY_WIDTH == 90 for line in lines), [len(line) for line in lines]
    quoted = set(numbers(paragraph))
    assert all(set(numbers(line)) <= quoted for line in lines), (lines, paragraph)


def test_a_diverged_tau_run_is_summed_up_in_three_lines_with_the_paragraphs_numbers():
    spec = tau_spec("1/L^0.25")
    run = explorer.train(spec)
    assert run.status == "diverged"
    diagnosis = explorer.diagnose(spec, run=run, jacobian=False)
    lines, paragraph = diagnosis.summary_lines(run), diagnosis.explain(run)
    assert_projector_lines(lines, paragraph)
    growth = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    grew, bound, remedy = lines
    assert f"grew {growth.measured}" in grew and "depth 30" in grew and "tau = 0.43" in grew
    assert f"grew {growth.measured}" in paragraph and "tau = 0.43 at depth 30" in paragraph
    at_most = re.search(r"at most (\S+x)", paragraph).group(1)  # Theorem 1's bound, as the paragraph quotes it
    assert f"at most {at_most}" in bound and "1/sqrt(L) = 0.18" in bound and "Theorem 4, Sec. 3.3" in bound
    assert remedy == "Try tau = 1/sqrt(L) = 0.18, or lr 0.001 (the paper's)."
    assert "Try tau = 1/sqrt(L) = 0.18" in paragraph and "Try lr 0.001" in paragraph
    assert diagnosis.summary_lines() == lines  # the run diagnosed, by default
    # the paragraph says in plain words where the same rule diverges at the paper's rate
    assert "within 50 steps, diverges only from depth 50-60 on" in paragraph and "between 50 and" not in paragraph


def test_a_stalled_dca_run_is_summed_up_in_three_lines_with_the_paragraphs_numbers():
    spec = dca_spec("none", **{"train.steps": 1500})
    diagnosis = explorer.diagnose(spec, run=explorer.train(spec))
    stalled = {"status": "finished", "diverged_at": None,
               "history": [{"step": 0, "loss": 1.0}, {"step": 50, "loss": 0.99}]}
    lines, paragraph = diagnosis.summary_lines(stalled), diagnosis.explain(stalled)
    assert_projector_lines(lines, paragraph)
    risk = diagnosis.quantity("excess risk ||A - A_hat||_F^2 after training")
    floor = tail_energy(hand_target(spec), 1)
    assert f"reached {risk.value:.4g}" in lines[0] and f"ER* = {floor:.4g}" in lines[0]
    assert "Theorem 4.1 (Sec. 4.1)" in lines[1] and "rank <= 1" in lines[1]
    assert lines[2].startswith("Try GRN-v1")


def test_a_failure_no_rule_explains_gets_three_lines_that_name_no_cause():
    spec = explorer.preset("tau-fig1-1/L").with_values({"model.depth": 3, "train.steps": 20, "optim.lr": 50.0})
    run = explorer.train(spec)
    assert run.status == "diverged"
    diagnosis = explorer.diagnose(spec, run=run, jacobian=False)
    lines = diagnosis.summary_lines(run)
    assert_projector_lines(lines, diagnosis.explain(run))
    assert lines[0] == f"The run diverged at step {run.diverged_at}."
    assert "No rule of the papers explains it" in lines[1] and "not a diagnosis" in lines[2] and "lr = 50" in lines[2]
    assert not any("Theorem" in line or "Try" in line for line in lines)
    finished = {"status": "finished", "diverged_at": None,
                "history": [{"step": 0, "loss": 2.0}, {"step": 9, "loss": 0.5}]}
    assert diagnosis.summary_lines(finished) == ["The run neither diverged nor stalled: nothing to explain."]


def test_the_table_puts_the_verdict_first_in_words_that_say_what_differs_from_what():
    spec = tau_spec("1/L^0.25")
    diagnosis = explorer.diagnose(spec, run=explorer.train(spec))
    rows = diagnosis.table()
    assert all(list(row)[0] == "verdict" for row in rows)
    assert not any(row["verdict"] in ("n/a", "differs", "consistent", "explains") for row in rows)
    verdicts = {row["quantity"]: row["verdict"] for row in rows}
    tau = diagnosis.quantity("tau vs 1/sqrt(L)")
    assert tau.verdict == "differs"
    assert verdicts[tau.name] == (f"differs: tau = {tau.value:.3g} is above the threshold 1/sqrt(30) = "
                                  f"{30 ** -0.5:.3g}: the stream is not bounded")
    assert verdicts["learning rate vs the paper's"] == "differs: lr 0.01 with sgd here, lr 0.001 with SGD in the paper"
    # not applicable: each says why
    for q in diagnosis.quantities:
        if q.verdict == "n/a":
            assert verdicts[q.name].startswith("not applicable: ") and len(verdicts[q.name]) > 30, verdicts[q.name]
    assert "after training" in verdicts["stream growth, final weights"]


@pytest.mark.parametrize("module", ["explorer/diagnosis.py", "explorer/budget.py"])
def test_the_frameworks_name_no_model_probe_topology_or_init(module):
    """The diagnosis and the budget read capabilities (the papers' registered rules, the registries' metadata), so a
    new model or probe never needs a line in them."""
    from pathlib import Path

    from explorer.registries import registry

    source = (Path(__file__).resolve().parents[1] / module).read_text()
    named = sorted(name for kind in ("models", "probes", "topologies", "inits") for name in registry(kind).keys()
                   if re.search(r"[\"']%s[\"']" % re.escape(name), source))
    assert not named, f"{module} names {named}"


def test_every_paper_with_rules_registers_them_once_and_a_second_registration_is_refused():
    from explorer.diagnosis import register_rules
    from explorer.papers import PAPERS

    with_rules = [paper.id for paper in PAPERS.values() if paper.diagnosis is not None]
    assert with_rules == list(PAPERS)  # every paper speaks in the diagnosis
    with pytest.raises(ValueError, match="registered twice"):
        register_rules(with_rules[0], lambda context: None)
