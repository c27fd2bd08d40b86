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
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from explorer.registries import SpecError, registry
from explorer.settings import number

MB = 1_000_000
FALLBACK_EXAMPLES = 2_000  # a dataset whose size no parameter states: the digits sets (1797 images)
OPTIMIZER_STATES = {"gd": 1, "sgd": 1, "adam": 2, "adamw": 2, "adagrad": 1, "soap": 4}  # tensors per parameter
# values a layer keeps per position and width unit for the backward pass, measured on CPU (tests/test_budget_rss.py):
# a Transformer block 12 plus 4 per unit of model.mlp_ratio (28 at the default 4), a dense block 5 plus 3 per
# unit of model.hidden_ratio, a convolution 4
ACTIVATIONS_PER_LAYER = {"transformer": 12, "conv": 4, "dense": 5}
PER_HIDDEN_UNIT = {"transformer": ("mlp_ratio", 4), "dense": ("hidden_ratio", 3)}  # (parameter, values per unit)
OUTPUT_VALUES = 4  # per output: the logits, their softmax or error, and the gradients of both
MAX_PRECONDITIONED_DIM = 10_000  # SOAP keeps a d x d factor for each dimension d of a weight up to this size


class Caps(NamedTuple):
    max_data_mb: int
    max_model_mb: int


def caps() -> Caps:
    """The caps in force: EXPLORER_MAX_DATA_MB and EXPLORER_MAX_MODEL_MB, or their defaults."""
    return Caps(number("EXPLORER_MAX_DATA_MB"), number("EXPLORER_MAX_MODEL_MB"))


# ---- estimates ---------------------------------------------------------------------------------------

def _examples(spec) -> tuple[int, int]:
    """(training, validation) examples the dataset will hold, at most: the n_train / n_val parameters (0 = all:
    the parameter's upper bound), a num_samples split by val_fraction, or the windows of a text."""
    from explorer.data import DATASETS, dims

    entry = DATASETS[spec.data.name]
    params = spec.data.params
    if dims(spec.data).task == "language-modeling":  # windows of `context` characters, stride `context`
        windows = len(_text(spec)) // params["context"]
        return windows, min(int(params["n_val"]), windows)

    def count(name: str) -> int | None:
        param = entry.param(name)
        if param is None:
            return None
        return int(params[name]) or int(param.high or FALLBACK_EXAMPLES)

    n_train, n_val = count("n_train"), count("n_val")
    if n_train is None:
        total = count("num_samples") or FALLBACK_EXAMPLES
        n_val = math.ceil(total * params["val_fraction"]) if "val_fraction" in params else 0
        n_train = total - n_val
    return n_train, n_val or 0


def _text(spec) -> str:
    """The text a language-modelling data section trains on (read once, then cached by explorer.data.text)."""
    from explorer.data.text import corpus

    return corpus(spec.data.path, spec.data.max_chars)


def data_bytes(spec) -> int:
    """Bytes the dataset's tensors will take, from its parameters (a text is read to count its characters)."""
    from explorer.data import dims

    found = dims(spec.data)
    if found.task == "language-modeling":
        return 2 * 8 * len(_text(spec))  # inputs and targets, int64 ids, every character in one window
    n_train, n_val = _examples(spec)
    target = 4 * found.output_dim if found.task == "regression" else 8
    masks = 8 * math.prod(found.input_shape[1:]) if spec.data.name == "shapes" else 0  # per-pixel labels
    return (n_train + n_val) * (4 * found.input_dim + target + masks)


def _positions(spec, input_shape: tuple[int, ...]) -> int:
    """Positions each layer computes on per example, as the model declares them (ModelInfo.positions)."""
    from explorer.nn.models import MODELS

    return max(int(MODELS[spec.model.name].info.positions(spec.model.params, tuple(input_shape))), 1)


def activation_bytes(spec) -> int:
    """Bytes of the values one training batch keeps for the backward pass (and the validation pass)."""
    from explorer.data import dims
    from explorer.nn.models import MODELS
    from explorer.optim import is_full_batch

    found = dims(spec.data)
    model = spec.model.params
    width, depth = int(model.get("width", found.input_dim)), int(model.get("depth", 1))
    n_train, n_val = _examples(spec)
    batch = max(n_train if is_full_batch(spec.optim) else min(spec.train.batch_size, n_train), n_val)
    kind = "transformer" if MODELS[spec.model.name].info.transformer else \
        "conv" if _positions(spec, found.input_shape) > 1 else "dense"
    positions = _positions(spec, found.input_shape)
    values = batch * positions * width * depth * _per_layer(kind, model)
    if kind == "transformer":
        values += 2 * batch * int(model.get("heads", 1)) * positions ** 2 * depth  # attention scores and weights
    outputs = positions if found.task == "language-modeling" else 1  # a prediction per token, or per example
    values += OUTPUT_VALUES * batch * outputs * found.output_dim
    return 4 * values


def _per_layer(kind: str, model: dict) -> float:
    """Values a layer of this kind keeps per position and width unit (ACTIVATIONS_PER_LAYER, PER_HIDDEN_UNIT)."""
    hidden, per_unit = PER_HIDDEN_UNIT.get(kind, ("", 0))
    return ACTIVATIONS_PER_LAYER[kind] + per_unit * float(model.get(hidden, 0))


def model_bytes(spec) -> tuple[int, int]:
    """(bytes of weights + gradients + optimizer state, bytes of activations) for training the spec's model."""
    from explorer.nn.models import parameter_count

    states = 2 + OPTIMIZER_STATES.get(spec.optim.name, 2)
    preconditioners = _preconditioner_values(spec) if spec.optim.name == "soap" else 0
    return 4 * (states * parameter_count(spec) + preconditioners), activation_bytes(spec)


def _preconditioner_values(spec) -> int:
    """SOAP's preconditioners: for each dimension d of each weight matrix (up to MAX_PRECONDITIONED_DIM), a
    d x d Kronecker factor and its eigenbasis, and as much again while it decomposes them (shapes read from
    the model built on the meta device)."""
    import torch

    from explorer.data import dims
    from explorer.nn.models import build_model

    with torch.device("meta"):
        model = build_model(spec, dims(spec.data))
    return 4 * sum(d * d for p in model.parameters() if p.dim() > 1 for d in p.shape if d <= MAX_PRECONDITIONED_DIM)


# ---- the check ---------------------------------------------------------------------------------------

def check(spec, limits: Caps | None = None) -> None:
    """SpecError when the spec's data or model would take more memory than the caps allow."""
    from explorer.optim import is_full_batch

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
    if weights + activations <= limits.max_model_mb * MB:
        return
    took = (f"about {_mb(weights + activations)} of memory (weights, gradients and optimizer state "
            f"{_mb(weights) if weights else 'not counted'}, activations {_mb(activations)}), above the limit of "
            f"{limits.max_model_mb} MB (EXPLORER_MAX_MODEL_MB)")
    n_train = _examples(spec)[0]
    if is_full_batch(spec.optim) and n_train > spec.train.batch_size:
        size = next((f"data.{name}" + (" (0 = the whole text)" if name == "max_chars" else "")
                     for name in ("n_train", "num_samples", "max_chars") if name in spec.data.params), "the dataset")
        raise SpecError("optim.name", f"{spec.optim.name} trains on the whole training set ({n_train:,} examples) "
                                      f"at every step, which would take {took}; lower {size}, choose a mini-batch "
                                      "optimizer (optim.name=sgd or adam, with train.batch_size), or a smaller model "
                                      "(model.width, model.depth), or raise EXPLORER_MAX_MODEL_MB (CLI: --max-model-mb)")
    field = "model.width" if "width" in spec.model.params else "model.depth"
    raise SpecError(field, f"training this model would take {took}; lower model.width, model.depth or "
                           "train.batch_size, or raise EXPLORER_MAX_MODEL_MB (CLI: --max-model-mb)")


def _mb(n: int) -> str:
    return f"{n / MB:,.0f} MB" if n < 10_000 * MB else f"{n / 1e9:,.0f} GB"


# ---- the limit of a process that trains and probes ------------------------------------------------------
# The estimates refuse what would not fit before it starts; a process that runs jobs (an app worker, a fuzz
# process) is also held to a hard limit, so an estimate that falls short ends one job with an error instead of
# exhausting the machine. The limit is RLIMIT_DATA (Linux 4.7 and later count private writable mappings, where
# torch's tensors live; RLIMIT_AS would count the large virtual ranges torch reserves and never uses): the two
# caps plus PROCESS_ALLOWANCE_MB for the interpreter, torch and explorer (a worker's data segment after its imports
# and warm-up), threads' stacks, the dataset cache and the allocator's slack; EXPLORER_MEMORY_LIMIT_MB sets it
# outright. An allocation past it fails at once: torch raises RuntimeError ("DefaultCPUAllocator: can't allocate
# memory"), Python MemoryError.
PROCESS_ALLOWANCE_MB = 1024


def _set_limit_mb() -> int | None:
    """EXPLORER_MEMORY_LIMIT_MB, None when unset."""
    return number("EXPLORER_MEMORY_LIMIT_MB") or None


def process_limit_mb(limits: Caps | None = None) -> int:
    """The memory limit of a process that runs jobs, in MB: EXPLORER_MEMORY_LIMIT_MB, or EXPLORER_MAX_MODEL_MB +
    EXPLORER_MAX_DATA_MB + PROCESS_ALLOWANCE_MB."""
    limits = limits or caps()
    return _set_limit_mb() or limits.max_model_mb + limits.max_data_mb + PROCESS_ALLOWANCE_MB


def limit_memory(mb: int) -> bool:
    """Hold this process to `mb` MB (its soft RLIMIT_DATA; the hard limit is left as it is, so a later call may
    raise it again); `process_limit_mb()` for a process that runs jobs. False where it cannot be set (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    soft = mb * MB if hard == resource.RLIM_INFINITY else min(mb * MB, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    return True


def over_limit(what: str, fix: str, limits: Caps | None = None) -> str:
    """One line for a job that ran into the process limit: `what` ("the probe jacobian") needed more than it,
    and `fix`."""
    limits = limits or caps()
    set_mb = _set_limit_mb()
    how = f"EXPLORER_MEMORY_LIMIT_MB={set_mb}" if set_mb else (
        f"EXPLORER_MAX_MODEL_MB={limits.max_model_mb} + EXPLORER_MAX_DATA_MB={limits.max_data_mb} + "
        f"{PROCESS_ALLOWANCE_MB} MB for Python and torch")
    return (f"{what} needed more than the {process_limit_mb(limits):,} MB memory limit of the process running it "
            f"({how}); {fix}")


# ---- probing a trained model ---------------------------------------------------------------------------
# A Jacobian formed whole is held as float32 (with the one-hot cotangents that make it), as float64 and as the
# SVD's working copy: a fresh process measured 37 to 55 bytes per entry (tests/test_app_probe_jobs.py), so 56 are
# counted; for a dense or convolutional model that covers jacrev's batched backward too (measured), not for the
# attention maps of a Transformer (below).
JACOBIAN_BYTES_PER_ENTRY = 56
EXACT_JACOBIAN_ENTRIES = 20_000_000  # param-jacobian forms J whole up to this many entries (method "auto")
EXACT_JACOBIAN_ROWS = 4096  # and up to this many rows (a backward pass each); larger ones go to Lanczos
# jacrev forms a Jacobian's rows in chunks (explorer.probes.core.jacobian_chunk): in a Transformer the batched
# backward of each row keeps the heads x tokens^2 attention maps of every block for each probed input, and a chunk
# holds as many rows as JACOBIAN_MEMORY of the cap allows (at least one)
JACOBIAN_MEMORY = 0.25  # share of EXPLORER_MAX_MODEL_MB that the rows of a Jacobian formed at once may take


def probe_bytes(spec, probes: dict, inputs: int) -> dict[str, int]:
    """{probe: bytes it takes on `inputs` validation inputs of the spec's trained model}, beyond the model's
    weights and the data, estimated from the spec and each probe's options ({name: {option: value}}) before
    anything is built. The Jacobian probes dominate: inputs x stream x stream entries (jacobian), stacked
    outputs x one block's parameters or Lanczos' vectors (param-jacobian), and in a Transformer the attention
    maps that jacrev's batched backward keeps for each row formed at once; a probe not counted here costs two
    forward passes."""
    from explorer.nn.models import parameter_count

    cost = _probe_cost(spec, parameter_count(spec), caps())
    return {name: int(cost(name, options or {}, inputs)) for name, options in probes.items()}


@dataclass(frozen=True)
class ProbeCost:
    """What a probe's declared cost (ProbeInfo.cost) is computed from: the model's sizes (`params` parameters,
    `depth` blocks of `width`, `positions` per example, `stream` = positions x width numbers per example between
    the blocks, `heads`, `transformer`), the probe's `options` and `n` inputs (at most its max_inputs), and the
    costs of the steps probes share (`forward`, `maps`, `jacobian_bytes`); every size in bytes."""

    params: int
    depth: int
    width: int
    positions: int
    heads: int
    transformer: bool
    per_layer: float  # values a layer keeps per position and width unit (activation_bytes' count)
    chunk_budget: int  # bytes the rows of a Jacobian formed at once may take (JACOBIAN_MEMORY of the model cap)
    options: Mapping[str, Any]
    n: int

    @property
    def stream(self) -> int:
        return self.positions * self.width

    def maps(self, n: int) -> int:
        """The attention scores and weights of every block on n inputs (none without attention)."""
        return 4 * 2 * n * self.heads * self.positions ** 2 * self.depth if self.transformer else 0

    def forward(self, n: int) -> int:
        """The bytes one forward pass on n inputs keeps (activation_bytes' count)."""
        return int(4 * n * self.positions * self.width * self.depth * self.per_layer) + self.maps(n)

    def rows_at_once(self, rows: int, per_row: int) -> int:
        """Bytes jacrev's batched backward keeps for the attention maps of a chunk of `rows` rows, each keeping
        `per_row` (maps(inputs))."""
        return min(rows, max(1, self.chunk_budget // max(per_row, 1))) * per_row

    def jacobian_bytes(self, rows: int, columns: int, method: str, iterations: int, n: int) -> float:
        """J (rows x columns, through n inputs) formed exactly (its entries and the attention maps of the rows
        formed at once), or estimated by Lanczos (its vectors, and a jvp and a vjp at a time); "auto" chooses as
        param-jacobian does."""
        lanczos = 8 * (iterations + 1) * min(rows, columns) + 2 * self.forward(n)
        if method == "lanczos" or (method == "auto" and rows > EXACT_JACOBIAN_ROWS):
            return lanczos
        entries = rows * columns if method == "exact" else min(rows * columns, EXACT_JACOBIAN_ENTRIES)
        exact = JACOBIAN_BYTES_PER_ENTRY * entries + self.rows_at_once(rows, self.maps(n))
        return exact if method == "exact" else max(exact, lanczos)  # auto: `columns` is generous, so either


def _probe_cost(spec, params: int, limits: Caps):
    """cost(name, options, inputs): `probe_bytes` of one probe, for a spec whose model has `params` parameters,
    under `limits` (the model cap sets how many Jacobian rows jacrev forms at once), from the probe's own
    declared cost (ProbeInfo.cost)."""
    from explorer.data import dims
    from explorer.nn.models import MODELS

    probes = registry("probes")  # filled by explorer.probes, a layer above: asked through the registry
    found = dims(spec.data)
    model = spec.model.params
    positions = _positions(spec, found.input_shape)
    transformer = MODELS[spec.model.name].info.transformer
    kind = "transformer" if transformer else "conv" if positions > 1 else "dense"
    shape = dict(params=params, depth=max(int(model.get("depth", 1)), 1),
                 width=int(model.get("width", found.input_dim)), positions=positions,
                 heads=int(model.get("heads", 1)), transformer=transformer, per_layer=_per_layer(kind, model),
                 chunk_budget=int(JACOBIAN_MEMORY * limits.max_model_mb * MB))

    def cost(name: str, options: dict, inputs: int) -> int:
        if name not in probes:
            raise SpecError("probe", f"unknown probe {name!r}; use one of {', '.join(probes)}")
        n = min(inputs, int(options.get("max_inputs", inputs)))
        return int(probes[name].info.cost(ProbeCost(options=options, n=n, **shape)))

    return cost


def check_probes(spec, probes: dict, inputs: int, limits: Caps | None = None) -> None:
    """SpecError (naming the probe) when probing the spec's model with `probes` ({name: options}, run one after
    another) on `inputs` validation inputs would take more than EXPLORER_MAX_MODEL_MB with its weights (held
    twice: the checkpoint and the model). The message says how many inputs would fit."""
    from explorer.nn.models import parameter_count

    limits = limits or caps()
    cap, params = limits.max_model_mb * MB, parameter_count(spec)
    weights, cost = 8 * params, _probe_cost(spec, params, limits)
    costs = {name: cost(name, options or {}, inputs) for name, options in probes.items()}
    name = max(costs, key=costs.get, default=None)
    if name is None or weights + costs[name] <= cap:
        return
    fits = next((n for n in range(inputs - 1, 0, -1) if weights + cost(name, probes[name] or {}, n) <= cap), None)
    fix = f"use at most {fits} validation inputs or leave out {name}" if fits else f"leave out {name}"
    raise SpecError(f"probe.{name}", f"the {name} probe on {inputs} validation input{'s' if inputs != 1 else ''} "
                                     f"would take about {_mb(weights + costs[name])} of memory (the weights "
                                     f"{_mb(weights)}, the probe {_mb(costs[name])}), above the limit of "
                                     f"{limits.max_model_mb} MB (EXPLORER_MAX_MODEL_MB); {fix}, or raise "
                                     "EXPLORER_MAX_MODEL_MB")
