"""The probes themselves (registered in explorer.probes.core.PROBES), each followed by its figures
(`explorer.plots.figure_for`: how `explorer.plots.probe_figures` draws its result)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from explorer import budget, plots
from explorer.data import loss_function
from explorer.nn.base import WEIGHT_ROLES, Stack, roles
from explorer.nn.transformer import Attention
from explorer.probes.core import NONFINITE, PROBES, jacobian_chunk, mark_undefined, undefined_note, which
from explorer.registries import Param, SpecError
from explorer.topology.base import Coefficients


def stacks(model: nn.Module) -> list[Stack]:
    """The model's block stacks: `model.stack`, or every stage's Stack of a resnet-cifar."""
    stack = getattr(model, "stack", None)
    if isinstance(stack, Stack):
        return [stack]
    if stack is not None and hasattr(stack, "stacks") and stack.stacks:
        return list(stack.stacks)
    raise SpecError("probe", f"{type(model).__name__} has no block stack (model.stack; allconv has none); "
                             "probe a model with residual blocks built by explorer.build")


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
    # each input's stream x stream Jacobian, vmapped over the inputs (none when max_dim refuses the stream)
    cost=lambda c: c.forward(c.n) + (0 if c.stream > int(c.options.get("max_dim", 2048)) else
                                     budget.JACOBIAN_BYTES_PER_ENTRY * c.n * c.stream ** 2
                                     + c.rows_at_once(c.stream, c.maps(c.n))),
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

    needed, cap = 12 * len(x) * shape.numel() ** 2, budget.caps().max_model_mb * budget.MB  # float32 + float64 copy
    if needed > cap:
        raise SpecError("probe.max_inputs", f"{len(x)} Jacobians of {shape.numel():,} x {shape.numel():,} take about "
                                            f"{needed / budget.MB:,.0f} MB, above the {cap // budget.MB} MB limit "
                                            "(EXPLORER_MAX_MODEL_MB); lower max_inputs or max_dim")

    def f(flat):
        return model.stack(flat.view(1, *shape)).reshape(-1)

    # The math attention kernel is made of plain ops that vmap batches (the fused CPU kernel falls back to a loop).
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        chunk = jacobian_chunk(f, x0[0].flatten(), copies=len(x0))
        jac = torch.func.vmap(torch.func.jacrev(f, chunk_size=chunk))(x0.flatten(1)).double()  # (n, out, in)
    sv, reasons = _singular_values(jac, "input", "the Jacobian")
    chi = sv.pow(2).mean(-1)
    if k:
        sv = sv[:, :k]
    undefined = {key: reasons for key in ("singular_values", "chi")} if reasons else {}
    return {"singular_values": sv, "chi": chi, **mark_undefined(undefined)}


def _singular_values(matrices: torch.Tensor, item: str, what: str) -> tuple[torch.Tensor, str]:
    """Singular values (descending) of each matrix of a batch (n, rows, cols), NaN for those that hold non-finite
    values or whose SVD fails, and why those are undefined ("" when none is); `item` names one matrix of the
    batch ("input") and `what` the matrices ("the Jacobian")."""
    n = matrices.shape[0]
    sv = torch.full((n, min(matrices.shape[1:])), float("nan"), dtype=matrices.dtype, device=matrices.device)
    ok = torch.isfinite(matrices).flatten(1).all(1)
    failed = []
    if ok.any():
        try:
            sv[ok] = torch.linalg.svdvals(matrices[ok])
        except torch.linalg.LinAlgError:  # one matrix that does not converge fails the batch: try them one by one
            for i in ok.nonzero().flatten().tolist():
                try:
                    sv[i] = torch.linalg.svdvals(matrices[i])
                except torch.linalg.LinAlgError:
                    failed.append(i)
    reasons = []
    if not ok.all():
        reasons.append(f"{which((~ok).nonzero().flatten().tolist(), n, item)}: {what} holds {NONFINITE}")
    if failed:
        reasons.append(f"{which(failed, n, item)}: the SVD of {what} did not converge")
    return sv, "; ".join(reasons)


def _mean(values) -> float:
    """Mean of the entries that are not NaN (NaN when none is), without numpy's empty-slice warning."""
    values = np.asarray(values, dtype=float)
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else math.nan


@plots.figure_for("jacobian")
def jacobian_figures(r, head):
    """The spectra of the first four inputs' Jacobians, the mean chi in the title."""
    sv = r["singular_values"]
    curves = {f"input {i}": sv[i] for i in range(min(4, len(sv)))}
    matrices = {label: f"the Jacobian J = ∂stack(x₀)/∂x₀ at {label}" for label in curves}
    return [plots.spectra(curves, f"{head}input-output Jacobian spectrum (mean χ = {_mean(r['chi']):.4g})"
                                  + undefined_note(r), matrices=matrices)]


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
    cost=lambda c: 12 * c.params,  # each matrix's SVD: a copy, its residual W - I and LAPACK's workspace
)
def weights(model, inputs, tol):
    """Per weight matrix (conv kernels as (out, in*kh*kw)): its spectrum and rank, and the rank of
    theta - I for square ones (NaN otherwise), which tells an identity-like init from a learnt one.
    nonfinite counts each matrix's non-finite entries (a diverged run): its spectrum and ranks are NaN."""
    names, shapes, spectra, ranks, residual, nonfinite, failed = [], [], [], [], [], [], []
    for name, p in _weights(model):
        w = _matrix(p).cpu().numpy()
        eps = np.finfo(w.dtype).eps
        names.append(name)
        shapes.append(w.shape)
        bad = int((~np.isfinite(w)).sum())
        nonfinite.append(bad)
        try:
            s = np.linalg.svd(w, compute_uv=False) if not bad else None
            r = w - np.eye(w.shape[0], dtype=w.dtype) if w.shape[0] == w.shape[1] and not bad else None
            rs = np.linalg.svd(r, compute_uv=False) if r is not None else None
            if not all(np.isfinite(v).all() for v in (s, rs) if v is not None):
                raise np.linalg.LinAlgError("the singular values overflowed")
        except np.linalg.LinAlgError:
            failed.append(name)
            s = rs = None
        spectra.append(s.astype(np.float64) if s is not None else np.full(min(w.shape), np.nan))
        ranks.append(_rank(s, w.shape, eps, tol) if s is not None else np.nan)
        residual.append(_rank(rs, r.shape, eps, tol) if rs is not None else np.nan)
    width = max((len(s) for s in spectra), default=0)
    padded = np.full((len(spectra), width), np.nan)
    for row, s in enumerate(spectra):
        padded[row, :len(s)] = s
    reasons = []
    diverged = [name for name, bad in zip(names, nonfinite) if bad]
    if diverged:
        reasons.append(f"{_listed(diverged, len(names), 'matrix', 'matrices')} hold {NONFINITE}")
    if failed:
        reasons.append(f"the SVD of {_listed(failed, len(names), 'matrix', 'matrices')} did not converge or "
                       "overflowed")
    why = "; ".join(reasons)
    return {"names": np.array(names, dtype=str), "shapes": np.array(shapes, dtype=np.int64).reshape(-1, 2),
            "singular_values": padded, "rank": np.array(ranks, dtype=np.float64),
            "residual_rank": np.array(residual, dtype=np.float64), "nonfinite": np.array(nonfinite, dtype=np.int64),
            **mark_undefined({key: why for key in ("singular_values", "rank", "residual_rank")} if why else {})}


def _listed(names: list[str], of: int, one: str, many: str) -> str:
    """"2 of 10 matrices (stack.blocks.0.inner.weight, ...)": how many, and the first few by name."""
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} of {of} {one if of == 1 else many} ({shown})"


@plots.figure_for("weights")
def weights_figures(r, head):
    """The spectra of the first twelve weight matrices, and every matrix's numerical rank against its full rank."""
    names = [str(n) for n in r["names"]]
    curves = {n: r["singular_values"][i] for i, n in enumerate(names[:12])}
    full = r["shapes"].min(axis=1)
    note = undefined_note(r)
    matrices = {n: f"W = {n} (the layer's weight)" for n in curves}
    return [plots.spectra(curves, f"{head}weight spectra" + (" (first 12 matrices)" if len(names) > 12 else "") + note,
                          matrices=matrices),
            plots.rank_plot(names, r["rank"], full, f"{head}numerical rank of each weight matrix" + note)]


# --------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------
@PROBES.register(
    "norms",
    "per block: norm of the stream entering it (relative to block 1's), norm and std of its output (tau Fig. 3, "
    "IDInit Figs. 15, 19); labels name the blocks (block j, or block j attn / mlp at module level)",
    cost=lambda c: 2 * c.forward(c.n),  # forward passes
)
def norms(model, inputs):
    """Forward hooks on every block of the stack(s) (all stages of a resnet-cifar).

    input_norm[j]: mean over examples of ||x||, x the (flattened) stream entering block j+1;
    relative_input_norm = input_norm / input_norm[0]; output_norm and relative_output_norm: the same for the block's
    output; output_std: the standard deviation of all entries of the block's output. labels: `block_labels`
    (a Transformer at module level has two entries per block, its attention and its MLP). Where the stream
    overflowed (a diverged run) the norms are NaN, as are the relative ones when block 1's norm is 0 or NaN.
    """
    blocks = [block for stack in stacks(model) for block in stack.blocks]
    stats = [None] * len(blocks)

    def hook_for(j):
        def hook(module, args, output):
            x = args[0].detach().double()
            y = output.detach().double()
            std = y.std() if y.numel() > 1 else torch.tensor(math.nan, dtype=torch.float64, device=y.device)
            stats[j] = (x.flatten(1).norm(dim=1).mean(), y.flatten(1).norm(dim=1).mean(), std, y.numel() <= 1)
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
    single = [j for j, s in enumerate(stats) if s[3]]
    found = {"input_norm": torch.stack([s[0] for s in stats]), "output_norm": torch.stack([s[1] for s in stats]),
             "output_std": torch.stack([s[2] for s in stats])}
    reasons = {}
    for key, values in found.items():
        bad = [j for j in (~torch.isfinite(values)).nonzero().flatten().tolist() if key != "output_std" or j not in single]
        why = [f"{which(bad, len(values), 'block')}: the stream holds {NONFINITE}"] if bad else []
        if key == "output_std" and single:
            why.append(f"{which(single, len(values), 'block')}: the output holds a single number, which has no "
                       "standard deviation")
        if why:
            reasons[key] = "; ".join(why)
        values[~torch.isfinite(values)] = math.nan
    for side in ("input", "output"):
        norm = found[f"{side}_norm"]
        first = float(norm[0])
        found[f"relative_{side}_norm"] = norm / first if first > 0 else torch.full_like(norm, math.nan)
        if not first > 0:
            why = f"block 1's {side} has norm {'0' if first == 0 else 'NaN'}, so norms relative to it are undefined"
            reasons[f"relative_{side}_norm"] = why + (f" ({NONFINITE})" if math.isnan(first) else "")
        elif f"{side}_norm" in reasons:
            reasons[f"relative_{side}_norm"] = reasons[f"{side}_norm"]
    return {"input_norm": found["input_norm"], "relative_input_norm": found["relative_input_norm"],
            "output_norm": found["output_norm"], "relative_output_norm": found["relative_output_norm"],
            "output_std": found["output_std"], "labels": np.array(block_labels(model), dtype=str),
            **mark_undefined(reasons)}


@plots.figure_for("norms")
def norms_figures(r, head):
    """The input and output norms by block relative to block 1's (its input is the embedded input x_0), on a log
    axis; each point's hover gives the norm and the ratio with their numbers."""
    curves = {"output ||y_l|| / ||y_1||": r["relative_output_norm"], "input ||in_l|| / ||x_0||": r["relative_input_norm"]}
    equations = {label: _norm_equations(r, side) for label, side in zip(curves, ("output", "input"))}
    return [plots.norms_by_layer(curves, f"{head}norms by block<br><sub>relative to block 1's; its input is the embedded input x_0</sub>"
                                 + undefined_note(r),
                                 log_y=True, labels=[str(n) for n in r["labels"]] if "labels" in r else None,
                                 equations=equations)]


def _norm_equations(r, side: str) -> list[str]:
    """Each block's hover maths for one side: the norm's formula with its value, and the ratio to block 1's."""
    norms, relative = np.asarray(r[f"{side}_norm"], float), np.asarray(r[f"relative_{side}_norm"], float)
    name = "y_l" if side == "output" else "in_l"
    first = "y_1" if side == "output" else "in_1 = x_0"
    return [f"||{name}|| = mean over the batch of sqrt(Σ {name}²) = {n:.4g}<br>"
            f"||{name}|| / ||{first}|| = {n:.4g} / {norms[0]:.4g} = {q:.4g}" for n, q in zip(norms, relative)]


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
    cost=lambda c: c.forward(c.n) + 4 * c.params,  # a backward pass: the gradients of every weight
)
def dead(model, inputs, task, targets):
    """Gradient of the task loss (explorer.data.loss_function) on `targets`, or without targets of
    the proxy loss 0.5 * mean(out^2); counted per weight matrix: entries exactly 0 and rows all 0.
    Gradients come from torch.autograd.grad, so no .grad is written. A non-finite loss (a diverged run) has
    no gradient that tells a dead weight from a live one: the counts are then NaN."""

    named = _weights(model)
    with torch.enable_grad():
        out = model(inputs)
        if targets is None:
            loss = 0.5 * out.pow(2).mean()
        else:
            chosen = infer_task(targets) if task == "auto" else task
            try:
                loss = loss_function(chosen)(out, targets)
            except (RuntimeError, ValueError, IndexError) as error:  # targets of another shape or type
                raise SpecError("probe.task", f"the {chosen} loss does not fit these targets "
                                              f"({str(error).splitlines()[0][:120]}); use task=auto") from None
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    undefined = {} if torch.isfinite(loss) else \
        {key: f"the loss is {float(loss.detach())} (weights or activations overflowed: a diverged run), so no "
              "gradient tells dead weights from live ones"
         for key in ("dead_weights", "dead_rows")}
    dead_weights, total, rows = [], [], []
    for (_, p), g in zip(named, grads):
        g = torch.zeros_like(p) if g is None else g
        zero = _matrix(g) == 0
        dead_weights.append(math.nan if undefined else int(zero.sum()))
        total.append(p.numel())
        rows.append(math.nan if undefined else int(zero.all(dim=1).sum()))
    return {"names": np.array([n for n, _ in named], dtype=str), "dead_weights": np.array(dead_weights, dtype=np.float64),
            "total_weights": np.array(total, dtype=np.int64), "dead_rows": np.array(rows, dtype=np.float64),
            **mark_undefined(undefined)}


@plots.figure_for("dead")
def dead_figures(r, head):
    """The dead-weight fraction of each weight matrix."""
    return [plots.dead_weights([str(n) for n in r["names"]], r["dead_weights"], r["total_weights"],
                               f"{head}dead weights (entries whose loss gradient is exactly 0)" + undefined_note(r))]


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------
@PROBES.register(
    "attention",
    "attention maps of every attention layer for the first input, with per-head condition number, mean diagonal "
    "weight and mean row entropy",
    cost=lambda c: c.forward(1) + 3 * c.maps(1),  # every block's maps of one input in float64, three times
)
def attention(model, inputs):
    """Forward pre-hooks on the Attention modules compute each layer's map softmax(q k^T / sqrt(d_h))
    from the stream actually entering it (and its separate key/value inputs under DCA). There is one attention
    per Transformer block, so entry l of every array (0-based) is block l + 1's.

    kappa: torch.linalg.cond of each T x T map (rank collapse: large); diagonal: mean of the map's
    diagonal (tokens attending to themselves); entropy: mean over rows of -sum p log p (nats). A layer whose map
    is not finite (a diverged run) has NaN in all four.
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
    ok = torch.isfinite(a).flatten(1).all(1)  # per layer
    kappa = torch.full(a.shape[:2], math.nan, dtype=a.dtype, device=a.device)
    failed = []
    for j in ok.nonzero().flatten().tolist():
        try:
            kappa[j] = torch.linalg.cond(a[j])
        except torch.linalg.LinAlgError:
            failed.append(j)
    reasons = []
    if not ok.all():
        reasons.append(f"{which((~ok).nonzero().flatten().tolist(), len(a), 'block')}: the attention maps hold "
                       f"{NONFINITE}")
    undefined = dict.fromkeys(("maps", "kappa", "diagonal", "entropy"), "; ".join(reasons)) if reasons else {}
    if failed:
        reasons.append(f"{which(failed, len(a), 'block')}: the SVD of the attention maps did not converge")
        undefined["kappa"] = "; ".join(reasons)
    a = torch.where(ok[:, None, None, None], a, math.nan)
    return {"maps": a, "kappa": kappa, "diagonal": a.diagonal(dim1=-2, dim2=-1).mean(-1),
            "entropy": torch.where(ok[:, None], -plogp.sum(-1).mean(-1), math.nan), **mark_undefined(undefined)}


@plots.figure_for("attention")
def attention_figures(r, head):
    """The attention maps, blocks by heads, the mean condition number in the title."""
    return [plots.attention_maps(r["maps"], f"{head}attention maps (rows: blocks, columns: heads; "
                                            f"mean κ = {_mean(r['kappa']):.3g})" + undefined_note(r))]


# --------------------------------------------------------------------------------------
# coefficients
# --------------------------------------------------------------------------------------
@PROBES.register(
    "coefficients",
    "the topology's coefficient matrices (own and unrolled basis) and ANCRe's log(c_ij / c_max,j) view",
    cost=lambda c: 2 * c.forward(c.n),  # forward passes
)
def coefficients(model, inputs):
    """own and unrolled from Topology.coefficients() (rows: destinations; the first stage's Stack of a
    resnet-cifar), blocks (their names, `block_labels`), and log_ratio[r, i] = log(|unrolled[r, i]| / max_i |unrolled[r, i]|): 0 for each row's
    strongest source, -inf where a source does not reach, NaN on an all-zero row (ANCRe Fig. 6).
    learnable: whether the topology has trained parameters (its `own` matrix is what was learned).
    forced, forced_reason, forced_reasons: which own coefficients (and direct paths, on the diagonal) the topology
    fixes whatever its parameters, and why (`_forced`); and what the topology computes its coefficients from
    (`Topology.coefficient_inputs`: ANCRe's logits and temperature), for the figures' equations."""
    topology = stacks(model)[0].topology
    try:
        c = topology.coefficients()
    except ValueError:  # a non-finite own matrix (a diverged run) fails the check that it is lower triangular
        own = np.asarray(topology.own_matrix(), dtype=np.float64)
        if np.isfinite(own).all():
            raise
        c = Coefficients(own, np.full_like(own, np.nan), topology.basis)
    own, unrolled = (np.where(np.isfinite(m), m, np.nan) for m in (np.asarray(c.own), np.asarray(c.unrolled)))
    magnitude = np.abs(unrolled)
    row_max = magnitude.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log(magnitude / row_max)
    result = {"own": own, "unrolled": unrolled, "log_ratio": log_ratio, "basis": np.array(c.basis),
              # learned coefficients (ANCRe, GRN, DCA, learnable tau): figures show `own` by default
              "learnable": np.array(any(p.requires_grad for p in topology.parameters())),
              "blocks": np.array(_topology_blocks(model, topology)),
              **_forced(topology), **topology.coefficient_inputs()}
    undefined = {key: f"the topology's coefficients hold {NONFINITE}" for key, m in (("own", c.own),
                 ("unrolled", c.unrolled)) if not np.isfinite(m).all()}
    zero_rows = np.flatnonzero(np.nan_to_num(row_max[:, 0], nan=1.0) == 0).tolist()
    reasons = [undefined["unrolled"]] if "unrolled" in undefined else []
    if zero_rows:
        reasons.append(f"{which(zero_rows, len(row_max), 'row')}: every coefficient is 0, so no source is the strongest")
    if reasons:
        undefined["log_ratio"] = "; ".join(reasons)
    if topology.input_dependent:
        weights = _input_dependent_weights(model, topology, inputs)
        result.update(weights)
        undefined.update({key: f"the mixing weights hold {NONFINITE}" for key, value in weights.items()
                          if not np.isfinite(value).all()})
    return {**result, **mark_undefined(undefined)}


@plots.figure_for("coefficients")
def coefficients_figures(r, head):
    """The shortcut heatmap: the learned coefficients of a learnable topology, else the unrolled matrix
    (`plots.coefficient_basis`)."""
    basis = plots.coefficient_basis(r)
    what = "learned coefficients (own basis)" if basis == "own" else "unrolled: who feeds whom"
    fig = plots.coefficient_heatmap(r[basis], f"{head}shortcut coefficients ({what})" + undefined_note(r),
                                    log_ratio=basis == "log_ratio", result=r, basis=basis)
    summary = plots.mass_summary(r, top=3)
    if summary:  # under the x axis: the learned shortcuts that gained most, and by how much
        lines = summary.split("\n")
        fig.add_annotation(xref="paper", yref="paper", x=0.0, y=0.0, yshift=-70, xanchor="left", yanchor="top",
                           align="left", showarrow=False, font=dict(size=11, color="#444"), text="<br>".join(lines))
        fig.update_layout(margin=dict(b=90 + 16 * len(lines)))
    return [fig]


def _forced(topology) -> dict[str, np.ndarray]:
    """forced[j, i]: the topology fixes that coefficient (`Topology.forced_reasons`); forced_reason[j, i]: the index
    of why in forced_reasons (-1 where it is learned)."""
    size = topology.n_blocks + 1
    reasons = topology.forced_reasons()
    index = np.full((size, size), -1, dtype=np.int64)
    for k, mask in enumerate(reasons.values()):
        index[np.asarray(mask, dtype=bool) & (index < 0)] = k
    return {"forced": index >= 0, "forced_reason": index, "forced_reasons": np.array(list(reasons), dtype=str)}


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
