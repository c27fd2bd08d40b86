"""ExperimentSpec: one declarative, validated description of an experiment.

A spec has six sections. Five name a registry entry and carry that entry's parameters
(data, model, topology, init, optim); `train` has a fixed set of fields. Every value is
checked on construction; errors are `SpecError`s naming the field path and the fix.

Two questions are kept apart: is a spec well-formed (types, ranges, registered names, the rules
across sections), and can it run on this machine (CUDA where it asks for it, its data files
readable here). A new spec is asked both (`from_dict`); a stored one, such as a recorded run's,
only the first (`from_dict(raw, runnable=False)`), so a run trained on a GPU node or on a data
folder this machine lacks still opens; `check_runnable` asks the second before it is built.

Round trips: `to_dict`/`from_dict`, `to_json`/`from_json`, and a compact URL query
(`to_query`/`from_query`) that lists only values that differ from the defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from explorer.registries import Entry, Param, SpecError, check_spec, quote, registry

# section -> registry kind
SECTION_KINDS = {
    "data": "datasets",
    "model": "models",
    "topology": "topologies",
    "init": "inits",
    "optim": "optimizers",
}
SECTIONS = (*SECTION_KINDS, "train")
MAX_SPEC_BYTES = 1_000_000  # a spec's JSON text: a real one is under 2 KB

TRAIN_PARAMS: tuple[Param, ...] = (
    Param("steps", "int", 200, "number of optimizer updates", low=1, high=10_000_000),
    Param("batch_size", "int", 128, "examples per update (full-batch optimizers use the whole training set)", low=1, high=1_000_000),
    Param("seed", "int", 0, "seeds data, weights and batch order", low=0, high=2**31 - 1),
    Param("device", "choice", "auto", "where to train; auto picks CUDA when present", choices=("auto", "cpu", "cuda")),
    Param("log_every", "int", 10, "record metrics (and check for divergence) every N steps", low=1, high=10_000_000),
    Param("diverge_factor", "float", 1e4, "stop as diverged when the loss exceeds this multiple of the first loss", low=1.0),
)

DEFAULT_NAMES = {"data": "digits", "model": "mlp", "topology": "cascaded", "init": "default", "optim": "adam"}


@dataclass(frozen=True)
class Section:
    """One spec section: the chosen registry name and its complete, validated parameters."""

    name: str | None
    params: Mapping[str, Any]

    def __getattr__(self, key: str) -> Any:
        params = object.__getattribute__(self, "params")
        if key in params:
            return params[key]
        raise AttributeError(key)

    def to_dict(self) -> dict[str, Any]:
        head = {} if self.name is None else {"name": self.name}
        return {**head, **dict(self.params)}

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted((k, repr(v)) for k, v in self.params.items()))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Section) and self.to_dict() == other.to_dict()


def _build_section(section: str, raw: Mapping[str, Any], stored: bool = False) -> Section:
    if not isinstance(raw, Mapping):
        raise SpecError(section, f"expected an object of parameters, got {quote(raw)}")
    values = dict(raw)
    if section == "train":
        name, params = None, TRAIN_PARAMS
        if "name" in values:
            raise SpecError("train.name", "the train section has no name; remove it")
    else:
        name = values.pop("name", DEFAULT_NAMES[section])
        try:
            params = registry(SECTION_KINDS[section]).lookup(name, f"{section}.name").params
        except SpecError as error:
            if not stored or not isinstance(name, str):
                raise
            raise SpecError(error.path, f"{error.message}; it is not registered in this process: import the "
                                        "module that registers it to open this spec") from None
    known = {p.name: p for p in params}
    for key in values:
        if key not in known:
            hint = difflib.get_close_matches(str(key), list(known), n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            owner = f"{section} {name!r}" if name else section
            raise SpecError(f"{section}.{str(key)[:80]}", f"unknown parameter for {owner}{did_you_mean}; "
                                                f"valid parameters: {', '.join(known) or 'none'}")
    complete = {p.name: p.coerce(values.get(p.name, p.default), f"{section}.{p.name}") for p in params}
    return Section(name, complete)


@dataclass(frozen=True, eq=False)
class ExperimentSpec:
    """A complete experiment: what data, which model, how it is wired, initialised and trained."""

    data: Section
    model: Section
    topology: Section
    init: Section
    optim: Section
    train: Section

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None = None, *, runnable: bool = True) -> ExperimentSpec:
        """Validate a nested dict (missing sections and parameters take their defaults).

        runnable=True (a new spec): well-formed and able to run on this machine, as `check_runnable` asks.
        runnable=False (a stored spec, e.g. a recorded run's): well-formed only, so it loads wherever it was
        trained; an entry not registered in this process still fails, as its parameters cannot be read.
        """
        if raw is not None and not isinstance(raw, Mapping):
            raise SpecError("spec", f"expected an object with sections {', '.join(SECTIONS)}, got {quote(raw)}")
        raw = dict(raw or {})
        for key in raw:
            if key not in SECTIONS:
                raise SpecError(str(key)[:80], f"unknown section; valid sections: {', '.join(SECTIONS)}")
        sections = {s: _build_section(s, raw.get(s, {}), stored=not runnable) for s in SECTIONS}
        spec = cls(**sections)
        if runnable:
            check_spec(spec)
        else:
            spec._check_form()
        return spec

    @classmethod
    def default(cls) -> ExperimentSpec:
        return cls.from_dict({})

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {s: getattr(self, s).to_dict() for s in SECTIONS}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> ExperimentSpec:
        """Parse and validate a spec's JSON text (at most MAX_SPEC_BYTES; numbers, nesting and types checked)."""
        if len(text) > MAX_SPEC_BYTES:
            raise SpecError("spec", f"the spec is {len(text):,} characters long, more than the {MAX_SPEC_BYTES:,} "
                                    "accepted; a spec file is a small JSON object (see `explorer train --help`)")
        try:
            raw = json.loads(text, parse_int=_parse_int)
        except json.JSONDecodeError as err:
            raise SpecError("spec", f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
        except RecursionError:
            raise SpecError("spec", "the JSON is nested too deeply; a spec is an object of sections holding "
                                    "parameter values") from None
        except (ValueError, UnicodeDecodeError) as err:  # e.g. bytes that are not UTF-8 text
            raise SpecError("spec", f"not a valid spec JSON ({str(err)[:120]})") from None
        if not isinstance(raw, dict):
            raise SpecError("spec", "a spec file must hold a JSON object with sections data, model, ...")
        long = _find_long_number(raw)
        if long is not None:
            path, number = long
            raise SpecError(path, f"is a number with {number.digits:,} digits, more than the {number.limit:,} "
                                  "Python reads; use a value in the parameter's range")
        return cls.from_dict(raw)

    # ---- editing ------------------------------------------------------------------
    def with_values(self, changes: Mapping[str, Any]) -> ExperimentSpec:
        """A new spec with dotted-path values changed, e.g. {"model.depth": 10}.

        Strings are parsed with the parameter's type, so CLI and URL text work as is.
        Changing a section's name resets that section's other parameters to the new
        entry's defaults, except those also given in `changes`.
        """
        raw = self.to_dict()
        for path in changes:
            if not isinstance(path, str):
                raise SpecError(quote(path), "a change is named by a dotted path such as model.depth")
        for path, value in changes.items():
            section, _, key = path.partition(".")
            if section not in SECTIONS or not key:
                raise SpecError(path[:80], f"expected section.parameter with a section among {', '.join(SECTIONS)}")
            if key == "name":
                if section == "train":
                    raise SpecError(path, "the train section has no name")
                if value != raw[section]["name"]:
                    raw[section] = {"name": value}
        for path, value in changes.items():
            section, _, key = path.partition(".")
            if key != "name":
                raw[section][key] = value
        return ExperimentSpec.from_dict(raw)

    def get(self, path: str) -> Any:
        section, _, key = path.partition(".")
        if section not in SECTIONS:
            raise SpecError(path, f"unknown section; valid sections: {', '.join(SECTIONS)}")
        values = getattr(self, section).to_dict()
        if key not in values:
            raise SpecError(path, f"unknown parameter; valid: {', '.join(values)}")
        return values[key]

    # ---- URL query ------------------------------------------------------------------
    def to_query(self) -> str:
        """Compact URL query: section names and the parameters that differ from defaults."""
        pairs = []
        for section in SECTIONS:
            part = getattr(self, section)
            if section != "train" and part.name != DEFAULT_NAMES[section]:
                pairs.append((section, part.name))
            for param in _params_of(section, part.name):
                value = part.params[param.name]
                if value != param.default or type(value) is not type(param.default):
                    pairs.append((f"{section}.{param.name}", param.format(value)))
        return urllib.parse.urlencode(pairs, safe=":/,^()")

    @classmethod
    def from_query(cls, query: str | Mapping[str, Any], base: ExperimentSpec | None = None) -> ExperimentSpec:
        """Inverse of `to_query`; also accepts a mapping such as Streamlit's query params. The values change
        `base` (a preset, say), by default the default spec. A query text is at most MAX_SPEC_BYTES characters,
        checked before it is split; each value is then read by its parameter."""
        if isinstance(query, str):
            if len(query) > MAX_SPEC_BYTES:
                raise SpecError("query", f"the link's query is {len(query):,} characters long, more than the "
                                         f"{MAX_SPEC_BYTES:,} accepted; a link lists only the values that differ "
                                         "from the defaults")
            pairs = urllib.parse.parse_qsl(query.lstrip("?"), keep_blank_values=True)
        else:
            pairs = [(k, v[-1] if isinstance(v, list) else v) for k, v in query.items()]
        changes = {}
        for key, value in pairs:
            path = key if "." in key else f"{key}.name"
            changes[path] = value
        return (base or cls.default()).with_values(changes)

    # ---- cross-field checks ---------------------------------------------------------
    def check_runnable(self, device: Any = None) -> None:
        """Raise a one-line SpecError (the field and the fix) unless this spec can be built here: CUDA present
        where it trains on CUDA, its data files readable, every rule across sections met.

        `device` ("cpu", "cuda", "auto" or a torch.device) stands for train.device, as in
        `explorer.build(spec, device=...)`: a run trained on CUDA can be rebuilt for probing with device="cpu".
        """
        check_spec(self if device is None else self._on_device(device))

    def _check_form(self) -> None:
        """The rules across sections that do not depend on this machine. CUDA's presence is not asked (the spec
        is judged as if on a CPU), and when a dataset's files (data.path) cannot serve here, the rules that
        need their shapes wait for `check_runnable`."""
        try:
            check_spec(self._on_device("cpu"))
        except SpecError as error:
            if not (error.path.startswith("data.") and self.data.params.get("path")):
                raise

    def _on_device(self, device: Any) -> ExperimentSpec:
        """This spec with train.device set to `device` (a torch.device counts by its type: "cuda:1" is cuda)."""
        name = str(getattr(device, "type", device)).partition(":")[0]
        choice = next(p for p in TRAIN_PARAMS if p.name == "device").coerce(name, "device")
        if choice == self.train.device:
            return self
        return dataclasses.replace(self, train=Section(None, {**self.train.params, "device": choice}))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExperimentSpec) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.to_json(indent=None))

    def __repr__(self) -> str:
        return f"ExperimentSpec({self.to_json(indent=None)})"


def _params_of(section: str, name: str | None) -> tuple[Param, ...]:
    if section == "train":
        return TRAIN_PARAMS
    entry: Entry = registry(SECTION_KINDS[section])[name]
    return entry.params


# ---- JSON parsing (from_json) ---------------------------------------------------------

class _LongNumber:
    """An integer in a spec's JSON with more digits than Python converts (sys.get_int_max_str_digits)."""

    def __init__(self, digits: int, limit: int):
        self.digits, self.limit = digits, limit


def _parse_int(text: str) -> int | _LongNumber:
    """json's parse_int: int(text), or a _LongNumber that from_json reports at its field."""
    limit = sys.get_int_max_str_digits()
    digits = len(text.lstrip("-"))
    return _LongNumber(digits, limit) if limit and digits > limit else int(text)


def _find_long_number(value: Any, path: str = "") -> tuple[str, _LongNumber] | None:
    """(dotted path, number) of the first _LongNumber in parsed JSON ("spec" when it is the whole text), else None."""
    if isinstance(value, _LongNumber):
        return path or "spec", value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _find_long_number(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key)
        if found is not None:
            return found
    return None
