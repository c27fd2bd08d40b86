"""Registered models: embed -> Stack(blocks under a Topology) -> head.

`model.depth` and `model.width` mean the same everywhere: depth counts the paper's layers
(for the MLP-ResNet of the tau paper, L = depth: one input layer, L-1 residual layers and a
fully connected layer), width is the stream's dimension.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.nn.blocks import Linear, LowRank, MLPBlock, Norm
from explorer.registry import Param, Registry, SpecError
from explorer.topology import Topology, build_topology, stem_activation

# Roles of weights that initialisation schemes fill (the others: norm, bias, pos, mix, scale).
WEIGHT_ROLES = ("embed", "main", "stem.in", "stem.mid", "stem.out", "attn.q", "attn.k", "attn.v", "attn.o", "head")
BRANCH_ENDS = ("stem.out", "attn.o")  # last layer of a residual branch: zero-preserving schemes start it at (near) 0

MODELS = Registry(
    "models",
    common=(
        Param("depth", "int", 8, "number of layers (see each model for how they split into blocks)", low=1, high=10_000),
        Param("width", "int", 64, "width of the residual stream", low=1, high=65_536),
    ),
)


class Gated(nn.Module):
    """alpha * f(x) with a learnable scalar alpha starting at 0 (ReZero, SkipInit)."""

    ROLES = {"alpha": "scale"}

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, *inputs):
        return self.alpha * self.block(*inputs)


class Stack(nn.Module):
    """Blocks f_1..f_L run under a Topology (the part probes look at).

    After each merge the main stem applies `activation` ("none" or "relu"), or, for post-norm
    Transformers, block j's own normalisation `post_norms[j - 1]`.
    """

    def __init__(self, blocks: list[nn.Module], topology: Topology, activation: str = "none",
                 post_norms: list[nn.Module] | None = None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.topology = topology
        self.activation = activation
        self.post_norms = nn.ModuleList(post_norms) if post_norms is not None else None

    @property
    def acts(self) -> list:
        """The main-stem operation after each block's merge."""
        if self.post_norms is not None:
            return list(self.post_norms)
        return [stem_activation(self.activation)] * len(self.blocks)

    def forward(self, x0):
        return self.topology.run(x0, self.blocks, self.acts)


class Network(nn.Module):
    """embed -> stack -> head; `stack` maps the embedded input to the stream the head reads."""

    def __init__(self, embed: nn.Module, stack: Stack, head: nn.Module):
        super().__init__()
        self.embed = embed
        self.stack = stack
        self.head = head

    def forward(self, x):
        return self.head(self.stack(self.embed(x)))


class ReLU(nn.Sequential):
    """A layer followed by ReLU (the MLP-ResNet's input and fully connected layers)."""

    def __init__(self, layer: nn.Module):
        super().__init__(layer, nn.ReLU())


def n_blocks(spec) -> int:
    """How many blocks the topology spans (a Transformer at module level counts attention and MLP apart)."""
    return MODELS[spec.model.name].extra["n_blocks"](spec.model.params, spec.topology)


def _square_check(p, data_dims):
    d_in, d_out, task = data_dims.input_dim, data_dims.output_dim, data_dims.task
    if task != "regression" or d_in != d_out:
        raise SpecError("model.name", f"this model maps R^d to R^d, so it needs a regression dataset with equal input "
                                      f"and target dimension (got input {d_in}, output {d_out}, {task}); "
                                      f"use data.name=whitened-regression, identity or affine")
    if p["width"] != d_in:
        raise SpecError("model.width", f"width {p['width']} does not fit the data dimension {d_in}; set model.width={d_in}")


@MODELS.register("linear", "deep linear network: depth K layers of width x width, no bias (ANCRe case study)",
                 n_blocks=lambda p, topology: p["depth"], check=_square_check)
def linear(depth, width, topology, data_dims):
    blocks = [Linear(width, width, "main") for _ in range(depth)]
    return Network(nn.Identity(), Stack(blocks, build_topology(topology, depth, width, depth)), nn.Identity())


def _lowrank_check(p, data_dims):
    _square_check(p, data_dims)
    if p["rank"] > p["width"]:
        raise SpecError("model.rank", f"rank {p['rank']} exceeds width {p['width']}; use a rank of at most {p['width']}")


@MODELS.register("lowrank", "low-rank linear residual network: depth T layers V_t = U_t W_t of rank r (DCA Figure 1)",
                 (Param("rank", "int", 3, "rank r of each layer", low=1, high=65_536),),
                 n_blocks=lambda p, topology: p["depth"], check=_lowrank_check)
def lowrank(depth, width, rank, topology, data_dims):
    blocks = [LowRank(width, rank) for _ in range(depth)]
    return Network(nn.Identity(), Stack(blocks, build_topology(topology, depth, width, depth)), nn.Identity())


def _mlp_resnet_check(p, data_dims):
    if p["depth"] < 2:
        raise SpecError("model.depth", "the MLP-ResNet needs depth L >= 2 (input layer, L-1 residual layers, "
                                       "a fully connected layer); set model.depth=2 or more")


@MODELS.register(
    "mlp-resnet",
    "the tau paper's ResNet: h0 = relu(Ax), L-1 layers h = relu(h + tau W h), relu(W_L h), output B h",
    n_blocks=lambda p, topology: p["depth"] - 1, check=_mlp_resnet_check,
)
def mlp_resnet(depth, width, topology, data_dims):
    """Section 2 of the tau paper; the topology acts on the L-1 residual layers with a ReLU main stem.

    With topology `none` this is the paper's feedforward baseline h = relu(W h); with `tau`
    it is exactly the paper's h = relu(h + tau W h). Use init kaiming with mode fan_out for
    the paper's N(0, 2/m) on A, W_l and N(0, 2/d) on B.
    """
    blocks = [Linear(width, width, "stem.out") for _ in range(depth - 1)]
    stack = Stack(blocks, build_topology(topology, depth - 1, width, depth), activation="relu")
    head = nn.Sequential(ReLU(Linear(width, width, "main")), Linear(width, data_dims.output_dim, "head"))
    return Network(_flat(ReLU(Linear(data_dims.input_dim, width, "embed")), data_dims), stack, head)


@MODELS.register(
    "mlp",
    "residual MLP with pre-activation blocks f(x) = V relu(W norm(x)), linear embedding and head",
    (
        Param("hidden_ratio", "float", 2.0, "hidden width of each block as a multiple of the width", low=0.01, high=64.0),
        Param("norm", "choice", "none", "normalisation inside each block (and before the head)",
              choices=("none", "layernorm", "batchnorm")),
        Param("bias", "bool", True, "use biases in the block and embedding layers"),
    ),
    n_blocks=lambda p, topology: p["depth"],
)
def mlp(depth, width, hidden_ratio, norm, bias, topology, data_dims):
    hidden = max(1, round(width * hidden_ratio))
    blocks = [MLPBlock(width, hidden, norm, bias) for _ in range(depth)]
    head = nn.Sequential(Norm(norm, width), Linear(width, data_dims.output_dim, "head", bias=True))
    embed = _flat(Linear(data_dims.input_dim, width, "embed", bias), data_dims)
    return Network(embed, Stack(blocks, build_topology(topology, depth, width, depth)), head)


def _flat(embed: nn.Module, data_dims) -> nn.Module:
    """Vector models read images flattened."""
    return embed if len(data_dims.input_shape) == 1 else nn.Sequential(nn.Flatten(), embed)


def build_model(spec, data_dims) -> Network:
    """Instantiate (uninitialised) the model a spec describes; explorer.init fills the weights."""
    from explorer.init import uses_gates

    model = MODELS[spec.model.name].factory(topology=spec.topology, data_dims=data_dims, **spec.model.params)
    if uses_gates(spec.init):
        for stack in (m for m in model.modules() if isinstance(m, Stack)):
            stack.blocks = nn.ModuleList(Gated(b) for b in stack.blocks)
    return model


def parameter_count(spec) -> int:
    """How many parameters the spec's model has, counted on the meta device (no memory, no data loaded),
    so a server can refuse an oversized model before building it."""
    from explorer.data import dims

    with torch.device("meta"):
        model = build_model(spec, dims(spec.data))
    return sum(p.numel() for p in model.parameters())


def check_model(spec, data_dims) -> None:
    entry = MODELS[spec.model.name]
    if entry.extra.get("check"):
        entry.extra["check"](spec.model.params, data_dims)
    if entry.extra.get("check_spec"):
        entry.extra["check_spec"](spec)


def roles(model: nn.Module) -> dict[str, str]:
    """{parameter name: role} for every parameter of the model.

    Roles come from each module's ROLES; topology parameters are "mix" (coefficients) or
    "scale" (tau).
    """
    found = {}
    for module_name, module in model.named_modules():
        declared = getattr(module, "ROLES", {})
        for param_name, _ in module.named_parameters(recurse=False):
            if isinstance(module, Topology):
                role = "scale" if param_name == "tau" else "mix"
            else:
                role = declared.get(param_name)
            if role is None:
                raise AssertionError(f"parameter {module_name}.{param_name} has no role")
            found[f"{module_name}.{param_name}" if module_name else param_name] = role
    return found


from explorer.nn import conv, transformer  # noqa: E402,F401  (register resnet-cifar, allconv, gpt and vit)
