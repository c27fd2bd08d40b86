"""The diagnosis in a real browser (Streamlit + Playwright + Debian's Chromium): a tau run that diverges shows on
the Train page, and on Compare, why, with the numbers measured on its model and the tau paper's section.

A 1280x720 screenshot of the Train page with the diagnosis open is saved into the test's folder, and into
EXPLORER_SCREENSHOT_DIR when set (the README's assets/screenshots/train-diagnosis.png comes from there).
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


def expected_numbers() -> list[str]:
    """What the explanation must quote, measured here on the same model (built with the run's seed)."""
    diagnosis = explorer.diagnose(SPEC, jacobian=False)
    growth = diagnosis.quantity("stream growth ||h_n|| / ||h_0|| at init")
    tau = diagnosis.quantity("tau vs 1/sqrt(L)").value
    return [f"the stream grew {growth.measured}", f"tau = {tau:.2f} at depth 30", f"1/sqrt(L) = {30 ** -0.5:.2f}",
            "Theorem 4, Sec. 3.3", "lr 0.01", "lr 0.001"]


def test_a_diverging_tau_run_shows_its_diagnosis_on_train_and_on_compare(tmp_path):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    numbers = expected_numbers()
    with browsing.serve(tmp_path / "home") as base, browsing.browser(tmp_path / "profile", 1280, 720) as page:
        page.goto(browsing.train_page_url(base, SPEC))
        browsing.wait_ready(page)
        page.locator(".st-key-train-start button").click()
        warning = page.locator("[data-testid='stAlert']").filter(has_text="Diverged at step")
        warning.first.wait_for(timeout=300_000)
        page.wait_for_function(f"() => {browsing.NOT_RUNNING}", timeout=60_000)
        shown = warning.first.inner_text()
        missing = [text for text in numbers if text not in shown]
        assert not missing, (missing, shown)
        (run,) = explorer.RunStore(tmp_path / "home").list()
        assert run["status"] == "diverged" and f"Diverged at step {run['diverged_at']}" in shown

        # the table of measured against predicted, opened, and the page as a reader sees it
        expander = page.locator("[data-testid='stExpander']").filter(has_text="Diagnosis")
        expander.locator("summary").click()
        table = expander.locator("[data-testid='stDataFrame']")
        table.wait_for(timeout=30_000)
        warning.first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -60)")  # the status bar above the warning stays in the picture
        shot = tmp_path / "train-diagnosis.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("EXPLORER_SCREENSHOT_DIR"):
            shutil.copy(shot, Path(os.environ["EXPLORER_SCREENSHOT_DIR"]) / "train-diagnosis.png")
        assert browsing.exceptions(page) == 0

        # Compare: a fresh page (a new session), every run in the store listed; the diverged one is chosen
        page.goto(f"{base}/compare")
        page.locator(".st-key-compare-all-runs label").first.wait_for(timeout=60_000)
        page.locator(".st-key-compare-all-runs label").first.click()
        page.get_by_text("Diverged (marked x on the curves").first.wait_for(timeout=120_000)
        caption = page.locator("[data-testid='stCaptionContainer']").filter(has_text="Theorem 4")
        caption.first.wait_for(timeout=120_000)
        shown = caption.first.inner_text()
        missing = [text for text in numbers if text not in shown]
        assert not missing, (missing, shown)
        assert browsing.exceptions(page) == 0
