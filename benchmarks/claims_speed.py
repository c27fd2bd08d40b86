"""Time per claim, sequential vs parallel vs batched (vs Ray), in one run: how fast the papers' evidence comes.

Each way runs the same claims from an empty run cache:
  sequential  one run after another in this process, one torch thread (the reference: how the rows were
              recorded before claims ran their runs as jobs);
  sequential-2t  the same with two torch threads (what a plain `for` loop over the runs gets from the cores);
  parallel    the claim's seeds and arms as jobs on `--workers` processes of one thread each;
  batched     the same workers, the seeds of each arm stacked into one model (explorer.batched);
  ray         the parallel way on a local Ray (--ray; Ray's start-up is counted once, before the first claim).
Figures: seconds per claim and in all, each way's ratio to sequential measured in the same run, and whether the
verdicts agree (batched members match their separate runs to float32 rounding, so a knife-edge verdict may
differ). The load average at the start is printed: run it with the machine otherwise quiet.

    python benchmarks/claims_speed.py --paper tau                 # full mode, one paper
    python benchmarks/claims_speed.py --fast                      # fast mode, every claim
    python benchmarks/claims_speed.py --paper idinit --ray --json out.json
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from common import write_json
from explorer.papers import clear_cache
from explorer.papers.claims import run_claims


def run_way(name: str, paper: str | None, ids: list[str] | None, fast: bool, workers: int) -> dict:
    settings = {"sequential": dict(workers=1), "sequential-2t": dict(workers=1), "parallel": dict(workers=workers),
                "batched": dict(workers=workers, batched=True), "ray": dict(workers=workers, backend="ray")}[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if name == "sequential-2t" else 1)
    clear_cache()
    start = time.perf_counter()
    try:
        rows = run_claims(paper, fast=fast, ids=ids, **settings)
    finally:
        torch.set_num_threads(threads)
        clear_cache()
    return {"seconds": time.perf_counter() - start,
            "claims": {f"{r['paper']}/{r['id']}": {"seconds": r["seconds"], "verdict": r["verdict"]} for r in rows}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paper", help="one paper's claims (default: every claim)")
    parser.add_argument("--id", dest="ids", action="append", help="only this claim (repeatable; with --paper)")
    parser.add_argument("--fast", action="store_true", help="fast mode (one seed, small runs)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes (default: the cores)")
    parser.add_argument("--ways", default="sequential,sequential-2t,parallel,batched",
                        help="comma-separated ways to time, sequential first")
    parser.add_argument("--ray", action="store_true", help="also time a local Ray")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    ways = [w.strip() for w in args.ways.split(",") if w.strip()] + (["ray"] if args.ray else [])
    if ways[0] != "sequential":
        parser.error("--ways must start with sequential (the reference)")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; "
          f"{'fast' if args.fast else 'full'} mode, {args.paper or 'every paper'}, {args.workers} workers")
    if "ray" in ways:
        from explorer.parallel import connect_ray

        start = time.perf_counter()
        connect_ray(args.workers)
        print(f"ray: started in {time.perf_counter() - start:.1f} s (not counted below)")
    results = {}
    for way in ways:
        results[way] = run_way(way, args.paper, args.ids, args.fast, args.workers)
        print(f"{way:>14}: {results[way]['seconds']:8.1f} s", flush=True)
    reference = results["sequential"]
    keys = list(reference["claims"])
    print(f"\n{'claim':42s}" + "".join(f"{w:>16s}" for w in ways))
    for key in keys:
        cells = []
        for way in ways:
            row = results[way]["claims"][key]
            ratio = row["seconds"] / reference["claims"][key]["seconds"] if reference["claims"][key]["seconds"] else 1.0
            agree = "" if row["verdict"] == reference["claims"][key]["verdict"] else f" ({row['verdict']})"
            cells.append(f"{row['seconds']:7.1f} s {ratio:4.2f}x{agree}")
        print(f"{key:42s}" + "".join(f"{c:>16s}" for c in cells))
    print(f"{'all':42s}" + "".join(f"{results[w]['seconds']:7.1f} s {results[w]['seconds'] / reference['seconds']:4.2f}x"
                                    .rjust(16) for w in ways))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    write_json(args.json, {"workers": args.workers, "fast": args.fast, "paper": args.paper, "ways": results})


if __name__ == "__main__":
    main()
