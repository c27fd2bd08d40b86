"""Compare's grid of shortcut designs in a real browser: three designs typed on a 4-block linear net x 2 seeds,
launched, and when the grid is done its heatmap shows one value per design and seed, the stored runs' final
losses. Streamlit on a loopback port, driven by Playwright with Debian's Chromium (as tests/test_app_browser.py).
"""


import numpy as np
import pytest

import explorer
from browsers import browsing, skip_without_browser

MISSING = skip_without_browser()

BASE = "ancre-fig2c-0:3"  # a 4-block linear net on the shortcuts topology
DESIGNS = {"0:1": "0:1", "0:2": "0:2", "0:3+1:4": "0:3,1:4"}  # label -> the spec's canonical text
STEPS = 30  # a fraction of a second per run
TITLE = "Grid 1: final loss per cell"
HEATMAP = f"""() => {{
  const g = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .find(g => ((g.layout.title || {{}}).text || '') === '{TITLE}');
  if (!g) return null;
  const h = g.data[0];
  return {{x: Array.from(h.x), y: Array.from(h.y), z: Array.from(h.z, row => Array.from(row)),
          text: Array.from(h.text, row => Array.from(row))}};
}}"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("app")
    with browsing.serve(root / "home", env={"EXPLORER_MAX_JOBS_PER_SESSION": "6"}) as base, \
            browsing.browser(root / "profile", width=1280, height=720) as page:
        yield base, page, root / "home"


def settle(page) -> None:
    page.wait_for_function(browsing.IDLE, timeout=60_000)


def test_a_grid_of_three_drawn_designs_by_two_seeds_shows_its_small_multiples(app, tmp_path):
    base, page, home = app
    page.goto(f"{base}/compare")
    page.wait_for_function("() => document.querySelectorAll('.st-key-compare-launch button').length >= 1",
                           timeout=60_000)
    settle(page)
    browsing.choose(page, "compare-preset", BASE)
    settle(page)
    page.locator(".st-key-compare-axes").get_by_text("designs x seeds").click()
    settle(page)
    designs = page.locator(".st-key-compare-designs textarea")
    designs.fill("0:1\n0:2\n0:3,1:4")
    designs.press("Control+Enter")  # a text area's value is sent on Ctrl+Enter (or when it loses focus)
    settle(page)
    for name, value in (("seeds", 2), ("steps", STEPS)):
        field = page.locator(f"[class*='st-key-compare-{name}'] input").first
        field.fill(str(value))
        field.press("Enter")
        settle(page)
    launch = page.locator(".st-key-compare-launch button").first
    page.wait_for_function("() => document.querySelector('.st-key-compare-launch button').innerText"
                           ".includes('Launch 6 runs')", timeout=30_000)
    launch.click()
    page.get_by_text("6 of 6 runs done").first.wait_for(timeout=600_000)  # the live progress: no rerun yet
    # the heatmap is drawn by the page's reruns: wait for the one after the grid ended (Stop grid disabled), which
    # draws every run's final loss (an earlier one may show a run's loss at an earlier logged step)
    page.wait_for_function("() => { const b = document.querySelector('.st-key-compare-stop button');"
                           " return !!b && b.disabled; }", timeout=120_000)
    settle(page)
    page.wait_for_function(f"() => {{ const h = ({HEATMAP})(); return h && h.text.flat().every(t => /\\d/.test(t)); }}",
                           timeout=120_000)  # every cell printed with its value
    shown = page.evaluate(HEATMAP)
    assert browsing.exceptions(page) == 0

    assert shown["y"] == list(DESIGNS) and shown["x"] == ["seed 0", "seed 1"]
    stored = {record["label"]: explorer.RunStore(home).get(record["id"]) for record in explorer.RunStore(home).list()}
    assert sorted(stored) == sorted(f"grid 1: {label} seed {seed}" for label in DESIGNS for seed in (0, 1))
    losses = 10 ** np.array(shown["z"], dtype=float)  # a loss is coloured on a log scale
    for i, label in enumerate(shown["y"]):
        for j in (0, 1):
            record = stored[f"grid 1: {label} seed {j}"]
            topology = record["spec"]["topology"]
            assert (topology["name"], topology["shortcuts"]) == ("shortcuts", DESIGNS[label])
            assert record["status"] == "finished" and record["steps_done"] == STEPS
            assert losses[i, j] == pytest.approx(record["final"]["loss"], rel=1e-6)
            assert shown["text"][i][j] == f"{record['final']['loss']:.3g}"
    shot = tmp_path / "compare-designs-grid.png"
    page.locator(".st-key-chart-compare-grid-cells-figure").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
