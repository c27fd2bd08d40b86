"""The quickstart as a student runs it: Run All in a real JupyterLab (Chromium), solutions included, and then
its widgets still train.

A solution that replaced a name the notebook built (a slider, a button) would leave its widget dead after Run
All, with no error shown; every solution runs inside a function of its own so that it cannot. This test does
what the student does in the session's JupyterLab (conftest's `notebook_lab`): runs every cell top to bottom
with JupyterLab's own command, then checks the quickstart's widget section as tests/test_notebooks_browser.py
checks every notebook's (its CASES entry: the depth slider to 15 and Train redraw the figure, replaced, with
new data), and then the design board (explorer.design_widget): it toggles the shortcut 0:4, presses the board's
Train and waits for the loss curve and the table; then adds 0:3 and trains again: the figure shows the new
design beside the best one and the table keeps both designs. No output may show a Traceback.
"""

import json

from test_notebooks_browser import QUICKSTART, WIDGET_FIGURES, check_widget_change, opened, tracebacks

ALL_RUN = """() => { const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return cells.length > 0 && cells.every(c => c.model.executionCount !== null)
    && !!status && status.getAttribute('data-status') === 'idle'; }"""


def output_text(page) -> str:
    return "\n".join(page.locator(".widget-output").all_inner_texts())


def wait_for_design(page, design: str, timeout_ms: int) -> list[dict]:
    """Wait until the board's Output shows the figure of `design` and the table; return the board's figures."""
    js = (f"() => ({WIDGET_FIGURES})().some(g => g.title.startsWith({json.dumps(design + ':')}))"
          " && Array.from(document.querySelectorAll('.widget-output')).some(o => o.innerText.includes("
          "'designs tried'))")
    try:
        page.wait_for_function(js, timeout=timeout_ms, polling=250)
    except Exception as error:  # playwright's TimeoutError: say what the Output shows instead
        raise AssertionError(f"the board never showed {design!r}: {page.evaluate(WIDGET_FIGURES)}, "
                             f"{output_text(page)[-500:]!r}, tracebacks {tracebacks(page)}") from error
    return [figure for figure in page.evaluate(WIDGET_FIGURES) if figure["title"].startswith("0:")]


def test_after_run_all_the_quickstart_widgets_still_train(notebook_lab, tmp_path):
    with opened(notebook_lab, QUICKSTART.notebook) as page:
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }")
        try:
            page.wait_for_function(ALL_RUN, timeout=420_000, polling=500)
        except Exception as error:  # playwright's TimeoutError: say what is left
            raise AssertionError(f"Run All did not finish; tracebacks {tracebacks(page)}") from error
        assert not tracebacks(page), tracebacks(page)

        check_widget_change(page, QUICKSTART, tmp_path)

        board = page.locator(".widget-vbox", has=page.locator("button.widget-toggle-button", has_text="0:4")).last
        board.locator("button.widget-toggle-button", has_text="0:4").click(timeout=60_000)
        page.get_by_text("design: 0:4 (1 of at most 2").wait_for(timeout=30_000)
        board.locator("button.widget-button", has_text="Train").click()
        first = wait_for_design(page, "0:4", timeout_ms=120_000)
        assert len(first) == 1 and "reached 1e-06 at step" in first[0]["title"] and len(first[0]["names"]) == 1, first

        board.locator("button.widget-toggle-button", has_text="0:3").click()
        page.get_by_text("design: 0:3,0:4 (2 of at most 2").wait_for(timeout=30_000)
        board.locator("button.widget-button", has_text="Train").click()
        second = wait_for_design(page, "0:3,0:4", timeout_ms=120_000)
        page.screenshot(path=str(tmp_path / "quickstart-after-run-all.png"))
        assert len(second) == 1, "the board's figure is replaced, not appended"
        assert set(second[0]["names"]) == {"0:3,0:4", "0:4"}, second  # the new design beside the best one
        table = output_text(page).split("designs tried, best first:")[-1].splitlines()
        ranked = [line.split()[1] for line in table if line.strip()[:1].isdigit()]
        assert ranked == ["0:3,0:4", "0:4"], table  # the session's table keeps both, the faster first
        assert not tracebacks(page), tracebacks(page)
