"""The docs quote verdicts, timings and settings from the library only (docs/sync.py writes them)."""

import copy
import importlib.util
import re
from pathlib import Path

import pytest

from explorer.papers import PAPERS
from explorer.papers.claims import recorded
from conftest import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_sync", ROOT / "docs" / "sync.py")
docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs)


def test_the_docs_quote_the_rows_the_package_ships():
    assert docs.main(["--check"]) == 0, "run `python docs/sync.py`"


def test_a_changed_row_changes_every_block_that_quotes_it():
    stored = recorded()
    changed = copy.deepcopy(stored)
    row = next(r for r in changed["rows"] if r["verdict"] == "holds")
    row["verdict"], row["seconds"] = "does-not-hold", row["seconds"] + 600
    for name in ("summary", "table", "timing", "budget", f"verdicts:{row['paper']}"):
        assert docs.render(name, stored) != docs.render(name, changed), name
    assert "does not hold" in docs.render("table", changed)


def test_the_budget_names_each_paper_on_its_side_of_the_limit():
    """A paper whose rows' seconds sum past FULL_MODE_BUDGET_S is named over it, the others within it."""
    from explorer.papers.claims import FULL_MODE_BUDGET_S

    stored = copy.deepcopy(recorded())
    for row in stored["rows"]:
        row["seconds"] = 1.0
    first, second = list(PAPERS)[:2]
    next(r for r in stored["rows"] if r["paper"] == first)["seconds"] = FULL_MODE_BUDGET_S + 1
    said = docs.render("budget", stored)
    over, within = said.split("Over it:")[1], said.split("Within it:")[1].split("Over it:")[0]
    assert first in over and first not in within and second in within and second not in over, said
    for row in stored["rows"]:
        row["seconds"] = 1.0
    assert "Every paper is within it." in docs.render("budget", stored)


def test_a_stale_row_says_so_where_it_is_quoted():
    stored = copy.deepcopy(recorded())
    stored["rows"][0]["stale"] = True
    assert "stale" in docs.render(f"verdicts:{stored['rows'][0]['paper']}", stored)


def test_an_unknown_block_is_one_line_naming_the_choices():
    with pytest.raises(SystemExit, match="use one of summary, about, table, timing, budget, settings, rule"):
        docs.render("tabel", recorded())
    with pytest.raises(SystemExit, match="names no paper"):
        docs.render("verdicts:resnet", recorded())


def test_the_course_plan_quotes_every_paper_and_types_no_verdict_by_hand():
    text = (ROOT / "notebooks" / "README.md").read_text()
    course = text[text.index("## In a course"):text.index("What to ask for:")]  # the sessions
    for paper in PAPERS:
        assert f"<!-- sync:verdicts:{paper} -->" in course, paper
    typed = docs.BLOCK.sub("", course)
    for words in ("holds", "does not hold", "inconclusive", "seeds of three"):
        assert not re.search(rf"\b{words}\b", typed), f"the course plan types {words!r} outside a recorded block"


def test_a_notebook_says_when_fast_mode_and_the_recorded_full_mode_disagree():
    from explorer import plots

    stored = recorded()
    full = next(r for r in stored["rows"] if r["verdict"] == "holds")
    same = {**full, "mode": "fast mode, 1 seed, cpu scale"}
    other = {**same, "verdict": "does-not-hold"}
    agreeing = plots.recorded_table(stored, [same])
    assert "mode-difference" not in agreeing and full["id"] in agreeing
    disagreeing = plots.recorded_table(stored, [other])
    sentence = disagreeing.split("<p class='mode-difference'>")[1].split("</p>")[0]
    assert "does not hold" in sentence and "holds" in sentence and "One seed cannot measure" in sentence
    assert plots.recorded_table(stored, [{**other, "id": "no-such-claim"}]).count("<tr>") == 1  # the header only


def test_the_readme_lists_every_setting_the_library_reads():
    """Every environment variable the code reads is declared in SETTINGS (so the README's table lists it)."""
    import re as regex

    from explorer.settings import SETTINGS

    read = set()
    for path in [*(ROOT / "explorer").rglob("*.py"), *(ROOT / "app").rglob("*.py")]:
        read |= set(regex.findall(r"[\"']((?:EXPLORER|RAY)_[A-Z_]+)[\"']", path.read_text()))
    assert read <= set(SETTINGS), f"declare these in explorer.settings.SETTINGS: {sorted(read - set(SETTINGS))}"
    table = docs.render("settings", recorded())
    assert all(f"`{name}`" in table for name in SETTINGS)


def test_the_notebooks_type_no_recorded_result_and_no_other_rule():
    """A notebook shows its recorded full-mode results from the rows (show_recorded), never typed by hand, and
    states the verdict rule as the library does (no "twice the paired spread" of another rule)."""
    import json

    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            for typed in re.finditer(r"\*Full-mode result[^*]*\*:?([^\n]*)", text):
                assert not re.search(r"\d", typed.group(0)), f"{path.name}: a typed full-mode result: {typed.group(0)}"
            assert not re.search(r"twice (the|its) paired|2 x (the )?paired std", text), path.name
