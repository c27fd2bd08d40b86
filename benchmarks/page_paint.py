"""Time to first paint of the app's pages on a fresh server, in Chromium.

For each page: start a new server (nothing cached), open the page, and time until its first interactive
widget is visible (Train: the Train button; Theory: a slider) and until the script has finished (no
"running" indicator). Targets (issue 18): Theory < 2 s, Train < 3 s.

    python benchmarks/page_paint.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import app_responsiveness as browsing

PAGES = {"train": ("", ".st-key-train-start button"), "theory": ("theory", '[data-testid="stSlider"]')}
IDLE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def first_paint(page_name: str) -> dict[str, float]:
    path, selector = PAGES[page_name]
    with tempfile.TemporaryDirectory() as tmp, browsing.serve(Path(tmp) / "home") as base, \
            browsing.browser(Path(tmp) / "profile", height=1400) as page:
        start = time.perf_counter()
        page.goto(f"{base}/{path}")
        page.locator(selector).first.wait_for(state="visible", timeout=120_000)
        widget = time.perf_counter() - start
        page.wait_for_function(IDLE, timeout=120_000)
        done = time.perf_counter() - start
        return {"first_widget_s": widget, "script_done_s": done, "exceptions": browsing.exceptions(page)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    for name in PAGES:
        runs = [first_paint(name) for _ in range(args.repeat)]
        widget = [r["first_widget_s"] for r in runs]
        done = [r["script_done_s"] for r in runs]
        print(f"{name}: first widget {', '.join(f'{t:.2f}' for t in widget)} s (median {statistics.median(widget):.2f}); "
              f"script done {', '.join(f'{t:.2f}' for t in done)} s; exceptions {sum(r['exceptions'] for r in runs)}")

if __name__ == "__main__":
    main()
