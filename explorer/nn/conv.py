"""Convolutional models: the CIFAR ResNet-(6n+2) of He et al. and All-CNN (IDInit Table 9).

The ResNet has three stages of n basic blocks (width, 2 width, 4 width channels). The first
block of stages 2 and 3 halves the resolution and changes the channel count, so it is a
transition block with its own shortcut: a 1x1 projection + norm ("projection"), subsampling
with zero-padded channels (He et al.'s option A, "pad"), or the tau paper's official code
("pool-bn": 1x1 average pooling with stride 2, BatchNorm over the input channels, zero
channels concatenated). Every other block runs under the spec's topology, one Stack per stage.
A tau topology (fixed or learnable) is shared by all stages and also scales the transition
blocks' branches, relu(shortcut(x) + tau f(x)), as the official code scales every block
(`bn2(out) * tau`); a learnable tau is one scalar for the whole network (tau paper, Sec. 5.2);
rules such as 1/sqrt(L) use L = 3n residual blocks. Without normalisation (norm "none") every branch is
the tau paper's no-BN branch, with its four scalar biases (BasicBlock).
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.nn.blocks import Linear
from explorer.nn.base import MODELS, Network, Stack, check_batch_norm
from explorer.registries import Param, SpecError
from explorer.topology import TOPOLOGIES, build_topology, is_shareable


class Conv(nn.Module):
    """A k x k convolution without bias whose weight has a declared role."""

    def __init__(self, c_in: int, c_out: int, kernel: int, role: str, stride: int = 1):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c_out, c_in, kernel, kernel))
        self.stride, self.padding = stride, kernel // 2
        self.ROLES = {"weight": role}

    def forward(self, x):
        return nn.functional.conv2d(x, self.weight, stride=self.stride, padding=self.padding)


def norm2d(kind: str, channels: int) -> nn.Module:
    if kind == "none":
        return nn.Identity()
    layer = nn.BatchNorm2d(channels)
    layer.ROLES = {"weight": "norm", "bias": "norm"}
    return layer


class BasicBlock(nn.Module):
    """The residual branch conv3x3 - norm - relu - conv3x3 - norm (the merge's ReLU is the main stem's).

    Without normalisation it is the tau paper's no-BN branch ("Stability and Convergence Theory for
    Learning ResNet: A Full Characterization", Sec. 5.2: learnable scalar biases after Fixup, Zhang et al.
    2019, Sec. 3), placed as its official code (dayu11/tau-ResNet, BasicBlock_NoBN) places them: four
    scalars, 0 at init, around each convolution,

        f(x) = conv2(relu(conv1(x + b_1a) + b_1b) + b_2a) + b_2b

    so at b = 0 it is conv2(relu(conv1(x))). The biases have the role "scale": they learn at the scalar
    learning rate (explorer.optim), a tenth, as in that section.
    """

    BIASES = ("bias1a", "bias1b", "bias2a", "bias2b")

    def __init__(self, c_in: int, c_out: int, norm: str, stride: int = 1):
        super().__init__()
        self.conv1 = Conv(c_in, c_out, 3, "stem.in", stride)
        self.norm1 = norm2d(norm, c_out)
        self.conv2 = Conv(c_out, c_out, 3, "stem.out")
        self.norm2 = norm2d(norm, c_out)
        self.scalar_biases = norm == "none"
        if self.scalar_biases:
            for name in self.BIASES:
                setattr(self, name, nn.Parameter(torch.zeros(())))
            self.ROLES = dict.fromkeys(self.BIASES, "scale")
            self.register_load_state_dict_pre_hook(_zero_missing_biases)

    @property
    def end_norm(self) -> nn.Module | None:
        """The normalisation closing the branch (zero-gamma sets its scale to 0), if any."""
        return self.norm2 if isinstance(self.norm2, nn.BatchNorm2d) else None

    def forward(self, x):
        if self.scalar_biases:
            return self.conv2(torch.relu(self.conv1(x + self.bias1a) + self.bias1b) + self.bias2a) + self.bias2b
        return self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))


def _zero_missing_biases(block: BasicBlock, state_dict: dict, prefix: str, *rest) -> None:
    """A no-BN block's state without its four biases (a branch without them) loads them as 0, the same function."""
    if not any(prefix + name in state_dict for name in block.BIASES):
        state_dict.update({prefix + name: torch.zeros(()) for name in block.BIASES})


class Transition(nn.Module):
    """relu(shortcut(x) + scale(f(x))) where f halves the resolution and changes the channel count.

    scale: the tau topology's branch scaling (Chain.scale_branch), or None for none.
    """

    def __init__(self, c_in: int, c_out: int, norm: str, shortcut: str, scale=None):
        super().__init__()
        self.branch = BasicBlock(c_in, c_out, norm, stride=2)
        self.extra_channels = c_out - c_in
        self.shortcut = shortcut
        if shortcut == "projection":
            self.project = nn.Sequential(Conv(c_in, c_out, 1, "main", stride=2), norm2d(norm, c_out))
        elif shortcut == "pool-bn":
            self.project = nn.Sequential(nn.AvgPool2d(1, stride=2), norm2d(norm, c_in))
        else:
            self.project = None
        self.scale = scale  # a bound method of a topology registered elsewhere (not a submodule)

    def forward(self, x):
        if self.shortcut == "projection":
            skip = self.project(x)
        else:  # option A of He et al.: subsample (pool-bn: and normalise), then pad the new channels with zeros
            sub = x[:, :, ::2, ::2] if self.project is None else self.project(x)
            skip = nn.functional.pad(sub, (0, 0, 0, 0, 0, self.extra_channels))
        y = self.branch(x)
        return torch.relu(skip + (y if self.scale is None else self.scale(y)))


class Stages(nn.Sequential):
    """Stage stacks and the transitions between them; `stacks` lists the Stacks (one per stage)."""

    @property
    def stacks(self) -> list[Stack]:
        return [m for m in self if isinstance(m, Stack)]


def _resnet_check(spec, data_dims):
    p = spec.model.params
    if len(data_dims.input_shape) != 3:
        raise SpecError("data.name", f"resnet-cifar needs image data (C, H, W), got inputs of shape {data_dims.input_shape}; "
                                     "use an image dataset such as digits-images or shapes")
    if (p["depth"] - 2) % 6 or p["depth"] < 8:
        raise SpecError("model.depth", f"a CIFAR ResNet has depth 6n+2 (8, 14, 20, 32, 56, 110, ...), got {p['depth']}; "
                                       f"set model.depth={max(8, (p['depth'] - 2) // 6 * 6 + 2)}")
    _, height, width = data_dims.input_shape  # two stride-2 stages: the last one's maps are ceil(side / 4) wide
    check_batch_norm(spec, positions=-(-height // 4) * -(-width // 4))


def resnet_blocks(p, topology=None) -> int:
    """Blocks of the smallest stage stack (what a per-stage topology such as i:j must fit)."""
    n = (p["depth"] - 2) // 6
    return max(n - 1, 0)


def _pixels(params: dict, shape: tuple[int, ...]) -> int:
    """Positions a convolution computes on per image: its full-resolution pixels (later stages have fewer, so this
    bounds them); 1 for inputs that are not images (the model's check refuses those)."""
    return shape[1] * shape[2] if len(shape) == 3 else 1


@MODELS.register(
    "resnet-cifar",
    "CIFAR ResNet-(6n+2): 3 stages of n basic blocks, the topology inside each stage",
    (
        Param("norm", "choice", "batchnorm", "normalisation in each branch (none: the tau paper's no-BN branch "
                                             "with four learnable scalar biases)", choices=("batchnorm", "none")),
        Param("shortcut", "choice", "projection", "shortcut of the resolution-halving blocks: 1x1 projection, "
                                                   "zero-padding (He et al. option A), or pool-bn (the tau paper's code: "
                                                   "stride-2 average pool, BatchNorm, zero channels)",
              choices=("projection", "pad", "pool-bn")),
    ),
    defaults={"depth": 20, "width": 16},
    n_blocks=resnet_blocks, positions=_pixels, check=_resnet_check,
    example={"data": {"name": "digits-images"}, "model": {"depth": 20, "width": 2}},
)
def resnet_cifar(depth, width, norm, shortcut, topology, data_dims):
    n = (depth - 2) // 6
    channels = (width, 2 * width, 4 * width)
    # one shared instance (so a learnable tau is one scalar), else one topology per stage
    shared = build_topology(topology, 3 * n, width, 3 * n) if is_shareable(topology) else None
    parts = []
    for stage, c in enumerate(channels):
        if stage:
            parts.append(Transition(channels[stage - 1], c, norm, shortcut,
                                    getattr(shared, "scale_branch", None)))
        count = n if stage == 0 else n - 1
        blocks = [BasicBlock(c, c, norm) for _ in range(count)]
        parts.append(Stack(blocks, shared or build_topology(topology, count, c, 3 * n), activation="relu"))
    embed = nn.Sequential(Conv(data_dims.input_shape[0], width, 3, "embed"), norm2d(norm, width), nn.ReLU())
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), Linear(channels[-1], data_dims.output_dim, "head", bias=True))
    return Network(embed, Stages(*parts), head)


def _allconv_check(spec, data_dims):
    if len(data_dims.input_shape) != 3:
        raise SpecError("data.name", f"allconv needs image data (C, H, W), got inputs of shape {data_dims.input_shape}; "
                                     "use an image dataset such as digits-images or shapes")
    if spec.model.depth != 9:
        raise SpecError("model.depth", "All-CNN has exactly 9 convolutions (IDInit Table 9); set model.depth=9")
    if TOPOLOGIES[spec.topology.name].info.residual:
        raise SpecError("topology.name", "allconv is the non-residual baseline and has no residual stream; "
                                         "use topology.name=none (or model resnet-cifar for a residual CNN)")


@MODELS.register(
    "allconv",
    "All-CNN-C (IDInit Table 9): nine convolutions, no residual connection, global average pooling",
    defaults={"depth": 9, "width": 96},
    n_blocks=lambda p, topology: 0, positions=_pixels, check=_allconv_check,
    example={"data": {"name": "digits-images"}, "model": {"depth": 9, "width": 2}},
)
def allconv(depth, width, topology, data_dims):
    """3x3 convs (w, w, w stride 2, 2w, 2w, 2w stride 2, 2w), 1x1 convs (2w, classes), ReLUs, average pool.

    Table 9 gives the windows and channels; the strides that replace pooling follow
    Springenberg et al.'s All-CNN-C. It has no residual stream, so its stack is empty.
    """
    c_in, w = data_dims.input_shape[0], width
    plan = [(c_in, w, 3, 1), (w, w, 3, 1), (w, w, 3, 2), (w, 2 * w, 3, 1), (2 * w, 2 * w, 3, 1), (2 * w, 2 * w, 3, 2),
            (2 * w, 2 * w, 3, 1), (2 * w, 2 * w, 1, 1)]
    layers = []
    for index, (a, b, k, stride) in enumerate(plan):
        layers += [Conv(a, b, k, "embed" if index == 0 else "main", stride), nn.ReLU()]
    head = nn.Sequential(Conv(2 * w, data_dims.output_dim, 1, "head"), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return Network(nn.Sequential(*layers), Stages(), head)
