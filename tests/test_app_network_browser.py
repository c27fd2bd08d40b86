"""The Train page's network view in a real browser (Streamlit + Playwright + Debian's Chromium, 1280x720): a click
between two nodes adds that shortcut and one on an arc removes it (the address bar, the matrix and the run store
agree); an ANCRe run's arcs change width while it trains, with the network, the controls and the loss on one
screen; an ended run's replay plays (the slider moves) and scrubs (a click on the slider shows that step's frame).

A screenshot of the network view mid-training is saved into the test's folder, and into EXPLORER_SCREENSHOT_DIR
when set (the README's assets/screenshots/train-network.png comes from there).
CI (CI=true) must have Chromium and Playwright: there a missing one fails the test instead of skipping it.
"""

import json
import urllib.parse

import pytest

import explorer
from browsers import browsing, skip_without_browser
from test_app_design_browser import settle
from test_app_diagnosis_browser import save
from test_app_layout_browser import BOX, CHART_BOX, HEIGHT, WIDTH, inside

MISSING = skip_without_browser()

SIX_BLOCKS = explorer.preset("ancre-fig2c-0:3").with_values({"model.depth": 6, "train.steps": 40, "train.log_every": 5})
# ANCRe's linear net, long enough to watch: its coefficients probed at every logged step
ANCRE = explorer.preset("ancre-fig2b-ancre").with_values({"train.steps": 5000, "train.log_every": 10})

# the network view (its layout lists the pairs a click adds; the replay's title starts "Replay of")
NETWORK = ("Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => g.layout && g.layout.meta && "
           "g.layout.meta.addable && !((g.layout.title || {}).text || '').startsWith('Replay'))")
REPLAY = ("Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => "
          "((g.layout.title || {}).text || '').startsWith('Replay of'))")
# {title, widths: {i:j: line width}} of a figure's drawn arcs (each arc trace names its shortcut in `meta`)
ARCS = """g => g && {title: (g.layout.title || {}).text || '', widths: Object.fromEntries(g.data
    .filter(t => typeof t.meta === 'string' && t.x && t.x.length).map(t => [t.meta, t.line.width]))}"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    root = tmp_path_factory.mktemp("network")
    with browsing.serve(root / "home") as base, browsing.browser(root / "profile", WIDTH, HEIGHT) as page:
        yield base, page, root / "home"


def network_title(page) -> str:
    return page.evaluate(f"() => {{ const g = {NETWORK}; return g ? g.layout.title.text : ''; }}")


def click_pair(page, pair: str, action: str) -> None:
    """Click the network view's point whose customdata is [pair, action] (an arc: a point a quarter along it, away
    from the nodes), at its pixel from plotly's axes, and wait for the view to be redrawn."""
    before = network_title(page)
    page.evaluate(f"() => {NETWORK}.scrollIntoView({{block: 'start'}})")
    box = None
    while box != (box := page.evaluate(f"() => JSON.stringify({NETWORK}.getBoundingClientRect())")):
        page.wait_for_timeout(300)  # drawn and in place: a click while plotly draws it again is lost
    x, y = page.evaluate(f"""() => {{
        const g = {NETWORK}, box = g.getBoundingClientRect(), l = g._fullLayout;
        for (const t of g.data) {{
            const ks = (t.customdata || []).map((c, k) => c[0] === {json.dumps(pair)} && c[1] === {json.dumps(action)}
                                                      ? k : -1).filter(k => k >= 0);
            if (!ks.length) continue;
            const k = ks[Math.floor(ks.length / 4)];
            return [box.left + l.xaxis._offset + l.xaxis.d2p(t.x[k]), box.top + l.yaxis._offset + l.yaxis.d2p(t.y[k])];
        }}
        return null; }}""")
    page.mouse.click(x, y)
    settle(page, until=f"() => {{ const g = {NETWORK}; return g && g.layout.title.text !== {json.dumps(before)}; }}")


def url_design(page) -> str | None:
    return dict(urllib.parse.parse_qsl(page.evaluate("location.search").lstrip("?"))).get("topology.shortcuts")


def test_clicking_between_two_nodes_adds_the_shortcut_everywhere(app):
    base, page, home = app
    page.goto(browsing.train_page_url(base, SIX_BLOCKS))
    browsing.wait_ready(page, timeout_ms=180_000)
    settle(page, until=f"() => !!{NETWORK}")
    assert network_title(page) == "Network: 0:3"
    click_pair(page, "1:4", "add")  # the invisible marker midway between x_1 and x_4, where its arc would peak
    assert network_title(page) == "Network: 0:3,1:4"
    click_pair(page, "0:3", "remove")  # on the arc 0:3
    assert network_title(page) == "Network: 1:4"
    page.wait_for_function("() => location.search.includes('topology.shortcuts=1%3A4')", timeout=30_000)
    assert url_design(page) == "1:4"
    matrix = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => "
                           "(g.layout.title || {}).text || '').find(t => t.startsWith('Design:'))")
    assert matrix == "Design: 1:4"
    page.locator(".st-key-train-start button").click()
    page.get_by_text(f"Finished {SIX_BLOCKS.train.steps} steps", exact=False).first.wait_for(timeout=180_000)
    settle(page)
    store = explorer.RunStore(home)
    stored = store.get(store.list()[0]["id"], arrays=False)["spec"]
    assert stored["topology"]["shortcuts"] == "1:4"
    assert stored == SIX_BLOCKS.with_values({"topology.shortcuts": "1:4"}).to_dict()


def test_the_arcs_change_width_while_an_ancre_run_trains_and_its_replay_plays_and_scrubs(app, tmp_path):
    base, page, home = app
    page.goto(browsing.train_page_url(base, ANCRE))
    browsing.wait_ready(page, timeout_ms=180_000)
    settle(page, until=f"() => !!{NETWORK}")
    page.locator(".st-key-train-start button").click()
    live = f"() => {{ const a = ({ARCS})({NETWORK}); return a && a.title.includes('the network at step') && a; }}"
    first = page.wait_for_function(live, timeout=120_000).json_value()
    # the feed redraws the view in place at each new coefficients result (at most once a second)
    later = page.wait_for_function(f"""() => {{ const a = ({live})();
        return a && a.title !== {json.dumps(first['title'])} && JSON.stringify(a.widths) !==
               {json.dumps(json.dumps(first['widths'], separators=(',', ':')))} && a; }}""", timeout=120_000).json_value()
    assert set(first["widths"]) == set(later["widths"]) == {f"{i}:{j}" for j in range(1, 4) for i in range(j)}
    assert first["widths"] != later["widths"]
    # one 1280x720 screen: the network view, the controls and the live loss
    assert page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTop") == 0
    assert inside(page.evaluate(f"() => {NETWORK}.getBoundingClientRect().toJSON()"))
    for key in ("train-start", "train-pause", "train-stop"):
        assert inside(page.locator(f".st-key-{key} button").first.evaluate(BOX)), key
    loss = page.evaluate(CHART_BOX, ["", ": loss"])
    assert 0 <= loss["top"] < HEIGHT and min(loss["bottom"], HEIGHT) - loss["top"] >= 0.75 * (
        loss["bottom"] - loss["top"]), loss
    assert browsing.exceptions(page) == 0
    save(page, "train-network.png", tmp_path)

    page.locator(".st-key-train-stop button").first.click()
    summary = page.locator(".st-key-train-replay-open summary").first
    summary.wait_for(timeout=120_000)
    settle(page)
    summary.click()
    settle(page, until=f"() => !!{REPLAY}", timeout_ms=180_000)
    store = explorer.RunStore(home)
    record = store.get(next(run["id"] for run in store.list() if run["status"] == "stopped"), arrays=False)
    steps = [str(row["step"]) for row in record["history"]]
    slider = f"() => {REPLAY}._fullLayout.sliders[0].active"
    frames = page.evaluate(f"() => {REPLAY}._transitionData._frames.map(f => f.name)")
    assert frames == steps and page.evaluate(slider) == len(steps) - 1  # drawn at the last step
    page.evaluate(f"() => {REPLAY}.scrollIntoView({{block: 'start'}})")

    page.locator("g.updatemenu-button").filter(has_text="replay").first.click()  # play from the start
    start = page.wait_for_function(f"() => {{ const a = ({slider})(); return a < {len(steps) - 1} && a + 1; }}",
                                   timeout=30_000).json_value() - 1
    page.wait_for_function(f"() => ({slider})() > {start}", timeout=30_000)  # the slider moves on by itself
    page.locator("g.updatemenu-button").filter(has_text="pause").first.click()

    rail = page.locator(".slider-rail-rect").last.evaluate(BOX)
    page.mouse.click(rail["left"] + 0.25 * (rail["right"] - rail["left"]), (rail["top"] + rail["bottom"]) / 2)
    page.wait_for_timeout(500)
    shown = page.evaluate(f"""() => {{ const g = {REPLAY}, k = g._fullLayout.sliders[0].active;
        const frame = g._transitionData._frames[k];
        const loss = g.data.find(t => t.xaxis === 'x2' && t.x && t.x.length && typeof t.meta !== 'string');
        const widths = Object.fromEntries(g.data.filter(t => typeof t.meta === 'string').map(t => [t.meta, t.line.width]));
        const want = Object.fromEntries(frame.traces.map((i, n) => [g.data[i].meta, frame.data[n].line && frame.data[n].line.width])
            .filter(([m, w]) => typeof m === 'string'));
        return {{k, points: loss.x.length, widths, want}}; }}""")
    assert 0 < shown["k"] < len(steps) - 1  # scrubbed to a step inside the run
    assert abs(shown["k"] - 0.25 * (len(steps) - 1)) <= 0.1 * len(steps)
    assert shown["points"] == shown["k"] + 1  # the loss curve up to that step
    assert shown["widths"] == shown["want"]  # the arcs as they were at that step
    assert browsing.exceptions(page) == 0
