"""Each page's controls pressed in a real browser (Streamlit + Playwright + Debian's Chromium), failing on
any exception box ([data-testid="stException"]); every press checks what it changed on the page.

One fresh server, one browser, the pages in order. Pressed:
- Train: preset select (loads at once), spec upload, live-probe and heatmap selects, the spec download, Train,
  Pause, Step, Resume, Stop, the run JSON / history CSV / figure HTML downloads, Reset.
- Train's sidebar form, its widgets found in the page and pressed one at a time: every field of the default
  experiment (numbers stepped with + or -, toggles flipped, selects set to another option, the text field
  typed), then the topology, init and optimizer selects (tau, kaiming, sgd) and the fields they bring (a depth
  rule's select among them); each change must reach the URL (the spec there holds the value the field shows).
  Then the data select (text: the form's message asks for gpt), the model select (gpt) and the text corpus
  upload (the URL's data.path is the stored copy, which the path field shows).
- Inside: the all-runs toggle, the run select, the probe multiselect, the inputs slider (Home, End: the
  Jacobian figure's curves follow), Probe, the recorded-step slider (the figure goes back to the first
  recorded step).
- Compare: grid steps (this server's most), Launch, Stop grid (the run ends stopped: in the grid's table and
  the store), the all-runs toggle, the runs table's "run" header (its rows sorted by name, read from the data
  grid's accessible DOM) and its first row's checkbox (clicked by coordinates on the grid's canvas: that run
  alone is drawn), the validation toggle (the dashed curves go), the smoothing slider (EMA curves added), the
  loss and step axis radios (the axis types), the heatmap basis.
- Papers: fast mode, Run this claim (its verdict table), Open in Train (the Train page opens with the preset's
  spec in the URL). Run all claims is pressed for IDInit in tests/test_app_browser.py's memory test (minutes
  of training: not again here).
- Theory: every section and its sliders, DCA's "as printed" toggle, the tau rule radio ("a number") and its
  tau slider, "Check on a real network" (the measured curve appears), the activation radio (linear: the exact
  curve alone, the check off), Cutting the Skip's seed input: each redraws a figure. A PNG download (a PNG
  file, rendered by kaleido on the press).
Sliders are pressed with the keyboard (ArrowRight, Home, End) on their focused thumb (a visually hidden range
input in Streamlit 1.67). A press whose effect is known is waited for by that effect (the URL, a redraw), not
by a pause.
Not pressed here, each a widget of a kind pressed above (the AppTests in tests/test_app_*.py set most of them
without a browser): the form's fields of the other section entries, and of gpt and the text dataset besides
its path (one field at a time, gpt's pass through invalid specs: heads must divide the width); the form makes
no sliders. Train's probe-every input; Inside's recorded-probe select; Compare's base radio, preset select,
grid-axes radio, topology / depth / tau multiselects, seeds input and runs multiselect; the other figures'
HTML / PNG downloads (one helper draws them all); the Papers tabs (opened by URL); the Admin page's Stop
(the page exists only with EXPLORER_ADMIN_TOKEN).
CI (CI=true) must have Chromium and Playwright.
"""

import hashlib
import json
import math
import re
import time
import warnings
from pathlib import Path

import pytest

import explorer
from explorer_app import limits, spec_form
from browsers import browsing, skip_without_browser

MISSING = skip_without_browser()

IDLE = browsing.SETTLED  # no script run under way (its indicator shows after its first 500 ms), no element stale
PRESET = "idinit-fig5-idiz"  # digits, a 4-layer MLP: seconds to train


def settle(page, where: str, timeout_ms: int = 120_000, until: str | None = None) -> None:
    """Wait for the script run to end, then fail on any exception box. `until`: a JavaScript condition the
    press's rerun makes true, waited for first (else a second's pause: the rerun may start a moment later)."""
    if until:
        from playwright.sync_api import TimeoutError as Timeout

        try:
            page.wait_for_function(until, timeout=timeout_ms, polling=100)
        except Timeout:
            raise AssertionError(f"the page did not change as it should after {where}") from None
    else:
        time.sleep(1.0)
    page.wait_for_function(IDLE, timeout=timeout_ms)
    assert browsing.exceptions(page) == 0, f"exception box after {where}: " + \
        page.locator('[data-testid="stException"]').first.inner_text()[:500]


def click(page, key: str, where: str | None = None, until: str | None = None) -> None:
    page.locator(f".st-key-{key} button").first.click()
    settle(page, where or key, until=until)


def toggle(page, key: str, until: str | None = None) -> None:
    """Flip the toggle with widget key `key` (a click on its label)."""
    page.locator(f".st-key-{key} label").first.click()
    settle(page, f"toggle {key}", until=until)


def step_number(page, key: str, until: str | None = None) -> None:
    """Press the + of the number input with widget key `key` (its - where + is off, at the maximum)."""
    field = page.locator(f".st-key-{key}").first
    up = field.locator("[data-testid='stNumberInputStepUp']")
    (up if up.is_enabled() else field.locator("[data-testid='stNumberInputStepDown']")).click()
    settle(page, f"number input {key}", until=until)


# Each plotly chart on the page: its title, axis types, marks (shapes, annotation texts), trace names and a
# fingerprint of its data (y and z: plotly.py 6 sends numpy arrays base64-encoded, {dtype, bdata}, which
# Array.from reads as empty).
CHARTS = """() => {
  const values = v => v == null ? null : v.bdata !== undefined ? v.bdata
                                        : Array.from(v).slice(0, 200).map(r => typeof r === 'object' ? values(r) : r);
  return Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({
    title: (g.layout.title || {}).text || '', ytype: (g.layout.yaxis || {}).type || '',
    xtype: (g.layout.xaxis || {}).type || '',
    marks: JSON.stringify([g.layout.shapes || [], (g.layout.annotations || []).map(a => a.text)]),
    names: g.data.map(t => t.name || ''),
    data: JSON.stringify(g.data.map(t => [values(t.y), values(t.z)]))}));
}"""


def chart(page, title_part: str) -> dict:
    """The first chart whose title contains `title_part` (waits for it to appear)."""
    deadline = time.time() + 60
    while True:
        found = [c for c in page.evaluate(CHARTS) if title_part in c["title"]]
        if found or time.time() > deadline:
            assert found, f"no chart titled ...{title_part}... on the page"
            return found[0]
        time.sleep(0.5)


def slide(page, key: str, *presses: str, until: str | None = None) -> tuple[str, str]:
    """Focus the slider (or select slider) with widget key `key` (its thumb is a visually hidden range input),
    press the keys (ArrowRight, Home, End, ...), wait for the rerun; (value before, value after) as the thumb's
    label shows them, which must differ."""
    shown = page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']").first
    before = shown.inner_text()
    page.locator(f".st-key-{key} input[type=range]").first.focus()
    for key_name in presses:
        page.keyboard.press(key_name)
    settle(page, f"slider {key}", until=until)
    after = page.locator(f".st-key-{key} [data-testid='stSliderThumbValue']").first.inner_text()
    assert after != before, f"slider {key} did not move ({before})"
    return before, after


def radio(page, key: str, option: str, until: str | None = None) -> None:
    page.locator(f".st-key-{key} label", has_text=option).first.click()
    settle(page, f"radio {key} = {option}", until=until)


def download(page, key: str):
    """Press the download button with widget key `key`; the download (its suggested_filename, path())."""
    with page.expect_download(timeout=60_000) as info:
        page.locator(f".st-key-{key} button").first.click()
    return info.value


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("controls")
    with browsing.serve(root / "home") as base, browsing.browser(root / "profile", height=1800) as page:
        page.elsewhere = browsing.requests_elsewhere(page)  # read by the module's last test
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


# What a redraw changes: each chart's title, marks and data, as one string.
CHART_FINGERPRINT = f"() => JSON.stringify(({CHARTS})().map(c => [c.title, c.marks, c.data]))"


def redraws(page, where: str, press) -> list[dict]:
    """Press a control with `press(until)` and fail unless it redraws some chart (a title, marks or data differ):
    `until` is the JavaScript condition for its settle. The charts then."""
    page.evaluate(f"() => {{ window.chartsBefore = ({CHART_FINGERPRINT})(); }}")
    press(f"() => ({CHART_FINGERPRINT})() !== window.chartsBefore")
    return page.evaluate(CHARTS)


def test_every_control_of_train(app):
    base, page, root = app
    with pressing(page, root, "train"):
        page.goto(browsing.train_page_url(base, SPEC))
        browsing.wait_ready(page, timeout_ms=180_000)
        settle(page, "opening Train")
        browsing.choose(page, "train-preset", "tau-fig1-1/L^0.25")  # loads it at once
        page.wait_for_function("() => location.search.includes('topology.value=1%2FL%5E0.25')", timeout=120_000)
        uploaded = root / "SPEC.json"  # back to the quick experiment, by upload
        uploaded.write_text(SPEC.to_json())
        page.locator(".st-key-train-upload-spec input[type=file]").set_input_files(str(uploaded))
        settle(page, "uploading a spec")
        page.wait_for_function("() => !location.search.includes('topology.value=1%2FL%5E0.25')", timeout=120_000)
        browsing.choose(page, "train-probe", "weights")  # norms is the default
        settle(page, "live probe select")
        browsing.choose(page, "train-basis", "own")
        settle(page, "heatmap basis select")
        assert download(page, "train-download-spec").suggested_filename == "spec.json"
        page.locator(".st-key-train-start button").click()
        page.locator(f"{browsing.PAUSE}:enabled").wait_for(timeout=60_000)
        settle(page, "Train")
        stop = page.locator(".st-key-train-stop button").first
        running_at = stop.bounding_box()
        page.locator(browsing.PAUSE).first.click()
        page.locator(browsing.RESUME).wait_for(timeout=30_000)
        settle(page, "Pause")
        assert stop.bounding_box() == running_at  # paused, the buttons stay where they were: a click lands where aimed
        page.locator(".st-key-train-step button:enabled").first.click()
        time.sleep(1.0)
        try:
            page.locator(browsing.RESUME).wait_for(timeout=30_000)
        except Exception:  # playwright's TimeoutError: the page kept showing Pause after the step (the feed's ask to
            # rerun did not reach it); the job itself must be paused again, which a fresh render shows
            warnings.warn("Train did not redraw Resume within 30 s after Step; checked after the page's next rerun")
            browsing.choose(page, "train-basis", "unrolled")  # any widget reruns the page, which draws the job as it is
            settle(page, "heatmap basis select")
            page.locator(browsing.RESUME).wait_for(timeout=30_000)
        page.locator(browsing.RESUME).first.click()
        page.locator(f"{browsing.PAUSE}:enabled").wait_for(timeout=30_000)  # the run goes on, as a user sees it
        page.locator(".st-key-train-stop button:enabled").first.click()
        page.get_by_text("stopped", exact=False).first.wait_for(timeout=60_000)
        settle(page, "Stop")
        assert download(page, "train-download-run-json").suggested_filename.endswith(".json")
        assert download(page, "train-download-run-csv").suggested_filename.endswith(".csv")
        assert download(page, "html-train-loss").suggested_filename.endswith(".html")
        click(page, "train-reset", "Reset")
        page.get_by_text("No run yet").wait_for(timeout=30_000)


# The form's widgets in the sidebar, in page order: [widget key as in its st-key-... class, widget type].
FORM_WIDGETS = """() => Array.from(document.querySelectorAll('[data-testid="stSidebar"] [class*="st-key-spec-"]'))
  .map(e => [Array.from(e.classList).find(c => c.startsWith('st-key-')).slice(7),
             ['stNumberInput', 'stSelectbox', 'stCheckbox', 'stTextInput']
               .find(t => e.querySelector(`[data-testid="${t}"]`))])"""
FORM_ERROR = "[data-testid='stSidebar'] [data-testid='stAlertContentError']"
TEXT_VALUES = {"overrides": "head=xavier"}  # what the form's text fields get typed, by parameter name


def class_key(key: str) -> str:
    """A widget key as Streamlit writes it into its element's st-key-... class (other characters become -)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def url_spec(page) -> explorer.ExperimentSpec:
    """The experiment the page's URL holds."""
    return explorer.ExperimentSpec.from_query(page.evaluate("location.search"))


def form_fields(spec: explorer.ExperimentSpec) -> dict[str, tuple[str, str]]:
    """The form's widgets for `spec`, by class key: the (section, field) of the spec value each one sets."""
    fields = {}
    for section, values in spec.to_dict().items():
        for name in values:
            key = (f"{spec_form.PREFIX}{section}.name" if name == "name" else
                   spec_form.widget_key(section, values.get("name"), name))
            fields[class_key(key)] = (section, name)
    return fields


def press_field(page, key: str, kind: str, text: str | None, until: str) -> None:
    """Change one form field as a user would (step a number, flip a toggle, click the first other option, type
    `text`) and wait for `until`."""
    field = page.locator(f".st-key-{key}").first
    if kind == "stNumberInput":
        step_number(page, key, until=until)
    elif kind == "stCheckbox":
        toggle(page, key, until=until)
    elif kind == "stSelectbox":
        current = field.locator("input").input_value()
        field.click()  # opens its list (typing to filter may match the current option too: "1/L", "1/sqrt(L)")
        other = next(option for option in page.get_by_role("option").all_inner_texts() if option != current)
        page.get_by_role("option", name=other, exact=True).click()
        settle(page, f"select {key}", until=until)
    else:
        field.locator("input").fill(text)
        field.locator("input").press("Enter")
        settle(page, f"text input {key}", until=until)


def press_form_fields(page, pressed: set[str]) -> None:
    """Press each field of the sidebar's form not in `pressed` (the section selects aside), in page order, and
    check the URL (the page mirrors the spec into its query) then holds the value the field shows."""
    while True:
        fields = form_fields(url_spec(page))
        todo = [(key, kind) for key, kind in page.evaluate(FORM_WIDGETS) if key not in pressed
                and not key.endswith("-name")]
        if not todo:
            return
        key, kind = todo[0]
        pressed.add(key)
        section, name = fields.get(key) or fields[key.removesuffix("-mode")]  # a depth rule's select: key:mode
        url = json.dumps(page.evaluate("location.href"))
        press_field(page, key, kind, TEXT_VALUES.get(name),
                    until=f"() => location.href !== {url} || !!document.querySelector({json.dumps(FORM_ERROR)})")
        assert page.locator(FORM_ERROR).count() == 0, page.locator(FORM_ERROR).first.inner_text()
        value = url_spec(page).to_dict()[section][name]
        field = page.locator(f".st-key-{key} input").first
        if kind == "stCheckbox":
            assert value == field.is_checked(), (key, value)
        elif kind == "stNumberInput":
            assert math.isclose(value, float(field.input_value())), (key, value, field.input_value())
        else:
            assert value == field.input_value(), (key, value, field.input_value())


def pick_entry(page, section: str, entry: str) -> None:
    """Pick `entry` in the form's select of a section (topology, init, ...); the URL must name it."""
    browsing.choose(page, class_key(f"{spec_form.PREFIX}{section}.name"), entry)
    settle(page, f"{section} select", until=f"() => location.search.includes({json.dumps(f'{section}={entry}')})")
    assert getattr(url_spec(page), section).name == entry


def test_every_field_of_the_train_form(app):
    """Every field of the default experiment's form, then of a tau topology (a depth rule's select), kaiming
    init and SGD; the text dataset (the form says it needs gpt) with gpt, and a text corpus uploaded."""
    base, page, root = app
    with pressing(page, root, "train-form"):
        page.goto(f"{base}/")
        browsing.wait_ready(page, timeout_ms=180_000)
        closed = page.locator("[data-testid='stSidebar'] details:not([open]) summary")
        while closed.count():  # the form's collapsed sections
            closed.first.click()
        pressed: set[str] = set()
        press_form_fields(page, pressed)
        kinds = {kind for _, kind in page.evaluate(FORM_WIDGETS)}
        assert kinds == {"stNumberInput", "stSelectbox", "stCheckbox", "stTextInput"}, kinds
        for section, entry in (("topology", "tau"), ("init", "kaiming"), ("optim", "sgd")):
            pick_entry(page, section, entry)
        press_form_fields(page, pressed)
        assert any(key.endswith("-mode") for key in pressed)

        browsing.choose(page, class_key(f"{spec_form.PREFIX}data.name"), "text")
        settle(page, "data select", until=f"() => !!document.querySelector({json.dumps(FORM_ERROR)})")
        assert "gpt" in page.locator(FORM_ERROR).first.inner_text()  # the form says what the text data needs
        pick_entry(page, "model", "gpt")
        assert url_spec(page).data.name == "text"
        corpus = root / "corpus.txt"
        corpus.write_text("A residual block adds its input to its branch's output.\n" * 50, encoding="utf-8")
        page.locator(".st-key-train-upload-text input[type=file]").set_input_files(str(corpus))
        settle(page, "text upload", until="() => location.search.includes('data.path=')")
        stored = Path(url_spec(page).data.params["path"])
        assert stored == root / "home" / "uploads" / f"{hashlib.sha256(corpus.read_bytes()).hexdigest()[:16]}.txt"
        assert stored.read_bytes() == corpus.read_bytes()
        path_field = page.locator(f".st-key-{class_key(spec_form.widget_key('data', 'text', 'path'))} input").first
        assert path_field.input_value() == str(stored)


def test_every_control_of_inside(app):
    base, page, root = app
    record = stored_run(root, "recorded")
    with pressing(page, root, "inside"):
        page.goto(f"{base}/inside")
        settle(page, "opening Inside")
        toggle(page, "inside-all")
        browsing.choose(page, "inside-run", record["id"][:8])
        settle(page, "run select")
        browsing.choose(page, "inside-probes", "coefficients")  # beside the defaults (jacobian, weights, norms)
        page.keyboard.press("Escape")
        page.locator("h1").first.click()  # closes the multiselect's list
        settle(page, "probe multiselect")
        assert slide(page, "inside-inputs", "Home")[1] == "1"
        click(page, "inside-run-probes", "Probe (1 input)")
        one = chart(page, "input-output Jacobian spectrum")["names"]
        page.locator("h4", has_text=re.compile(r"^coefficients \(step \d+\)")).first.wait_for(timeout=60_000)
        assert slide(page, "inside-inputs", "End")[1] == "64"
        # the probes run as a job: the page first shows its progress, then the new spectra
        more_curves = (f"() => ({CHARTS})().some(c => c.title.includes('input-output Jacobian spectrum') "
                       f"&& new Set(c.names).size > {len(set(one))})")
        click(page, "inside-run-probes", "Probe (64 inputs)", until=more_curves)  # one curve per input, up to 4
        steps = sorted({row["step"] for row in explorer.RunStore(root / "home").get(record["id"])["probes"]})
        assert len(steps) > 1
        # the recorded probes' scrubber: back to the first step
        drawn = redraws(page, "the recorded-step slider",
                        lambda until: slide(page, "inside-recorded-step", "Home", until=until))
        titles = [c["title"] for c in drawn]
        assert any(f"step {steps[0]}: norms by block" in t for t in titles), titles


# The runs table's "run" column, top to bottom, from the data grid's accessible DOM (a table inside its canvas)
RUN_COLUMN = ("() => Array.from(document.querySelectorAll('.st-key-compare-table tbody tr'))"
              ".map(r => r.cells[0].textContent)")


def run_column_is(names: list[str]) -> str:
    """JavaScript condition: the runs table's "run" column reads `names`, top to bottom."""
    return f"() => JSON.stringify(({RUN_COLUMN})()) === JSON.stringify({json.dumps(names)})"


def loss_names(charts: list[dict]) -> list[str]:
    return next(c for c in charts if "Compare: training loss" in c["title"])["names"]


def test_every_control_of_compare(app):
    base, page, root = app
    other = stored_run(root, "a stored run")  # sorts first by name: the runs table's sorting brings it to the top
    with pressing(page, root, "compare"):
        page.goto(f"{base}/compare")
        settle(page, "opening Compare")
        steps = page.locator("[class*='st-key-compare-steps'] input").first
        steps.fill(str(limits.limits().max_steps))  # long enough that Stop lands while it trains
        steps.press("Enter")
        settle(page, "grid steps")
        click(page, "compare-launch", "Launch")
        page.locator(".explorer-live-table td", has_text="running").first.wait_for(state="attached", timeout=120_000)
        click(page, "compare-stop", "Stop grid")
        page.locator(".explorer-live-table td", has_text="stopped").first.wait_for(state="attached", timeout=60_000)
        page.get_by_text("Compare: training loss").first.wait_for(timeout=120_000)
        settle(page, "the stopped grid")
        grid = [r for r in explorer.RunStore(root / "home").list(limit=50) if r["label"].startswith("grid 1:")]
        assert grid and all(r["status"] == "stopped" and r["steps_done"] < limits.limits().max_steps for r in grid)
        listed = [r["label"] for r in explorer.RunStore(root / "home").list(limit=50)]  # newest first
        toggle(page, "compare-all-runs", until=run_column_is(listed))

        # the runs table (a canvas): click the "run" column's header (sorted by name), then tick the checkbox
        # cell of its first row -> only that run is drawn
        by_name = sorted(listed, key=str.casefold)
        assert by_name[0] == other["label"] != listed[0], listed
        loss = chart(page, "Compare: training loss")
        table = page.locator(".st-key-compare-table [data-testid='stDataFrameResizable']").first
        table.scroll_into_view_if_needed()
        box = table.bounding_box()
        row_height = 35  # Streamlit's dataframe rows and header
        page.mouse.click(box["x"] + 60, box["y"] + row_height / 2)
        settle(page, "the run column's header", until=run_column_is(by_name))

        def tick_first_row(until: str) -> None:
            page.mouse.click(box["x"] + 18, box["y"] + row_height * 1.5)
            settle(page, "runs table row selection", until=until)

        names = set(loss_names(redraws(page, "the runs table row selection", tick_first_row)))
        assert any(other["label"] in name for name in names), names
        assert not any(name in names for name in loss["names"] if name and other["label"] not in name)
        assert any(name.endswith("(val_loss)") for name in names), names
        names = loss_names(redraws(page, "the validation toggle",
                                   lambda until: toggle(page, "compare-show-val", until)))
        assert names and not any(name.endswith("(val_loss)") for name in names), names

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
        browsing.choose(page, "compare-basis", "log_ratio")
        settle(page, "heatmap basis")
        assert any("log_ratio, step" in c["title"] for c in page.evaluate(CHARTS))


def test_every_control_of_papers(app):
    base, page, root = app
    with pressing(page, root, "papers"):
        page.goto(f"{base}/papers?paper=IDInit")
        settle(page, "opening Papers")
        toggle(page, "papers-fast")  # off: full mode
        claim = page.locator(".st-key-papers-claim-idinit-chi-at-init")
        click(page, "papers-run-idinit-chi-at-init", "Run this claim")
        claim.get_by_text("full mode, computed in").wait_for(timeout=120_000)  # this session's row, not the recorded one
        settle(page, "the claim's result")
        page.get_by_text("Presets (", exact=False).first.click()  # the presets expander
        click(page, "papers-open-idinit-fig5-idiz", "Open in Train",
              until="() => document.querySelector('.st-key-train-start button') !== null")  # on the Train page now
        assert url_spec(page).to_dict() == explorer.preset("idinit-fig5-idiz").to_dict()


def test_every_control_of_theory(app):
    base, page, root = app

    def sliders_redraw(*keys: str) -> None:
        """Each slider one step to the right (the trials slider starts at its end: Home); each redraws."""
        for key in keys:
            press = "Home" if key == "theory-skip-trials" else "ArrowRight"
            redraws(page, f"slider {key}", lambda until: slide(page, key, press, until=until))

    with pressing(page, root, "theory"):
        page.goto(f"{base}/theory")
        settle(page, "opening Theory")
        radio(page, "theory-section", "DCA: gain bounds")
        sliders_redraw("theory-dca-d", "theory-dca-r", "theory-dca-kappa", "theory-dca-lmax")
        redraws(page, "the 'as printed' toggle",  # GRN-v3's constant as printed
                lambda until: toggle(page, "theory-dca-printed", until))

        radio(page, "theory-section", "τ: norm growth with depth")
        sliders_redraw("theory-tau-depth")
        redraws(page, "the tau rule radio", lambda until: radio(page, "theory-tau-rule", "a number", until))
        sliders_redraw("theory-tau-value")  # on only for "a number"
        drawn = redraws(page, "Check on a real network",
                        lambda until: click(page, "theory-tau-check", until=until))
        layers = next(c for c in drawn if "residual layers" in c["title"])
        assert "measured at init (real network)" in layers["names"]
        radio(page, "theory-tau-activation", "linear")
        assert chart(page, "residual layers")["names"] == ["exact (no ReLU): (1 + 2τ²)^l"]
        assert page.locator(".st-key-theory-tau-check button").first.is_disabled()  # the check is for ReLU only

        radio(page, "theory-section", "Cutting the Skip: softmax conditioning")
        sliders_redraw("theory-skip-n", "theory-skip-alpha", "theory-skip-beta", "theory-skip-temperature",
                       "theory-skip-trials")
        redraws(page, "the seed input", lambda until: step_number(page, "theory-skip-seed", until))  # Z's draw
        png = download(page, "png-theory-skip-mimetic")  # rendered on the server when pressed (kaleido)
        assert png.suggested_filename == "skip-mimetic-conditioning.png"
        assert Path(png.path()).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_no_page_asked_another_host(app):
    """After the tests above pressed every control of every page, and after opening the Train page once more:
    the browser asked the app's server only (no CDN, no icon from Google's fonts)."""
    base, page, _ = app
    page.goto(base)
    settle(page, "opening the Train page", until="() => document.querySelectorAll('.st-key-train-start').length > 0")
    assert page.elsewhere == []
