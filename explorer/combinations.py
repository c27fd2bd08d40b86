"""Checks across spec sections: shapes that must fit, shortcuts that must exist, devices present.

Each section of a spec is validated against its own registry entry; what only a combination
can get wrong is checked here, where data, models, topologies, inits and optimizers are all
known. The check registers itself with `explorer.registries`, which the spec calls at construction.
"""

from __future__ import annotations

import torch

from explorer.data import DATASETS, dims
from explorer.init import check_init
from explorer.nn.base import MODELS, check_model, n_blocks
from explorer.registries import SpecError, add_check
from explorer.topology import TOPOLOGIES, check_topology


@add_check
def check_combination(spec) -> None:
    """Raise SpecError(field, fix) for the first cross-section problem of `spec`."""
    data_check = DATASETS[spec.data.name].info.check
    if data_check:
        data_check(spec.data.params)
    data_dims = dims(spec.data)
    topology = TOPOLOGIES[spec.topology.name].info
    if topology.transformer_only and not MODELS[spec.model.name].info.transformer:
        hint = "use grn-v3 on other models" if topology.residual else "use none for a network without residual connections"
        raise SpecError("topology.name", f"{spec.topology.name} exists only for Transformers (model.name=gpt or vit); {hint}")
    if data_dims.task == "language-modeling" and spec.model.name != "gpt":
        raise SpecError("model.name", f"{spec.data.name} gives token sequences, which only the gpt model reads; "
                                      "set model.name=gpt (or choose a vector or image dataset)")
    check_model(spec, data_dims)
    check_init(spec)
    blocks = n_blocks(spec)
    check_topology(spec.topology, blocks)
    if spec.train.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("train.device", "CUDA is not available on this machine; use device 'auto' or 'cpu'")
    if spec.train.log_every > spec.train.steps:
        raise SpecError("train.log_every", f"log_every ({spec.train.log_every}) is larger than steps ({spec.train.steps}); "
                                           f"set it to {spec.train.steps} or less")
