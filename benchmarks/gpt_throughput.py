"""GPT step time under each Transformer topology, and explorer's GPT against a plain PyTorch one.

A 6-layer character GPT (width 128, 4 heads, context 128, batch 16, AdamW) on the bundled
Python documentation text, timed in one process with interleaved repeats (medians of
per-repeat ratios):

1. explorer.train with the cascaded (standard pre-norm) Transformer against a hand-written
   nanoGPT-style model of the same shape in a plain PyTorch loop;
2. cascaded, ANCRe (block level), GRN-v3, DCA, 2-DCA and skipless as ratios to cascaded.
   Targets: ANCRe <= 1.05x cascaded, 2-DCA <= 1.3x (the DCA paper's 2-DCA runs at 0.66 of
   its Transformer's speed, i.e. 1.51x its step time).

Run: python benchmarks/gpt_throughput.py [--steps N] [--repeats R] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn
from torch.nn import functional as F

import explorer
from common import paired_ratio, time_plain_loop, time_trainer, write_json

DEPTH, WIDTH, HEADS, CONTEXT, BATCH, LR = 6, 128, 4, 128, 16, 1e-3
BASE = {
    "data": {"name": "text", "context": CONTEXT, "n_val": 16},
    "model": {"name": "gpt", "depth": DEPTH, "width": WIDTH, "heads": HEADS, "mlp_ratio": 4.0},
    "optim": {"name": "adamw", "lr": LR, "weight_decay": 0.0},
    "train": {"batch_size": BATCH, "seed": 0},
}
TOPOLOGIES = {
    "cascaded": {"name": "cascaded"},
    "ancre": {"name": "ancre", "temperature": 0.01},
    "grn-v3": {"name": "grn-v3"},
    "dca": {"name": "dca"},
    "2-dca": {"name": "dca", "k": 2},
    "skipless": {"name": "skipless"},
}
TARGETS = {"ancre": 1.05, "2-dca": 1.3}


def make_spec(steps: int, topology: dict) -> explorer.ExperimentSpec:
    return explorer.ExperimentSpec.from_dict({**BASE, "topology": topology,
                                              "train": {**BASE["train"], "steps": steps, "log_every": steps}})


class PlainBlock(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.fc1 = nn.Linear(width, 4 * width, bias=False)
        self.fc2 = nn.Linear(4 * width, width, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, -1))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class PlainGPT(nn.Module):
    """nanoGPT's shape written from scratch: token and position embeddings, pre-norm blocks, final norm, head."""

    def __init__(self, vocab: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, WIDTH)
        self.pos = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        self.blocks = nn.ModuleList(PlainBlock(WIDTH, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def time_plain(x, y, vocab: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = PlainGPT(vocab)
    return time_plain_loop(model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0), x, y, steps, BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repetitions (median reported)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    _, data = explorer.build(make_spec(args.steps, TOPOLOGIES["cascaded"]))
    jobs = {"plain": lambda: time_plain(data.x_train, data.y_train, data.output_dim, args.steps)}
    for name, topology in TOPOLOGIES.items():
        jobs[name] = lambda t=topology: time_trainer(make_spec(args.steps, t))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; GPT depth {DEPTH}, width {WIDTH}, "
          f"context {CONTEXT}, batch {BATCH}", flush=True)
    for job in jobs.values():  # warm up
        job()
    samples = {name: [] for name in jobs}
    names = list(jobs)
    for repeat in range(args.repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            samples[name].append(jobs[name]())
            print(f"  repeat {repeat + 1}/{args.repeats} {name:9s} {1e3 * samples[name][-1]['step']:7.1f} ms/step", flush=True)

    results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": args.steps,
               "repeats": args.repeats, "ms_per_step": {}, "ratio_to_cascaded": {}}
    for name in names:
        results["ms_per_step"][name] = 1e3 * statistics.median(s["step"] for s in samples[name])
    results["trainer_over_plain_throughput"] = 1 / paired_ratio(samples["cascaded"], samples["plain"])
    print(f"\n1. explorer.train (cascaded) {results['ms_per_step']['cascaded']:7.1f} ms/step, plain PyTorch GPT "
          f"{results['ms_per_step']['plain']:7.1f} ms/step: throughput ratio {results['trainer_over_plain_throughput']:.3f}")
    print(f"\n2. {'topology':9s} {'ms/step':>8s} {'x cascaded':>11s}  target")
    for name in TOPOLOGIES:
        ratio = results["ratio_to_cascaded"][name] = paired_ratio(samples[name], samples["cascaded"])
        target = f"<= {TARGETS[name]:.2f}x {'met' if ratio <= TARGETS[name] else 'NOT met'}" if name in TARGETS else ""
        print(f"   {name:9s} {results['ms_per_step'][name]:8.1f} {ratio:10.2f}x  {target}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
