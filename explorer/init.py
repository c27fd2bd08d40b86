"""Initialisation schemes applied by parameter role and shape, never by module-name guessing.

A scheme fills every weight whose role is a weight role (embed, main, stem.*, attn.*, head);
norm weights start at 1, biases at 0, learned positions and class tokens ("pos") at
N(0, 0.02^2) as in GPT-2 and ViT; topology parameters and gates (mix, scale) keep the values
their modules define. Schemes that set W_Q and W_K (or W_V and W_O) jointly declare an
`attention` function that fills a whole attention module when its W_Q comes up. One generator seeded with train.seed is drawn in parameter
order, and mix/scale parameters draw nothing, so the same seed gives the same block weights
whatever the topology. `overrides` gives some roles another scheme (with its defaults),
e.g. "head=orthogonal".
"""

from __future__ import annotations

import math

import torch
from torch import nn

from explorer import init_schemes
from explorer.nn.base import MODELS, WEIGHT_ROLES, Stack, roles
from explorer.registries import Param, Registry, SpecError, check_text, quote
from explorer.topology import TOPOLOGIES, Topology

_OVERRIDES_HINT = "write role=scheme pairs separated by commas, e.g. 'head=orthogonal'"


def parse_overrides(text: str, path: str = "init.overrides") -> dict[str, str]:
    """'head=orthogonal, stem.out=normal' -> {"head": "orthogonal", "stem.out": "normal"}, validated ("" is none).
    It splits the text with str methods, so it reads it in time linear in its length."""
    found = {}
    if not check_text(text, path).strip():
        return found
    for item in text.split(","):
        if not item.strip():
            raise SpecError(path, f"{quote(text)} has an empty item (two commas together, or one at an end); "
                                  f"{_OVERRIDES_HINT}")
        role, equals, name = (piece.strip() for piece in item.partition("="))
        if not (role and equals and name):
            raise SpecError(path, f"{quote(item.strip())} is not role=scheme; {_OVERRIDES_HINT}")
        if role not in WEIGHT_ROLES:
            raise SpecError(path, f"{role!r} is not a weight role; use one of {', '.join(WEIGHT_ROLES)}")
        INITS.lookup(name, path)
        if INITS[name].info.gates or INITS[name].info.attention:
            raise SpecError(path, f"{name} changes the architecture or sets several weights jointly and "
                                  "cannot be a per-role override; choose it as init.name instead")
        found[role] = name
    return found


INITS = Registry("inits", common=(
    Param("overrides", "str", "", "other schemes for some roles, e.g. 'head=orthogonal, stem.out=normal' "
                                  f"(roles: {', '.join(WEIGHT_ROLES)})", parse=parse_overrides),
))


def _fans(tensor: torch.Tensor) -> tuple[int, int]:
    fan_out, fan_in = tensor.shape[0], tensor.shape[1] if tensor.dim() > 1 else 1
    receptive = tensor[0][0].numel() if tensor.dim() > 2 else 1
    return fan_in * receptive, fan_out * receptive


@INITS.register("default", "PyTorch's default for linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); biases 0")
def default(tensor, role, gen):
    bound = 1 / math.sqrt(_fans(tensor)[0])
    nn.init.uniform_(tensor, -bound, bound, generator=gen)


POS_STD = 0.02  # learned positions and class tokens (GPT-2, ViT)


def _needs_residual(spec) -> None:
    if not TOPOLOGIES[spec.topology.name].info.residual:
        raise SpecError("init.name", f"{spec.init.name} multiplies each residual branch by a zero-initialised scalar, "
                                     f"so it needs a residual topology; choose a topology other than {spec.topology.name}")


@INITS.register("rezero", "ReZero: x + alpha * f(x) with one scalar alpha per block starting at 0; weights as default",
                gates=True, check=_needs_residual)
def rezero(tensor, role, gen):
    """Bachlechner et al. 2021: every residual branch is gated by a learnable scalar initialised to 0."""
    default(tensor, role, gen)


@INITS.register("skipinit", "SkipInit: a zero-initialised scalar multiplier on each residual branch (meant without "
                            "normalisation); weights as default", gates=True, check=_needs_residual)
def skipinit(tensor, role, gen):
    """De & Smith 2020: the branch's output is multiplied by a learnable scalar starting at 0.

    In this library the mechanism is the same gate as ReZero; SkipInit is the name for using
    it in place of batch normalisation (pair it with model.norm=none).
    """
    default(tensor, role, gen)


@INITS.register(
    "kaiming",
    "He et al.: variance 2 / fan (ReLU gain); fan_out gives the tau paper's N(0, 2/m)",
    (
        Param("mode", "choice", "fan_in", "which fan sets the variance", choices=("fan_in", "fan_out")),
        Param("distribution", "choice", "normal", "normal or uniform with the same variance", choices=("normal", "uniform")),
    ),
)
def kaiming(tensor, role, gen, mode, distribution):
    fan_in, fan_out = _fans(tensor)
    std = math.sqrt(2.0 / (fan_in if mode == "fan_in" else fan_out))
    _fill(tensor, std, distribution, gen)


@INITS.register("xavier", "Glorot: variance 2 / (fan_in + fan_out)",
                (Param("distribution", "choice", "normal", "normal or uniform", choices=("normal", "uniform")),))
def xavier(tensor, role, gen, distribution):
    fan_in, fan_out = _fans(tensor)
    _fill(tensor, math.sqrt(2.0 / (fan_in + fan_out)), distribution, gen)


@INITS.register("orthogonal", "(semi-)orthogonal matrices times a gain",
                (Param("gain", "float", 1.0, "multiplier of the orthogonal matrix", low=0.0, high=100.0),))
def orthogonal(tensor, role, gen, gain):
    nn.init.orthogonal_(tensor, gain=gain, generator=gen)


@INITS.register("normal", "i.i.d. N(0, std^2); a small std gives the small initialisation of the ANCRe case study",
                (Param("std", "float", 0.01, "standard deviation", low=0.0, high=100.0),))
def normal(tensor, role, gen, std):
    nn.init.normal_(tensor, 0.0, std, generator=gen)


def _positive_std(spec) -> None:
    """A truncated normal of std 0 has an empty cut (+-bound x 0) and no density to draw from."""
    if spec.init.params["std"] <= 0:
        raise SpecError("init.std", "must be above 0 for a truncated normal (its cut, +-bound x std, would be "
                                    "empty); use a value in (0, 100], e.g. 0.02 (init.name=normal with std 0 gives "
                                    "all-zero weights)")


@INITS.register("trunc-normal", "truncated normal N(0, std^2) cut at +-bound std (0.02: the ViT/timm default that "
                                "Cutting the Skip calls the default init)",
                (Param("std", "float", 0.02, "standard deviation before truncation, above 0", low=0.0, high=100.0),
                 Param("bound", "float", 2.0, "truncate at +-bound x std (timm's absolute +-2 is bound = 2 / std)",
                       low=0.1, high=10_000.0)), check=_positive_std)
def trunc_normal(tensor, role, gen, std, bound):
    """The usual reading of "truncated normal": redraw outside +-2 std (a = -2 std, b = 2 std). timm's
    trunc_normal_(std=.02) cuts at +-2 in absolute value, i.e. hardly at all: that reading is bound = 100."""
    nn.init.trunc_normal_(tensor, 0.0, std, -bound * std, bound * std, generator=gen)


def _fill(tensor, std, distribution, gen):
    if distribution == "normal":
        nn.init.normal_(tensor, 0.0, std, generator=gen)
    else:
        bound = math.sqrt(3.0) * std
        nn.init.uniform_(tensor, -bound, bound, generator=gen)


INITS.register("idinit", "IDInit: padded identity IDI (Eq. 3) with the loose condition, IDIZ on branch ends and "
                         "the head, patch-maintain IDIC for convolutions", init_schemes.IDINIT_PARAMS)(init_schemes.idinit)
INITS.register("zero", "ZerO: identity / Hadamard for dimension changes, zeros at the end of each residual branch")(
    init_schemes.zero)
INITS.register("fixup", "Fixup: He init scaled by L^(-1/(2m-2)) inside residual branches, zero branch ends and head",
               needs_architecture=True)(init_schemes.fixup)


def _needs_attention(spec) -> None:
    if not MODELS[spec.model.name].info.transformer:
        raise SpecError("init.name", f"{spec.init.name} sets the attention weights W_Q, W_K, W_V, W_O, and "
                                     f"{spec.model.name} has none; use model.name=gpt or vit")


MIMETIC_PARAMS = (
    Param("alpha", "float", 2.0, "scale of the random part alpha Z (2 supervised, 1.8 self-supervised)", low=0.0, high=100.0),
    Param("beta", "float", 0.6, "weight of the identity beta I (0.6 supervised, 1 self-supervised)", low=-100.0, high=100.0),
)


def _mimetic_attention(module, gen, alpha, beta, **_):
    init_schemes.mimetic_qk_(module.wq, module.wk, module.heads, alpha, beta, gen)
    return ("wq", "wk")


def _skipless_attention(module, gen, alpha, beta, c):
    _mimetic_attention(module, gen, alpha, beta)
    init_schemes.orthogonal_vo_(module.wv, module.wo, c, gen)
    return ("wq", "wk", "wv", "wo")


@INITS.register("mimetic", "mimetic attention (Trockman & Kolter): W_Q W_K^T = alpha Z + beta I per head; "
                           "other weights as default", MIMETIC_PARAMS, check=_needs_attention,
                attention=_mimetic_attention)
def mimetic(tensor, role, gen, alpha, beta):
    default(tensor, role, gen)


@INITS.register(
    "skipless",
    "Cutting the Skip: mimetic W_Q W_K^T = alpha Z + beta I, W_V W_O = c^2 x orthogonal, scale-corrected "
    "orthogonal MLP weights",
    MIMETIC_PARAMS + (Param("c", "float", 3.0, "scale c of W_V = c U and W_O = c V^T", low=0.0, high=100.0),),
    check=_needs_attention, attention=_skipless_attention,
)
def skipless(tensor, role, gen, alpha, beta, c):
    """Sec. 5 with the ViT-Base values (alpha 2, beta 0.6, c 3); MLP weights ("stem.*") get SUO, the rest default."""
    if role.startswith("stem."):
        init_schemes.suo_(tensor, gen)
    else:
        default(tensor, role, gen)


def _branch_end_norms(model: nn.Module) -> list[nn.Module]:
    return [m.end_norm for m in model.modules() if getattr(m, "end_norm", None) is not None]


def _needs_end_norms(spec) -> None:
    if spec.model.name != "resnet-cifar" or spec.model.params.get("norm") != "batchnorm":
        raise SpecError("init.name", "zero-gamma sets the scale of the batch norm closing each residual branch to 0; "
                                     "use model.name=resnet-cifar with model.norm=batchnorm")


@INITS.register("zero-gamma", "Kaiming weights and the last batch-norm scale of every residual branch set to 0",
                (Param("mode", "choice", "fan_in", "which fan sets the Kaiming variance", choices=("fan_in", "fan_out")),),
                check=_needs_end_norms, finalize=lambda model: [norm.weight.zero_() for norm in _branch_end_norms(model)])
def zero_gamma(tensor, role, gen, mode):
    """Goyal et al. 2017 ("zero gamma"): each residual branch starts as the zero map through its last BN."""
    kaiming(tensor, role, gen, mode=mode, distribution="normal")


def _architecture(model: nn.Module) -> dict[str, int]:
    """L (residual branches) and m (weight layers per branch) for schemes that scale with them."""
    stacks = [m for m in model.modules() if isinstance(m, Stack)]
    blocks = [b for s in stacks for b in s.blocks]
    first = roles(blocks[0]) if blocks else {}
    layers = sum(1 for role in first.values() if role.startswith("stem."))
    return {"n_branches": max(1, len(blocks)), "layers_per_branch": max(1, layers)}


def _scheme(name: str, params, model: nn.Module):
    """(fill function, its keyword arguments) for one scheme, with architecture counts where it needs them."""
    entry = INITS[name]
    kwargs = {k: v for k, v in params.items() if k != "overrides"}
    if entry.info.needs_architecture:
        kwargs.update(_architecture(model))
    return entry.factory, kwargs


def check_init(spec) -> None:
    """Checks of an init section against the rest of the spec."""
    parse_overrides(spec.init.overrides)
    check = INITS[spec.init.name].info.check
    if check:
        check(spec)


@torch.no_grad()
def initialize(model: nn.Module, section, seed: int) -> None:
    """Fill the model's parameters by role with the scheme a spec's init section names."""
    main = _scheme(section.name, section.params, model)
    overrides = parse_overrides(section.overrides)
    schemes = {role: _scheme(name, INITS[name].defaults(), model) for role, name in overrides.items()}
    joint = INITS[section.name].info.attention
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    done = set()
    for name, role in roles(model).items():
        if name in done:
            continue
        tensor = params[name]
        if joint and role == "attn.q" and not {"attn.q", "attn.k"} & overrides.keys():
            owner = name.rsplit(".", 1)[0]
            done.update(f"{owner}.{attr}" for attr in joint(modules[owner], gen, **main[1]))
            continue
        if role in WEIGHT_ROLES:
            scheme, scheme_params = schemes.get(role, main)
            scheme(tensor, role, gen, **scheme_params)
        elif role == "norm":
            tensor.fill_(1.0 if name.endswith("weight") else 0.0)
        elif role == "pos":
            nn.init.normal_(tensor, 0.0, POS_STD, generator=gen)
        elif role == "bias":
            tensor.zero_()
    gate_gen = torch.Generator().manual_seed(seed)  # its own stream: the block weights stay the same
    for module in model.modules():
        if isinstance(module, Topology):
            module.init_gates(gate_gen)
    finalize = INITS[section.name].info.finalize
    if finalize:
        finalize(model)
