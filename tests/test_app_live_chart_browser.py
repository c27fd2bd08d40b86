"""The live parts' feed logic (app/explorer_app/live_chart.js) in Chromium, without a server: the module is
imported into a blank page, the feed's route is a stub (window.fetch), and what the parts ask of the page (the
"stale" trigger that reruns it) is recorded. The property: the page is asked to rerun whenever the feed's stamp
differs from the one the page drew last, whatever order Streamlit hands the parts their data in."""

import base64
from pathlib import Path

import pytest

from browsers import browsing, skip_without_browser

MISSING = skip_without_browser()
SCRIPT = (Path(__file__).resolve().parents[1] / "app" / "explorer_app" / "live_chart.js").read_text()

# Mount a progress part per call of window.part(name, stamp, drawn), as Streamlit calls a component, following
# the stub feed; window.asked collects [part, time] for each "stale" trigger a part sets.
SETUP = """async (source) => {
  const module = await import("data:text/javascript;base64," + source);
  window.answer = {stamp: '"paused"', active: true, progress: {fraction: 0.5, text: "paused"}, charts: {}, table: null};
  window.fetch = async () => new Response(JSON.stringify(window.answer), {status: 200});
  window.asked = [];
  window.elements = {};
  window.part = (name, stamp, drawn) => {
    const element = (window.elements[name] ??= document.body.appendChild(document.createElement("div")));
    module.default({parentElement: element, setTriggerValue: (key, value) => window.asked.push([name, key]),
                    data: {kind: "progress", progress: {fraction: 0.5, text: stamp},
                           feed: {url: "/live/t0k3n", part: name, version: "", stamp, drawn, period_ms: 50}}});
  };
}"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    with browsing.browser(tmp_path_factory.mktemp("live-chart") / "profile", height=600) as page:
        page.goto("about:blank")
        yield page


def fresh(page) -> None:
    page.evaluate("() => { window.explorerLiveFeeds?.clear(); }")
    page.evaluate(SETUP, base64.b64encode(SCRIPT.encode()).decode())


def test_a_part_handed_its_earlier_data_does_not_hide_a_changed_stamp(page):
    """Two parts of one page follow one feed. The page's newest drawing ("running", a Step pressed) is handed
    to one part; the other part is handed its data again, drawn earlier ("paused"). The run is paused again by
    then: the page must be asked to rerun. A page whose newest drawing says "paused" is not asked."""
    fresh(page)
    page.evaluate("""() => { part("progress", '"paused"', 1); part("heatmap", '"running"', 2);
                             part("progress", '"paused"', 1); }""")
    page.wait_for_function("() => window.asked.length > 0", timeout=5_000)
    assert page.evaluate("() => window.asked[0][1]") == "stale"

    fresh(page)
    page.evaluate("""() => { part("progress", '"running"', 1); part("heatmap", '"paused"', 2);
                             part("progress", '"running"', 1); }""")
    page.wait_for_timeout(1_000)  # twenty polls at 50 ms
    assert page.evaluate("() => window.asked.length") == 0


def test_an_ask_the_page_did_not_take_is_made_again_through_another_part(page):
    """The page drew "running"; the feed says "paused". An ask that reruns nothing (the page draws nothing new)
    is made again after its wait, through the next part, so one part whose fragment cannot take it does not hold
    the page on a stale state."""
    fresh(page)
    page.evaluate("""() => { part("progress", '"running"', 1); part("heatmap", '"running"', 1); }""")
    page.wait_for_function("() => window.asked.length >= 2", timeout=10_000)
    assert {name for name, _ in page.evaluate("() => window.asked")} == {"progress", "heatmap"}
