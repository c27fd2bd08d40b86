"""App responsiveness in a real browser: click Train -> first loss point, chart refreshes per second while
training, and how fast a click (Pause) answers during training.

Starts `streamlit run app/server.py` (the app, warmed up) on a loopback port, drives Debian's Chromium with Playwright,
and compares the time to the first loss point with a plain PyTorch reference measured in the same run
(build the same model and data and compute the first loss in-process: the floor any UI adds to).
Targets (issue 8): first loss point < 2 s for the MLP presets on CPU; >= 2 chart refreshes per second.

    python benchmarks/app_responsiveness.py [--preset NAME] [--json OUT] [--screenshot PNG]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import explorer

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PRESET = "tau-fig1-1/sqrt(L)"  # the MLP-ResNet preset (depth 10, width 128, 300 SGD steps on digits)

# JavaScript run in the page: the loss chart's number of points (plotly keeps its data on the div).
LOSS_POINTS = """() => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = gd.layout && gd.layout.title && gd.layout.title.text;
    if (title && title.includes(': loss<') && gd.data && gd.data[0] && gd.data[0].x) return gd.data[0].x.length;
  }
  return 0;
}"""
CHART_TITLES = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => (g.layout.title || {}).text || '')"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(home: str | os.PathLike, port: int | None = None, timeout: float = 60.0, entry: str = "server.py"):
    """Run the app on 127.0.0.1:PORT (its own EXPLORER_HOME) until the block ends; yields the base URL.
    `entry`: app/server.py (warmed up, as the README starts it) or app/streamlit_app.py (imports at first visit)."""
    port = port or free_port()
    env = {**os.environ, "EXPLORER_HOME": str(home)}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / entry), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    with running(server, f"{url}/_stcore/health", timeout, "the app"):
        yield url


@contextlib.contextmanager
def running(server: subprocess.Popen, ready_url: str, timeout: float, what: str):
    """Wait until `ready_url` answers 200 (RuntimeError with the server's output if it exits or takes longer
    than `timeout`), then hold the block; the server is terminated when the block ends."""
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                output = server.stdout.read().decode(errors="replace") if server.poll() is not None else ""
                raise RuntimeError(f"{what} did not start on {ready_url}: {output[-2000:]}")
            time.sleep(0.25)
        yield
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def browser(profile: str | os.PathLike, width: int = 1400, height: int = 2400):
    """A headless Chromium page (Playwright, the system's Chromium)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                       args=CHROMIUM_ARGS, viewport={"width": width, "height": height})
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def train_page_url(base: str, spec: explorer.ExperimentSpec) -> str:
    return f"{base}/?{spec.to_query()}"  # Train is the default page: it lives at the root


def wait_ready(page, timeout_ms: int = 60_000) -> None:
    """Wait until the Train page has run: one Train button (a rerun briefly shows the old one too) and no
    "running" indicator."""
    page.wait_for_function("() => document.querySelectorAll('.st-key-train-start button').length === 1 && "
                           "!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms)


def exceptions(page) -> int:
    return page.locator('[data-testid="stException"]').count()


def measure(page, base: str, spec: explorer.ExperimentSpec, sample_s: float = 3.0, think_s: float = 0.0) -> dict:
    """Open the Train page with `spec`, wait `think_s` (a user reading the page; the app warms up the
    dataset and torch meanwhile), click Train and time what the user sees."""
    page.goto(train_page_url(base, spec))
    wait_ready(page)
    time.sleep(think_s)
    start = time.perf_counter()
    page.locator(".st-key-train-start button").click()
    page.wait_for_function(f"() => ({LOSS_POINTS})() > 0", timeout=60_000, polling=20)
    first_point = time.perf_counter() - start

    # Refreshes: how often the loss chart's content changes while the run trains.
    changes, last, t0 = 0, page.evaluate(LOSS_POINTS), time.perf_counter()
    while time.perf_counter() - t0 < sample_s and page.get_by_text("Finished", exact=False).count() == 0:
        now = page.evaluate(LOSS_POINTS)
        if now != last:
            changes, last = changes + 1, now
        time.sleep(0.02)
    refreshes = changes / (time.perf_counter() - t0)

    # Responsiveness: a click during training (Pause) until the page shows the run paused, then Resume.
    pause_answer = None
    if page.locator(".st-key-train-pause button").is_enabled():
        click = time.perf_counter()
        page.locator(".st-key-train-pause button").click()
        page.locator(".st-key-train-resume button").wait_for(timeout=30_000)
        pause_answer = time.perf_counter() - click
        page.locator(".st-key-train-resume button").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
    page.wait_for_function(f"() => ({CHART_TITLES})().some(t => t.includes('Shortcut coefficients'))", timeout=30_000)
    return {"first_loss_point_s": first_point, "chart_refreshes_per_s": refreshes, "pause_click_answer_s": pause_answer,
            "chart_titles": page.evaluate(CHART_TITLES), "exceptions": exceptions(page)}


def plain_first_loss(spec: explorer.ExperimentSpec) -> float:
    """Plain PyTorch reference: build the same model and data and compute the first loss, in-process."""
    import torch

    from explorer.train import loss_function

    start = time.perf_counter()
    model, data = explorer.build(spec)
    with torch.no_grad():
        float(loss_function(data.task)(model(data.x_train[: spec.train.batch_size]), data.y_train[: spec.train.batch_size]))
    return time.perf_counter() - start


def main() -> None:
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=PRESET)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    spec = explorer.preset(args.preset).with_values({"train.steps": args.steps, "train.log_every": 10})
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "home") as base, browser(Path(tmp) / "profile") as page:
        cold = measure(page, base, spec, think_s=0.0)  # a fresh server, Train clicked as soon as the page is ready
        result = measure(page, base, spec, think_s=3.0)  # the same server, after 3 s on the page
        if args.screenshot:
            page.screenshot(path=str(args.screenshot))
    plain_cold, plain_warm = plain_first_loss(spec), plain_first_loss(spec)  # the first call loads the data
    result.update(preset=args.preset, cold_first_loss_point_s=cold["first_loss_point_s"],
                  plain_cold_s=plain_cold, plain_warm_s=plain_warm,
                  cold_vs_plain=cold["first_loss_point_s"] / plain_cold,
                  warm_vs_plain=result["first_loss_point_s"] / plain_warm)
    print(f"click Train -> first loss point (target < 2 s): {cold['first_loss_point_s']:.2f} s clicked at once on a "
          f"fresh server ({result['cold_vs_plain']:.1f}x plain PyTorch's cold first loss, {plain_cold:.2f} s); "
          f"{result['first_loss_point_s']:.2f} s after 3 s on the page ({result['warm_vs_plain']:.0f}x its warm "
          f"first loss, {plain_warm * 1000:.0f} ms)")
    print(f"chart refreshes while training: {result['chart_refreshes_per_s']:.2f}/s (target >= 2); "
          f"Pause answered in {result['pause_click_answer_s'] or float('nan'):.2f} s (nan: the run ended first); "
          f"exceptions on page: {result['exceptions'] + cold['exceptions']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
