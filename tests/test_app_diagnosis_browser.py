"""The diagnosis in a real browser (Streamlit + Playwright + Debian's Chromium): a tau run that diverges shows on
the Train page, and on Compare, why: three short lines with the numbers measured on its model and the tau paper's
section, readable at 1280x720 (a projector), then the paragraph and the table folded below, the table's verdict
column in view and no cell clipped.

Two 1280x720 screenshots of the Train page are saved into the test's folder, and into EXPLORER_SCREENSHOT_DIR when
set (the README's assets/screenshots/ come from there): diagnosis-three-lines.png (the lines, the detail folded)
and train-diagnosis.png (the detail open).
CI (CI=true) must have Chromium and Playwright: there a missing one fails the test instead of skipping it.
"""

import os
import shutil
from pathlib import Path

import explorer
from browsers import browsing, skip_without_browser

MISSING = skip_without_browser()

# the presets' lr 0.01 at depth 30: tau = L^-1/4 diverges within a few steps
SPEC = explorer.preset("tau-fig1-1/L^0.25").with_values({"model.depth": 30})
WIDTH, HEIGHT = 1280, 720

# what of an element is outside the viewport, and which of its cells clip their text
OUTSIDE = f"""e => {{ const r = e.getBoundingClientRect();
    return {{top: r.top, bottom: r.bottom, left: r.left, right: r.right, outside: r.top < 0 || r.left < 0
             || r.bottom > {HEIGHT} || r.right > {WIDTH}}}; }}"""
CLIPPED = """t => Array.from(t.querySelectorAll('th, td')).filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.innerText)"""


def expected() -> tuple[list[str], list[str]]:
    """The three lines the page must show, and numbers the paragraph must quote, from the same model (built with
    the run's seed): the tau rule's lines do not depend on the step it diverged at."""
    diagnosis = explorer.diagnose(SPEC, jacobian=False)
    lines = diagnosis.summary_lines({"status": "diverged", "diverged_at": 1, "history": []})
    growth = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    tau = diagnosis.quantity("tau vs 1/sqrt(L)").value
    return lines, [f"the stream grew {growth.measured}", f"tau = {tau:.2f} at depth 30",
                   f"1/sqrt(L) = {30 ** -0.5:.2f}", "Theorem 4, Sec. 3.3", "lr 0.01", "lr 0.001", "depth 50-60"]


def shown_lines(element) -> list[str]:
    """An element's text line by line, as written (Streamlit's markdown shows "<=" as a single sign)."""
    return [line.strip().replace("\u2264", "<=").replace("\u2265", ">=") for line in element.inner_text().split("\n")]


def save(page, name: str, tmp_path: Path) -> None:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("EXPLORER_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["EXPLORER_SCREENSHOT_DIR"]) / name)


def test_a_diverging_tau_run_shows_its_diagnosis_on_train_and_on_compare(tmp_path):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    lines, numbers = expected()
    with browsing.serve(tmp_path / "home") as base, browsing.browser(tmp_path / "profile", WIDTH, HEIGHT) as page:
        page.goto(browsing.train_page_url(base, SPEC))
        browsing.wait_ready(page)
        page.locator(".st-key-train-start button").click()
        warning = page.locator("[data-testid='stAlert']").filter(has_text="Diverged at step").first
        warning.wait_for(timeout=300_000)
        page.wait_for_function(f"() => {browsing.NOT_RUNNING}", timeout=60_000)
        (run,) = explorer.RunStore(tmp_path / "home").list()
        assert run["status"] == "diverged" and f"Diverged at step {run['diverged_at']}" in warning.inner_text()

        # the three lines, each a line of its own, all in the 1280x720 viewport with the detail folded below
        warning.evaluate("e => e.scrollIntoView({block: 'center'})")
        shown = shown_lines(warning)
        assert shown[-3:] == lines, (shown, lines)
        box = warning.evaluate(OUTSIDE)
        assert not box["outside"], box
        expander = page.locator("[data-testid='stExpander']").filter(has_text="Diagnosis: why, in detail")
        assert expander.locator("summary").is_visible() and not expander.locator("table").is_visible()
        save(page, "diagnosis-three-lines.png", tmp_path)

        # the detail: the paragraph with every number, and the table, its verdict column first and in view
        expander.locator("summary").click()
        table = expander.locator("table")
        table.wait_for(timeout=30_000)
        markdown = expander.locator("[data-testid='stMarkdownContainer']")
        paragraph = markdown.filter(has_text="Try tau").first.inner_text()
        missing = [text for text in numbers if text not in paragraph]
        assert not missing, (missing, paragraph)
        header = table.locator("th").filter(has_text="verdict").first
        assert table.locator("thead th:not(:empty)").first.inner_text().strip() == "verdict"
        # scrolled to the middle of the screen, as a reader brings it into view ("if needed" may stop with the
        # header's last pixel row on the viewport's edge)
        header.evaluate("e => e.scrollIntoView({block: 'center'})")
        assert not header.evaluate(OUTSIDE)["outside"], header.evaluate(OUTSIDE)
        assert table.evaluate(CLIPPED) == []  # every cell wraps its text
        assert table.evaluate("t => t.getBoundingClientRect().right") <= WIDTH
        cells = table.inner_text()
        assert "n/a" not in cells and "differs: tau = " in cells and "not applicable: " in cells
        expander.evaluate("e => e.scrollIntoView({block: 'start'})")  # the paragraph, then the table
        save(page, "train-diagnosis.png", tmp_path)
        assert browsing.exceptions(page) == 0

        # Compare: a fresh page (a new session), every run in the store listed; the diverged one is chosen
        page.goto(f"{base}/compare")
        page.locator(".st-key-compare-all-runs label").first.wait_for(timeout=60_000)
        page.locator(".st-key-compare-all-runs label").first.click()
        page.get_by_text("Diverged (marked x on the curves").first.wait_for(timeout=120_000)
        caption = page.locator("[data-testid='stCaptionContainer']").filter(has_text="Theorem 4")
        caption.first.wait_for(timeout=120_000)
        shown = shown_lines(caption.first)
        assert shown[-3:] == lines, (shown, lines)
        assert browsing.exceptions(page) == 0
