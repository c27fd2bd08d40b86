"""Registered models: embed -> Stack(blocks under a Topology) -> head.

`model.depth` and `model.width` mean the same everywhere: depth counts the paper's layers
(for the MLP-ResNet of the tau paper, L = depth: one input layer, L-1 residual layers and a
fully connected layer), width is the stream's dimension.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.nn.base import MODELS, Gated, Network, ReLU, Stack, check_batch_norm
from explorer.nn.blocks import Linear, LowRank, MLPBlock, Norm
from explorer.registries import Param, SpecError, registry
from explorer.topology import build_topology


def _square_check(spec, data_dims):
    p = spec.model.params
    d_in, d_out, task = data_dims.input_dim, data_dims.output_dim, data_dims.task
    if task != "regression" or d_in != d_out:
        raise SpecError("model.name", f"this model maps R^d to R^d, so it needs a regression dataset with equal input "
                                      f"and target dimension (got input {d_in}, output {d_out}, {task}); "
                                      f"use data.name=whitened-regression, identity or affine")
    if p["width"] != d_in:
        raise SpecError("model.width", f"width {p['width']} does not fit the data dimension {d_in}; set model.width={d_in}")


SQUARE = {"name": "whitened-regression", "dim": 4, "n_train": 8, "n_val": 8}  # the square models' examples' data
VECTORS = {"name": "spirals", "n_train": 8, "n_val": 8}  # the vector models' examples' data


@MODELS.register("linear", "deep linear network: depth K layers of width x width, no bias (ANCRe case study)",
                 n_blocks=lambda p, topology: p["depth"], positions=lambda p, shape: 1, check=_square_check,
                 example={"data": SQUARE, "model": {"depth": 3, "width": 4}})
def linear(depth, width, topology, data_dims):
    blocks = [Linear(width, width, "main") for _ in range(depth)]
    return Network(nn.Identity(), Stack(blocks, build_topology(topology, depth, width, depth)), nn.Identity())


def _lowrank_check(spec, data_dims):
    _square_check(spec, data_dims)
    p = spec.model.params
    if p["rank"] > p["width"]:
        raise SpecError("model.rank", f"rank {p['rank']} exceeds width {p['width']}; use a rank of at most {p['width']}")


@MODELS.register("lowrank", "low-rank linear residual network: depth T layers V_t = U_t W_t of rank r (DCA Figure 1)",
                 (Param("rank", "int", 3, "rank r of each layer", low=1, high=65_536),),
                 n_blocks=lambda p, topology: p["depth"], positions=lambda p, shape: 1, check=_lowrank_check,
                 example={"data": SQUARE, "model": {"depth": 3, "width": 4, "rank": 2}})
def lowrank(depth, width, rank, topology, data_dims):
    blocks = [LowRank(width, rank) for _ in range(depth)]
    return Network(nn.Identity(), Stack(blocks, build_topology(topology, depth, width, depth)), nn.Identity())


def _mlp_resnet_check(spec, data_dims):
    if spec.model.depth < 2:
        raise SpecError("model.depth", "the MLP-ResNet needs depth L >= 2 (input layer, L-1 residual layers, "
                                       "a fully connected layer); set model.depth=2 or more")


@MODELS.register(
    "mlp-resnet",
    "the tau paper's ResNet: h0 = relu(Ax), L-1 layers h = relu(h + tau W h), relu(W_L h), output B h",
    n_blocks=lambda p, topology: p["depth"] - 1, positions=lambda p, shape: 1, check=_mlp_resnet_check,
    example={"data": VECTORS, "model": {"depth": 3, "width": 4}},
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
    n_blocks=lambda p, topology: p["depth"], positions=lambda p, shape: 1,
    check=lambda spec, data_dims: check_batch_norm(spec),
    example={"data": VECTORS, "model": {"depth": 3, "width": 4, "norm": "layernorm"}},
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
    """Instantiate (uninitialised) the model a spec describes; explorer.init fills the weights.

    An init scheme that declares `gates` (ReZero, SkipInit) changes the architecture: each residual
    branch gets a zero-initialised scalar gate. The flag is read from the init registry by name.
    """
    model = MODELS[spec.model.name].factory(topology=spec.topology, data_dims=data_dims, **spec.model.params)
    if registry("inits")[spec.init.name].info.gates:
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



