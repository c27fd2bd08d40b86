"""Transformers: the block against a hand-written one, every topology and init on GPT and ViT, DCA at init,
the skipless init's algebra, the GPT beating its corpus's unigram entropy, and skipless training."""

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import explorer
from conftest import model_examples, section_id, topology_examples
from explorer.data import text
from explorer.init_schemes import mimetic_qk_, orthogonal_vo_, suo_
from explorer.nn.transformer import Attention, Rotary, TransformerBlock

TEXT = {"name": "text", "context": 16, "max_chars": 20_000}
IMAGES = {"name": "shapes", "size": 16, "n_train": 64, "n_val": 16}
GPT = {"name": "gpt", "depth": 3, "width": 16, "heads": 2, "mlp_ratio": 2.0}
VIT = {"name": "vit", "depth": 3, "width": 16, "heads": 2, "mlp_ratio": 2.0, "patch": 4}
SIZED = {GPT["name"]: (TEXT, GPT), VIT["name"]: (IMAGES, VIT)}  # (data, model) sections of these models
# every registered Transformer (ModelInfo.transformer), and every topology with each example it declares
TRANSFORMERS = list(model_examples(transformer=True))
TOPOLOGIES = topology_examples()


def spec(model="gpt", topology=None, init=None, steps=3, **model_params):
    """A spec of the model at the sizes above; a Transformer without them runs at its registered example's."""
    example = model_examples()[model]
    data, model_section = SIZED.get(model, (example["data"], example["model"]))
    return explorer.ExperimentSpec.from_dict({
        "data": data, "model": {**model_section, **model_params},
        "topology": topology or {"name": "cascaded"}, "init": init or {"name": "default"},
        "optim": {"name": "adamw", "lr": 1e-3}, "train": {"steps": steps, "batch_size": 8, "log_every": 1}})


def built(s):
    model, data = explorer.build(s)
    x, _ = data.batch(4, "val")
    return model, x


# ---------------------------------------------------------------------------- the block itself
def hand_layer(block, x):
    """A pre-norm decoder layer written out: layer(h) = h + a + mlp(h + a), a = attn(LN(h)) (width 16, 2 heads)."""
    at = block.attn
    h = F.layer_norm(x, (16,), at.norm.norm.weight, at.norm.norm.bias)
    q, k, v = (h @ w.T for w in (at.wq, at.wk, at.wv))
    b, t, _ = q.shape
    q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 16) @ at.wo.T
    x = x + a
    mlp = block.mlp
    h = F.layer_norm(x, (16,), mlp.norm.norm.weight, mlp.norm.norm.bias)
    return x + F.gelu(h @ mlp.inner.weight.T) @ mlp.outer.weight.T


def hand_head(model, x):
    final_norm, head = model.head
    return F.layer_norm(x, (16,), final_norm.norm.weight, final_norm.norm.bias) @ head.weight.T


def test_gpt_matches_a_hand_written_pre_norm_transformer():
    model, idx = built(spec(positions="learned"))
    emb = model.embed
    x = F.embedding(idx, emb.weight.T) + emb.pos[: idx.shape[1]]
    for block in model.stack.blocks:
        x = hand_layer(block, x)
    with torch.no_grad():
        assert torch.allclose(model(idx), hand_head(model, x), atol=1e-5)


@pytest.mark.parametrize("temperature", [None, 1.0])
def test_block_level_ancre_is_the_official_form(temperature):
    """ANCRe Sec. 5 / official code: h_j = layer_j(h_{j-1}) + sum_{i<j} p_ij h_i, p_.j = softmax_i(c_ij / T),
    where layer_j keeps its own residual (the old form dropped it: h_j = layer_j(h_{j-1}) - h_{j-1} + ...).
    Unset, the temperature is the official code's softmax_temp = 1e-2."""
    model, idx = built(spec(topology={"name": "ancre"} if temperature is None else
                            {"name": "ancre", "temperature": temperature}))
    temperature = 0.01 if temperature is None else temperature
    logits = model.stack.topology.logits
    with torch.no_grad():
        logits.copy_(torch.randn(logits.shape, generator=torch.Generator().manual_seed(0)) * temperature)
    emb = model.embed
    states = [F.embedding(idx, emb.weight.T) + emb.pos[: idx.shape[1]]]
    for j, block in enumerate(model.stack.blocks, start=1):
        c = torch.stack([logits[i, j] for i in range(j)]) / temperature
        p = torch.exp(c - c.max()) / torch.exp(c - c.max()).sum()
        states.append(hand_layer(block, states[-1]) + sum(p[i] * states[i] for i in range(j)))
    with torch.no_grad():
        assert torch.allclose(model(idx), hand_head(model, states[-1]), atol=1e-5)
        ref = model.stack.topology.run_reference(model.embed(idx), model.stack.blocks, model.stack.acts)
        assert torch.allclose(model.head(ref), hand_head(model, states[-1]), atol=1e-5)
    own = model.stack.topology.coefficients().own  # x_j reads x_{j-1} once more than p says (its own residual)
    assert np.allclose(own[3, 2], model.stack.topology.probabilities()[2, 3].item() + 1.0)


def test_module_level_and_linear_ancre_keep_the_case_study_form():
    """At module level (and on the linear nets) the shortcuts are the only skips: x_j = y_j + sum_i p_ij x_i."""
    model, idx = built(spec(topology={"name": "ancre"}, level="module"))
    assert not model.stack.topology.layer_residual
    lnn, data = explorer.build(explorer.preset("ancre-fig2b-ancre"))
    assert not lnn.stack.topology.layer_residual
    pair = explorer.preset("ancre-fig2b-ancre-temperature1").to_dict()  # the temperature pair differs in nothing else
    pair["topology"]["temperature"] = lnn.stack.topology.temperature
    assert pair == explorer.preset("ancre-fig2b-ancre").to_dict() and lnn.stack.topology.temperature == 0.1
    x = data.x_train[:5]
    p = lnn.stack.topology.probabilities()
    states = [x]
    for j, layer in enumerate(lnn.stack.blocks, start=1):
        states.append(states[-1] @ layer.weight.T + sum(p[i, j] * states[i] for i in range(j)))
    with torch.no_grad():
        assert torch.allclose(lnn(x), states[-1], atol=1e-6)


def test_post_norm_normalises_after_each_residual_addition():
    model, idx = built(spec(placement="post", norm="rmsnorm", level="module"))
    blocks, norms = model.stack.blocks, model.stack.post_norms
    x = model.embed(idx)
    with torch.no_grad():
        for block, norm in zip(blocks, norms):
            x = norm(x + block(x))
        assert torch.allclose(model(idx), model.head(x), atol=1e-6)
        block_level, _ = built(spec(placement="post", norm="rmsnorm"))
        assert torch.allclose(block_level(idx), model(idx), atol=1e-5)  # same weights, same network


def test_module_level_cascaded_is_the_same_network_as_block_level():
    block_model, idx = built(spec())
    module_model, _ = built(spec(level="module"))
    assert len(module_model.stack.blocks) == 2 * len(block_model.stack.blocks)
    with torch.no_grad():
        assert torch.allclose(block_model(idx), module_model(idx), atol=1e-5)


def test_tau_after_the_addition_without_norm_is_appendix_h():
    model, idx = built(spec(topology={"name": "tau", "value": 0.5, "placement": "after"}, norm="none", level="module"))
    x = model.embed(idx)
    with torch.no_grad():
        for block in model.stack.blocks:
            x = 0.5 * (x + block(x))
        assert torch.allclose(model(idx), model.head(x), atol=1e-6)
    coefficients = model.stack.topology.coefficients()
    assert coefficients.own[1, 0] == 0.5 and coefficients.unrolled[2, 0] == 0.25  # x_2 = tau^2 x_0 + ...


def test_skipless_has_no_residual_anywhere_while_block_level_none_keeps_the_inner_skip():
    skipless, idx = built(spec(topology={"name": "skipless"}))
    none_module, _ = built(spec(topology={"name": "none"}, level="module"))
    none_block, _ = built(spec(topology={"name": "none"}))
    with torch.no_grad():
        assert torch.allclose(skipless(idx), none_module(idx), atol=1e-6)
        x = skipless.embed(idx)
        for sub_block in skipless.stack.blocks:
            x = sub_block(x)
        assert torch.allclose(skipless(idx), skipless.head(x), atol=1e-6)
        assert not torch.allclose(none_block(idx), skipless(idx), atol=1e-3)


@pytest.mark.parametrize("model", TRANSFORMERS)
@pytest.mark.parametrize("k", [0, 1, 2])
def test_dca_is_exactly_the_standard_transformer_at_init(model, k):
    standard, x = built(spec(model))
    dca, _ = built(spec(model, {"name": "dca", "k": k}))
    with torch.no_grad():
        assert torch.allclose(dca(x), standard(x), atol=1e-5)
        dca.stack.topology.weights[1, 1, 0].add_(0.5)  # the key mix of block 2 now weighs x_0 more: it must show
        assert not torch.allclose(dca(x), standard(x), atol=1e-4)


def test_dca_feeds_separate_query_key_and_value_inputs():
    model, x = built(spec(topology={"name": "dca"}))
    seen = []
    model.stack.blocks[2].register_forward_hook(lambda module, inputs, output: seen.append(inputs))
    with torch.no_grad():
        model.stack.topology.weights[2, 2, :3].mul_(torch.linspace(0.5, 2.0, 3)[:, None])  # value mix of block 3
        model(x)
    q, k, v = seen[0]
    assert torch.allclose(q, k) and not torch.allclose(q, v)


def test_dca_coefficients_at_init_equal_the_cascaded_unrolled_matrix():
    dca, _ = built(spec(topology={"name": "dca", "k": 1}))
    cascaded, _ = built(spec())
    assert (dca.stack.topology.coefficients().unrolled == cascaded.stack.topology.coefficients().unrolled).all()


def hand_attention(at, q_in, k_in, v_in, norms):
    """Causal multi-head attention with each input normalised by its own LayerNorm (width 16, 2 heads)."""
    q, k, v = (F.layer_norm(z, (16,), n.norm.weight, n.norm.bias) @ w.T
               for z, n, w in zip((q_in, k_in, v_in), norms, (at.wq, at.wk, at.wv)))
    b, t, _ = q.shape
    q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 16) @ at.wo.T


def test_dca_is_the_papers_block_with_its_own_norm_per_input():
    """DCA Sec. 3.2 / Figure 4: q, k, v = three GRN-v3 mixes of G_t = [x_0, d_1, ...], each normalised on its own;
    h = q + attn(q, k, v), out = h + mlp(h), d_t = out - q; the output is one more GRN-v3 mix."""
    model, idx = built(spec(topology={"name": "dca", "gate_init": "normal"}))
    topo = model.stack.topology
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        topo.weights.copy_(torch.rand(topo.weights.shape, generator=gen) + 0.5)
        topo.gates.mul_(20.0)
        for block in model.stack.blocks:
            for norm in (block.attn.norm, block.attn.norm_k, block.attn.norm_v):
                norm.norm.weight.copy_(torch.rand(16, generator=gen) + 0.5)
                norm.norm.bias.copy_(torch.randn(16, generator=gen) * 0.1)
    emb = model.embed
    sources = [F.embedding(idx, emb.weight.T) + emb.pos[: idx.shape[1]]]

    def mix(b, w):
        return sum(g * (b[i] + torch.relu(g @ w)[..., None]) for i, g in enumerate(sources))

    for t, block in enumerate(model.stack.blocks, start=1):
        q, k, v = (mix(topo.weights[m, t - 1], topo.gates[m, t - 1]) for m in range(3))
        at = block.attn
        assert len({id(at.norm), id(at.norm_k), id(at.norm_v)}) == 3  # three norms, not one shared
        h = q + hand_attention(at, q, k, v, (at.norm, at.norm_k, at.norm_v))
        mlp = block.mlp
        out = h + F.gelu(F.layer_norm(h, (16,), mlp.norm.norm.weight, mlp.norm.norm.bias) @ mlp.inner.weight.T) \
            @ mlp.outer.weight.T
        sources.append(out - q)
    with torch.no_grad():
        assert torch.allclose(model(idx), hand_head(model, mix(topo.out_weights, topo.out_gates)), atol=1e-4)


@pytest.mark.parametrize("gate_init", ["zero", "normal"])
def test_dca_gates_get_a_gradient_only_from_a_nonzero_init(gate_init):
    model, idx = built(spec(topology={"name": "dca", "gate_init": gate_init}))
    topo = model.stack.topology
    model(idx).logsumexp(-1).mean().backward()
    for gates in (topo.gates, topo.out_gates):
        assert (gates.grad == 0).all() if gate_init == "zero" else gates.grad.abs().max() > 0


def test_attention_maps_are_causal_distributions_and_rotary_is_relative():
    attn = Attention(16, 2, "none", causal=True, rotary=Rotary(8, 32))
    for w in (attn.wq, attn.wk, attn.wv, attn.wo):
        torch.nn.init.normal_(w, std=0.3)
    x = torch.randn(2, 10, 16)
    maps = attn.attention_map(x)
    assert maps.shape == (2, 2, 10, 10)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 10), atol=1e-6)
    assert (maps.triu(1) == 0).all()
    rotary = Rotary(8, 32)
    q, k = torch.randn(8), torch.randn(8)
    seq_q, seq_k = q.expand(1, 1, 32, 8), k.expand(1, 1, 32, 8)
    dots = (rotary(seq_q)[0, 0, :, None, :] * rotary(seq_k)[0, 0, None, :, :]).sum(-1)  # dots[m, n] = <R_m q, R_n k>
    assert torch.allclose(dots[5, 2], dots[20, 17], atol=1e-5) and torch.allclose(dots[3, 3], dots[30, 30], atol=1e-5)
    assert not torch.allclose(dots[5, 2], dots[5, 4], atol=1e-3)


def test_transformer_block_is_what_the_block_adds():
    attn = Attention(8, 2, "layernorm", causal=False)
    for w in (attn.wq, attn.wk, attn.wv, attn.wo):
        torch.nn.init.normal_(w, std=0.3)
    from explorer.nn.blocks import MLPBlock
    mlp = MLPBlock(8, 16, "layernorm", bias=False, activation="gelu")
    torch.nn.init.normal_(mlp.inner.weight)
    torch.nn.init.normal_(mlp.outer.weight)
    x = torch.randn(3, 5, 8)
    a = attn(x)
    assert torch.allclose(TransformerBlock(attn, mlp, None)(x), a + mlp(x + a), atol=1e-6)


# ---------------------------------------------------------------------------- every topology and init trains
@pytest.mark.parametrize("model", TRANSFORMERS)
@pytest.mark.parametrize("topology", TOPOLOGIES, ids=section_id)
@pytest.mark.parametrize("level", ["block", "module"])
def test_every_topology_trains_at_both_levels(model, topology, level):
    if explorer.registry("topologies")[topology["name"]].info.separate_qkv_inputs and level == "module":
        with pytest.raises(explorer.SpecError) as err:
            spec(model, topology, level=level)
        assert err.value.path == "model.level"
        return
    run = explorer.train(spec(model, topology, level=level))
    assert run.status == "finished", run.summary()
    assert all(math.isfinite(row["loss"]) for row in run.history)
    assert run.history[-1]["step"] == 3


@pytest.mark.parametrize("model", TRANSFORMERS)
@pytest.mark.parametrize("init", ["idinit", "skipless", "mimetic", "zero", "fixup", "rezero", "xavier"])
@pytest.mark.parametrize("topology", [{"name": "cascaded"}, {"name": "skipless"}, {"name": "dca", "k": 1}])
def test_transformer_inits_train_under_each_kind_of_topology(model, init, topology):
    if init == "rezero" and topology["name"] == "skipless":
        with pytest.raises(explorer.SpecError):
            spec(model, topology, {"name": init})
        return
    run = explorer.train(spec(model, topology, {"name": init}, placement="pre"))
    assert run.status == "finished" and math.isfinite(run.history[-1]["loss"]), run.summary()


def test_post_norm_and_rotary_and_mean_pooling_train():
    for s in (spec(placement="post", topology={"name": "ancre"}), spec(positions="rotary", topology={"name": "dca"}),
              spec("vit", pooling="mean", norm="rmsnorm", topology={"name": "grn-v2"})):
        assert explorer.train(s).status == "finished"


# ---------------------------------------------------------------------------- Cutting the Skip's initialisation
def test_skipless_init_makes_wv_wo_scaled_orthogonal_and_wq_wk_alpha_z_plus_beta_i():
    c, alpha, beta, d = 3.0, 2.0, 0.6, 64
    model, _ = built(spec("vit", init={"name": "skipless", "c": c, "alpha": alpha, "beta": beta},
                          topology={"name": "skipless"}, width=d, heads=1))
    attn = model.stack.blocks[0]
    w_v, w_o = attn.wv.detach().double().T, attn.wo.detach().double().T  # the paper's row convention
    sv = torch.linalg.svdvals(w_v @ w_o)
    assert torch.allclose(sv, torch.full_like(sv, c ** 2), rtol=1e-5), sv[[0, -1]]
    product = attn.wq.detach().double().T @ attn.wk.detach().double()  # W_Q W_K^T
    z = (product - beta * torch.eye(d, dtype=torch.float64)) / alpha  # should be N(0, 1/d) entries
    assert abs(z.mean()) < 3 / d, z.mean()
    assert 0.85 < z.std() * math.sqrt(d) < 1.15, z.std() * math.sqrt(d)
    assert abs(torch.diagonal(product).mean() - beta) < 4 * alpha / d, torch.diagonal(product).mean()


def test_mimetic_init_per_head_is_the_best_rank_k_approximation():
    d, heads, alpha, beta = 32, 4, 2.0, 0.6
    wq, wk = torch.empty(d, d), torch.empty(d, d)
    mimetic_qk_(wq, wk, heads, alpha, beta, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    k = d // heads
    for h in range(heads):
        z = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        m = alpha * z + beta * torch.eye(d, dtype=torch.float64)
        u, s, vh = torch.linalg.svd(m)
        best = (u[:, :k] * s[:k]) @ vh[:k]
        rows = slice(h * k, (h + 1) * k)
        product = wq[rows].double().T @ wk[rows].double()
        assert torch.allclose(product, best, atol=1e-5)
        assert torch.linalg.matrix_rank(product) == k


def test_orthogonal_vo_and_suo():
    wv, wo = torch.empty(12, 12), torch.empty(12, 12)
    orthogonal_vo_(wv, wo, 2.0, torch.Generator().manual_seed(1))
    sv = torch.linalg.svdvals(wv.T @ wo.T)
    assert torch.allclose(sv, torch.full((12,), 4.0), rtol=1e-5)
    wide = suo_(torch.empty(40, 10), torch.Generator().manual_seed(2))  # d_out > d_in: orthonormal columns x 2
    assert torch.allclose(wide.T @ wide, 4.0 * torch.eye(10), atol=1e-5)
    narrow = suo_(torch.empty(10, 40), torch.Generator().manual_seed(2))  # orthonormal rows, no correction
    assert torch.allclose(narrow @ narrow.T, torch.eye(10), atol=1e-5)


def test_idinit_on_attention_is_identity_in_and_near_zero_out():
    model, _ = built(spec(init={"name": "idinit", "loose_std": 0.0}))
    attn = model.stack.blocks[0].attn
    for w in (attn.wq, attn.wk, attn.wv):
        assert torch.equal(w.detach(), torch.eye(16))
    assert attn.wo.abs().max() <= 1e-6 and attn.wo.abs().max() > 0  # IDIZ_eps: near zero, not dead


# ---------------------------------------------------------------------------- checks of the combination
@pytest.mark.parametrize("raw, path", [
    ({"model": {**GPT, "heads": 3}}, "model.heads"),
    ({"model": {**VIT, "patch": 5}, "data": IMAGES}, "model.patch"),
    ({"model": GPT, "data": IMAGES}, "data.name"),
    ({"model": VIT, "data": TEXT}, "model.name"),
    ({"model": {"name": "mlp"}, "data": TEXT}, "model.name"),
    ({"model": {"name": "mlp"}, "data": {"name": "spirals"}, "topology": {"name": "dca"}}, "topology.name"),
    ({"model": {"name": "mlp"}, "data": {"name": "spirals"}, "topology": {"name": "skipless"}}, "topology.name"),
    ({"model": {"name": "mlp"}, "data": {"name": "spirals"}, "init": {"name": "skipless"}}, "init.name"),
    ({"model": GPT, "topology": {"name": "skipless"}, "init": {"name": "skipinit"}}, "init.name"),
    ({"model": GPT, "init": {"name": "default", "overrides": "attn.q=mimetic"}}, "init.overrides"),
])
def test_bad_combinations_name_the_field(raw, path):
    base = {"data": TEXT, "train": {"steps": 2, "log_every": 1}}
    with pytest.raises(explorer.SpecError) as err:
        explorer.ExperimentSpec.from_dict({**base, **raw})
    assert err.value.path == path, err.value


def test_same_seed_same_transformer_weights_whatever_the_topology():
    def blocks(s):
        model, _ = explorer.build(s)
        return {n: p.detach().clone() for n, p in model.named_parameters() if "topology" not in n}

    reference = blocks(spec())
    for topology in ({"name": "ancre"}, {"name": "dca", "k": 2}, {"name": "grn-v3"}):
        weights = blocks(spec(topology=topology))
        extra = set(weights) - set(reference)  # DCA's own key and value norms
        assert not set(reference) - set(weights) and all(".norm_k." in n or ".norm_v." in n for n in extra)
        assert all(torch.equal(reference[n], weights[n]) for n in reference)


# ---------------------------------------------------------------------------- learning
def test_gpt_loss_falls_below_the_unigram_entropy_of_its_corpus():
    data = {"name": "text", "context": 32, "max_chars": 60_000}
    entropy = text.unigram_entropy(data)
    run = explorer.train(explorer.ExperimentSpec.from_dict({
        "data": data, "model": {"name": "gpt", "depth": 2, "width": 64, "heads": 4},
        "optim": {"name": "adamw", "lr": 3e-3}, "train": {"steps": 80, "batch_size": 32, "log_every": 40}}))
    val_loss = run.history[-1]["val_loss"]
    assert run.history[0]["val_loss"] > entropy
    assert val_loss < entropy - 0.2, f"validation loss {val_loss:.3f} vs unigram entropy {entropy:.3f} nats"


def test_skipless_vit_trains_worse_with_default_init_than_with_the_skipless_init():
    def final_loss(init):
        run = explorer.train(explorer.ExperimentSpec.from_dict({
            "data": {"name": "shapes", "size": 16, "n_train": 1000, "n_val": 200},
            "model": {"name": "vit", "depth": 6, "width": 32, "heads": 2, "patch": 4},
            "topology": {"name": "skipless"}, "init": {"name": init},
            "optim": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.05},
            "train": {"steps": 200, "batch_size": 64, "log_every": 20}}))
        return sum(row["loss"] for row in run.history[-4:]) / 4  # mean of the last four logged training losses

    default, skipless = final_loss("default"), final_loss("skipless")
    message = f"mean training loss over steps 140-200: default init {default:.3f}, skipless init {skipless:.3f}"
    print(message)
    assert default - skipless > 0.05, message
