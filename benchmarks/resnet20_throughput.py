"""ResNet-20 training throughput on 32x32 images: explorer's trainer against a plain PyTorch loop.

Both train the CIFAR ResNet-20 of He et al. (projection shortcuts, batch norm) with SGD and
momentum on the generated `shapes` images (3 x 32 x 32), batch 128, in one process with
interleaved repeats; the figure is the median of the per-repeat ratios.
Run: python benchmarks/resnet20_throughput.py [--steps N] [--repeats R] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn

import explorer
from common import paired_ratio, time_plain_loop, time_trainer, write_json

BATCH = 128
SPEC = {"data": {"name": "shapes", "size": 32, "n_train": 2048, "n_val": 128},
        "model": {"name": "resnet-cifar", "depth": 20, "width": 16, "norm": "batchnorm", "shortcut": "projection"},
        "topology": {"name": "cascaded"}, "init": {"name": "kaiming"},
        "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9}, "train": {"batch_size": BATCH, "seed": 0}}


class PlainBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = nn.Sequential() if stride == 1 else nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                                                       nn.BatchNorm2d(c_out))

    def forward(self, x):
        return torch.relu(self.short(x) + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def plain_resnet20(classes: int) -> nn.Module:
    """The reference network written from scratch: stem, 3 stages of 3 blocks, pool, linear."""
    layers, c_in = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for stage, c in enumerate((16, 32, 64)):
        for block in range(3):
            layers.append(PlainBlock(c_in, c, 2 if stage and block == 0 else 1))
            c_in = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def time_plain(x, y, steps: int) -> dict:
    torch.manual_seed(0)
    model = plain_resnet20(int(y.max()) + 1)
    return time_plain_loop(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y, steps, BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="steps per timed run")
    parser.add_argument("--repeats", type=int, default=4, help="interleaved repetitions")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    spec = explorer.ExperimentSpec.from_dict(SPEC).with_values({"train.steps": args.steps, "train.log_every": args.steps})
    _, data = explorer.build(spec)
    jobs = {"trainer": lambda: time_trainer(spec), "plain": lambda: time_plain(data.x_train, data.y_train, args.steps)}
    for job in jobs.values():  # warm up
        job()
    samples = {name: [] for name in jobs}
    for repeat in range(args.repeats):
        for name in (list(jobs) if repeat % 2 == 0 else list(jobs)[::-1]):
            samples[name].append(jobs[name]())
            print(f"  repeat {repeat + 1}/{args.repeats} {name:8s} {1e3 * samples[name][-1]['step']:7.1f} ms/step", flush=True)
    ratio = 1 / paired_ratio(samples["trainer"], samples["plain"])
    figures = {name: 1e3 * statistics.median(s["step"] for s in runs) for name, runs in samples.items()}
    print(f"\nResNet-20, 3x32x32, batch {BATCH}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"   explorer.train     {figures['trainer']:7.1f} ms/step")
    print(f"   plain PyTorch loop {figures['plain']:7.1f} ms/step")
    print(f"   throughput ratio trainer / plain: {ratio:.3f}")
    write_json(args.json, {"ms_per_step": figures, "ratio": ratio, "steps": args.steps, "repeats": args.repeats})


if __name__ == "__main__":
    main()
