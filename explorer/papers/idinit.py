"""IDInit (002_809eeb49ab17820c.txt): identity-control initialisation, checked on runs at CPU scale.

Presets (idinit-<figure/table>-<variant>) and five claims:

* rank-constraint (Sec. 3.1.2, Fig. 4b): padding identities in the dimension-increasing first
  layer lets rank(theta - I) of the square layer after it exceed D0; zero padding keeps it <= D0;
* gd-vs-sgd-symmetry (Sec. 3.1.1, Fig. 10): from identity, full-batch GD keeps the layers of a deep
  linear net identical; SGD with momentum makes them differ;
* idiz-dead-weights (Sec. 3.2, Figs. 3, 5): a zero branch end leaves the branch's first layer without
  gradient; IDIZ gives every such weight a gradient;
* chi-at-init (App. Fig. 18): chi of the input-output Jacobian is about 1 with IDInit and far above 1
  with the default initialisation;
* steps-to-accuracy (Table 1, "epochs to 80%"): IDInit reaches 80% validation accuracy in fewer steps
  than Kaiming on a small ResNet.
"""

from __future__ import annotations

import math

from explorer.nn import roles
from explorer.papers.base import preset
from explorer.probes import probe
from explorer.spec import ExperimentSpec
from explorer.train import build, train
from explorer.papers.claims import Verdict, claim

# --------------------------------------------------------------------------- presets


def _rank_spec(embed_tau: float = math.sqrt(2.0)) -> dict:
    """Figure 4b at CPU scale: digits (D0 = 64) -> embed (Dh = 128, the dimension-increasing theta0)
    -> one residual MLP block whose square first layer (hidden ratio 1) is theta1 -> head."""
    return {
        "data": {"name": "digits"},
        "model": {"name": "mlp", "depth": 1, "width": 128, "hidden_ratio": 1.0, "bias": False},
        "topology": {"name": "cascaded"},
        "init": {"name": "idinit", "loose_std": 0.0, "tau_embed": embed_tau, "overrides": "head=xavier"},
        "optim": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
        "train": {"steps": 300, "batch_size": 64, "log_every": 10, "seed": 0},
    }


def _symmetry_spec(optim: dict, batch_size: int) -> dict:
    """Figure 10 at CPU scale: a 4-layer linear net of 10 x 10 identities learning y = -x."""
    return {
        "data": {"name": "identity", "dim": 10, "n_train": 256, "n_val": 64},
        "model": {"name": "linear", "depth": 4, "width": 10},
        "topology": {"name": "none"},
        "init": {"name": "idinit", "loose_std": 0.0, "tau": 1.0},
        "optim": optim,
        "train": {"steps": 400, "batch_size": batch_size, "log_every": 20, "seed": 0},
    }


def _dead_spec(eps: float) -> dict:
    """Figure 5's mechanism on a residual MLP: branch ends IDIZ_eps (eps = 0: zeros); head Xavier in both."""
    return {
        "data": {"name": "digits"},
        "model": {"name": "mlp", "depth": 4, "width": 64, "hidden_ratio": 2.0},
        "topology": {"name": "cascaded"},
        "init": {"name": "idinit", "eps": eps, "overrides": "head=xavier"},
        "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "train": {"steps": 100, "batch_size": 128, "log_every": 10, "seed": 0},
    }


def _chi_spec(init: dict) -> dict:
    """Figure 18 at CPU scale: a residual MLP (16 pre-activation blocks, no normalisation) at initialisation."""
    return {
        "data": {"name": "digits"},
        "model": {"name": "mlp", "depth": 16, "width": 64, "hidden_ratio": 2.0},
        "topology": {"name": "cascaded"},
        "init": init,
        "optim": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
        "train": {"steps": 100, "batch_size": 128, "log_every": 10, "seed": 0},
    }


def _resnet_spec(init: dict) -> dict:
    """Table 1 at CPU scale: ResNet-8 (batch norm) on 8x8 digit images, SGD with momentum 0.9."""
    return {
        "data": {"name": "digits-images", "size": 8},
        "model": {"name": "resnet-cifar", "depth": 8, "width": 16},
        "topology": {"name": "cascaded"},
        "init": init,
        "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "schedule": "cosine"},
        "train": {"steps": 300, "batch_size": 128, "log_every": 10, "seed": 0},
    }


PRESETS = {
    "idinit-fig4b-padded-identity": (
        "Figure 4b: digits (D0 = 64) -> width 128 with IDInit's padded identity [I; I] as theta0 (exact IDI, "
        "no loose noise); watch rank(theta1 - I) of the square block layer", _rank_spec()),
    "idinit-fig10-gd": ("Figure 10: 4-layer linear net from identity, full-batch GD (give it the target y = -x)",
                        _symmetry_spec({"name": "gd", "lr": 0.01}, 256)),
    "idinit-fig10-sgd-momentum": ("Figure 10: the same net, minibatch SGD with momentum 0.9 (batch 16)",
                                  _symmetry_spec({"name": "sgd", "lr": 0.01, "momentum": 0.9}, 16)),
    "idinit-fig5-idiz": ("Figure 5: residual MLP with IDIZ_1e-6 branch ends (head Xavier)", _dead_spec(1e-6)),
    "idinit-fig5-zero": ("Figure 5: the same with zero branch ends (IDInit with eps = 0, head Xavier)",
                         _dead_spec(0.0)),
    "idinit-fig18-idinit": ("Figure 18: 16-block residual MLP with IDInit", _chi_spec({"name": "idinit"})),
    "idinit-fig18-default": ("Figure 18: the same with PyTorch's default initialisation",
                             _chi_spec({"name": "default"})),
    "idinit-table1-idinit": ("Table 1: ResNet-8 on digit images with IDInit", _resnet_spec({"name": "idinit"})),
    "idinit-table1-kaiming": ("Table 1: ResNet-8 on digit images with Kaiming (fan_in, normal)",
                              _resnet_spec({"name": "kaiming"})),
}

# --------------------------------------------------------------------------- helpers

D0 = 64          # digits: 8 x 8 pixels
ACCURACY = 0.8   # Table 1: epochs to 80% accuracy


def zero_padding_callback(event) -> None:
    """A `train` callback that, at the start, replaces the embed layer by the zero-padded identity
    tau * [I; 0] (the "partial identity" the paper compares with), keeping IDInit's tau."""
    import torch

    if event.kind != "start":
        return
    model = event.run.model
    weight = dict(model.named_parameters())[_embed_name(model)]
    with torch.no_grad():
        tau = float(weight.abs().max())
        weight.zero_()
        rows = min(weight.shape)
        weight[:rows, :rows] = tau * torch.eye(rows, dtype=weight.dtype, device=weight.device)


def _embed_name(model) -> str:
    return next(name for name, role in roles(model).items() if role == "embed")


def residual_rank(model, data, layer: str = "stack.blocks.0.inner.weight") -> int:
    """rank(theta - I) of one square weight matrix, from the `weights` probe (numpy's default tolerance)."""
    result = probe(model, data.x_val[:8], "weights")
    row = list(result["names"]).index(layer)
    return int(result["residual_rank"][row])


def rank_runs(steps: int, seed: int = 0) -> dict:
    """Train the Figure 4b net with padded identity and with zero padding; the two runs."""
    spec = preset("idinit-fig4b-padded-identity").with_values({"train.steps": steps, "train.seed": seed})
    return {"padded identity": train(spec),
            "zero padding": train(spec, callbacks=[zero_padding_callback])}


def layer_spread(model) -> float:
    """max over pairs of layers of ||W_i - W_j||_F, relative to the mean ||W_i||_F."""
    weights = [b.weight.detach().double() for b in model.stack.blocks]
    mean = sum(float(w.norm()) for w in weights) / len(weights)
    return max(float((a - b).norm()) for i, a in enumerate(weights) for b in weights[i + 1:]) / mean


def symmetry_runs(steps: int) -> dict:
    """Figure 10: GD, plain SGD and SGD with momentum from identity on y = -x."""
    gd = preset("idinit-fig10-gd").with_values({"train.steps": steps})
    sgdm = preset("idinit-fig10-sgd-momentum").with_values({"train.steps": steps})
    sgd = sgdm.with_values({"optim.momentum": 0.0})
    return {name: train(spec.with_values({"data.sign": -1}))  # Figure 10's target -I: y = -x
            for name, spec in (("GD", gd), ("SGD", sgd), ("SGD+momentum", sgdm))}


def dead_counts(model, data, n: int = 256) -> dict:
    """Dead (exactly zero-gradient) weights of the residual branches' first layers (role stem.in) and
    the rest, on `n` training examples with their labels."""
    result = probe(model, data.x_train[:n], "dead", targets=data.y_train[:n])
    role_of = roles(model)
    first = [i for i, name in enumerate(result["names"]) if role_of[name] == "stem.in"]
    return {"stem_in_dead": int(result["dead_weights"][first].sum()),
            "stem_in_total": int(result["total_weights"][first].sum()),
            "per_layer": [int(result["dead_weights"][i]) for i in first]}


def chi_at_init(spec, n_inputs: int = 8) -> float:
    model, data = build(spec)
    return float(probe(model, data.x_val[:n_inputs], "jacobian", max_inputs=n_inputs)["chi"].mean())


def steps_to(run, threshold: float = ACCURACY) -> int | None:
    """First logged step at which validation accuracy reaches `threshold` (None: never)."""
    return next((row["step"] for row in run.history if row.get("val_accuracy", 0.0) >= threshold), None)


# --------------------------------------------------------------------------- claims


@claim("idinit", "rank-constraint", "Sec. 3.1.2, Thm. 3.1, Fig. 4b",
       "Padding identities into the dimension-increasing first layer (IDI) lets the residual part "
       "theta1 - I of the following square layer reach rank above D0 during SGD; padding zeros keeps it <= D0.",
       "rank(theta1 - I) after training: zero padding <= D0 = 64 < padded identity (numpy's rank tolerance)")
def _rank_constraint(fast: bool) -> Verdict:
    steps = 40 if fast else 400
    runs = rank_runs(steps)
    ranks = {name: residual_rank(run.model, run.data) for name, run in runs.items()}
    holds = ranks["zero padding"] <= D0 < ranks["padded identity"]
    return Verdict(
        measured={"rank_padded_identity": ranks["padded identity"], "rank_zero_padding": ranks["zero padding"],
                  "D0": D0, "Dh": 128,
                  "val_accuracy_padded_identity": runs["padded identity"].history[-1].get("val_accuracy"),
                  "val_accuracy_zero_padding": runs["zero padding"].history[-1].get("val_accuracy")},
        holds=holds,
        note=f"digits (D0 = 64) -> width 128 -> one residual MLP block (theta1 = its 128 x 128 first layer, IDI = I) "
             f"-> Xavier head; SGD momentum 0.9, {steps} steps, batch 64; exact IDI (loose_std = 0) so the rank "
             f"counts only what training wrote; zero padding = tau [I; 0] set by a start callback. Unlike the "
             f"paper's 3-layer linear net this block has a ReLU inside the branch.")


@claim("idinit", "gd-vs-sgd-symmetry", "Sec. 3.1.1, App. A.2, Fig. 10",
       "From identity initialisation, full-batch GD keeps all layers identical (the symmetry behind the convergence "
       "problem of Bartlett et al.), while SGD with momentum makes the layers differ.",
       "relative spread max ||W_i - W_j||_F / mean ||W_i||_F after training: GD < 1e-4, SGD with momentum > 1e-2")
def _gd_vs_sgd(fast: bool) -> Verdict:
    steps = 100 if fast else 400
    runs = symmetry_runs(steps)
    spread = {name: layer_spread(run.model) for name, run in runs.items()}
    loss = {name: run.history[-1]["loss"] for name, run in runs.items()}
    holds = spread["GD"] < 1e-4 and spread["SGD+momentum"] > 1e-2
    return Verdict(
        measured={"spread_gd": spread["GD"], "spread_sgd": spread["SGD"], "spread_sgd_momentum": spread["SGD+momentum"],
                  "loss_gd": loss["GD"], "loss_sgd": loss["SGD"], "loss_sgd_momentum": loss["SGD+momentum"]},
        holds=holds,
        note=f"4 linear layers 10 x 10 initialised to I (exact, no loose noise), target y = -x on 256 Gaussian "
             f"inputs, lr 0.01, {steps} steps; GD full batch, SGD batch 16 (momentum 0 and 0.9). Plain SGD is "
             f"reported, not judged.")


@claim("idinit", "idiz-dead-weights", "Sec. 3.2, Figs. 3 and 5",
       "With the last layer of each residual branch at zero, the branch's first layer gets no gradient (dead "
       "weights); IDIZ_eps gives every one of them a gradient.",
       "at initialisation, dead stem.in weights: zero branch ends >= 99% of them, IDIZ_1e-6 no more than an "
       "all-Kaiming net of the same shape (what the data alone leaves dead)")
def _idiz_dead(fast: bool) -> Verdict:
    counts = {}
    for name, preset_name in (("zero", "idinit-fig5-zero"), ("idiz", "idinit-fig5-idiz")):
        model, data = build(preset(preset_name))
        counts[name] = dead_counts(model, data)
    # Baseline: dead weights that no branch-end choice can revive (inputs that are constant on the batch).
    baseline_spec = ExperimentSpec.from_dict({**_dead_spec(0.0), "init": {"name": "kaiming"}})
    baseline_model, data = build(baseline_spec)
    baseline = dead_counts(baseline_model, data)
    total = counts["zero"]["stem_in_total"]
    measured = {"stem_in_total": total, "dead_zero_init": counts["zero"]["stem_in_dead"],
                "dead_idiz": counts["idiz"]["stem_in_dead"], "dead_kaiming_baseline": baseline["stem_in_dead"]}
    holds = counts["zero"]["stem_in_dead"] >= 0.99 * total and counts["idiz"]["stem_in_dead"] <= baseline["stem_in_dead"]
    note = ("residual MLP (4 blocks, width 64, hidden 128) on digits, 256 training examples, cross-entropy; "
            "IDInit with eps = 1e-6 vs eps = 0 on the branch ends, head Xavier in both (with eps = 0 an IDIZ head "
            "would be zero too and kill everything). Under IDIZ the remaining dead stem.in weights are presumably not caused "
            "by the branch end: IDInit's identity embed and stem.in copy pixels one to one, so a pixel that is "
            "constant or never above its mean in the batch leaves a whole column or a ReLU row without gradient "
            "(an all-Kaiming net mixes pixels and has none). IDIZ does revive every weight the zero end killed "
            "except those. ")
    if not fast:
        steps = 100
        for name, preset_name in (("zero", "idinit-fig5-zero"), ("idiz", "idinit-fig5-idiz")):
            run = train(preset(preset_name).with_values({"train.steps": steps}))
            measured[f"dead_{name}_after_{steps}_steps"] = dead_counts(run.model, run.data)["stem_in_dead"]
            measured[f"val_accuracy_{name}_after_{steps}_steps"] = run.history[-1].get("val_accuracy")
        note += f"Full mode also counts after {steps} SGD steps (reported, not judged)."
    return Verdict(measured=measured, holds=holds, note=note)


@claim("idinit", "chi-at-init", "App. Fig. 18",
       "At initialisation the mean squared singular value chi of the input-output Jacobian is about 1 with IDInit "
       "and far above 1 with the default initialisation.",
       "chi (jacobian probe, mean over 8 validation inputs): |chi_IDInit - 1| < 0.1 and chi_default > 2")
def _chi(fast: bool) -> Verdict:
    depths = [16] if fast else [16, 64]
    measured, holds_at = {}, {}
    for depth in depths:
        chi = {name: chi_at_init(preset(f"idinit-fig18-{name}").with_values({"model.depth": depth}))
               for name in ("idinit", "default")}
        measured[f"chi_idinit_depth{depth}"] = chi["idinit"]
        measured[f"chi_default_depth{depth}"] = chi["default"]
        holds_at[depth] = abs(chi["idinit"] - 1) < 0.1 and chi["default"] > 2
    holds = holds_at[16]
    note = ("residual MLP (pre-activation blocks V relu(W x), width 64, hidden 128, no normalisation) on digits; "
            "judged at depth 16")
    if not fast:
        note += f"; at depth 64 the criterion {'holds' if holds_at[64] else 'does not hold'} (reported, not judged)"
    return Verdict(measured=measured, holds=holds, note=note + ". The paper's Figure 18 is a 112-layer conv ResNet.")


@claim("idinit", "steps-to-accuracy", "Sec. 4.3, Table 1",
       "IDInit reaches 80% accuracy faster than Kaiming initialisation on a ResNet.",
       "median over seeds of the first logged step with validation accuracy >= 80%: IDInit < Kaiming "
       "(a run that never gets there counts as never)")
def _steps_to_accuracy(fast: bool) -> Verdict:
    seeds = [0] if fast else [0, 1, 2]
    steps = 40 if fast else 300
    found = {"idinit": [], "kaiming": []}
    final = {"idinit": [], "kaiming": []}
    for init in found:
        for seed in seeds:
            spec = preset(f"idinit-table1-{init}").with_values({"train.steps": steps, "train.seed": seed})
            if fast:
                spec = spec.with_values({"train.log_every": 5, "model.width": 8})
            run = train(spec)
            found[init].append(steps_to(run))
            final[init].append(run.history[-1].get("val_accuracy"))

    def median(values):
        ordered = sorted(math.inf if v is None else v for v in values)
        return ordered[len(ordered) // 2]

    med = {init: median(v) for init, v in found.items()}
    holds = med["idinit"] < med["kaiming"]
    return Verdict(
        measured={"steps_to_80_idinit": found["idinit"], "steps_to_80_kaiming": found["kaiming"],
                  "median_idinit": None if math.isinf(med["idinit"]) else med["idinit"],
                  "median_kaiming": None if math.isinf(med["kaiming"]) else med["kaiming"],
                  "final_val_accuracy_idinit": final["idinit"], "final_val_accuracy_kaiming": final["kaiming"]},
        holds=holds,
        note=f"ResNet-8 (width {8 if fast else 16}, batch norm) on 8 x 8 digit images, SGD lr 0.05 momentum 0.9 cosine, batch 128, "
             f"{steps} steps, seeds {seeds}, accuracy read every {5 if fast else 10} steps. The paper: ResNet-56/110 "
             f"on CIFAR-10, 200 epochs.")
