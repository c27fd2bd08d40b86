"""A class in real browsers (Streamlit + Playwright + Debian's Chromium): one server with EXPLORER_ADMIN_TOKEN, a
teacher and two students, each in a browser context of their own (their own cookies: three browsers).

The teacher starts a class on /classroom and pushes the challenge design 0:4 with a line; both students see the
banner, set display names in the Design challenge, and train a challenge design (one by the banner's link, one by a
link of their own); both names reach the teacher's board, and the CSV the page downloads holds both runs. A
1280x720 screenshot of the teacher's page goes to the test's folder, and to EXPLORER_SCREENSHOT_DIR when set.
CI (CI=true) must have Chromium and Playwright.
"""

import csv
import io
import json
import os
import shutil
from pathlib import Path

from browsers import browsing, skip_without_browser
from explorer import challenge

MISSING = skip_without_browser()
TOKEN = "teach-3x3"
LINE = "Train the papers' design first"
STUDENTS = {"Ada <b>L</b>": None, "=Bob": "0:3,0:4"}  # None: by the banner's link (0:4)
IDLE = f"() => {browsing.NOT_RUNNING} && !document.querySelector('[data-stale=\"true\"]')"


def settle(page, until: str | None = None, timeout_ms: int = 60_000) -> None:
    if until:
        page.wait_for_function(until, timeout=timeout_ms, polling=100)
    page.wait_for_function(IDLE, timeout=timeout_ms)
    assert browsing.exceptions(page) == 0, page.locator('[data-testid="stException"]').first.inner_text()[:500]


def fill(page, key: str, text: str) -> None:
    field = page.locator(f".st-key-{key} input")
    field.fill(text)
    field.press("Enter")
    settle(page)


def test_a_teacher_and_two_students(tmp_path):
    assert not MISSING, f"CI needs {' and '.join(MISSING)} for the browser test"
    from playwright.sync_api import sync_playwright

    with browsing.serve(tmp_path / "home", env={"EXPLORER_ADMIN_TOKEN": TOKEN}) as base, sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browsing.CHROMIUM, headless=True, args=browsing.CHROMIUM_ARGS)
        try:
            teacher = chromium.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True).new_page()
            teacher.goto(f"{base}/classroom?token={TOKEN}")
            teacher.locator(".st-key-class-start button").wait_for(timeout=120_000)
            teacher.locator(".st-key-class-start button").click()
            settle(teacher, "() => !!document.querySelector('.st-key-class-push')")
            teacher.get_by_text("a challenge design", exact=True).click()
            settle(teacher, "() => !!document.querySelector('.st-key-class-link-design')")
            fill(teacher, "class-link-design", challenge.REFERENCE_DESIGN)
            fill(teacher, "class-link-message", LINE)
            teacher.locator(".st-key-class-push button").click()
            settle(teacher, "() => document.body.innerText.includes('Showing: the challenge design 0:4')")

            students = []
            for name, design in STUDENTS.items():
                page = chromium.new_context(viewport={"width": 1280, "height": 1600}).new_page()
                page.goto(base)
                browsing.wait_ready(page, timeout_ms=120_000)
                banner = page.locator(".st-key-class-banner")
                assert LINE in banner.inner_text()
                if design is None:
                    banner.locator("a").first.click()  # the pushed link: Train set up with the design
                else:
                    page.goto(browsing.train_page_url(base, challenge.challenge_spec(design)))
                wanted = challenge.REFERENCE_DESIGN if design is None else design
                settle(page, f"() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(g => "
                             f"((g.layout.title || {{}}).text || '') === 'Design: {wanted}')")
                browsing.wait_ready(page)
                page.get_by_text("Design challenge", exact=True).click()
                fill(page, "class-name", name)
                students.append(page)
            for page in students:
                page.locator(".st-key-train-start button").click()
            for page in students:
                page.get_by_text("Finished", exact=False).first.wait_for(timeout=120_000)
                settle(page)

            board = "document.querySelector('.st-key-class-board-teacher')"  # its grid's cells, as text
            cells = f"Array.from({board}.querySelectorAll('td'))"
            teacher.wait_for_function(f"() => {board} && {json.dumps(list(STUDENTS))}.every(name => "
                                      f"{cells}.some(td => td.textContent === name))",
                                      timeout=60_000)  # the page redraws its board every few seconds
            teacher.screenshot(path=str(tmp_path / "class.png"))
            if os.environ.get("EXPLORER_SCREENSHOT_DIR"):
                shutil.copy(tmp_path / "class.png", Path(os.environ["EXPLORER_SCREENSHOT_DIR"]) / "class.png")
            with teacher.expect_download() as download:
                teacher.locator(".st-key-class-csv button").click()
            rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
            assert sorted(row["name"] for row in rows) == sorted(["Ada <b>L</b>", "'=Bob"])  # a formula is text
            assert {row["design"] for row in rows} == {challenge.REFERENCE_DESIGN, "0:3,0:4"}
            assert all(row["scored"] == "yes" and int(row["steps_to_target"]) > 0 for row in rows)
            assert browsing.exceptions(teacher) == 0
        finally:
            chromium.close()
