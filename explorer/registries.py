"""Named choices (datasets, models, topologies, ...) and the typed parameters each one takes.

Every choice a spec can name lives in a `Registry`. An `Entry` carries a one-line
description, the `Param`s it accepts (type, default, range, help), the factory that
builds it and its typed metadata: one frozen dataclass per kind (`TopologyInfo`,
`ModelInfo`, ...), whose fields are the questions other code asks of an entry (does this
topology need a Transformer? how many blocks does this model have?). The spec validates
against these declarations, the CLI lists them, and the app generates its widgets from
them, so a new entry needs no change anywhere else.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any


class SpecError(ValueError):
    """An invalid experiment description: names the field path and says how to fix it."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


MAX_TEXT_CHARS = 4096  # longest text parameter (a path, a shortcut list)
QUOTE_CHARS = 80  # a user's value quoted in a message is cut to this many characters


def quote(value: Any) -> str:
    """repr(value) for a message, cut to QUOTE_CHARS (a value may be a 5000-digit number or a huge list)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, a self-nesting list
        text = f"a {type(value).__name__}"
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 5] + " ...' (cut)"


# Rules accepted where a parameter takes a number *or* a depth-dependent rule (tau).
DEPTH_RULES = ("1/L", "1/sqrt(L)", "1/L^0.25")


@dataclass(frozen=True)
class Param:
    """One typed parameter of a registry entry.

    kind is one of "int", "float", "bool", "choice", "str", "rule" (a float or one of
    DEPTH_RULES). low/high bound numbers (inclusive); choices lists valid strings. A "str" value
    is at most MAX_TEXT_CHARS long, and `parse` (the one parser of its syntax, which reads it in
    time linear in its length) checks it; its result is not kept, the value stays as written.
    """

    name: str
    kind: str
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str, str], Any] | None = None  # (text, path) -> anything, or SpecError: a "str" value's syntax

    def coerce(self, value: Any, path: str) -> Any:
        """Return `value` converted to this parameter's type, or raise SpecError."""
        kind = self.kind
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            raise SpecError(path, f"expected true or false, got {quote(value)}")
        if kind == "int":
            as_float = _number(value, path, "an integer")
            if not math.isfinite(as_float) or as_float != int(as_float):
                raise SpecError(path, f"expected an integer, got {quote(value)}")
            return self._check_range(int(as_float), path)
        if kind == "float":
            return self._check_range(_to_float(value, path), path)
        if kind == "rule":
            if isinstance(value, str) and check_text(value, path).replace(" ", "") in DEPTH_RULES:
                return value.replace(" ", "")
            try:
                number = _to_float(value, path)
            except SpecError:
                raise SpecError(path, f"expected a number or one of {', '.join(DEPTH_RULES)}, got {quote(value)}") from None
            return self._check_range(number, path)
        if kind == "choice":
            if value not in self.choices:
                raise SpecError(path, f"{quote(value)} is not valid; choose one of: {', '.join(self.choices)}")
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise SpecError(path, f"expected text, got {quote(value)}")
            check_text(value, path, ascii_only=False)  # a path may be any text; a parser asks for ASCII itself
            if self.parse is not None:
                self.parse(value, path)
            return value
        raise AssertionError(f"unknown parameter kind {kind}")

    def _check_range(self, number: float, path: str) -> float:
        if self.low is not None and number < self.low:
            raise SpecError(path, f"must be at least {_show(self.low)}, got {_show(number)}; set it to {_show(self.low)} or more")
        if self.high is not None and number > self.high:
            raise SpecError(path, f"must be at most {_show(self.high)}, got {_show(number)}; set it to {_show(self.high)} or less")
        return number

    def format(self, value: Any) -> str:
        """A string that `coerce` turns back into exactly `value` (for URLs and the command line)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return repr(value)
        return str(value)


def _show(number: float) -> str:
    """A number as people write it, exactly: 2147483647 rather than 2.14748e+09."""
    if float(number).is_integer() and abs(number) < 1e16:
        return str(int(number))
    return repr(float(number))


def check_text(text: str, path: str, ascii_only: bool = True) -> str:
    """`text` if it is at most MAX_TEXT_CHARS characters (checked first, before anything reads it) and, with
    `ascii_only`, ASCII; else a SpecError naming `path`. Digits of other scripts (Arabic-Indic, fullwidth) pass
    str.isdigit(), int() and float(), so text that holds numbers must be ASCII (a URL stays canonical)."""
    if len(text) > MAX_TEXT_CHARS:
        raise SpecError(path, f"is {len(text)} characters long; at most {MAX_TEXT_CHARS} are accepted")
    if ascii_only and not text.isascii():
        char = next(c for c in text if not c.isascii())
        raise SpecError(path, f"{quote(text)} contains the non-ASCII character {char!r}; write the digits 0-9 "
                              "and ASCII signs only")
    return text


# An unsigned decimal number in ASCII digits. Its parts cannot match the same characters, so a match takes time
# linear in the text; a sign, where one is allowed, is read beside it.
NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_SIGNED_NUMBER = re.compile(r"[-+]?" + NUMBER)
_NOT_FINITE = ("inf", "infinity", "nan")  # as text, read as such, so the message says "finite"


def _number(value: Any, path: str, expected: str) -> float:
    """float(value) (an int too large for a float is inf); a SpecError saying `expected` for a bool or a non-number.
    Text is a decimal number in ASCII digits ("1e-3", "-.5"), or inf or nan (refused later as not finite)."""
    if isinstance(value, (bool, bytes, bytearray)):
        raise SpecError(path, f"expected {expected}, got {quote(value)}")
    if isinstance(value, str):
        text = check_text(value, path).strip()
        if _SIGNED_NUMBER.fullmatch(text) or (text[1:] if text[:1] in "+-" else text).lower() in _NOT_FINITE:
            return float(text)
        raise SpecError(path, f"expected {expected}, got {quote(value)}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(path, f"expected {expected}, got {quote(value)}") from None
    except OverflowError:
        return math.inf


def _to_float(value: Any, path: str) -> float:
    number = _number(value, path, "a number")
    if not math.isfinite(number):
        raise SpecError(path, f"must be a finite number, got {quote(value)}")
    return number


# --------------------------------------------------------------------------------------
# typed metadata: what an entry of each kind declares beside its parameters
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DatasetInfo:
    """A dataset's metadata."""

    dims: Callable[[dict], tuple]  # params -> (input shape, output dim, task), without generating the data
    check: Callable[[dict], None] | None = None  # params -> None, or SpecError (e.g. a file that is missing)


@dataclass(frozen=True)
class ModelInfo:
    """A model's metadata."""

    n_blocks: Callable[[dict, Any], int]  # (model params, topology section) -> blocks the topology spans
    # (model params, one example's input shape) -> positions each layer computes on per example: tokens,
    # patches (+ a class token), pixels; 1 for a dense layer. The memory budget scales activations by it.
    positions: Callable[[dict, tuple[int, ...]], int]
    # the "data" and "model" sections of a tiny spec that builds it in well under a second: every test that sweeps
    # the models (reference forwards, inits, budgets) builds it, so a new model is under them without editing one
    example: Mapping[str, Mapping[str, Any]]
    check: Callable[[Any, Any], None] | None = None  # (spec, data dims) -> None, or SpecError
    transformer: bool = False  # has attention: Transformer-only topologies and attention inits apply


@dataclass(frozen=True)
class TopologyInfo:
    """A topology's metadata: what the spec checks and the model builders ask before one is built.

    `examples` are the parameter values the tests run it with (each over its defaults; each fits a
    stack of two blocks), so a new topology is under every topology test without editing one.
    """

    check: Callable[[dict, int], None] | None = None  # (params, n_blocks) -> None, or SpecError
    examples: tuple[dict, ...] = ({},)
    residual: bool = True  # has a skip path (ReZero and SkipInit gate residual branches, so they need one)
    shareable: bool = False  # one instance may serve several stacks (its parameters do not depend on the block count)
    transformer_only: bool = False  # defined only on Transformer blocks
    level: str | None = None  # Transformers: "module" if it always acts between attention and MLP sub-blocks
    separate_qkv_inputs: bool = False  # feeds each Transformer block separate query, key and value inputs
    layer_residual: bool = False  # on whole residual layers it keeps each layer's own residual (factory keyword)


@dataclass(frozen=True)
class InitInfo:
    """An initialisation scheme's metadata."""

    check: Callable[[Any], None] | None = None  # spec -> None, or SpecError
    gates: bool = False  # adds a zero-initialised scalar gate on every residual branch (changes the architecture)
    attention: Callable[..., tuple[str, ...]] | None = None  # (attention module, gen, **params) -> names it filled
    finalize: Callable[[Any], Any] | None = None  # model -> anything; runs once every parameter is filled
    needs_architecture: bool = False  # the fill function also receives n_branches and layers_per_branch


@dataclass(frozen=True)
class OptimizerInfo:
    """An optimizer's metadata."""

    full_batch: bool = False  # every step uses the whole training set


@dataclass(frozen=True)
class ProbeInfo:
    """A probe's metadata. `cost` says what the probe allocates, so that a request past the memory cap is refused
    before anything runs: it takes an `explorer.budget.ProbeCost` (the model's sizes, the probe's options and its
    inputs, with the forward-pass and Jacobian helpers) and returns bytes beyond the model's weights."""

    cost: Callable[[Any], float]
    tensors: Mapping[str, str] = field(default_factory=dict)  # options that take a tensor: {name: help}


@dataclass(frozen=True)
class PresetInfo:
    """A preset's metadata."""

    paper: str  # the id of the paper whose experiment it is


# kind -> its metadata class, in the order the CLI lists the kinds
INFO = {"datasets": DatasetInfo, "models": ModelInfo, "topologies": TopologyInfo, "inits": InitInfo,
        "optimizers": OptimizerInfo, "presets": PresetInfo, "probes": ProbeInfo}
KINDS = tuple(INFO)


@dataclass(frozen=True)
class Entry:
    """A named choice: description, parameters, the factory that builds it and its typed metadata."""

    name: str
    description: str
    params: tuple[Param, ...]
    factory: Callable[..., Any]
    info: Any  # the kind's metadata class (INFO[kind])

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


_BY_KIND: dict[str, Registry] = {}  # every registry made, by kind: `registry(kind)` looks them up here


class Registry(Mapping[str, Entry]):
    """An ordered name -> Entry mapping for one kind of choice.

    A registry lists itself by kind when it is made, so the layers below the one that fills it
    (the spec, the command line) find it by name without importing that layer.
    """

    def __init__(self, kind: str, common: tuple[Param, ...] = ()):
        self.kind = kind
        self.common = common  # parameters every entry of this kind accepts
        self.info_type = INFO[kind]
        self._entries: dict[str, Entry] = {}
        _BY_KIND[kind] = self

    def register(self, name: str, description: str, params: tuple[Param, ...] = (),
                 defaults: Mapping[str, Any] | None = None, **info: Any):
        """Decorator: register `factory` under `name`; `defaults` overrides common parameters' defaults and
        the keywords `info` are the kind's metadata fields (TypeError naming an unknown or missing one)."""
        common = tuple(dataclasses.replace(p, default=defaults[p.name]) if defaults and p.name in defaults else p
                       for p in self.common)
        metadata = self.make_info(name, info)

        def add(factory: Callable[..., Any]) -> Callable[..., Any]:
            self.add(Entry(name, description, common + tuple(params), factory, metadata))
            return factory

        return add

    def make_info(self, name: str, info: Mapping[str, Any]):
        """This kind's metadata for entry `name` from keywords; an unknown or missing field is a TypeError."""
        fields = dataclasses.fields(self.info_type)
        valid = [f.name for f in fields]
        for key in info:
            if key not in valid:
                raise TypeError(f"{self.kind} entry {name!r}: unknown metadata {key!r}; valid: {', '.join(valid) or 'none'}")
        missing = [f.name for f in fields if f.default is MISSING and f.default_factory is MISSING and f.name not in info]
        if missing:
            raise TypeError(f"{self.kind} entry {name!r}: metadata {', '.join(map(repr, missing))} is required "
                            f"({self.info_type.__name__})")
        return self.info_type(**info)

    def add(self, entry: Entry) -> None:
        if not isinstance(entry.info, self.info_type):
            raise TypeError(f"{self.kind} entry {entry.name!r}: its metadata must be a {self.info_type.__name__}, "
                            f"got {type(entry.info).__name__}")
        if entry.name in self._entries:
            raise ValueError(f"{self.kind}: {entry.name!r} is registered twice")
        self._entries[entry.name] = entry

    def unregister(self, name: str) -> None:
        """Remove the entry `name` (a test's own entry, once the test is done); KeyError if there is none."""
        del self._entries[name]

    def lookup(self, name: Any, path: str) -> Entry:
        """The entry called `name`, or a SpecError listing the valid names."""
        if not isinstance(name, str):
            raise SpecError(path, f"expected a name (text), got {quote(name)}; valid names: {', '.join(self._entries)}")
        if name in self._entries:
            return self._entries[name]
        hint = difflib.get_close_matches(str(name), list(self._entries), n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise SpecError(path, f"unknown {self.kind[:-1] if self.kind.endswith('s') else self.kind} {quote(name)}{did_you_mean}; "
                              f"valid names: {', '.join(self._entries)}")

    def describe(self) -> dict[str, str]:
        """name -> one-line description."""
        return {name: entry.description for name, entry in self._entries.items()}

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def registry(kind: str) -> Registry:
    """The public registry of `kind` (one of KINDS), filled once `explorer` is imported."""
    found = _BY_KIND.get(kind) if kind in KINDS else None
    if found is None:
        raise SpecError("kind", f"unknown registry {kind!r}; valid kinds: {', '.join(KINDS)}")
    return found


# Checks that need more than one spec section (shapes that must fit, shortcuts that must exist). They live
# with the layer that knows every section (explorer.combinations) and register here, where the spec finds them.
_CHECKS: list[Callable] = []


def add_check(check: Callable) -> Callable:
    """Register `check(spec)`, run on every spec after its sections are valid; raises SpecError."""
    _CHECKS.append(check)
    return check


def check_spec(spec) -> None:
    """Run every registered cross-section check on a spec whose sections are each valid."""
    for check in _CHECKS:
        check(spec)


def import_folder(package: str, path) -> None:
    """Import every module of `package` (its `__path__`), so each file that registers entries is registered:
    a new topology or probe is one new file in its folder."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")


def import_files(folder, prefix: str) -> None:
    """Import every .py file of a plug-in `folder` outside the library (files starting with "_" are skipped)
    as module `prefix`<stem>, once per process, so each file that registers entries is registered."""
    import importlib.util
    import sys
    from pathlib import Path

    for path in sorted(Path(folder).glob("*.py")):
        name = f"{prefix}{path.stem}"
        if path.stem.startswith("_") or name in sys.modules:
            continue
        found = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise SpecError(str(path), f"the plug-in failed to import ({type(error).__name__}: {error}); "
                                       f"fix the file or move it out of {folder}") from error
