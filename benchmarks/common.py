"""Timing helpers shared by the benchmarks: the trainer's steady step time and paired ratios."""

from __future__ import annotations

import json
import statistics
import time

import torch
from torch import nn

import explorer


class StepClock:
    """Callback timing the trainer's steady state: from after step 0's log (and its validation)
    to the loss of the last step, i.e. exactly `steps` x (backward, optimizer step, forward)."""

    def __call__(self, event: explorer.Event) -> None:
        if event.kind == "start":
            self.start = time.perf_counter()
        elif event.kind == "log" and event.step == 0:
            self.first = time.perf_counter()

    def seconds_per_step(self, run: explorer.Run) -> float:
        return (self.start + run.history[-1]["time"] - self.first) / run.steps_done


def time_trainer(spec: explorer.ExperimentSpec) -> dict:
    clock = StepClock()
    run = explorer.train(spec, callbacks=[clock])
    return {"wall": run.wall_time / run.steps_done, "step": clock.seconds_per_step(run), "status": run.status}


def paired_ratio(samples: list[dict], baseline: list[dict], key: str = "step") -> float:
    """Median over repeats of time(sample) / time(baseline) measured in the same repeat."""
    return statistics.median(a[key] / b["step"] for a, b in zip(samples, baseline))


def time_plain_loop(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                    steps: int, batch: int) -> dict:
    """Seconds per step of the textbook loop: random batch, cross-entropy (over every position for
    sequences), zero_grad, backward, step."""
    gen = torch.Generator().manual_seed(1)
    start = time.perf_counter()
    for _ in range(steps):
        index = torch.randint(len(x), (batch,), generator=gen)
        out = model(x[index])
        loss = nn.functional.cross_entropy(out.flatten(0, -2), y[index].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - start) / steps
    return {"wall": seconds, "step": seconds, "status": "finished"}


def write_json(path: str | None, results: dict) -> None:
    """Write a benchmark's figures to `path` (when --json was given) and say so."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
        print(f"wrote {path}")
