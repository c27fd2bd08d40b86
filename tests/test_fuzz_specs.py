"""Random and hostile specs (10,000+) through parsing and validation: only a valid spec or a
SpecError comes out, never another exception; a handful of the valid small ones train to finished/diverged.

Generated from a fixed seed (so a failure reproduces): names right and wrong, values of every JSON type,
out-of-range and enormous numbers, NaN and infinities, deep nesting, markdown and paths, unknown keys;
as dicts (the API), JSON text (uploads, --spec) and URL queries (links). Dataset reads are restricted to a
temporary folder, as on the server.
"""

import json
import reprlib
import math
import random
import time

import pytest

import explorer
from explorer import ExperimentSpec, SpecError, budget
from explorer.data.files import restrict_reads
from explorer.spec import SECTION_KINDS, SECTIONS, TRAIN_PARAMS

N_SPECS = 10_000
HOSTILE_TEXT = ["", " ", "[x](http://example.invalid)", "![x](http://example.invalid/a.png)", "<script>alert(1)</script>",
                "/etc/passwd", "../../../etc/shadow", "~root/.ssh/id_rsa", "/dev/zero", "\x00", "é" * 50, "x" * 5000,
                "1/L", "1/sqrt(L)", "0:2", "0:5,1:9", "nan", "inf", "-1", "1e400", "9" * 5000, "true", "none",
                "relu", "pre", "ingoing", "{}", "[]", "%s%n", "\\", "a.b.c"]


def _deep(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def _value(rng: random.Random, param=None, gentle: bool = False):
    """A value for a parameter: often a near-valid one of its kind, else anything (`gentle`: its default or
    a small in-range value, so that valid specs come out too)."""
    if gentle and param is not None:
        if param.kind == "int" and param.low is not None:
            return rng.randint(int(param.low), int(min(param.high or param.low + 4, param.low + 4)))
        return param.default
    roll = rng.random()
    if param is not None and roll < 0.45:
        if param.kind in ("int", "float", "rule"):
            low = param.low if param.low is not None else -10
            high = param.high if param.high is not None else 10 ** 6
            span = rng.choice([(low, min(high, low + 8)), (low, high), (high, high * 10 + 1), (low - 5, low)])
            number = rng.uniform(*span)
            return int(number) if param.kind == "int" and rng.random() < 0.8 else number
        if param.kind == "choice":
            return rng.choice([*param.choices, "nope"])
        if param.kind == "bool":
            return rng.choice([True, False, "yes", "maybe", 1])
        return rng.choice(HOSTILE_TEXT + [param.default])
    return rng.choice([
        lambda: rng.randint(-10 ** 6, 10 ** 6), lambda: 10 ** rng.randint(10, 400), lambda: -(10 ** 400),
        lambda: rng.uniform(-1e6, 1e6), lambda: float("nan"), lambda: float("inf"), lambda: -float("inf"),
        lambda: rng.choice(HOSTILE_TEXT), lambda: None, lambda: rng.choice([True, False]),
        lambda: [rng.randint(0, 3)], lambda: {"x": 1}, lambda: _deep(rng.randint(1, 3000)), lambda: 1e308 * 10,
    ])()


def _section(rng: random.Random, section: str, gentle: bool) -> dict:
    if section == "train":
        params = TRAIN_PARAMS
        raw = {}
    else:
        registry = explorer.registry(SECTION_KINDS[section])
        name = rng.choice(list(registry)) if gentle or rng.random() < 0.85 else _value(rng)
        raw = {"name": name}
        params = registry[name].params if isinstance(name, str) and name in registry else ()
    for param in params:
        if rng.random() < 0.3:
            raw[param.name] = _value(rng, param, gentle)
    if not gentle and rng.random() < 0.05:
        raw[rng.choice(HOSTILE_TEXT)] = _value(rng)
    return raw


def _raw(rng: random.Random) -> dict:
    gentle = rng.random() < 0.4
    raw = {section: _section(rng, section, gentle) for section in SECTIONS if rng.random() < 0.7}
    if gentle:
        return raw
    if rng.random() < 0.03:
        raw[rng.choice(HOSTILE_TEXT)] = {}
    if rng.random() < 0.03:
        raw[rng.choice(list(raw) or ["model"])] = _value(rng)
    return raw


def _attempt(rng: random.Random, raw: dict):
    """Parse `raw` one of three ways; the spec, or None after a SpecError."""
    how = rng.random()
    try:
        if how < 0.6:
            spec = ExperimentSpec.from_dict(raw)
        elif how < 0.85:
            try:
                text = json.dumps(raw, allow_nan=True, default=str)
            except RecursionError:  # too deep for the encoder: write the nesting by hand
                text = '{"model": {"depth": ' + "[" * 3000 + "]" * 3000 + "}}"
            if rng.random() < 0.2:  # a damaged file
                text = text[:rng.randint(0, len(text))] + rng.choice(["", "}", "]]]", "\x00", "NaN"])
            spec = ExperimentSpec.from_json(text)
        else:
            query = {f"{section}.{key}" if key != "name" else section: reprlib.repr(value)
                     for section, values in raw.items() if isinstance(values, dict) for key, value in values.items()}
            spec = ExperimentSpec.from_query({str(k): v for k, v in query.items()})
        budget.check(spec)
        return spec
    except SpecError:
        return None


def test_ten_thousand_random_and_hostile_specs_give_a_spec_or_a_spec_error(tmp_path):
    restrict_reads([tmp_path])  # as on the server: no dataset file outside this folder is read
    rng = random.Random(16)
    started = time.monotonic()
    valid = []
    for i in range(N_SPECS):
        raw = _raw(rng)
        try:
            spec = _attempt(rng, raw)
        except Exception as error:  # anything but a SpecError is a bug: say which input
            pytest.fail(f"spec #{i} raised {type(error).__name__}: {str(error)[:300]}\ninput: {reprlib.repr(raw)}")
        if spec is not None:
            valid.append(spec)
    elapsed = time.monotonic() - started
    print(f"{N_SPECS} specs in {elapsed:.1f} s: {len(valid)} valid, {N_SPECS - len(valid)} refused with a SpecError")
    assert 100 < len(valid) < N_SPECS - 1000  # both outcomes are exercised

    trained = 0
    for spec in rng.sample(valid, len(valid)):  # train the first few small ones, in a random order
        if trained == 3:
            break
        if spec.train.device == "cuda" or budget.data_bytes(spec) > 1e6 or sum(budget.model_bytes(spec)) > 4e6:
            continue
        run = explorer.train(spec.with_values({"train.steps": 10, "train.log_every": 5}))
        assert run.status in ("finished", "diverged"), run.status
        trained += 1
    assert trained == 3
