"""The probe registry and the one entry point `probe(model, inputs, name, **options)`."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
from torch import nn

from explorer.registries import Registry, SpecError

PROBES = Registry("probes")
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
    inputs = torch.as_tensor(inputs).to(device)
    for key in tensors:
        if values[key] is not None:
            values[key] = values[key].to(device)
    with _probing(model):
        result = entry.factory(model, inputs, **values)
    return {key: _numpy(value) for key, value in result.items()}


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
