"""Checks and timings on a CUDA machine: every path that runs on CPU also runs on the GPU.

1. Each topology on the MLP-ResNet and on the GPT, and one preset per model family, trained with
   train.device=auto (which must pick CUDA): the run's device, its status, and its logged losses against
   the same spec trained on the CPU (the same seed: the largest relative difference; TF32 and kernel
   order make them differ slightly, a diverging run may differ a lot).
2. Every probe on each CUDA-trained model: it returns numbers (on the CPU) or refuses in one line.
3. Throughput on the GPU: explorer.train against a plain PyTorch loop of the same network (the tau paper's
   MLP-ResNet, depth 100, width 128, batch 256), interleaved repeats, the median of the paired ratios.
4. With --store DIR: two CUDA-trained runs recorded with checkpoints into the store at DIR (EXPLORER_HOME),
   for opening on a CPU machine.

Run on a CUDA machine: python benchmarks/gpu_check.py [--json out.json] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import torch

import explorer
from common import write_json

TOPOLOGY_STEPS, PRESET_STEPS = 30, 60
PRESETS = ["ancre-fig2b-ancre", "tau-fig1-1/sqrt(L)", "skip-table1-digits-skipless-init", "dca-table7-dca",
           "idinit-table1-idinit", "tau-fig3-bn-tau"]


def specs() -> dict[str, explorer.ExperimentSpec]:
    """The specs checked in part 1: each topology on the MLP-ResNet and the GPT (where it applies), then presets."""
    chosen = {}
    for model, base in (("mlp-resnet", "tau-fig1-1/sqrt(L)"), ("gpt", "dca-table7-transformer")):
        for topology, entry in explorer.registry("topologies").items():
            for example in entry.info.examples or ({},):
                values = {"topology.name": topology, **{f"topology.{k}": v for k, v in example.items()},
                          "train.steps": TOPOLOGY_STEPS, "train.log_every": 10}
                try:
                    chosen[f"{model} {topology} {example or ''}".strip()] = explorer.preset(base).with_values(values)
                except explorer.SpecError:
                    pass  # the topology does not apply to this model
    for name in PRESETS:
        chosen[name] = explorer.preset(name).with_values({"train.steps": PRESET_STEPS, "train.log_every": 10})
    return chosen


def probe_all(model: torch.nn.Module, data, n: int = 16) -> dict[str, str]:
    """Every registered probe on `model` with `n` validation inputs on the model's device: "ok" or its refusal."""
    device = next(model.parameters()).device
    x = data.x_val[:n].to(device)
    outcome = {}
    for name, entry in explorer.registry("probes").items():
        extra = {"targets": data.y_val[:n].to(device)} if "targets" in entry.info.tensors else {}
        try:
            result = explorer.probe(model, x, name, **extra)
            finite = all(torch.isfinite(torch.as_tensor(v, dtype=torch.float64)).all()
                         for v in result.values() if getattr(v, "dtype", None) is not None and v.dtype.kind == "f")
            outcome[name] = "ok" if finite else "ok (non-finite values)"
        except explorer.SpecError as refused:
            outcome[name] = f"refused: {str(refused)[:100]}"
        except Exception as error:  # noqa: BLE001  (reported, not hidden: a raw exception is a defect)
            outcome[name] = f"RAW {type(error).__name__}: {str(error)[:160]}"
    return outcome


def check_runs(log: str | None = None) -> list[dict]:
    rows = []
    for label, spec in specs().items():
        gpu_spec = spec.with_values({"train.device": "auto"})
        try:
            gpu = explorer.train(gpu_spec)
        except explorer.SpecError as refused:  # the memory budget holds on every device
            rows.append({"spec": label, "refused": str(refused)})
            print(f"{label:45s} refused: {str(refused)[:120]}", flush=True)
            continue
        cpu = explorer.train(spec.with_values({"train.device": "cpu"}))
        pairs = [(a["loss"], b["loss"]) for a, b in zip(gpu.history, cpu.history)
                 if a.get("loss") is not None and b.get("loss") is not None and math.isfinite(a["loss"])
                 and math.isfinite(b["loss"])]
        gap = max((abs(a - b) / max(abs(b), 1e-12) for a, b in pairs), default=float("nan"))
        row = {"spec": label, "device": gpu.device, "status": gpu.status, "cpu_status": cpu.status,
               "final_loss": gpu.history[-1].get("loss"), "max_rel_loss_gap": gap,
               "probes": probe_all(gpu.model, gpu.data)}
        rows.append(row)
        if log:  # what was checked so far survives a time limit
            with open(log, "w") as f:
                json.dump(rows, f, indent=2)
        raw = [name for name, outcome in row["probes"].items() if outcome.startswith("RAW")]
        print(f"{label:45s} {row['device']:6s} {gpu.status:9s} cpu {cpu.status:9s} gap {gap:9.2e} "
              f"probes ok {sum(o.startswith('ok') for o in row['probes'].values())}/{len(row['probes'])}"
              f"{'  RAW: ' + ', '.join(raw) if raw else ''}", flush=True)
    return rows


def time_plain_gpu(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, batch: int) -> float:
    """Seconds per step of the textbook loop on the GPU (batches drawn on the device, synchronised at the end)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator(device=x.device).manual_seed(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        index = torch.randint(len(x), (batch,), generator=gen, device=x.device)
        loss = torch.nn.functional.cross_entropy(model(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def throughput(steps: int, repeats: int) -> dict:
    from train_throughput import BATCH, DEPTH, WIDTH, PlainResNet, make_spec

    spec = make_spec(steps).with_values({"train.device": "cuda"})
    _, data = explorer.build(spec)

    def trainer() -> float:
        run = explorer.train(spec)
        return run.wall_time / run.steps_done

    def plain() -> float:
        torch.manual_seed(0)
        model = PlainResNet(data.x_train.shape[1], int(data.y_train.max()) + 1, WIDTH, DEPTH).cuda()
        return time_plain_gpu(model, data.x_train, data.y_train, steps, BATCH)

    trainer(), plain()  # warm-up: kernels, the allocator, the dataset on the device
    samples = {"trainer": [], "plain": []}
    for repeat in range(repeats):
        for name, job in ((("trainer", trainer), ("plain", plain))[::-1] if repeat % 2 else
                          (("trainer", trainer), ("plain", plain))):
            samples[name].append(job())
    ratio = statistics.median(p / t for t, p in zip(samples["trainer"], samples["plain"]))
    result = {"steps": steps, "repeats": repeats, "trainer_steps_per_s": 1 / statistics.median(samples["trainer"]),
              "plain_steps_per_s": 1 / statistics.median(samples["plain"]), "ratio_trainer_to_plain": ratio}
    print(f"\nMLP-ResNet depth {DEPTH} width {WIDTH} batch {BATCH} on {torch.cuda.get_device_name()}: "
          f"trainer {result['trainer_steps_per_s']:.1f} steps/s, plain {result['plain_steps_per_s']:.1f} steps/s, "
          f"ratio {ratio:.3f} (median of {repeats} paired repeats, {steps} steps each)", flush=True)
    return result


def record_store(folder: str) -> list[str]:
    """Two CUDA-trained runs with checkpoints in the store at `folder`; their ids."""
    os.environ["EXPLORER_HOME"] = folder
    ids = []
    for name in ("ancre-fig2b-ancre", "tau-fig1-1/sqrt(L)"):
        recorder = explorer.StoreRecorder(label=f"{name} on cuda", checkpoint_every=20)
        explorer.train(explorer.preset(name).with_values({"train.device": "cuda", "train.steps": 40,
                                                          "train.log_every": 10}), callbacks=[recorder])
        ids.append(recorder.run_id)
    print(f"recorded {ids} into {folder}", flush=True)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per throughput run")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved throughput repeats")
    parser.add_argument("--store", metavar="DIR", help="record two CUDA-trained runs into a store at DIR")
    parser.add_argument("--skip-runs", action="store_true", help="leave out parts 1 and 2 (the runs and probes)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check runs on a GPU machine")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    runs = [] if args.skip_runs else check_runs(args.json and args.json + ".partial")
    results = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "runs": runs,
               "throughput": throughput(args.steps, args.repeats)}
    if args.store:
        results["stored"] = record_store(args.store)
    write_json(args.json, results)
    raw = [(r["spec"], n) for r in results["runs"] for n, o in r.get("probes", {}).items() if o.startswith("RAW")]
    wrong = [r["spec"] for r in results["runs"] if "device" in r and not r["device"].startswith("cuda")]
    print(f"\n{len(results['runs'])} specs; not on CUDA: {wrong or 'none'}; raw probe exceptions: {raw or 'none'}")


if __name__ == "__main__":
    main()
