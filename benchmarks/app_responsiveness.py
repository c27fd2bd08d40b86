"""The app in a real browser: responsiveness, training speed against the command line, memory, many sessions.

Starts `streamlit run app/server.py` (the app, warmed up, as the README starts it) on a loopback port, drives
Debian's Chromium with Playwright, and reports, all measured in the same run:
- click Train -> first loss point on a fresh server (clicked as soon as the page is ready) and after 3 s on
  the page, against plain PyTorch's first loss in-process; chart refreshes per second while one job and
  while two jobs train (two tabs); how fast a Pause click answers;
- Train-page steps/s (the figure the page shows) against `explorer train` steps/s for the same presets
  (target: >= 0.8x), with the command line at its default threads and at 1 thread, and the same job
  run by the app's job queue in a worker with no server and no browser (the page's ceiling);
- the server's resident memory after its first run, then after N more runs and every paper's claims
  (fast mode) run once from the Papers page (target: < 1.5x);
- a grid launched from the Compare page until every run is done, against the same jobs with no server or browser;
- four tabs training at once on a server with EXPLORER_MAX_JOBS=2: two train, two wait with their place.

    python benchmarks/app_responsiveness.py [--runs 50] [--repeats 3] [--json OUT] [--screenshot PNG] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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
# The tabs of one browser stand for the browsers of several users: none may be throttled as a background tab.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                 "--disable-backgrounding-occluded-windows"]
PRESET = "tau-fig1-1/sqrt(L)"  # the MLP-ResNet preset (depth 10, width 128, 300 SGD steps on digits)

# JavaScript run in the page: the loss chart's number of points (plotly keeps its data on the div).
LOSS_POINTS = """() => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = gd.layout && gd.layout.title && gd.layout.title.text;
    if (title && title.endsWith(': loss') && gd.data && gd.data[0] && gd.data[0].x) return gd.data[0].x.length;
  }
  return 0;
}"""
# JavaScript: no script run under way (Streamlit's "running" indicator is absent).
NOT_RUNNING = "!document.querySelector('[data-testid=\"stStatusWidget\"]')"
IDLE = f"() => {NOT_RUNNING}"
# JavaScript: no script run under way and no element marked stale (from the moment a rerun is requested until the
# run has redrawn or dropped it): the page shows what its last run drew, and nothing else.
SETTLED = f"() => {NOT_RUNNING} && !document.querySelector('[data-stale=\"true\"]')"
PAUSE = ".st-key-train-pause button:has-text('Pause')"  # Pause and Resume are one button (one key): told by its label
RESUME = ".st-key-train-pause button:has-text('Resume')"
# JavaScript: click Pause if it is enabled; whether it was clicked.
PRESS_PAUSE = """() => {
  const button = document.querySelector('.st-key-train-pause button');
  if (!button || button.disabled || !button.innerText.includes('Pause')) return false;
  button.click();
  return true;
}"""
CHART_TITLES = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => (g.layout.title || {}).text || '')"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server(str):
    """The app's base URL, with the server's process id (`pid`) for reading its memory."""

    pid: int


@contextlib.contextmanager
def serve(home: str | os.PathLike, port: int | None = None, timeout: float = 60.0, env: dict | None = None,
          entry: str = "server.py"):
    """Run the app on 127.0.0.1:PORT (its own EXPLORER_HOME, `env` added) until the block ends; yields its
    base URL (a Server: a str with the server's pid). `entry`: app/server.py (warmed up, as the README starts
    it) or app/streamlit_app.py (imports at first visit)."""
    port = port or free_port()
    env = {**os.environ, "EXPLORER_HOME": str(home), **(env or {})}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / entry), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = Server(f"http://127.0.0.1:{port}")
    url.pid = server.pid
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


_PLAYWRIGHTS: list = []  # the Playwright instances `browser` has open in this process, the newest last


@contextlib.contextmanager
def browser(profile: str | os.PathLike, width: int = 1400, height: int = 2400):
    """A headless Chromium page (Playwright, the system's Chromium). Inside another `browser` (a test fixture that
    keeps one open for a whole session, say) it launches from the Playwright already running: a thread may run
    only one Playwright of the sync API at a time."""
    from playwright.sync_api import sync_playwright

    with contextlib.ExitStack() as stack:
        if _PLAYWRIGHTS:
            p = _PLAYWRIGHTS[-1]
        else:
            p = stack.enter_context(sync_playwright())
            _PLAYWRIGHTS.append(p)
            stack.callback(_PLAYWRIGHTS.remove, p)
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
    page.wait_for_function(f"() => document.querySelectorAll('.st-key-train-start button').length === 1 && "
                           f"{NOT_RUNNING}", timeout=timeout_ms)


def choose(page, key: str, option: str, timeout_ms: int = 60_000) -> None:
    """Pick `option` in the selectbox or multiselect with widget key `key`: open it, type to filter once its list
    is drawn, and click the first option whose text holds `option` once the list shows it. On a loaded machine a
    click can land while a rerun redraws the widget and open nothing (the text typed then goes nowhere), and an
    Enter pressed before the list is drawn picks nothing: so the widget is clicked again until its list shows."""
    from playwright.sync_api import TimeoutError as Timeout

    listbox = page.get_by_role("listbox").first
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        page.locator(f".st-key-{key}").click(timeout=timeout_ms)  # a click on an open list leaves it open
        try:
            listbox.wait_for(timeout=5_000)
            break
        except Timeout:
            if time.monotonic() > deadline:
                raise
    page.keyboard.type(option)
    page.get_by_role("option", name=option).first.click(timeout=timeout_ms)


def exceptions(page) -> int:
    return page.locator('[data-testid="stException"]').count()


def requests_elsewhere(page) -> list[str]:
    """A list that collects, from now on, the URLs `page` requests from any host but this machine's loopback
    (data:, blob:, file: and about: URLs have no host): the app and the static site ask nobody else."""
    elsewhere: list[str] = []
    page.on("request", lambda request: elsewhere.append(request.url)
            if urllib.parse.urlparse(request.url).hostname not in (None, "127.0.0.1") else None)
    return elsewhere


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
    click = time.perf_counter()
    # Pause is clicked only while it is enabled, checked and clicked in one step in the page: a short run may end
    # (and Pause go disabled) at any moment. A run that ends after the click shows no Resume button.
    if page.evaluate(PRESS_PAUSE):
        page.locator(RESUME).or_(page.get_by_text("Finished", exact=False)).first.wait_for(timeout=30_000)
        if page.locator(RESUME).count():
            pause_answer = time.perf_counter() - click
            page.locator(RESUME).click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=300_000)
    # The finished page: no script running and both charts drawn, read in the same check (the titles read a moment
    # later could miss a chart that a last rerun was redrawing).
    settled = page.wait_for_function(f"""() => {{ const titles = ({CHART_TITLES})();
        return {NOT_RUNNING} && titles.some(t => t.endsWith(': loss')) &&
               titles.some(t => t.includes('Shortcut coefficients')) && titles; }}""", timeout=30_000)
    return {"first_loss_point_s": first_point, "chart_refreshes_per_s": refreshes, "pause_click_answer_s": pause_answer,
            "chart_titles": settled.json_value(), "exceptions": exceptions(page)}


def plain_first_loss(spec: explorer.ExperimentSpec) -> float:
    """Plain PyTorch reference: build the same model and data and compute the first loss, in-process."""
    import torch

    from explorer.training import loss_function

    start = time.perf_counter()
    model, data = explorer.build(spec)
    with torch.no_grad():
        float(loss_function(data.task)(model(data.x_train[: spec.train.batch_size]), data.y_train[: spec.train.batch_size]))
    return time.perf_counter() - start


SPEED_PRESETS = {"ancre-fig2b-ancre": {}, "tau-fig1-1/sqrt(L)": {}, "skip-table1-skip": {"train.steps": 60}}
TOY = {"model.depth": 4, "train.steps": 20, "train.log_every": 5}  # the short runs of the memory test


def cli_steps_per_s(name: str, changes: dict, threads: int | None) -> float:
    """`explorer train --preset NAME` in a fresh process, recording into a scratch run store as the page does:
    steps / the trainer's wall time (its own figure)."""
    import tempfile

    env = {**os.environ, "EXPLORER_HOME": tempfile.mkdtemp(prefix="explorer-cli-"),
           **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    sets = [item for key, value in changes.items() for item in ("--set", f"{key}={value}")]
    done = subprocess.run([sys.executable, "-m", "explorer.cli", "train", "--preset", name, *sets, "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    summary = json.loads(done.stdout)
    return summary["steps"] / summary["wall_time"]


@contextlib.contextmanager
def queue_without_browser(workers: int):
    """The app's job queue (two slots, the server's default: its jobs get the threads the server would give
    them) on `workers` started worker processes, recording into a scratch run store as the pages do, with no
    server and no browser."""
    import tempfile

    if str(ROOT / "app") not in sys.path:
        sys.path.insert(0, str(ROOT / "app"))
    from explorer_app.jobs import JobQueue
    from explorer_app.workers import WorkerPool

    pool = WorkerPool(workers)
    try:
        pool.warm()
        pool.wait_started(workers, 120)
        yield JobQueue(2, store=explorer.RunStore(tempfile.mkdtemp(prefix="explorer-bench-")), pool=pool)
    finally:
        pool.close()


def worker_steps_per_s(name: str, changes: dict) -> float:
    """The same job the page submits (live probes included), run by the app's job queue in a worker process with
    no server and no browser: the page's ceiling on this machine. The worker's own steps/s figure."""
    with queue_without_browser(1) as queue:
        from explorer_app.jobs import wait  # (app/ is on the path now)

        job = queue.submit(explorer.preset(name).with_values(changes), "reference",
                           probes={"coefficients": {}, "norms": {}}, probe_every=50)
        return wait(job, 900).steps_per_second


def speed(page, base: str, name: str, changes: dict, repeats: int) -> dict:
    """Steps/s of preset `name` on the Train page, from `explorer train` (default threads and 1 thread) and in a
    worker with no browser. This machine's speed drifts by up to 1.5x within minutes (other VMs on the host):
    the page and the command line take turns `repeats` times, and the ratios are of medians (each repeat's
    own ratio is kept too). The page's own cost: the CPU seconds the server and the browser used per run, as
    cores on average from the click to the finished page (a 2-core machine that gives them these has only the
    rest for the training)."""
    import statistics

    pages, clis, clis_1, took, page_cores = [], [], [], [], []
    for _ in range(repeats):
        seen = train_on_page(page, base, explorer.preset(name).with_values(changes))
        pages.append(seen["page_steps_per_s"])
        took.append(seen["click_to_finished_s"])
        if seen["cpu_s"]:
            page_cores.append({group: seen["cpu_s"][group] / seen["click_to_settled_s"] for group in seen["cpu_s"]})
        clis.append(cli_steps_per_s(name, changes, None))
        clis_1.append(cli_steps_per_s(name, changes, 1))
    worker = worker_steps_per_s(name, changes)
    page_sps, cli, cli_1 = (statistics.median(values) for values in (pages, clis, clis_1))
    return {"page_steps_per_s": page_sps, "cli_steps_per_s": cli, "cli_1_thread_steps_per_s": cli_1,
            "worker_no_browser_steps_per_s": worker, "ratio": page_sps / max(cli, cli_1),
            "ratio_1_thread": page_sps / cli_1, "worker_ratio": worker / max(cli, cli_1),
            "ratios": [p / max(c, c1) for p, c, c1 in zip(pages, clis, clis_1)],
            "repeats": {"page": pages, "cli": clis, "cli_1_thread": clis_1},
            "click_to_finished_s": statistics.median(took),
            "cores_while_training": {group: statistics.median(run[group] for run in page_cores)
                                     for group in (page_cores[0] if page_cores else {})}}


def progress_text(page) -> str:
    bars = page.locator('[data-testid="stProgress"]')
    return bars.first.inner_text() if bars.count() else ""


def _processes() -> dict[int, tuple[int, str, float]]:
    """{pid: (parent pid, command line, CPU seconds used so far)} of every process /proc shows (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (name)": state, ppid, ... utime (14th), stime
        found[int(entry.name)] = (int(fields[1]), command, (int(fields[11]) + int(fields[12])) / tick)
    return found


def worker_pids(server_pid: int) -> list[int]:
    """The app server's job workers: the children of its fork server (explorer.parallel.process_context), or its
    own "spawn" children where it has none; not multiprocessing's resource tracker or the fork server itself."""
    processes = _processes()
    fork_servers = {pid for pid, (parent, command, _) in processes.items()
                    if parent == server_pid and "multiprocessing.forkserver" in command}
    return sorted(pid for pid, (parent, command, _) in processes.items()
                  if parent in fork_servers or (parent == server_pid and "spawn_main" in command))


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the app's server, its worker processes (every process under it:
    the fork server and its children too) and the browser (every Chromium process): read before and after a
    run, the differences are what the run cost each (`cpu_since`). A process that ended in between is not
    counted."""
    processes = _processes()
    under, grown = {server_pid}, True
    while grown:  # the server's children, the fork server's children, and so on down
        found = {pid for pid, (parent, _, _) in processes.items() if parent in under}
        grown = not found <= under
        under |= found
    used = {"server": 0.0, "workers": 0.0, "browser": 0.0}
    for pid, (_, command, seconds) in processes.items():
        program = command.split(" ")[0]  # the first word (Chromium's children rewrite their command line as one string)
        group = ("server" if pid == server_pid else "workers" if pid in under
                 else "browser" if Path(program).name.startswith(("chromium", "chrome")) else None)
        if group:
            used[group] += seconds
    return used


def cpu_since(server_pid: int, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds each group used since `before` (a `cpu_seconds` reading)."""
    return {group: seconds - before[group] for group, seconds in cpu_seconds(server_pid).items()}


def train_on_page(page, base: str, spec, timeout_ms: int = 900_000) -> dict:
    """Click Train for `spec` and wait until it finished: the steps/s the page shows, click -> finished, and (for
    a `Server` base) the CPU seconds the server, its workers and the browser used from the click to the
    finished page."""
    page.goto(train_page_url(base, spec))
    wait_ready(page)
    pid = getattr(base, "pid", None)
    before = cpu_seconds(pid) if pid else None
    start = time.perf_counter()
    page.locator(".st-key-train-start button").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=timeout_ms)
    took = time.perf_counter() - start
    # the page's rerun for the ended run: the live progress bar gives way to the final one
    page.wait_for_function(f"() => document.querySelector('[data-testid=\"stProgress\"]') && {NOT_RUNNING}",
                           timeout=30_000)
    settled = time.perf_counter() - start
    cpu = cpu_since(pid, before) if pid else None
    shown = re.search(r"([0-9.]+) steps/s", progress_text(page))
    return {"page_steps_per_s": float(shown.group(1)) if shown else None, "click_to_finished_s": took,
            "click_to_settled_s": settled, "cpu_s": cpu, "exceptions": exceptions(page)}


def refreshes_while_two_train(page, other, base: str, spec, sample_s: float = 4.0) -> float:
    """Chart refreshes per second on `page` while its run and another tab's run train at once."""
    for tab in (other, page):
        tab.goto(train_page_url(base, spec))
        wait_ready(tab)
        tab.locator(".st-key-train-start button").click()
    page.bring_to_front()  # the tab measured is the one the user looks at
    page.wait_for_function(f"() => ({LOSS_POINTS})() > 0", timeout=120_000, polling=20)
    changes, last, t0 = 0, page.evaluate(LOSS_POINTS), time.perf_counter()
    while time.perf_counter() - t0 < sample_s:
        now = page.evaluate(LOSS_POINTS)
        if now != last:
            changes, last = changes + 1, now
        time.sleep(0.02)
    rate = changes / (time.perf_counter() - t0)
    for tab in (page, other):
        tab.locator(".st-key-train-stop button").click()
    return rate


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` (the Streamlit server; its workers are other processes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


PAPER_TABS = {"ANCRe": "ancre", "DCA": "dca", "IDInit": "idinit", "τ stability": "tau", "Cutting the Skip": "skipless"}


def run_every_claim(page, base: str, timeout_ms: int = 1_800_000, tabs=tuple(PAPER_TABS)) -> int:
    """Run all claims of every paper (or of `tabs`), fast mode, from the Papers page, one tab after another;
    the exception boxes on the page at the end."""
    from urllib.parse import quote

    for tab in tabs:
        page.goto(f"{base}/papers?paper={quote(tab)}")
        button = f".st-key-papers-run-all-{PAPER_TABS[tab]} button"
        page.wait_for_function(f"() => document.querySelectorAll('{button}').length >= 1 && {NOT_RUNNING}",
                               timeout=120_000)
        page.locator(button).first.click(timeout=60_000)
        page.get_by_text("Done:", exact=False).first.wait_for(timeout=timeout_ms)
    return exceptions(page)


def memory(page, base: Server, runs: int, result: dict, report) -> None:
    """The server's memory after its first run, after `runs` more and after every claim (into `result`)."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values(TOY)
    train_on_page(page, base, spec)
    first = result["rss_after_first_run_mb"] = rss_mb(base.pid)
    for _ in range(runs):
        train_on_page(page, base, spec)
    after = result["rss_after_runs_mb"] = rss_mb(base.pid)
    result["runs"] = runs
    report(f"server memory: {first:.0f} MB after the first run, {after:.0f} MB after {runs} more: "
           f"{after / first:.2f}x (target < 1.5 with the claims below)")
    result["claim_page_exceptions"] = run_every_claim(page, base)
    time.sleep(2)
    last = result["rss_after_claims_mb"] = rss_mb(base.pid)
    result["rss_ratio"] = last / first
    report(f"server memory after every claim too: {last:.0f} MB, {last / first:.2f}x the first run's (target < 1.5)")


GRID_RUNS, GRID_STEPS = 4, 1500  # the Compare grid timed: seeds 0-3 of the tau preset, two at a time


def set_up_grid(page, base: str, seeds: int, steps: int) -> None:
    """Open the Compare page and set its grid (the default preset, `seeds` seeds of `steps` steps), ready to
    launch."""
    page.goto(f"{base}/compare")
    page.wait_for_function(f"() => document.querySelectorAll('.st-key-compare-launch button').length >= 1 && "
                           f"{NOT_RUNNING}", timeout=60_000)
    for name, value in (("seeds", seeds), ("steps", steps)):
        field = page.locator(f"[class*='st-key-compare-{name}'] input").first
        field.fill(str(value))
        field.press("Enter")
        page.wait_for_function(f"() => {NOT_RUNNING}", timeout=30_000)
    page.wait_for_function(f"() => document.querySelector('.st-key-compare-launch button').innerText"
                           f".includes('{seeds} run')", timeout=30_000)


def grid_on_page(page, base: Server) -> dict:
    """Launch a grid of GRID_RUNS seeds of PRESET on the Compare page and wait until every run is done: the wall
    time, and the cores the server, its workers and the browser used meanwhile."""
    set_up_grid(page, base, GRID_RUNS, GRID_STEPS)
    before, start = cpu_seconds(base.pid), time.perf_counter()
    page.locator(".st-key-compare-launch button").first.click()
    page.get_by_text(f"{GRID_RUNS} of {GRID_RUNS} runs done").first.wait_for(timeout=900_000)
    took = time.perf_counter() - start
    return {"seconds": took, "cores": {group: seconds / took for group, seconds in cpu_since(base.pid, before).items()}}


def grid_without_browser() -> float:
    """The same grid's jobs (the Compare page's live probes) through the app's job queue and two workers, with
    no server and no browser: seconds until every run is done."""
    with queue_without_browser(2) as queue:
        from explorer_app.jobs import wait  # (app/ is on the path now)

        base = explorer.preset(PRESET).with_values({"train.steps": GRID_STEPS})
        start = time.perf_counter()
        jobs = [queue.submit(base.with_values({"train.seed": seed}), f"seed {seed}",
                             probes={"coefficients": {}, "jacobian": {"max_inputs": 1}},
                             optional_probes=("coefficients", "jacobian"), probe_every=GRID_STEPS // 4)
                for seed in range(GRID_RUNS)]
        for job in jobs:
            wait(job, 900)
        return time.perf_counter() - start


def four_sessions(root: Path) -> dict:
    """Four tabs (four sessions) click Train on a server with EXPLORER_MAX_JOBS=2."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"train.steps": 20000, "train.log_every": 10})
    with serve(root / "home4", env={"EXPLORER_MAX_JOBS": "2"}) as base, browser(root / "profile4") as page:
        tabs = [page] + [page.context.new_page() for _ in range(3)]
        for tab in tabs:
            tab.goto(train_page_url(base, spec))
            wait_ready(tab)
        for tab in tabs:
            tab.locator(".st-key-train-start button").click()
            time.sleep(0.5)
        time.sleep(8)
        states = []
        for tab in tabs:
            text = tab.locator("body").inner_text()
            place = re.search(r"number (\d+) in line", text)
            states.append("queued #" + place.group(1) if place else "running" if "· running" in text else "other")
        errors = sum(exceptions(tab) for tab in tabs)
        for tab in tabs:
            tab.locator(".st-key-train-stop button").click()
    return {"four_sessions": states, "four_sessions_exceptions": errors}


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=PRESET)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=50, help="runs trained before the memory is read again")
    parser.add_argument("--quick", action="store_true", help="only the responsiveness figures")
    parser.add_argument("--memory-only", action="store_true", help="the responsiveness figures and the memory test")
    parser.add_argument("--no-memory", action="store_true", help="everything but the memory test")
    parser.add_argument("--repeats", type=int, default=3, help="page / command-line turns per speed preset")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    spec = explorer.preset(args.preset).with_values({"train.steps": args.steps, "train.log_every": 10})
    load = os.getloadavg()
    result: dict = {}

    def report(line: str) -> None:  # each figure as soon as it is measured (a later phase may fail or time out)
        print(line, flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2, default=str))

    print(f"load average at start {load[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "home") as base, browser(Path(tmp) / "profile") as page:
        cold = measure(page, base, spec, think_s=0.0)  # a fresh server, Train clicked as soon as the page is ready
        result.update(measure(page, base, spec, think_s=3.0))  # the same server, after 3 s on the page
        plain_cold, plain_warm = plain_first_loss(spec), plain_first_loss(spec)  # the first call loads the data
        result.update(preset=args.preset, cold_first_loss_point_s=cold["first_loss_point_s"],
                      plain_cold_s=plain_cold, plain_warm_s=plain_warm,
                      cold_vs_plain=cold["first_loss_point_s"] / plain_cold,
                      warm_vs_plain=result["first_loss_point_s"] / plain_warm)
        report(f"click Train -> first loss point (targets < 2.5 s fresh, < 1.5 s warm): {cold['first_loss_point_s']:.2f} s "
               f"clicked at once on a fresh server ({result['cold_vs_plain']:.1f}x plain PyTorch's cold first loss, "
               f"{plain_cold:.2f} s); {result['first_loss_point_s']:.2f} s after 3 s on the page "
               f"({result['warm_vs_plain']:.0f}x its warm first loss, {plain_warm * 1000:.0f} ms)")
        report(f"chart refreshes while one job trains: {result['chart_refreshes_per_s']:.2f}/s; Pause answered in "
               f"{result['pause_click_answer_s'] or float('nan'):.2f} s (nan: the run ended first); exceptions on "
               f"page: {result['exceptions'] + cold['exceptions']}")
        if args.screenshot:
            page.screenshot(path=str(args.screenshot))
        if not args.quick and not args.memory_only:
            other = page.context.new_page()
            result["chart_refreshes_two_jobs_per_s"] = refreshes_while_two_train(page, other, base, spec)
            other.close()
            report(f"chart refreshes while two jobs train: {result['chart_refreshes_two_jobs_per_s']:.2f}/s (target >= 4)")
            result["speed"] = {}
            for name, changes in SPEED_PRESETS.items():
                row = result["speed"][name] = speed(page, base, name, changes, args.repeats)
                report(f"{name}: page {row['page_steps_per_s']:.1f} steps/s, explorer train {row['cli_steps_per_s']:.1f} "
                       f"(1 thread: {row['cli_1_thread_steps_per_s']:.1f}) -> {row['ratio']:.2f}x the faster (target "
                       f">= 0.8; each repeat: {', '.join(f'{r:.2f}' for r in row['ratios'])}), {row['ratio_1_thread']:.2f}x "
                       f"the 1-thread run; the same job in a worker with no browser: {row['worker_no_browser_steps_per_s']:.1f} "
                       f"({row['worker_ratio']:.2f}x the faster); click -> finished {row['click_to_finished_s']:.1f} s; "
                       f"cores used from the click to the finished page: "
                       f"{', '.join(f'{group} {cores:.2f}' for group, cores in row['cores_while_training'].items())}; "
                       f"load {os.getloadavg()[0]:.2f}")
            grid = result["grid"] = {"page_s": [], "page_cores": [], "without_browser_s": []}
            for _ in range(2):  # the page and the same jobs with no browser take turns (this machine's speed drifts)
                seen = grid_on_page(page, base)
                grid["page_s"].append(seen["seconds"])
                grid["page_cores"].append(seen["cores"])
                grid["without_browser_s"].append(grid_without_browser())
            report(f"Compare grid ({GRID_RUNS} runs x {GRID_STEPS} steps of {PRESET}, two at a time): "
                   f"{', '.join(f'{t:.1f}' for t in grid['page_s'])} s on the page, "
                   f"{', '.join(f'{t:.1f}' for t in grid['without_browser_s'])} s with no server or browser; cores "
                   f"used while it trained on the page: "
                   f"{'; '.join(', '.join(f'{k} {v:.2f}' for k, v in cores.items()) for cores in grid['page_cores'])}")
    if not args.quick and not args.memory_only:
        with tempfile.TemporaryDirectory() as tmp:
            result.update(four_sessions(Path(tmp)))
        report(f"four tabs, EXPLORER_MAX_JOBS=2: {result['four_sessions']}, exceptions {result['four_sessions_exceptions']}")
    if not args.quick and not args.no_memory:
        with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "home") as base, \
                browser(Path(tmp) / "profile") as page:
            memory(page, base, args.runs, result, report)
    result["load_average"] = [load, os.getloadavg()]
    report(f"load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
