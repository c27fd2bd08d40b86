"""The claims' texts say what the code does now: no history of the project ("an earlier set-up", "a review's runs",
"set after we measured", "replaced a 2x bar") in any claim's statement, source, set-up, threshold, note, reason or
summary, neither in the papers' modules (every string in their source) nor in the recorded rows."""

import ast
import inspect
import re

import pytest

from explorer.papers import PAPERS, ancre, dca, idinit, skipless, tau
from explorer.papers import claims as registry

# a phrase that narrates history; "earlier" only where it is not a position in the network (earlier outputs/states)
HISTORY = [r"\bearlier\b(?! (block )?(outputs?|states?|layers?|blocks?|sources?))", r"\bused to\b(?! [a-z]+e?s?\b)",
           r"\bpreviously\b", r"\ba review\b", r"\breview's\b", r"\breplaced\b", r"\bset after\b", r"\bwe measured\b",
           r"\bno longer\b", r"\bbefore the fix\b", r"\bwas changed\b", r"\bused to be\b", r"\bnow (uses|is|runs)\b"]
PATTERN = re.compile("|".join(f"(?:{h})" for h in HISTORY), re.IGNORECASE)
TEXT_KEYS = ("statement", "source", "paper_scale", "setup", "threshold", "note", "reason", "summary", "rule")


def history_in(text: str) -> list[str]:
    return [m.group(0) for m in PATTERN.finditer(text)]


def test_the_phrase_list_catches_history_and_spares_the_networks_earlier_outputs():
    for text in ("set after we measured 1.5-1.7x", "it replaced a 2x bar", "An earlier set-up (8x8 digits)",
                 "in an independent review's runs", "the check used to be stricter", "previously 0.55"):
        assert history_in(text), text
    for text in ("learned scalar weights on earlier outputs", "every earlier state x_i", "is used to compute"):
        assert not history_in(text), text


def _strings(module) -> list[str]:
    """Every string constant in the module's source (f-string pieces included), docstrings and comments' code aside."""
    tree = ast.parse(inspect.getsource(module))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


@pytest.mark.parametrize("module", [ancre, dca, idinit, skipless, tau], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_no_history_in_the_papers_sources(module):
    found = {text[:120]: history_in(text) for text in _strings(module) if history_in(text)}
    assert not found, found


def test_no_history_in_the_registered_claims():
    for claim in registry.claims():
        for key in ("statement", "source", "paper_scale", "section"):
            assert not history_in(getattr(claim, key)), (claim.id, key, getattr(claim, key))
    assert {c.paper for c in registry.claims()} == set(PAPERS)


def test_no_history_in_the_recorded_rows():
    found = {}
    for row in registry.recorded()["rows"]:
        for key in TEXT_KEYS:
            hits = history_in(str(row.get(key) or ""))
            if hits:
                found[f"{row['paper']}/{row['id']} {key}"] = hits
        for name in list(row.get("per_seed") or {}) + list(row.get("measured") or {}):
            if history_in(name):
                found[f"{row['paper']}/{row['id']} {name}"] = history_in(name)
    assert not found, found
