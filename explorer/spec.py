"""ExperimentSpec: one declarative, validated description of an experiment.

A spec has six sections. Five name a registry entry and carry that entry's parameters
(data, model, topology, init, optim); `train` has a fixed set of fields. Every value is
checked on construction; errors are `SpecError`s naming the field path and the fix.

Round trips: `to_dict`/`from_dict`, `to_json`/`from_json`, and a compact URL query
(`to_query`/`from_query`) that lists only values that differ from the defaults.
"""

from __future__ import annotations

import difflib
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from explorer.registries import Entry, Param, Registry, SpecError, check_spec, quote, registry

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


def _build_section(section: str, raw: Mapping[str, Any]) -> Section:
    if not isinstance(raw, Mapping):
        raise SpecError(section, f"expected an object of parameters, got {quote(raw)}")
    values = dict(raw)
    if section == "train":
        name, params = None, TRAIN_PARAMS
        if "name" in values:
            raise SpecError("train.name", "the train section has no name; remove it")
    else:
        name = values.pop("name", DEFAULT_NAMES[section])
        params = registry(SECTION_KINDS[section]).lookup(name, f"{section}.name").params
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
    def from_dict(cls, raw: Mapping[str, Any] | None = None) -> ExperimentSpec:
        """Validate a nested dict (missing sections and parameters take their defaults)."""
        if raw is not None and not isinstance(raw, Mapping):
            raise SpecError("spec", f"expected an object with sections {', '.join(SECTIONS)}, got {quote(raw)}")
        raw = dict(raw or {})
        for key in raw:
            if key not in SECTIONS:
                raise SpecError(str(key)[:80], f"unknown section; valid sections: {', '.join(SECTIONS)}")
        sections = {s: _build_section(s, raw.get(s, {})) for s in SECTIONS}
        spec = cls(**sections)
        spec._check_combination()
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
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError("spec", f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
        except RecursionError:
            raise SpecError("spec", "the JSON is nested too deeply; a spec is an object of sections holding "
                                    "parameter values") from None
        except (ValueError, UnicodeDecodeError) as err:  # e.g. an integer with more than 4300 digits
            raise SpecError("spec", f"not a valid spec JSON ({str(err)[:120]})") from None
        if not isinstance(raw, dict):
            raise SpecError("spec", "a spec file must hold a JSON object with sections data, model, ...")
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
    def from_query(cls, query: str | Mapping[str, Any]) -> ExperimentSpec:
        """Inverse of `to_query`; also accepts a mapping such as Streamlit's query params."""
        if isinstance(query, str):
            pairs = urllib.parse.parse_qsl(query.lstrip("?"), keep_blank_values=True)
        else:
            pairs = [(k, v[-1] if isinstance(v, list) else v) for k, v in query.items()]
        changes = {}
        for key, value in pairs:
            path = key if "." in key else f"{key}.name"
            changes[path] = value
        return cls.default().with_values(changes)

    # ---- cross-field checks ---------------------------------------------------------
    def _check_combination(self) -> None:
        check_spec(self)

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
