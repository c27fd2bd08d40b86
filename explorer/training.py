"""Build a spec into (model, data) and train it: events out, no UI in here.

The step loop never forces a host-device sync: per-step losses are written into a
device buffer and read at the logging interval, where divergence is also checked (and
pinned to the exact step it happened at). A diverged run is a result, not an error.

It is one module because the build, the step loop (`run_steps`, shared with
explorer.batched), the rewiring and the checkpoint format read and write the same run state.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from explorer import budget
from explorer.data import Dataset, build_dataset, loss_function
from explorer.init import initialize
from explorer.nn.models import build_model
from explorer.nn.transformer import Attention
from explorer.optim import build_optimizer, is_full_batch
from explorer.registries import SpecError, quote
from explorer.spec import ExperimentSpec
from explorer.topology import TOPOLOGIES, Topology


MAX_REWIRES = 16  # rewires one run may make (each builds the model's topology afresh and is kept in its record)


class StopTraining(Exception):
    """Raise from a callback to stop a run cleanly between steps (status "stopped")."""


@dataclass
class Event:
    """What a callback receives: kind is "start", "log" or "end"; `probes` holds the probe results of a log
    event at which probes ran ({name: {key: array}}), else is empty."""

    kind: str
    step: int
    metrics: dict[str, float]
    run: Run
    probes: dict[str, dict] = field(default_factory=dict)


@dataclass
class Run:
    """A training run: its spec, model, status ("running", "finished", "diverged", "stopped") and history.

    `spec` is the design the model has now; a run rewired while it trained (`rewire`) started from
    `initial_spec` and lists each change in `rewires` ({"step": N, "topology": the whole topology section
    from then on}), so the stored run can be reproduced.
    """

    spec: ExperimentSpec
    model: nn.Module
    data: Dataset
    device: str
    status: str = "running"
    history: list[dict[str, float]] = field(default_factory=list)
    steps_done: int = 0
    diverged_at: int | None = None
    diverged_loss: float | None = None  # the loss at `diverged_at` (inf or nan when it was not finite)
    wall_time: float = 0.0
    probe_history: list[dict[str, Any]] = field(default_factory=list)  # {"step", "name", "result"}, in order
    rewires: list[dict[str, Any]] = field(default_factory=list)  # {"step", "topology"}, in order
    initial_spec: ExperimentSpec | None = None  # the spec it was started with (None: the same as `spec`)
    _state: Callable[[], dict] | None = field(default=None, repr=False)
    _rewire: Callable[[dict], None] | None = field(default=None, repr=False)

    def rewire(self, topology: dict[str, Any]) -> None:
        """Change the running model's topology, keeping every block's weights: call it from a callback during
        a "log" event at step N. The loss at step N and the update it drives use the design before; the
        forward pass of step N + 1 runs the new one. New learnable coefficients join the optimizer (with the
        run's learning rate settings), removed ones leave it.

        `topology` is a topology section ({"name": "shortcuts", "shortcuts": "0:2,0:3"}); without "name", or
        with the current one, the parameters it leaves out keep their current values. A design that is not
        valid, or that would change the blocks (another block count, e.g. a Transformer split into attention
        and MLP blocks), raises SpecError naming `topology`; the run is then unchanged. A Transformer rewired to
        a design whose blocks take separate query, key and value inputs (DCA) gives each attention a key and a
        value norm, copies of its trained norm: DCA's mixes start as the plain sum, so the rewired model computes
        the function it had (DCA Sec. 5, "adding DCA to a pre-trained model does not alter its function"). The
        change is appended to `rewires` and `spec` becomes the new design.

        One rewire per logged step: a second one at the same step replaces the first (both read before the
        step's update, so only the last is ever trained). A run makes at most MAX_REWIRES rewires; one more is
        a SpecError naming `rewire`.
        """
        if self._rewire is None:
            raise RuntimeError("Run.rewire works only from a callback during a \"log\" event of explorer.train")
        self._rewire(topology)

    def checkpoint(self) -> dict[str, Any]:
        """Everything needed to resume this run where it stands (tensors, numbers, lists and dicts only, so it
        saves with torch.save and loads with weights_only=True). Valid in "log" and "end" events."""
        if self._state is None:
            raise RuntimeError("this run has no training state to checkpoint (it is not being trained)")
        return self._state()

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def summary(self) -> dict[str, Any]:
        """A JSON-able digest: status, steps, final losses, the history and the spec (non-finite -> None)."""
        final = self.final
        return {
            "status": self.status,
            "steps": self.steps_done,
            "diverged_at": self.diverged_at,
            "diverged_loss": finite(self.diverged_loss),
            "final_loss": finite(final.get("loss")),
            "final_val_loss": finite(final.get("val_loss")),
            "final_val_accuracy": finite(final.get("val_accuracy")),
            "wall_time": round(self.wall_time, 4),
            "steps_per_second": round(self.steps_done / self.wall_time, 2) if self.wall_time > 0 else None,
            "device": self.device,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "history": [{k: finite(v) for k, v in row.items()} for row in self.history],
            "spec": self.spec.to_dict(),
            **({"initial_spec": self.initial_spec.to_dict(), "rewires": [dict(r) for r in self.rewires]}
               if self.rewires else {}),
        }


def finite(value):
    """JSON-safe number: ints stay ints, non-finite floats become None."""
    if value is None or isinstance(value, int):
        return value
    value = float(value)
    return value if math.isfinite(value) else None


def resolve_device(name: str) -> torch.device:
    """"auto" -> CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build(spec: ExperimentSpec, device: str | torch.device | None = None) -> tuple[nn.Module, Dataset]:
    """The initialised model and its dataset, both on the spec's device (or `device`); SpecError first when
    the spec cannot run on this machine (a stored run's CUDA, data folder or registry entry) or they would
    take more memory than EXPLORER_MAX_DATA_MB / EXPLORER_MAX_MODEL_MB allow (explorer.budget)."""
    spec.check_runnable(device)
    budget.check(spec)
    target = resolve_device(spec.train.device) if device is None else torch.device(device)
    data = build_dataset(spec.data)
    model = build_model(spec, data.dims)
    initialize(model, spec.init, spec.train.seed)
    if _ONE_ULP.get():
        nudge_one_ulp(model)
    return model.to(target), data.to(target)


_ONE_ULP: contextvars.ContextVar[bool] = contextvars.ContextVar("one_ulp", default=False)


@contextlib.contextmanager
def float_perturbation() -> Iterator[None]:
    """Within the block, every model `build` makes starts from its initialisation with each floating-point
    parameter moved one unit in the last place (`nudge_one_ulp`): a change below any init's meaning, as another
    CPU's rounding would make, to measure how far a run's result depends on float rounding (a chaotic run)."""
    token = _ONE_ULP.set(True)
    try:
        yield
    finally:
        _ONE_ULP.reset(token)


def perturbing() -> bool:
    """Whether models built here start one ulp off (inside `float_perturbation`)."""
    return _ONE_ULP.get()


@torch.no_grad()
def nudge_one_ulp(model: nn.Module) -> None:
    """Move every nonzero floating-point parameter of `model` to the next representable value towards +inf (one
    ulp); exact zeros stay zero (a zero in an initialisation is structural: a zero head, an identity's off-diagonal)."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            up = torch.nextafter(parameter, torch.full_like(parameter, math.inf))
            parameter.copy_(torch.where(parameter == 0, parameter, up))


def flush_denormals(model: nn.Module) -> None:
    """On CPU, flush denormal floats to zero: the vanishing gradients of a saturated or diverging network
    are denormals, which x86 CPUs handle about 30x slower (seen: 2 s vs 0.06 s per step). Process-wide."""
    first = next(model.parameters(), None)
    if first is None or first.device.type == "cpu":
        torch.set_flush_denormal(True)


class _Batches:
    """Shuffled mini-batches drawn on the data's device, epoch by epoch (no host round trip)."""

    def __init__(self, data: Dataset, batch_size: int, full: bool, seed: int):
        self.x, self.y = data.x_train, data.y_train
        self.n = len(self.x)
        self.size = self.n if full else min(batch_size, self.n)
        self.gen = torch.Generator(device=self.x.device).manual_seed(seed)
        self.order, self.pos = None, self.n
        self.before: tuple = (None, self.n, None)  # (order, pos, generator state) before the last draw

    def state(self) -> dict[str, Any]:
        """The sampler as it was before the batch last drawn (a resumed run draws that batch again)."""
        order, pos, generator = self.before
        return {"order": order, "pos": pos, "generator": generator if generator is not None else self.gen.get_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        order = state["order"]
        self.order = None if order is None else order.to(self.x.device)
        self.pos = state["pos"]
        self.gen.set_state(state["generator"])

    def __next__(self):
        self.before = (self.order, self.pos, None)  # the generator only moves at a new epoch
        if self.size == self.n:
            return self.x, self.y
        if self.pos + self.size > self.n:
            self.before = (self.order, self.pos, self.gen.get_state())
            self.order = torch.randperm(self.n, generator=self.gen, device=self.x.device)
            self.pos = 0
        index = self.order[self.pos:self.pos + self.size]
        self.pos += self.size
        return self.x[index], self.y[index]


@torch.no_grad()
def evaluate(model: nn.Module, data: Dataset, split: str = "val") -> dict[str, float]:
    """Loss (and accuracy, per example or per token, for classification and language modelling) on a whole split."""
    x, y = data.split(split)
    was_training = model.training
    model.eval()
    out = model(x)
    model.train(was_training)
    metrics = {f"{split}_loss": loss_function(data.task)(out, y)}
    if data.task != "regression":
        metrics[f"{split}_accuracy"] = (out.argmax(-1) == y).float().mean()
    return {k: float(v) for k, v in metrics.items()}


class _LiveProbes:
    """Probes run on a fixed validation batch at the logged steps, every `every` steps (and at the end)."""

    def __init__(self, probes: dict[str, dict], every: int, data: Dataset, inputs: int):
        from explorer.probes import PROBES, validation_tensors

        if every < 1:
            raise SpecError("probe_every", f"must be a positive number of steps, got {every}")
        for name in probes:
            PROBES.lookup(name, "probes")
        self.probes, self.every, self.next = probes, every, 0
        self.x = data.x_val[:inputs]
        self.extra = {name: validation_tensors(name, data, inputs) for name in probes}

    def due(self, step: int, last: bool) -> bool:
        return step >= self.next or last

    def run(self, model: nn.Module, step: int) -> dict[str, dict]:
        from explorer.probes import probe

        self.next = (step // self.every + 1) * self.every
        return {name: probe(model, self.x, name, **{**self.extra[name], **(options or {})})
                for name, options in self.probes.items()}


def rewired_spec(spec: ExperimentSpec, topology: Any) -> ExperimentSpec:
    """`spec` with its topology section replaced by `topology` (validated as any spec is). Without "name", or
    with the current one, the parameters `topology` leaves out keep their current values."""
    if not isinstance(topology, Mapping):
        raise SpecError("topology", f"expected a topology section such as {{'name': 'shortcuts', 'shortcuts': "
                                    f"'0:2'}}, got {quote(topology)}")
    current = spec.topology.to_dict()
    section = dict(topology)
    if section.get("name", current["name"]) == current["name"]:
        section = {**current, **section}
    raw = spec.to_dict()
    raw["topology"] = section
    return ExperimentSpec.from_dict(raw)


def _topologies(model: nn.Module) -> list[Topology]:
    return [m for m in model.modules() if isinstance(m, Topology)]


def _rewired_topologies(model: nn.Module, spec: ExperimentSpec, data: Dataset, seed: int) -> list[Topology]:
    """The topology modules `spec` builds for `model`, in model order; SpecError naming `topology` when the
    design would change anything but the topologies (the blocks, their count, the heads)."""
    fresh = build_model(spec, data.dims)
    split = {f"{name}.{norm}." for name, m in model.named_modules() if isinstance(m, Attention) and m.norm_k is m.norm
             for norm in ("norm_k", "norm_v")}  # the key and value norms a split (see _split_norms) adds

    def shapes(net: nn.Module, added=()) -> dict[str, tuple]:
        inside = [f"{name}." for name, m in net.named_modules() if isinstance(m, Topology)]
        tensors = {**dict(net.named_parameters()), **dict(net.named_buffers())}
        return {"modules": inside, **{name: (tuple(t.shape), t.dtype) for name, t in tensors.items()
                                     if not any(name.startswith(prefix) for prefix in (*inside, *added))}}

    if shapes(fresh, split if _separate_inputs(spec) else ()) != shapes(model):
        raise SpecError("topology", f"{spec.topology.name} would change the model's blocks (their number or their "
                                    "shapes), which a running model keeps; rewire it to a topology with the same "
                                    "blocks, or start a new run with this design")
    gen = torch.Generator().manual_seed(seed)  # as explorer.init draws the gates of a newly built model
    tops = _topologies(fresh)
    for top in tops:
        top.init_gates(gen)
    return tops


def _separate_inputs(spec: ExperimentSpec) -> bool:
    """Whether `spec`'s topology gives each attention separate query, key and value inputs (DCA)."""
    return TOPOLOGIES[spec.topology.name].info.separate_qkv_inputs


def _split_norms(model: nn.Module) -> list[nn.Module]:
    """Give every attention whose query, key and value inputs share one norm (a Transformer built for a topology
    without separate inputs) a key norm and a value norm of its own, each a copy of its trained norm, as a design
    with separate inputs (DCA) builds them; the new norms, in model order. The attention computes what it did: on
    one input the three norms agree."""
    added = []
    for attention in (m for m in model.modules() if isinstance(m, Attention) and m.norm_k is m.norm):
        attention.norm_k, attention.norm_v = copy.deepcopy(attention.norm), copy.deepcopy(attention.norm)
        added += [attention.norm_k, attention.norm_v]
    return added


def _swap_topologies(model: nn.Module, optimizer, schedule, spec: ExperimentSpec, new: list[Topology]) -> None:
    """Put `new` in place of the model's topology modules; their coefficients leave the optimizer and the new
    ones join it, as build_optimizer would group them, at the learning rate the schedule gives now. A design with
    separate query, key and value inputs splits the attentions' shared norms (`_split_norms`): the copies join
    the optimizer too."""
    old = _topologies(model)
    device = next(model.parameters()).device
    new = [top.to(device) for top in new]
    replacement = {id(o): n for o, n in zip(old, new)}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in replacement:
                setattr(parent, name, replacement[id(child)])
    gone = [p for top in old for p in top.parameters()]
    ids = {id(p) for p in gone}
    for group in optimizer.param_groups:
        group["params"] = [p for p in group["params"] if id(p) not in ids]
    for p in gone:
        optimizer.state.pop(p, None)
    holder = nn.ModuleList(new + (_split_norms(model) if _separate_inputs(spec) else []))
    if not any(True for _ in holder.parameters()):
        return
    extra, extra_schedule = build_optimizer(holder, spec.optim, 1)
    factor = schedule.lr_lambdas[0]
    for group in extra.param_groups:
        if group["params"]:
            group["lr"] = group["initial_lr"] * factor(schedule.last_epoch)
            optimizer.add_param_group(group)
            schedule.base_lrs.append(group["initial_lr"])
            schedule.lr_lambdas.append(factor)
    optimizer.state.update(extra.state)
    schedule._last_lr = [group["lr"] for group in optimizer.param_groups]


def _check_schedule(rewire: dict[int, Any], steps: int, log_every: int) -> dict[int, Any]:
    """The `rewire` argument of train: every key a logged step of the run."""
    if not isinstance(rewire, Mapping):
        raise SpecError("rewire", f"expected {{step: topology section}}, got {quote(rewire)}")
    if len(rewire) > MAX_REWIRES:
        raise SpecError("rewire", f"{len(rewire)} rewires asked for, more than the {MAX_REWIRES} one run may make; "
                                  f"keep at most {MAX_REWIRES} (or split the design's changes over new runs)")
    for step in rewire:
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps \
                or not (step % log_every == 0 or step == steps):
            raise SpecError("rewire", f"step {quote(step)} is not a logged step of this run; a rewire happens at a "
                                      f"log event: use a multiple of train.log_every={log_every} (or the last "
                                      f"step, {steps}) between 0 and {steps}")
    return dict(rewire)


def log_step(run: Run, losses: torch.Tensor, checked: int, step: int, diverge_factor: float, start: float) -> dict:
    """Write step `step` into `run` (the one logging path of the step loop, `run_steps`): the losses of steps
    `checked`..`step` (read from the device buffer `losses` only here) are checked for divergence (not finite,
    or above `diverge_factor` x the first loss), which pins the run's status, `diverged_at` and
    `diverged_loss` to the exact step; the row (step, loss, seconds since `start`, and the validation metrics
    while the run is sane) is appended to its history and returned."""
    window = losses[checked:step + 1].cpu()
    first = float(losses[0])
    bad = ~torch.isfinite(window) | (window > diverge_factor * max(first, 1e-12))
    if bool(bad.any()) and run.status != "diverged":
        run.diverged_at = checked + int(bad.nonzero()[0])
        run.diverged_loss = float(losses[run.diverged_at])
        run.status = "diverged"
    row = {"step": step, "loss": float(losses[step]), "time": time.perf_counter() - start}
    if run.status != "diverged":
        row.update(evaluate(run.model, run.data, "val"))
    run.history.append(row)
    run.steps_done = step
    return row


class Member:
    """One run inside the step loop (`run_steps`): its Run, sampler, optimizer and LR schedule, its row of the
    loss buffer, its live probes and its rewires, with the checkpoint that resumes it. `train` drives one member;
    `explorer.batched` drives several that share one stacked forward."""

    def __init__(self, run: Run, optimizer, schedule, batches: _Batches, losses: torch.Tensor,
                 callbacks: list[Callable[[Event], Any]], live: _LiveProbes | None = None,
                 planned: dict[int, Any] | None = None):
        self.run, self.optimizer, self.schedule, self.batches, self.losses = run, optimizer, schedule, batches, losses
        self.callbacks, self.live, self.planned = callbacks, live, planned or {}
        self.step = 0  # the step it stands at (the loop's, until it leaves the loop)
        self.checked = 0  # losses[:checked] are known to be sane
        self.active = True  # still updated by the loop (not diverged)
        self.start = time.perf_counter()
        self.pending: list[tuple[ExperimentSpec, list[Topology]]] = []  # rewires made at this log, swapped after it
        self.logging = False  # inside a log event, where Run.rewire is allowed
        run._state = self.state
        run._rewire = self.rewire_now

    def emit(self, kind: str, step: int, metrics: dict[str, float], probed: dict | None = None) -> None:
        event = Event(kind, step, metrics, self.run, probed or {})
        for callback in self.callbacks:
            callback(event)

    def add_rewire(self, record: dict[str, Any], live: bool = True) -> None:
        """Rewire at record["step"]; `live` (not a resumed run's record) replaces a pending rewire of the same
        step and holds the run to MAX_REWIRES."""
        run = self.run
        replace = live and bool(self.pending) and run.rewires[-1]["step"] == int(record["step"])
        if live and not replace and len(run.rewires) >= MAX_REWIRES:
            raise SpecError("rewire", f"this run has been rewired {len(run.rewires)} times, the most one run may "
                                      "be; start a new run to keep designing")
        new_spec = rewired_spec(run.spec, record["topology"])
        tops = _rewired_topologies(run.model, new_spec, run.data, run.spec.train.seed)
        if replace:
            self.pending.pop()
            run.rewires.pop()
        self.pending.append((new_spec, tops))
        run.rewires.append({"step": int(record["step"]), "topology": new_spec.topology.to_dict()})
        run.spec = new_spec

    def apply_pending(self) -> None:
        for new_spec, tops in self.pending:
            _swap_topologies(self.run.model, self.optimizer, self.schedule, new_spec, tops)
        self.pending.clear()

    def rewire_now(self, topology: dict[str, Any]) -> None:
        if not self.logging:
            raise RuntimeError("Run.rewire works only from a callback during a \"log\" event of explorer.train")
        self.add_rewire({"step": self.step, "topology": topology})

    def state(self) -> dict[str, Any]:
        run, step = self.run, self.step
        return {"model": run.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "batches": self.batches.state(), "step": step,
                "checked": min(self.checked, step), "losses": self.losses[:step].cpu(),
                "history": [row for row in run.history if row["step"] < step], "wall_time": run.wall_time,
                "initial_topology": run.initial_spec.topology.to_dict(), "rewires": [dict(r) for r in run.rewires],
                "applied": len(run.rewires) - len(self.pending)}

    def resume(self, state: dict[str, Any]) -> int:
        """Load a Run.checkpoint() (its rewires first, then the training state); the step to continue from."""
        restored = list(state.get("rewires", [])) if isinstance(state, dict) else []
        if restored:
            applied = int(state.get("applied", len(restored)))
            for k, record in enumerate(restored):
                self.add_rewire(record, live=False)
                if k < applied:
                    self.apply_pending()
        self.step, self.checked = _restore(state, self.run, self.run.model, self.optimizer, self.schedule,
                                           self.batches, self.losses)
        self.start -= state["wall_time"]
        return self.step

    def log(self, step: int, notify: bool = True) -> bool:
        """Record step `step` (probes and planned rewires included); False when the run has diverged by then."""
        run = self.run
        row = log_step(run, self.losses, self.checked, step, run.spec.train.diverge_factor, self.start)
        self.checked = step + 1
        probed = {}
        if self.live is not None and run.status != "diverged" and self.live.due(step, step == run.spec.train.steps):
            probed = self.live.run(run.model, step)
            run.probe_history.extend({"step": step, "name": name, "result": result} for name, result in probed.items())
        run.wall_time = time.perf_counter() - self.start
        self.logging = True
        try:
            done = any(r["step"] == step for r in run.rewires)  # a resumed run has it from its checkpoint
            if step in self.planned and run.status != "diverged" and not done:
                self.add_rewire({"step": step, "topology": self.planned[step]})
            if notify:
                self.emit("log", step, row, probed)
        finally:
            self.logging = False
        return run.status != "diverged"


class _Single:
    """The stepper of one model: its forward on its batch, and its backward."""

    def __init__(self, model: nn.Module, loss_fn: Callable):
        self.model, self.loss_fn = model, loss_fn

    def train(self) -> None:
        self.model.train()

    def forward(self, drawn: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        (x, y), = drawn
        return self.loss_fn(self.model(x), y)

    def backward(self, loss: torch.Tensor, active: list[int]) -> None:
        loss.backward()

    def finish(self) -> None:
        pass


def run_steps(stepper, members: list[Member], losses: torch.Tensor, stop: threading.Event | None,
              step: int = 0) -> None:
    """The step loop of `train` (one member) and `explorer.batched` (a stacked batch), from `step` to the end.

    Each step every member draws its batch, `stepper.forward` gives their losses (one per row of the device
    buffer `losses`, a scalar for one member), and every logged step (a multiple of train.log_every, and the
    last) logs each active member. A member that diverges leaves the loop there (the others go on); so does
    one whose optimizer cannot factorise its statistics (a LinAlgError, as SOAP's eigh on non-finite ones):
    its update is undefined, so it is diverged at the next step, whose loss stays NaN. `stop`, or StopTraining
    from a callback, stops every member between steps. `stepper` also gives `train()`, `backward(loss, active)`
    (every active member's gradient in place, each optimizer's own) and `finish()`.
    """
    cfg = members[0].run.spec.train
    for member in members:
        member.step = step
        member.emit("start", step, {})
    stepper.train()
    try:
        while True:
            loss = stepper.forward([next(member.batches) for member in members])
            losses[:, step] = loss.detach()
            active = [member for member in members if member.active]
            if step % cfg.log_every == 0 or step == cfg.steps:
                for member in active:
                    member.active = member.log(step)
                active = [member for member in active if member.active]
            if step == cfg.steps:
                for member in active:
                    member.run.status = "finished"
                break
            if not active:
                break
            if stop is not None and stop.is_set():
                raise StopTraining
            for member in active:
                member.apply_pending()
                member.optimizer.zero_grad(set_to_none=True)
            stepper.backward(loss, [i for i, member in enumerate(members) if member.active])
            broken = []
            for member in active:
                try:
                    member.optimizer.step()
                except torch.linalg.LinAlgError:
                    broken.append(member)
                    continue
                member.schedule.step()
            step += 1
            for member in active:
                member.step = step
            for member in broken:
                member.active = False
                member.log(step)
            if broken and not any(member.active for member in members):
                break
    except StopTraining:
        for member in members:
            if member.run.status == "running":
                member.run.status = "stopped"
                if not member.run.history or member.run.history[-1]["step"] != step:
                    member.log(step, notify=False)
    for member in members:
        member.apply_pending()  # the model a run ends with is the design `run.spec` says
    stepper.finish()
    for member in members:
        if member.run.status != "diverged":  # a diverged run keeps the time of the log that found it
            member.run.wall_time = time.perf_counter() - member.start
        member.emit("end", member.run.steps_done, member.run.final)
        member.run._rewire = None  # an ended run keeps its checkpoint only: no rewire, no listeners, no probes
        member.callbacks, member.live = [], None


def train(
    spec: ExperimentSpec,
    callbacks: Iterable[Callable[[Event], Any]] | None = None,
    stop: threading.Event | None = None,
    probes: dict[str, dict] | None = None,
    probe_every: int = 100,
    probe_inputs: int = 8,
    resume_from: dict[str, Any] | None = None,
    rewire: dict[int, dict[str, Any]] | None = None,
) -> Run:
    """Train `spec` to the end, to divergence, or until `stop` is set / a callback raises StopTraining.

    `probes` ({name: options}, see explorer.probes) run every `probe_every` steps, at logged steps, on the
    first `probe_inputs` validation examples; their results land in `run.probe_history` and in the log
    event's `probes`, so a listener can redraw a spectrum or a heatmap while the run trains.
    `resume_from` (a `Run.checkpoint()`) continues a stopped or interrupted run: on CPU the result is the
    same as a run that never stopped, rewires included.
    `rewire` ({step: topology section}) rewires the run at those steps (each a logged step), as a callback
    calling `Run.rewire` at that step's log event would.
    """
    callbacks = list(callbacks or [])
    planned = _check_schedule(rewire or {}, spec.train.steps, spec.train.log_every)
    if isinstance(resume_from, dict) and resume_from.get("rewires"):  # it starts from the design it started with
        spec = rewired_spec(spec, resume_from.get("initial_topology", spec.topology.to_dict()))
    model, data = build(spec)
    flush_denormals(model)
    live = _LiveProbes(probes, probe_every, data, probe_inputs) if probes else None
    device = next(model.parameters()).device
    cfg = spec.train
    optimizer, schedule = build_optimizer(model, spec.optim, cfg.steps)
    batches = _Batches(data, cfg.batch_size, is_full_batch(spec.optim), cfg.seed + 1)
    run = Run(spec, model, data, str(device), initial_spec=spec)
    losses = torch.full((1, cfg.steps + 1), float("nan"), device=device)
    member = Member(run, optimizer, schedule, batches, losses[0], callbacks, live, planned)
    step = member.resume(resume_from) if resume_from is not None else 0
    run_steps(_Single(model, loss_function(data.task)), [member], losses, stop, step)
    return run


class CheckpointMismatch(ValueError):
    """A checkpoint that loads but does not fit the run it should resume (missing parts, other shapes)."""


def _restore(state: dict[str, Any], run: Run, model, optimizer, schedule, batches: _Batches, losses) -> tuple[int, int]:
    """Load a Run.checkpoint() into a freshly built run; (step to continue from, losses known sane)."""
    try:
        step = int(state["step"])
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointMismatch(f"no training step in it ({type(error).__name__})") from None
    if step > len(losses) - 1:
        raise SpecError("train.steps", f"the checkpoint is at step {step}, beyond this spec's {len(losses) - 1} steps")
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        batches.load_state(state["batches"])
        losses[:step] = state["losses"].to(losses.device)
        run.history = [dict(row) for row in state["history"]]
        checked = int(state["checked"])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as error:
        raise CheckpointMismatch(f"it does not fit this run: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}") from None
    run.steps_done = step
    return step, checked


def out_of_memory(error: BaseException) -> str | None:
    """A one-line reason when `error` is the system or the GPU refusing memory (MemoryError, torch's
    "can't allocate memory" / "out of memory" RuntimeError), else None."""
    refused = isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and any(words in str(error) for words in ("allocate memory", "out of memory")))
    if not refused:
        return None
    return ("training ran out of memory: this machine could not give the run what it asked for; lower "
            "model.width, model.depth, train.batch_size or the data size, or lower EXPLORER_MAX_MODEL_MB "
            "(CLI: --max-model-mb) so that such runs are refused before they start")
