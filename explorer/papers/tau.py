"""Stability and convergence of ResNets with tau ("Stability and Convergence Theory for Learning ResNet: A Full
Characterization"): Figure 1 at CPU scale.

The Section 2 MLP-ResNet of width 128 with Kaiming N(0, 2/m) initialisation, on sklearn's
digits instead of MNIST, SGD with batches of 256. Depth is a knob: --set model.depth=N.

A paper is one module (its record, presets, diagnosis rules and claims), so a paper with six claims is long.
"""

import math

from explorer import theory
from explorer.diagnosis import Context, Quantity, Rule, device_of, stream_growth, times
from explorer.papers.base import Paper, cached_jobs, preset, register_paper, train_all
from explorer.papers.claims import Decision, Verdict, claim, combine, decide, decide_all
from explorer.probes import probe
from explorer.probes.probes import stacks
from explorer.training import build, train


def _mlp_resnet(topology: dict) -> dict:
    return {
        "data": {"name": "digits"},
        "model": {"name": "mlp-resnet", "depth": 10, "width": 128},
        "topology": topology,
        "init": {"name": "kaiming", "mode": "fan_out"},
        "optim": {"name": "sgd", "lr": 0.01},
        "train": {"steps": 300, "batch_size": 256, "log_every": 10, "seed": 0, "diverge_factor": 1e4},
    }


PRESETS = {
    "tau-fig1-feedforward": ("Figure 1: the feedforward baseline (no skip connection)", _mlp_resnet({"name": "none"})),
    "tau-fig1-1/L": ("Figure 1: ResNet with tau = 1/L", _mlp_resnet({"name": "tau", "value": "1/L"})),
    "tau-fig1-1/sqrt(L)": ("Figure 1: ResNet with tau = 1/sqrt(L), the sharp threshold",
                           _mlp_resnet({"name": "tau", "value": "1/sqrt(L)"})),
    "tau-fig1-1/L^0.25": ("Figure 1: ResNet with tau = 1/L^0.25 (the paper: explodes from depth 30)",
                          _mlp_resnet({"name": "tau", "value": "1/L^0.25"})),
}


def _resnet_bn(topology: dict) -> dict:
    """Figure 3 at CPU scale: the CIFAR ResNet-(6n+2) with batch normalisation on sklearn's 8x8 digits.

    The paper's ResNet1202 (n = 200) on CIFAR-10 with He et al.'s recipe (SGD, lr 0.1, momentum 0.9);
    here ResNet-110 (n = 18) by default, width 16, batch 128. Depth is a knob (6n+2). As in the
    official code (dayu11/tau-ResNet), the down-sampling blocks' shortcut is a stride-2 average pool,
    BatchNorm and zero channels ("pool-bn"), and tau scales every block's branch, those blocks' too.
    """
    return {
        "data": {"name": "digits-images"},
        "model": {"name": "resnet-cifar", "depth": 110, "width": 16, "norm": "batchnorm", "shortcut": "pool-bn"},
        "topology": topology,
        "init": {"name": "kaiming", "mode": "fan_out"},
        "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        "train": {"steps": 100, "batch_size": 128, "log_every": 10, "seed": 0},
    }


PRESETS.update({
    "tau-fig3-bn": ("Figure 3: CIFAR ResNet with batch normalisation and the plain cascaded residual",
                    _resnet_bn({"name": "cascaded"})),
    "tau-fig3-bn-tau": ("Figure 3: CIFAR ResNet with batch normalisation and tau = 1/sqrt(L) on every block "
                        "(the down-sampling ones too, as in the paper's code)",
                        _resnet_bn({"name": "tau", "value": "1/sqrt(L)"})),
})


# --------------------------------------------------------------------------------------
# claims
# --------------------------------------------------------------------------------------
# Every check fixes its test statistic and threshold from the paper's statement (written in
# `expected`) before any number is read. The helpers below are cached per configuration, so the
# notebook (notebooks/04_tau.ipynb) and the claims train each configuration once per process.


# ---- the paper's rules for explorer.diagnose ------------------------------------------------------------------------

TAU_PAPER = "tau paper (Stability and Convergence Theory for Learning ResNet)"
TAU_PAPER_LR = 0.001  # its Figure 1's learning rate (Sec. 5.1)


def _diagnosis(context: Context) -> None:
    """Theorem 1 (Sec. 3.1) and Theorem 4 (Sec. 3.3, App. G) on the paper's model h_l = relu(h_{l-1} + tau W_l h_{l-1})
    (model mlp-resnet with the tau or the cascaded topology, tau = 1): the forward process is bounded for
    tau <= 1/sqrt(L) and grows with depth above it. The growth ||h_n|| / ||h_0|| over the n residual blocks is set
    against `theory.predicted_norm_growth` (square roots of its bounds on the squared norm); the rule explains a
    divergence when tau > 1/sqrt(L) and the measured growth exceeds the most the bounded regime allows, the upper
    bound at tau = 1/sqrt(L). The learning rate is a setting the paper fixes (lr 0.001, Sec. 5.1) and the presets
    do not (0.01): the notes say which one the run used and what the same rule does at the other. Also the stream
    on the final weights and Theorem 3's backward process (the gradient norm by block), reported without a bound."""
    if not context.has_stream:
        return
    growth = stream_growth(context.initial, context.x)
    _forward_rule(context, growth)
    if context.model is not None:
        value = stream_growth(context.model, context.x.to(device_of(context.model)))
        context.quantities.append(Quantity("stream growth, final weights", times(value),
                                           "no closed form after training", TAU_PAPER + ", Sec. 3", "n/a", value,
                                           "the paper bounds the stream at initialisation, not after training"))
    _gradient_norms(context)


def _is_papers_model(spec) -> bool:
    """The paper's MLP-ResNet with its tau (or plain cascaded) residuals on the branch."""
    return (spec.model.name == "mlp-resnet" and spec.topology.name in ("tau", "cascaded")
            and spec.topology.params.get("placement", "branch") == "branch")


def _weight_variance(stack) -> float:
    """g = fan_in x mean(W^2) over the residual branches' weights (2 for the paper's Kaiming N(0, 2/m))."""
    values = [float(p.detach().double().pow(2).mean()) * p.shape[1]
              for p in stack.blocks.parameters() if p.dim() == 2]
    return sum(values) / len(values) if values else 2.0


def _forward_rule(context: Context, growth: float) -> None:
    spec, quantities = context.spec, context.quantities
    name = "stream growth ||h_n|| / ||h_0|| at init"
    section = spec.topology
    if not _is_papers_model(spec):
        quantities.append(Quantity(name, times(growth), "the tau paper's bounds hold for its MLP-ResNet with tau "
                                   "or cascaded residuals only", TAU_PAPER + ", Theorems 1, 4", "n/a", growth,
                                   f"the bounds are for the tau paper's MLP-ResNet with tau or cascaded residuals "
                                   f"(this is model {spec.model.name}, topology {section.name})"))
        return
    stack = stacks(context.initial)[0]
    depth = int(spec.model.params["depth"])
    blocks = stack.topology.n_blocks
    tau = float(stack.topology.branch_scales().mean())
    g = _weight_variance(stack)
    threshold = depth ** -0.5
    predicted = theory.predicted_norm_growth(blocks, tau, weight_variance=g)
    low, high = math.sqrt(predicted.lower[-1]), math.sqrt(predicted.upper[-1])
    bounded = math.sqrt(theory.predicted_norm_growth(blocks, threshold, weight_variance=g).upper[-1])
    inside = low * 0.5 <= growth <= high * 1.5  # a finite batch scatters about the expectation's bounds
    where = "inside" if inside else "below" if math.isfinite(growth) and growth < low * 0.5 else "outside"
    quantities.append(Quantity(
        name, times(growth),
        f"{low:.3g}x to {high:.3g}x for tau = {tau:.3g} over {blocks} blocks (at most {bounded:.3g}x for "
        f"tau <= 1/sqrt(L) = {threshold:.2f})",
        TAU_PAPER + ", Theorems 1 and 4 (Sec. 3.1, 3.3)", "consistent" if inside else "differs", growth,
        f"{times(growth)} is {where} the predicted {low:.3g}x to {high:.3g}x"
        + (" (widened by half either side for a finite batch)" if inside else "")))
    above = tau > threshold
    quantities.append(Quantity("tau vs 1/sqrt(L)", f"tau = {tau:.3g}", f"threshold 1/sqrt({depth}) = {threshold:.3g}",
                               TAU_PAPER + ", Sec. 3", "differs" if above else "consistent", tau,
                               f"tau = {tau:.3g} is {'above' if above else 'at or below'} the threshold "
                               f"1/sqrt({depth}) = {threshold:.3g}"
                               + (": the stream is not bounded" if above else ": the stream stays bounded")))
    if above and (not math.isfinite(growth) or growth > bounded):
        grew = f"grew {times(growth)}" if math.isfinite(growth) else "overflowed (not finite)"
        context.rules.append(Rule(
            name,
            f"tau = {tau:.2f} at depth {depth} is above the tau paper's threshold 1/sqrt(L) = {threshold:.2f}: at "
            f"initialisation the stream grew {times(growth)} over its {blocks} residual blocks, where the paper "
            f"bounds it for tau <= 1/sqrt(L) (Theorem 1, Sec. 3.1: at most {bounded:.3g}x here) and predicts growth "
            f"without bound above it (Theorem 4, Sec. 3.3: {low:.3g}x to {high:.3g}x for this tau and L).",
            f"tau = 1/sqrt(L) = {threshold:.2f} (the tau-fig1-1/sqrt(L) preset)", ("diverged", "stalled"),
            (f"The stream {grew} at initialisation (depth {depth}, tau = {tau:.2f}).",
             f"Bounded (at most {bounded:.3g}x) only for tau <= 1/sqrt(L) = {threshold:.2f} (tau paper, Theorem 4, "
             f"Sec. 3.3)."),
            f"tau = 1/sqrt(L) = {threshold:.2f}"))
    lr = spec.optim.params.get("lr")
    if lr is None:
        return
    paper_setting = spec.optim.name == "sgd" and math.isclose(lr, TAU_PAPER_LR)
    quantities.append(Quantity("learning rate vs the paper's", f"lr {lr:g} ({spec.optim.name})",
                               f"lr {TAU_PAPER_LR:g}, SGD (Figure 1)", TAU_PAPER + ", Sec. 5.1",
                               "consistent" if paper_setting else "differs", float(lr),
                               "the paper's Figure 1 setting" if paper_setting else
                               f"lr {lr:g} with {spec.optim.name} here, lr {TAU_PAPER_LR:g} with SGD in the paper"))
    if tau <= threshold:
        return
    # where L^-1/4 starts to diverge on digits at each rate: the fig1-threshold claim's runs (notebook 04)
    digits = spec.data.name == "digits"
    if math.isclose(lr, TAU_PAPER_LR):
        context.notes.append(
            f"This run already uses the paper's Figure 1 rate lr {TAU_PAPER_LR:g} (Sec. 5.1): with the stream grown "
            f"{times(growth)} at depth {depth} a smaller step is not the fix"
            + (" (on digits tau = L^-1/4 trains at depth 30 at this rate and, within 50 steps, diverges from depth "
               "50-60 on)." if digits else "."))
    else:
        context.notes.append(
            f"The learning rate decides where this growth turns into a divergence: this run trains with lr {lr:g}, "
            f"{lr / TAU_PAPER_LR:.3g}x the paper's Figure 1 rate {TAU_PAPER_LR:g} (Sec. 5.1)"
            + (f"; on digits tau = L^-1/4 diverges from about depth 30 at lr 0.01, while at lr {TAU_PAPER_LR:g} it "
               f"trains at depth 30 and, within 50 steps, diverges only from depth 50-60 on" if digits else "")
            + (f". Try lr {TAU_PAPER_LR:g} as well." if lr > TAU_PAPER_LR else "."))
        if lr > TAU_PAPER_LR:
            context.tries.append(f"lr {TAU_PAPER_LR:g} (the paper's)")


def _gradient_norms(context: Context) -> None:
    """The loss gradient's norm in each block on one training batch, at initialisation (Theorem 3, Sec. 3.2, bounds
    it for tau <= 1/sqrt(L) without a number to check against)."""
    import torch

    from explorer.data import loss_function

    model, data, spec = context.initial, context.data, context.spec
    blocks = [block for stack in stacks(model) for block in stack.blocks]
    n = min(spec.train.batch_size, len(data.x_train))
    x, y = data.x_train[:n], data.y_train[:n]
    was = model.training
    model.eval()
    params = [list(block.parameters()) for block in blocks]
    try:
        with torch.enable_grad():
            loss = loss_function(data.task)(model(x), y)
            flat = [p for group in params for p in group]
            grads = torch.autograd.grad(loss, flat, allow_unused=True)
    finally:
        model.train(was)
    norms, k = [], 0
    for group in params:
        total = sum(float(g.double().pow(2).sum()) for g in grads[k:k + len(group)] if g is not None)
        norms.append(math.sqrt(total))
        k += len(group)
    finite = [v for v in norms if math.isfinite(v)]
    ratio = (max(finite) / min(finite)) if finite and min(finite) > 0 else math.nan
    shown = ", ".join(f"{v:.3g}" for v in norms[:3]) + (" ... " + f"{norms[-1]:.3g}" if len(norms) > 3 else "")
    papers_model = spec.model.name == "mlp-resnet"
    predicted, paper = ("bounded for tau <= 1/sqrt(L) (Theorem 3)", TAU_PAPER + ", Sec. 3.2") if papers_model else \
        ("no closed form for this model", "none")
    context.quantities.append(Quantity(
        "gradient norm by block at init", f"{shown} (max / min {ratio:.3g})", predicted, paper, "n/a", ratio,
        "the bound has no number to check against" if papers_model else "no paper predicts it for this model"))


PAPER = register_paper(Paper(
    id="tau",
    tab="τ stability",
    title="Stability and Convergence Theory for Learning ResNet: A Full Characterization",
    summary="How much may each residual block add to the stream for a very deep ResNet to train without "
            "normalisation? The paper scales every branch by τ and proves that τ = 1/√L is a sharp threshold: "
            "at or below it the forward and backward passes stay bounded at any depth L; for τ ≥ L^(−1/2+c) "
            "the output norm grows at least like L^c. With batch normalisation the stream's norm grows like "
            "√l, and τ = 1/√L on top of it keeps it flat.",
    equations=(
        (r"The ResNet of Section 2 (width $m$, depth $L$, $\phi$ = ReLU), with Kaiming initialisation:",
         r"h_0 = \phi(Ax), \qquad h_l = \phi\big(h_{l-1} + \tau W_l h_{l-1}\big), \qquad "
         r"(W_l)_{ij} \sim \mathcal N(0, 2/m)"),
        (r"Theorem 1 ($\tau \le 1/\Omega(\sqrt L)$: with high probability, for any $b > a$ and diagonal "
         r"$D_l$ of norm at most 1) and Theorem 4 ($\tau \ge L^{-1/2 + c}$):",
         r"\big\|D_b(I + \tau W_b)\cdots D_a(I + \tau W_a)\big\|_2 \le 1 + c, \qquad "
         r"\mathbb E\,\|h_L\|^2 > L^{2c}"),
        (r"Claim 1, with batch normalisation ($n$ examples): the norm of the stream grows like $\sqrt L$:",
         r"\mathbb E\,\|h_L\|_F^2 \approx n\, m\, L"),
    ),
    notebook="notebooks/04_tau.ipynb",
    presets=PRESETS,
    diagnosis=_diagnosis,
    diagnosis_probes=lambda jacobian: {"norms": {}},
    diagnosis_batch_probes={"dead": {}},  # the gradients of one training batch: a backward pass, costed as this probe's
))


RULES = {"1/L": lambda L: 1.0 / L, "1/sqrt(L)": lambda L: L ** -0.5, "1/L^0.25": lambda L: L ** -0.25}


def _init_norm_ratio_job(rule: str, depth: int, seed: int, examples: int) -> dict:
    import torch

    spec = preset(f"tau-fig1-{rule}").with_values({"model.depth": depth, "train.seed": seed})
    model, data = build(spec)
    model = model.double().eval()
    x = data.x_val[:examples].double()
    with torch.no_grad():
        h0 = model.embed(x)
        h = model.stack(h0)
    ratio2 = (h.flatten(1).norm(dim=1) / h0.flatten(1).norm(dim=1)) ** 2
    per_layer = probe(model, x, "norms")["relative_input_norm"]
    return {"tau": RULES[rule](depth), "ratio2": ratio2.numpy(), "per_layer": per_layer}


def init_norm_ratios(items: list[tuple]) -> list[dict]:
    """`init_norm_ratio(rule, depth, seed, examples)` for every item (tuples of 3 or 4), as independent jobs."""
    return cached_jobs(_init_norm_ratio_job, [(rule, depth, seed, *rest) if rest else (rule, depth, seed, 128)
                                              for rule, depth, seed, *rest in items], "tau")


def init_norm_ratio(rule: str, depth: int, seed: int = 0, examples: int = 128) -> dict:
    """At initialisation, ||h_{L-1}|| / ||h_0|| of the Figure 1 MLP-ResNet (tau = `rule`, L = `depth`).

    h_0 = relu(A x) is the embedded input, h_{L-1} the stream after the L-1 residual layers
    h = relu(h + tau W h) (the final FC layer is left out, as in the theory's NormGrowth). The
    forward runs in float64 so that exploding norms stay finite. Returns the per-example squared
    ratios ("ratio2"), the per-layer ||h_l|| / ||h_0|| of the `norms` probe ("per_layer", l = 0..L-2)
    and tau (cached; `init_norm_ratios` computes many as parallel jobs).
    """
    return init_norm_ratios([(rule, depth, seed, examples)])[0]


FIG1_LR = 0.001  # Sec. 5.1: the paper's learning rate (the presets use 0.01)


def fig1_spec(rule, depth: int, steps: int = 300, seed: int = 0, lr: float = FIG1_LR):
    """The Figure 1 preset tau-fig1-`rule` ("1/L", "1/sqrt(L)", "1/L^0.25", "feedforward") at `depth`, `steps`
    steps, `seed`, learning rate `lr` (default the paper's 0.001); a number (or its text, "1") is a fixed tau on the
    same network (1: the plain residual sum x + f(x))."""
    spec = preset(f"tau-fig1-{rule}") if rule in (*RULES, "feedforward") else \
        preset("tau-fig1-1/sqrt(L)").with_values({"topology.value": float(rule)})
    return spec.with_values({"model.depth": depth, "train.steps": steps, "train.seed": seed, "optim.lr": lr})


def fig1_runs(configs: list[tuple]) -> list:
    """The trained runs of `fig1_spec(*config)` for every config, trained together (explorer.papers.base.train_all:
    cached per spec, the missing ones as parallel jobs of the current execution)."""
    return train_all([fig1_spec(*config) for config in configs])


def fig1_run(rule: str, depth: int, steps: int = 300, seed: int = 0, lr: float = FIG1_LR):
    """The Figure 1 preset tau-fig1-`rule` ("1/L", "1/sqrt(L)", "1/L^0.25", "feedforward") trained
    at `depth` for `steps` steps with the paper's lr 0.001 (explorer.train, cached)."""
    return fig1_runs([(rule, depth, steps, seed, lr)])[0]


def calibrate_batchnorm(model, inputs) -> None:
    """Set every BatchNorm's running statistics to the statistics of `inputs` (one train-mode pass).

    The `norms` probe runs the model in eval mode; at initialisation the running statistics are
    (0, 1), so BN would be the identity. The paper's epoch-0 curve uses batch statistics: after this
    call an eval-mode forward on `inputs` normalises each layer exactly as a train-mode forward does
    (up to the unbiased variance). Weights are not touched.
    """
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved = [(m.momentum, m.training) for m in bns]
    was_training = model.training
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one pass, exactly this batch's statistics
    model.train()
    with torch.no_grad():
        model(inputs)
    for m, (momentum, _) in zip(bns, saved):
        m.momentum = momentum
    model.train(was_training)


def _bn_stream_norms_job(preset_name: str, depth: int, train_steps: int, examples: int, seed: int,
                         warmup: int) -> dict:
    import numpy as np

    spec = preset(preset_name).with_values({"model.depth": depth, "train.steps": train_steps or 100,
                                            "train.seed": seed, "optim.warmup_steps": warmup})
    if train_steps:
        run = train(spec)
        model, data, status = run.model, build(spec)[1], run.status
    else:
        model, data = build(spec)
        status = "init"
    x = data.x_val[:examples].to(next(model.parameters()).device)
    calibrate_batchnorm(model, x)
    result = probe(model, x, "norms")
    n = (depth - 2) // 6
    stream = np.asarray(result["input_norm"], dtype=float)
    stage1 = stream[1:n] / stream[1]  # ||h_l|| / ||h_1||, l = 1..n-1
    return {"all": np.asarray(result["relative_input_norm"], dtype=float), "stage1": stage1, "status": status}


def bn_stream_norms_many(items: list[tuple]) -> list[dict]:
    """`bn_stream_norms(preset_name, depth, train_steps, examples, seed, warmup)` (all six given) for every item,
    cached, the missing ones as parallel jobs of the current execution."""
    return cached_jobs(_bn_stream_norms_job, [tuple(item) for item in items], "tau")


def bn_stream_norms(preset_name: str, depth: int, train_steps: int = 0, examples: int = 128, seed: int = 0,
                    warmup: int = 0) -> dict:
    """Figure 3: the residual stream's norm after each block of a resnet-cifar with BN.

    `norms` probe on `examples` validation images, BN calibrated on them (see calibrate_batchnorm),
    at initialisation (train_steps = 0) or after `train_steps` steps of explorer.train. The stream
    after block l is the input of block l + 1. Returns "all" (relative_input_norm over every
    block of all stages, relative to the first block's input) and "stage1": ||h_l|| / ||h_1||
    for l = 1..n-1 inside the first stage (the blocks between two resolution changes).
    """
    return bn_stream_norms_many([(preset_name, depth, train_steps, examples, seed, warmup)])[0]


def _slope(x, y) -> float:
    import numpy as np

    return float(np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)[0])


# ---- Theorems 1 and 4: forward norm at initialisation -------------------------------------


@claim("tau", "init-norm-sharp-threshold", "Sec. 3, Theorems 1 and 4",
       "At initialisation the output norm ||h_L|| / ||h_0|| stays bounded as the depth grows when tau = 1/sqrt(L) "
       "and grows with depth when tau = L^-0.25 (E||h_L||^2 > L^(2c) with c = 1/4).",
       "Sec. 3.1, Theorem 1: for tau <= 1/Omega(sqrt(L)) the forward process is bounded; Sec. 3.3, Theorem 4: \"if "
       "tau >= L^(-1/2 + c), then in expectation E||h_L||^2 > L^(2c).\"",
       "the same as the CPU scale (width 128 as in the paper; depths up to 1000 in full mode); a minute on a CPU", paper_spec=True)
def _init_norms(mode, bounded: str = "1/sqrt(L)", growing: str = "1/L^0.25", slack: float = 1.1) -> Verdict:
    import numpy as np

    from explorer import theory

    depths = [10, 30, 100] if mode.fast else [10, 30, 100, 300, 1000]
    items = [(rule, L, s) for rule in (bounded, growing) for s in mode.seeds for L in depths]
    found = dict(zip(items, init_norm_ratios(items)))  # every rule, seed and depth at once (parallel jobs)
    rms = {rule: {s: [float(np.sqrt(found[rule, L, s]["ratio2"].mean())) for L in depths]
                  for s in mode.seeds} for rule in (bounded, growing)}
    # the bounds belong to the theorems, not to the arms: Theorem 1's ceiling at tau = 1/sqrt(L), Theorem 4's
    # floor L^c at c = 1/4 (tau = L^(-1/2 + 1/4))
    ceiling = [float(np.sqrt(theory.predicted_norm_growth(L - 1, RULES["1/sqrt(L)"](L)).upper[-1])) for L in depths]
    c = 0.25
    floor = [L ** c for L in depths]
    bounded_ok = decide_all([all(r <= slack * u for r, u in zip(rms[bounded][s], ceiling)) for s in mode.seeds],
                            f"R(L) for tau = {bounded} under {slack:g} x the theory's ceiling sqrt((1 + 2/L)^(L-1)) "
                            "(tau = 1/sqrt(L)) at every depth")
    grows_ok = decide_all([all(r > f for r, f in zip(rms[growing][s], floor)) for s in mode.seeds],
                          f"R(L) for tau = {growing} above Theorem 4's L^c (c = {c:.2f}) at every depth")
    per_seed = {f"R(L={L}) {rule}": [rms[rule][s][i] for s in mode.seeds] for rule in (bounded, growing)
                for i, L in enumerate(depths)}
    return Verdict(combine({"bounded": bounded_ok, "grows": grows_ok}), per_seed,
                   f"the theory's ceiling for tau = 1/sqrt(L) (below e ~ 2.72; x {slack:g} for the sampling of 128 "
                   "inputs, ours) and Theorem 4's L^c",
                   f"MLP-ResNet of Figure 1 (width 128, Kaiming N(0, 2/m)) at init in float64, 128 digits inputs, init "
                   f"seeds {list(mode.seeds)}, depths {depths}; R = RMS over inputs of ||h_(L-1)|| / ||h_0|| (the stream "
                   "before the final FC layer)",
                   measured={"depths": depths, f"theory_R_upper[{bounded}]": ceiling, f"theorem4_floor[{growing}]": floor,
                             **{f"R[{rule}]": [float(np.sqrt(np.mean([rms[rule][s][i] ** 2 for s in mode.seeds])))
                                               for i in range(len(depths))] for rule in (bounded, growing)}})


# ---- Figure 1: trainability vs depth ----------------------------------------------------------
# "Trains": the run finishes with a final training loss under the chance loss ln 10 and a validation accuracy of
# at least 0.3 (3x chance). Not 0.5: tau = 1/L scales every branch by 1/L, so it learns slowest by design, and at
# the paper's lr 0.001 it is at val accuracy 0.51-0.64 after 200 steps (still rising); a 0.5 bar would test its
# speed, not whether it trains. An exploded or untrained run sits near chance (0.1), far below 0.3.
# "Explodes": diverged, non-finite, or a final training loss no better than chance (>= ln 10).
_TRAINS_ACC, _CHANCE_LOSS = 0.3, math.log(10.0)
FIG1_LRS = (0.001, 0.01)  # the paper's rate and the presets' (10x)


def _trains(summary) -> bool:
    acc, loss = summary["final_val_accuracy"], summary["final_loss"]
    return (summary["status"] == "finished" and acc is not None and acc >= _TRAINS_ACC and loss is not None
            and math.isfinite(loss) and loss < _CHANCE_LOSS)


def _explodes(summary) -> bool:
    loss = summary["final_loss"]
    return summary["status"] == "diverged" or loss is None or not math.isfinite(loss) or loss >= _CHANCE_LOSS


def _outcome(summary) -> str:
    """"val acc 0.71" for a run that trains, "diverged at step 3" / "final loss 2.4" otherwise."""
    if summary["status"] == "diverged":
        return f"diverged at step {summary['diverged_at']}"
    acc, loss = summary["final_val_accuracy"], summary["final_loss"]
    if loss is None or not math.isfinite(loss):
        return "non-finite loss"
    return f"val acc {acc:.2f}" if _trains(summary) else f"val acc {acc:.2f}, final loss {loss:.3g}"


def _explosion_depth(flags: list[bool], depths: list[int]) -> int | None:
    """The depth from which every deeper tested depth explodes (flags: explodes per depth), None if the deepest
    does not."""
    first = None
    for L, exploded in zip(depths, flags):
        if exploded and first is None:
            first = L
        elif not exploded:
            first = None
    return first


_PAPER_FIG1_SOURCE = ("Sec. 5.1: \"both tau = 1/L and tau = 1/L^0.5 are able to train very deep ResNets successfully. "
                      "However, when tau = 1/L^0.25, the training loss explodes for models with depth 30 and more.\" "
                      "(MNIST, width 128, SGD, batch 256, lr 0.001, depths 3..1000)")
_FIG1_PAPER_SCALE = ("--scale paper: depths 3..1000 on MNIST (EXPLORER_DATA_DIR) for a few epochs each needs one GPU for "
                     "~1 hour; not provided as a spec here")
_FIG1_CRITERIA = (f"trains: val accuracy >= {_TRAINS_ACC} (ours: 3x chance; not a knife edge for 1/L, which learns "
                  "slowest by design) and final training loss < ln 10; explodes: diverged, non-finite or final "
                  f"training loss >= ln 10 = {_CHANCE_LOSS:.2f} (the chance cross-entropy of 10 classes, an absolute "
                  "criterion). The paper gives no numeric threshold")


def _fig1_per_seed(found: dict, rules, depths, steps: int, lr: float, seeds) -> dict:
    """The per-seed [val acc, final loss] of every rule and depth at `lr`, keyed as the trainability figure reads them."""
    return {f"lr {lr:g}, {rule} @ L={L}: val acc / final loss": [
        [found[rule, L, steps, s, lr]["final_val_accuracy"], found[rule, L, steps, s, lr]["final_loss"]] for s in seeds]
        for L in depths for rule in rules}


def _input_gradient_job(rule: str, depth: int, seed: int, examples: int) -> list[float]:
    import torch

    spec = preset(f"tau-fig1-{rule}").with_values({"model.depth": depth, "train.seed": seed})
    model, data = build(spec)
    model = model.double().eval()
    h0 = model.embed(data.x_val[:examples].double()).detach().requires_grad_(True)
    out = model.stack(h0)
    direction = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    direction = direction / direction.flatten(1).norm(dim=1).view(-1, *[1] * (direction.dim() - 1))
    (grad,) = torch.autograd.grad((out * direction).sum(), h0)
    return grad.flatten(1).norm(dim=1).tolist()  # ||J^T v|| per example, ||v|| = 1


def input_gradient_growth(items: list[tuple]) -> list[float]:
    """For each (rule, depth, seed), at initialisation in float64: the root mean square over 128 validation inputs of
    ||J^T v|| with J = d h_(L-1) / d h_0 the stack's Jacobian and v a random unit direction per input, i.e. how
    much a gradient arriving at the stream's end grows on its way back to h_0 (cached parallel jobs)."""
    import math as _math

    found = cached_jobs(_input_gradient_job, [(rule, depth, seed, 128) for rule, depth, seed in items], "tau")
    return [_math.sqrt(sum(v * v for v in norms) / len(norms)) for norms in found]


@claim("tau", "backward-sharp-threshold", "Sec. 3.2, Theorem 2",
       "At initialisation the backward process stays bounded as the depth grows when tau = 1/sqrt(L) and grows with "
       "depth when tau = L^-0.25: a gradient at the stream's end grows on its way back to the input.",
       "Sec. 3.2, \"Backward process is bounded for tau <= 1/Omega(sqrt(L))\"; Sec. 1: \"for tau > L^(-1/2 + c) "
       "the network output grows at least with rate L^c in expectation, which implies forward/backward explosion for "
       "large L.\"",
       "the same as the CPU scale (width 128 as in the paper; depths up to 1000 in full mode); a minute on a CPU",
       paper_spec=True)
def _backward(mode, bounded: str = "1/sqrt(L)", growing: str = "1/L^0.25") -> Verdict:
    depths = [10, 30, 100] if mode.fast else [10, 30, 100, 300, 1000]
    items = [(rule, L, s) for rule in (bounded, growing) for s in mode.seeds for L in depths]
    growth = dict(zip(items, input_gradient_growth(items)))
    span = depths[-1] / depths[0]
    flat, steep = span ** (1 / 8), span ** (1 / 4)
    ratio = {rule: [growth[rule, depths[-1], s] / growth[rule, depths[0], s] for s in mode.seeds]
             for rule in (bounded, growing)}
    bounded_ok = decide_all([r < flat for r in ratio[bounded]],
                            f"for tau = {bounded}, the backward growth at depth {depths[-1]} under {flat:.3g} x its "
                            f"value at depth {depths[0]} ((L ratio)^(1/8): half of Theorem 4's rate)")
    grows_ok = decide_all([r > steep for r in ratio[growing]],
                          f"for tau = {growing}, the backward growth at depth {depths[-1]} above {steep:.3g} x its "
                          f"value at depth {depths[0]} ((L ratio)^c, c = 1/4: Theorem 4's rate)")
    per_seed = {f"G(L={L}) {rule}": [growth[rule, L, s] for s in mode.seeds] for rule in (bounded, growing)
                for L in depths}
    return Verdict(combine({"bounded": bounded_ok, "grows": grows_ok}), per_seed,
                   f"from the theorems, not the measurements: bounded means growing more slowly than (L ratio)^(1/8) "
                   f"= {flat:.3g}x from depth {depths[0]} to {depths[-1]} (half of the rate c = 1/4 that Theorem 4 "
                   f"gives tau = L^-0.25); growing means at least (L ratio)^(1/4) = {steep:.3g}x",
                   f"MLP-ResNet of Figure 1 (width 128, Kaiming N(0, 2/m)) at init in float64, 128 digits inputs, init "
                   f"seeds {list(mode.seeds)}, depths {depths}; G = RMS over inputs of ||J^T v||, J = d h_(L-1) / d h_0 "
                   "and v a random unit direction per input (the same seed for both rules)",
                   measured={f"G ratio depth {depths[-1]} / {depths[0]} [{rule}] (mean)": sum(v) / len(v)
                             for rule, v in ratio.items()},
                   summary=f"backward growth from depth {depths[0]} to {depths[-1]}: "
                           + "; ".join(f"{rule} x{sum(v) / len(v):.3g}" for rule, v in ratio.items()))


@claim("tau", "fig1-depth30-explodes", "Sec. 5.1, Figure 1",
       "Training the MLP-ResNet with SGD at lr 0.001, tau = L^-0.25 explodes for depth 30 and more.",
       _PAPER_FIG1_SOURCE, _FIG1_PAPER_SCALE, full_seeds=5)
def _fig1_depth30(mode, exploding: str = "1/L^0.25", lr: float = FIG1_LR, depths=None, steps: int | None = None
                  ) -> Verdict:
    # the paper's own statement, as worded: its rate, its depth 30, and every deeper tested depth
    depths = list(depths or ([30] if mode.fast else [30, 100]))
    steps = steps or (100 if mode.fast else 200)
    configs = [(exploding, L, steps, s, lr) for s in mode.seeds for L in depths]
    found = {c: r.summary() for c, r in zip(configs, fig1_runs(configs))}  # every run at once (parallel jobs)
    exploded = {s: [_explodes(found[exploding, L, steps, s, lr]) for L in depths] for s in mode.seeds}
    decision = decide_all([all(exploded[s]) for s in mode.seeds],
                          f"{exploding} explodes at lr {lr:g} at every tested depth {depths} (depth 30 and more)")
    outcomes = {s: ", ".join(f"{_outcome(found[exploding, L, steps, s, lr])} at depth {L}" for L in depths)
                for s in mode.seeds}
    trained = [s for s in mode.seeds if not all(exploded[s])]
    if trained:
        decision = Decision(decision.verdict, decision.rule, decision.reason + "; " + "; ".join(
            f"seed {s}: {outcomes[s]}" for s in trained))
    per_seed = _fig1_per_seed(found, (exploding,), depths, steps, lr, mode.seeds)
    counts = ", ".join(f"depth {L}: {sum(exploded[s][i] for s in mode.seeds)} of {len(mode.seeds)}"
                       for i, L in enumerate(depths))
    return Verdict(decision, per_seed, _FIG1_CRITERIA,
                   f"width 128, SGD, batch 256, sklearn digits (1797 8x8 images) instead of MNIST, lr {lr:g}, {steps} "
                   f"steps, depths {depths}, seeds {list(mode.seeds)}"
                   + (" (fast mode: depth 30 and 100 steps only)" if mode.fast else "")
                   + ". Depths 300-1000 do not fit a CPU run; fig1-threshold tests the qualitative threshold",
                   measured={"depths": depths, "lrs": [lr], "steps": steps},
                   summary=f"lr {lr:g}: {exploding} explodes on {counts} seeds (the paper: explodes at depth 30 and "
                           "more)")


@claim("tau", "fig1-threshold", "Sec. 5.1, Figure 1",
       "Training the MLP-ResNet with SGD, tau = L^-0.25 explodes from some depth on, while tau = 1/L and "
       "tau = 1/sqrt(L) train at every tested depth: a threshold at tau = 1/sqrt(L) (the paper's qualitative "
       "reading of Figure 1; its depth 30 is tested by fig1-depth30-explodes).",
       _PAPER_FIG1_SOURCE, _FIG1_PAPER_SCALE)
def _fig1(mode, trainable=("1/L", "1/sqrt(L)"), exploding: str = "1/L^0.25", lrs=None, depths=None,
          steps: int | None = None) -> Verdict:
    # fast mode: the presets' lr 0.01 only, where the explosion shows from depth 30 (a smoke test of the rule);
    # the paper's lr 0.001 needs depth 100 (full mode)
    lrs = tuple(lrs or ((0.01,) if mode.fast else FIG1_LRS))
    depths = list(depths or ([10, 30] if mode.fast else [10, 30, 100]))
    steps = steps or (100 if mode.fast else 200)
    rules = (*trainable, exploding)
    configs = [(rule, L, steps, s, lr) for lr in lrs for s in mode.seeds for L in depths for rule in rules]
    found = {c: r.summary() for c, r in zip(configs, fig1_runs(configs))}  # every run at once (parallel jobs)

    per_seed, parts, evidence, summary, reported = {}, {}, [], [], []
    for lr in lrs:
        at = {(rule, L, s): found[rule, L, steps, s, lr] for rule in rules for L in depths for s in mode.seeds}
        per_seed.update(_fig1_per_seed(found, rules, depths, steps, lr, mode.seeds))
        onset = [_explosion_depth([_explodes(at[exploding, L, s]) for L in depths], depths) for s in mode.seeds]
        per_seed[f"lr {lr:g}, {exploding}: explodes from depth"] = onset
        # the threshold: it trains at the shallowest depth and explodes from some tested depth on
        sharp = [o is not None and o > depths[0] and _trains(at[exploding, depths[0], s]) for o, s in zip(onset, mode.seeds)]
        failures = {s: [f"{rule} at depth {L} ({_outcome(at[rule, L, s])})" for L in depths for rule in trainable
                        if not _trains(at[rule, L, s])] for s in mode.seeds}
        short = [s for s in mode.seeds if not _trains(at[trainable[0], depths[0], s])
                 and at[trainable[0], depths[0], s]["status"] == "finished"
                 and not _explodes(at[trainable[0], depths[0], s])]
        parts[f"lr {lr:g}: {exploding} explodes from some depth on"] = decide_all(
            sharp, f"{exploding} trains at depth {depths[0]} and explodes at some tested depth and every deeper one")
        parts[f"lr {lr:g}: {' and '.join(trainable)} train at every depth"] = decide_all(
            [not failures[s] for s in mode.seeds], f"{' and '.join(trainable)} train at every depth {depths}",
            floors={f"run too short: {trainable[0]} at depth {depths[0]} has neither trained (val acc >= "
                    f"{_TRAINS_ACC}) nor exploded": bool(short)})
        # the evidence, for and against, in words: a floor or a tally never hides what the runs show
        for s, o, ok in zip(mode.seeds, onset, sharp):
            if not ok:
                shown = ", ".join(f"{_outcome(at[exploding, L, s])} at depth {L}" for L in depths)
                evidence.append(f"against the claim at lr {lr:g}, seed {s}: {exploding} "
                                + (f"never explodes up to depth {depths[-1]} ({shown})" if o is None else
                                   f"already explodes at depth {depths[0]} ({shown})" if o == depths[0] else
                                   f"has no clean threshold ({shown})"))
            if failures[s]:
                evidence.append(f"against the claim at lr {lr:g}, seed {s}: fails to train: {'; '.join(failures[s])}")
        onsets = sorted({o for o in onset}, key=lambda o: (o is None, o or 0))
        text = (f"lr {lr:g}: {exploding} " + (f"never explodes up to depth {depths[-1]}" if onsets == [None] else
                                               "explodes from depth " + " / ".join(
                                                   "never" if o is None else str(o) for o in onsets))
                + f" ({sum(o is not None for o in onset)} of {len(onset)} seeds explode)")
        accs = {(rule, L): [at[rule, L, s]["final_val_accuracy"] for s in mode.seeds] for rule in rules for L in depths}
        by_depth = {rule: " / ".join("-" if None in accs[rule, L] else f"{sum(accs[rule, L]) / len(accs[rule, L]):.2f}"
                                     for L in depths) for rule in rules}
        summary.append(text + f"; val acc at depth {' / '.join(map(str, depths))} (mean of seeds, - where a run "
                       "explodes): " + ", ".join(f"{rule} {by_depth[rule]}" for rule in rules))
        # reported, not judged: where the rule that explodes deeper trains on every seed, does it train best?
        mean_acc = {(rule, L): sum(at[rule, L, s]["final_val_accuracy"] or 0.0 for s in mode.seeds) / len(mode.seeds)
                    for rule in rules for L in depths}
        best = [L for L in depths if all(_trains(at[exploding, L, s]) for s in mode.seeds)
                and mean_acc[exploding, L] > max(mean_acc[rule, L] for rule in trainable)]
        if best:
            reported.append(
                f"at lr {lr:g}, where {exploding} does not explode it reaches the highest accuracy, mean val acc at "
                f"depth {' / '.join(map(str, best))}: " + "; ".join(
                    f"{rule} {' / '.join(f'{mean_acc[rule, L]:.2f}' for L in best)}" for rule in (exploding, *trainable)))
    decision = combine(parts)
    decision = Decision(decision.verdict, decision.rule,
                        decision.reason + ("; " + "; ".join(evidence) if evidence else ""))
    return Verdict(decision, per_seed, _FIG1_CRITERIA,
                   f"width 128, SGD, batch 256, sklearn digits (1797 8x8 images) instead of MNIST, {steps} steps, "
                   f"depths {depths}, lr {' and '.join(f'{lr:g}' for lr in lrs)} "
                   + ("(the presets' 0.01 only: fast mode is a smoke test; the paper's 0.001 runs in full mode)"
                      if mode.fast else "(the paper's 0.001 and the presets' 0.01, each judged)")
                   + f", seeds {list(mode.seeds)}. Depths 300-1000 do not fit a CPU run",
                   measured={"depths": depths, "lrs": list(lrs), "steps": steps},
                   note=("Reported, not judged (the statement is about stability, not accuracy): "
                         + "; ".join(reported) + ".") if reported else "",
                   summary=" | ".join(summary))


# ---- Appendix I, Figure 5: an extremely deep, narrow ResNet trains with tau = 1/sqrt(L) -------------
FIG5_LR = 0.05  # ours: the paper gives no rate for Figure 5; at its Figure 1 rate (0.001) width 8 is at chance after 200 steps


def fig5_spec(rule: str, depth: int, steps: int, seed: int = 0, width: int = 8):
    """Figure 5's network: the Figure 1 MLP-ResNet (tau = `rule`) at `depth` and `width`, SGD at FIG5_LR."""
    return fig1_spec(rule, depth, steps, seed, FIG5_LR).with_values({"model.width": width})


def fig5_runs(rule: str, depth: int, steps: int, seeds) -> list:
    """The trained runs of `fig5_spec` for every seed (cached per spec, the missing ones as parallel jobs)."""
    return train_all([fig5_spec(rule, depth, steps, s) for s in seeds])


@claim("tau", "fig5-1000-layers-width-8", "Appendix I, Figure 5",
       "A ResNet of 1000 layers and width 8 with tau = 1/sqrt(L) trains: its training loss converges.",
       "Appendix I: \"we plot the training curves of extremely deep ResNets with the width m in {8, 16} and the depth "
       "L in {1000, 5000, 10000} in Figure 5. We set tau = 1/L^0.5. We see that even for ResNet with depth 10000 and "
       "width 8, the training curve although fluctuates, manages to converge.\"",
       "--scale paper: depths 5000 and 10000 (widths 8 and 16) on MNIST for epochs need hours of one GPU per run and "
       "MNIST in EXPLORER_DATA_DIR; not provided as a spec here")
def _fig5(mode, rule: str = "1/sqrt(L)", depth: int | None = None, steps: int | None = None) -> Verdict:
    depth = depth or (300 if mode.fast else 1000)
    steps = steps or (500 if mode.fast else 600)
    runs = fig5_runs(rule, depth, steps, mode.seeds)
    found = [r.summary() for r in runs]
    first = [r.history[0]["loss"] if r.history else None for r in runs]
    decision = decide_all([_trains(f) for f in found],
                          f"tau = {rule} at depth {depth}, width 8 trains in {steps} steps (val accuracy >= "
                          f"{_TRAINS_ACC}, final training loss < ln 10)")
    # a narrow ReLU network can die: every unit of a layer at zero, the loss at ln 10 (chance) from then on
    outcomes = "; ".join(f"seed {s}: {_outcome(f)}" + (f", training loss {a:.2f} at step 0" if a is not None else "")
                         for s, f, a in zip(mode.seeds, found, first))
    decision = Decision(decision.verdict, decision.rule, f"{decision.reason} ({outcomes})")
    per_seed = {f"{rule} @ L={depth}, width 8: val acc / final loss": [
        [f["final_val_accuracy"], f["final_loss"]] for f in found]}
    return Verdict(decision, per_seed, _FIG1_CRITERIA,
                   f"the Figure 1 MLP-ResNet at width 8 and depth {depth}, tau = {rule}, Kaiming init, SGD lr "
                   f"{FIG5_LR:g} (ours: the paper gives no rate for Figure 5), batch 256, {steps} steps, sklearn "
                   f"digits instead of MNIST, seeds {list(mode.seeds)}"
                   + (" (fast mode: depth 300, 500 steps)" if mode.fast else "")
                   + ". Depths 5000 and 10000 do not fit a CPU run",
                   measured={"depth": depth, "width": 8, "steps": steps, "lr": FIG5_LR, "first training loss": first},
                   summary=f"depth {depth}, width 8, tau = {rule}: {outcomes}")


# ---- Figure 3 / Claim 1: BN stream norm grows like sqrt(l), BN + tau keeps it flat ----------
_SQRT_BAND = (0.3, 0.7)


@claim("tau", "fig3-bn-norm-growth", "Sec. 5.3, Claim 1, Figure 3",
       "With batch normalisation the residual blocks' output norm grows about like sqrt(l) with the block index l "
       "at initialisation, and adding tau = 1/sqrt(L) on top of BN makes it grow more slowly, at init and after "
       "training.",
       "Sec. 5.3, Claim 1: \"the output norm of ResNet with BN grows roughly at the rate sqrt(L). We propose that "
       "adding tau = 1/sqrt(L) on top of BN can keep the output norm roughly constant\"; Figure 3: \"Output norm of "
       "ResNet1202 over layers at different epochs.\"",
       "--scale paper: ResNet-1202 on CIFAR-10 trained for epochs needs one GPU for several hours and the CIFAR "
       "files in EXPLORER_DATA_DIR; not provided as a spec here", seeds=(3, 5, 10))
def _fig3(mode, arms=(("tau-fig3-bn", "BN"), ("tau-fig3-bn-tau", "BN + tau"))) -> Verdict:
    init_depth, train_depth, steps, warmup = (56, 20, 20, 5) if mode.fast else (302, 56, 60, 10)
    p_init, p_trained = {label: [] for _, label in arms}, {label: [] for _, label in arms}
    items = [(name, depth, train_steps, 64, s, warm) for s in mode.seeds for name, _ in arms
             for depth, train_steps, warm in ((init_depth, 0, 0), (train_depth, steps, warmup))]
    found = dict(zip(items, bn_stream_norms_many(items)))  # every seed and arm at once (parallel jobs)
    for s in mode.seeds:
        for name, label in arms:
            r = found[name, init_depth, 0, 64, s, 0]
            p_init[label].append(_slope(range(1, len(r["stage1"]) + 1), r["stage1"]))
            r = found[name, train_depth, steps, 64, s, warmup]
            p_trained[label].append(_slope(range(1, len(r["stage1"]) + 1), r["stage1"]))
    (_, bn), (_, bn_tau) = arms
    parts = {
        "BN ~ sqrt(l) at init": decide_all([_SQRT_BAND[0] <= p <= _SQRT_BAND[1] for p in p_init[bn]],
                                           f"growth exponent of {bn} at init in [{_SQRT_BAND[0]}, {_SQRT_BAND[1]}]"),
        "tau flatter at init": decide([a - b for a, b in zip(p_init[bn], p_init[bn_tau])], fast_margin=0.2,
                                      what=f"growth exponent {bn} - {bn_tau} at init"),
        "tau flatter after training": decide([a - b for a, b in zip(p_trained[bn], p_trained[bn_tau])], fast_margin=0.2,
                                             what=f"growth exponent {bn} - {bn_tau} after {steps} steps"),
    }
    per_seed = {f"exponent at init, {k}": v for k, v in p_init.items()}
    per_seed.update({f"exponent after training, {k}": v for k, v in p_trained.items()})
    return Verdict(combine(parts), per_seed,
                   f"[{_SQRT_BAND[0]}, {_SQRT_BAND[1]}] around Claim 1's 0.5 (ours), then the sign of the paired "
                   "difference; fast-mode margin 0.2",
                   f"resnet-cifar width 16 with BN on sklearn 8x8 digits (not CIFAR), Kaiming init; exponent = slope of "
                   f"ln(||h_l|| / ||h_1||) vs ln l over the first stage, BN on the probe batch's statistics (64 images). "
                   f"At init ResNet-{init_depth} (the paper: 1202; reduced to fit 3 seeds); trained ResNet-{train_depth}, "
                   f"{steps} SGD steps (lr 0.1, momentum 0.9, batch 128) with the same {warmup}-step warm-up for both "
                   f"arms (set in the claim; without it BN alone does not train at lr 0.1); seeds {list(mode.seeds)}")


# ---- Sec. 5.2, Figure 2: without normalisation a deep ResNet trains with tau = 1/sqrt(L), not with tau = 1 ----------
@claim("tau", "fig2-no-norm-needs-tau", "Sec. 5.2, Figure 2",
       "A deep ResNet without normalisation layers trains with tau = 1/sqrt(L), and does not train with tau = 1 (the "
       "plain residual sum x + f(x)): tau, in place of a normalisation layer, keeps it stable.",
       "Sec. 5.2: \"With tau initialized as 1/sqrt(L), we can easily train ResNet without batch normalization (BN) even "
       "for very deep networks.\" (Figure 2: CIFAR-10/100 ResNets, all normalization layers removed); Sec. 3.3: \"ResNet "
       "can be effectively trained even without normalization layer if choosing tau = 1/sqrt(L)\"; Sec. 1: \"for "
       "tau > L^(-1/2 + c) the network output grows at least with rate L^c in expectation, which implies "
       "forward/backward explosion for large L\" (tau = 1 is c = 1/2)",
       "--scale paper: Figure 2 trains the CIFAR-10/100 ResNets of He et al. (up to 1202 layers) without normalisation, "
       "tau learned from 1/sqrt(L), for He et al.'s epochs: GPU-days and CIFAR in EXPLORER_DATA_DIR; not provided as a "
       "spec here")
def _fig2(mode, trains: str = "1/sqrt(L)", fails: str = "1", depths=None, steps: int | None = None,
          lr: float | None = None) -> Verdict:
    # full mode: the runs of fig1-threshold at the paper's Figure 1 rate (cached), plus tau = 1 at the same depths;
    # fast mode: fig1-threshold's smoke-test run (depth 30, lr 0.01)
    depths = list(depths or ([30] if mode.fast else [30, 100]))
    steps = steps or (100 if mode.fast else 200)
    lr = lr or (0.01 if mode.fast else FIG1_LR)
    rules, seeds = (trains, fails), list(mode.seeds)
    configs = [(rule, L, steps, s, lr) for rule in rules for s in seeds for L in depths]
    found = {c: r.summary() for c, r in zip(configs, fig1_runs(configs))}  # every run at once (parallel jobs)
    at = {(rule, L, s): found[rule, L, steps, s, lr] for rule in rules for L in depths for s in seeds}
    parts = {
        f"tau = {trains} trains": decide_all([all(_trains(at[trains, L, s]) for L in depths) for s in seeds],
                                             f"tau = {trains} trains at every depth {depths}"),
        f"tau = {fails} does not": decide_all([all(_explodes(at[fails, L, s]) for L in depths) for s in seeds],
                                              f"tau = {fails} explodes or ends at chance at every depth {depths}"),
    }
    decision = combine(parts)
    outcomes = "; ".join(f"tau = {rule}, seed {s}: " + ", ".join(f"{_outcome(at[rule, L, s])} at depth {L}"
                                                                 for L in depths) for rule in rules for s in seeds)
    decision = Decision(decision.verdict, decision.rule, f"{decision.reason} ({outcomes})")
    return Verdict(decision, _fig1_per_seed(found, rules, depths, steps, lr, seeds), _FIG1_CRITERIA,
                   f"the Figure 1 MLP-ResNet (Sec. 2: width 128, no normalisation, Kaiming init) in place of Figure 2's "
                   f"CIFAR ResNets, tau fixed (Figure 2 learns it from 1/sqrt(L)), SGD batch 256, lr {lr:g}, {steps} "
                   f"steps, depths {depths}, sklearn digits instead of CIFAR, seeds {seeds}"
                   + (" (fast mode: depth 30 at the presets' lr 0.01, a smoke test)" if mode.fast else
                      " (the paper's Figure 1 rate; the tau = 1/sqrt(L) runs are fig1-threshold's)")
                   + ". Depths of hundreds of layers do not fit a CPU run",
                   measured={"depths": depths, "lrs": [lr], "steps": steps},
                   summary=f"lr {lr:g}, depth {' / '.join(map(str, depths))}: " + "; ".join(
                       f"tau = {rule}: " + ", ".join(
                           f"{sum(_trains(at[rule, L, s]) for s in seeds)} of {len(seeds)} train, "
                           f"{sum(_explodes(at[rule, L, s]) for s in seeds)} explode at depth {L}" for L in depths)
                       for rule in rules))
