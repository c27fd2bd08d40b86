"""Conditioning of one sub-block (Cutting the Skip, Sec. 4, Eq. 5-9): kappa of J_l and of K_l.

J_l is the Jacobian of the block stack's output, over a few inputs, with respect to the
parameters of one sub-block (the self-attention of block l, or its MLP); the paper bounds
the network's conditioning by these blocks. K_l is the sub-block's own input-output
Jacobian for one input (attention: softmax(Q K^T) V W_O as a function of its input).

Both are formed exactly (torch.func.jacrev, then the SVD) when small enough. Otherwise the
extreme singular values come from Lanczos with full reorthogonalisation on the smaller Gram
matrix (J^T J or J J^T, applied with jvp and vjp, never formed): the largest converges
quickly; the smallest Ritz value approaches lambda_min from above, so the estimate of kappa
is a lower bound that tightens with more iterations (exact once they reach the dimension).
Singular values below rtol * sigma_max are exact zeros up to float32 noise (the invariances
of a LayerNorm downstream, or fewer rows than parameters) and are left out of kappa: it is
the conditioning on the Jacobian's range, with the rank reported next to it.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from explorer import budget, plots
from explorer.nn.blocks import MLPBlock
from explorer.nn.transformer import Attention, TransformerBlock
from explorer.probes.core import NONFINITE, PROBES, jacobian_chunk, mark_undefined, undefined_note
from explorer.registries import Param, SpecError

EXACT_LIMIT = budget.EXACT_JACOBIAN_ENTRIES  # entries of a Jacobian formed exactly
EXACT_ROWS = budget.EXACT_JACOBIAN_ROWS  # rows of a Jacobian formed exactly: each is one backward pass through the stack


def lanczos_ritz_values(matvec, dim: int, iterations: int, generator: torch.Generator | None = None,
                        dtype=torch.float64) -> np.ndarray:
    """Ritz values (ascending) of a symmetric operator of size dim after min(iterations, dim) Lanczos steps."""
    steps = min(iterations, dim)
    basis = torch.empty(steps + 1, dim, dtype=dtype)
    v = torch.randn(dim, generator=generator, dtype=dtype)
    basis[0] = v / v.norm()
    alphas, betas = [], []
    for k in range(steps):
        w = matvec(basis[k])
        alpha = torch.dot(w, basis[k])
        w = w - basis[: k + 1].T @ (basis[: k + 1] @ w)  # full reorthogonalisation (twice is enough)
        w = w - basis[: k + 1].T @ (basis[: k + 1] @ w)
        alphas.append(float(alpha))
        beta = float(w.norm())
        if k == steps - 1 or beta < 1e-12 * max(1.0, abs(alphas[0])):
            break
        betas.append(beta)
        basis[k + 1] = w / beta
    t = np.diag(alphas) + np.diag(betas[: len(alphas) - 1], 1) + np.diag(betas[: len(alphas) - 1], -1)
    return np.linalg.eigvalsh(t)


def kappa(singular_values: np.ndarray, rtol: float) -> tuple[float, int]:
    """(sigma_max / smallest sigma above rtol * sigma_max, how many are above): the condition number on the
    Jacobian's range. Exact zeros (a LayerNorm's invariances, fewer rows than parameters) are left out. A zero
    Jacobian has an empty range: (NaN, 0)."""
    sv = np.sort(np.asarray(singular_values, dtype=float))[::-1]
    if not sv.size or not sv[0] > 0:
        return math.nan, 0
    kept = sv[sv > rtol * sv[0]]
    return float(kept[0] / kept[-1]), int(kept.size)


def _kappa_of(f, primal: torch.Tensor, out_dim: int, method: str, iterations: int, rtol: float, seed: int) -> dict:
    """Singular values (exact: all; Lanczos: the Ritz estimates) and kappa of the Jacobian of f at primal (1-d);
    `why` says why kappa is undefined ("" when it is defined)."""
    p = primal.numel()
    exact = method == "exact" or (method == "auto" and out_dim * p <= EXACT_LIMIT and out_dim <= EXACT_ROWS)
    if exact and out_dim > EXACT_ROWS:
        raise SpecError("probe.method", f"forming this Jacobian exactly takes {out_dim:,} backward passes (one per "
                                        f"row; at most {EXACT_ROWS:,} are run); use method=lanczos or auto, or "
                                        "fewer max_inputs")
    if exact:
        jac = torch.func.jacrev(f, chunk_size=jacobian_chunk(f, primal))(primal).detach().reshape(out_dim, p).double()
        sv = torch.linalg.svdvals(jac).cpu().numpy() if torch.isfinite(jac).all() else None
    else:
        _check_lanczos_memory(min(iterations, p, out_dim), min(p, out_dim))
        sv = _lanczos_singular_values(f, primal, out_dim, iterations, seed)
    if sv is None:
        return {"singular_values": np.full(min(out_dim, p), np.nan), "kappa": math.nan, "rank": math.nan,
                "exact": exact, "why": f"the Jacobian holds {NONFINITE}"}
    k, rank = kappa(sv, rtol)
    why = "" if rank else "the Jacobian is zero (rank 0): a condition number on its range is undefined"
    return {"singular_values": sv, "kappa": k, "rank": rank, "exact": exact, "why": why}


def _lanczos_singular_values(f, primal: torch.Tensor, out_dim: int, iterations: int, seed: int) -> np.ndarray | None:
    """The Ritz estimates of the Jacobian's singular values (descending), from Lanczos on the smaller Gram
    matrix; None when the Jacobian products are not finite (a diverged model)."""
    p = primal.numel()
    gen = torch.Generator().manual_seed(seed)
    _, vjp_fn = torch.func.vjp(f, primal)

    def jvp(v):  # Lanczos keeps its vectors on the CPU, in float64
        return _finite_or_raise(torch.func.jvp(f, (primal,), (v.to(primal),))[1].detach().double().cpu())

    def vjp(u):
        return _finite_or_raise(vjp_fn(u.to(primal))[0].detach().double().cpu())

    try:
        if p <= out_dim:
            ritz = lanczos_ritz_values(lambda v: vjp(jvp(v)), p, iterations, gen)
        else:
            ritz = lanczos_ritz_values(lambda u: jvp(vjp(u)), out_dim, iterations, gen)
    except (_NonFinite, np.linalg.LinAlgError):
        return None
    return np.sqrt(np.clip(ritz[::-1], 0.0, None))


class _NonFinite(ArithmeticError):
    """A Jacobian product came out non-finite (raised inside Lanczos, caught by its caller)."""


def _finite_or_raise(value: torch.Tensor) -> torch.Tensor:
    if not torch.isfinite(value).all():
        raise _NonFinite
    return value


def _check_lanczos_memory(steps: int, dim: int) -> None:
    """SpecError when the Lanczos basis (steps + 1 vectors of dim doubles) would not fit the model memory cap."""
    needed, cap = 8 * (steps + 1) * dim, budget.caps().max_model_mb * budget.MB
    if needed > cap:
        raise SpecError("probe.iterations", f"{steps} Lanczos iterations on a Jacobian of {dim:,} columns keep "
                                            f"{needed / budget.MB:,.0f} MB of vectors, above the {cap // budget.MB} MB "
                                            "limit (EXPLORER_MAX_MODEL_MB); lower iterations")


def _sub_block(model, block: int, part: str) -> tuple[torch.nn.Module, str]:
    """The sub-block module of block `block` (1 = first, as explorer.plots numbers blocks) and its parameter
    prefix in model.stack."""
    stack = getattr(model, "stack", None)
    blocks = getattr(stack, "blocks", None)
    if blocks is None:
        raise SpecError("probe", "param-jacobian needs a model with one block stack (model.stack.blocks)")
    units = [getattr(b, "block", b) for b in blocks]  # through ReZero/SkipInit gates
    prefix_of = {id(m): f"blocks.{i}" + (".block" if m is not blocks[i] else "") for i, m in enumerate(units)}
    if part == "attention" and not any(isinstance(u, (Attention, TransformerBlock)) for u in units):
        raise SpecError("probe.part", "this model has no attention; use part=mlp (the whole residual branch)")
    if isinstance(units[0], TransformerBlock):
        candidates = [u.attn if part == "attention" else u.mlp for u in units]
        prefixes = [f"{prefix_of[id(u)]}.{'attn' if part == 'attention' else 'mlp'}" for u in units]
    elif any(isinstance(u, Attention) for u in units):  # module level: attention and MLP sub-blocks alternate
        kind = Attention if part == "attention" else MLPBlock
        candidates = [u for u in units if isinstance(u, kind)]
        prefixes = [prefix_of[id(u)] for u in candidates]
    else:
        candidates, prefixes = units, [prefix_of[id(u)] for u in units]
    if not 1 <= block <= len(candidates):
        raise SpecError("probe.block", f"block {block} does not exist; choose 1..{len(candidates)}")
    return candidates[block - 1], prefixes[block - 1]


def _param_jacobian_cost(c) -> float:
    """J_l: every output of n inputs by one block's parameters (generously, params / depth), and K_l: one block's
    input Jacobian on one input, each formed exactly or by Lanczos as `method` chooses."""
    method, iterations = str(c.options.get("method", "auto")), int(c.options.get("iterations", 80))
    block = -(-c.params // c.depth)
    return 4 * c.params + c.forward(c.n) + max(c.jacobian_bytes(c.n * c.stream, block, method, iterations, c.n),
                                               c.jacobian_bytes(c.stream, c.stream, method, iterations, 1))


@PROBES.register(
    "param-jacobian",
    "condition number of the Jacobian w.r.t. one sub-block's parameters (J_l) and of the attention sub-block's "
    "input Jacobian (K_l), Cutting the Skip Eq. 5-9",
    (
        Param("block", "int", 1, "which block (1 = first; for Transformers the Transformer block, attention + MLP)",
              low=1, high=100_000),
        Param("part", "choice", "attention", "the attention or the MLP sub-block (other models: mlp = the whole branch)",
              choices=("attention", "mlp")),
        Param("max_inputs", "int", 2, "inputs stacked into J_l", low=1, high=1024),
        Param("method", "choice", "auto", "exact (form and SVD), lanczos (estimate), or auto (exact when small)",
              choices=("auto", "exact", "lanczos")),
        Param("iterations", "int", 80, "Lanczos iterations (more: tighter smallest singular value)", low=2,
              high=100_000),
        Param("rtol", "float", 1e-5, "singular values below rtol * sigma_max count as zero (float32 noise, exact "
                                     "invariances) and are left out of kappa", low=0.0, high=1.0),
    ),
    cost=_param_jacobian_cost,
)
def param_jacobian(model, inputs, block, part, max_inputs, method, iterations, rtol):
    """param_singular_values, param_kappa, param_rank of J_l; input_singular_values, input_kappa, input_rank of
    K_l (first input); exact: 1 where formed exactly, 0 where estimated by Lanczos (J_l, K_l). A Jacobian that is
    not finite (a diverged run) has NaN for all three; a zero one (rank 0) has a NaN kappa."""
    module, prefix = _sub_block(model, block, part)
    x = inputs[:max_inputs]
    with torch.no_grad():
        x0 = model.embed(x).detach()
    names = [name for name, _ in module.named_parameters()]
    params = [p.detach() for _, p in module.named_parameters()]
    sizes = [p.numel() for p in params]
    flat = torch.cat([p.reshape(-1) for p in params])

    stack = copy.deepcopy(model.stack)  # functional_call swaps parameters in and out: never in the model itself,
    # which an interrupted swap (a time limit, an error inside jvp) would leave holding plain tensors

    def stack_of_params(theta):
        pieces = dict(zip([f"{prefix}.{n}" for n in names], (c.view_as(p) for c, p in zip(theta.split(sizes), params))))
        # x0 + 0 joins the transform: a topology takes its fast path (an autograd.Function, which torch.func cannot
        # differentiate) unless its input is a torch.func tensor
        x = x0 + torch.zeros_like(theta[:1])
        return torch.func.functional_call(stack, pieces, (x,)).reshape(-1)

    captured = []
    hook = module.register_forward_pre_hook(
        lambda m, args, kwargs: captured.append((args[0] if args else kwargs["x"])[:1].detach()), with_kwargs=True)
    try:
        with torch.no_grad():
            out_dim = model.stack(x0).numel()
    finally:
        hook.remove()
    sub_input = captured[0]

    def sub_block(v):
        return module(v.view_as(sub_input)).reshape(-1)

    # no_grad outside the transforms: otherwise each chunk of J's rows keeps the graph of its backward pass (through
    # the weights outside the sub-block, which require grad) until the whole Jacobian is assembled
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        j = _kappa_of(stack_of_params, flat, out_dim, method, iterations, rtol, seed=0)
        k = _kappa_of(sub_block, sub_input.reshape(-1), sub_input.numel(), method, iterations, rtol, seed=1)
    undefined = {}
    for key, part in (("param", j), ("input", k)):
        if part["why"]:
            undefined[f"{key}_kappa"] = part["why"]
            if math.isnan(part["rank"]):
                undefined.update({f"{key}_singular_values": part["why"], f"{key}_rank": part["why"]})
    return {"param_singular_values": j["singular_values"], "param_kappa": np.array(j["kappa"]),
            "param_rank": np.array(j["rank"], dtype=np.float64), "input_singular_values": k["singular_values"],
            "input_kappa": np.array(k["kappa"]), "input_rank": np.array(k["rank"], dtype=np.float64),
            "exact": np.array([int(j["exact"]), int(k["exact"])]), **mark_undefined(undefined)}


@plots.figure_for("param-jacobian")
def param_jacobian_figures(r, head):
    """The parameter- and input-Jacobian spectra of the sub-block, both condition numbers in the title."""
    curves = {"parameter Jacobian": r["param_singular_values"], "input Jacobian": r["input_singular_values"]}
    return [plots.spectra(curves, f"{head}sub-block Jacobian spectra (κ params {float(r['param_kappa']):.3g}, "
                                  f"κ input {float(r['input_kappa']):.3g})" + undefined_note(r))]
