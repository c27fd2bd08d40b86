"""What every model shares: the registry, the Stack that runs blocks under a Topology, the Network
(embed -> stack -> head), parameter roles and the model checks. Model files import only this."""

from __future__ import annotations

import torch
from torch import nn

from explorer.registries import Param, Registry, SpecError, registry
from explorer.topology import Topology, stem_activation

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
    return MODELS[spec.model.name].info.n_blocks(spec.model.params, spec.topology)


def check_model(spec, data_dims) -> None:
    """The model's own check of a spec and its data's dimensions (SpecError naming the field)."""
    check = MODELS[spec.model.name].info.check
    if check:
        check(spec, data_dims)


def check_batch_norm(spec, positions: int = 1) -> None:
    """SpecError unless every training batch gives each batch norm at least 2 values per channel (torch's
    BatchNorm refuses fewer while training). A model whose `norm` parameter can be batchnorm calls this from
    its check, with the positions per example its coarsest batch norm sees (1 for vectors, the pixels of the
    smallest feature map). The batch is the whole training set under a full-batch optimizer, else
    min(train.batch_size, training examples); every batch has that size (none is cut short at an epoch's end)."""
    if spec.model.params.get("norm") != "batchnorm":
        return
    n_train = _training_examples(spec.data)
    full = registry("optimizers")[spec.optim.name].info.full_batch
    limited_by_data = full or n_train is not None and n_train <= spec.train.batch_size
    batch = n_train if limited_by_data else spec.train.batch_size
    if batch is None or batch * positions >= 2:
        return
    others = " or ".join(c for c in registry("models")[spec.model.name].param("norm").choices if c != "batchnorm")
    needed = -(-2 // positions)
    if not limited_by_data:
        raise SpecError("train.batch_size", f"batches of {batch} example{'s' * (batch != 1)} give batch norm fewer "
                                            f"than 2 values per channel; set train.batch_size={needed} or more, "
                                            f"or model.norm to {others}")
    raise SpecError("data.n_train", f"{batch} training example{'s' * (batch != 1)} give{'s' * (batch == 1)} "
                                    f"batches of {batch}, and batch norm needs at least 2 values per channel in each "
                                    f"batch; set data.n_train (and train.batch_size) to {needed} or more, or "
                                    f"model.norm to {others}")


def _training_examples(data) -> int | None:
    """The training examples a data section asks for by its `n_train` parameter (0: all, the parameter's upper
    bound), or None for a dataset without one (each of those holds at least 2 by its parameters' bounds)."""
    param = registry("datasets")[data.name].param("n_train")
    if param is None:
        return None
    return int(data.params["n_train"]) or int(param.high)


def roles(model: nn.Module) -> dict[str, str]:
    """{parameter name: role} for every parameter of the model.

    Roles come from each module's ROLES, topologies included: their coefficients are "mix" and
    their scalar gates "scale" (the scalar-gate learning rate, explorer.optim), whatever their names.
    """
    found = {}
    for module_name, module in model.named_modules():
        declared = getattr(module, "ROLES", {})
        for param_name, _ in module.named_parameters(recurse=False):
            role = declared.get(param_name)
            if role is None:
                raise AssertionError(f"parameter {module_name}.{param_name} has no role; declare it in "
                                     f"{type(module).__name__}.ROLES")
            found[f"{module_name}.{param_name}" if module_name else param_name] = role
    return found
