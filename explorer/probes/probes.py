"""The probes themselves (registered in explorer.probes.core.PROBES), each followed by its figures
(`explorer.plots.figure_for`: how `explorer.plots.probe_figures` draws its result)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from explorer import plots
from explorer.data import loss_function
from explorer.nn.base import WEIGHT_ROLES, Stack, roles
from explorer.nn.transformer import Attention
from explorer.probes.core import PROBES
from explorer.registries import Param, SpecError


def stacks(model: nn.Module) -> list[Stack]:
    """The model's block stacks: `model.stack`, or every stage's Stack of a resnet-cifar."""
    stack = getattr(model, "stack", None)
    if isinstance(stack, Stack):
        return [stack]
    if stack is not None and hasattr(stack, "stacks"):
        return list(stack.stacks)
    raise SpecError("probe", f"{type(model).__name__} has no block stack (model.stack); "
                             "probe a model built by explorer.build")


def block_labels(model: nn.Module) -> list[str]:
    """One label per block of the stack(s), numbered 1..L as the spec counts blocks (explorer.plots' convention).

    A Transformer block is attention + MLP: at module level (skipless, `model.level=module`) the stack holds
    its two sub-blocks, labelled "block j attn" and "block j mlp"; otherwise "block j". The stages of a
    resnet-cifar are numbered on from one to the next.
    """
    blocks = [getattr(block, "block", block) for stack in stacks(model) for block in stack.blocks]  # through Gated
    if any(isinstance(block, Attention) for block in blocks):
        labels, j = [], 0
        for block in blocks:
            j += isinstance(block, Attention)
            labels.append(f"block {j} {'attn' if isinstance(block, Attention) else 'mlp'}")
        return labels
    return [f"block {j}" for j in range(1, len(blocks) + 1)]


def _weights(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, parameter) of every weight matrix, in the model's order (roles in WEIGHT_ROLES)."""
    found = roles(model)
    return [(name, p) for name, p in model.named_parameters() if found.get(name) in WEIGHT_ROLES]


def _matrix(p: torch.Tensor) -> torch.Tensor:
    """A weight as a matrix: conv kernels (out, in, kh, kw) become (out, in * kh * kw)."""
    p = p.detach()
    return p.reshape(p.shape[0], -1) if p.dim() != 2 else p


# --------------------------------------------------------------------------------------
# jacobian
# --------------------------------------------------------------------------------------
@PROBES.register(
    "jacobian",
    "singular values of the block stack's input-output Jacobian d stack(x0) / d x0 per input (dynamical isometry)",
    (
        Param("max_inputs", "int", 8, "probe at most this many inputs of the batch", low=1, high=1_000_000),
        Param("k", "int", 0, "keep the k largest singular values (0: all)", low=0, high=10_000_000),
        Param("max_dim", "int", 2048, "refuse streams larger than this per example (the Jacobian is dim x dim)",
              low=1, high=10_000_000),
    ),
)
def jacobian(model, inputs, max_inputs, k, max_dim):
    """J = d f(x0) / d x0 with f = model.stack and x0 = model.embed(x), embedding and head excluded.

    One example's stream ((d,), (T, d) or (C, H, W)) is flattened; the Jacobian is computed per
    input with torch.func.jacrev, batched over the inputs with torch.func.vmap (the topologies
    fall back to plain autograd ops under torch.func). `chi` is the mean squared singular value
    over all of them, ||J||_F^2 / min(m, n): about 1 means dynamical isometry on average. Streams above
    `max_dim` numbers per example are refused (a GPT's 64 x 64 stream takes about a minute per input).
    """
    x = inputs[:max_inputs]
    with torch.no_grad():
        x0 = model.embed(x).detach()
    shape = x0.shape[1:]
    if shape.numel() > max_dim:
        raise SpecError("probe.max_dim", f"this model's stream holds {shape.numel():,} numbers per example, so its "
                                         f"Jacobian is {shape.numel():,} x {shape.numel():,} (minutes per input on a "
                                         f"CPU); raise max_dim to compute it anyway, or probe norms or param-jacobian")

    def f(flat):
        return model.stack(flat.view(1, *shape)).reshape(-1)

    # The math attention kernel is made of plain ops that vmap batches (the fused CPU kernel falls back to a loop).
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        jac = torch.func.vmap(torch.func.jacrev(f))(x0.flatten(1))  # (n, out, in)
        sv = torch.linalg.svdvals(jac.double())  # descending
    chi = sv.pow(2).mean(-1)
    if k:
        sv = sv[:, :k]
    return {"singular_values": sv, "chi": chi}


@plots.figure_for("jacobian")
def jacobian_figures(r, head):
    """The spectra of the first four inputs' Jacobians, the mean chi in the title."""
    sv = r["singular_values"]
    curves = {f"input {i}": sv[i] for i in range(min(4, len(sv)))}
    return [plots.spectra(curves, f"{head}input-output Jacobian spectrum (mean χ = {r['chi'].mean():.4g})")]


# --------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------
def _rank(s: np.ndarray, shape: tuple[int, int], eps: float, tol: float) -> int:
    """numpy.linalg.matrix_rank from singular values: tol, or max(m, n) * eps * sigma_max when tol is 0."""
    if s.size == 0:
        return 0
    threshold = tol if tol > 0 else s.max() * max(shape) * eps
    return int((s > threshold).sum())


@PROBES.register(
    "weights",
    "singular values and numerical rank of every weight matrix and of its residual part theta - I (IDInit Fig. 4b)",
    (Param("tol", "float", 0.0, "singular values at or below this count as zero (0: max(m, n) * eps * sigma_max, "
                                "numpy's default)", low=0.0),),
)
def weights(model, inputs, tol):
    """Per weight matrix (conv kernels as (out, in*kh*kw)): its spectrum and rank, and the rank of
    theta - I for square ones (NaN otherwise), which tells an identity-like init from a learnt one."""
    names, shapes, spectra, ranks, residual = [], [], [], [], []
    for name, p in _weights(model):
        w = _matrix(p).cpu().numpy()
        eps = np.finfo(w.dtype).eps
        s = np.linalg.svd(w, compute_uv=False)
        names.append(name)
        shapes.append(w.shape)
        spectra.append(s.astype(np.float64))
        ranks.append(_rank(s, w.shape, eps, tol))
        if w.shape[0] == w.shape[1]:
            r = w - np.eye(w.shape[0], dtype=w.dtype)
            residual.append(_rank(np.linalg.svd(r, compute_uv=False), r.shape, eps, tol))
        else:
            residual.append(np.nan)
    width = max((len(s) for s in spectra), default=0)
    padded = np.full((len(spectra), width), np.nan)
    for row, s in enumerate(spectra):
        padded[row, :len(s)] = s
    return {"names": np.array(names, dtype=str), "shapes": np.array(shapes, dtype=np.int64).reshape(-1, 2),
            "singular_values": padded, "rank": np.array(ranks, dtype=np.int64),
            "residual_rank": np.array(residual, dtype=np.float64)}


@plots.figure_for("weights")
def weights_figures(r, head):
    """The spectra of the first twelve weight matrices, and every matrix's numerical rank against its full rank."""
    names = [str(n) for n in r["names"]]
    curves = {n: r["singular_values"][i] for i, n in enumerate(names[:12])}
    full = r["shapes"].min(axis=1)
    return [plots.spectra(curves, f"{head}weight spectra" + (" (first 12 matrices)" if len(names) > 12 else "")),
            plots.rank_plot(names, r["rank"], full, f"{head}numerical rank of each weight matrix")]


# --------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------
@PROBES.register(
    "norms",
    "per block: norm of the stream entering it (relative to block 1's), norm and std of its output (tau Fig. 3, "
    "IDInit Figs. 15, 19); labels name the blocks (block j, or block j attn / mlp at module level)",
)
def norms(model, inputs):
    """Forward hooks on every block of the stack(s) (all stages of a resnet-cifar).

    input_norm[j]: mean over examples of ||x||, x the (flattened) stream entering block j+1;
    relative_input_norm = input_norm / input_norm[0]; output_norm and relative_output_norm: the same for the block's
    output; output_std: the standard deviation of all entries of the block's output. labels: `block_labels`
    (a Transformer at module level has two entries per block, its attention and its MLP).
    """
    blocks = [block for stack in stacks(model) for block in stack.blocks]
    stats = [None] * len(blocks)

    def hook_for(j):
        def hook(module, args, output):
            x = args[0].detach().double()
            y = output.detach().double()
            stats[j] = (x.flatten(1).norm(dim=1).mean(), y.flatten(1).norm(dim=1).mean(), y.std())
        return hook

    handles = [block.register_forward_hook(hook_for(j)) for j, block in enumerate(blocks)]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    if any(s is None for s in stats):
        raise AssertionError("some blocks were not run by the forward pass")
    input_norm = torch.stack([s[0] for s in stats])
    output_norm = torch.stack([s[1] for s in stats])
    return {"input_norm": input_norm, "relative_input_norm": input_norm / input_norm[0],
            "output_norm": output_norm, "relative_output_norm": output_norm / output_norm[0],
            "output_std": torch.stack([s[2] for s in stats]),
            "labels": np.array(block_labels(model), dtype=str)}


@plots.figure_for("norms")
def norms_figures(r, head):
    """The relative input and output norms by block, on a log axis."""
    curves = {"output ||y_l|| / ||x_0||": r["relative_output_norm"], "input ||in_l|| / ||x_0||": r["relative_input_norm"]}
    return [plots.norms_by_layer(curves, f"{head}norms by block, relative to the embedded input", log_y=True,
                                 labels=[str(n) for n in r["labels"]] if "labels" in r else None)]


# --------------------------------------------------------------------------------------
# dead
# --------------------------------------------------------------------------------------
def infer_task(targets: torch.Tensor) -> str:
    """Float targets: regression; integer (N,): classification; integer (N, T): language-modeling."""
    if targets.is_floating_point():
        return "regression"
    return "classification" if targets.dim() == 1 else "language-modeling"


@PROBES.register(
    "dead",
    "weights whose gradient is exactly zero over the batch, and dead rows (output units), per weight matrix",
    (Param("task", "choice", "auto", "loss used with targets (auto: from the targets' dtype and shape)",
           choices=("auto", "regression", "classification", "language-modeling")),),
    tensors={"targets": "targets of the batch; without them the proxy loss 0.5 * mean(output^2) is used"},
)
def dead(model, inputs, task, targets):
    """Gradient of the task loss (explorer.data.loss_function) on `targets`, or without targets of
    the proxy loss 0.5 * mean(out^2); counted per weight matrix: entries exactly 0 and rows all 0.
    Gradients come from torch.autograd.grad, so no .grad is written."""

    named = _weights(model)
    with torch.enable_grad():
        out = model(inputs)
        if targets is None:
            loss = 0.5 * out.pow(2).mean()
        else:
            loss = loss_function(infer_task(targets) if task == "auto" else task)(out, targets)
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    dead_weights, total, rows = [], [], []
    for (_, p), g in zip(named, grads):
        g = torch.zeros_like(p) if g is None else g
        zero = _matrix(g) == 0
        dead_weights.append(int(zero.sum()))
        total.append(p.numel())
        rows.append(int(zero.all(dim=1).sum()))
    return {"names": np.array([n for n, _ in named], dtype=str), "dead_weights": np.array(dead_weights, dtype=np.int64),
            "total_weights": np.array(total, dtype=np.int64), "dead_rows": np.array(rows, dtype=np.int64)}


@plots.figure_for("dead")
def dead_figures(r, head):
    """The dead-weight fraction of each weight matrix."""
    return [plots.dead_weights([str(n) for n in r["names"]], r["dead_weights"], r["total_weights"],
                               f"{head}dead weights (entries whose loss gradient is exactly 0)")]


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------
@PROBES.register(
    "attention",
    "attention maps of every attention layer for the first input, with per-head condition number, mean diagonal "
    "weight and mean row entropy",
)
def attention(model, inputs):
    """Forward pre-hooks on the Attention modules compute each layer's map softmax(q k^T / sqrt(d_h))
    from the stream actually entering it (and its separate key/value inputs under DCA). There is one attention
    per Transformer block, so entry l of every array (0-based) is block l + 1's.

    kappa: torch.linalg.cond of each T x T map (rank collapse: large); diagonal: mean of the map's
    diagonal (tokens attending to themselves); entropy: mean over rows of -sum p log p (nats).
    """
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    if not layers:
        raise SpecError("probe", f"the attention probe needs a Transformer (gpt or vit); "
                                 f"{type(model).__name__} has no attention layer")
    maps = [None] * len(layers)

    def hook_for(j):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["x"]
            k_in = args[1] if len(args) > 1 else kwargs.get("k_in")
            v_in = args[2] if len(args) > 2 else kwargs.get("v_in")
            maps[j] = module.attention_map(x, k_in, v_in)[0].detach().double()  # computed now: buffers get reused
        return hook

    handles = [layer.register_forward_pre_hook(hook_for(j), with_kwargs=True) for j, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            model(inputs[:1])
    finally:
        for handle in handles:
            handle.remove()
    a = torch.stack(maps)  # (layers, heads, T, T)
    plogp = torch.where(a > 0, a * a.clamp_min(1e-300).log(), torch.zeros_like(a))
    return {"maps": a, "kappa": torch.linalg.cond(a), "diagonal": a.diagonal(dim1=-2, dim2=-1).mean(-1),
            "entropy": -plogp.sum(-1).mean(-1)}


@plots.figure_for("attention")
def attention_figures(r, head):
    """The attention maps, blocks by heads, the mean condition number in the title."""
    return [plots.attention_maps(r["maps"], f"{head}attention maps (rows: blocks, columns: heads; "
                                            f"mean κ = {np.nanmean(r['kappa']):.3g})")]


# --------------------------------------------------------------------------------------
# coefficients
# --------------------------------------------------------------------------------------
@PROBES.register(
    "coefficients",
    "the topology's coefficient matrices (own and unrolled basis) and ANCRe's log(c_ij / c_max,j) view",
)
def coefficients(model, inputs):
    """own and unrolled from Topology.coefficients() (rows: destinations; the first stage's Stack of a
    resnet-cifar), blocks (their names, `block_labels`), and log_ratio[r, i] = log(|unrolled[r, i]| / max_i |unrolled[r, i]|): 0 for each row's
    strongest source, -inf where a source does not reach, NaN on an all-zero row (ANCRe Fig. 6).
    learnable: whether the topology has trained parameters (its `own` matrix is what was learned)."""
    topology = stacks(model)[0].topology
    c = topology.coefficients()
    magnitude = np.abs(c.unrolled)
    row_max = magnitude.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log(magnitude / row_max)
    result = {"own": c.own, "unrolled": c.unrolled, "log_ratio": log_ratio,
              # learned coefficients (ANCRe, GRN, DCA, learnable tau): figures show `own` by default
              "learnable": np.array(any(p.requires_grad for p in topology.parameters())),
              "blocks": np.array(_topology_blocks(model, topology))}
    if topology.input_dependent:
        result.update(_input_dependent_weights(model, topology, inputs))
    return result


@plots.figure_for("coefficients")
def coefficients_figures(r, head):
    """The shortcut heatmap: the learned coefficients of a learnable topology, else the unrolled matrix
    (`plots.coefficient_basis`)."""
    basis = plots.coefficient_basis(r)
    what = "learned coefficients (own basis)" if basis == "own" else "unrolled: who feeds whom"
    return [plots.coefficient_heatmap(r[basis], f"{head}shortcut coefficients ({what})",
                                      log_ratio=basis == "log_ratio", blocks=r.get("blocks"))]


def _topology_blocks(model, topology) -> list[str]:
    """Names of the topology's blocks, as the other figures name them (`block_labels`: "block 2 attn" for a
    Transformer's sub-block at module level). A resnet-cifar's topology spans its down-sampling blocks too,
    which sit outside the stages' stacks: there its blocks are numbered 1..n_blocks."""
    labels = block_labels(model)
    return labels if len(labels) == topology.n_blocks else [f"block {j}" for j in range(1, topology.n_blocks + 1)]


def _input_dependent_weights(model, topology, inputs) -> dict[str, np.ndarray]:
    """GRN-v3 / DCA: the weights each mix used on this batch, b (feature mean) + relu(w^T G) per example and
    position: their mean (batch_weights) and 5th/50th/95th percentiles (batch_quantiles, DCA Appendix H).
    DCA's query, key and value mixes are pooled. Rows: destinations; columns: sources."""
    size = topology.n_blocks + 1
    topology.recording = []
    try:
        with torch.no_grad():
            model(inputs)
        records = topology.recording
    finally:
        topology.recording = None
    samples = [[[] for _ in range(size)] for _ in range(size)]
    for row, slot_sources, values in records:
        for slot, sources in enumerate(slot_sources):
            for source in sources:
                samples[row][source].append(values[slot])
    mean = np.zeros((size, size))
    quantiles = np.zeros((3, size, size))
    for row in range(size):
        for source in range(size):
            if samples[row][source]:
                pooled = np.concatenate(samples[row][source])
                mean[row, source] = pooled.mean()
                quantiles[:, row, source] = np.percentile(pooled, [5, 50, 95])
    return {"batch_weights": mean, "batch_quantiles": quantiles}
