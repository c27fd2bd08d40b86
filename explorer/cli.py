"""`explorer` on the command line: train presets or spec files, probe them, list registries. JSON out with --json.

Errors in a spec print the SpecError (field path and fix) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.catalog import KINDS
from explorer.registry import SpecError
from explorer.spec import ExperimentSpec, registry


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="explorer", description="Residual Explorer: train and inspect residual networks.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a preset or a spec file")
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help="a preset name (see `explorer presets`)")
    source.add_argument("--spec", type=Path, help="a spec JSON file")
    train.add_argument("--set", dest="changes", action="append", default=[], metavar="PATH=VALUE",
                       help="change a value by its dotted path, e.g. --set model.depth=30 (repeatable)")
    train.add_argument("--json", action="store_true", help="print the run summary as JSON")
    train.add_argument("--quiet", action="store_true", help="no progress bar")

    probe = sub.add_parser("probe", help="train a preset or spec briefly (or not at all) and probe the model")
    source = probe.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help="a preset name (see `explorer presets`)")
    source.add_argument("--spec", type=Path, help="a spec JSON file")
    probe.add_argument("--set", dest="changes", action="append", default=[], metavar="PATH=VALUE",
                       help="change a spec value by its dotted path (repeatable)")
    probe.add_argument("--train-steps", type=int, default=0, metavar="N", help="train N steps first (default 0: at init)")
    probe.add_argument("--probe", required=True, help="the probe (see `explorer list probes`)")
    probe.add_argument("--option", dest="options", action="append", default=[], metavar="NAME=VALUE",
                       help="a probe option, e.g. --option k=8 (repeatable)")
    probe.add_argument("--inputs", type=int, default=64, metavar="N", help="validation examples to probe with (default 64)")
    probe.add_argument("--json", action="store_true", help="print the result arrays as JSON")

    sub.add_parser("presets", help="list the presets")
    lister = sub.add_parser("list", help="list a registry's names")
    lister.add_argument("kind", choices=KINDS)
    lister.add_argument("--json", action="store_true", help="print {name: description} as JSON")
    return parser


def load_spec(preset: str | None, spec_file: Path | None, changes: list[str]) -> ExperimentSpec:
    """The spec named on the command line, with --set changes applied."""
    from explorer.papers import preset as load_preset

    if preset is not None:
        spec = load_preset(preset)
    else:
        try:
            spec = ExperimentSpec.from_json(spec_file.read_text())
        except OSError as err:
            raise SpecError("--spec", f"cannot read {spec_file}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise SpecError("--spec", f"{spec_file} is not a UTF-8 text file; give a spec JSON file") from None
    values = {}
    for change in changes:
        path, sep, value = change.partition("=")
        if not sep:
            raise SpecError("--set", f"{change!r} is not PATH=VALUE; write e.g. --set model.depth=30")
        values[path.strip()] = value.strip()
    return spec.with_values(values) if values else spec


def _train(args) -> int:
    from explorer.train import train

    spec = load_spec(args.preset, args.spec, args.changes)
    callbacks = [] if args.quiet or args.json else [_progress_bar(spec.train.steps)]
    run = train(spec, callbacks=callbacks)
    summary = run.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0


def _probe(args) -> int:
    import numpy as np

    from explorer.probes import PROBES, probe
    from explorer.train import build, train

    spec = load_spec(args.preset, args.spec, args.changes)
    entry = PROBES.lookup(args.probe, "--probe")
    if args.train_steps < 0 or args.inputs < 1:
        raise SpecError("--train-steps" if args.train_steps < 0 else "--inputs", "must be a positive number")
    if args.train_steps:
        steps = {"train.steps": args.train_steps, "train.log_every": min(spec.train.log_every, args.train_steps)}
        run = train(spec.with_values(steps), callbacks=[] if args.json else [_progress_bar(args.train_steps)])
        model, data = run.model, run.data
    else:
        model, data = build(spec)
    options = {}
    for item in args.options:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError("--option", f"{item!r} is not NAME=VALUE; write e.g. --option k=8")
        options[key.strip()] = value.strip()
    x, y = data.x_val[:args.inputs], data.y_val[:args.inputs]
    tensors = entry.extra.get("tensors", {})
    if "targets" in tensors:
        options["targets"] = y
    if "masks" in tensors and data.masks_val is not None:
        options["masks"] = data.masks_val[:args.inputs]
    result = probe(model, x, args.probe, **options)
    if args.json:
        print(json.dumps({"probe": args.probe, "train_steps": args.train_steps, "inputs": len(x),
                          "result": {k: _jsonable(np.asarray(v)) for k, v in result.items()}}))
    else:
        for key, value in result.items():
            value = np.asarray(value)
            if value.dtype.kind == "f" and value.size:
                finite = value[np.isfinite(value)]
                stats = f"min {finite.min():.4g}  max {finite.max():.4g}" if finite.size else "no finite values"
            else:
                stats = " ".join(map(str, value.ravel()[:6])) + (" ..." if value.size > 6 else "")
            print(f"{key:<26} shape {str(value.shape):<18} {stats}")
    return 0


def _jsonable(value):
    """Nested lists with NaN and infinities as None (JSON has neither)."""
    import numpy as np

    if value.dtype.kind == "f":
        return np.where(np.isfinite(value), value, None).tolist()
    return value.tolist()


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="step", file=sys.stderr, mininterval=0.5)

    def on_event(event) -> None:
        if event.kind == "log":
            bar.update(event.step - bar.n)
            bar.set_postfix(loss=f"{event.metrics['loss']:.4g}")
        elif event.kind == "end":
            bar.close()

    return on_event


def _print_summary(summary: dict) -> None:
    lines = [f"status      {summary['status']}" + (f" at step {summary['diverged_at']}" if summary["diverged_at"] is not None else ""),
             f"steps       {summary['steps']}"]
    for key in ("final_loss", "final_val_loss", "final_val_accuracy"):
        if summary[key] is not None:
            lines.append(f"{key[6:]:<11} {summary[key]:.6g}")
    lines.append(f"time        {summary['wall_time']:.2f} s ({summary['steps_per_second']} steps/s on {summary['device']})")
    print("\n".join(lines))


def _list(kind: str, as_json: bool) -> int:
    names = registry(kind).describe()
    if as_json:
        print(json.dumps(names, indent=2))
    else:
        width = max(map(len, names), default=0)
        for name, description in names.items():
            print(f"{name:<{width}}  {description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "probe":
            return _probe(args)
        if args.command == "presets":
            return _list("presets", False)
        return _list(args.kind, args.json)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
