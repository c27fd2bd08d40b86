"""The Papers page: each paper's section with its equations, claims rerun with the verdict `Claim.run` gives,
errors shown without a traceback, results cached server-wide, and presets opened in the Train page."""

import dataclasses
import re

import pytest
import streamlit as st

import explorer
from explorer import plots
from explorer.papers import claims as claims_module
from explorer.papers.claims import Decision, Verdict, claims
from explorer_app import state
from explorer_app.messages import escape

TABS = {"ancre": "ANCRe", "dca": "DCA", "idinit": "IDInit", "tau": "τ stability", "skipless": "Cutting the Skip"}
TITLES = {"ancre": "ANCRe", "dca": "DeepCrossAttention", "idinit": "IDInit", "tau": "Stability and Convergence",
          "skipless": "Cutting the Skip"}
BADGES = {"holds": "holds", "does-not-hold": "does not hold at this scale", "inconclusive": "inconclusive",
          "error": "error"}
FAST_CLAIM = ("idinit", "chi-at-init")  # about 0.2 s warm, 3 s cold (fast mode; builds two models, no training)


@pytest.fixture(autouse=True)
def fresh_claim_cache():
    """Claim results are cached server-wide (st.cache_data): each test starts and ends without them."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


def badges(at) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]


def verdicts_shown(at) -> list[str]:
    """The verdict label of each result's first badge (":green-badge[:material/icon: holds] ...")."""
    return [re.match(r":\w+-badge\[:material/\w+: ([^\]]+)\]", badge).group(1) for badge in badges(at)]


def claim_of(paper: str, claim_id: str):
    return next(c for c in claims(paper) if c.id == claim_id)


@pytest.mark.parametrize("paper", list(TABS))
def test_each_paper_section_renders_with_its_equations_claims_and_presets(open_page, paper):
    at = open_page("papers", query={"paper": TABS[paper]})  # the open tab is in the URL
    assert not at.exception
    assert TITLES[paper] in at.subheader[0].value
    assert len(at.latex) >= 2 and all(len(eq.value.strip("$\n ")) > 10 for eq in at.latex)
    keys = {button.key for button in at.button}
    assert f"papers-run-all-{paper}" in keys
    assert {f"papers-run-{paper}-{c.id}" for c in claims(paper)} <= keys
    presets = [name for name, entry in explorer.registry("presets").items() if entry.extra["paper"] == paper]
    assert presets and {f"papers-open-{name}" for name in presets} <= keys
    assert not badges(at)  # nothing has run yet


def recorded_table(paper: str) -> str:
    return plots.verdict_table(claims_module.recorded(paper)["rows"])


@pytest.mark.parametrize("paper", ["ancre", "skipless"])
def test_each_paper_shows_its_recorded_full_mode_results_folded(open_page, paper):
    at = open_page("papers", query={"paper": TABS[paper]})
    stored = claims_module.recorded(paper)
    [expander] = [e for e in at.expander if e.label.startswith("Recorded full-mode results")]
    assert f"({len(claims(paper))} claims, 3 seeds:" in expander.label
    counts = {label: sum(r["verdict"] == v for r in stored["rows"]) for v, label in BADGES.items()}
    assert all(f"{n} {label}" in expander.label for label, n in counts.items() if n)
    [body] = [element.proto.body for element in expander.get("html")]
    assert body == recorded_table(paper) and all(f"<b>{c.id}</b>" in body for c in claims(paper))
    assert escape(f"Recorded {stored['about']['date']} on {stored['about']['machine']}") in expander.caption[0].value


def table_seconds(table: str) -> float:
    """The seconds column of a one-row verdict table (the timing differs from run to run)."""
    return float(re.findall(r"<td[^>]*>([0-9.]+)</td></tr>", table)[-1])


def test_run_this_claim_shows_the_verdict_and_numbers_claim_run_gives(open_page):
    paper, claim_id = FAST_CLAIM
    expected = claim_of(paper, claim_id).run(fast=True)
    at = open_page("papers", query={"paper": TABS[paper]})
    at.button(key=f"papers-run-{paper}-{claim_id}").click().run()
    assert not at.exception
    assert verdicts_shown(at) == [BADGES[expected["verdict"]]]
    [badge] = badges(at)
    assert "fast mode" in badge
    recorded, table = [element.proto.body for element in at.get("html")]  # explorer.plots.verdict_table, as in the notebooks
    assert recorded == recorded_table(paper)
    assert table == plots.verdict_table([{**expected, "seconds": table_seconds(table)}], show_claim=False)
    for key, value in expected["measured"].items():
        assert f"<b>{key}</b>: {value:.4g}" in table
    assert at.get("progress")[0].proto.value == 100
    at.run()  # kept in the session across reruns
    assert badges(at) == [badge]


def test_run_all_reports_every_claim_holds_a_job_slot_and_shows_errors_without_traceback(open_page, monkeypatch):
    paper = "idinit"
    calls, slots_in_use = {}, []

    def fake(claim_id, verdict):
        def check(mode):
            calls[claim_id] = calls.get(claim_id, 0) + 1
            slots_in_use.append(state.job_queue().counts()[0])
            if verdict is None:
                raise RuntimeError("the check broke")
            return Verdict(Decision(verdict, "a rule", "a reason"), {"value": [1.5]}, "ours: 1", "a set-up",
                           {"other": 2.0}, "a note")
        return check

    outcomes = ["holds", "does-not-hold", None, "inconclusive"] + ["holds"] * (len(claims(paper)) - 4)
    for claim, holds in zip(claims(paper), outcomes):
        monkeypatch.setitem(claims_module.CLAIMS, f"{paper}/{claim.id}",
                            dataclasses.replace(claim, check=fake(claim.id, holds)))
    ids = [c.id for c in claims(paper)]

    at = open_page("papers", query={"paper": TABS[paper]})
    at.button(key=f"papers-run-all-{paper}").click().run()
    assert not at.exception
    assert verdicts_shown(at) == [BADGES["holds"], BADGES["does-not-hold"], BADGES["error"], BADGES["inconclusive"]] \
        + [BADGES["holds"]] * (len(ids) - 4)
    assert [b.split("[")[0] for b in badges(at)][:4] == [":green-badge", ":red-badge", ":gray-badge", ":violet-badge"]
    [error] = at.error
    assert error.value.replace("\\", "") == "RuntimeError: the check broke" and "Traceback" not in error.value  # escaped text
    assert at.get("progress")[0].proto.value == 100
    assert f"Done: {len(ids)} claims" in at.get("progress")[0].proto.text
    assert slots_in_use and all(n >= 1 for n in slots_in_use)  # each check ran inside a job-queue slot

    # A second click: the results come from the server-wide cache, except the error, which is not cached.
    at.button(key=f"papers-run-{paper}-{ids[0]}").click().run()
    at.button(key=f"papers-run-{paper}-{ids[2]}").click().run()
    assert calls[ids[0]] == 1 and calls[ids[2]] == 2


def test_open_in_train_switches_to_the_train_page_with_the_preset(open_page, monkeypatch):
    name = "idinit-fig18-idinit"
    switched = []
    real_switch_page = st.switch_page

    def recording_switch_page(page, **kwargs):
        switched.append((page, kwargs.get("query_params")))
        return real_switch_page(page, **kwargs)

    monkeypatch.setattr(st, "switch_page", recording_switch_page)
    at = open_page("papers", query={"paper": TABS["idinit"]})
    at.button(key=f"papers-open-{name}").click().run()
    params = state.train_page_params(explorer.preset(name))
    assert switched == [(state.TRAIN_PAGE, params)]
    assert "Papers" not in [title.value for title in at.title]  # the run ended on another page
    assert not any((button.key or "").startswith("papers-") for button in at.button)
    assert params.items() <= dict(at.query_params).items()  # Train's URL mirrors its form: the preset is loaded


def test_a_misconfigured_server_is_a_message_not_a_crash(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "zero")
    paper, _ = FAST_CLAIM
    at = open_page("papers", query={"paper": TABS[paper]})
    assert not at.exception
    assert "EXPLORER_MAX_JOBS='zero' is not valid" in at.error[0].value
