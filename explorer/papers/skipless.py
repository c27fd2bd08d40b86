"""Cutting the Skip (004_773dc4a106f9ab48.txt): training residual-free Transformers, Table 1 at CPU scale.

The paper trains ViT-Base on ImageNet-1k with AdamW or SOAP: with skips (80.3%), without
skips at default init (61.4%), and without skips with its initialisation (78.1%; 80.8%
with SOAP). Here a 6-block ViT (width 64, 4 heads, 4x4 patches) classifies the generated
16x16 `shapes` images with AdamW; add `--set optim.name=soap` for the SOAP column. The
skipless init uses the paper's supervised values alpha = 2, beta = 0.6, c = 3.
"""


def _vit(topology: str, init: str) -> dict:
    return {
        "data": {"name": "shapes", "size": 16, "n_train": 2000, "n_val": 500, "seed": 0},
        "model": {"name": "vit", "depth": 6, "width": 64, "heads": 4, "patch": 4, "mlp_ratio": 4.0},
        "topology": {"name": topology},
        "init": {"name": init},
        "optim": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.05},
        "train": {"steps": 400, "batch_size": 64, "log_every": 20, "seed": 0},
    }


PRESETS = {
    "skip-table1-skip": ("Table 1: ViT with skip connections, default init, AdamW", _vit("cascaded", "default")),
    "skip-table1-skipless": ("Table 1: skipless ViT (no skip on attention or MLP), default init, AdamW",
                             _vit("skipless", "default")),
    "skip-table1-skipless-init": ("Table 1: skipless ViT with the paper's init (W_V W_O orthogonal, "
                                  "W_Q W_K^T = 2 Z + 0.6 I), AdamW", _vit("skipless", "skipless")),
}
