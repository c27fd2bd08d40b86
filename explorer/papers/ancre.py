"""ANCRe (000_c5b5d97025f97627.txt): residual topology on deep linear networks (Figure 2) and on a
small language model (Table 2).

Case study 3.1 at CPU scale: whitened regression in d = 8 with a rank-4 target (the zero
singular values are what make 0:1 sublinear in Theorem 3.2), a K-layer linear network from
a small random initialisation, full-batch gradient descent.
"""

_DATA = {"name": "whitened-regression", "dim": 8, "n_train": 64, "n_val": 64, "rank": 4, "seed": 0}
_TRAIN = {"steps": 2000, "log_every": 10, "seed": 0}


def _lnn(depth: int, topology: dict) -> dict:
    return {
        "data": _DATA,
        "model": {"name": "linear", "depth": depth, "width": 8},
        "topology": topology,
        "init": {"name": "normal", "std": 0.05},
        "optim": {"name": "gd", "lr": 0.05},
        "train": _TRAIN,
    }


PRESETS = {
    **{f"ancre-fig2a-K{k}": (f"Figure 2a: {k}-layer linear network, no shortcut, gradient descent",
                             _lnn(k, {"name": "none"})) for k in (2, 3, 4)},
    "ancre-fig2b-none": ("Figure 2b: 3-layer linear network without shortcuts", _lnn(3, {"name": "none"})),
    "ancre-fig2b-0:1": ("Figure 2b: 3 layers with the single shortcut 0:1 (sublinear, Theorem 3.2)",
                        _lnn(3, {"name": "shortcuts", "shortcuts": "0:1"})),
    "ancre-fig2b-0:2": ("Figure 2b: 3 layers with the single shortcut 0:2 (linear rate, Theorem 3.3)",
                        _lnn(3, {"name": "shortcuts", "shortcuts": "0:2"})),
    "ancre-fig2b-cascaded": ("Figure 2b: 3 layers with the standard cascaded residual", _lnn(3, {"name": "cascaded"})),
    "ancre-fig2b-ancre": ("Figure 2b: 3 layers with ANCRe (ingoing, temperature 0.1)", _lnn(3, {"name": "ancre"})),
    "ancre-fig2c-0:3": ("Figure 2c: 4 layers with the single shortcut 0:3", _lnn(4, {"name": "shortcuts", "shortcuts": "0:3"})),
    "ancre-fig2c-1:2+2:3": ("Figure 2c: 4 layers with the two shortcuts 1:2 and 2:3",
                            _lnn(4, {"name": "shortcuts", "shortcuts": "1:2,2:3"})),
    "ancre-fig2c-ancre": ("Figure 2c: 4 layers with ANCRe (ingoing, temperature 0.1)", _lnn(4, {"name": "ancre"})),
}


def _llama(topology: dict) -> dict:
    """Table 2 at CPU scale: a LLaMA-style character GPT (RMSNorm, rotary positions; 6 blocks, width 64).

    The paper pre-trains LLaMA-60M to 1B on C4 with AdamW (and other optimizers) and places ANCRe
    at block level (Table 1's MHSA-only choice) with temperature 0.01 for language models.
    """
    return {
        "data": {"name": "text", "context": 64, "seed": 0},
        "model": {"name": "gpt", "depth": 6, "width": 64, "heads": 4, "norm": "rmsnorm", "positions": "rotary",
                  "level": "block"},
        "topology": topology,
        "init": {"name": "default"},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.0, "schedule": "cosine", "warmup_steps": 20},
        "train": {"steps": 400, "batch_size": 32, "log_every": 20, "seed": 0},
    }


PRESETS.update({
    "ancre-table2-cascaded": ("Table 2: small LLaMA-style GPT with cascaded residual connections",
                              _llama({"name": "cascaded"})),
    "ancre-table2-ancre": ("Table 2: small LLaMA-style GPT with block-level ANCRe (ingoing, temperature 0.01)",
                           _llama({"name": "ancre", "temperature": 0.01})),
})
