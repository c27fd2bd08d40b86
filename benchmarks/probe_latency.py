"""Probe latency on the default models (CPU), each next to a plain PyTorch / scikit-learn reference.

1. `jacobian`: input-output Jacobian spectra of the tau paper's MLP-ResNet (depth 100, width
   128) for 8 inputs, against torch.func.vmap(jacrev) + svdvals on a hand-written residual stack.
2. `pca`: PCA maps of a 6-block ViT (width 64, shapes 16x16, 4x4 patches) on 64 images, every
   block, against one plain forward pass + scikit-learn PCA of the last block's tokens.
3. `coefficients`: each topology's coefficient matrices on the MLP-ResNet (depth 100), against
   forming the same (L+1) x (L+1) unrolled matrix with numpy for the cascaded case.

Target: each probe under 1 s, so the app can probe live. Medians of --repeats runs.
Run: python benchmarks/probe_latency.py [--repeats R] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from sklearn.decomposition import PCA

import explorer
from explorer.probes import probe
from common import write_json
from train_throughput import PlainResNet

DEPTH, WIDTH = 100, 128
RESNET = {"data": {"name": "digits"}, "model": {"name": "mlp-resnet", "depth": DEPTH, "width": WIDTH},
          "topology": {"name": "tau", "value": "1/sqrt(L)"}, "init": {"name": "kaiming", "mode": "fan_out"},
          "train": {"steps": 1, "log_every": 1}}
VIT = {"data": {"name": "shapes", "size": 16, "n_train": 64, "n_val": 64},
       "model": {"name": "vit", "depth": 6, "width": 64, "heads": 4, "patch": 4},
       "train": {"steps": 1, "log_every": 1}}
TOPOLOGIES = [{"name": "cascaded"}, {"name": "tau"}, {"name": "shortcuts", "shortcuts": "0:2"}, {"name": "ancre"},
              {"name": "grn-v1"}, {"name": "grn-v2"}, {"name": "grn-v3"}, {"name": "grn-v3", "k": 2}]


def timed(job, repeats: int) -> float:
    job()  # warm up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        job()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def plain_jacobian(model: PlainResNet, x: torch.Tensor):
    def stack(h):
        for layer in model.layers:
            h = torch.relu(h + model.tau * layer(h))
        return h

    with torch.no_grad():
        h0 = torch.relu(model.inp(x))
        return torch.linalg.svdvals(torch.func.vmap(torch.func.jacrev(stack))(h0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rows = {}

    spec = explorer.ExperimentSpec.from_dict(RESNET)
    model, data = explorer.build(spec)
    x = data.x_val[:8]
    torch.manual_seed(0)
    plain = PlainResNet(64, 10, WIDTH, DEPTH)
    rows["jacobian (MLP-ResNet depth 100, 8 inputs)"] = (
        timed(lambda: probe(model, x, "jacobian"), args.repeats), timed(lambda: plain_jacobian(plain, x), args.repeats))

    vit, images = explorer.build(explorer.ExperimentSpec.from_dict(VIT))
    batch = images.x_val[:64]

    def plain_pca():
        with torch.no_grad():
            tokens = vit.stack(vit.embed(batch))[:, 1:].reshape(-1, 64).double().numpy()
        return PCA(n_components=3).fit_transform(tokens)

    rows["pca (ViT 6 blocks, 64 images, every block)"] = (
        timed(lambda: probe(vit, batch, "pca"), args.repeats), timed(plain_pca, args.repeats))

    def plain_unrolled():
        own = np.eye(DEPTH, k=-1)
        return np.linalg.solve(np.eye(DEPTH) - own, np.eye(DEPTH))

    reference = timed(plain_unrolled, args.repeats)
    for topology in TOPOLOGIES:
        m, d = explorer.build(spec.with_values({"topology.name": topology["name"],
                                                **{f"topology.{k}": v for k, v in topology.items() if k != "name"}}))
        label = "coefficients " + "/".join(str(v) for v in topology.values())
        rows[label] = (timed(lambda m=m, d=d: probe(m, d.x_val[:8], "coefficients"), args.repeats), reference)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.repeats}")
    print(f"{'probe':48s} {'ms':>9s} {'reference ms':>13s} {'x reference':>12s}  under 1 s")
    for name, (seconds, ref) in rows.items():
        print(f"{name:48s} {1e3 * seconds:9.1f} {1e3 * ref:13.2f} {seconds / ref:11.2f}x  {'yes' if seconds < 1 else 'NO'}")
    write_json(args.json, {k: {"ms": 1e3 * a, "reference_ms": 1e3 * b, "ratio": a / b} for k, (a, b) in rows.items()})


if __name__ == "__main__":
    main()
