"""The design board (explorer.design_widget) and 01_ancre's Panel dashboard in a real JupyterLab.

Reuses tests/test_notebooks_browser.py's JupyterLab and its helpers (one JupyterLab on copies of the notebooks,
Debian's Chromium through Playwright), and runs only the cells each check needs. In the quickstart it toggles the
shortcut 0:4, presses Train and waits for the loss curve and the table; then adds 0:3 and trains again: the figure
shows the new design beside the best one and the table keeps both designs. In 01_ancre it runs the Panel
dashboard's cell (after the explorer's, which defines what it trains) and waits for its figure, drawn with data.
"""

import json
import shutil
from pathlib import Path

import pytest

from test_notebooks_browser import DASHBOARD_FIGURES, MISSING, WIDGET_FIGURES, browsing, dashboard_cell, jupyterlab, \
    run_cells, tracebacks, widget_section_cells
from test_notebooks_browser import opened as notebook_tab

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab on copies of the two notebooks and one Chromium: (base URL, browser context, folder)."""
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the JupyterLab test"
    work = tmp_path_factory.mktemp("lab")
    for name in ("00_quickstart", "01_ancre"):
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", work)
    with jupyterlab(work) as base, browsing.browser(work / ".profile", height=1400) as first_page:
        yield base, first_page.context, work


def opened(lab, notebook: str):
    """A tab showing `notebook`, its kernel idle; the kernel is shut down after."""
    base, context, _ = lab
    return notebook_tab(base, context, notebook)


def cells_with(notebook: str, text: str) -> list[int]:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    return [i for i, cell in enumerate(cells) if cell["cell_type"] == "code" and text in "".join(cell["source"])]


def output_text(page) -> str:
    return "\n".join(page.locator(".widget-output").all_inner_texts())


def wait_for_design(page, design: str, timeout_ms: int) -> list[dict]:
    """Wait until the board's Output shows the figure of `design` and the table; return the figures."""
    js = (f"() => ({WIDGET_FIGURES})().some(g => g.title.startsWith({json.dumps(design + ':')}))"
          " && Array.from(document.querySelectorAll('.widget-output')).some(o => o.innerText.includes("
          "'designs tried'))")
    try:
        page.wait_for_function(js, timeout=timeout_ms, polling=250)
    except Exception as error:  # playwright's TimeoutError: say what the Output shows instead
        raise AssertionError(f"the board never showed {design!r}: {page.evaluate(WIDGET_FIGURES)}, "
                             f"{output_text(page)[-500:]!r}, tracebacks {tracebacks(page)}") from error
    return page.evaluate(WIDGET_FIGURES)


def test_the_design_board_draws_and_trains_in_jupyterlab(lab):
    with opened(lab, "00_quickstart") as page:
        [board] = cells_with("00_quickstart", "DesignWidget()")
        run_cells(page, [widget_section_cells("00_quickstart")[0], board])  # the setup cell, then the board
        page.locator("button.widget-toggle-button", has_text="0:4").click(timeout=120_000)
        page.get_by_text("design: 0:4 (1 of at most 2").wait_for(timeout=30_000)
        page.locator("button.widget-button", has_text="Train").click()
        first = wait_for_design(page, "0:4", timeout_ms=120_000)
        assert "reached 1e-06 at step" in first[0]["title"] and len(first[0]["names"]) == 1

        page.locator("button.widget-toggle-button", has_text="0:3").click()
        page.get_by_text("design: 0:3,0:4 (2 of at most 2").wait_for(timeout=30_000)
        page.locator("button.widget-button", has_text="Train").click()
        second = wait_for_design(page, "0:3,0:4", timeout_ms=120_000)
        page.screenshot(path=str(lab[2] / "design-board.png"))
        assert len(second) == 1, "the Output's figure is replaced, not appended"
        assert set(second[0]["names"]) == {"0:3,0:4", "0:4"}, second  # the new design beside the best one
        table = output_text(page).split("designs tried, best first:")[-1].splitlines()
        ranked = [line.split()[1] for line in table if line.strip()[:1].isdigit()]
        assert ranked == ["0:3,0:4", "0:4"], table  # the session's table keeps both, the faster first
        assert not tracebacks(page)


def test_the_ancre_dashboard_renders_inline_in_jupyterlab(lab):
    with opened(lab, "01_ancre") as page:
        index = dashboard_cell("01_ancre")
        run_cells(page, widget_section_cells("01_ancre") + [index])  # setup, the explorer (lnn_run), the dashboard
        try:
            page.wait_for_function(f"(i) => ({DASHBOARD_FIGURES})(i).some(f => f.width > 0 && f.height > 0"
                                   " && f.traces > 0 && f.title.includes('ANCRe explorer'))", arg=index,
                                   timeout=180_000, polling=500)
        except Exception as error:  # playwright's TimeoutError: say what the output area holds instead
            page.screenshot(path=str(lab[2] / "dashboard-01_ancre.png"))
            raise AssertionError(f"the dashboard was not drawn: {page.evaluate(DASHBOARD_FIGURES, index)}, "
                                 f"tracebacks {tracebacks(page)}") from error
        assert not tracebacks(page)
