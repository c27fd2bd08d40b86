"""Training throughput of explorer's trainer and topologies, all timed in one process.

1. explorer.train on the tau paper's MLP-ResNet (depth 100, width 128, batch 256,
   tau = 1/sqrt(L)) against a hand-written PyTorch loop for the same network.
2. Step time under the cascaded, ANCRe, GRN-v3 and GRN-v3 (k=2) topologies, as a
   ratio to cascaded, for the MLP-ResNet (ReLU stem) and the pre-activation MLP
   (linear stem), next to the analytic FLOP lower bound of each topology's mixing.

Runs are interleaved across repeats and the median is reported; torch keeps its
default thread count. Run: python benchmarks/train_throughput.py [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
from torch import nn

import explorer
from common import paired_ratio, time_plain_loop, time_trainer, write_json

BATCH, DEPTH, WIDTH = 256, 100, 128
BASE = {
    "data": {"name": "digits"},
    "model": {"name": "mlp-resnet", "depth": DEPTH, "width": WIDTH},
    "topology": {"name": "tau", "value": "1/sqrt(L)"},
    "init": {"name": "kaiming", "mode": "fan_out"},
    "optim": {"name": "sgd", "lr": 0.01},
    "train": {"batch_size": BATCH, "seed": 0},
}
MODELS = {
    "mlp-resnet": ({"name": "mlp-resnet", "depth": DEPTH, "width": WIDTH}, DEPTH - 1, 1),  # (section, blocks, d x d matmuls per block)
    "mlp": ({"name": "mlp", "depth": DEPTH, "width": WIDTH, "hidden_ratio": 1.0, "bias": False}, DEPTH, 2),
}
TOPOLOGIES = {
    "cascaded": {"name": "cascaded"},
    "ancre": {"name": "ancre"},
    "grn-v1": {"name": "grn-v1"},
    "grn-v3": {"name": "grn-v3"},
    "grn-v3 k=2": {"name": "grn-v3", "k": 2},
}


# The topology tables start from a small init so every topology stays finite at depth 100
# (an unscaled cascaded ReLU stack overflows); step time does not depend on the values.
TOPOLOGY_INIT = {"name": "normal", "std": 0.01}


def make_spec(steps: int, model: dict | None = None, topology: dict | None = None) -> explorer.ExperimentSpec:
    raw = copy.deepcopy(BASE)
    raw["train"].update(steps=steps, log_every=steps)
    if topology is not None:
        raw["model"], raw["topology"], raw["init"] = model, topology, TOPOLOGY_INIT
    return explorer.ExperimentSpec.from_dict(raw)


def mix_flop_ratio(topology: str, blocks: int, matmuls: int) -> float:
    """Extra multiply-adds of the topology's mixing over the block matmuls (m * B * d * d per block).

    A dense scalar mix over L blocks costs ~L^2/2 * B * d (ANCRe, GRN-v1: L / (2 m d)); GRN-v3 adds a
    same-sized gate, and k=2 keeps only k + 2 sources. Backward is ~3x on both sides.
    """
    sources = {"cascaded": 0, "ancre": blocks / 2, "grn-v1": blocks / 2, "grn-v3": blocks, "grn-v3 k=2": 2 * (2 + 2)}[topology]
    return sources / (matmuls * WIDTH)


class PlainResNet(nn.Module):
    """The tau paper's MLP-ResNet from scratch: h0 = relu(A x), h = relu(h + tau W h), relu(W_L h), B h."""

    def __init__(self, d_in: int, d_out: int, width: int, depth: int):
        super().__init__()
        self.tau = depth ** -0.5
        self.inp = nn.Linear(d_in, width, bias=False)
        self.layers = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(depth - 1))
        self.fc = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, d_out, bias=False)
        for p in self.parameters():
            nn.init.kaiming_normal_(p, mode="fan_out")

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for layer in self.layers:
            h = torch.relu(torch.add(h, layer(h), alpha=self.tau))  # h + tau * W h, fused like explorer's
        return self.out(torch.relu(self.fc(h)))


def time_plain(x: torch.Tensor, y: torch.Tensor, steps: int) -> dict:
    torch.manual_seed(0)
    model = PlainResNet(x.shape[1], int(y.max()) + 1, WIDTH, DEPTH)
    return time_plain_loop(model, torch.optim.SGD(model.parameters(), lr=0.01), x, y, steps, BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per run for trainer vs plain loop")
    parser.add_argument("--topology-steps", type=int, default=4, help="steps per run for the topology tables")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repetitions (median reported)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    _, data = explorer.build(make_spec(args.steps))  # warms the dataset cache; the plain loop trains on the same tensors
    jobs = {"trainer": lambda steps: time_trainer(make_spec(steps)),
            "plain": lambda steps: time_plain(data.x_train, data.y_train, steps)}
    for model, (section, _, _) in MODELS.items():
        for topo, topo_section in TOPOLOGIES.items():
            jobs[f"{model}/{topo}"] = lambda steps, m=section, t=topo_section: time_trainer(make_spec(steps, m, t))
    steps_of = {name: args.steps if name in ("trainer", "plain") else args.topology_steps for name in jobs}

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    samples = {name: [] for name in jobs}
    names = list(jobs)
    for phase in (names[:2], names[2:]):  # trainer vs plain first, then the topologies: each warmed up, then interleaved
        for name in phase:
            jobs[name](2)
        for repeat in range(args.repeats):
            for name in phase[::-1] if repeat % 2 and len(phase) == 2 else phase:  # alternate the pair's order
                samples[name].append(jobs[name](steps_of[name]))
                print(f"  repeat {repeat + 1}/{args.repeats} {name:22s} {1e3 * samples[name][-1]['step']:8.1f} ms/step",
                      flush=True)

    def median(name, key="step"):
        return statistics.median(s[key] for s in samples[name])

    def paired(name, base, key="step"):
        return paired_ratio(samples[name], samples[base], key)

    throughput = {
        "trainer_steps_per_s": 1 / median("trainer", "wall"), "trainer_steady_steps_per_s": 1 / median("trainer"),
        "plain_steps_per_s": 1 / median("plain"),
        "ratio": 1 / paired("trainer", "plain", "wall"), "steady_ratio": 1 / paired("trainer", "plain"),
        "samples_ms": {k: [1e3 * s["step"] for s in samples[k]] for k in ("trainer", "plain")},
    }
    results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": args.steps,
               "topology_steps": args.topology_steps, "repeats": args.repeats, "throughput": throughput, "topologies": {}}
    print(f"\n1. MLP-ResNet depth {DEPTH}, width {WIDTH}, batch {BATCH}, tau = 1/sqrt(L); {args.steps} steps, "
          f"median of {args.repeats}")
    print(f"   explorer.train (wall_time) {throughput['trainer_steps_per_s']:7.2f} steps/s")
    print(f"   explorer.train (steady)    {throughput['trainer_steady_steps_per_s']:7.2f} steps/s  (without validation)")
    print(f"   plain PyTorch loop         {throughput['plain_steps_per_s']:7.2f} steps/s")
    print(f"   ratio trainer / plain      {throughput['ratio']:7.3f}   (steady: {throughput['steady_ratio']:.3f}; "
          f"target >= 0.97)")

    for number, (model, (_, blocks, matmuls)) in enumerate(MODELS.items(), start=2):
        print(f"\n{number}. {model}: {blocks} blocks, width {WIDTH}, batch {BATCH}; {args.topology_steps} steps, "
              f"median of {args.repeats}")
        print(f"   {'topology':12s} {'ms/step':>9s} {'x cascaded':>11s} {'FLOP bound':>11s}  status")
        table = results["topologies"][model] = {}
        for topo in TOPOLOGIES:
            name = f"{model}/{topo}"
            row = table[topo] = {
                "ms_per_step": 1e3 * median(name), "ratio_to_cascaded": paired(name, f"{model}/cascaded"),
                "flop_lower_bound": 1 + mix_flop_ratio(topo, blocks, matmuls),
                "samples_ms": [1e3 * s["step"] for s in samples[name]], "status": samples[name][-1]["status"],
            }
            print(f"   {topo:12s} {row['ms_per_step']:9.1f} {row['ratio_to_cascaded']:10.2f}x "
                  f"{row['flop_lower_bound']:10.2f}x  {row['status']}")
    print("\n   x cascaded: median over repeats of the per-repeat ratio. FLOP bound: 1 + mixing multiply-adds / "
          "block matmul multiply-adds\n   (ANCRe: L/(2 m d), m = d x d matmuls per block), a lower bound on the "
          "ratio; target ANCRe <= 1.10x.")

    write_json(args.json, results)


if __name__ == "__main__":
    main()
