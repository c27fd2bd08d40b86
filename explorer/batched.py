"""Train several same-shaped specs as one stacked model (seeds, learning rates, tau values, inits...).

Every member is built exactly as `explorer.training.build` builds it (same weights per seed), then
the members' parameters are stacked (`torch.func.stack_module_state`) and one functional forward
(`torch.func.functional_call`) is vmapped over members, each reading its own mini-batch from its
own `_Batches` sampler (seeded like its separate run). The per-member losses are summed for one
backward, so each member's slice of the stacked gradient is its own run's gradient.

The update is each member's own torch optimizer and LR schedule (`build_optimizer` on the
member's module), whose parameters are views into the stacked leaves: any optimizer the trainer
supports gives the same update as a separate run, with no re-implementation to drift from it.
The step loop is `explorer.training.run_steps`, the one `train` runs, with this module's stacked stepper:
logging, validation, divergence detection (pinned to the exact step), broken optimizer statistics, stopping,
live probes and checkpoints are `train`'s, member by member, so `train_batched(specs)[i]` reads like
`train(specs[i])`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from explorer.optim import build_optimizer, is_full_batch
from explorer.registries import SpecError
from explorer.spec import SECTIONS, ExperimentSpec
from explorer.training import (Event, Member, Run, _Batches, _LiveProbes, build, flush_denormals, loss_function,
                               run_steps)

# Fields every member must share: they set tensor shapes, the data, or the step/log cadence.
SHARED_FIELDS = ("train.steps", "train.batch_size", "train.log_every", "train.device")
SHARED_SECTIONS = ("data", "model")


def _fields(spec: ExperimentSpec) -> dict[str, Any]:
    """{"section.param": value} for every value of a spec (names included)."""
    flat = {}
    for section in SECTIONS:
        for key, value in getattr(spec, section).to_dict().items():
            flat[f"{section}.{key}"] = value
    return flat


def _differing(specs: list[ExperimentSpec]) -> list[str]:
    """Spec fields whose value is not the same in every member, in spec order."""
    flat = [_fields(s) for s in specs]
    return [path for path in flat[0] if any(f.get(path) != flat[0][path] for f in flat[1:])]


def _refuse(field: str, specs: list[ExperimentSpec], why: str) -> SpecError:
    values = sorted({repr(s.get(field)) for s in specs}) if field.count(".") == 1 and field != "spec" else []
    shown = f" (values {', '.join(values)})" if values else ""
    return SpecError(field, f"differs across the batched specs{shown}: {why}; batched training needs identical "
                            f"shapes, so every member must share it")


def _check_specs(specs: list[ExperimentSpec]) -> None:
    """Refuse, before building anything, specs whose shapes or cadence cannot be shared."""
    differing = _differing(specs)
    for path in differing:
        if path in SHARED_FIELDS or path.split(".")[0] in SHARED_SECTIONS or path == "topology.name":
            raise _refuse(path, specs, "it changes the data, the model's structure or the step/log cadence")
    if len({is_full_batch(s.optim) for s in specs}) > 1:
        raise _refuse("optim.name", specs, "full-batch and mini-batch optimizers draw different batch shapes")


def _constants(module: nn.Module) -> dict[str, Any]:
    """A module's plain (non-tensor, non-module) public attributes: values baked into its forward."""
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and k != "training" and not isinstance(v, (torch.Tensor, nn.Module))}


def _structure_field(specs: list[ExperimentSpec]) -> str:
    """The spec field to blame for a structural difference: the first differing non-train, non-optim field."""
    candidates = [p for p in _differing(specs) if p.split(".")[0] in ("data", "model", "topology", "init")]
    return candidates[0] if candidates else "spec"


def _check_models(specs: list[ExperimentSpec], models: list[nn.Module]) -> None:
    """Refuse members whose modules differ in structure.

    Parameters, buffers and module types must match, and so must plain constants, which the forward bakes
    in. Values a member may vary (such as a fixed tau, explorer.topology.Chain) live in parameters or
    buffers, which the stacked forward reads member by member.
    """
    first = models[0]
    for model in models[1:]:
        same = ([(n, type(m)) for n, m in first.named_modules()] == [(n, type(m)) for n, m in model.named_modules()]
                and [(n, p.shape, p.dtype) for n, p in first.named_parameters()]
                == [(n, p.shape, p.dtype) for n, p in model.named_parameters()]
                and [(n, b.shape, b.dtype) for n, b in first.named_buffers()]
                == [(n, b.shape, b.dtype) for n, b in model.named_buffers()])
        if not same:
            raise _refuse(_structure_field(specs), specs, "the members' modules, parameters or buffers differ")
    for name, module in first.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            field = "model.norm" if "norm" in specs[0].model.params else "model.name"
            raise SpecError(field, "batched training does not support BatchNorm (its running statistics are "
                                   "updated in place during the forward pass); choose a model without BatchNorm")
    for name, module in first.named_modules():
        base = _constants(module)
        others = [_constants(model.get_submodule(name)) for model in models[1:]]
        keys = {k for other in others for k in set(base) | set(other) if not _same(base.get(k), other.get(k))}
        if keys:
            raise _refuse(_structure_field(specs), specs, f"it changes the constant(s) {', '.join(sorted(keys))} of "
                                                          f"module {name or 'model'!r}, which the stacked forward "
                                                          "cannot vary")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values without a plain equality are treated as different
        return a is b


class _Stacked:
    """The stepper of a stacked batch: one vmapped functional forward over the members' stacked parameters
    (on a separate copy of the module, whose tensors are swapped for stacked ones), one backward of the summed
    losses, and each member's slice of the stacked gradient handed to its own parameters."""

    def __init__(self, base: nn.Module, models: list[nn.Module], loss_fn: Callable):
        self.base, self.models = base, models
        self.params, self.buffers = stack_module_state(models)
        for name, leaf in self.params.items():  # tensor hooks (e.g. tau's gradient averaging) act on the stacked leaf
            for hook in (models[0].get_parameter(name)._backward_hooks or {}).values():
                leaf.register_hook(hook)
        for i, model in enumerate(models):  # each member's own parameters become views into the stacked leaves
            for name, p in model.named_parameters():
                p.data = self.params[name].detach()[i]

        def member_loss(p, b, x, y):
            return loss_fn(functional_call(base, (p, b), (x,)), y)

        self.batched_loss = vmap(member_loss, in_dims=(0, 0, 0, 0))

    def train(self) -> None:
        self.base.train()
        for model in self.models:
            model.train()

    def forward(self, drawn: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return self.batched_loss(self.params, self.buffers, torch.stack([x for x, _ in drawn]),
                                 torch.stack([y for _, y in drawn]))

    def backward(self, loss: torch.Tensor, active: list[int]) -> None:
        for leaf in self.params.values():
            leaf.grad = None
        loss.sum().backward()
        for i in active:
            for name, p in self.models[i].named_parameters():
                p.grad = self.params[name].grad[i]

    def finish(self) -> None:
        for model in self.models:  # unstack: each member keeps its own copy of its weights
            for p in model.parameters():
                p.data = p.data.clone()


def _no_rewire(topology: Any) -> None:
    raise SpecError("rewire", "a member of a batched run cannot be rewired: the members share one stacked model "
                              "whose shapes are fixed; train this spec on its own with explorer.train to rewire it")


def train_batched(
    specs: list[ExperimentSpec],
    callbacks: Iterable[Callable[[Event], Any]] | None = None,
    stop: threading.Event | None = None,
    probes: dict[str, dict] | None = None,
    probe_every: int = 100,
    probe_inputs: int = 8,
) -> list[Run]:
    """Train same-shaped specs together as one vmapped model; one `Run` per spec, as `train(spec)` would give.

    Members may differ in values that keep every tensor shape: train.seed, train.diverge_factor, the
    optimizer and its parameters (within full-batch or mini-batch optimizers), init parameters, topology
    values (e.g. tau). Data, model, topology name, steps, batch size, log cadence and device must match
    (SpecError naming the field otherwise); BatchNorm models are refused. The step loop is `train`'s
    (`explorer.training.run_steps`): a member that diverges, or whose optimizer's statistics break, is marked
    at the exact step and frozen there, like its separate run; the others go on. Callbacks get each member's
    events (with that member's Run); StopTraining from a callback, or `stop`, stops all. `probes`,
    `probe_every` and `probe_inputs` run on each member as `train` runs them, and each member's
    `Run.checkpoint()` resumes with `train(spec, resume_from=...)`. `Run.rewire` refuses (SpecError naming
    `rewire`): a member's design cannot change inside the stacked model.
    """
    specs = list(specs)
    if not specs:
        return []
    _check_specs(specs)
    callbacks = list(callbacks or [])
    built = [build(spec) for spec in specs]
    models = [model for model, _ in built]
    flush_denormals(models[0])
    _check_models(specs, models)
    live = [_LiveProbes(probes, probe_every, data, probe_inputs) if probes else None for _, data in built]
    device = next(models[0].parameters()).device
    cfg = specs[0].train
    stepper = _Stacked(build(specs[0])[0], models, loss_function(built[0][1].task))
    losses = torch.full((len(specs), cfg.steps + 1), float("nan"), device=device)
    start = time.perf_counter()
    members = []
    for i, (spec, (model, data)) in enumerate(zip(specs, built)):
        optimizer, schedule = build_optimizer(model, spec.optim, cfg.steps)
        batches = _Batches(data, cfg.batch_size, is_full_batch(spec.optim), spec.train.seed + 1)
        run = Run(spec, model, data, str(device), initial_spec=spec)
        member = Member(run, optimizer, schedule, batches, losses[i], callbacks, live[i])
        member.start = start
        run._rewire = _no_rewire
        members.append(member)
    run_steps(stepper, members, losses, stop)
    return [member.run for member in members]
