"""Claims: the decision rule (noise, floors, clear and reversed effects), the framework (rows, errors as verdicts,
JSON, the table, unknown ids), `explorer claims --fast` over every paper, and one negative control per claim: a
swapped or broken set-up whose verdict must differ from the claim's own (a check that cannot fail is a defect)."""

import dataclasses
import json
import types

import pytest

from explorer.cli import main
from explorer.papers import ancre, dca, idinit, skipless
from explorer.papers import claims as registry
from explorer.papers.claims import (PAPERS, ROW_KEYS, VERDICTS, Decision, Verdict, claims, combine, decide,
                                    decide_all, run_claims)


# ---- the decision rule ------------------------------------------------------------------------------------------

def test_a_clear_effect_holds_and_its_reverse_does_not():
    assert decide([0.50, 0.55, 0.45], fast_margin=1).verdict == "holds"
    assert decide([-0.50, -0.55, -0.45], fast_margin=1).verdict == "does-not-hold"


def test_noise_is_inconclusive():
    assert decide([0.5, -0.4, 0.3], fast_margin=1).verdict == "inconclusive"       # the seeds disagree
    assert decide([0.1, 0.9, 0.05], fast_margin=1).verdict == "inconclusive"       # same sign, mean < 2 std
    assert decide([0.01, 0.012, 0.011], fast_margin=1, min_effect=0.05).verdict == "does-not-hold"  # too small


def test_a_floor_makes_any_effect_inconclusive():
    decision = decide([0.5, 0.55, 0.45], fast_margin=1, floors={"accuracy at chance": True, "other": False})
    assert decision.verdict == "inconclusive" and "accuracy at chance" in decision.reason
    assert "accuracy at chance" in decision.rule
    assert decide_all([True, True], "passes", floors={"too short": True}).verdict == "inconclusive"


def test_one_seed_decides_only_beyond_the_fast_margin():
    assert decide([0.3], fast_margin=0.5).verdict == "inconclusive"
    assert decide([0.7], fast_margin=0.5).verdict == "holds"
    assert decide([-0.7], fast_margin=0.5).verdict == "does-not-hold"
    assert "one seed" in decide([0.7], fast_margin=0.5).rule


def test_per_seed_checks_and_combined_parts():
    assert decide_all([True, True, True], "t").verdict == "holds"
    assert decide_all([False, False], "t").verdict == "does-not-hold"
    assert decide_all([True, False], "t").verdict == "inconclusive"
    holds, no, maybe = Decision("holds", "a", ""), Decision("does-not-hold", "b", ""), Decision("inconclusive", "c", "")
    assert combine({"x": holds, "y": holds}).verdict == "holds"
    assert combine({"x": holds, "y": maybe}).verdict == "inconclusive"
    assert combine({"x": maybe, "y": no}).verdict == "does-not-hold"


# ---- the framework ----------------------------------------------------------------------------------------------

@pytest.fixture
def scratch_claims(monkeypatch):
    """Two claims of our own, registered for the test only."""
    monkeypatch.setattr(registry, "CLAIMS", {})

    @registry.claim("tau", "fine", "Sec. 1", "it holds", "\"quoted\" (Sec. 1)", "same as cpu")
    def fine(mode):
        return Verdict(decide([1.0, 1.1, 0.9], fast_margin=1), {"gap": [1.0, 1.1, float("nan")]}, "ours: 1",
                       "our set-up", {"nan": float("nan")}, "ok")

    @registry.claim("tau", "broken", "Sec. 2", "it breaks", "\"quoted\" (Sec. 2)", "same as cpu")
    def broken(mode):
        raise RuntimeError("boom")



def test_a_claim_that_errors_is_a_row_not_a_crash(scratch_claims):
    rows = run_claims("tau", fast=True)
    assert [r["verdict"] for r in rows] == ["holds", "error"]
    assert set(rows[0]) == set(ROW_KEYS) and rows[0]["per_seed"] == {"gap": [1.0, 1.1, None]}
    assert rows[0]["measured"] == {"nan": None} and rows[0]["source"] == "\"quoted\" (Sec. 1)"
    assert "RuntimeError: boom" in rows[1]["note"] and rows[1]["reason"] == "RuntimeError: boom"
    json.dumps(rows)  # JSON-able, NaN turned into null


def test_explorer_claims_prints_a_readable_table_and_refuses_unknown_ids(scratch_claims, capsys):
    assert main(["claims", "--paper", "tau", "--id", "fine"]) == 0
    out = capsys.readouterr().out
    assert "HOLDS" in out and "per seed:  gap: 1, 1.1, -" in out and "rule:" in out and "source:" in out
    assert main(["claims", "--paper", "tau", "--id", "nosuch"]) != 0
    err = capsys.readouterr().err
    assert "nosuch" in err and "valid ids: fine, broken" in err


def test_paper_scale_without_a_spec_is_inconclusive_with_its_reason_and_runs_nothing(monkeypatch):
    table7 = registry.CLAIMS["dca/table7-ablation"]
    monkeypatch.setattr(dca, "_summaries", lambda specs: pytest.fail("trained at paper scale without a paper spec"))
    row = table7.run(scale="paper", device="cuda")
    assert row["verdict"] == "inconclusive" and "no paper-scale spec" in row["reason"] and "LM1B" in row["reason"]
    with pytest.raises(registry.SpecError):
        table7.run(scale="huge")


def test_ids_are_unique_per_paper_and_papers_are_known():
    with pytest.raises(ValueError):
        registry.claim("nope", "x", "", "", "", "")
    every = claims()
    assert len({(c.paper, c.id) for c in every}) == len(every)
    assert {c.paper for c in every} <= set(PAPERS)
    assert all(c.source and c.paper_scale for c in every)


def test_unknown_paper_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["claims", "--paper", "nope"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


# ---- every claim in fast mode, and its negative control ----------------------------------------------------------

@pytest.fixture(scope="module")
def fast_rows(papers_cache_dir):
    """Every claim's fast-mode row, by "paper/id" (their runs are cached in the paper modules, so the controls
    that swap arms re-use them, and kept in the session's papers_cache_dir, for the notebooks' kernels)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_PAPERS_CACHE_DIR", str(papers_cache_dir))
        return {f"{r['paper']}/{r['id']}": r for r in run_claims(fast=True, workers=2)}


def test_explorer_claims_fast_runs_every_claim_without_errors(fast_rows, capsys):
    rows = list(fast_rows.values())
    assert {r["paper"] for r in rows} == set(PAPERS) and len(rows) == len(claims())
    errors = [f"{key}: {r['note']}" for key, r in fast_rows.items() if r["verdict"] == "error"]
    assert not errors, errors
    for row in rows:
        assert set(row) == set(ROW_KEYS) and row["verdict"] in VERDICTS
        assert (row["per_seed"] or row["verdict"] == "not-tested") and row["rule"] and row["threshold"] and row["setup"]
        assert row["source"] and row["summary"], row["id"]
        assert all(len(values) == 1 for values in row["per_seed"].values()), row["id"]  # fast mode: one seed
    json.dumps(rows)
    print("\n".join(f"{key}: {r['verdict']} in {r['seconds']} s" for key, r in fast_rows.items()))


def _fake_run(val_loss=None, accuracy=None, loss=None):
    summary = {"final_val_loss": val_loss, "final_val_accuracy": accuracy, "final_loss": loss, "status": "finished"}
    return types.SimpleNamespace(history=[{"val_loss": val_loss}], summary=lambda: summary,
                                 model=types.SimpleNamespace(stack=types.SimpleNamespace(topology=None)))


def _fake_gpt_runs(monkeypatch):
    """ANCRe's and DCA's GPT claims on stand-in runs: val loss 2.0 for cascaded/Transformer arms, 1.9 for the others,
    3.0 for a run trained at lr 1e-6 (the controls' broken arm), with a little seed noise."""
    def loss(broken, cascaded, seed):
        return (3.0 if broken else 2.0 if cascaded else 1.9) + 0.001 * seed

    def ancre_run(name, **overrides):
        return _fake_run(val_loss=loss(overrides.get("optim.lr") == 1e-6, name.endswith("cascaded"),
                                       overrides.get("train.seed", 0)))

    def dca_summary(spec):
        raw = spec.to_dict()
        run = _fake_run(val_loss=loss(raw["optim"]["lr"] == 1e-6, raw["topology"]["name"] == "cascaded",
                                      raw["train"]["seed"]))
        return run.summary()

    monkeypatch.setattr(ancre, "train_cached", ancre_run)
    monkeypatch.setattr(ancre, "train_presets", lambda requests, callbacks=(): [ancre_run(n, **o) for n, o in requests])
    monkeypatch.setattr(dca, "_summaries", lambda specs: [dca_summary(spec) for spec in specs])


def _fake_vit_runs(monkeypatch, accuracy):
    """Cutting the Skip's Table 1 claim on stand-in runs: `accuracy[preset]` (+ 0.001 x seed), training loss 1 - it."""
    def runs(names, fast, seeds, *args):
        return {(n, s): types.SimpleNamespace(name=n, summary=lambda n=n, s=s: {
            "final_val_accuracy": accuracy[n] + 0.001 * s, "final_loss": 1.0 - accuracy[n]}) for n in names for s in seeds}

    monkeypatch.setattr(skipless, "trained_all", runs)


def _fake_resnet_runs(monkeypatch):
    """IDInit's Table 1 claim on stand-in runs: validation accuracy at chance until a crossing step, then a plateau;
    IDInit crosses at step 300 to 0.65, Kaiming at 400 to 0.57 (+ 0.002 x seed)."""
    def runs(specs):
        out = []
        for spec in specs:
            cross, final = (300, 0.65) if spec.init.name == "idinit" else (400, 0.57)
            out.append(types.SimpleNamespace(history=[
                {"step": t, "val_accuracy": 0.2 if t < cross else final + 0.002 * spec.train.seed}
                for t in range(0, spec.train.steps + 1, 10)]))
        return out

    monkeypatch.setattr(idinit, "train_all", runs)


SKIP, DEFAULT, INIT = skipless.TABLE1
# claim -> (controls that must make it fail, stand-ins installed first or None for real runs in fast mode)
CONTROLS = {
    "ancre/depth-slows-plain-lnn": ({"depths": (4, 3, 2)}, None),
    "ancre/shortcut-02-exponential": ({"slow": "0:2", "fast_arm": "0:1"}, None),
    "ancre/ancre-finds-fast-rate": ({"pairs": ((3, "ancre-fig2b-0:2", "ancre-fig2b-none"),)}, None),  # see PASSING
    "ancre/normalization-needed": ({"better_overrides": {"optim.lr": 1e-6}}, _fake_gpt_runs),  # GPT: stand-ins
    "ancre/gpt-block-ancre": ({"ancre_overrides": {"optim.lr": 1e-6}}, _fake_gpt_runs),
    "dca/fig1-resnet-vs-grn-v1": ({"arms": ("grn-v1", "resnet"), "inits": ("xavier",)}, None),
    "dca/thm41-class-optima": ({"arms": (("base", "none"), ("resnet", "grn-v1"), ("grn_v1", "cascaded"))}, None),
    "dca/dca-equals-transformer-at-init": ({"variants": ("none",)}, None),
    "dca/table7-ablation": ({"variant_overrides": {"optim.lr": 1e-6}}, _fake_gpt_runs),
    # stand-ins trained long enough (20000 steps) for the under-training floor to let the width trend be judged
    "dca/table2-width-trend": ({"dca_overrides": {"optim.lr": 1e-6}, "steps": 20000}, _fake_gpt_runs),
    "idinit/rank-constraint": ({"arms": ("padded identity", "zero padding")}, None),
    "idinit/gd-vs-sgd-symmetry": ({"arms": ("SGD+momentum", "GD")}, None),
    "idinit/idiz-dead-weights": ({"eps_dead": 1e-6, "eps_alive": 0.0}, None),
    "idinit/chi-at-init": ({"arms": ("idinit", "kaiming")}, None),
    "idinit/steps-to-accuracy": ({"arms": ("idinit", "kaiming")}, _fake_resnet_runs),  # fast mode: a smoke test
    "tau/init-norm-sharp-threshold": ({"bounded": "1/L^0.25", "growing": "1/sqrt(L)"}, None),
    "tau/fig1-depth30-explodes": ({"exploding": "1/sqrt(L)"}, None),  # see PASSING
    "tau/fig1-threshold": ({"trainable": ("1/L^0.25",), "exploding": "1/L"}, None),
    "tau/fig3-bn-norm-growth": ({"arms": (("tau-fig3-bn-tau", "BN + tau"), ("tau-fig3-bn", "BN"))}, None),
    "skipless/kl-conditioning": ({"arms": ("proposed", "default")}, None),
    "skipless/table1-accuracy": ({"arms": (SKIP, INIT, DEFAULT)}, lambda mp: _fake_vit_runs(
        mp, {SKIP: 0.40, DEFAULT: 0.21, INIT: 0.36})),
    "skipless/fig4-dense-miou": None,  # not-tested (needs self-supervised training): nothing to fail
    "ancre/fewer-steps-to-match": ({"ancre_overrides": {"optim.lr": 1e-6}}, None),  # ANCRe does not learn
    "dca/same-quality-faster": ({"variant_overrides": {"optim.lr": 1e-6}}, None),  # DCA does not learn
    "idinit/momentum-amplifies-asymmetry": ({"swapped": True}, None),
    "tau/backward-sharp-threshold": ({"bounded": "1/L^0.25", "growing": "1/sqrt(L)"}, None),
    "skipless/skips-improve-conditioning": ({"swapped": True}, None),
    "tau/fig5-1000-layers-width-8": ({"rule": "1/L^0.25"}, None),  # the exploding rate at the same depth
    "ancre/table5-ablation": ({"ancre_overrides": {"optim.lr": 1e-6}}, None),  # ANCRe does not learn; see PASSING
    "ancre/table6-overhead": ({"ancre_overrides": {"model.depth": 12}}, None),  # twice the blocks: big by construction
    "dca/thm43-gain-shrinks-with-rank": ({"swapped": True}, None),  # the gain read as ER(GRN-v1) - ER(ResNet)
    "tau/fig2-no-norm-needs-tau": ({"trains": "1", "fails": "1/sqrt(L)"}, None),  # the two taus exchanged
    # skipless + init under SOAP at lr 3e-5 learns (about 0.35 in fast mode at one or two threads) but stays far from
    # the skip ViT and from AdamW (the default-init skipless arm is no control: at chance or not by the thread count)
    "skipless/table1-soap": ({"init_overrides": {"optim.lr": 3e-5}}, None),
    "skipless/fig1-steps-to-loss": ({"arms": (SKIP, INIT, DEFAULT)}, None),  # the two inits swapped
    "idinit/fig6-hyperparameter-robustness": ({"arms": ("idinit", "kaiming")}, None),  # the arms swapped
    "idinit/table2-ablation": ({"full_overrides": {"optim.lr": 0.002}}, None),  # full IDInit at a 50x smaller rate
    "dca/fig6-depth-gain": ({"dca_overrides": {"optim.lr": 1e-6}}, None),  # DCA does not learn, at either depth
    "dca/table4-retrofit": ({"topology": {"name": "none"}}, None),  # the switch drops the residual: not the function
}


# claims whose own fast verdict may already be does-not-hold: a set-up that must pass, to see the verdict flip
PASSING = {"ancre/ancre-finds-fast-rate": {"pairs": ((3, "ancre-fig2b-0:2", "ancre-fig2b-0:2"),)},
           "tau/fig1-depth30-explodes": {"lr": 0.01},
           # the fixed arm left untrained, the learnable one trained at a tenth of the learning rate
           "ancre/table5-ablation": {"fixed_overrides": {"optim.lr": 1e-6}, "learnable_overrides": {"optim.lr": 3e-4}}}


def test_every_claim_has_a_negative_control():
    assert set(CONTROLS) == {f"{c.paper}/{c.id}" for c in claims()}


@pytest.mark.parametrize("key", list(CONTROLS))
def test_the_negative_control_makes_the_claim_fail(key, fast_rows, monkeypatch):
    if CONTROLS[key] is None:  # a not-tested claim decides nothing, so it has no failing control: it stays not-tested
        assert fast_rows[key]["verdict"] == "not-tested", (key, fast_rows[key]["reason"])
        return
    controls, stand_ins = CONTROLS[key]
    claim = registry.CLAIMS[key]
    if stand_ins is not None:  # the GPT and ViT claims: stand-in runs (the check's logic, not the training)
        stand_ins(monkeypatch)
        own = claim.run(fast=False)["verdict"]
    else:
        own = fast_rows[key]["verdict"]
    control = claim.run(fast=stand_ins is None, **controls)
    assert control["verdict"] == "does-not-hold", (key, control["reason"], control["note"])
    if own == "does-not-hold":  # the claim fails on its own at this scale: show that the check can also pass
        assert key in PASSING, f"{key} does not hold in fast mode: give it a passing control"
        own = claim.run(fast=True, **PASSING[key])["verdict"]
        assert own == "holds", (key, own)
    assert own != control["verdict"], (key, own)


# ---- the full-mode results recorded with the package ----------------------------------------------------------

def test_the_recorded_full_mode_results_cover_every_claim_with_the_current_checks():
    stored = registry.recorded()
    assert {"date", "machine", "command", "commit"} <= set(stored["about"])
    assert [f"{r['paper']}/{r['id']}" for r in stored["rows"]] == [f"{c.paper}/{c.id}" for c in claims()]
    for row in stored["rows"]:
        key = f"{row['paper']}/{row['id']}"
        assert set(row) == set(ROW_KEYS) | {"stale", "environment"} and row["verdict"] in VERDICTS, key
        assert row["verdict"] != "error", key
        assert not row["stale"], f"{key}: its check changed since it was recorded: rerun it in full mode (see " \
                                 "notebooks/README.md, Verdicts) and record the row again"
        claim = registry.CLAIMS[key]
        runs = row["mode"].removeprefix("full mode, ").removesuffix(", cpu scale")  # "5 seeds (decided at 5 ...)"
        assert runs == "one deterministic run" if claim.deterministic else int(runs.split()[0]) in claim.seeds, key
        assert row["mode"] == f"full mode, {runs}, cpu scale" and claim.seeds[0] >= 3, key
        assert row["summary"], key


def test_a_recorded_row_is_stale_once_its_check_changes(monkeypatch):
    tau_claims = {c.id: c for c in claims("tau")}
    original = tau_claims["fig3-bn-norm-growth"]
    monkeypatch.setitem(registry.CLAIMS, "tau/fig3-bn-norm-growth",
                        dataclasses.replace(original, check=lambda mode: None))
    stale = {r["id"]: r["stale"] for r in registry.recorded("tau")["rows"]}
    assert stale["fig3-bn-norm-growth"] and not stale["init-norm-sharp-threshold"]


def test_explorer_claims_recorded_prints_the_stored_table_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(registry, "run_claims", lambda *a, **k: pytest.fail("--recorded ran a claim"))
    assert main(["claims", "--recorded", "--paper", "idinit"]) == 0
    out = capsys.readouterr().out
    stored = registry.recorded("idinit")
    assert stored["about"]["date"] in out and out.count("\n    per seed:  ") == len(stored["rows"]) == len(claims("idinit"))
    assert main(["claims", "--recorded", "--json", "--id", "chi-at-init", "--paper", "idinit"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in printed["rows"]] == ["chi-at-init"] and printed["about"] == stored["about"]


def test_kappas_beyond_float64_resolution_count_as_equal_not_as_seed_noise(monkeypatch):
    """Cutting the Skip's conditioning claim: a default-init kappa of 1e32 on one seed and 4e18 on another both say
    "numerically singular"; clamped at 1e15 they agree, so the verdict rests on the proposed init's kappas (unclamped,
    the width-64 log ratios 21, 6, 21 would read as seed noise: inconclusive)."""
    import numpy as np

    kappas = {"default": iter([1e32, 2e32, 6e31, 2e32, 4e18, 7e31]),
              "proposed": iter([1e9, 1.2e9, 6e7, 1.6e11, 2.9e12, 3e10])}
    calls = iter([(w, arm) for w in (32, 64) for _seed in range(3) for arm in ("default", "proposed")])

    def spectra(model, images):  # one block: sv[0] / sv[T (w - 2) - 1] = the planted kappa, T = 17 tokens
        width, arm = next(calls)
        sv = np.ones(17 * width)
        sv[17 * (width - 2) - 1] = 1 / next(kappas[arm])
        return [(sv, np.ones(17 * width))]

    monkeypatch.setattr(skipless, "attention_input_jacobians", spectra)
    one_stage = dataclasses.replace(registry.CLAIMS["skipless/kl-conditioning"], seeds=(3,))  # the 3 planted seeds
    row = one_stage.run(fast=False)
    assert row["verdict"] == "holds", row["reason"]
    assert row["per_seed"]["median kappa(K_l), default, width 64"][1] == pytest.approx(4e18)
