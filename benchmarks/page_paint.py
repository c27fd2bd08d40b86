"""Time to first paint of the app's pages on a fresh server, in Chromium.

For each page: start a new server (nothing cached; `app/server.py` imports the libraries before it answers,
and that start-up time is printed too), open the page, and time until its first interactive widget is
visible (Train: the Train button; Theory: a slider) and until the script has finished (no "running"
indicator). Targets: Theory < 2 s, Train < 3 s. The load average is printed with each page.

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


def first_paint(page_name: str, entry: str = "server.py") -> dict[str, float]:
    path, selector = PAGES[page_name]
    with tempfile.TemporaryDirectory() as tmp, browsing.browser(Path(tmp) / "profile", height=1400) as page:
        launch = time.perf_counter()
        with browsing.serve(Path(tmp) / "home", entry=entry) as base:
            started = time.perf_counter() - launch  # until the server answers (after app/server.py's warm-up)
            start = time.perf_counter()
            page.goto(f"{base}/{path}")
            page.locator(selector).first.wait_for(state="visible", timeout=120_000)
            widget = time.perf_counter() - start
            page.wait_for_function(browsing.IDLE, timeout=120_000)
            done = time.perf_counter() - start
            return {"server_start_s": started, "first_widget_s": widget, "script_done_s": done,
                    "exceptions": browsing.exceptions(page)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--entry", action="append", choices=("server.py", "streamlit_app.py"),
                        help="the app's entry point; give both to compare them in one run (interleaved: the load moves)")
    args = parser.parse_args()
    entries = args.entry or ["server.py"]
    for name in PAGES:
        runs = {entry: [] for entry in entries}
        for _ in range(args.repeat):  # entries alternate, so both see the same load
            for entry in entries:
                runs[entry].append(first_paint(name, entry))
        load = " ".join(open("/proc/loadavg").read().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"
        for entry, rows in runs.items():
            widget = [r["first_widget_s"] for r in rows]
            done = [r["script_done_s"] for r in rows]
            start = [r["server_start_s"] for r in rows]
            print(f"{name} ({entry}): first widget {', '.join(f'{t:.2f}' for t in widget)} s "
                  f"(median {statistics.median(widget):.2f}); script done {', '.join(f'{t:.2f}' for t in done)} s; "
                  f"server start {', '.join(f'{t:.1f}' for t in start)} s; "
                  f"exceptions {sum(r['exceptions'] for r in rows)}; load average {load}", flush=True)


if __name__ == "__main__":
    main()
