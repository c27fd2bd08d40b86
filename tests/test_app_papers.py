"""The Papers page: each paper's section with its equations, claims rerun with the verdict `Claim.run` gives,
errors shown without a traceback, results cached server-wide, and presets opened in the Train page."""

import json
import re

import pytest
import streamlit as st

import explorer
from explorer import plots
from explorer.papers import PAPERS, presets_of
from explorer.papers.claims import claims, recorded
from explorer_app import state
from explorer_app.jobs import JobView
from explorer_app.messages import escape

TABS = {paper: record.tab for paper, record in PAPERS.items()}  # ?paper= in the URL opens that tab
BADGES = {"holds": "holds", "does-not-hold": "does not hold at this scale", "inconclusive": "inconclusive",
          "error": "error"}
FAST_CLAIM = ("idinit", "chi-at-init")  # about 0.2 s warm, 3 s cold (fast mode; builds two models, no training)


@pytest.fixture(autouse=True)
def fresh_claim_cache():
    """Claim results are cached server-wide (state.claim_rows): each test starts and ends without them."""
    state.claim_rows().clear()
    yield
    state.claim_rows().clear()


def last_job():
    """The newest job of the server's queue (the page may already have collected a fast one)."""
    return state.job_queue().jobs()[-1]


def finish_claims(at, timeout: float = 300.0):
    """Wait for the session's claims job (a worker runs it), then rerun the page as its fragment would."""
    for job in state.job_queue().jobs():
        assert job.done.wait(timeout)
    return at.run()


RECORDED_BADGE = "recorded with the package"  # the badge of a claim's recorded full-mode row


def badges(at) -> list[str]:
    """The badges of the results run in this session."""
    return [m.value for m in at.markdown if "-badge[" in m.value and RECORDED_BADGE not in m.value]


def recorded_badges(at) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value and RECORDED_BADGE in m.value]


def verdicts_shown(at) -> list[str]:
    """The verdict label of each result's first badge (":green-badge[:material/icon: holds] ...")."""
    return [re.match(r":\w+-badge\[:material/\w+: ([^\]]+)\]", badge).group(1) for badge in badges(at)]


def claim_of(paper: str, claim_id: str):
    return next(c for c in claims(paper) if c.id == claim_id)


@pytest.mark.parametrize("paper", list(PAPERS))
def test_each_paper_section_renders_with_its_equations_claims_and_presets(open_page, paper):
    record = PAPERS[paper]
    at = open_page("papers", query={"paper": TABS[paper]})  # the open tab is in the URL
    assert not at.exception
    assert [tab.label for tab in at.tabs] == list(TABS.values())
    assert at.subheader[0].value == record.title
    assert [eq.value.strip("$\n ") for eq in at.latex] == [latex for _, latex in record.equations]
    assert any(record.notebook in caption.value for caption in at.caption)
    keys = {button.key for button in at.button}
    assert f"papers-run-all-{paper}" in keys
    assert {f"papers-run-{paper}-{c.id}" for c in claims(paper)} <= keys
    presets = presets_of(paper)
    assert presets and {f"papers-open-{name}" for name in presets} <= keys
    assert set(presets) == set(record.presets) and all(explorer.preset(name) for name in presets)
    assert not badges(at)  # nothing has run yet


def test_presets_of_an_unknown_paper_lists_the_papers():
    with pytest.raises(explorer.SpecError) as error:
        presets_of("resnet")
    assert error.value.path == "paper" and all(paper in error.value.message for paper in PAPERS)


def test_every_preset_belongs_to_one_paper():
    owners = [paper for paper in PAPERS for _ in presets_of(paper)]
    assert len(owners) == len(explorer.registry("presets"))
    assert set().union(*(presets_of(paper) for paper in PAPERS)) == set(explorer.registry("presets"))


def recorded_table(paper: str) -> str:
    return plots.verdict_table(recorded(paper)["rows"])


@pytest.mark.parametrize("paper", ["ancre", "skipless"])
def test_each_paper_shows_its_recorded_full_mode_results_folded(open_page, paper):
    at = open_page("papers", query={"paper": TABS[paper]})
    stored = recorded(paper)
    [expander] = [e for e in at.expander if e.label.startswith("Recorded full-mode results")]
    assert f"({len(claims(paper))} claims:" in expander.label
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
    job = last_job()
    assert job.kind == "claims" and job.claims == (FAST_CLAIM,)  # a job of the server's queue, not the script
    finish_claims(at)
    assert not at.exception
    assert verdicts_shown(at) == [BADGES[expected["verdict"]]]
    [badge] = badges(at)
    assert "fast mode" in badge
    bodies = [element.proto.body for element in at.get("html")]  # explorer.plots.verdict_table, as in the notebooks
    assert bodies[0] == recorded_table(paper)
    shown_recorded = {plots.verdict_table([row], show_claim=False) for row in recorded(paper)["rows"]}
    shown = [body for body in bodies[1:] if not body.startswith("<style>")]  # the page's layout is a style element
    [table] = [body for body in shown if body not in shown_recorded]  # the one run in this session
    assert table == plots.verdict_table([{**expected, "seconds": table_seconds(table)}], show_claim=False)
    for key, value in expected["measured"].items():
        assert f"<b>{key}</b>: {value:.4g}" in table
    assert at.get("progress")[0].proto.value == 100
    at.run()  # kept in the session across reruns
    assert badges(at) == [badge]


def test_run_all_reports_every_claim_in_a_job_and_shows_errors_without_traceback(open_page, monkeypatch):
    """Run all: one claims job runs them in a worker; an error (here the server's model-memory cap, which the
    worker takes from the server with the job) is shown as text without the traceback and is not cached."""
    paper = "idinit"
    monkeypatch.setenv("EXPLORER_MAX_MODEL_MB", "1")  # some idinit claims fit, the others build larger models
    ids = [c.id for c in claims(paper)]
    at = open_page("papers", query={"paper": TABS[paper]})
    at.button(key=f"papers-run-all-{paper}").click().run()
    job = last_job()
    assert job.claims == tuple((paper, i) for i in ids)
    finish_claims(at)
    assert not at.exception
    shown = verdicts_shown(at)
    refused = shown.count(BADGES["error"])
    assert len(shown) == len(ids) and 1 <= refused < len(ids), (shown, [e.value for e in at.error])
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == refused and all("EXPLORER_MAX_MODEL_MB" in e and "Traceback" not in e for e in errors)
    assert at.get("progress")[0].proto.value == 100
    assert f"Done: {len(ids)} claims" in at.get("progress")[0].proto.text

    # A second click: a result comes from the server-wide cache, except an error, which is not cached.
    first_ok = ids[shown.index(BADGES["holds"])]
    first_error = ids[shown.index(BADGES["error"])]
    at.button(key=f"papers-run-{paper}-{first_ok}").click().run()
    assert last_job() is job  # nothing to run
    at.button(key=f"papers-run-{paper}-{first_error}").click().run()
    assert last_job().claims == ((paper, first_error),)
    finish_claims(at)
    assert not at.exception


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


class EndingClaimsJob:
    """A claims job of one claim that ends while a script run draws the page: running at the run's first look,
    finished at every later one."""

    id = "ending"
    claims = (FAST_CLAIM,)

    def __init__(self):
        self.looks = 0

    def view(self, since: int | None = None) -> JobView:
        self.looks += 1
        status = "running" if self.looks == 1 else "finished"
        return JobView(self.id, "claims", "claims", status, self.looks > 1, 1, None, None)

    def stop(self, reason: str) -> None:
        pass


def test_open_in_train_holds_when_the_claims_job_ends_in_the_same_run(open_page, monkeypatch):
    """The click's run can be the one in which the page sees its claims job end: the progress then reruns the
    whole page to draw the results, and the click still opens the preset."""
    switched = []
    monkeypatch.setattr(st, "switch_page", lambda page, **kwargs: switched.append(kwargs["query_params"]))
    name = "idinit-fig18-idinit"
    at = open_page("papers", query={"paper": TABS["idinit"]})
    at.session_state["papers-job"] = {"job": EndingClaimsJob(), "fast": True, "cached": 0, "started": 0.0,
                                      "paper": "idinit"}
    at.button(key=f"papers-open-{name}").click().run()
    assert switched == [state.train_page_params(explorer.preset(name))]


def test_a_misconfigured_server_is_a_message_not_a_crash(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "zero")
    paper, _ = FAST_CLAIM
    at = open_page("papers", query={"paper": TABS[paper]})
    assert not at.exception
    assert "EXPLORER_MAX_JOBS: 'zero' is not valid" in at.error[0].value


@pytest.mark.parametrize("paper", ["tau", "dca"])
def test_each_recorded_claim_shows_its_table_beside_its_figure_without_running(open_page, paper):
    from explorer.papers.claims import figure

    at = open_page("papers", query={"paper": TABS[paper]})
    assert not at.exception
    rows = recorded(paper)["rows"]
    assert len(recorded_badges(at)) == len(rows) and not badges(at)  # nothing ran: every claim shows its record
    bodies = [element.proto.body for element in at.get("html")]
    for row in rows:  # its verdict table: the summary first, why, the rule folded
        table = plots.verdict_table([row], show_claim=False)
        assert table in bodies and "class='measured'" in table and "<b>why:</b>" in table
    charts = at.get("plotly_chart")
    drawn = [row for row in rows if figure(row) is not None]
    assert drawn and len(charts) == len(drawn)
    titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in charts]
    assert [t.replace("<br>", " ") for t in titles] == [figure(row).layout.title.text.replace("<br>", " ")
                                                         for row in drawn]  # wrapped to fit the figure's column


def test_the_page_states_the_rule_in_the_librarys_words(open_page):
    from explorer.papers.claims import RULE_SUMMARY

    at = open_page("papers")
    assert RULE_SUMMARY in [caption.value for caption in at.caption]


def test_a_rerun_that_disagrees_with_the_recorded_row_says_which_is_the_evidence(open_page, monkeypatch):
    """A fast rerun whose verdict differs from the recorded full-mode row gets one sentence naming both."""
    from explorer.papers import claims as claims_module

    paper, claim_id = FAST_CLAIM
    stored = recorded(paper)
    row = next(r for r in stored["rows"] if r["id"] == claim_id)
    other = "does-not-hold" if row["verdict"] != "does-not-hold" else "holds"
    changed = {**stored, "rows": [{**r, "verdict": other} if r["id"] == claim_id else r for r in stored["rows"]]}
    monkeypatch.setattr(claims_module, "recorded", lambda p=None: changed)
    at = open_page("papers", query={"paper": TABS[paper]})
    at.button(key=f"papers-run-{paper}-{claim_id}").click().run()
    finish_claims(at)
    notes = [info.value for info in at.info if "the recorded full mode says" in info.value]
    assert len(notes) == 1 and plots.VERDICT_STYLES[other][1] in notes[0] and "fast mode" in notes[0]
