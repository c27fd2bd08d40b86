"""The probe registry, the one entry point `probe(model, inputs, name, **options)`, and how a result says that
some of its quantities are undefined.

A probe on a diverged model (non-finite weights or activations), an all-zero model or a degenerate batch
returns what is defined and marks the rest: an undefined quantity keeps its key and shape, filled with NaN
where it is undefined, and the result's `undefined` entry holds one line per such quantity, "name: why"
(`undefined(result)` reads them back as {name: why}). A probe that cannot apply to a model at all raises a
SpecError instead.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
from torch import nn

from explorer import budget
from explorer.registries import Registry, SpecError

PROBES = Registry("probes")
UNDEFINED = "undefined"  # result key: one line "quantity: why it is undefined" per undefined quantity
NONFINITE = "non-finite values (weights or activations overflowed: a diverged run)"
JACOBIAN_MEMORY = budget.JACOBIAN_MEMORY  # share of the model cap the rows of a Jacobian formed at once may take
# Options that take a tensor rather than a value a Param can coerce are declared by each
# entry in its metadata (explorer.registries.ProbeInfo) as `tensors={"name": "help"}`.


def probe(model: nn.Module, inputs: torch.Tensor, name: str, **options: Any) -> dict[str, np.ndarray]:
    """Run the probe `name` on `model` with a batch of `inputs`; {key: numpy array} on the CPU.

    Options are validated against the probe's declared parameters (SpecError naming
    `probe.<option>` on a bad one); missing options take their defaults.
    """
    entry = PROBES.lookup(name, "probe")
    tensors = entry.info.tensors
    values = entry.defaults()
    values.update({key: None for key in tensors})
    for key, value in options.items():
        path = f"probe.{key}"
        if key in tensors:
            if value is not None and not isinstance(value, torch.Tensor):
                raise SpecError(path, f"expected a tensor, got {type(value).__name__}; pass a torch.Tensor or leave it out")
            values[key] = value
            continue
        param = entry.param(key)
        if param is None:
            valid = [p.name for p in entry.params] + list(tensors)
            raise SpecError(path, f"probe {name!r} has no option {key!r}; "
                                  f"valid options: {', '.join(valid) if valid else 'none'}")
        values[key] = param.coerce(value, path)
    device = _device(model)
    inputs = _batch(inputs).to(device)
    for key in tensors:
        if values[key] is not None:
            values[key] = values[key].to(device)
    with _probing(model):
        result = entry.factory(model, inputs, **values)
    return {key: _numpy(value) for key, value in result.items()}


def undefined(result: dict) -> dict[str, str]:
    """{quantity: why it is undefined} of a probe result; empty when every quantity is defined."""
    lines = result.get(UNDEFINED)
    if lines is None:
        return {}
    return dict(str(line).partition(": ")[::2] for line in np.ravel(lines))


def mark_undefined(reasons: dict[str, str]) -> dict[str, np.ndarray]:
    """The `undefined` entry a probe adds to its result for `reasons` ({quantity: why}); nothing when empty."""
    return {UNDEFINED: np.array([f"{key}: {why}" for key, why in reasons.items()], dtype=str)} if reasons else {}


def undefined_note(result: dict) -> str:
    """A subtitle naming a result's undefined quantities and why, for its figures' titles ("" when none)."""
    reasons = undefined(result)
    if not reasons:
        return ""
    return "<br><sub>undefined: " + "; ".join(f"{key} ({why})" for key, why in reasons.items()) + "</sub>"


def jacobian_chunk(f, primal: torch.Tensor, copies: int = 1) -> int:
    """How many rows of f's Jacobian at `primal` torch.func.jacrev may form at once (its chunk_size): its batched
    backward keeps, per row, the tensors that one backward of f saves (measured on one forward), times `copies`
    (a vmap over inputs), and all rows together may take JACOBIAN_MEMORY of the model memory cap."""
    saved = 0

    def pack(tensor):
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        f(primal.detach().clone().requires_grad_())
    allowed = JACOBIAN_MEMORY * budget.caps().max_model_mb * budget.MB
    return max(1, int(allowed // max(saved * copies, 1)))


def which(indices, of: int, what: str) -> str:
    """"input 3 of 8", "inputs 1, 4 of 8" or "all 8 inputs" (1-based) for 0-based indices; `what` is the singular noun."""
    if len(indices) == of > 1:
        return f"all {of} {what}s"
    shown = [str(int(i) + 1) for i in indices]
    listed = ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")
    return f"{what}{'s' if len(shown) > 1 else ''} {listed} of {of}"


def validation_tensors(name: str, data, n: int) -> dict[str, torch.Tensor]:
    """The tensor options probe `name` takes, from the first `n` validation examples of `data` (a Dataset):
    targets for the probes that need the labels, masks for those that score segmentation (when the data has them)."""
    wanted = PROBES.lookup(name, "probe").info.tensors
    extra = {}
    if "targets" in wanted:
        extra["targets"] = data.y_val[:n]
    if "masks" in wanted and data.masks_val is not None:
        extra["masks"] = data.masks_val[:n]
    return extra


def _batch(inputs) -> torch.Tensor:
    """The inputs as a tensor with a batch dimension and at least one example, else a SpecError."""
    try:
        inputs = torch.as_tensor(inputs)
    except (TypeError, ValueError, RuntimeError) as error:
        raise SpecError("inputs", f"expected a batch of inputs as a tensor ({str(error).splitlines()[0][:120]})") from None
    if inputs.dim() == 0 or len(inputs) == 0:
        raise SpecError("inputs", f"expected a batch of at least one input (a tensor whose first dimension counts "
                                  f"examples), got shape {tuple(inputs.shape)}")
    return inputs


def _device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.double().numpy() if value.is_floating_point() else value.numpy()
    return np.asarray(value)


@contextlib.contextmanager
def _probing(model: nn.Module):
    """Eval mode and untouched gradients for the duration of a probe; both restored afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.grad) for p in model.parameters()]
    for p, _ in grads:
        p.grad = None
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training
        for p, grad in grads:
            p.grad = grad
