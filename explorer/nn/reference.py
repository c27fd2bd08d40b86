"""What each model computes, written out top to bottom with plain torch ops (read this file first).

The models in explorer.nn are built for speed and for probes: a forward pass there crosses the
blocks, the Stack, the Topology and its fused Mixer. Here the same forward pass is written the
way nanoGPT's model.py writes one, reading the built model's own parameters by attribute, so

    model, data = explorer.build(spec)
    reference.forward(spec, model, x)  # equals model(x), and so do the gradients

A model forward (one per registered model, `@reference_model`) embeds the input, hands the stack's
residual branches f_1..f_L to the topology's mixing and applies the head. A mixing (one per registered
topology, `@reference_mixing`) says how block j's input is made from the outputs before it:

    mixing(topology, x0, blocks, acts) -> the stack's output

with `topology` the built topology module (its coefficients are read by attribute), `blocks[j - 1]`
the function f_j (block j's residual branch) and `acts[j - 1]` the main stem's operation after block j's
merge (identity, ReLU, or a post-norm). A topology defined in its own file registers its mixing there
with the same decorator; this module imports nothing from explorer, so any file can import it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

MIXINGS: dict[str, Callable] = {}  # topology name -> mixing(topology, x0, blocks, acts)
FORWARDS: dict[str, Callable] = {}  # model name -> forward(model, x, topology name)


def _registrar(table: dict[str, Callable], what: str) -> Callable:
    """A decorator factory: `@decorator(*names)` registers a function in `table` as the reference of `names`."""

    def decorator(*names: str) -> Callable:
        def add(function: Callable) -> Callable:
            for name in names:
                table[name] = function
            return function

        return add

    decorator.__doc__ = f"Decorator: register a function as the reference {what} of `names`."
    return decorator


reference_mixing = _registrar(MIXINGS, "mixing of the topologies")
reference_model = _registrar(FORWARDS, "forward of the models")


def mixing_of(topology: str) -> Callable:
    """The registered mixing of a topology, or a LookupError saying where to add one."""
    if topology not in MIXINGS:
        raise LookupError(f"topology {topology!r} has no reference mixing; write one in the topology's own file "
                          f"with @reference_mixing({topology!r}) from explorer.nn.reference")
    return MIXINGS[topology]


def forward_of(model: str) -> Callable:
    """The registered reference forward of a model, or a LookupError saying where to add one."""
    if model not in FORWARDS:
        raise LookupError(f"model {model!r} has no reference forward; write one in the model's own file "
                          f"with @reference_model({model!r}) from explorer.nn.reference")
    return FORWARDS[model]


def forward(spec, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """model(x) recomputed from the model's parameters by the reference of spec's model and topology."""
    return forward_of(spec.model.name)(model, x, spec.topology.name)


def sources(model: str, topology: str) -> list[str]:
    """The source text of a model's reference forward and of its topology's mixing (the app shows them)."""
    return [inspect.getsource(forward_of(model)), inspect.getsource(mixing_of(topology))]


# --------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------
def dense(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x W^T + b (weights are stored (out, in), as nn.Linear's)."""
    y = x @ layer.weight.T
    return y if layer.bias is None else y + layer.bias


def conv(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A bias-free k x k convolution with 'same' padding."""
    return F.conv2d(x, layer.weight, stride=layer.stride, padding=layer.padding)


def batch_norm(bn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """BatchNorm (Ioffe and Szegedy 2015, Algorithm 1) over every axis but the features (axis 1):
    the batch's statistics while training, the running averages in eval; nn.Identity is no norm."""
    if isinstance(bn, nn.Identity):
        return x
    axes = [0] + list(range(2, x.dim()))
    if bn.training:
        mean, var = x.mean(axes), x.var(axes, unbiased=False)
    else:
        mean, var = bn.running_mean, bn.running_var
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return (x - mean.view(shape)) / torch.sqrt(var.view(shape) + bn.eps) * bn.weight.view(shape) + bn.bias.view(shape)


def norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A block's normalisation over the last (feature) axis: LayerNorm (Ba et al. 2016), RMSNorm
    (Zhang and Sennrich 2019), BatchNorm, or nothing (`module.kind` says which)."""
    inner = module.norm
    if module.kind == "layernorm":
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + inner.eps) * inner.weight + inner.bias
    if module.kind == "rmsnorm":
        eps = torch.finfo(x.dtype).eps if inner.eps is None else inner.eps
        return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * inner.weight
    if module.kind == "batchnorm":
        return batch_norm(inner, x)
    return x


def mlp_branch(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The pre-activation MLP branch f(x) = V act(W norm(x)) (+ biases); act is ReLU in the MLPs, GELU in
    the Transformers (`block.act`)."""
    return dense(block.outer, block.act(dense(block.inner, norm(block.norm, x))))


def rotate(rotary: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Rotary positions (RoFormer, Su et al. 2021): rotate feature pairs (x_i, x_{i+d/2}) of position t by the
    angle t theta_i, with the model's table of cos(t theta_i) and sin(t theta_i)."""
    t = x.shape[-2]
    cos, sin = rotary.cos[:t].to(x.dtype), rotary.sin[:t].to(x.dtype)
    half = cos.shape[-1]
    a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)


def attention(attn: nn.Module, x: torch.Tensor, k_in: torch.Tensor | None = None,
              v_in: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head self-attention (Vaswani et al. 2017, Eq. 1): softmax(q k^T / sqrt(d_head)) v per head,
    heads concatenated and projected by W_O. Queries come from x; keys and values from k_in and v_in
    where DCA gives them (each through its own norm), else from x too."""
    k_in = x if k_in is None else k_in
    v_in = x if v_in is None else v_in
    q = norm(attn.norm, x) @ attn.wq.T
    k = norm(attn.norm_k, k_in) @ attn.wk.T
    v = norm(attn.norm_v, v_in) @ attn.wv.T
    b, t, d = q.shape
    q, k, v = (z.view(b, t, attn.heads, d // attn.heads).transpose(1, 2) for z in (q, k, v))  # (b, heads, t, d_head)
    if attn.rotary is not None:
        q, k = rotate(attn.rotary, q), rotate(attn.rotary, k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // attn.heads)
    if attn.causal:  # position s sees positions <= s only
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return out @ attn.wo.T


def transformer_branch(block: nn.Module, x: torch.Tensor, k_in=None, v_in=None) -> torch.Tensor:
    """What a Transformer block adds to its input x (the residual branch the topology sees).

    Whole block, pre-norm: a = attn(x), f(x) = a + mlp(x + a) (the attention-to-MLP skip stays);
    post-norm: h = norm(x + a), f(x) = h + mlp(h) - x. At module level the block is one sub-block:
    attn(x) or mlp(x).
    """
    if hasattr(block, "attn"):
        a = attention(block.attn, x, k_in, v_in)
        if block.inner_norm is None:
            return a + mlp_branch(block.mlp, x + a)
        h = norm(block.inner_norm, x + a)
        return h + mlp_branch(block.mlp, h) - x
    if hasattr(block, "wq"):
        return attention(block, x)
    return mlp_branch(block, x)


def basic_block(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The ResNet branch conv3x3 - BN - ReLU - conv3x3 - BN (He et al. 2016, Figure 2; the ReLU after the
    addition is the main stem's). Without BN, the tau paper's no-BN branch (Sec. 5.2, as its official code
    places the four scalar biases): conv2(relu(conv1(x + b_1a) + b_1b) + b_2a) + b_2b."""
    if block.scalar_biases:
        h = torch.relu(conv(block.conv1, x + block.bias1a) + block.bias1b)
        return conv(block.conv2, h + block.bias2a) + block.bias2b
    return batch_norm(block.norm2, conv(block.conv2, torch.relu(batch_norm(block.norm1, conv(block.conv1, x)))))


# --------------------------------------------------------------------------------------
# the stack: branches, main stem, mixing
# --------------------------------------------------------------------------------------
def branches(stack: nn.Module, branch: Callable) -> list[Callable]:
    """f_j for each block of the stack: branch(block, *inputs), times the block's gate alpha_j where the init
    added one (ReZero, Bachlechner et al. 2020: x + alpha f(x) with alpha = 0 at init; SkipInit)."""

    def one(block):
        if hasattr(block, "alpha"):
            return lambda *inputs: block.alpha * branch(block.block, *inputs)
        return lambda *inputs: branch(block, *inputs)

    return [one(block) for block in stack.blocks]


def stem(stack: nn.Module) -> list[Callable]:
    """The main stem's operation after each block's merge: the post-norm of that block, ReLU, or nothing."""
    if stack.post_norms is not None:
        return [lambda x, n=n: norm(n, x) for n in stack.post_norms]
    act = torch.relu if stack.activation == "relu" else (lambda x: x)
    return [act] * len(stack.blocks)


def run_stack(topology: str, stack: nn.Module, x0: torch.Tensor, branch: Callable) -> torch.Tensor:
    """The stack's output: the mixing of `topology` over the stack's branches and main stem."""
    return mixing_of(topology)(stack.topology, x0, branches(stack, branch), stem(stack))


# --------------------------------------------------------------------------------------
# mixings, one per topology
# --------------------------------------------------------------------------------------
@reference_mixing("none", "skipless")
def plain(topology, x0, blocks, acts):
    """No residual connection: x_j = act_j(f_j(x_{j-1})) (the plain network; skipless: Cutting the Skip,
    where the Transformer's blocks are its attention and MLP sub-blocks)."""
    x = x0
    for f, act in zip(blocks, acts):
        x = act(f(x))
    return x


@reference_mixing("cascaded")
def cascaded(topology, x0, blocks, acts):
    """The standard residual x_j = act_j(x_{j-1} + f_j(x_{j-1})) (He et al. 2016, Eq. 1; ANCRe Sec. 3.1's
    cascaded baseline); unrolled, block j reads x_0 + y_1 + ... + y_{j-1}."""
    x = x0
    for f, act in zip(blocks, acts):
        x = act(x + f(x))
    return x


@reference_mixing("tau")
def tau(topology, x0, blocks, acts):
    """The scaled residual h_l = act(h_{l-1} + tau f_l(h_{l-1})) (tau paper, Sec. 2, act = ReLU on its
    MLP-ResNet), or with placement "after", x <- act(tau (x + f(x))) (its Appendix H Transformer)."""
    s = topology.tau_value  # the learnable scalar, or the number the rule gave
    x = x0
    for f, act in zip(blocks, acts):
        x = act(s * (x + f(x))) if topology.after else act(x + s * f(x))
    return x


@reference_mixing("shortcuts")
def shortcuts(topology, x0, blocks, acts):
    """Fixed shortcuts i:j between layer outputs: x_j = act_j(f_j(x_{j-1}) + sum_{i:j in S} x_i), no other
    skip (ANCRe Sec. 3.1-3.2: 0:2 on three linear layers gives W_3 (W_2 W_1 + I) X)."""
    xs = [x0]
    for j, (f, act) in enumerate(zip(blocks, acts), start=1):
        y = f(xs[-1])
        for k, (i, jj) in enumerate(topology.pairs):
            if jj == j:
                y = y + topology.weights[k] * xs[i]
        xs.append(act(y))
    return xs[-1]


@reference_mixing("ancre")
def ancre(topology, x0, blocks, acts):
    """ANCRe (Sec. 4.1, Eq. 6-8): x_j = act_j(f_j(x_{j-1}) + sum_{i<j} p_ij x_i) with p = softmax(c / T) over
    the sources i of each j (ingoing) or the destinations j of each i (outgoing), or exp(c / T) unnormalised.

    On whole Transformer layers (Sec. 5 and the official code, `layer_residual`) each layer keeps its own
    residual and the shortcut sum comes on top: h_j = h_{j-1} + f_j(h_{j-1}) + sum_{i<j} p_ij h_i.
    """
    c = topology.logits / topology.temperature  # c[i, j]: source i -> destination j
    n = c.shape[0]
    earlier = torch.ones(n, n, dtype=torch.bool, device=c.device).triu(1)  # earlier[i, j]: i < j
    if topology.normalization == "none":
        p = torch.exp(c) * earlier
    else:
        over = 0 if topology.normalization == "ingoing" else 1
        p = torch.softmax(c.masked_fill(~earlier, float("-inf")), dim=over).nan_to_num(0.0) * earlier
    xs = [x0]
    for j, (f, act) in enumerate(zip(blocks, acts), start=1):
        y = f(xs[-1]) + sum(p[i, j] * xs[i] for i in range(j))
        xs.append(act(xs[-1] + y if topology.layer_residual else y))
    return xs[-1]


def per_feature(w: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-feature vector shaped to multiply `like` feature-wise: channels of images (B, C, H, W), else
    the last axis."""
    return w.view(-1, 1, 1) if like.dim() == 4 else w


def first_and_last_k(k: int, outputs: list[torch.Tensor], b: torch.Tensor):
    """The sources G_t and their weight slots. k = 0: all of [x_0, d_1, ..., d_{t-1}], slot i for source i.
    k > 0 (DCA Sec. 3.1, "Reducing memory and computation"): x_0 (slot 0), the sum of the middle outputs
    (slot 1) and the last k outputs (the last slots of 2..k+1, oldest first)."""
    if k == 0:
        return outputs, list(b[:len(outputs)])
    x0, rest = outputs[0], outputs[1:]
    middle, last = rest[:-k] if len(rest) > k else [], rest[-k:]
    sources = [x0] + ([sum(middle)] if middle else []) + last
    slots = [b[0]] + ([b[1]] if middle else []) + list(b[2 + k - len(last):2 + k])
    return sources, slots


def rms_normalized(g: torch.Tensor) -> torch.Tensor:
    """g / sqrt(mean(g^2) + eps) over the features (channels of images, else the last axis), eps the dtype's
    machine epsilon: RMSNorm (Zhang and Sennrich 2019) with its scale at 1."""
    axis = 1 if g.dim() == 4 else -1
    return g / torch.sqrt(g.square().mean(axis, keepdim=True) + torch.finfo(g.dtype).eps)


def grn_mix(sources, weights, gate=None, source_norm: str = "none") -> torch.Tensor:
    """sum_i G_i * (b_i + relu(w^T G_i)): the generalized residual mix (DCA Sec. 3.1). b_i is a scalar
    (GRN-v1) or per-feature (v2, v3); the gate w (v3, DCA) gives one input-dependent weight per source and
    example (and position), shared across features. source_norm "rms": the gate reads each source
    RMS-normalised, relu(w^T rms(G_i)) (the unofficial lucidrains/deep-cross-attention), the mix G_i itself."""
    total = 0
    for g, b in zip(sources, weights):
        weight = per_feature(b, g)
        if gate is not None:
            seen = rms_normalized(g) if source_norm == "rms" else g
            weight = weight + torch.relu((seen * per_feature(gate, g)).sum(1 if g.dim() == 4 else -1, keepdim=True))
        total = total + g * weight
    return total


@reference_mixing("grn-v1", "grn-v2", "grn-v3")
def grn(topology, x0, blocks, acts):
    """Generalized residual networks GRN-v1/v2/v3 (DCA Sec. 3.1): block t reads
    input_t = grn_mix(G_t, b_t[, w_t]) of G_t = [x_0, d_1, ..., d_{t-1}], where d_t = act_t(input_t + f_t(input_t))
    - input_t is what block t added to the stream (f_t's output for a linear stem); the output is the mix of
    G_{L+1}. With all b = 1 and w = 0 (the init) this is the standard residual network."""
    outputs = [x0]

    def mix(t):  # destination t + 1 (t = L: the output) reads weight row t
        sources, slots = first_and_last_k(topology.k, outputs, topology.weights[t])
        if topology.version != 3:
            return grn_mix(sources, slots)
        return grn_mix(sources, slots, topology.gates[t], topology.source_norm)

    for t, (f, act) in enumerate(zip(blocks, acts)):
        inp = mix(t)
        outputs.append(act(inp + f(inp)) - inp)
    return mix(len(blocks))


@reference_mixing("dca")
def dca(topology, x0, blocks, acts):
    """DeepCrossAttention (DCA Sec. 3.2, Figure 4): three GRN-v3 mixes of G_t give block t's query, key and
    value inputs q_t, k_t, v_t; the block runs on them and adds d_t = act_t(q_t + f_t(q_t, k_t, v_t)) - q_t;
    the output is one more GRN-v3 mix of G_{L+1}."""
    outputs = [x0]
    for t, (f, act) in enumerate(zip(blocks, acts)):
        q, k, v = (grn_mix(*first_and_last_k(topology.k, outputs, topology.weights[m, t]), topology.gates[m, t],
                           topology.source_norm) for m in range(3))
        outputs.append(act(q + f(q, k, v)) - q)
    return grn_mix(*first_and_last_k(topology.k, outputs, topology.out_weights), topology.out_gates,
                   topology.source_norm)


# --------------------------------------------------------------------------------------
# models, one per registered model
# --------------------------------------------------------------------------------------
def unflattened(embed: nn.Module) -> nn.Module:
    """The embedding layer without the Flatten that vector models put before it for images."""
    if isinstance(embed, nn.Sequential) and isinstance(embed[0], nn.Flatten):
        return embed[1]
    return embed


@reference_model("linear")
def linear(model, x, topology):
    """The deep linear network of ANCRe's case study (Sec. 3.1): y_j = W_j x_{j-1}, no bias, no embedding or
    head; the topology is all there is (cascaded: x_j = (W_j + I) x_{j-1})."""
    return run_stack(topology, model.stack, x, lambda block, h: h @ block.weight.T)


@reference_model("lowrank")
def lowrank(model, x, topology):
    """The low-rank linear residual network of DCA Figure 1: layer t is V_t = U_t W_t of rank r."""
    return run_stack(topology, model.stack, x, lambda block, h: (h @ block.down.T) @ block.up.T)


@reference_model("mlp-resnet")
def mlp_resnet(model, x, topology):
    """The tau paper's ResNet (Sec. 2): h_0 = relu(A x), L-1 residual layers h_l = relu(h_{l-1} + tau W_l h_{l-1})
    (the topology's mixing with a ReLU stem), h_L = relu(W_L h_{L-1}), output B h_L."""
    h = torch.relu(dense(unflattened(model.embed)[0], x.flatten(1)))
    h = run_stack(topology, model.stack, h, lambda block, z: dense(block, z))
    last, out = model.head
    return dense(out, torch.relu(dense(last[0], h)))


@reference_model("mlp")
def mlp(model, x, topology):
    """A residual MLP: x_0 = E x (+ b), the topology over pre-activation branches f(x) = V relu(W norm(x)) (cascaded:
    x_{l+1} = x_l + F(x_l), Eq. 2 of He et al. 2016, "Identity Mappings in Deep Residual Networks"), then a norm
    and a linear head."""
    h = dense(unflattened(model.embed), x.flatten(1))
    h = run_stack(topology, model.stack, h, mlp_branch)
    final_norm, head = model.head
    return dense(head, norm(final_norm, h))


@reference_model("gpt")
def gpt(model, idx, topology):
    """A character GPT as nanoGPT writes it: token vectors plus learned positions (or rotary ones inside the
    attention), the Transformer blocks under the topology (pre-norm: GPT-2, Radford et al. 2019, Sec. 2.3;
    or post-norm), a final norm (pre-norm only) and the linear head to next-token logits."""
    emb = model.embed
    x = emb.weight.T[idx]  # (b, t, width); the table is stored (width, vocab)
    if emb.pos is not None:
        x = x + emb.pos[:idx.shape[1]]
    x = run_stack(topology, model.stack, x, transformer_branch)
    final_norm, head = model.head
    return dense(head, norm(final_norm, x))


@reference_model("vit")
def vit(model, images, topology):
    """The Vision Transformer (Dosovitskiy et al. 2021, Eq. 1-4): z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos
    over non-overlapping p x p patches, the blocks under the topology, then the class token (or the mean of
    the patch tokens), a norm and the linear classifier."""
    emb, p = model.embed, model.embed.patch
    b, c, h, w = images.shape
    patches = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
    x = dense(emb.proj, patches)
    if emb.cls is not None:
        x = torch.cat([emb.cls.expand(b, -1, -1), x], dim=1)
    x = run_stack(topology, model.stack, x + emb.pos, transformer_branch)
    pool, final_norm, head = model.head
    x = x[:, 0] if pool.mode == "cls" else x.mean(1)
    return dense(head, norm(final_norm, x))


@reference_model("resnet-cifar")
def resnet_cifar(model, images, topology):
    """The CIFAR ResNet-(6n+2) (He et al. 2016, Sec. 4.2): conv - BN - ReLU, three stages of basic blocks
    (each stage's blocks under the topology, x_j = relu(x_{j-1} + f_j(x_{j-1})) when cascaded), a transition
    block between stages that halves the resolution, global average pooling and a linear classifier.

    A transition computes relu(shortcut(x) + s f(x)); its shortcut is a 1x1 projection with BN, subsampling
    with zero-padded channels (option A), or subsampling, BN and zero channels (pool-bn, the tau paper's
    code). s is tau under the tau topology with the branch placement (that code scales every block), else 1.
    """
    first, bn, _ = model.embed
    x = torch.relu(batch_norm(bn, conv(first, images)))
    shared = model.stack.stacks[0].topology  # tau is shareable: one instance (one scalar) for every stage
    for part in model.stack:
        if hasattr(part, "topology"):  # a stage: its blocks under the topology
            x = run_stack(topology, part, x, basic_block)
            continue
        if part.shortcut == "projection":
            skip = batch_norm(part.project[1], conv(part.project[0], x))
        else:
            sub = x[:, :, ::2, ::2]
            if part.shortcut == "pool-bn":
                sub = batch_norm(part.project[1], sub)
            skip = F.pad(sub, (0, 0, 0, 0, 0, part.extra_channels))
        y = basic_block(part.branch, x)
        if topology == "tau" and not shared.after:
            y = shared.tau_value * y
        x = torch.relu(skip + y)
    _, _, head = model.head
    return dense(head, x.mean((2, 3)))


@reference_model("allconv")
def allconv(model, images, topology):
    """All-CNN-C (Springenberg et al. 2015; IDInit Table 9): eight convolutions each followed by ReLU (stride 2
    replaces pooling), a 1x1 convolution to the classes and global average pooling; no residual stream."""
    x = images
    for layer in model.embed:
        if not isinstance(layer, nn.ReLU):
            x = torch.relu(conv(layer, x))
    classes, _, _ = model.head
    return conv(classes, x).mean((2, 3))
