"""The Papers page in a real browser (Streamlit + Playwright + Debian's Chromium) at a projector's 1280x720:
every recorded claim of a paper shows its figure, its measured summary and its reason without running anything
(the README's screenshot of a claim is saved by tests/test_app_layout_browser.py)."""

import urllib.parse

from explorer.papers import PAPERS
from explorer.papers.claims import recorded
from test_app_hostile import browser_driver

PAPER = "tau"  # the paper opened


def test_every_recorded_claim_shows_a_figure_a_summary_and_a_reason_at_1280x720(tmp_path):
    browsing = browser_driver()
    rows = recorded(PAPER)["rows"]
    assert rows
    with browsing.serve(tmp_path / "home") as base, \
            browsing.browser(tmp_path / "profile", width=1280, height=720) as page:
        page.goto(f"{base}/papers?paper={urllib.parse.quote(PAPERS[PAPER].tab)}")
        claims = [f".st-key-papers-claim-{PAPER}-{row['id']}" for row in rows]
        page.wait_for_function(f"() => document.querySelectorAll('{claims[-1]} .js-plotly-plot').length >= 1 && "
                               f"{browsing.NOT_RUNNING}", timeout=180_000)
        assert browsing.exceptions(page) == 0
        for row, claim in zip(rows, claims):
            box = page.locator(claim)
            assert box.locator(".js-plotly-plot").count() == 1, row["id"]  # its figure, drawn by plotly.js
            summary = box.locator(".explorer-verdicts .measured").inner_text().strip()
            why = box.locator(".explorer-verdicts .why").inner_text().strip()
            assert summary and why.startswith("why:") and len(why) > len("why:") + 10, (row["id"], summary, why)
            rule = box.locator(".explorer-verdicts details.rule")
            assert rule.count() == 1 and not rule.evaluate("d => d.open")  # folded...
            rule.locator("summary").click()
            assert rule.evaluate("d => d.open")  # ...and opens on a click
            rule.locator("summary").click()
