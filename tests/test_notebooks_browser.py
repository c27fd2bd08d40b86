"""Every notebook's widgets in a real JupyterLab, driven by Playwright with Debian's Chromium.

The session's JupyterLab (conftest's `notebook_lab`: loopback port, no token, its own folders, EXPLORER_FAST=1)
serves copies of the notebooks and its Chromium opens each notebook in its own tab. The test runs only what the
widget section needs: the first code cell (imports and setup: every widget cell builds on it alone) and the cell
that builds the widgets (the one that calls `plots.show_in`). tests/test_notebooks.py already runs every cell of
every notebook under nbclient; rerunning the long paper sections here would add minutes of CI for nothing this
test checks. The quickstart's widgets are checked after a Run All instead (tests/test_notebooks_quickstart_browser.py,
with this file's CASES entry for it).

It then changes a widget (a slider's readout or a dropdown), presses the section's button and waits until the
figure in the widget's Output shows the change; the Output must hold the same number of figures as before
(replaced, not appended), with a new title or trace names and new data, and no output may show a Traceback.
In 01_ancre and 04_tau (in the same tab and kernel) it also runs the Panel dashboard's cell and checks that the
dashboard is drawn in the output area: a Bokeh root of non-zero size holding a Plotly figure with data. Panel loads
BokehJS from a CDN unless `pn.extension(..., inline=True)`; with no route to the CDN the area stayed blank.
Before `plots.show_in` (`out.append_display_data(plotly_figure)`) the Output held an empty entry and the
figure never changed. CI (CI=true) must have Chromium, Playwright and JupyterLab.
"""

import contextlib
import dataclasses
import json
import time
from pathlib import Path

import pytest
from browsers import skip_without_browser

ROOT = Path(__file__).resolve().parents[1]

skip_without_browser("jupyterlab")  # skips this module where they are missing; in CI notebook_lab fails instead


@dataclasses.dataclass(frozen=True)
class WidgetChange:
    """What to do to a notebook's widget section and what its figures must then show."""
    notebook: str
    changes: tuple[tuple[str, str], ...]  # (widget description, new value): a slider or a dropdown
    button: str
    before: str  # text in the figures' titles or trace names before the change
    after: str   # ... and after it
    figures: int = 1  # figures `show_in` puts in the Output
    drawn_on_run_only: bool = False  # the section draws nothing until its button is pressed
    dashboard: str = ""  # text in the title of the Panel dashboard's figure, when the test also draws the dashboard


CASES = [
    WidgetChange("00_quickstart", (("depth", "15"),), "Train", "depth 10", "depth 15"),
    WidgetChange("01_ancre", (("depth K", "4"),), "Run", "Linear network, K=3", "Linear network, K=4",
                 dashboard="ANCRe explorer"),
    WidgetChange("02_dca", (("task", "affine"), ("depth", "5")), "Run",
                 "identity: 10 layers", "affine: 5 layers"),
    WidgetChange("03_idinit", (("init", "kaiming"),), "Run", "idinit, depth 8", "kaiming, depth 8",
                 drawn_on_run_only=True),
    WidgetChange("04_tau", (("tau", "1/L"),), "Run", "tau=1/sqrt(L), L=10", "tau=1/L, L=10", figures=2,
                 dashboard="tau = 1/sqrt(L), L = 50"),
    WidgetChange("05_skipless", (("topology", "cascaded"),), "Run",
                 "skipless, init skipless, depth 2", "cascaded, init skipless, depth 2"),
]

# The figures drawn in the widget section's Output: titles, trace names and every trace's y values (a list,
# or the base64 string plotly.py sends for a numpy array).
WIDGET_FIGURES = """() => Array.from(document.querySelectorAll('.widget-output .js-plotly-plot'))
  .filter(gd => gd.data && gd.data.length)
  .map(gd => ({title: (gd.layout.title || {}).text || '',
               names: gd.data.map(trace => trace.name || ''),
               y: gd.data.map(trace => trace.y && trace.y.bdata !== undefined ? trace.y.bdata
                                                                               : Array.from(trace.y || []))}))"""


# The Plotly figures drawn inside the Panel (Bokeh) roots of cell `i`'s output area, with their size, number of
# traces and title; Bokeh draws its views in shadow roots, so the search descends into them.
DASHBOARD_FIGURES = """(i) => {
  const deep = (node, sel) => { let found = Array.from(node.querySelectorAll(sel));
    for (const el of node.querySelectorAll('*')) if (el.shadowRoot) found = found.concat(deep(el.shadowRoot, sel));
    return found; };
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
  return Array.from(cell.node.querySelectorAll('.jp-OutputArea-output [data-root-id]'))
    .filter(root => root.parentElement.getBoundingClientRect().height > 0)
    .flatMap(root => deep(root, '.js-plotly-plot').map(gd => { const box = gd.getBoundingClientRect();
      return {width: box.width, height: box.height, traces: (gd.data || []).length,
              title: ((gd.layout || {}).title || {}).text || ''}; }));
}"""


def dashboard_cell(notebook: str) -> int:
    """Index of the cell that builds the Panel dashboard (calls `.servable(`)."""
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    found = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code" and ".servable(" in "".join(cell["source"])]
    assert len(found) == 1, f"{notebook}: expected one cell calling .servable(, found {found}"
    return found[0]


def shows(text: str, figures: int) -> str:
    """JS predicate: at least `figures` figures are drawn in the Output and `text` is in a title or a trace name."""
    return (f"() => {{ const figures = ({WIDGET_FIGURES})();"
            f" return figures.length >= {figures} && figures.some(f => [f.title, ...f.names].join(' | ')"
            f".includes({json.dumps(text)})); }}")


@contextlib.contextmanager
def opened(lab, notebook: str):
    """A tab of the session's JupyterLab (conftest's `notebook_lab`) showing `notebook`, its kernel idle; the
    kernel is shut down after, in the background."""
    page = lab.context.new_page()
    try:
        page.goto(f"{lab.base}/lab/tree/{notebook}.ipynb?reset")
        page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
                               timeout=90_000)
        start_kernel(page)
        yield page
    finally:
        session = page.evaluate("() => { const s = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                                " return s && s.sessionContext && s.sessionContext.session"
                                " ? s.sessionContext.session.id : null; }")
        page.close()
        if session:
            lab.close_session(session)


@pytest.fixture
def notebook_page(notebook_lab, case):
    """A tab showing the case's notebook, its kernel idle; the kernel is shut down after."""
    with opened(notebook_lab, case.notebook) as page:
        yield page


def start_kernel(page, timeout: float = 90.0) -> None:
    """Wait until the notebook's kernel is idle. When the kernel is slow to start JupyterLab may ask which
    kernel to use (Python 3 is preselected): answer Select."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        dialog = page.locator(".jp-Dialog button", has_text="Select")
        if dialog.count():
            dialog.first.click()
        elif page.evaluate("() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator');"
                           " const k = document.querySelector('.jp-Toolbar-kernelName');"
                           " return !!(s && s.getAttribute('data-status') === 'idle' && k"
                           " && !k.textContent.includes('No Kernel')); }"):
            return
        time.sleep(0.5)
    raise AssertionError("the notebook's kernel did not start")


def widget_section_cells(notebook: str) -> list[int]:
    """Indices of the setup cell (the first code cell) and of the cell that builds the widgets (calls show_in)."""
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    code = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code"]
    widget_cells = [i for i in code if "show_in(" in "".join(cells[i]["source"])]
    assert len(widget_cells) == 1, f"{notebook}: expected one cell calling plots.show_in, found {widget_cells}"
    return [code[0], widget_cells[0]]


def run_cells(page, indices: list[int]) -> None:
    """Select the cells at `indices` and run them, in order, with JupyterLab's own command."""
    # not awaited: the command's promise settles only when the cells have run
    page.evaluate("""(indices) => {
      const notebook = window.jupyterapp.shell.currentWidget.content;
      notebook.activeCellIndex = indices[0];
      notebook.deselectAll();
      for (const i of indices) notebook.select(notebook.widgets[i]);
      window.jupyterapp.commands.execute('notebook:run-cell');
      return true;
    }""", indices)


def tracebacks(page) -> list[str]:
    return page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").all_inner_texts()


def wait_until_shown(page, text: str, figures: int, timeout_ms: int) -> list[dict]:
    """Wait until the Output's figures (`figures` of them at least) show `text`; return them. On a timeout
    say what the page shows."""
    try:
        page.wait_for_function(shows(text, figures), timeout=timeout_ms, polling=250)
    except Exception as error:  # playwright's TimeoutError: report what the Output and the cells show instead
        drawn = [(f["title"], f["names"]) for f in page.evaluate(WIDGET_FIGURES)]
        raise AssertionError(f"the widget's Output never showed {text!r}: its figures {drawn}, "
                             f"tracebacks {tracebacks(page)}") from error
    return page.evaluate(WIDGET_FIGURES)


def set_widget(page, description: str, value: str) -> None:
    """Set the slider (through its readout) or the dropdown labelled `description` to `value`."""
    widget = page.locator(".widget-slider, .widget-dropdown",
                          has=page.get_by_text(description, exact=True)).first
    if "widget-dropdown" in widget.get_attribute("class"):
        widget.locator("select").select_option(label=value)
    else:
        widget.locator(".widget-readout").click()
        page.keyboard.press("Control+A")
        page.keyboard.type(value)
        page.keyboard.press("Enter")


QUICKSTART = next(case for case in CASES if case.notebook == "00_quickstart")  # after a Run All: its own test
AFTER_SETUP = [case for case in CASES if case is not QUICKSTART]


@pytest.mark.parametrize("case", AFTER_SETUP, ids=[case.notebook for case in AFTER_SETUP])
def test_widget_redraws_its_figure_in_jupyterlab(case, notebook_page, tmp_path):
    run_cells(notebook_page, widget_section_cells(case.notebook))
    check_widget_change(notebook_page, case, tmp_path)


def check_widget_change(page, case: WidgetChange, tmp_path) -> None:
    """With the case's widget section run: its figures, then change the widgets, press the button and check that
    the figures are replaced with the change (and the case's dashboard, if any, is drawn)."""
    button = page.locator("button.widget-button", has_text=case.button).first
    if case.drawn_on_run_only:
        button.click(timeout=120_000)
    before = wait_until_shown(page, case.before, case.figures, timeout_ms=120_000)

    for description, value in case.changes:
        set_widget(page, description, value)
    button.click()
    after = wait_until_shown(page, case.after, case.figures, timeout_ms=90_000)
    page.screenshot(path=str(tmp_path / f"jupyterlab-{case.notebook}.png"))
    # the Output's figures replaced (as many as before), with new titles or trace names and new data
    assert len(before) == len(after) == case.figures, (before, after)
    assert [(f["title"], f["names"]) for f in after] != [(f["title"], f["names"]) for f in before]
    assert [f["y"] for f in after] != [f["y"] for f in before]
    assert not tracebacks(page)
    if case.dashboard:
        check_dashboard(page, case, tmp_path)


def check_dashboard(page, case: WidgetChange, tmp_path) -> None:
    """Run the notebook's Panel dashboard cell; its figure must be drawn, with data, in the output area."""
    index = dashboard_cell(case.notebook)
    run_cells(page, [index])
    try:
        page.wait_for_function(f"(i) => ({DASHBOARD_FIGURES})(i).some(f => f.width > 0 && f.height > 0 && f.traces > 0"
                               f" && f.title.includes({json.dumps(case.dashboard)}))", arg=index, timeout=180_000,
                               polling=500)
    except Exception as error:  # playwright's TimeoutError: say what the output area holds instead
        page.screenshot(path=str(tmp_path / f"dashboard-{case.notebook}.png"))
        raise AssertionError(f"the Panel dashboard of {case.notebook} was not drawn: figures "
                             f"{page.evaluate(DASHBOARD_FIGURES, index)}, tracebacks {tracebacks(page)}") from error
    assert not tracebacks(page)
