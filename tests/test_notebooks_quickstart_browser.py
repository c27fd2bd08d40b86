"""The quickstart as a student runs it: Run All in a real JupyterLab (Chromium), solutions included, and then
its widgets still train.

A solution that replaced a name the notebook built (a slider, a button) would leave its widget dead after Run
All, with no error shown; every solution runs inside a function of its own so that it cannot. This test does
what the student does: runs every cell top to bottom with JupyterLab's own command, then changes the depth
slider and presses Train (the figure must show the new depth), and toggles a shortcut on the design board and
presses its Train (the board must draw that design), with no Traceback anywhere.
"""

import shutil
from pathlib import Path

import pytest
from test_notebooks_browser import MISSING, browsing, jupyterlab, opened, set_widget, tracebacks, wait_until_shown
from test_notebooks_widget_browser import wait_for_design

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "00_quickstart"

ALL_RUN = """() => { const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return cells.length > 0 && cells.every(c => c.model.executionCount !== null)
    && !!status && status.getAttribute('data-status') === 'idle'; }"""


@pytest.fixture
def lab(tmp_path):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the JupyterLab test"
    shutil.copy(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb", tmp_path)
    with jupyterlab(tmp_path) as base, browsing.browser(tmp_path / ".profile", height=1400) as first_page:
        yield base, first_page.context


def test_after_run_all_the_quickstart_widgets_still_train(lab, tmp_path):
    base, context = lab
    with opened(base, context, NOTEBOOK) as page:
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }")
        try:
            page.wait_for_function(ALL_RUN, timeout=420_000, polling=1000)
        except Exception as error:  # playwright's TimeoutError: say what is left
            raise AssertionError(f"Run All did not finish; tracebacks {tracebacks(page)}") from error
        assert not tracebacks(page), tracebacks(page)

        set_widget(page, "depth", "15")
        page.locator("button.widget-button", has_text="Train").first.click()
        wait_until_shown(page, "depth 15", 1, timeout_ms=120_000)

        page.locator("button.widget-toggle-button", has_text="0:4").click(timeout=60_000)
        page.get_by_text("design: 0:4 (1 of at most 2").wait_for(timeout=30_000)
        board = page.locator(".widget-vbox", has=page.locator("button.widget-toggle-button", has_text="0:4")).last
        board.locator("button.widget-button", has_text="Train").click()
        wait_for_design(page, "0:4", timeout_ms=120_000)
        page.screenshot(path=str(tmp_path / "quickstart-after-run-all.png"))
        assert not tracebacks(page), tracebacks(page)
