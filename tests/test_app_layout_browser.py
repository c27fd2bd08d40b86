"""The app's layout on a projector (Streamlit + Playwright + Debian's Chromium at 1280x720, no scrolling): the Train
page shows the design, the controls and the live loss on one screen after a run; a Papers claim reads without
horizontal scrolling, its verdict table's text column wide enough to read beside its figure; every recorded claim
of a paper shows its figure, its measured summary and its reason without running anything. One server and one
browser for the module.

Two screenshots are saved into the test's folder, and into EXPLORER_SCREENSHOT_DIR when set (the README's
assets/screenshots/ come from there): train-one-screen.png and papers-claim.png.
CI (CI=true) must have Chromium and Playwright: there a missing one fails the test instead of skipping it.
"""

import json
import urllib.parse

import pytest

import explorer
from browsers import browsing, skip_without_browser
from explorer.papers import PAPERS
from explorer.papers.claims import recorded
from test_app_diagnosis_browser import save

MISSING = skip_without_browser()

WIDTH, HEIGHT = 1280, 720
# a small preset with a drawn design (4 blocks, shortcut 0:3): a few seconds of training
SPEC = explorer.preset("ancre-fig2c-0:3").with_values({"train.steps": 200})
PAPER = "tau"
MIN_TEXT_COLUMN = 400  # px: the verdict table's "measured, why" column on a projector

# the viewport box of the plotly chart whose title starts and ends so, with how many points it draws; of an element
CHART_BOX = """([start, end]) => {
    const g = Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => {
        const t = (g.layout && g.layout.title && g.layout.title.text) || '';
        return t.startsWith(start) && t.endsWith(end); });
    if (!g) return null;
    const r = g.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
            points: g.data.reduce((n, t) => n + (t.y ? t.y.length : 0), 0)}; }"""
BOX = "e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right} }"
PAGE_WIDTH = "() => document.documentElement.scrollWidth"


def inside(box: dict) -> bool:
    return box is not None and box["top"] >= 0 and box["bottom"] <= HEIGHT and box["left"] >= 0 and box["right"] <= WIDTH


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app's server and a 1280x720 browser page: (base URL, page)."""
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("layout")
    with browsing.serve(root / "home") as base, browsing.browser(root / "profile", WIDTH, HEIGHT) as page:
        yield base, page


def papers_page(page, base: str, rows: list[dict]) -> list[str]:
    """Open PAPER's tab of the Papers page and wait until every recorded claim's figure is drawn (plotly.js draws
    each chart on its own, not in the page's order); the CSS selectors of its claims' boxes, in `rows`' order."""
    claims = [f".st-key-papers-claim-{PAPER}-{row['id']}" for row in rows]
    page.goto(f"{base}/papers?paper={urllib.parse.quote(PAPERS[PAPER].tab)}")
    page.wait_for_function(f"() => {json.dumps(claims)}.every(claim => "
                           f"document.querySelectorAll(`${{claim}} .js-plotly-plot`).length >= 1) && "
                           f"{browsing.NOT_RUNNING}", timeout=180_000)
    return claims


def test_train_shows_the_design_the_controls_and_the_loss_on_one_screen(app, tmp_path):
    base, page = app
    page.goto(browsing.train_page_url(base, SPEC))
    browsing.wait_ready(page)
    page.locator(".st-key-train-start button").click()
    page.get_by_text(f"Finished {SPEC.train.steps} steps", exact=False).first.wait_for(timeout=300_000)
    page.wait_for_function(f"() => {browsing.NOT_RUNNING} && ({CHART_BOX})(['', ': loss']) && "
                           f"({CHART_BOX})(['', ': loss']).points > 1", timeout=60_000)
    # the last rerun settled: it briefly shows the old buttons beside the new ones
    page.wait_for_function("() => ['train-start', 'train-pause', 'train-step', 'train-stop', 'train-reset'].every("
                           "k => document.querySelectorAll(`.st-key-${k}`).length === 1)", timeout=30_000)
    # at the top of the page, as it opens: no scrolling
    assert page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTop") == 0
    train = page.locator(".st-key-train-start button").first.evaluate(BOX)
    design = page.evaluate(CHART_BOX, ["Design: ", ""])
    loss = page.evaluate(CHART_BOX, ["", ": loss"])
    assert inside(train), train
    assert inside(design), design  # the whole design picture
    assert 0 <= loss["top"] < HEIGHT and min(loss["bottom"], HEIGHT) - loss["top"] >= 0.75 * (
        loss["bottom"] - loss["top"]), loss  # the loss chart's top, and most of it, in view
    for key in ("train-pause", "train-step", "train-stop", "train-reset"):  # the other controls beside Train
        assert inside(page.locator(f".st-key-{key} button").first.evaluate(BOX)), key
    assert page.evaluate(PAGE_WIDTH) <= WIDTH
    assert browsing.exceptions(page) == 0
    save(page, "train-one-screen.png", tmp_path)


def test_a_papers_claim_reads_without_horizontal_scrolling_its_text_column_wide(app, tmp_path):
    base, page = app
    rows = recorded(PAPER)["rows"]
    assert rows
    claims = papers_page(page, base, rows)
    assert browsing.exceptions(page) == 0
    assert page.evaluate(PAGE_WIDTH) <= WIDTH
    for row, claim in zip(rows, claims):
        box = page.locator(claim)
        table = box.locator("table.explorer-verdicts").first
        text_column = table.locator("thead th").filter(has_text="measured, why").first
        assert text_column.evaluate("th => th.getBoundingClientRect().width") >= MIN_TEXT_COLUMN, row["id"]
        # nothing in the table is wider than its place: no scroll bar inside the page either
        assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth + 1"), row["id"]
        assert table.evaluate(BOX)["right"] <= WIDTH
        assert box.get_by_text("s: seconds the claim took").count() == 1, row["id"]  # the "s" column, said
    # one claim, its top at the window's top as a lecturer scrolls to it: figure, summary and why in view
    shown = page.locator(claims[0])
    shown.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # the scroll settles
    for part in (".js-plotly-plot", ".explorer-verdicts .measured", ".explorer-verdicts .why"):
        assert inside(shown.locator(part).first.evaluate(BOX)), part
    save(page, "papers-claim.png", tmp_path)


def test_every_recorded_claim_shows_a_figure_a_summary_and_a_reason_at_1280x720(app):
    base, page = app
    rows = recorded(PAPER)["rows"]
    assert rows
    claims = papers_page(page, base, rows)
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
