"""Identity-control initialisations: IDInit, ZerO and Fixup as pure tensor functions.

Every function fills a weight tensor in place and returns it. Linear weights are 2-D
(d_out, d_in); convolution kernels are PyTorch's (c_out, c_in, *kernel) (4-D for conv2d,
3-D and 5-D work the same way). Randomness comes only from the `torch.Generator` passed
in (no global RNG is touched); the deterministic schemes draw nothing from it, so a
generator shared across a model is consumed identically whatever the values.

Sources
-------
* IDInit: "IDInit: A Universal and Stable Initialization Method" (Fully Identical Initialization): Eq. 3 (IDI_tau),
  Sec. 3.1.2 (rank constraint, replica problem, loose condition), Sec. 3.1.3
  (patch-maintain convolution IDIC_tau, Eq. 10), Sec. 3.2 (IDIZ_eps, IDIZC_eps),
  Appendix A.4 (proof of Theorem 3.1), Appendix B (tau = sqrt(2) on the first layer of
  ReLU nets, 1 elsewhere; eps = 1e-6).
* ZerO: Zhao, Schaefer & Anandkumar (2022), Algorithm 1.
* Fixup: Zhang, Dauphin & Ma (2019), Sec. 3 ("Fixup initialization").

Registry schemes (signature `name(tensor, role, gen, **params)`, registered in
explorer/init.py; IDInit's parameters are declared in `IDINIT_PARAMS`): `idinit`, `zero`,
`fixup` (which receives the model's branch count and depth from explorer.init).
"""

from __future__ import annotations

import math

import torch

from explorer.nn.base import BRANCH_ENDS, WEIGHT_ROLES
from explorer.registries import Param

__all__ = [
    "IDINIT_PARAMS",
    "fixup",
    "fixup_scale",
    "hadamard",
    "idi_",
    "idic_",
    "idinit",
    "idiz_",
    "idizc_",
    "zero",
    "zero_hadamard_",
]


# --------------------------------------------------------------------------- helpers

def _check_weight(tensor: torch.Tensor) -> None:
    if tensor.dim() < 2:
        raise ValueError(f"expected a 2-D linear weight or a (c_out, c_in, *kernel) conv kernel, "
                         f"got shape {tuple(tensor.shape)}")


def _check_role(role: str) -> None:
    if role not in WEIGHT_ROLES:
        raise ValueError(f"role {role!r} is not a weight role; schemes fill only {', '.join(WEIGHT_ROLES)}")


@torch.no_grad()
def _write(tensor: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Copy a CPU float64 construction into `tensor` (any dtype/device) in place."""
    tensor.copy_(value.reshape(tensor.shape))
    return tensor


def _idi_matrix(d_out: int, d_in: int, tau: float, wide: str, loose_std: float,
                gen: torch.Generator | None) -> torch.Tensor:
    """The (d_out, d_in) IDI_tau matrix of Eq. 3 (float64, CPU); see `idi_`."""
    if wide not in ("truncate", "pad"):
        raise ValueError(f"wide must be 'truncate' or 'pad', got {wide!r}")
    if loose_std < 0:
        raise ValueError(f"loose_std must be >= 0, got {loose_std}")
    m = torch.arange(d_out).unsqueeze(1)
    j = torch.arange(d_in).unsqueeze(0)
    if wide == "pad" and d_out < d_in:
        mask = (j % d_out) == m           # theta[m, j] = tau iff j = m (mod d_out)
    else:
        mask = (m % d_in) == j            # Eq. 3: theta[m, j] = tau iff m = j (mod d_in)
    out = torch.zeros(d_out, d_in, dtype=torch.float64)
    if loose_std > 0:
        if gen is None:
            raise ValueError("loose_std > 0 draws noise: pass a torch.Generator (no global RNG is used)")
        n = int(mask.sum())
        noise = torch.randn(n, generator=gen, dtype=torch.float64, device=gen.device)
        out[mask] = tau + loose_std * noise.cpu()
    else:
        out[mask] = tau
    return out


def _idiz_matrix(d_out: int, d_in: int, eps: float) -> torch.Tensor:
    """The (d_out, d_in) IDIZ_eps matrix of Sec. 3.2 (float64, CPU); see `idiz_`."""
    out = torch.zeros(d_out, d_in, dtype=torch.float64)
    rows = torch.arange(d_out)
    if d_out < d_in:                      # case (i): +eps identity, then IDI_{-eps} on the extra columns
        r = d_in - d_out
        out[rows, rows] = eps
        out[rows, d_out + rows % r] = -eps
    else:                                 # case (ii): IDI_eps, then -eps where (m+1) = j (mod d_in)
        out[rows, rows % d_in] = eps
        if d_in > 1:
            out[rows, (rows + 1) % d_in] = -eps
    return out


def _patch_kernel(matrix: torch.Tensor, shape: torch.Size, layout: str = "filters") -> torch.Tensor:
    """Reshape a (c_out, k*k*c_in) matrix C into a PyTorch (c_out, c_in, k, k) kernel.

    Sec. 3.1.3 writes C in R^{c_out x kkc_in} and reshapes it into the kernel
    C in R^{k x k x c_in x c_out}. The text leaves the flattening order open; two readings:

    * layout="filters" (ours, the default): row o of C is output filter o flattened in the
      kernel's own (k, k, c_in) order, channel fastest -- column (a*k + b)*c_in + c is tap
      (a, b) of input channel c (i.e. C^T reshaped to k x k x c_in x c_out, TensorFlow's HWIO
      layout). Output channel o then reads one tap of one input channel.
    * layout="raw": C's row-major buffer reinterpreted as k x k x c_in x c_out (a literal
      numpy reshape, no transpose): flat index f = o*kkc_in + col is tap f // (c_in c_out),
      input channel (f // c_out) mod c_in, output channel f mod c_out. Each output channel of
      IDI_tau still copies one tap of one channel, but which ones mixes the two indices.
    """
    c_out, c_in, kernel = shape[0], shape[1], tuple(shape[2:])
    if layout == "filters":
        return matrix.reshape(c_out, *kernel, c_in).movedim(-1, 1)
    if layout == "raw":
        return matrix.reshape(*kernel, c_in, c_out).movedim(-1, 0).movedim(-1, 1)
    raise ValueError(f"layout must be 'filters' or 'raw', got {layout!r}")


def _centre(shape: torch.Size) -> tuple:
    return (slice(None), slice(None)) + tuple(k // 2 for k in shape[2:])


def _fan_in(tensor: torch.Tensor) -> int:
    return tensor.shape[1] * math.prod(tensor.shape[2:])


# --------------------------------------------------------------------------- IDInit

@torch.no_grad()
def idi_(tensor: torch.Tensor, tau: float = 1.0, wide: str = "truncate", loose_std: float = 0.0,
         gen: torch.Generator | None = None) -> torch.Tensor:
    """IDI_tau, the padded identity of IDInit Eq. 3 (Sec. 3.1), in place.

    For theta of shape (D_out, D_in), Eq. 3 sets theta[m, j] = tau if m = j (mod D_in),
    else 0 (0-indexed here; Eq. 3 reads the same 1-indexed):

    * square: tau * I;
    * tall (D_out > D_in, dimension-increasing): identities stacked along the output
      dimension, [I; I; ...; I[:rest]] -- "padding identity", which Sec. 3.1.2 /
      Theorem 3.1 show breaks the rank constraint of zero padding;
    * wide (D_out < D_in): Eq. 3 literally gives the truncated identity [I, 0]
      (wide="truncate", the default). wide="pad" instead repeats the identity along the
      input dimension, theta[m, j] = tau if j = m (mod D_out), so every input feeds an
      output.

    Default wide="truncate" because (1) it is Eq. 3 as written; (2) the proof of
    Theorem 3.1 (Appendix A.4) initialises the dimension-reducing last layer as
    theta^(2) = (I 0) -- its update is written (I - eta Pi_1, -eta Pi_1); (3) it keeps the
    output's scale: "pad" sums ceil(D_in / D_out) inputs into each output, multiplying
    the variance by about D_in / D_out.

    Loose condition (Sec. 3.1.2, "Replica Problem"): the padded identity replicates
    features; the paper loosens it to "tau ~ N(tau, eps_tau)" while keeping most of the
    identity. Here every non-zero entry is drawn i.i.d. from N(tau, loose_std^2) and the
    zeros stay exactly zero; loose_std = 0 (default) is the exact IDI_tau and draws
    nothing. The paper sets eps_tau = 1e-6 and its notation N(mean, .) is ambiguous
    between a variance and a standard deviation; the `idinit` scheme uses it as the
    standard deviation (loose_std = 1e-6).

    A tensor with more than two dimensions is a convolution kernel and gets the
    patch-maintain IDIC_tau (`idic_` with mode="patch").
    """
    _check_weight(tensor)
    if tensor.dim() > 2:
        return idic_(tensor, tau, mode="patch", wide=wide, loose_std=loose_std, gen=gen)
    return _write(tensor, _idi_matrix(tensor.shape[0], tensor.shape[1], tau, wide, loose_std, gen))


@torch.no_grad()
def idiz_(tensor: torch.Tensor, eps: float = 1e-6, gen: torch.Generator | None = None) -> torch.Tensor:
    """IDIZ_eps, IDInit's zero-preserving initialisation (Sec. 3.2), in place.

    Instead of 0 (whose weights can stay dead, Figure 5), the last layer of a residual
    branch gets tiny +eps/-eps entries arranged so that every output is
    eps * (x_a - x_b), the difference of two inputs: mean 0 and variance 2 * phi * eps^2
    for i.i.d. inputs of variance phi (Eq. 12), i.e. the branch still outputs ~0. For
    theta of shape (D_out, D_in), 0-indexed:

    * case (i), D_out < D_in: start from IDI_eps (the truncated identity: +eps at
      (m, m)) and fill the extra columns D_out..D_in-1 with IDI_{-eps} by Eq. 3 on that
      D_out x (D_in - D_out) block: -eps at (m, D_out + (m mod (D_in - D_out)));
    * case (ii), D_out >= D_in: IDI_eps (+eps at (m, m mod D_in)) and -eps at
      (m, (m + 1) mod D_in). The paper writes "-eps when m % D_in = j - 1"; read with
      the 1-indexed m, j of its case (i) ("columns D_{i+1}+1 : D_i") this is the cyclic
      neighbour j = (m mod D_in) + 1, i.e. (m+1) mod D_in in 0-indexed terms (a 0-indexed
      reading would leave the last row of each identity without its -eps).

    So every row holds exactly one +eps and one -eps: the layer maps constant inputs to
    exactly 0. Edge case D_in = 1: there is no second input to subtract, so the layer is
    eps * [1, ..., 1]^T. Limitation of the literal rule: when D_in > 2 * D_out, the
    columns from 2 * D_out on stay zero. eps = 0 gives the plain zero initialisation.
    `gen` is accepted for a uniform signature and not drawn from.

    A tensor with more than two dimensions gets IDIZC_eps (`idizc_`).
    """
    _check_weight(tensor)
    if tensor.dim() > 2:
        return idizc_(tensor, eps, gen)
    return _write(tensor, _idiz_matrix(tensor.shape[0], tensor.shape[1], eps))


@torch.no_grad()
def idic_(tensor: torch.Tensor, tau: float = 1.0, mode: str = "patch", wide: str = "truncate",
          loose_std: float = 0.0, gen: torch.Generator | None = None) -> torch.Tensor:
    """IDIC_tau for a (c_out, c_in, k, k) kernel (Sec. 3.1.3), in place.

    mode="patch" (IDInit's patch-maintain convolution, Eq. 10): view the kernel as the
    matrix C in R^{c_out x (k*k*c_in)} whose columns run over the receptive patch in the
    paper's k x k x c_in order -- kernel position (a, b) major, input channel c fastest:
    column (a*k + b)*c_in + c -- fill C with IDI_tau (`idi_`: Eq. 3, `wide`, loose
    condition) and reshape back. Output channel o then copies one entry of the input
    patch: for c_out = k*k*c_in, output channel (a*k + b)*c_in + c is input channel c
    seen through tap (a, b) (with padding k//2: shifted by (a - k//2, b - k//2)), so the
    layer keeps the whole patch; for c_out = c_in every channel is kept, shifted by the
    corner tap; for c_out = t*c_in, the t replicas of each channel come with t different
    shifts -- the spatial "feature diversity" of Figure 11.

    mode="patch-raw": the same with the other reading of the paper's reshape (see
    `_patch_kernel`, layout="raw").

    mode="channel" (the channel-maintain / Dirac kernel of ZerO that the paper ablates,
    Sec. 3.1.3 and 4.2): zeros except the kernel centre (k//2, k//2), which gets the
    (c_out, c_in) IDI_tau matrix; with c_out = c_in and padding k//2 the convolution is
    exactly the identity. For even k the "centre" is tap k//2.
    """
    _check_weight(tensor)
    if tensor.dim() == 2:
        return idi_(tensor, tau, wide, loose_std, gen)
    shape = tensor.shape
    c_out, c_in, taps = shape[0], shape[1], math.prod(shape[2:])
    if mode in ("patch", "patch-raw"):
        matrix = _idi_matrix(c_out, taps * c_in, tau, wide, loose_std, gen)
        return _write(tensor, _patch_kernel(matrix, shape, "raw" if mode == "patch-raw" else "filters"))
    if mode == "channel":
        kernel = torch.zeros(tuple(shape), dtype=torch.float64)
        kernel[_centre(shape)] = _idi_matrix(c_out, c_in, tau, wide, loose_std, gen)
        return _write(tensor, kernel)
    raise ValueError(f"mode must be 'patch', 'patch-raw' or 'channel', got {mode!r}")


@torch.no_grad()
def idizc_(tensor: torch.Tensor, eps: float = 1e-6, gen: torch.Generator | None = None,
           layout: str = "filters") -> torch.Tensor:
    """IDIZC_eps: IDIZ_eps "through the patch-maintain scheme" (end of Sec. 3.2), in place.

    The kernel is viewed as the (c_out, k*k*c_in) matrix of `idic_` (layout "filters":
    tap-major, channel fastest; or "raw", see `_patch_kernel`), filled by `idiz_`'s rule and
    reshaped back: each output channel is eps times the difference of two entries of its
    input patch, so a constant input (away from zero padding) maps to exactly 0. `gen` is
    not drawn from.
    """
    _check_weight(tensor)
    if tensor.dim() == 2:
        return idiz_(tensor, eps, gen)
    shape = tensor.shape
    return _write(tensor, _patch_kernel(_idiz_matrix(shape[0], math.prod(shape[2:]) * shape[1], eps), shape, layout))


# --------------------------------------------------------------------------- ZerO

def hadamard(n: int) -> torch.Tensor:
    """Sylvester's Hadamard matrix of order 2^ceil(log2 n) (the smallest power of two >= n).

    H_0 = [1], H_{k+1} = [[H_k, H_k], [H_k, -H_k]]; entries are +-1 and H H^T = size * I.
    Returned as float64 on the CPU.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _zero_matrix(d_out: int, d_in: int) -> torch.Tensor:
    if d_out <= d_in:                     # identity / partial identity [I, 0]
        return torch.eye(d_out, d_in, dtype=torch.float64)
    m = math.ceil(math.log2(d_out))       # dimension-increasing: c * I* H_m I*
    return 2.0 ** (-(m - 1) / 2) * hadamard(2 ** m)[:d_out, :d_in]


@torch.no_grad()
def zero_hadamard_(tensor: torch.Tensor, last: bool = False) -> torch.Tensor:
    """ZerO initialisation (Zhao et al. 2022, Algorithm 1), in place.

    For W of shape (P, Q) = (D_out, D_in):

    * P == Q: the identity;
    * P < Q: the partial identity I* = [I, 0] (propagates the first P inputs);
    * P > Q (dimension-increasing): c * I* H_m I*, i.e. c * H_m[:P, :Q], with H_m the
      Sylvester Hadamard matrix of order 2^m, m = ceil(log2 P), and c = 2^(-(m-1)/2)
      (Algorithm 1's normalisation: c * H_m is orthogonal times sqrt(2)). The columns
      of H_m[:P, :Q] are orthogonal only when P = 2^m, but the block has full column
      rank Q for any P >= Q (Sylvester recursion), so no input direction is lost -- this
      is what breaks the rank constraint of zero padding.
    * last=True (the last layer of a residual branch, role "stem.out"): all zeros.

    Convolution kernels get the same matrix at the kernel centre and zeros elsewhere
    (ZerO's identity-style kernels). Deterministic: nothing is drawn.
    """
    _check_weight(tensor)
    if last:
        return tensor.zero_()
    shape = tensor.shape
    matrix = _zero_matrix(shape[0], shape[1])
    if tensor.dim() == 2:
        return _write(tensor, matrix)
    kernel = torch.zeros(tuple(shape), dtype=torch.float64)
    kernel[_centre(shape)] = matrix
    return _write(tensor, kernel)


# --------------------------------------------------------------------------- Fixup

def fixup_scale(n_branches: int, layers_per_branch: int) -> float:
    """Fixup's rescaling L^(-1/(2m-2)) (Zhang et al. 2019, Sec. 3, rule 2).

    L residual branches of m layers each: the non-last layers of every branch are
    initialised by a standard method (He) and multiplied by this factor; the last layer
    of each branch and the classification layer start at zero. With m = 1 no branch has
    a non-last layer and the factor is 1.0 (nothing to rescale).
    """
    if n_branches < 1 or layers_per_branch < 1:
        raise ValueError(f"need n_branches >= 1 and layers_per_branch >= 1, "
                         f"got {n_branches} and {layers_per_branch}")
    if layers_per_branch == 1:
        return 1.0
    return float(n_branches) ** (-1.0 / (2 * layers_per_branch - 2))


# --------------------------------------------------------------------------- registry schemes

IDINIT_PARAMS = (
    Param("tau", "float", 1.0, "IDI/IDIC value of every identity layer but the first (Appendix B: 1)",
          low=0.0, high=100.0),
    Param("tau_embed", "float", math.sqrt(2.0),
          "IDI value of the first (embed) layer: sqrt(2) for ReLU nets, 1 for tanh/linear (Appendix B)",
          low=0.0, high=100.0),
    Param("eps", "float", 1e-6, "IDIZ/IDIZC value on branch ends and the head; 0 gives plain zeros",
          low=0.0, high=1.0),
    Param("loose_std", "float", 1e-6, "std of the loose condition N(tau, std^2) on non-zero entries; 0 = exact",
          low=0.0, high=10.0),
    Param("conv", "choice", "patch", "convolution identity: patch-maintain IDIC (rows of C are filters flattened "
                                     "(k, k, c_in)), patch-raw (C's buffer reshaped as is to k x k x c_in x c_out) or "
                                     "channel-maintain (Dirac)", choices=("patch", "patch-raw", "channel")),
)


def idinit(tensor, role, gen, tau=1.0, tau_embed=math.sqrt(2.0), eps=1e-6, loose_std=1e-6, conv="patch"):
    """IDInit (Sec. 3, framework at the end of Sec. 3.2; values from Appendix B).

    * role "embed" (the network's first layer): IDI_{tau_embed} (Appendix B: tau =
      sqrt(2) for the first layer of ReLU networks; pass tau_embed=1 for tanh or linear
      networks);
    * roles "main", "stem.in", "stem.mid": IDI_tau, tau = 1;
    * roles "stem.out" (last layer of a residual branch) and "head" (final
      classification/regression layer): IDIZ_eps, eps = 1e-6;
    * attention (Appendix A.5): IDI_1 on W_Q, W_K, W_V ("attn.q/k/v") and IDIZ_eps on the
      output transformation W_O ("attn.o"), which ends the attention branch;
    * convolution kernels: IDIC_tau (conv="patch"; conv="patch-raw" is the other reading of
      the paper's reshape, see `_patch_kernel`; or the channel-maintain Dirac kernel with
      conv="channel" for the Sec. 4.2 ablation) and IDIZC_eps (in the same layout).

    Identity layers carry the loose condition with loose_std (default 1e-6, the paper's
    eps_tau read as a standard deviation; 0 turns it off and then nothing is drawn from
    `gen`). Wide identity layers use Eq. 3's truncated identity (see `idi_`).
    Ablations: conv="channel" drops IDIC, eps=0 drops IDIZ, loose_std=0 drops Loose.
    """
    _check_role(role)
    if role in BRANCH_ENDS or role == "head":
        if tensor.dim() > 2:
            return idizc_(tensor, eps, gen, layout="raw" if conv == "patch-raw" else "filters")
        return idiz_(tensor, eps, gen)
    value = tau_embed if role == "embed" else tau
    if tensor.dim() > 2:
        return idic_(tensor, value, mode=conv, loose_std=loose_std, gen=gen)
    return idi_(tensor, value, loose_std=loose_std, gen=gen)


def zero(tensor, role, gen):
    """ZerO (Zhao et al. 2022): `zero_hadamard_` on every weight, zero on branch ends ("stem.out", "attn.o").

    Identity for square layers, partial identity for dimension-reducing ones (including
    the head), scaled Hadamard for dimension-increasing ones, and zeros for the last
    layer of each residual branch. Deterministic: nothing is drawn from `gen`.
    """
    _check_role(role)
    return zero_hadamard_(tensor, last=role in BRANCH_ENDS)


@torch.no_grad()
def fixup(tensor, role, gen, n_branches=8, layers_per_branch=2):
    """Fixup (Zhang et al. 2019, Sec. 3): He init rescaled inside branches, zeros at their ends.

    * roles "stem.in", "stem.mid", "attn.q/k/v" (non-last layers of a residual branch): He
      normal, N(0, 2 / fan_in), times fixup_scale(n_branches, layers_per_branch) =
      L^(-1/(2m-2));
    * roles "stem.out", "attn.o" (last layer of a branch) and "head" (classification layer): 0;
    * roles "embed", "main" (outside the branches): plain He normal.

    explorer.init.initialize passes L = n_branches and m = layers_per_branch, counted on
    the model being initialised. Fixup's scalar multipliers and biases are not weights and are
    left to the model/topology. fan_in follows PyTorch's kaiming default; the official
    CIFAR code uses fan_out for its square branch convs, which is the same there.
    """
    _check_role(role)
    if role in BRANCH_ENDS or role == "head":
        return tensor.zero_()
    _check_weight(tensor)
    std = math.sqrt(2.0 / _fan_in(tensor))
    if role not in ("embed", "main"):
        std *= fixup_scale(n_branches, layers_per_branch)
    return torch.nn.init.normal_(tensor, 0.0, std, generator=gen)


# --------------------------------------------------------------------------- Transformers (Cutting the Skip)

@torch.no_grad()
def mimetic_qk_(wq: torch.Tensor, wk: torch.Tensor, heads: int, alpha: float, beta: float,
                gen: torch.Generator | None = None) -> None:
    """W_Q W_K^T = alpha Z + beta I per head, Z_ij ~ N(0, 1/d) (Cutting the Skip Eq. 11; mimetic init).

    wq, wk are (d, d) weights in nn.Linear's layout (W_Q = wq^T in the paper's row
    convention); head h owns rows h*k..(h+1)*k, k = d / heads. Each head draws its own Z;
    with M = alpha Z + beta I = U S V^T, W_Q,h = U_k S_k^(1/2) and W_K,h = V_k S_k^(1/2) (the
    k leading singular directions), so W_Q,h W_K,h^T is the best rank-k approximation of M,
    and exactly M with one head.
    """
    d = wq.shape[1]
    k = wq.shape[0] // heads
    for h in range(heads):
        z = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        u, s, vh = torch.linalg.svd(alpha * z + beta * torch.eye(d, dtype=torch.float64))
        root = s[:k].sqrt()
        wq[h * k:(h + 1) * k].copy_((u[:, :k] * root).T)
        wk[h * k:(h + 1) * k].copy_((vh[:k].T * root).T)


@torch.no_grad()
def orthogonal_vo_(wv: torch.Tensor, wo: torch.Tensor, c: float, gen: torch.Generator | None = None) -> None:
    """W_V = c U, W_O = c V^T from the SVD of a Gaussian d x d matrix: W_V W_O = c^2 (orthogonal) (Sec. 5.1).

    In nn.Linear's layout wv = W_V^T and wo = W_O^T. The heads split W_V's columns and W_O's
    rows consistently, so the full product is the sum of the per-head products.
    """
    d = wv.shape[0]
    u, _, vh = torch.linalg.svd(torch.randn(d, d, generator=gen, dtype=torch.float64))
    wv.copy_((c * u).T)
    wo.copy_((c * vh).T)


@torch.no_grad()
def suo_(tensor: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
    """Scale-corrected uniform orthogonal (Martens et al. 2021): sqrt(max(1, d_out / d_in)) times a uniform
    (semi-)orthogonal matrix, so each output unit has variance 1 / d_in per unit input variance."""
    _check_weight(tensor)
    d_out, d_in = tensor.shape[0], tensor[0].numel()
    torch.nn.init.orthogonal_(tensor, generator=gen)
    return tensor.mul_(math.sqrt(max(1.0, d_out / d_in)))
