"""Random, hostile and diverging specs through the whole pipeline: validate, train a few steps, probe, draw.

    python -m explorer.fuzz --specs 10000 --seed 0 [--out report.json] [--jobs 16] [--max-mb 3584]

Each spec is drawn from the registries' typed parameters (every kind's entries and their Params, with their
ranges and choices): a share valid, a share mutated (out of range, wrong type, unknown names, hostile
strings) and a share set up to diverge (a huge learning rate, no normalisation, deep, large weights). Sizes
(depth, width, examples, sequence length, steps) are clamped before anything is built, so every spec is small.
Then: ExperimentSpec validation, `train` (which builds, under the memory budget), and every registered
probe on the trained model (sometimes on an all-zero or a poisoned copy of it, as a diverged run leaves it),
with a few validation inputs and drawn options, and the probe's figures.

Outcomes: refused (a SpecError, at validation or from train), trained, diverged; per probe call ok, undefined
(some quantities undefined, with the reason) or not applicable (a SpecError). Anything else is a raw
exception: recorded with the spec (JSON), where it happened and the traceback's last line. Spec `i` of seed
`s` is drawn from its own generator, so one spec reproduces alone (`--start i --specs 1`) and a run splits
over processes without changing what is drawn.

From the command line every fuzz process is held to the memory limit of the app's workers
(explorer.budget.process_limit_mb; `--max-mb` sets another, 0 none): a spec or probe that needs more than its
estimate said ends as a raw exception ("can't allocate memory") instead of exhausting the machine, and the
report gives the largest resident memory any fuzz process reached.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from typing import Any

import torch

from explorer import budget, plots
from explorer.data.files import allowed_roots, restrict_reads
from explorer.parallel import Workers
from explorer.probes import PROBES, probe, undefined, validation_tensors
from explorer.registries import DEPTH_RULES, Param, SpecError, registry
from explorer.spec import SECTION_KINDS, SECTIONS, TRAIN_PARAMS, ExperimentSpec
from explorer.training import train

SHARES = {"valid": 0.5, "mutated": 0.25, "diverging": 0.25}  # how each spec is drawn
VARIANTS = {"trained": 0.8, "zeroed": 0.1, "poisoned": 0.1}  # which model the probes see
CAPS = {  # the largest value a spec keeps, by parameter name (any section): every spec trains in well under a second
    "depth": 9, "width": 16, "n_train": 48, "n_val": 16, "num_samples": 80, "dim": 16, "size": 16, "context": 12,
    "max_chars": 3000, "heads": 4, "mlp_ratio": 2.0, "hidden_ratio": 2.0, "rank": 8, "k": 4, "steps": 6,
    "batch_size": 16, "precondition_frequency": 4,
}
UNBOUNDED_ZERO = {"max_chars"}  # 0 means "all", which is more than the cap
PROBE_CAPS = {"max_inputs": 8, "iterations": 40, "max_dim": 2048, "k": 64, "block": 3}  # probe options, likewise
INPUTS = (1, 2, 4)  # validation examples a probe sees
ATTEMPTS = 40  # draws tried for a valid spec (nine in ten random model-dataset pairs do not fit together)
HOSTILE = ["", " ", "<script>alert(1)</script>", "[x](http://example.invalid)", "/etc/passwd", "../../../etc/shadow",
           "/dev/zero", "~root/.ssh/id_rsa", "\x00", "é" * 40, "x" * 5000, "nan", "inf", "-1", "1e400", "9" * 500,
           "{}", "[]", "%s%n", "\\", "a.b.c", "0:99", "1/L", "none"]
OUTCOMES = ("refused", "trained", "diverged", "probes ok", "probes undefined", "probes not applicable",
            "raw exceptions")


# ---- drawing a spec ---------------------------------------------------------------------------------

def _params(section: Any, name: Any) -> tuple[Param, ...]:
    """The parameters of entry `name` of a section (none for an unknown section or name)."""
    if section == "train":
        return TRAIN_PARAMS
    if section not in SECTION_KINDS:
        return ()
    entries = registry(SECTION_KINDS[section])
    return entries[name].params if isinstance(name, str) and name in entries else ()


def _value(rng: random.Random, param: Param) -> Any:
    """An in-range value of `param`: its default half the time, else drawn over its range (log-uniform for
    ranges over decades), its choices, or a depth rule."""
    if rng.random() < 0.5 or param.kind == "str":
        return param.default
    if param.kind == "bool":
        return rng.random() < 0.5
    if param.kind == "choice":
        return rng.choice(param.choices)
    if param.kind == "rule" and rng.random() < 0.5:
        return rng.choice(DEPTH_RULES)
    default = param.default if isinstance(param.default, (int, float)) else 1.0
    low = param.low if param.low is not None else min(0.0, 10.0 * default)
    high = param.high if param.high is not None else max(10.0 * abs(default), low + 10.0)
    floor = max(low, high * 1e-8)
    if floor > 0 and high / floor > 100:
        number = math.exp(rng.uniform(math.log(floor), math.log(high)))
    else:
        number = rng.uniform(low, high)
    return int(round(min(max(number, low), high))) if param.kind == "int" else number


def _valid_raw(rng: random.Random) -> dict:
    raw = {}
    for section in SECTIONS:
        head = {}
        if section != "train":
            head = {"name": rng.choice(list(registry(SECTION_KINDS[section])))}
        raw[section] = {**head, **{p.name: _value(rng, p) for p in _params(section, head.get("name")) if rng.random() < 0.5}}
    raw["train"]["device"] = "cpu"
    return raw


def _fits(raw: dict) -> bool:
    try:
        ExperimentSpec.from_dict(raw)
        return True
    except SpecError:
        return False


def _valid(rng: random.Random) -> dict:
    """A draw that passes validation, tried ATTEMPTS times (the last draw otherwise)."""
    for _ in range(ATTEMPTS):
        raw = _valid_raw(rng)
        if _fits(raw):
            return raw
    return raw


def _mutate(rng: random.Random, raw: dict) -> dict:
    """One change that a valid spec should refuse, or survive: out of range, wrong type, unknown, hostile."""
    raw = copy.deepcopy(raw)
    section = rng.choice([s for s in raw if s in SECTIONS])
    values = raw[section]
    params = _params(section, values.get("name"))
    param = rng.choice(params) if params else None
    how = rng.choice(["range", "type", "nonfinite", "unknown-param", "unknown-name", "hostile", "section", "shape"])
    if how == "range" and param is not None and param.kind in ("int", "float", "rule"):
        low, high = param.low, param.high
        values[param.name] = rng.choice([v for v in (low - 1 if low is not None else None,
                                                     high * 10 + 1 if high is not None else None, -(10 ** 9))
                                         if v is not None])
    elif how in ("range", "type") and param is not None:
        values[param.name] = rng.choice([[1], {"x": 1}, None, "abc", True, 1.5, "64", str(param.default)])
    elif how == "nonfinite" and param is not None:
        values[param.name] = rng.choice([math.nan, math.inf, -math.inf, 10 ** 400, 1e308 * 10])
    elif how == "unknown-param":
        values[rng.choice(["bogus", "lr ", "Depth", "name2", rng.choice(HOSTILE)])] = 1
    elif how == "unknown-name" and section != "train":
        name = str(values.get("name", ""))
        values["name"] = rng.choice([name[:-1], name.upper(), name + "x", rng.choice(HOSTILE)])
    elif how == "hostile" and param is not None:
        values[param.name] = rng.choice(HOSTILE)
    elif how == "section":
        raw[rng.choice(["optimiser", "Model", "", rng.choice(HOSTILE)])] = {}
    else:
        raw[section] = rng.choice([None, [], "mlp", 3, {"name": None}])
    return raw


def _diverging(rng: random.Random, raw: dict) -> dict:
    """A valid draw set up to blow up: a huge learning rate, no normalisation, deep, large initial weights."""
    raw = copy.deepcopy(raw)
    raw["optim"]["lr"] = 10 ** rng.uniform(1, 4)
    if rng.random() < 0.5:
        raw["optim"]["name"] = rng.choice(["sgd", "gd"])
        raw["optim"] = {"name": raw["optim"]["name"], "lr": raw["optim"]["lr"]}
    model = {p.name: p for p in _params("model", raw["model"]["name"])}
    if "norm" in model and "none" in model["norm"].choices:
        raw["model"]["norm"] = "none"
    if "depth" in model and rng.random() < 0.5:
        raw["model"]["depth"] = CAPS["depth"]
    if rng.random() < 0.3:
        raw["init"] = {"name": "normal", "std": 10 ** rng.uniform(0, 2)}
    raw["train"].update({"steps": CAPS["steps"], "log_every": 1, "diverge_factor": rng.choice([1.0, 10.0, 1e4])})
    return raw


def draw(seed: int, index: int) -> tuple[str, Any]:
    """(share, raw spec) of spec `index` for `seed`, from a generator of its own."""
    rng = random.Random(f"{seed}:{index}")
    roll, share = rng.random(), "diverging"
    for name, weight in SHARES.items():
        if roll < weight:
            share = name
            break
        roll -= weight
    raw = _valid(rng)
    if share == "mutated":
        for _ in range(rng.choice([1, 1, 2, 3])):
            raw = _mutate(rng, raw) if isinstance(raw, dict) and all(isinstance(v, dict) for v in raw.values()) else raw
    elif share == "diverging":
        raw = _diverging(rng, raw)
    return share, raw


def small(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec with every size above its cap (CAPS) lowered to it, on the CPU; SpecError when that no longer fits."""
    changes = {}
    for section in SECTIONS:
        for key, value in getattr(spec, section).params.items():
            cap = CAPS.get(key)
            if cap is None or isinstance(value, (bool, str)):
                continue
            if value > cap or (key in UNBOUNDED_ZERO and value == 0):
                changes[f"{section}.{key}"] = type(value)(cap)
    steps = changes.get("train.steps", spec.train.steps)
    if spec.train.log_every > steps:
        changes["train.log_every"] = steps
    if spec.train.device != "cpu":
        changes["train.device"] = "cpu"
    while True:
        try:
            return spec.with_values(changes) if changes else spec
        except SpecError as error:  # a cap the model does not take (a CIFAR ResNet's depth is 6n+2): one lower
            lowered = changes.get(error.path)
            if not isinstance(lowered, int) or lowered <= 1:
                raise
            changes[error.path] = lowered - 1


# ---- probing ----------------------------------------------------------------------------------------

def _probe_options(rng: random.Random, name: str) -> dict:
    """Options for probe `name`: none most of the time, else drawn in range (sizes capped) or one mutated."""
    roll = rng.random()
    params = PROBES[name].params
    if roll < 0.6 or not params:
        return {}
    if roll < 0.9:
        options = {}
        for p in params:
            if rng.random() < 0.5:
                value = _value(rng, p)
                options[p.name] = min(value, PROBE_CAPS[p.name]) if p.name in PROBE_CAPS else value
        return options
    p = rng.choice(params)
    return {p.name: rng.choice([-1, 10 ** 12, math.nan, "abc", None, [1], rng.choice(HOSTILE)])} \
        if rng.random() < 0.8 else {"no_such_option": 1}


def _variant(rng: random.Random, model: torch.nn.Module) -> tuple[str, torch.nn.Module]:
    """The model as trained, an all-zero copy, or a copy with some weights set to NaN or inf (a diverged run)."""
    roll, chosen = rng.random(), "trained"
    for name, weight in VARIANTS.items():
        if roll < weight:
            chosen = name
            break
        roll -= weight
    if chosen == "trained":
        return chosen, model
    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    with torch.no_grad():
        for p in model.parameters():
            if chosen == "zeroed":
                p.zero_()
            elif p.is_floating_point() and torch.rand((), generator=gen) < 0.5:
                mask = torch.rand(p.shape, generator=gen) < 0.2
                p[mask] = rng.choice([math.nan, math.inf, -math.inf])
    return chosen, model


def _last_line(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename.rpartition('/')[2]}:{frames[-1].lineno})" if frames else ""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}{where}"


def _spec_json(raw: Any) -> str:
    try:
        return json.dumps(raw, default=repr)
    except (ValueError, RecursionError):
        return repr(raw)[:5000]


def fuzz_one(seed: int, index: int) -> dict:
    """Spec `index` of `seed` through validation, training, every probe and its figures: its record, with
    "outcome" (refused, trained or diverged), per-probe outcomes, undefined quantities and raw exceptions."""
    started = time.perf_counter()
    record = {"index": index, "share": None, "outcome": None, "probes": {}, "undefined": {}, "raw": []}
    try:
        record["share"], raw = draw(seed, index)
    except Exception as error:  # a bug of the fuzzer itself: reported like any other, and the run goes on
        record.update(outcome="raw", raw=[{"stage": "draw", "error": _last_line(error), "spec": None}])
        return _timed(record, started)
    rng = random.Random(f"{seed}:{index}:probes")

    shown = {"spec": _spec_json(raw)}  # the spec as drawn, then as validated and clamped (what was trained)

    def raw_exception(stage: str, error: BaseException, **context) -> None:
        record["raw"].append({"stage": stage, "error": _last_line(error), "spec": shown["spec"], **context})

    torch.manual_seed(index)
    stage = "validate"
    try:
        spec = ExperimentSpec.from_dict(raw)
        stage = "clamp"
        spec = small(spec)
        shown["spec"] = spec.to_json(indent=None)
        stage = "train"
        run = train(spec)
    except SpecError as error:
        record.update(outcome="refused", refused=f"{stage}: {error.path}: {error.message[:200]}")
        return _timed(record, started)
    except Exception as error:  # the bugs this fuzzer is for
        raw_exception(stage, error)
        record["outcome"] = "raw"
        return _timed(record, started)
    record["outcome"] = "diverged" if run.status == "diverged" else "trained"
    record["variant"], model = _variant(rng, run.model)
    for name in PROBES:
        n = rng.choice(INPUTS)
        options = _probe_options(rng, name)
        try:
            result = probe(model, run.data.x_val[:n], name, **validation_tensors(name, run.data, n), **options)
        except SpecError:
            record["probes"][name] = "not applicable"
            continue
        except Exception as error:
            raw_exception("probe", error, probe=name, options=repr(options), inputs=n, variant=record["variant"])
            record["probes"][name] = "raw"
            continue
        gaps = undefined(result)
        missing = sorted(set(gaps) - set(result))
        record["probes"][name] = "undefined" if gaps else "ok"
        record["undefined"].update({f"{name}.{key}": why for key, why in gaps.items()})
        try:
            if missing:
                raise AssertionError(f"undefined names quantities the result lacks: {', '.join(missing)}")
            plots.probe_figures(name, result)
        except Exception as error:
            raw_exception("figure", error, probe=name, options=repr(options), inputs=n, variant=record["variant"])
            record["probes"][name] = "raw"
    return _timed(record, started)


def _timed(record: dict, started: float) -> dict:
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


def _quiet(seed: int, index: int) -> dict:
    """fuzz_one with warnings silenced and dataset reads confined to an empty folder (as on the server: a
    hostile data.path reads nothing)."""
    previous = allowed_roots()
    with tempfile.TemporaryDirectory() as empty, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        restrict_reads([empty])
        try:
            return fuzz_one(seed, index)
        finally:
            restrict_reads(previous)


# ---- a run and its report ---------------------------------------------------------------------------

def fuzz(specs: int, seed: int = 0, start: int = 0, jobs: int = 1, progress: bool = False) -> dict:
    """Specs start..start+specs-1 of `seed` through `fuzz_one` (on `jobs` processes); the report: counts of
    each outcome, undefined quantities with a reason each, raw exceptions with their specs, and the records."""
    indices = [(seed, i) for i in range(start, start + specs)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=specs, unit="spec", file=sys.stderr)
    with Workers(jobs=jobs, threads=1) as workers:
        records = workers.map(_quiet, indices, on_done=(lambda i, r: bar.update(1)) if bar else None)
    if bar:
        bar.close()
    result = report(records, seed, start)
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return result


def peak_rss_mb() -> float:
    """The largest resident memory this process or any of its ended children (the fuzz workers) reached, in MB."""
    import resource

    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1e3


def report(records: list[dict], seed: int = 0, start: int = 0) -> dict:
    """Counts over the records of a run (see `fuzz`)."""
    outcomes = Counter(r["outcome"] for r in records)
    probes = Counter(outcome for r in records for outcome in r["probes"].values())
    raw = [{"index": r["index"], **e} for r in records for e in r["raw"]]
    reasons: dict[str, dict] = {}
    for r in records:
        for key, why in r["undefined"].items():
            entry = reasons.setdefault(key, {"count": 0, "example": why})
            entry["count"] += 1
    counts = {"refused": outcomes["refused"], "trained": outcomes["trained"], "diverged": outcomes["diverged"],
              "probes ok": probes["ok"], "probes undefined": probes["undefined"],
              "probes not applicable": probes["not applicable"], "raw exceptions": len(raw)}
    slowest = sorted(records, key=lambda r: -r["seconds"])[:5]
    return {"seed": seed, "start": start, "specs": len(records), "counts": counts,
            "shares": dict(Counter(r["share"] for r in records)),
            "variants": dict(Counter(r.get("variant") for r in records if r.get("variant"))),
            "seconds": round(sum(r["seconds"] for r in records), 1),
            "slowest": [{"index": r["index"], "seconds": r["seconds"]} for r in slowest],
            "undefined": dict(sorted(reasons.items())), "raw_exceptions": raw, "records": records}


def summary(result: dict) -> str:
    """The report as a table: outcomes, undefined quantities, raw exceptions (one line each)."""
    lines = [f"{result['specs']} specs (seed {result['seed']}, from {result['start']}), "
             f"{result['seconds']:.0f} s of fuzzing; shares {result['shares']}, probed models {result['variants']}"]
    if "peak_rss_mb" in result:
        limit = f" (limit {result['max_mb']:,} MB)" if result.get("max_mb") else " (no limit)"
        lines.append(f"largest resident memory of a fuzz process: {result['peak_rss_mb']:,.0f} MB{limit}")
    lines.append("")
    width = max(len(k) for k in OUTCOMES)
    lines += [f"  {key:<{width}}  {result['counts'][key]:>7}" for key in OUTCOMES]
    if result["undefined"]:
        lines += ["", "undefined quantities (times, an example reason):"]
        lines += [f"  {key}: {entry['count']} ({entry['example'][:140]})" for key, entry in result["undefined"].items()]
    if result["raw_exceptions"]:
        lines += ["", "raw exceptions (spec index, stage, error):"]
        lines += [f"  #{e['index']} {e['stage']}{' ' + e['probe'] if 'probe' in e else ''}: {e['error']}"
                  for e in result["raw_exceptions"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", type=int, default=1000, help="how many specs to draw (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    parser.add_argument("--start", type=int, default=0, help="index of the first spec (reproduce spec i: --start i "
                                                              "--specs 1)")
    parser.add_argument("--jobs", type=int, default=1, help="processes to fuzz on (default 1)")
    parser.add_argument("--out", help="write the report (counts, undefined quantities, raw exceptions with their "
                                      "specs, every record) to this JSON file")
    parser.add_argument("--max-mb", type=int, default=None,
                        help="hold each fuzz process to this many MB of memory (default: the app workers' limit, "
                             "EXPLORER_MEMORY_LIMIT_MB or EXPLORER_MAX_MODEL_MB + EXPLORER_MAX_DATA_MB + "
                             f"{budget.PROCESS_ALLOWANCE_MB}; 0: no limit)")
    args = parser.parse_args(argv)
    if args.specs < 1 or args.start < 0 or args.jobs < 1:
        parser.error("--specs and --jobs must be at least 1, --start at least 0")
    if args.max_mb is not None and args.max_mb < 0:
        parser.error("--max-mb must be at least 0 (0: no limit)")
    try:
        max_mb = budget.process_limit_mb() if args.max_mb is None else args.max_mb
    except SpecError as error:  # a misset EXPLORER_MAX_*_MB
        parser.error(f"{error.path}: {error.message}")
    if max_mb and not budget.limit_memory(max_mb):  # the workers it starts inherit the limit
        max_mb = 0
    result = fuzz(args.specs, args.seed, args.start, args.jobs, progress=True)
    result["max_mb"] = max_mb
    if args.out:
        with open(args.out, "w") as file:
            json.dump(result, file, indent=1, default=repr)
    print(summary(result))
    return 1 if result["raw_exceptions"] else 0


if __name__ == "__main__":
    sys.exit(main())
