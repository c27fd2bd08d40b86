"""Memory a spec will need, estimated from its parameters before anything is allocated, and the caps on it.

Two caps, read from the environment each time (so a server, the CLI and a notebook share one mechanism;
the CLI's --max-data-mb / --max-model-mb set them for its process):

    EXPLORER_MAX_DATA_MB   the bytes one dataset's tensors may take (default 512)
    EXPLORER_MAX_MODEL_MB  the bytes training one model may take: weights, gradients, optimizer state
                           and the activations of one batch (default 2048)

`check(spec)` raises a SpecError naming the field to lower and the variable to raise; `explorer.build`
(and so `train`) calls it first, and the app calls it while validating the form. The estimates are
deliberately simple and on the generous side of what PyTorch allocates: float32 inputs (int64 ids for
text), targets, masks; parameters x 4 bytes x (weights + gradients + optimizer states) plus
batch x positions x width x depth x a per-architecture factor for activations (attention maps added
for Transformers).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from explorer.registries import SpecError
from explorer.settings import whole_number

DEFAULT_MAX_DATA_MB = 512
DEFAULT_MAX_MODEL_MB = 2048
MB = 1_000_000
FALLBACK_EXAMPLES = 10_000  # a dataset whose size no parameter states (digits: 1797, mnist1d: num_samples)
OPTIMIZER_STATES = {"gd": 1, "sgd": 1, "adam": 2, "adamw": 2, "adagrad": 1, "soap": 4}  # tensors per parameter
ACTIVATIONS_PER_LAYER = {"transformer": 12, "conv": 4}  # stored values per position and width unit; else 3


class Caps(NamedTuple):
    max_data_mb: int
    max_model_mb: int


def caps() -> Caps:
    """The caps in force: EXPLORER_MAX_DATA_MB and EXPLORER_MAX_MODEL_MB, or their defaults."""
    return Caps(_positive("EXPLORER_MAX_DATA_MB", DEFAULT_MAX_DATA_MB),
                _positive("EXPLORER_MAX_MODEL_MB", DEFAULT_MAX_MODEL_MB))


def _positive(variable: str, default: int) -> int:
    return whole_number(variable, default, "megabytes one run's " + ("data" if "DATA" in variable else "model")
                        + " may take")


# ---- estimates ---------------------------------------------------------------------------------------

def _examples(spec) -> tuple[int, int]:
    """(training, validation) examples the data section asks for (0 = all: the parameter's upper bound)."""
    from explorer.data import DATASETS

    entry = DATASETS[spec.data.name]
    params = spec.data.params

    def count(name: str) -> int | None:
        param = entry.param(name)
        if param is None:
            return None
        return int(params[name]) or int(param.high or FALLBACK_EXAMPLES)

    n_train, n_val = count("n_train"), count("n_val")
    if n_train is None:
        n_train = count("num_samples") or FALLBACK_EXAMPLES
    return n_train, n_val or 0


def data_bytes(spec) -> int:
    """Bytes the dataset's tensors will take, from its parameters (a text is read to count its characters)."""
    from explorer.data import dims

    found = dims(spec.data)
    if found.task == "language-modeling":
        from explorer.data.text import corpus

        chars = len(corpus(spec.data.path, spec.data.max_chars))
        return 2 * 8 * chars  # inputs and targets, int64 ids, every character in one window
    n_train, n_val = _examples(spec)
    target = 4 * found.output_dim if found.task == "regression" else 8
    masks = 8 * math.prod(found.input_shape[1:]) if spec.data.name == "shapes" else 0  # per-pixel labels
    return (n_train + n_val) * (4 * found.input_dim + target + masks)


def _positions(spec, input_shape: tuple[int, ...]) -> int:
    """Positions each layer computes on per example: tokens (GPT), patches (ViT), pixels (conv nets), else 1."""
    model = spec.model.params
    if spec.model.name == "gpt":
        return input_shape[0]
    if spec.model.name == "vit":
        return (input_shape[-1] // model.get("patch", 1)) ** 2 + 1
    if len(input_shape) == 3 and spec.model.name in ("resnet-cifar", "allconv"):
        return input_shape[1] * input_shape[2]
    return 1


def activation_bytes(spec) -> int:
    """Bytes of the values one training batch keeps for the backward pass (and the validation pass)."""
    from explorer.data import DATASETS, dims
    from explorer.nn.models import MODELS
    from explorer.optim import is_full_batch

    found = dims(spec.data)
    model = spec.model.params
    width, depth = int(model.get("width", found.input_dim)), int(model.get("depth", 1))
    n_train, n_val = _examples(spec) if DATASETS[spec.data.name].param("n_train") else (spec.train.batch_size, 0)
    batch = max(n_train if is_full_batch(spec.optim) else min(spec.train.batch_size, n_train), n_val)
    kind = "transformer" if MODELS[spec.model.name].info.transformer else \
        "conv" if _positions(spec, found.input_shape) > 1 else "dense"
    positions = _positions(spec, found.input_shape)
    values = batch * positions * width * depth * ACTIVATIONS_PER_LAYER.get(kind, 3)
    if kind == "transformer":
        values += 2 * batch * int(model.get("heads", 1)) * positions ** 2 * depth  # attention scores and weights
    return 4 * values


def model_bytes(spec) -> tuple[int, int]:
    """(bytes of weights + gradients + optimizer state, bytes of activations) for training the spec's model."""
    from explorer.nn.models import parameter_count

    states = 2 + OPTIMIZER_STATES.get(spec.optim.name, 2)
    return 4 * states * parameter_count(spec), activation_bytes(spec)


# ---- the check ---------------------------------------------------------------------------------------

def check(spec, limits: Caps | None = None) -> None:
    """SpecError when the spec's data or model would take more memory than the caps allow."""
    limits = limits or caps()
    data = data_bytes(spec)
    if data > limits.max_data_mb * MB:
        field = next((f"data.{name}" for name in ("n_train", "num_samples", "size", "max_chars", "dim")
                      if name in spec.data.params), "data.name")
        raise SpecError(field, f"this dataset would take about {_mb(data)} of memory, above the limit of "
                               f"{limits.max_data_mb} MB (EXPLORER_MAX_DATA_MB); lower {field} (or the data's "
                               "dimension), or raise EXPLORER_MAX_DATA_MB (CLI: --max-data-mb)")
    activations = activation_bytes(spec)  # first: cheap, and it refuses the huge nets before they are counted
    if activations <= limits.max_model_mb * MB:
        weights, activations = model_bytes(spec)
    else:
        weights = 0
    if weights + activations > limits.max_model_mb * MB:
        field = "model.width" if "width" in spec.model.params else "model.depth"
        raise SpecError(field, f"training this model would take about {_mb(weights + activations)} of memory "
                               f"(weights, gradients and optimizer state {_mb(weights) if weights else 'not counted'}, "
                               f"activations {_mb(activations)}), above the limit of {limits.max_model_mb} MB "
                               "(EXPLORER_MAX_MODEL_MB); lower model.width, model.depth or train.batch_size, or "
                               "raise EXPLORER_MAX_MODEL_MB (CLI: --max-model-mb)")


def _mb(n: int) -> str:
    return f"{n / MB:,.0f} MB" if n < 10_000 * MB else f"{n / 1e9:,.0f} GB"
