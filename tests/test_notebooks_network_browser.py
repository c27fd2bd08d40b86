"""The quickstart's network widget (explorer.network_widget) in a real JupyterLab, driven by Playwright: a click
between two nodes adds that shortcut, and Train trains the design.

In the session's JupyterLab (conftest's `notebook_lab`) it opens the quickstart, runs its set-up cell and the
widget's cell only, clicks where the arc 0:3 would peak (the pixel from plotly's own axes, as the app's design
test clicks its matrix), and checks that the design box reads 0:3,0:4 and that the figure draws both arcs. It then
presses the widget's Train and waits for the loss curve's title to give the score; no output may show a Traceback.
"""

import json
from pathlib import Path

from browsers import skip_without_browser

skip_without_browser("jupyterlab")  # skips this module where they are missing; in CI notebook_lab fails instead

from test_notebooks_browser import opened, run_cells, tracebacks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "00_quickstart"
WIDGET = ".explorer-network-widget"

# The network view's plotly graph div in the widget: the one whose layout names its shortcuts.
NETWORK = (f"Array.from(document.querySelectorAll('{WIDGET} .js-plotly-plot'))"
           ".find(g => g._fullLayout && g.layout.meta && g.layout.meta.shortcuts)")
# Its design as drawn: the layout's shortcuts and the arc traces that have points.
DRAWN = f"""() => {{ const g = {NETWORK}; if (!g) return null;
  return {{shortcuts: Array.from(g.layout.meta.shortcuts),
          arcs: g._fullData.filter(t => /^\\d+:\\d+$/.test(t.name) && t.x && t.x.length)
                           .map(t => t.name).sort()}}; }}"""
# The loss figure's title and its number of points.
LOSS = (f"() => {{ const g = Array.from(document.querySelectorAll('{WIDGET} .js-plotly-plot'))"
        ".find(g => g._fullLayout && !(g.layout.meta && g.layout.meta.shortcuts));"
        " return g ? {title: g._fullLayout.title.text, points: (g._fullData[0].x || []).length} : null; }")


def setup_and_widget_cells() -> list[int]:
    """Indices of the quickstart's set-up cell (the first code cell) and of the cell that shows the widget."""
    cells = json.loads((ROOT / "notebooks" / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    code = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code"]
    widget = [i for i in code if "NetworkWidget(" in "".join(cells[i]["source"])]
    assert len(widget) == 1, f"{NOTEBOOK}: expected one cell building a NetworkWidget, found {widget}"
    return [code[0], widget[0]]


def click_between(page, pair: str) -> None:
    """Click the network view where the arc `pair` would peak: its invisible "add" marker, located through
    plotly's axes."""
    x, y = page.evaluate(f"""() => {{
        const g = {NETWORK}, box = g.getBoundingClientRect(), l = g._fullLayout;
        const add = g._fullData.find(t => t.name === 'add a shortcut');
        const k = Array.from(add.customdata).findIndex(c => c[0] === {json.dumps(pair)});
        return [box.left + l.xaxis._offset + l.xaxis.d2p(add.x[k]), box.top + l.yaxis._offset + l.yaxis.d2p(add.y[k])];
    }}""")
    page.mouse.move(x, y)
    page.mouse.click(x, y)


def test_the_network_widget_adds_an_arc_and_trains(notebook_lab, tmp_path):
    with opened(notebook_lab, NOTEBOOK) as page:
        run_cells(page, setup_and_widget_cells())
        page.wait_for_function(f"() => {{ const d = ({DRAWN})(); return d && d.shortcuts.join() === '0:4'; }}",
                               timeout=120_000, polling=250)
        assert page.evaluate(DRAWN) == {"shortcuts": ["0:4"], "arcs": ["0:4"]}
        design = page.locator(f"{WIDGET} .widget-text input[type=text]")
        assert design.input_value() == "0:4"

        click_between(page, "0:3")
        try:
            page.wait_for_function(f"() => {{ const d = ({DRAWN})(); return d && d.arcs.join() === '0:3,0:4'; }}",
                                   timeout=30_000, polling=250)
        except Exception as error:  # playwright's TimeoutError: say what is drawn instead
            raise AssertionError(f"the click added no arc: drawn {page.evaluate(DRAWN)}, design box "
                                 f"{design.input_value()!r}, tracebacks {tracebacks(page)}") from error
        assert sorted(page.evaluate(DRAWN)["shortcuts"]) == ["0:3", "0:4"]
        page.wait_for_function(f"() => document.querySelector('{WIDGET} .widget-text input[type=text]').value"
                               " === '0:3,0:4'", timeout=10_000)

        page.locator(f"{WIDGET} button.widget-button", has_text="Train").click()
        try:
            page.wait_for_function(f"() => {{ const s = ({LOSS})(); return s && s.title.includes('reached'); }}",
                                   timeout=120_000, polling=250)
        except Exception as error:
            raise AssertionError(f"no score: the loss figure shows {page.evaluate(LOSS)}, "
                                 f"tracebacks {tracebacks(page)}") from error
        loss = page.evaluate(LOSS)
        page.locator(WIDGET).screenshot(path=str(tmp_path / "network-widget.png"))
        assert loss["title"].startswith("Training loss of 0:3,0:4: reached 1e-06 at step"), loss
        assert loss["points"] > 10, loss
        assert not tracebacks(page), tracebacks(page)
