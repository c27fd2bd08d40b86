"""Claims: the framework (rows, errors as verdicts, JSON) and `explorer claims --fast` over every paper."""

import json

import pytest

from explorer.cli import main
from explorer.papers import claims as registry
from explorer.papers.claims import PAPERS, Verdict, claims, run_claims

KEYS = {"paper", "id", "section", "statement", "measured", "expected", "verdict", "note", "seconds"}


@pytest.fixture
def scratch_claims(monkeypatch):
    """Two claims of our own, registered for the test only."""
    monkeypatch.setattr(registry, "CLAIMS", {})

    @registry.claim("tau", "fine", "Sec. 1", "it holds", "holds")
    def fine(fast):
        return Verdict({"value": 1.5, "nan": float("nan")}, True, "ok")

    @registry.claim("tau", "broken", "Sec. 2", "it breaks", "nothing")
    def broken(fast):
        raise RuntimeError("boom")



def test_a_claim_that_errors_is_a_row_not_a_crash(scratch_claims):
    rows = run_claims("tau", fast=True)
    assert [r["verdict"] for r in rows] == ["holds", "error"]
    assert set(rows[0]) == KEYS and rows[0]["measured"] == {"value": 1.5, "nan": None}
    assert "RuntimeError: boom" in rows[1]["note"]
    json.dumps(rows)  # JSON-able, NaN turned into null


def test_ids_are_unique_per_paper_and_papers_are_known():
    with pytest.raises(ValueError):
        registry.claim("nope", "x", "", "", "")
    every = claims()
    assert len({(c.paper, c.id) for c in every}) == len(every)
    assert {c.paper for c in every} <= set(PAPERS)


def test_every_paper_has_claims():
    for paper in PAPERS:
        assert claims(paper), f"{paper} has no claims"


def test_explorer_claims_fast_runs_every_claim_without_errors(capsys):
    assert main(["claims", "--fast", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["paper"] for r in rows} == set(PAPERS)
    errors = [f"{r['paper']}/{r['id']}: {r['note']}" for r in rows if r["verdict"] == "error"]
    assert not errors, errors
    for row in rows:
        assert set(row) == KEYS and row["verdict"] in ("holds", "does-not-hold") and row["measured"]
    print("\n".join(f"{r['paper']}/{r['id']}: {r['verdict']} in {r['seconds']} s" for r in rows))


def test_unknown_paper_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["claims", "--paper", "nope"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err
