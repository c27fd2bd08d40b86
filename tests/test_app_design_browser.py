"""The shortcut editor in a real browser (Streamlit + Playwright + Debian's Chromium): draw a design on the Train
page's matrix, train it, rewire it while paused, and check it is the same run as the design typed.

On a 6-block linear net with no shortcut: Draw shortcuts, clear the default design, click 0:3 and 1:4 (the
address bar then holds topology.shortcuts=0:3,1:4), Train, Pause, click 0:6 (the page says where it rewired),
Resume. The loss chart marks the rewire's step; the stored run's losses equal those of the typed design
`topology.shortcuts=0:3,1:4` trained by the library with the same rewire (so up to it, those of the typed
design alone). A 1280x720 screenshot of the editor is saved in the test's folder, and into EXPLORER_SCREENSHOT_DIR when set
(the README's assets/screenshots/design-editor.png comes from there).
CI (CI=true) must have Chromium and Playwright.
"""

import json
import os
import shutil
import urllib.parse
from pathlib import Path

import explorer
from browsers import browsing, skip_without_browser

MISSING = skip_without_browser()

# ANCRe's case-study linear net at 6 blocks, no shortcut; enough steps that Pause lands long before the end
NET = explorer.preset("ancre-fig2a-K4").with_values({"model.depth": 6, "train.steps": 3000, "train.log_every": 5})
IDLE = f"() => {browsing.NOT_RUNNING} && !document.querySelector('[data-stale=\"true\"]')"
DESIGN_CHART = "Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => " \
               "((g.layout.title || {}).text || '').startsWith('Design:'))"


def settle(page, until: str | None = None, timeout_ms: int = 120_000) -> None:
    """Wait for `until` (a JavaScript condition), then for the script run to end; fail on an exception box."""
    if until:
        page.wait_for_function(until, timeout=timeout_ms, polling=100)
    page.wait_for_function(IDLE, timeout=timeout_ms)
    assert browsing.exceptions(page) == 0, page.locator('[data-testid="stException"]').first.inner_text()[:500]


def design_title(page) -> str:
    return page.evaluate(f"() => {{ const g = {DESIGN_CHART}; return g ? g.layout.title.text : ''; }}")


def click_cell(page, i: int, j: int) -> None:
    """Click the marker of cell i:j on the design matrix (its pixel from plotly's axes) and wait for the redraw."""
    before = design_title(page)
    x, y = page.evaluate(f"""() => {{
        const g = {DESIGN_CHART}, box = g.getBoundingClientRect(), l = g._fullLayout;
        const markers = g.data.find(t => t.type === 'scatter');
        const k = markers.x.findIndex((x, n) => x === {i} && Math.round(markers.y[n]) === {j});
        return [box.left + l.xaxis._offset + l.xaxis.d2p({i}), box.top + l.yaxis._offset + l.yaxis.d2p(markers.y[k])];
    }}""")
    page.mouse.click(x, y)
    settle(page, until=f"() => {{ const g = {DESIGN_CHART}; return g && g.layout.title.text !== {json.dumps(before)}; }}")


def url_design(page) -> str | None:
    query = dict(urllib.parse.parse_qsl(page.evaluate("location.search").lstrip("?")))
    return query.get("topology.shortcuts")


def test_draw_train_rewire_and_compare_with_the_typed_design(tmp_path):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    home = tmp_path / "home"
    with browsing.serve(home) as base, browsing.browser(tmp_path / "profile", width=1280, height=1600) as page:
        try:
            page.goto(browsing.train_page_url(base, NET))
            browsing.wait_ready(page, timeout_ms=180_000)
            settle(page)
            page.locator(".st-key-design-draw button").first.click()
            settle(page, until=f"() => !!{DESIGN_CHART}")
            for cell in [(0, 2)]:  # the topology's default design
                click_cell(page, *cell)
            click_cell(page, 0, 3)
            click_cell(page, 1, 4)
            assert design_title(page) == "Design: 0:3,1:4"
            page.wait_for_function("() => location.search.includes('topology.shortcuts=0%3A3%2C1%3A4')",
                                   timeout=30_000)
            drawn = explorer.ExperimentSpec.from_query(page.evaluate("location.search"))
            typed = NET.with_values({"topology.name": "shortcuts", "topology.shortcuts": "0:3,1:4"})
            assert drawn.to_dict() == typed.to_dict() and url_design(page) == "0:3,1:4"

            page.set_viewport_size({"width": 1280, "height": 720})  # the screenshot: the editor with the design
            page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
            page.evaluate(f"() => {DESIGN_CHART}.scrollIntoView({{block: 'start'}})")
            shot = tmp_path / "design-editor.png"
            page.screenshot(path=str(shot))
            if os.environ.get("EXPLORER_SCREENSHOT_DIR"):
                shutil.copy(shot, Path(os.environ["EXPLORER_SCREENSHOT_DIR"]) / "design-editor.png")
            page.set_viewport_size({"width": 1280, "height": 1600})

            page.locator(".st-key-train-start button").click()
            page.locator(f"{browsing.PAUSE}:enabled").first.click(timeout=60_000)
            page.locator(browsing.RESUME).wait_for(timeout=60_000)
            settle(page)
            click_cell(page, 0, 6)
            # the worker answers, the feed's stamp changes and the page reruns: minutes on a loaded 2-core machine
            page.get_by_text("Rewired at step", exact=False).first.wait_for(timeout=240_000)
            settle(page)
            shown = page.get_by_text("Rewired at step", exact=False).first.inner_text()
            held = int(shown.split("Rewired at step")[1].split(":")[0])
            assert "+0:6" in shown
            page.locator(browsing.RESUME).first.click()
            page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
            settle(page)
            marks = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
                .filter(g => ((g.layout.title || {}).text || '').includes(': loss'))
                .flatMap(g => (g.layout.annotations || []).map(a => a.text || ''))""")
            assert any("+0:6" in mark for mark in marks), marks
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"))
            raise

    store = explorer.RunStore(home)
    record = store.get(store.list()[0]["id"], arrays=False)
    assert [(r["step"], r["topology"]["shortcuts"]) for r in record["rewires"]] == [(held, "0:3,0:6,1:4")]
    reference = explorer.train(typed, rewire={held: {**typed.topology.to_dict(), "shortcuts": "0:3,0:6,1:4"}})
    alone = explorer.train(typed.with_values({"train.steps": held}))
    losses = [row["loss"] for row in record["history"]]
    assert losses == [row["loss"] for row in reference.history]
    assert losses[:len(alone.history)] == [row["loss"] for row in alone.history]  # before the rewire: the typed design
