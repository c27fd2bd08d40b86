"""DeepCrossAttention (001_1e765a5de17de15f.txt): Figure 1 (can a residual network learn the identity?),
Table 7 (ablation on a 6-layer language model) and Table 1 (k-DCA).

10 linear layers of rank 3 in d = 100, mini-batch SGD with batches of 100 (the paper shows
10^3 batches); ResNet (cascaded) against GRN-v1 (learned scalar weights on earlier outputs).

The paper does not give its initialisation or learning rate. We use Xavier (both factors of
each rank-3 layer start small) and the largest stable learning rate of a small grid. The
finding depends on that choice: with PyTorch's default init one factor starts large, the
ResNet drives the other to zero exponentially fast and learns the identity better than
GRN-v1 (measured 3e-6 vs 5e-2 after 10^3 batches at lr 3e-3).
"""


def _lowrank(task: str, topology: str, lr: float) -> dict:
    return {
        "data": {"name": task, "dim": 100, "n_train": 10_000, "n_val": 1000, "seed": 0},
        "model": {"name": "lowrank", "depth": 10, "width": 100, "rank": 3},
        "topology": {"name": topology},
        "init": {"name": "xavier"},
        "optim": {"name": "sgd", "lr": lr},
        "train": {"steps": 1000, "batch_size": 100, "log_every": 10, "seed": 0},
    }


PRESETS = {
    "dca-fig1a-resnet": ("Figure 1a: low-rank ResNet learning the identity", _lowrank("identity", "cascaded", 0.01)),
    "dca-fig1a-grn-v1": ("Figure 1a: low-rank GRN-v1 learning the identity", _lowrank("identity", "grn-v1", 0.01)),
    "dca-fig1b-resnet": ("Figure 1b: low-rank ResNet learning y = Ax + b", _lowrank("affine", "cascaded", 2e-4)),
    "dca-fig1b-grn-v1": ("Figure 1b: low-rank GRN-v1 learning y = Ax + b", _lowrank("affine", "grn-v1", 2e-4)),
}


def _gpt(topology: dict) -> dict:
    """Table 7 at CPU scale: a 6-layer character GPT (width 64, 4 heads, context 64) on the bundled Python docs.

    The paper trains 6-layer models of width 512 on LM1B with AdamW (beta1 0.9, beta2 0.98, weight
    decay 0.1, lr 0.0016, 1000 warm-up steps, inverse square-root schedule; Sec. 5). Here: the paper's
    AdamW betas and weight decay, but lr 3e-3 with 20 warm-up steps and a cosine schedule over 400
    steps of 32 sequences (CPU scale: its warm-up alone would be longer than our whole run).
    The decay applies to every parameter, the GRN weights (which start at 1) included.
    """
    return {
        "data": {"name": "text", "context": 64, "seed": 0},
        "model": {"name": "gpt", "depth": 6, "width": 64, "heads": 4, "mlp_ratio": 4.0},
        "topology": topology,
        "init": {"name": "default"},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.98,
                  "schedule": "cosine", "warmup_steps": 20},
        "train": {"steps": 400, "batch_size": 32, "log_every": 20, "seed": 0},
    }


_OPTIM_NOTE = " AdamW as the paper (betas 0.9/0.98, weight decay 0.1), lr and schedule at CPU scale."
_ZERO_GATES = (" Gates w at the paper's zero init: they get no gradient, so the input-dependent part stays inert "
               "(compare the -gates-normal preset).")
_NORMAL_GATES = " Gates w drawn from N(0, 0.02^2) instead of the paper's 0, so the input-dependent part learns."

PRESETS.update({
    "dca-table7-transformer": ("Table 7: small GPT, standard (cascaded) Transformer." + _OPTIM_NOTE,
                               _gpt({"name": "cascaded"})),
    "dca-table7-grn-v1": ("Table 7: small GPT with GRN-v1 (scalar weights on earlier block outputs)." + _OPTIM_NOTE,
                          _gpt({"name": "grn-v1"})),
    "dca-table7-grn-v2": ("Table 7: small GPT with GRN-v2 (per-feature weights)." + _OPTIM_NOTE, _gpt({"name": "grn-v2"})),
    "dca-table7-grn-v3": ("Table 7: small GPT with GRN-v3 (per-feature and input-dependent weights)." + _ZERO_GATES
                          + _OPTIM_NOTE, _gpt({"name": "grn-v3"})),
    "dca-table7-grn-v3-gates-normal": ("Table 7: small GPT with GRN-v3." + _NORMAL_GATES + _OPTIM_NOTE,
                                       _gpt({"name": "grn-v3", "gate_init": "normal"})),
    "dca-table7-dca": ("Table 7: small GPT with DCA (three GRN-v3 mixes for query, key and value, each with its own "
                       "norm)." + _ZERO_GATES + _OPTIM_NOTE, _gpt({"name": "dca"})),
    "dca-table7-dca-gates-normal": ("Table 7: small GPT with DCA." + _NORMAL_GATES + _OPTIM_NOTE,
                                    _gpt({"name": "dca", "gate_init": "normal"})),
    "dca-table1-2-dca": ("Table 1: small GPT with 2-DCA (x_0, the sum of the middle outputs, the last 2)." + _OPTIM_NOTE,
                         _gpt({"name": "dca", "k": 2})),
})


# =========================================================================== claims

from explorer.papers.base import preset
from explorer.spec import ExperimentSpec
from explorer.train import build, train
from explorer.papers.claims import Verdict, claim  # noqa: E402

_RUNS: dict = {}  # spec JSON -> Run, so that the claims and the notebook (02_dca) train each spec once per process


def train_cached(spec):
    """`explorer.train(spec)`, memoised on the spec (runs are deterministic on CPU). The notebook draws its
    figures from these runs, and the claims re-use them."""
    key = spec.to_json(indent=None)
    if key not in _RUNS:
        _RUNS[key] = train(spec)
    return _RUNS[key]


def _summary(spec) -> dict:
    """`train_cached(spec).summary()`."""
    return train_cached(spec).summary()


def fig1_spec(task: str, topology: str, fast: bool):
    """The Figure 1 run of the claim (task "identity" or "affine", topology "resnet" or "grn-v1")."""
    spec = preset(f"dca-fig1{'a' if task == 'identity' else 'b'}-{topology}")
    # fast: a fifth of the batches; the loss is logged (and the 1000 validation examples evaluated) less often
    return spec.with_values({"train.steps": 100, "train.log_every": 50} if fast else {"train.log_every": 50})


@claim("dca", "fig1-resnet-vs-grn-v1", "Figure 1 (Sec. 1)",
       "With 10 linear layers of rank 3 in d = 100, a ResNet cannot learn the identity (nor y = Ax + b) well, "
       "while GRN-v1 (learned scalar weights on earlier outputs) does.",
       "GRN-v1's final training loss at least 10x below the ResNet's on the identity task, and below the ResNet's "
       "on the affine task (presets dca-fig1a/b-*, Xavier init, 10^3 batches of 100; fast mode: 100 batches)")
def _fig1(fast: bool) -> Verdict:
    measured = {}
    for task in ("identity", "affine"):
        for topology in ("resnet", "grn-v1"):
            s = _summary(fig1_spec(task, topology, fast))
            measured[f"{task}_{topology}_loss"] = s["final_loss"]
            measured[f"{task}_{topology}_val_loss"] = s["final_val_loss"]
    ratio = measured["identity_resnet_loss"] / max(measured["identity_grn-v1_loss"], 1e-30)
    measured["identity_ratio_resnet_over_grn_v1"] = ratio
    holds = ratio >= 10.0 and measured["affine_grn-v1_loss"] < measured["affine_resnet_loss"]
    steps = 100 if fast else 1000
    note = (f"{steps} SGD steps of batch 100, d = 100, one seed, Xavier init. The outcome depends on the init: "
            "with PyTorch's default init one factor of each rank-3 layer starts large and the ResNet learns the "
            "identity better than GRN-v1 (measured when the presets were made: 3e-6 vs 5e-2 after 10^3 batches at "
            "lr 3e-3; not re-run here). The paper gives neither init nor learning rate.")
    if fast:
        note += " Fast mode stops at 100 steps, before the curves of Figure 1 have separated fully."
    return Verdict(measured, holds, note)


def thm41_spec(topology: str, fast: bool):
    """The Theorem 4.1 run of the claim (topology "none", "cascaded" or "grn-v1")."""
    # d = 8, T = 2 layers of rank 1 (r_* = 2 < d), full-rank target A with singular values in [0.5, 1.5] and
    # whitened inputs (X^T X / n = I), so the training loss 0.5 mean ||y - A_hat x||^2 is exactly 0.5 ||A - A_hat||_F^2.
    return ExperimentSpec.from_dict({
        "data": {"name": "whitened-regression", "dim": 8, "n_train": 64, "n_val": 64, "rank": 8, "seed": 3},
        "model": {"name": "lowrank", "depth": 2, "width": 8, "rank": 1},
        "topology": {"name": topology},
        "init": {"name": "xavier"},
        "optim": {"name": "adam", "lr": 0.01, "schedule": "cosine"},
        # full mode logs every 25 steps: the notebook draws its curves from these runs
        "train": {"steps": 1500 if fast else 5000, "batch_size": 64, "log_every": 500 if fast else 25, "seed": 0},
    })


@claim("dca", "thm41-class-optima", "Theorem 4.1 / Sec. 4.2",
       "The low-rank linear networks express exactly: baseline = rank <= min r_t, ResNet = I + rank-r_* M, "
       "GRN-v1 = alpha I + rank-r_* M (GRN-v2: D + M; GRN-v3 contains D + M + relu(w^T x) x), so their best "
       "excess risks are ordered ER*(base) >= ER*(res) >= ER*(GRN-v1) >= ER*(GRN-v2) >= ER*(GRN-v3).",
       "each trained model (baseline, ResNet, GRN-v1; d = 8, two rank-1 layers, Adam to convergence) reaches "
       "its class optimum from explorer.theory: 2 x loss within [1 - 1e-3, 1.05] x ER*(class); the theory "
       "optima are ordered as above and the trained losses order baseline > ResNet > GRN-v1")
def _thm41(fast: bool) -> Verdict:
    import numpy as np
    from explorer import theory

    _, data = build(thm41_spec("cascaded", fast))
    x, y = data.x_train.double().numpy(), data.y_train.double().numpy()
    A = np.linalg.solve(x.T @ x, x.T @ y).T  # the target map, recovered exactly (X^T X / n = I)
    optima = theory.optimal_excess_risks(A, [1, 1])
    er = {"base": optima.baseline.excess_risk, "resnet": optima.resnet.excess_risk,
          "grn_v1": optima.grn_v1.excess_risk, "grn_v2": optima.grn_v2.excess_risk,
          "grn_v3": optima.grn_v3.excess_risk}
    measured = {f"ER*_{k}": v for k, v in er.items()}
    ok = True
    for name, topology in (("base", "none"), ("resnet", "cascaded"), ("grn_v1", "grn-v1")):
        trained = 2.0 * _summary(thm41_spec(topology, fast))["final_loss"]
        measured[f"trained_ER_{name}"] = trained
        measured[f"trained_over_optimum_{name}"] = trained / er[name]
        ok = ok and (1 - 1e-3) * er[name] <= trained <= 1.05 * er[name]
    order = [er["base"], er["resnet"], er["grn_v1"], er["grn_v2"], er["grn_v3"]]
    theory_ordered = all(a >= b - 1e-9 for a, b in zip(order, order[1:]))
    trained_ordered = measured["trained_ER_base"] > measured["trained_ER_resnet"] > measured["trained_ER_grn_v1"]
    measured["theory_ordered"], measured["trained_ordered"] = theory_ordered, trained_ordered
    steps = 1500 if fast else 5000
    note = (f"d = 8, T = 2 layers of rank 1 (r_* = 2), full-rank A (singular values 0.5..1.5, seed 3), 64 whitened "
            f"inputs, full-batch Adam (lr 0.01, cosine) for {steps} steps, one seed; ER = 2 x the training loss. "
            "GRN-v2/v3 optima are from explorer.theory's local search (upper bounds), shown for the ordering only; "
            "they were not trained here.")
    return Verdict(measured, ok and theory_ordered and trained_ordered, note)


def _gpt_inputs(spec, n: int = 4):
    _, data = build(spec)
    return data.x_val[:n]


@claim("dca", "dca-equals-transformer-at-init", "Sec. 3.2 / Sec. 5 (retrofitting)",
       "At initialisation DCA (and GRN-v1/v2/v3) computes exactly the function of the standard residual "
       "Transformer.",
       "max |output difference| <= 1e-5 between each variant and the Transformer built with the same seed "
       "(6-block GPT of dca-table7-*, float32, 4 validation sequences)")
def _init_equal(fast: bool) -> Verdict:
    import torch

    base = preset("dca-table7-transformer")
    x = _gpt_inputs(base)
    with torch.no_grad():
        reference, _ = build(base)
        ref_out = reference.eval()(x)
        measured = {"output_scale_max_abs": float(ref_out.abs().max())}
        variants = ("dca", "grn-v1") if fast else ("dca", "grn-v1", "grn-v2", "grn-v3", "2-dca")
        for variant in variants:
            name = "dca-table1-2-dca" if variant == "2-dca" else f"dca-table7-{variant}"
            model, _ = build(preset(name))
            measured[f"max_abs_diff_{variant}"] = float((model.eval()(x) - ref_out).abs().max())
    holds = all(v <= 1e-5 for k, v in measured.items() if k.startswith("max_abs_diff"))
    return Verdict(measured, holds, "one seed (0), width 64, context 64; outputs are logits over the characters")


def table7_spec(variant: str, fast: bool, width: int | None = None):
    """The small-GPT run of the Table 7 and Table 2 claims (variant "transformer", "grn-v1", ..., "dca", "2-dca")."""
    spec = preset("dca-table1-2-dca" if variant == "2-dca" else f"dca-table7-{variant}")
    changes = {"train.steps": 60, "train.log_every": 60} if fast else {"train.log_every": 100}
    if width is not None:
        changes["model.width"] = width
    return spec.with_values(changes)


@claim("dca", "table7-ablation", "Table 7 (Sec. 5, ablation)",
       "On a 6-layer language model, GRN-v1, GRN-v2, GRN-v3 and DCA each improve perplexity over the standard "
       "Transformer (18.98 -> 18.80, 18.43, 18.41, 18.06 on LM1B).",
       "each of GRN-v1, GRN-v2, GRN-v3 and DCA ends with a lower validation loss than the Transformer "
       "(2-DCA of Table 1 reported alongside; small char-GPT, 400 steps, one seed; fast mode: transformer, "
       "GRN-v1 and DCA only, 60 steps)")
def _table7(fast: bool) -> Verdict:
    variants = ("transformer", "grn-v1", "dca") if fast else \
        ("transformer", "grn-v1", "grn-v2", "grn-v3", "dca", "2-dca")
    measured = {f"val_loss_{v}": _summary(table7_spec(v, fast))["final_val_loss"] for v in variants}
    base = measured["val_loss_transformer"]
    for v in variants[1:]:
        measured[f"delta_{v}"] = measured[f"val_loss_{v}"] - base
    judged = [v for v in variants if v in ("grn-v1", "grn-v2", "grn-v3", "dca")]
    holds = all(measured[f"delta_{v}"] < 0 for v in judged)
    note = (f"6-block char GPT, width 64, context 64, batch 32, AdamW {'60' if fast else '400'} steps, one seed; "
            "val loss in nats per character (the paper reports perplexity on LM1B at width 512). "
            "Single-seed differences of ~0.01 nat are within run-to-run noise. GRN-v3's (and DCA's) "
            "zero-initialised gates get no gradient (relu'(0) = 0, see explorer/topology.py), so GRN-v3 trains "
            "like GRN-v2.")
    if fast:
        note += " Fast mode: 60 steps only (mostly warm-up), GRN-v2/v3 and 2-DCA skipped; not a test of the table."
    return Verdict(measured, holds, note)


@claim("dca", "table2-width-trend", "Table 2 (Sec. 5, width scaling)",
       "DCA's improvement over the Transformer shrinks as the model gets wider (delta -2.82 at width 64 down to "
       "-0.39 at 1024 perplexity).",
       "DCA's validation loss below the Transformer's at every width, and the gain (transformer - DCA) strictly "
       "decreasing with width (widths 16, 32, 64, 400 steps; fast mode: 32 and 64, 60 steps)")
def _width(fast: bool) -> Verdict:
    # Full mode stops at width 64: DCA at width 128 took 4-7 min for 400 steps on this loaded 2-core machine, beyond
    # the notebook's 10-minute budget. The paper's trend spans widths 64 -> 1024 (16x), this one 16 -> 64 (4x).
    widths = (32, 64) if fast else (16, 32, 64)
    measured = {}
    gains = []
    for w in widths:
        t = _summary(table7_spec("transformer", fast, w))["final_val_loss"]
        d = _summary(table7_spec("dca", fast, w))["final_val_loss"]
        measured[f"w{w}_transformer"], measured[f"w{w}_dca"], measured[f"w{w}_delta"] = t, d, d - t
        gains.append(t - d)
    holds = all(g > 0 for g in gains) and all(a > b for a, b in zip(gains, gains[1:]))
    note = (f"6-block char GPT (4 heads), context 64, batch 32, {'60' if fast else '400'} AdamW steps, one seed "
            "per width; the paper's Table 2 uses 12 layers on LM1B. Width 64 reuses Table 7's runs. Single-seed "
            "deltas of ~0.01 nat are within noise.")
    if not fast:
        note += (" Widths 16, 32, 64 (the paper: 64 to 1024): DCA at width 128 alone takes several minutes on a "
                 "2-core CPU, beyond the notebook's 10-minute budget.")
    if fast:
        note += " Fast mode (60 steps, mostly warm-up): deltas of ~1e-3 nat, far below noise; the verdict is no evidence."
    return Verdict(measured, holds, note)
