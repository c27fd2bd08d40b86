"""Transformers: one block, reused by a character-level GPT and a ViT classifier.

A block is multi-head self-attention followed by an MLP, pre-norm or post-norm, with
LayerNorm, RMSNorm or no normalisation. The topology acts at one of two levels:

* block level (default; ANCRe's MHSA-only choice, Table 1): the Stack's blocks are whole
  Transformer blocks, f(x) = a + mlp(x + a) with a = attn(x) (pre-norm), i.e. what the block
  adds to its input; the attention-to-MLP skip inside the block stays. Each topology then
  follows its own paper's definition of a layer:
  - `cascaded`, `tau`: x_j = x_{j-1} + f(x_{j-1}), the standard Transformer (scaled for tau);
  - `ancre`: the official form h_j = layer_j(h_{j-1}) + sum_{i<j} p_ij h_i with
    layer_j(h) = h + f(h) (ANCRe Sec. 5 and its official code): the layer keeps its own
    residual and the shortcut sum comes on top (see topology.ANCRe, `layer_residual`);
  - `grn-v*`, `dca`: the mixes read the stack [x_0, f_1, ..., f_{t-1}] of what each block
    added (DCA Sec. 3.1, Eq. of g_t), and under `dca` (whose metadata declares
    `separate_qkv_inputs`) each block takes separate query, key and value inputs (Sec. 3.2,
    Figure 4), so the block's input is "included in the inputs of both the attention and the
    feed forward module" and not added to its output;
  - `none`, `shortcuts`: x_j = f(x_{j-1}) (+ the listed shortcuts): only the inner skip stays;
* module level: the Stack's blocks are the attention and MLP sub-blocks, so every mix is
  placed before each attention and before each MLP (2 x depth blocks). `skipless` always
  runs here: no residual on either sub-block (Cutting the Skip).

Post-norm puts a normalisation after each residual addition; it is the main stem's
operation after each merge (`Stack.post_norms`), so every topology composes with it.
With `norm=none` and the tau topology's `placement=after` this is the tau paper's
Transformer of Appendix H: x <- tau (x + f(x)) after each addition, no normalisation.

Parameter roles: "embed" (token table, stored as (width, vocab) so its fan-in is the one-hot
input, or the patch projection), "pos" (learned positions and the class token),
"attn.q/k/v/o", "stem.in"/"stem.out" (the MLP, as in every residual MLP branch), "norm", "head".
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from explorer.nn.blocks import Linear, MLPBlock, Norm
from explorer.nn.base import MODELS, Network, Stack
from explorer.registries import Param, SpecError
from explorer.topology import TOPOLOGIES, build_topology


class Rotary(nn.Module):
    """Rotary position embedding (Su et al.): rotate each head's (q, k) feature pairs by position."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10_000.0):
        super().__init__()
        freqs = base ** (-torch.arange(0, head_dim // 2, dtype=torch.float32) * 2 / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):  # x: (B, heads, T, head_dim)
        t = x.shape[-2]
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        half = cos.shape[-1]
        a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)


class Attention(nn.Module):
    """Multi-head self-attention sub-block attn(norm(x)); q, k, v may come from different inputs (DCA).

    Weights are stored like nn.Linear's, (out, in), so y = x W^T. In the papers' row
    convention W_Q = wq^T, and so on; W_V W_O is then wv^T wo^T. With `separate_inputs`
    (DCA, whose three GRN-v3 mixes differ) the query, key and value inputs each get their own
    normalisation: norm(q_in), norm_k(k_in), norm_v(v_in) (pre-norm; as in the public DCA GPT).
    """

    ROLES = {"wq": "attn.q", "wk": "attn.k", "wv": "attn.v", "wo": "attn.o"}

    def __init__(self, width: int, heads: int, norm: str, causal: bool, rotary: Rotary | None = None,
                 separate_inputs: bool = False):
        super().__init__()
        self.width, self.heads, self.head_dim = width, heads, width // heads
        self.causal = causal
        self.norm = Norm(norm, width)
        self.norm_k = Norm(norm, width) if separate_inputs else self.norm
        self.norm_v = Norm(norm, width) if separate_inputs else self.norm
        self.rotary = rotary
        for name in ("wq", "wk", "wv", "wo"):
            setattr(self, name, nn.Parameter(torch.empty(width, width)))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def project(self, x, k_in=None, v_in=None):
        """Queries, keys and values per head, (B, heads, T, head_dim) each, positions applied."""
        h = self.norm(x)
        if k_in is None and v_in is None:
            q, k, v = F.linear(h, torch.cat([self.wq, self.wk, self.wv])).split(self.width, dim=-1)
        else:
            q = F.linear(h, self.wq)
            k = F.linear(self.norm_k(x if k_in is None else k_in), self.wk)
            v = F.linear(self.norm_v(x if v_in is None else v_in), self.wv)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        return q, k, v

    def forward(self, x, k_in=None, v_in=None):
        q, k, v = self.project(x, k_in, v_in)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        b, _, n, _ = out.shape
        return F.linear(out.transpose(1, 2).reshape(b, n, self.width), self.wo)

    @torch.no_grad()
    def attention_map(self, x, k_in=None, v_in=None) -> torch.Tensor:
        """softmax(q k^T / sqrt(head_dim)) per head, (B, heads, T, T) (for probes; training uses fused attention)."""
        q, k, _ = self.project(x, k_in, v_in)
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if self.causal:
            n = logits.shape[-1]
            logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return logits.softmax(-1)


class TransformerBlock(nn.Module):
    """A whole block as one residual branch: returns what the block adds to its input x.

    Pre-norm: a = attn(x), out = x + a + mlp(x + a), so f(x) = a + mlp(x + a).
    Post-norm: h = norm(x + attn(x)), out = h + mlp(h) (the stem's norm follows the outer
    merge), so f(x) = h + mlp(h) - x. q_in = x; k_in and v_in differ from it under DCA.
    """

    def __init__(self, attn: Attention, mlp: MLPBlock, inner_norm: Norm | None):
        super().__init__()
        self.attn = attn
        self.mlp = mlp
        self.inner_norm = inner_norm

    def forward(self, x, k_in=None, v_in=None):
        a = self.attn(x, k_in, v_in)
        if self.inner_norm is None:
            return a + self.mlp(x + a)
        h = self.inner_norm(x + a)
        return h + self.mlp(h) - x


class TokenEmbedding(nn.Module):
    """Token table (width, vocab) plus learned positions (unless positions are rotary)."""

    def __init__(self, vocab: int, width: int, context: int, learned_positions: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width, vocab))
        self.pos = nn.Parameter(torch.empty(context, width)) if learned_positions else None
        self.ROLES = {"weight": "embed", "pos": "pos"}

    def forward(self, idx):
        x = F.embedding(idx, self.weight.T)
        return x if self.pos is None else x + self.pos[: idx.shape[1]]


class PatchEmbedding(nn.Module):
    """Non-overlapping p x p patches projected to the width, learned positions, optional class token."""

    def __init__(self, channels: int, patch: int, width: int, n_patches: int, class_token: bool):
        super().__init__()
        self.patch = patch
        self.proj = Linear(channels * patch * patch, width, "embed", bias=True)
        self.cls = nn.Parameter(torch.empty(1, 1, width)) if class_token else None
        self.pos = nn.Parameter(torch.empty(n_patches + int(class_token), width))
        self.ROLES = {"cls": "pos", "pos": "pos"}

    def forward(self, images):
        p = self.patch
        b, c, h, w = images.shape
        patches = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)
        x = self.proj(patches)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1)
        return x + self.pos


class Pool(nn.Module):
    """The ViT's summary token: the class token or the mean of the patch tokens."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return x[:, 0] if self.mode == "cls" else x.mean(1)


def level(params: dict, topology) -> str:
    """Where the topology acts: "block" or "module" (skipless always at module level)."""
    return TOPOLOGIES[topology.name].info.level or params["level"]


def _blocks_and_stack(p: dict, topology, depth: int, causal: bool, rotary: Rotary | None) -> Stack:
    width, post = p["width"], p["placement"] == "post"
    sub_norm = "none" if post else p["norm"]  # pre-norm: inside the sub-blocks; post-norm: after the merges
    hidden = max(1, round(width * p["mlp_ratio"]))

    separate_inputs = TOPOLOGIES[topology.name].info.separate_qkv_inputs

    def attention():
        return Attention(width, p["heads"], sub_norm, causal, rotary, separate_inputs)

    def mlp():
        return MLPBlock(width, hidden, sub_norm, bias=False, activation="gelu")

    if level(p, topology) == "module":
        blocks = [m for _ in range(depth) for m in (attention(), mlp())]
    else:
        blocks = [TransformerBlock(attention(), mlp(), Norm(p["norm"], width) if post else None) for _ in range(depth)]
    post_norms = [Norm(p["norm"], width) for _ in blocks] if post else None
    whole_layers = level(p, topology) == "block"
    return Stack(blocks, build_topology(topology, len(blocks), width, len(blocks), whole_layers=whole_layers),
                 post_norms=post_norms)


def _n_blocks(p, topology) -> int:
    return p["depth"] * (2 if level(p, topology) == "module" else 1)


def _check_common(spec) -> None:
    p = spec.model.params
    if p["width"] % p["heads"]:
        raise SpecError("model.heads", f"the width {p['width']} must split evenly into {p['heads']} heads; "
                                       f"choose heads dividing {p['width']} (e.g. {math.gcd(p['width'], 4)})")
    if TOPOLOGIES[spec.topology.name].info.separate_qkv_inputs and level(p, spec.topology) == "module":
        raise SpecError("model.level", f"{spec.topology.name} mixes the query, key and value inputs of whole blocks; "
                                       "set model.level=block")


TRANSFORMER_PARAMS = (
    Param("heads", "int", 4, "attention heads (the width must be a multiple)", low=1, high=1024),
    Param("mlp_ratio", "float", 4.0, "MLP hidden width as a multiple of the width", low=0.25, high=16.0),
    Param("norm", "choice", "layernorm", "normalisation: layernorm, rmsnorm or none",
          choices=("layernorm", "rmsnorm", "none")),
    Param("placement", "choice", "pre", "pre-norm (inside each sub-block) or post-norm (after each residual addition)",
          choices=("pre", "post")),
    Param("level", "choice", "block", "where the topology acts: between whole blocks, or before every attention and "
                                      "MLP sub-block (module)", choices=("block", "module")),
)


def _gpt_check(spec, data_dims):
    if data_dims.task != "language-modeling":
        raise SpecError("data.name", f"gpt is a language model and needs token sequences (got {data_dims.task} data); "
                                     "use data.name=text")
    _check_common(spec)


@MODELS.register(
    "gpt",
    "decoder-only character-level Transformer (causal attention, learned or rotary positions)",
    TRANSFORMER_PARAMS + (Param("positions", "choice", "learned", "position encoding: learned vectors or rotary (RoPE)",
                                choices=("learned", "rotary")),),
    defaults={"depth": 4, "width": 64},
    n_blocks=_n_blocks, positions=lambda p, shape: shape[0], check=_gpt_check, transformer=True,
    example={"data": {"name": "text", "context": 6, "max_chars": 2000, "n_val": 8},
             "model": {"depth": 2, "width": 8, "heads": 2, "mlp_ratio": 2}},
)
def gpt(depth, width, heads, mlp_ratio, norm, placement, level, positions, topology, data_dims):
    p = dict(width=width, heads=heads, mlp_ratio=mlp_ratio, norm=norm, placement=placement, level=level)
    context = data_dims.input_shape[0]
    rotary = Rotary(width // heads, context) if positions == "rotary" else None
    embed = TokenEmbedding(data_dims.output_dim, width, context, learned_positions=rotary is None)
    head = nn.Sequential(Norm(norm if placement == "pre" else "none", width), Linear(width, data_dims.output_dim, "head"))
    return Network(embed, _blocks_and_stack(p, topology, depth, causal=True, rotary=rotary), head)


def _vit_check(spec, data_dims):
    p = spec.model.params
    if len(data_dims.input_shape) != 3 or data_dims.task != "classification":
        raise SpecError("data.name", f"vit classifies images (C, H, W), got inputs of shape {data_dims.input_shape} "
                                     f"({data_dims.task}); use an image dataset such as shapes or digits-images")
    _, h, w = data_dims.input_shape
    if h % p["patch"] or w % p["patch"]:
        raise SpecError("model.patch", f"patches of {p['patch']} pixels do not tile {h} x {w} images; "
                                       f"choose a patch size dividing {math.gcd(h, w)}")
    _check_common(spec)


@MODELS.register(
    "vit",
    "Vision Transformer classifier: patch embedding, class token or mean pooling",
    TRANSFORMER_PARAMS + (
        Param("patch", "int", 4, "patch size in pixels (must divide the image size)", low=1, high=256),
        Param("pooling", "choice", "cls", "class token or mean of the patch tokens", choices=("cls", "mean")),
    ),
    defaults={"depth": 4, "width": 64},
    n_blocks=_n_blocks, positions=lambda p, shape: (shape[-1] // p["patch"]) ** 2 + 1, check=_vit_check,
    transformer=True, example={"data": {"name": "digits-images"},
                               "model": {"depth": 2, "width": 8, "heads": 2, "mlp_ratio": 2, "patch": 4}},
)
def vit(depth, width, heads, mlp_ratio, norm, placement, level, patch, pooling, topology, data_dims):
    p = dict(width=width, heads=heads, mlp_ratio=mlp_ratio, norm=norm, placement=placement, level=level)
    channels, h, w = data_dims.input_shape
    embed = PatchEmbedding(channels, patch, width, (h // patch) * (w // patch), class_token=pooling == "cls")
    head = nn.Sequential(Pool(pooling), Norm(norm if placement == "pre" else "none", width),
                         Linear(width, data_dims.output_dim, "head", bias=True))
    return Network(embed, _blocks_and_stack(p, topology, depth, causal=False, rotary=None), head)
