"""DeepCrossAttention (001_1e765a5de17de15f.txt): Figure 1 (can a residual network learn the identity?),
Table 7 (ablation on a 6-layer language model) and Table 1 (k-DCA).

10 linear layers of rank 3 in d = 100, mini-batch SGD with batches of 100 (the paper shows
10^3 batches); ResNet (cascaded) against GRN-v1 (learned scalar weights on earlier outputs).

The paper does not give its initialisation or learning rate. We use Xavier (both factors of
each rank-3 layer start small) and the largest stable learning rate of a small grid. The
finding depends on that choice: with PyTorch's default init one factor starts large, the
ResNet drives the other to zero exponentially fast and learns the identity better than
GRN-v1 (measured 3e-6 vs 5e-2 after 10^3 batches at lr 3e-3).
"""


def _lowrank(task: str, topology: str, lr: float) -> dict:
    return {
        "data": {"name": task, "dim": 100, "n_train": 10_000, "n_val": 1000, "seed": 0},
        "model": {"name": "lowrank", "depth": 10, "width": 100, "rank": 3},
        "topology": {"name": topology},
        "init": {"name": "xavier"},
        "optim": {"name": "sgd", "lr": lr},
        "train": {"steps": 1000, "batch_size": 100, "log_every": 10, "seed": 0},
    }


PRESETS = {
    "dca-fig1a-resnet": ("Figure 1a: low-rank ResNet learning the identity", _lowrank("identity", "cascaded", 0.01)),
    "dca-fig1a-grn-v1": ("Figure 1a: low-rank GRN-v1 learning the identity", _lowrank("identity", "grn-v1", 0.01)),
    "dca-fig1b-resnet": ("Figure 1b: low-rank ResNet learning y = Ax + b", _lowrank("affine", "cascaded", 2e-4)),
    "dca-fig1b-grn-v1": ("Figure 1b: low-rank GRN-v1 learning y = Ax + b", _lowrank("affine", "grn-v1", 2e-4)),
}


def _gpt(topology: dict) -> dict:
    """Table 7 at CPU scale: a 6-layer character GPT (width 64, 4 heads, context 64) on the bundled Python docs.

    The paper trains 6-layer models of width 512 on LM1B with AdamW. Here: AdamW at lr 3e-3 with
    a cosine schedule and no weight decay (decay would pull the GRN weights, which start at 1,
    towards 0), 400 steps of 32 sequences.
    """
    return {
        "data": {"name": "text", "context": 64, "seed": 0},
        "model": {"name": "gpt", "depth": 6, "width": 64, "heads": 4, "mlp_ratio": 4.0},
        "topology": topology,
        "init": {"name": "default"},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.0, "schedule": "cosine", "warmup_steps": 20},
        "train": {"steps": 400, "batch_size": 32, "log_every": 20, "seed": 0},
    }


PRESETS.update({
    "dca-table7-transformer": ("Table 7: small GPT, standard (cascaded) Transformer", _gpt({"name": "cascaded"})),
    "dca-table7-grn-v1": ("Table 7: small GPT with GRN-v1 (scalar weights on earlier block outputs)", _gpt({"name": "grn-v1"})),
    "dca-table7-grn-v2": ("Table 7: small GPT with GRN-v2 (per-feature weights)", _gpt({"name": "grn-v2"})),
    "dca-table7-grn-v3": ("Table 7: small GPT with GRN-v3 (per-feature and input-dependent weights)", _gpt({"name": "grn-v3"})),
    "dca-table7-dca": ("Table 7: small GPT with DCA (three GRN-v3 mixes for query, key and value)", _gpt({"name": "dca"})),
    "dca-table1-2-dca": ("Table 1: small GPT with 2-DCA (x_0, the sum of the middle outputs, the last 2)",
                         _gpt({"name": "dca", "k": 2})),
})
