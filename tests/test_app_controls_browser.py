"""Each page's controls pressed in a real browser (Streamlit + Playwright + Debian's Chromium), failing on
any exception box ([data-testid="stException"]); every press checks what it changed on the page.

One fresh server, one browser, the pages in order. Pressed: Train: preset select + Load preset, spec upload,
live-probe and heatmap selects, the spec download, Train, Pause, Step, Resume, Stop, the run JSON / history
CSV / figure HTML downloads, Reset. Inside: the all-runs toggle, the run select, the probe multiselect, the
inputs slider (Home, End: the Jacobian figure's curves follow), Probe, the recorded-step slider (the figure
goes back to the first recorded step). Compare: grid steps, Launch, the all-runs toggle, a runs-table row
(its checkbox cell, clicked by coordinates on the data grid's canvas: that run alone is drawn), the smoothing
slider (EMA curves added), the loss and step axis radios (the axis types), the heatmap basis. Papers: fast
mode, Run this claim (its verdict table), Open in Train (the Train page opens with the preset's spec in the
URL). Theory: every section and its sliders (each redraws a figure).
Sliders are pressed with the keyboard (ArrowRight, Home, End) on their focused thumb (a visually hidden range
input in Streamlit 1.67). Not pressed here: Run all claims (minutes of training), the grid's Stop (the 10-step grid ends before a click
lands), the text upload, Theory's "Check on a real network", its radios, "as printed" toggle and seed input,
Compare's validation toggle and column-header sorting, Train's form fields beyond the preset and upload
(the AppTests in tests/test_app_*.py set many of them without a browser).
CI (CI=true) must have Chromium and Playwright.
"""

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

import explorer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import app_responsiveness as browsing  # noqa: E402

MISSING = [what for what, ok in (("Chromium", Path(browsing.CHROMIUM).exists()),
                                 ("playwright", importlib.util.find_spec("playwright") is not None)) if not ok]
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"needs {' and '.join(MISSING)}", allow_module_level=True)

IDLE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
PRESET = "idinit-fig5-idiz"  # digits, a 4-layer MLP: seconds to train


def settle(page, where: str, timeout_ms: int = 120_000) -> None:
    """Wait for the script run to end, then fail on any exception box."""
    time.sleep(1.0)  # the rerun a control triggers may start a moment later
    page.wait_for_function(IDLE, timeout=timeout_ms)
    assert browsing.exceptions(page) == 0, f"exception box after {where}: " + \
        page.locator('[data-testid="stException"]').first.inner_text()[:500]


def choose(page, key: str, option: str) -> None:
    """Pick `option` in the selectbox with widget key `key` (type to filter, Enter)."""
    page.locator(f".st-key-{key}").click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")


def click(page, key: str, where: str | None = None) -> None:
    page.locator(f".st-key-{key} button").first.click()
    settle(page, where or key)


# Each plotly chart on the page: its title, axis types, marks (shapes, annotation texts), trace names and a
# fingerprint of its data.
CHARTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({
  title: (g.layout.title || {}).text || '', ytype: (g.layout.yaxis || {}).type || '',
  xtype: (g.layout.xaxis || {}).type || '',
  marks: JSON.stringify([g.layout.shapes || [], (g.layout.annotations || []).map(a => a.text)]),
  names: g.data.map(t => t.name || ''),
  data: JSON.stringify(g.data.map(t => [t.y ? Array.from(t.y).slice(0, 200) : null,
                                        t.z ? Array.from(t.z).map(r => Array.from(r)).slice(0, 50) : null]))}))"""


def chart(page, title_part: str) -> dict:
    """The first chart whose title contains `title_part` (waits for it to appear)."""
    deadline = time.time() + 60
    while True:
        found = [c for c in page.evaluate(CHARTS) if title_part in c["title"]]
        if found or time.time() > deadline:
            assert found, f"no chart titled ...{title_part}... on the page"
            return found[0]
        time.sleep(0.5)


def slide(page, key: str, *presses: str) -> tuple[str, str]:
    """Focus the slider (or select slider) with widget key `key` (its thumb is a visually hidden range input),
    press the keys (ArrowRight, Home, End, ...), wait for the rerun; (value before, value after) as the thumb's
    label shows them, which must differ."""
    shown = page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']").first
    before = shown.inner_text()
    page.locator(f".st-key-{key} input[type=range]").first.focus()
    for key_name in presses:
        page.keyboard.press(key_name)
    settle(page, f"slider {key}")
    after = page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']").first.inner_text()
    assert after != before, f"slider {key} did not move ({before})"
    return before, after


def radio(page, key: str, option: str) -> None:
    page.locator(f".st-key-{key} label", has_text=option).first.click()
    settle(page, f"radio {key} = {option}")


def download(page, key: str) -> str:
    with page.expect_download(timeout=60_000) as info:
        page.locator(f".st-key-{key} button").first.click()
    return info.value.suggested_filename


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("controls")
    with browsing.serve(root / "home") as base, browsing.browser(root / "profile", height=1800) as page:
        yield base, page, root


def pressing(page, root, name):
    """Screenshot the page into the test's folder when a step fails (what it showed then)."""
    import contextlib

    @contextlib.contextmanager
    def guard():
        try:
            yield
        except Exception:
            page.screenshot(path=str(root / f"failure-{name}.png"))
            raise
    return guard()


# Long enough that Pause, Step, Resume and Stop all land while it trains (the test stops it; a run that
# finished first would never show Resume or "stopped" on a fast machine)
SPEC = explorer.preset(PRESET).with_values({"train.steps": 20_000, "train.log_every": 5})
RECORDED = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 5, "train.steps": 12, "train.log_every": 2})


def stored_run(root, label: str) -> dict:
    """A small run recorded straight into the server's store (norms probed every 4 steps); its record."""
    store = explorer.RunStore(root / "home")
    explorer.train(RECORDED, callbacks=[explorer.StoreRecorder(store=store, label=label)], probes={"norms": {}},
                   probe_every=4)
    return store.list()[0]


def charts_changed(page, before: list[dict], where: str) -> list[dict]:
    """Wait until some chart's title, marks or data differ from `before` (the press redrew something); the charts
    now."""
    deadline = time.time() + 60
    while True:
        now = page.evaluate(CHARTS)
        if [(c["title"], c["marks"], c["data"]) for c in now] != [(c["title"], c["marks"], c["data"]) for c in before]:
            return now
        assert time.time() < deadline, f"no chart changed after {where}"
        time.sleep(0.5)


def test_every_control_of_train(app):
    base, page, root = app
    with pressing(page, root, "train"):
        page.goto(browsing.train_page_url(base, SPEC))
        browsing.wait_ready(page, timeout_ms=180_000)
        settle(page, "opening Train")
        choose(page, "train-preset", "tau-fig1-1/L^0.25")
        page.locator(".st-key-train-load-preset button").wait_for(timeout=30_000)
        click(page, "train-load-preset", "Load preset")
        page.wait_for_function("() => location.search.includes('topology.value=1%2FL%5E0.25')", timeout=120_000)
        uploaded = root / "SPEC.json"  # back to the quick experiment, by upload
        uploaded.write_text(SPEC.to_json())
        page.locator(".st-key-train-upload-spec input[type=file]").set_input_files(str(uploaded))
        settle(page, "uploading a spec")
        page.wait_for_function("() => !location.search.includes('topology.value=1%2FL%5E0.25')", timeout=120_000)
        choose(page, "train-probe", "weights")  # norms is the default
        settle(page, "live probe select")
        choose(page, "train-basis", "own")
        settle(page, "heatmap basis select")
        assert download(page, "train-download-spec") == "spec.json"
        page.locator(".st-key-train-start button").click()
        page.locator(".st-key-train-pause button:enabled").wait_for(timeout=60_000)
        page.locator(".st-key-train-pause button").first.click()
        page.locator(".st-key-train-resume button").wait_for(timeout=30_000)
        page.locator(".st-key-train-step button:enabled").first.click()
        time.sleep(1.0)
        page.locator(".st-key-train-resume button").wait_for(timeout=30_000)
        page.locator(".st-key-train-resume button").first.click()
        page.locator(".st-key-train-stop button:enabled").first.click()
        page.get_by_text("stopped", exact=False).first.wait_for(timeout=60_000)
        settle(page, "Stop")
        assert download(page, "train-download-run-json").endswith(".json")
        assert download(page, "train-download-run-csv").endswith(".csv")
        assert download(page, "html-train-loss").endswith(".html")
        click(page, "train-reset", "Reset")
        page.get_by_text("No run yet").wait_for(timeout=30_000)


def test_every_control_of_inside(app):
    base, page, root = app
    record = stored_run(root, "recorded")
    with pressing(page, root, "inside"):
        page.goto(f"{base}/inside")
        settle(page, "opening Inside")
        page.locator(".st-key-inside-all label").click()
        settle(page, "all runs toggle")
        choose(page, "inside-run", record["id"][:8])
        settle(page, "run select")
        page.locator(".st-key-inside-probes").click()
        page.keyboard.type("weights")
        page.keyboard.press("Enter")
        page.keyboard.press("Escape")
        page.locator("h1").first.click()  # closes the multiselect's list
        settle(page, "probe multiselect")
        assert slide(page, "inside-inputs", "Home")[1] == "1"
        click(page, "inside-run-probes", "Probe (1 input)")
        one = chart(page, "input-output Jacobian spectrum")["names"]
        assert slide(page, "inside-inputs", "End")[1] == "64"
        click(page, "inside-run-probes", "Probe (64 inputs)")
        deadline = time.time() + 60
        while chart(page, "input-output Jacobian spectrum")["names"] == one:  # one curve per input, up to 4
            assert time.time() < deadline, "the Jacobian figure did not change with the inputs slider"
            time.sleep(0.5)
        assert len(set(chart(page, "input-output Jacobian spectrum")["names"])) > len(set(one))
        steps = sorted({row["step"] for row in explorer.RunStore(root / "home").get(record["id"])["probes"]})
        assert len(steps) > 1
        before = page.evaluate(CHARTS)
        slide(page, "inside-recorded-step", "Home")  # the recorded probes' scrubber: back to the first step
        titles = [c["title"] for c in charts_changed(page, before, "the recorded-step slider")]
        assert any(f"step {steps[0]}: norms by block" in t for t in titles), titles


def test_every_control_of_compare(app):
    base, page, root = app
    other = stored_run(root, "older run")  # a second run besides the grid's, to pick in the runs table
    with pressing(page, root, "compare"):
        page.goto(f"{base}/compare")
        settle(page, "opening Compare")
        steps = page.locator("[class*='st-key-compare-steps'] input").first
        steps.fill("10")
        steps.press("Enter")
        settle(page, "grid steps")
        click(page, "compare-launch", "Launch")
        page.get_by_text("Compare: training loss").first.wait_for(timeout=120_000)
        settle(page, "the grid")
        page.locator(".st-key-compare-all-runs label").click()
        settle(page, "all runs toggle")

        # the runs table (a canvas): tick the checkbox cell of its last row, the oldest run -> only it is drawn
        listed = explorer.RunStore(root / "home").list(limit=50)
        assert len(listed) >= 2 and other["id"] in [r["id"] for r in listed]
        oldest = listed[-1]
        loss = chart(page, "Compare: training loss")
        table = page.locator(".st-key-compare-table [data-testid='stDataFrameResizable']").first
        table.scroll_into_view_if_needed()
        box = table.bounding_box()
        row_height = 35  # Streamlit's dataframe rows and header
        page.mouse.click(box["x"] + 18, box["y"] + row_height * len(listed) + row_height / 2)
        settle(page, "runs table row selection")
        picked = charts_changed(page, [loss], "the runs table row selection")
        names = set(next(c for c in picked if "Compare: training loss" in c["title"])["names"])
        assert any((oldest["label"] or oldest["id"][:8]) in name for name in names), names
        assert not any(name in names for name in loss["names"] if name and oldest["label"] not in name)

        loss = chart(page, "Compare: training loss")
        assert slide(page, "compare-smoothing", "End")[1] != "0"
        smoothed = chart(page, "Compare: training loss")
        assert smoothed["data"] != loss["data"] and len(smoothed["names"]) > len(loss["names"])  # EMA + raw curves
        assert smoothed["ytype"] == "log"
        radio(page, "compare-y-scale", "linear")
        assert chart(page, "Compare: training loss")["ytype"] == "linear"
        xtype = chart(page, "Compare: training loss")["xtype"]
        radio(page, "compare-x-scale", "linear" if xtype == "log" else "log")
        assert chart(page, "Compare: training loss")["xtype"] != xtype
        choose(page, "compare-basis", "log_ratio")
        settle(page, "heatmap basis")
        assert any("log_ratio, step" in c["title"] for c in page.evaluate(CHARTS))


def test_every_control_of_papers(app):
    import urllib.parse

    base, page, root = app
    with pressing(page, root, "papers"):
        page.goto(f"{base}/papers?paper=IDInit")
        settle(page, "opening Papers")
        page.locator(".st-key-papers-fast label").first.click()
        settle(page, "fast mode toggle")
        click(page, "papers-run-idinit-chi-at-init", "Run this claim")
        page.locator(".explorer-verdicts:visible").first.wait_for(timeout=60_000)  # not the folded recorded table
        page.get_by_text("Presets (", exact=False).first.click()  # the presets expander
        page.locator(".st-key-papers-open-idinit-fig5-idiz button").first.click()
        page.locator(".st-key-train-start button").wait_for(timeout=60_000)  # on the Train page now
        settle(page, "Open in Train")
        query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
        opened = explorer.ExperimentSpec.from_query({key: values[0] for key, values in query.items()})
        assert opened.to_dict() == explorer.preset("idinit-fig5-idiz").to_dict()


def test_every_control_of_theory(app):
    base, page, root = app
    sliders = {"DCA: gain bounds": ["theory-dca-d", "theory-dca-r", "theory-dca-kappa", "theory-dca-lmax"],
               "τ: norm growth with depth": ["theory-tau-depth"],
               "Cutting the Skip: softmax conditioning": ["theory-skip-n", "theory-skip-alpha", "theory-skip-beta",
                                                          "theory-skip-temperature", "theory-skip-trials"]}
    with pressing(page, root, "theory"):
        page.goto(f"{base}/theory")
        settle(page, "opening Theory")
        for section, keys in sliders.items():
            page.locator(".st-key-theory-section label", has_text=section).click()
            settle(page, section)
            for key in keys:  # each slider one step to the right (the trials slider starts at its end: Home)
                before = page.evaluate(CHARTS)
                slide(page, key, "Home" if key == "theory-skip-trials" else "ArrowRight")
                charts_changed(page, before, f"slider {key}")
