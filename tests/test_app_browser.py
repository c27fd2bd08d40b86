"""The app in a real browser: Streamlit on a loopback port, driven by Playwright with Debian's Chromium.

Trains a preset from the Train page and waits for its loss chart and heatmap, checks there is no
exception box, saves a screenshot (into the test's folder, and into EXPLORER_SCREENSHOT_DIR when set:
the README's screenshot comes from there) and opens a shared URL. The timings it sees (click -> first
loss point, chart refreshes per second, a click's answer) are written to the test's folder and printed;
benchmarks/app_responsiveness.py reports them against a plain PyTorch reference.
CI (CI=true) must have Chromium and Playwright: there a missing one fails the test instead of skipping it.
"""

import json
import os
import re
import shutil
import signal
import urllib.parse
import time
from pathlib import Path

import pytest

import explorer
from browsers import browsing, skip_without_browser
from explorer.papers import PAPERS

ROOT = Path(__file__).resolve().parents[1]

MISSING = skip_without_browser()


NEVER_ENDS = 5_000_000  # steps: hours of training on any machine, so a run stopped by the test is still training


# A probe written as one new file in the plug-in folder (EXPLORER_PLUGINS_DIR): the library imports every file there.
PROBE_SOURCE = '''"""mean |output| of the model over a batch: a probe in one file, with no figure of its own."""

import torch

from explorer.probes.core import PROBES


@PROBES.register("example-output-scale", "mean |output| of the model over the batch, per output unit",
                 cost=lambda c: c.forward(c.n))
def output_scale(model, inputs):
    with torch.no_grad():
        out = model(inputs).abs()
    return {"mean_abs": out.mean(), "per_unit": out.mean(0)}
'''


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("app")
    (root / "plugins").mkdir()  # a probe in one file, outside the package (test_a_probe_added_in_one_file_...)
    (root / "plugins" / "example_output_scale.py").write_text(PROBE_SOURCE)
    # a run that must still be training after a window asks for more steps than any machine trains in minutes
    env = {"EXPLORER_MAX_STEPS": str(NEVER_ENDS), "EXPLORER_PLUGINS_DIR": str(root / "plugins")}
    with browsing.serve(root / "home", env=env) as base, browsing.browser(root / "profile") as page:
        yield base, page, root / "home"


def test_training_a_preset_shows_the_loss_and_the_heatmap(app, tmp_path):
    base, page, home = app
    elsewhere = browsing.requests_elsewhere(page)  # none: no CDN, no icon from Google's fonts
    spec = explorer.preset(browsing.PRESET).with_values({"train.steps": 200, "train.log_every": 10})
    seen = browsing.measure(page, base, spec, sample_s=2.0)
    print(json.dumps({k: v for k, v in seen.items() if k != "chart_titles"}, indent=1))
    (tmp_path / "timings.json").write_text(json.dumps(seen, indent=2))
    assert seen["exceptions"] == 0
    assert any(": loss" in title for title in seen["chart_titles"]), seen["chart_titles"]
    assert any("Shortcut coefficients" in title for title in seen["chart_titles"]), seen["chart_titles"]
    page.get_by_text("Finished 200 steps").wait_for(timeout=60_000)  # the box follows the progress line's "finished"
    assert page.get_by_text("Finished 200 steps").count() == 1
    assert elsewhere == []
    runs = explorer.RunStore(home).list()
    assert [run["status"] for run in runs] == ["finished"] and runs[0]["steps_done"] == 200
    shot = tmp_path / "train-page.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("EXPLORER_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["EXPLORER_SCREENSHOT_DIR"]) / "train-page.png")


def test_choosing_a_preset_and_pressing_train_trains_the_preset(app):
    """Choosing a preset loads it (no second button): pressing Train right after trains that preset, not the form
    that was there before."""
    base, page, home = app
    name = "ancre-fig2b-0:2"
    page.goto(f"{base}/?model=mlp")
    browsing.wait_ready(page)
    browsing.choose(page, "train-preset", name)
    page.get_by_text(f"Started from the preset {name}.").wait_for(timeout=60_000)
    page.wait_for_function(f"() => {browsing.NOT_RUNNING}", timeout=30_000)
    before = {run["id"] for run in explorer.RunStore(home).list()}
    page.locator(".st-key-train-start button").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
    (trained,) = [explorer.RunStore(home).get(run["id"]) for run in explorer.RunStore(home).list()
                  if run["id"] not in before]
    preset = explorer.preset(name).to_dict()
    assert {key: trained["spec"][key] for key in ("data", "model", "topology", "init", "optim")} == \
        {key: preset[key] for key in ("data", "model", "topology", "init", "optim")}
    assert trained["status"] == "finished" and trained["steps_done"] == preset["train"]["steps"]
    assert browsing.exceptions(page) == 0


def test_a_topology_added_in_its_own_file_trains_on_the_train_page(app):
    """Highway is one file under explorer/topology/: the Train page's form offers it, trains it and draws its
    loss and its coefficients, like any built-in topology."""
    base, page, home = app
    spec = explorer.preset(browsing.PRESET).with_values({"topology.name": "highway", "train.steps": 60,
                                                         "train.log_every": 10})
    trained = browsing.train_on_page(page, base, spec, timeout_ms=300_000)
    assert trained["exceptions"] == 0
    assert "topology=highway" in page.url  # the address bar holds the design it trained
    titles = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                           ".map(g => (g.layout.title || {}).text || '')")
    assert any(": loss" in title for title in titles) and any("Shortcut coefficients" in title for title in titles)
    stored = [explorer.RunStore(home).get(run["id"]) for run in explorer.RunStore(home).list()]
    highway = [run for run in stored if run["spec"]["topology"]["name"] == "highway"]
    assert [(run["status"], run["steps_done"]) for run in highway] == [("finished", 60)]


# The charts on the page: for each, its title's kind, a number that is the same for the same DOM element
# (the first time one is seen it gets the next number), and its data's size.
CHART_ELEMENTS = """() => {
  window.chartNumbers ??= new WeakMap();
  window.chartsSeen ??= 0;
  return Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
    if (!window.chartNumbers.has(g)) window.chartNumbers.set(g, window.chartsSeen++);
    const title = (g.layout.title || {}).text || '';
    const kind = title.endsWith(': loss') ? 'loss' : title.includes('Shortcut coefficients') ? 'heatmap'
      : title.includes('the network at step') ? 'network' : 'probe';
    return [kind, window.chartNumbers.get(g), g.data.map(t => (t.x || []).length).join(',')];
  });
}"""


def test_the_live_charts_follow_the_run_without_rerunning_the_page(app):
    """While a run trains, its progress, loss, network, heatmap and probe charts follow it by polling the page's feed
    (explorer_app.live_feed), in the same elements (Plotly.react): Streamlit does not rerun the page five
    times a second (each rerun cost the browser and the server half a core beside the training), only when
    the run's state changes. A chart remounted at each redraw (st.plotly_chart gives a changed figure a new
    identity) made the page jump."""
    base, page, _ = app
    spec = explorer.preset(browsing.PRESET).with_values({"train.steps": NEVER_ENDS, "train.log_every": 10})
    polls, reruns = [], []
    page.on("request", lambda request: polls.append(request.url) if "/live/" in request.url else None)
    page.on("websocket", lambda socket: socket.on("framesent", lambda frame: reruns.append(frame)))
    page.goto(browsing.train_page_url(base, spec))  # a new connection to the server: its messages are counted
    browsing.wait_ready(page)
    page.locator(".st-key-train-start button").click()
    page.wait_for_function(f"() => ({browsing.LOSS_POINTS})() > 0", timeout=60_000, polling=20)
    page.wait_for_function(f"() => ({CHART_ELEMENTS})().some(([kind]) => kind === 'heatmap')", timeout=60_000)
    # the rerun that drew the heatmap has ended (no element of the page marked stale): the form's design view that
    # the run's network view replaced is gone from the page
    page.wait_for_function(browsing.SETTLED, timeout=60_000)
    elements, contents, texts = {}, {}, []
    polls.clear()
    reruns.clear()
    t0 = time.perf_counter()

    def seen_enough():  # five loss charts and five steps: how long that takes is the machine's speed, not a property
        return len(contents.get("loss", ())) >= 5 and len({t for t in texts if re.search(r"step \d+ of", t)}) >= 5

    while not seen_enough() and page.get_by_text("Finished", exact=False).count() == 0:
        assert time.perf_counter() - t0 < 180, (contents, texts)
        for kind, number, content in page.evaluate(CHART_ELEMENTS):
            elements.setdefault(kind, set()).add(number)
            contents.setdefault(kind, set()).add(content)
        texts.append(page.locator(".explorer-live-progress").first.inner_text())
        time.sleep(0.05)
    still_training = page.get_by_text("Finished", exact=False).count() == 0  # (Playwright calls deliver the events)
    polled, sent = len(polls), len(reruns)  # before Reset's own message
    page.locator(".st-key-train-reset button").first.click()  # stop the run (Stop is disabled once it ends);
    # .first: a button with help text has a hidden copy that Streamlit measures its width with
    assert still_training, "the run ended inside the window"
    assert len(contents["loss"]) >= 5, contents["loss"]  # it did redraw
    # the bar's line names its step (before its first step a line may say the run is starting)
    steps = [int(found.group(1)) for text in texts if (found := re.search(r"step (\d+) of", text))]
    assert len(set(steps)) >= 5 and steps == sorted(steps), texts  # the progress bar moved, never back
    assert {kind: len(numbers) for kind, numbers in elements.items()} == {"loss": 1, "heatmap": 1, "probe": 1,
                                                                           "network": 1}
    assert sent <= 2, f"{sent} messages to the server: the page reran while nothing changed"
    # each new loss chart came in an answer: to a poll made in the window, to the one in flight when it began,
    # or to a rerun; so the feed carried at least this many
    assert polled >= len(contents["loss"]) - 2 - sent, polls
    assert browsing.exceptions(page) == 0


# The Compare grid's live table: each run's cells, as text (the progress bar's percentage is its title).
GRID_ROWS = """() => Array.from(document.querySelectorAll('.explorer-live-table tbody tr'))
  .map(r => Array.from(r.cells).map(c => c.textContent || c.title))"""
# The grid's loss charts: for each, a number that is the same for the same DOM element, and its data's size.
GRID_CHARTS = """() => {
  window.gridCharts ??= new WeakMap();
  window.gridChartsSeen ??= 0;
  return Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(g => /^Grid \\d+: training loss$/.test((g.layout.title || {}).text || ''))
    .map(g => {
      if (!window.gridCharts.has(g)) window.gridCharts.set(g, window.gridChartsSeen++);
      return [window.gridCharts.get(g), g.data.map(t => (t.x || []).length).join(',')];
    });
}"""


def test_the_compare_grid_follows_its_feed_without_rerunning_the_page(app):
    """While a Compare grid trains, its progress bar, runs table and loss chart follow the page's feed: the
    table's steps move and the chart is redrawn in its one element, while the browser sends Streamlit no
    message (a page rerun per update would cost the browser a share of two cores that the grid's runs need).
    The fragment reruns when a run's state changes: Stop grid shows every run stopped."""
    base, page, _ = app
    polls, sent = [], []
    page.on("request", lambda request: polls.append(request.url) if "/live/" in request.url else None)
    page.on("websocket", lambda socket: socket.on("framesent", lambda frame: sent.append(frame)))
    browsing.set_up_grid(page, base, seeds=2, steps=20_000)  # a new connection: its messages are counted; two
    # runs, long enough to stop them
    page.locator(".st-key-compare-launch button").click()
    page.wait_for_function(f"() => ({GRID_ROWS})().length === 2 && ({GRID_ROWS})().every(r => r[1] === 'running')"
                           f" && ({GRID_CHARTS})().some(([, size]) => size !== '0')", timeout=120_000)
    assert page.locator(".st-key-compare-launch button").first.is_disabled()  # redrawn with the grid under way
    polls.clear()
    sent.clear()
    steps, elements, contents, t0 = [], set(), set(), time.perf_counter()

    def moved_enough():  # every run's step took three values, seen over at least 4 s
        return steps and time.perf_counter() - t0 >= 4 and all(len(set(run)) >= 3 for run in zip(*steps))

    while not moved_enough():  # how long that takes is the machine's speed and load, not a property
        assert time.perf_counter() - t0 < 180, steps
        steps.append([int(row[3].split(" / ")[0]) for row in page.evaluate(GRID_ROWS)])
        for number, content in page.evaluate(GRID_CHARTS):
            elements.add(number)
            contents.add(content)
        time.sleep(0.1)
    polled, messages = len(polls), len(sent)
    page.locator(".st-key-compare-stop button").first.click()  # (.first: a button with help has a hidden copy)
    page.wait_for_function(f"() => ({GRID_ROWS})().every(r => r[1] === 'stopped')", timeout=60_000)
    for run in zip(*steps):  # each run's step, as the table showed it, never went back
        assert list(run) == sorted(run), run
    assert elements == {0} and len(contents) >= 3, (elements, contents)  # redrawn, in one element
    changes = sum(a != b for a, b in zip(steps, steps[1:]))  # how often the table showed new steps
    assert messages <= 1, f"{messages} messages to the server: the page reran while no run changed state"
    assert changes > messages and polled >= 1, (changes, polls)  # so the feed, not a rerun, moved the table
    assert browsing.exceptions(page) == 0


def claims_follow_their_feed(page, base: str, paper: str) -> None:
    """"Run all claims" of `paper` on the Papers page: the job's progress bar follows its feed from claim to
    claim, and the page sends Streamlit only the click and, once the job ends, one rerun that draws the verdicts.
    (Checked in the memory test below, whose claims run this is.)"""
    polls, sent = [], []

    def on_request(request):
        if "/live/" in request.url:
            polls.append(request.url)

    def on_socket(socket):
        socket.on("framesent", lambda frame: sent.append(frame))

    page.on("request", on_request)
    page.on("websocket", on_socket)
    page.goto(f"{base}/papers?paper={urllib.parse.quote(PAPERS[paper].tab)}")
    button = f".st-key-papers-run-all-{paper} button"
    page.wait_for_function(f"() => document.querySelectorAll('{button}').length >= 1 && {browsing.NOT_RUNNING}",
                           timeout=120_000)
    sent.clear()
    page.locator(button).first.click()
    texts, t0 = [], time.perf_counter()
    while page.get_by_text("Done:", exact=False).count() == 0:
        assert time.perf_counter() - t0 < 600, texts
        # read in one call: the bar goes when the page reruns for the job's end
        texts.append(page.evaluate("() => document.querySelector('.explorer-live-progress')?.innerText ?? ''"))
        time.sleep(0.1)
    page.remove_listener("request", on_request)
    page.remove_listener("websocket", on_socket)
    total = len(explorer.papers.claims.claims(paper))
    claims_seen = {int(found.group(1)) for text in texts if (found := re.match(rf"Claim (\d+) of {total}", text))}
    assert len(claims_seen) >= 2, texts  # it moved from claim to claim
    assert polls and len(sent) <= 3, f"{len(sent)} messages to the server while the claims ran"
    page.get_by_text("fast mode, computed in").nth(total - 1).wait_for(timeout=30_000)  # each claim's row, drawn once it ended
    assert browsing.exceptions(page) == 0


def test_a_shared_url_carries_its_values_into_the_widgets(app):
    from playwright.sync_api import expect

    base, page, _ = app
    spec = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 17, "optim.lr": 0.05})
    page.goto(browsing.train_page_url(base, spec))
    browsing.wait_ready(page)
    # each check waits (up to 30 s) for the value: on a loaded machine a field can be drawn before its value is
    expect(page.locator(".st-key-spec-model-mlp-resnet-depth input")).to_have_value("17", timeout=30_000)
    expect(page.locator(".st-key-spec-optim-sgd-lr input")).to_have_value("0.05", timeout=30_000)
    expect(page.locator(".st-key-spec-topology-tau-value-mode input")).to_have_value("1/L^0.25", timeout=30_000)
    assert browsing.exceptions(page) == 0


def test_a_bad_combination_shows_the_message_and_disables_train(app):
    base, page, _ = app
    page.goto(f"{base}/?model=mlp")
    browsing.wait_ready(page)
    browsing.choose(page, "spec-topology-name", "skipless")
    with pytest.raises(explorer.SpecError) as expected:
        explorer.ExperimentSpec.from_query("model=mlp&topology=skipless")
    page.get_by_text(expected.value.message[:60]).first.wait_for(timeout=30_000)
    page.wait_for_function("() => Array.from(document.querySelectorAll('.st-key-train-start button'))"
                           ".every(button => button.disabled)", timeout=30_000)
    assert browsing.exceptions(page) == 0


@pytest.mark.parametrize("query", ["model=[Session expired - log in again](http://example.invalid/login)",
                                   "model=![x](http://example.invalid/a.png)",
                                   "![x](http://example.invalid/a.png)=1"])
def test_a_hostile_link_renders_as_text(app, query):
    """Markdown in a link's value or key name is shown literally, with no link or image
    pointing at its host, and the browser fetches nothing from it."""
    base, page, _ = app
    fetched = []
    page.on("request", lambda request: fetched.append(request.url)
            if urllib.parse.urlparse(request.url).hostname == "example.invalid" else None)
    page.goto(f"{base}/?{urllib.parse.quote(query, safe='=&')}")
    browsing.wait_ready(page)
    page.get_by_text("This link's experiment is not valid").first.wait_for(timeout=30_000)
    assert page.locator('a[href*="example.invalid"]').count() == 0
    assert page.locator('img[src*="example.invalid"]').count() == 0
    assert page.get_by_text("example.invalid").count() >= 1  # the value is quoted, as text
    assert fetched == []
    assert browsing.exceptions(page) == 0


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes in /proc (Linux)")
def test_the_queue_and_a_killed_worker_in_two_tabs(app, tmp_path):
    """EXPLORER_MAX_JOBS=1: a second tab's run waits with its place shown; killing the worker that trains
    the first tab's run shows that run's error (no exception box), and the waiting run then trains on a
    fresh worker: the server goes on serving. (Two new tabs of the module's browser, on a server of its own.)"""
    spec = explorer.preset(browsing.PRESET).with_values({"train.steps": 20_000, "train.log_every": 10})
    context = app[1].context
    with browsing.serve(tmp_path / "home", env={"EXPLORER_MAX_JOBS": "1"}) as base:
        page, other = context.new_page(), context.new_page()
        try:  # closed however the test ends: an open tab would go on asking a gone server and slow the next tests
            for tab in (page, other):
                tab.goto(browsing.train_page_url(base, spec))
                browsing.wait_ready(tab)
            page.locator(".st-key-train-start button").click()
            page.wait_for_function(f"() => ({browsing.LOSS_POINTS})() > 0", timeout=120_000)
            other.locator(".st-key-train-start button").click()
            other.get_by_text("this one is number 1 in line").wait_for(timeout=60_000)
            workers = browsing.worker_pids(base.pid)
            assert len(workers) == 1, workers
            os.kill(workers[0], signal.SIGKILL)
            page.get_by_text("The run failed: the worker process died: exit code -9").wait_for(timeout=60_000)
            other.wait_for_function(f"() => ({browsing.LOSS_POINTS})() > 0", timeout=180_000)  # a fresh worker
            # the place in line goes with the page's rerun for the run's new state (its chart may be drawn first)
            other.get_by_text("in line").wait_for(state="detached", timeout=30_000)
            assert [pid for pid in browsing.worker_pids(base.pid) if pid != workers[0]]
            other.locator(".st-key-train-stop button").click()
            other.get_by_text("stopped", exact=False).first.wait_for(timeout=60_000)
            assert browsing.exceptions(page) == 0 and browsing.exceptions(other) == 0
            runs = {run["status"] for run in explorer.RunStore(tmp_path / "home").list()}
            assert runs == {"error", "stopped"}, runs
            # each session sees its own runs only, unless "all runs" is on (Inside, reached in the same session)
            other.locator('[data-testid="stSidebarNav"] a', has_text="Inside").click()
            assert run_choices(other) == ["stopped"]
            other.locator(".st-key-inside-all label").click()
            other.wait_for_function(browsing.IDLE, timeout=60_000)
            assert sorted(run_choices(other)) == ["error", "stopped"]
            assert browsing.exceptions(other) == 0
        finally:
            page.close()
            other.close()


def run_choices(tab) -> list[str]:
    """The statuses of the runs the Inside page's run select offers ("3f2a9c1d · label · stopped" each)."""
    tab.locator(".st-key-inside-run").wait_for(timeout=60_000)
    time.sleep(1.0)  # the rerun the last click triggered may start a moment later
    tab.wait_for_function(browsing.IDLE, timeout=60_000)
    tab.locator(".st-key-inside-run").click()
    options = tab.get_by_role("option")
    options.first.wait_for(timeout=30_000)
    texts = options.all_inner_texts()
    tab.keyboard.press("Escape")
    return [text.split(" · ")[-1].strip() for text in texts]


def test_the_servers_memory_stays_bounded_over_runs_and_claims(app):
    """The memory bound at CI size: models and data live in the workers and the caches are bounded, so
    the server's resident memory after 8 more runs and one paper's claims (fast mode, from the Papers page)
    stays under 1.5x its memory after the first run (benchmarks/app_responsiveness.py does 50 runs and every
    paper). The claims job's page follows its feed without rerunning (claims_follow_their_feed)."""
    base, page, home = app
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values(browsing.TOY)
    browsing.train_on_page(page, base, spec)
    first = browsing.rss_mb(base.pid)
    for _ in range(8):
        assert browsing.train_on_page(page, base, spec)["exceptions"] == 0
    claims_follow_their_feed(page, base, "idinit")
    after = browsing.rss_mb(base.pid)
    print(f"server RSS {first:.0f} MB after the first run, {after:.0f} MB after 8 more and IDInit's claims")
    assert after < 1.5 * first, (first, after)


def test_a_probe_added_in_one_file_draws_on_the_train_page(app):
    """One file in the plug-in folder the module's app was started with (EXPLORER_PLUGINS_DIR): the Train page
    offers the probe, a run's worker process computes it, and the page draws it (as the table of its numbers,
    since it declares no figure). Nothing is written into the package."""
    base, page, _ = app
    spec = explorer.ExperimentSpec.default().with_values({"train.steps": 20, "train.log_every": 5})
    page.goto(browsing.train_page_url(base, spec))
    browsing.wait_ready(page)
    browsing.choose(page, "train-probe", "example-output-scale")
    page.wait_for_function(f"() => {browsing.NOT_RUNNING}", timeout=30_000)
    page.locator(".st-key-train-start button").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
    page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g => "
                           "((g.layout.title || {}).text || '').includes('example-output-scale'))",
                           timeout=60_000)
    assert browsing.exceptions(page) == 0
    assert not list((ROOT / "explorer").rglob("example_output_scale*"))
