"""Typed text cannot stall the process: every text parameter, the sweep grid, `--set` and URL queries are read in
time linear in their length (the length cap first), digits are ASCII only, and no parameter is checked by a regex.

Each hostile input runs under a hard deadline (SIGALRM interrupts Python's regex engine too), so a parser that
backtracks fails here in seconds instead of freezing the suite; a linear parser takes milliseconds.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
import signal
import sys
import time
from pathlib import Path

import pytest

import explorer
from explorer import ExperimentSpec, SpecError
from explorer.cli import load_spec
from explorer.registries import MAX_TEXT_CHARS, Param, registry
from explorer.spec import SECTION_KINDS, TRAIN_PARAMS
from explorer.sweeps import design_grid, parse_grid, split_values

LIMIT_S = 0.5  # per input of up to ~4,100 characters: >100x what a linear parse takes, far below a backtracking one
REPRODUCER = "0:1*1111111111,"  # repeated then ended by "x": a backtracking pattern's time grows exponentially with n
PRESET = "ancre-fig2b-0:2"


def hostile_texts() -> dict[str, str]:
    """Name -> text: backtracking bait, long runs, separators alone, non-ASCII digits, texts at the length cap."""
    texts = {f"reproducer-{n}": REPRODUCER * n + "x" for n in (8, 20, 200)}
    texts.update({
        "digits": "9" * 4000, "digits-colon": "1" * 2000 + ":" + "2" * 1999,
        "dots": "0:1*" + "1." * 2000, "dotted-items": "0:1*1.1.1.1," * 300 + "x",
        "exponents": "1e" * 2000, "exponent-items": "0:1*1e1e1e1e," * 300 + "x",
        "signs": "+-" * 2000, "weight-signs": "0:1*" + "+-" * 2000 + "1",
        "colons-after-0": "0:" * 2000, "colons": ":" * 4000, "commas": "," * 4000, "pluses": "+" * 4000,
        "stars": "*" * 4000, "equals": "=" * 4000, "pairs-then-x": "a=b," * 1000 + "=", "spaces": " " * 4000 + "x",
        "tabs-and-commas": "\t,\n" * 1300 + "0", "items-spaced": "0 : 1 * 1 " * 400 + "x",
        "arabic-indic": "\u0660:\u0662", "fullwidth": "\uff10:\uff12", "arabic-number": "\u0661\u0662",
        "fullwidth-number": "\uff10.\uff15", "math-bold": "\U0001d7ce:\U0001d7d0", "superscript": "\u00b2",
        "zero-width": "0:2\u200b", "nbsp": "0:1\u00a00:2", "underscore": "1_000",
        "under-cap": " " * (MAX_TEXT_CHARS - 3) + "0:2", "at-cap-number": "0" * (MAX_TEXT_CHARS - 1) + "3",
        "over-cap": " " * (MAX_TEXT_CHARS - 2) + "0:2", "over-cap-number": "0" * MAX_TEXT_CHARS + "1",
    })
    return texts


HOSTILE = hostile_texts()
NON_ASCII = [name for name, text in HOSTILE.items() if not text.isascii()]
OVER_CAP = [name for name, text in HOSTILE.items() if len(text) > MAX_TEXT_CHARS]


@contextlib.contextmanager
def deadline(what: str, seconds: float = LIMIT_S):
    """Run the block under a hard stop after `seconds` (an AssertionError naming `what`)."""
    def stop(signum, frame):
        raise AssertionError(f"{what} took more than {seconds} s: the parse is not linear in the input")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - start < seconds, f"{what} took more than {seconds} s"


def refused_or_accepted(call, path: str, what: str):
    """call() under the deadline: its result, or the SpecError it raised, which must name `path` in one line. A call
    past the deadline runs once more under it, so a pause of the machine (another process, the collector) cannot fail
    the test: a parse that is not linear misses the deadline both times."""
    def timed():
        with deadline(what):
            try:
                return call()
            except SpecError as error:
                assert error.path == path, f"{what}: the error names {error.path!r}, not {path!r}"
                assert "\n" not in str(error), f"{what}: a message of more than one line"
                return error

    try:
        return timed()
    except AssertionError as missed:
        if "took more than" not in str(missed):
            raise
        return timed()


def typed_params():
    """(path, Param) for every typed parameter of every registry entry, and the train section's."""
    found = [(f"train.{p.name}", p) for p in TRAIN_PARAMS]
    for section, kind in SECTION_KINDS.items():
        for entry in registry(kind).values():
            found += [(f"{section}.{p.name}", p) for p in entry.params]
    return found


PARAMS = typed_params()


@pytest.mark.parametrize("path, param", PARAMS, ids=[f"{path}[{param.kind}]" for path, param in PARAMS])
def test_every_typed_parameter_reads_hostile_text_in_linear_time(path, param):
    for name, text in HOSTILE.items():
        outcome = refused_or_accepted(lambda: param.coerce(text, path), path, f"{path} on {name!r}")
        if param.kind in ("int", "float", "rule") and name in NON_ASCII:
            assert isinstance(outcome, SpecError), f"{path} accepted the non-ASCII {text!r}"
        if param.kind == "str" and name in OVER_CAP:
            assert isinstance(outcome, SpecError) and f"at most {MAX_TEXT_CHARS}" in outcome.message


@pytest.mark.parametrize("path, param", [(path, p) for path, p in PARAMS if p.kind in ("int", "float", "rule")],
                         ids=lambda value: value if isinstance(value, str) else "")
def test_numbers_written_with_other_digits_are_refused_naming_the_character(path, param):
    for text, char in [("\u0661\u0662", "\u0661"), ("\uff11", "\uff11"), ("1\u0660", "\u0660")]:
        with pytest.raises(SpecError) as refused:
            param.coerce(text, path)
        assert refused.value.path == path
        assert f"non-ASCII character {char!r}" in refused.value.message and "0-9" in refused.value.message


@pytest.mark.parametrize("text, value", [("3", 3.0), (" 0.5 ", 0.5), ("1e-3", 1e-3), ("-.5", -0.5), ("+2.", 2.0)])
def test_numbers_as_text_still_read(text, value):
    param = Param("x", "float", 1.0, "a number")
    assert param.coerce(text, "x") == value


@pytest.mark.parametrize("path, text", [("topology.shortcuts", "\u0660:\u0662"), ("topology.shortcuts", "0:\uff12"),
                                        ("topology.logits", "0:2*\u0661"), ("init.overrides", "head=orth\u043egonal")])
def test_text_with_non_ascii_characters_is_refused_naming_the_field(path, text):
    section, name = path.split(".")
    base = ExperimentSpec.default().with_values({f"{section}.name": {"topology.shortcuts": "shortcuts",
                                                                     "topology.logits": "ancre"}.get(path, "default")})
    with pytest.raises(SpecError) as refused:
        base.with_values({path: text})
    assert refused.value.path == path and "non-ASCII character" in refused.value.message


@pytest.mark.parametrize("n", [8, 20, 200])
@pytest.mark.parametrize("path", ["topology.shortcuts", "topology.logits"])
def test_the_backtracking_reproducer_is_refused_at_once_quoting_the_item(path, n):
    param = next(p for p2, p in PARAMS if p2 == path)
    refused = refused_or_accepted(lambda: param.coerce(REPRODUCER * n + "x", path), path, f"{path} x{n}")
    assert isinstance(refused, SpecError) and "'x' is not a shortcut" in refused.message
    refused = refused_or_accepted(lambda: explorer.parse_shortcuts(REPRODUCER * n + "x", 3, path), path, "parse")
    assert isinstance(refused, SpecError) and "'x' is not a shortcut" in refused.message


@pytest.mark.parametrize("text, weights", [
    ("0:2", {(0, 2): 1.0}), (" 1:2+2:3, 0:4 ", {(1, 2): 1.0, (2, 3): 1.0, (0, 4): 1.0}),
    ("0 : 3 * 0.5", {(0, 3): 0.5}), ("0:1*-1 0:2*+2\t1:2*.5,2:3*5.", {(0, 1): -1.0, (0, 2): 2.0, (1, 2): 0.5, (2, 3): 5.0}),
    ("0:1*1e-5+1:2*2E+1", {(0, 1): 1e-5, (1, 2): 20.0}), ("  ", {}),
])
def test_shortcut_lists_read_as_written(text, weights):
    assert explorer.parse_shortcuts(text) == weights
    assert explorer.parse_shortcuts(explorer.shortcuts_text(weights)) == weights


@pytest.mark.parametrize("text, words", [
    ("0:1,", "','"), (",0:1", "','"), ("0:1,,0:2", "','"), ("0:1+", "'+'"), ("0:1*", "'0:1*' is not a shortcut"),
    ("0:1*1e", "'0:1*1e' is not"), ("0:1*- 1", "is not a shortcut"), ("0:1*2+3", "is not a shortcut"),
    ("0:1.5", "'0:1.5' is not"), ("1e1:2", "'1e1:2' is not"), ("0:12:3", "is not a shortcut"),
])
def test_malformed_shortcut_lists_are_refused_in_one_line(text, words):
    for parse in (lambda: explorer.parse_shortcuts(text),
                  lambda: ExperimentSpec.default().with_values({"topology.name": "shortcuts",
                                                                "topology.shortcuts": text})):
        with pytest.raises(SpecError) as refused:
            parse()
        assert refused.value.path == "topology.shortcuts" and words in refused.value.message
        assert "\n" not in str(refused.value)


def test_the_shortcuts_topology_needs_at_least_one_shortcut_and_ancre_logits_may_be_empty():
    base = ExperimentSpec.default()
    with pytest.raises(SpecError) as refused:
        base.with_values({"topology.name": "shortcuts", "topology.shortcuts": " "})
    assert refused.value.path == "topology.shortcuts" and "topology.name=none" in refused.value.message
    assert base.with_values({"topology.name": "ancre", "topology.logits": " "}).topology.logits == " "


def test_the_sweep_grid_text_is_split_in_linear_time():
    for name, text in HOSTILE.items():
        for call, path in [(lambda: split_values(text), "grid"),
                           (lambda: parse_grid([f"model.depth={text}"]), "--grid"),
                           (lambda: design_grid(ExperimentSpec.default(), [text]), "topology.shortcuts")]:
            outcome = refused_or_accepted(call, path, f"the grid on {name!r}")
            if name in OVER_CAP and path != "topology.shortcuts":
                assert isinstance(outcome, SpecError) and f"at most {MAX_TEXT_CHARS}" in outcome.message
    assert split_values("0:3,1:4; 0:2") == ["0:3,1:4", "0:2"] and split_values("3, 4") == ["3", "4"]


@pytest.mark.parametrize("path", ["topology.shortcuts", "topology.logits", "init.overrides", "model.depth",
                                  "optim.lr"])
def test_set_and_url_queries_read_hostile_values_in_linear_time(path):
    names = {"topology.shortcuts": "shortcuts", "topology.logits": "ancre"}
    changes = {"topology.name": names[path]} if path in names else {}
    load_spec(PRESET, None, [f"{key}={value}" for key, value in changes.items()])  # imports, once: not under test
    for name, text in HOSTILE.items():
        query = "&".join(f"{key}={value}" for key, value in {**changes, path: text}.items())
        refused_or_accepted(lambda: ExperimentSpec.from_query(query), path, f"the URL ?{path}= {name!r}")
        refused_or_accepted(lambda: ExperimentSpec.from_query({**changes, path: text}), path, f"a query {name!r}")
        sets = [f"{key}={value}" for key, value in {**changes, path: text}.items()]
        refused_or_accepted(lambda: load_spec(PRESET, None, sets), path, f"--set {path}= {name!r}")


def test_a_query_longer_than_a_spec_is_refused_before_it_is_read():
    refused = refused_or_accepted(lambda: ExperimentSpec.from_query("model.depth=" + "9" * 2_000_000), "query",
                                  "a 2 MB query")
    assert isinstance(refused, SpecError) and "characters long" in refused.message


# ---- the rule: no parameter is checked by a regex, and no regex in the library nests quantifiers -------------

def test_a_parameter_declares_a_parser_not_a_regex():
    fields = {f.name for f in dataclasses.fields(Param)}
    assert not {"pattern", "regex"} & fields, "a Param checks its text with a parse callable, never a regex"
    parsed = {path for path, p in PARAMS if p.parse is not None}
    assert {"topology.shortcuts", "topology.logits", "init.overrides"} <= parsed


def _repeats_inside_repeats(parsed, inside: bool = False) -> bool:
    """Whether a regex parse tree has a repeat (max > 1) inside another one: the shape that backtracks
    exponentially ((a+)+, (\\d+\\.?\\d*,)*)."""
    from re import _constants as constants  # noqa: PLC0415 (the stdlib's regex parse tree)

    repeats = (constants.MAX_REPEAT, constants.MIN_REPEAT, getattr(constants, "POSSESSIVE_REPEAT", None))
    for op, argument in parsed:
        if op in repeats:
            low, high, body = argument
            many = high > 1
            if many and inside:
                return True
            if _repeats_inside_repeats(body, inside or many):
                return True
        elif op == constants.SUBPATTERN:
            if _repeats_inside_repeats(argument[-1], inside):
                return True
        elif op == constants.BRANCH:
            if any(_repeats_inside_repeats(branch, inside) for branch in argument[1]):
                return True
        elif op in (constants.ASSERT, constants.ASSERT_NOT):
            if _repeats_inside_repeats(argument[1], inside):
                return True
    return False


def library_regexes() -> dict[str, str]:
    """Where -> pattern of every regex in the library: compiled module attributes, and literal patterns passed to
    re's functions in its source."""
    found = {}
    for name, module in list(sys.modules.items()):
        if name == "explorer" or name.startswith("explorer."):
            for attribute, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    found[f"{name}.{attribute}"] = value.pattern
    root = Path(explorer.__file__).parent
    for source in root.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found[f"{source.relative_to(root)}:{node.lineno}"] = node.args[0].value
    return found


def test_no_regex_in_the_library_nests_quantifiers():
    from re import _parser  # noqa: PLC0415

    regexes = library_regexes()
    assert any("shortcuts" in where for where in regexes), "the scan should see the shortcut tokenizer"
    nested = {where: pattern for where, pattern in regexes.items() if _repeats_inside_repeats(_parser.parse(pattern))}
    assert not nested, f"regexes with a repeat inside a repeat (exponential backtracking): {nested}"


def test_the_nesting_rule_catches_the_old_shortcut_pattern():
    from re import _parser  # noqa: PLC0415

    old = r"\s*\d+\s*:\s*\d+(?:\s*\*\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)?((\s*[,+]\s*|\s+)\d+:\d+)*\s*"
    assert _repeats_inside_repeats(_parser.parse(old)) and _repeats_inside_repeats(_parser.parse(r"(a+)+"))
    assert not _repeats_inside_repeats(_parser.parse(r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"))
