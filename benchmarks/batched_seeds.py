"""Speed-up of explorer.batched.train_batched over sequential explorer.train runs, next to plain PyTorch's.

1. 8 seeds of the tau paper's MLP-ResNet preset (tau-fig1-1/sqrt(L)) at depth 30, width 128, batch 256:
   wall time of train_batched on the 8 vs 8 sequential explorer.train runs (build, training, the
   validation at step 0 and at the end, all included on both sides).
2. explorer.sweep of the 8 seeds on a local pool of 2 workers vs 1 (in-process, sequential).
3. The same as 1 for a hand-written PyTorch reference: 8 sequential textbook loops vs one vmapped loop
   (torch.func.stack_module_state + functional_call), so the ratio in 1 sits next to what plain
   PyTorch achieves on this machine.

Runs are interleaved across repeats (order alternating) and the median of the per-repeat ratios is
reported; torch keeps its default thread count. Run: python benchmarks/batched_seeds.py [--steps N] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

import explorer
from common import write_json
from explorer.batched import train_batched
from train_throughput import PlainResNet

MEMBERS, DEPTH, BATCH = 8, 30, 256


def make_specs(steps: int, members: int = MEMBERS) -> list[explorer.ExperimentSpec]:
    base = explorer.preset("tau-fig1-1/sqrt(L)").with_values(
        {"model.depth": DEPTH, "train.steps": steps, "train.log_every": steps})
    return [base.with_values({"train.seed": seed}) for seed in range(members)]


def plain_models(x, y, width):
    torch.manual_seed(0)
    return [PlainResNet(x.shape[1], int(y.max()) + 1, width, DEPTH) for _ in range(MEMBERS)]


def time_plain_sequential(x, y, width, steps) -> float:
    """8 textbook loops one after the other: random batch, cross-entropy, zero_grad, backward, SGD step."""
    start = time.perf_counter()
    for seed, model in enumerate(plain_models(x, y, width)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            index = torch.randint(len(x), (BATCH,), generator=gen)
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return time.perf_counter() - start


def time_plain_vmapped(x, y, width, steps) -> float:
    """The same 8 models stacked: one vmapped forward, summed losses, one backward, one SGD step."""
    start = time.perf_counter()
    models = plain_models(x, y, width)
    params, buffers = stack_module_state(models)
    base = PlainResNet(x.shape[1], int(y.max()) + 1, width, DEPTH).to("meta")
    optimizer = torch.optim.SGD(list(params.values()), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def member_loss(p, b, xb, yb):
        return nn.functional.cross_entropy(functional_call(base, (p, b), (xb,)), yb)

    batched = vmap(member_loss)
    for _ in range(steps):
        index = torch.randint(len(x), (MEMBERS, BATCH), generator=gen)
        loss = batched(params, buffers, x[index], y[index]).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def time_sequential(steps) -> float:
    start = time.perf_counter()
    for spec in make_specs(steps):
        assert explorer.train(spec).status == "finished"
    return time.perf_counter() - start


def time_batched(steps) -> float:
    start = time.perf_counter()
    assert all(run.status == "finished" for run in train_batched(make_specs(steps)))
    return time.perf_counter() - start


def keep_freed_memory() -> None:
    """glibc: serve big tensors from the heap and never trim it, so fresh multi-MB tensors do not page-fault."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD


def time_sweep(steps: int, workers: int) -> float:
    """explorer.sweep over the 8 seeds (a pool of worker processes when workers > 1, its start-up included), into
    a scratch store."""
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        start = time.perf_counter()
        explorer.sweep(make_specs(steps)[0], seeds=MEMBERS, workers=workers, progress=False,
                       store=explorer.RunStore(home))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions (median reported)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="glibc mallopt before any timing (both sides): no mmap / heap trimming for big tensors")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.keep_freed_memory:
        keep_freed_memory()

    _, data = explorer.build(make_specs(args.steps)[0])  # warms the dataset cache; the plain loops use the same tensors
    x, y, width = data.x_train, data.y_train, make_specs(1)[0].model.width
    pairs = {
        "explorer": {"sequential": time_sequential, "batched": time_batched},
        "pool": {"sequential": lambda steps: time_sweep(steps, workers=1),
                 "batched": lambda steps: time_sweep(steps, workers=2)},
        "plain": {"sequential": lambda steps: time_plain_sequential(x, y, width, steps),
                  "batched": lambda steps: time_plain_vmapped(x, y, width, steps)},
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {MEMBERS} members, depth {DEPTH}, "
          f"width {width}, batch {BATCH}, {args.steps} steps", flush=True)
    samples = {group: {side: [] for side in jobs} for group, jobs in pairs.items()}
    for group, jobs in pairs.items():
        for side in jobs:  # warm-up
            jobs[side](2)
        for repeat in range(args.repeats):
            for side in (("sequential", "batched") if repeat % 2 == 0 else ("batched", "sequential")):
                samples[group][side].append(jobs[side](args.steps))
                print(f"  repeat {repeat + 1}/{args.repeats} {group:8s} {side:10s} {samples[group][side][-1]:7.2f} s",
                      flush=True)

    results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "members": MEMBERS, "depth": DEPTH,
               "width": width, "batch": BATCH, "steps": args.steps, "repeats": args.repeats,
               "keep_freed_memory": args.keep_freed_memory}
    print(f"\n{MEMBERS} seeds, MLP-ResNet depth {DEPTH}, width {width}; {args.steps} steps, median of {args.repeats}")
    for group, label in (("explorer", "explorer.train x8 vs train_batched"),
                         ("pool", "explorer.sweep, 1 vs 2 local workers"),
                         ("plain", "plain PyTorch x8 vs vmapped")):
        s = samples[group]
        speedup = statistics.median(a / b for a, b in zip(s["sequential"], s["batched"]))
        results[group] = {"sequential_s": statistics.median(s["sequential"]), "batched_s": statistics.median(s["batched"]),
                          "speedup": speedup, "samples_s": s}
        print(f"   {label:36s} {results[group]['sequential_s']:7.2f} s vs {results[group]['batched_s']:7.2f} s  "
              f"speed-up {speedup:5.2f}x")
    print("   target: train_batched >= 3x over sequential runs on 2 CPU cores; the plain row shows what stacking "
          "alone achieves here.")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
