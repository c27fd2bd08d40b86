"""A class on one server: 30 students doing the course's first steps at once, one of them hostile.

Starts `streamlit run app/server.py` on a loopback port (127.0.0.1 only) with its default limits (every
simulated student comes from 127.0.0.1, so jobs are counted per browser, as for a class behind one NAT whose
lecturer raised EXPLORER_MAX_JOBS_PER_ADDRESS), and drives Debian's Chromium
with Playwright: each student is a browser context of its own (its own cookies), arriving over
`--arrival-s` seconds. A student opens a preset link, trains it, opens the Papers page and comes back to
Train. The attacks the server must survive:
- before the class arrives, a link whose `topology.shortcuts` would take a backtracking parser minutes
  (`0:1*1111111111,` x 8 + `x`), opened beside a second browser's Train page: both are timed;
- while the class works, one student probes Inside's `param-jacobian` on a small ViT at patch 2 (65 tokens),
  whose memory a naive estimate misses, then floods the queue with Train clicks from fresh browser contexts
  (new cookies), each asking for 20,000 steps.

It reports the students' page-load times (median and worst: link opened -> Train button ready, and the same
for Papers and back) against one page load with nobody else on the server, how each attack ended (the line the
page showed and how long it took), and the peak resident memory of the server and of its worker processes
(sampled from /proc every 0.2 s). Everything is bounded: at most `--students` contexts, every wait has a
timeout, and the whole run stops after `--budget-s` seconds.

    python benchmarks/class_load.py [--students 30] [--arrival-s 90] [--budget-s 600] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import app_responsiveness as browsing
from common import write_json

PRESETS = ("ancre-fig2b-0:2", "ancre-fig2b-0:1", "tau-fig1-1/sqrt(L)")  # the course's first runs
FREEZING_LINK = "preset=ancre-fig2b-none&topology=shortcuts&topology.shortcuts=" + urllib.parse.quote(
    "0:1*1111111111," * 8 + "x")
VIT_PATCH_2 = ("data=shapes&data.size=16&data.n_train=48&data.n_val=16&model=vit&model.width=16&model.patch=2"
               "&topology=dca&train.steps=6&train.batch_size=16&train.log_every=6")
FLOOD = 20  # fresh contexts the attacker opens and keeps, each clicking Train on a long run
READY = "() => document.querySelectorAll('.st-key-train-start button').length === 1 && " + browsing.NOT_RUNNING
IDLE = f"() => {browsing.NOT_RUNNING}"
ALERT = '[data-testid="stAlert"], [data-testid="stAlertContainer"]'
# The server's own defaults (two jobs at once, four per browser, sixteen waiting); loopback clients are counted
# per browser only, as a class behind one NAT is once its lecturer raises EXPLORER_MAX_JOBS_PER_ADDRESS.
SERVER_ENV = {"EXPLORER_MAX_JOBS": "2", "EXPLORER_MAX_QUEUED": "16", "EXPLORER_MAX_JOBS_PER_SESSION": "4"}


class MemorySampler(threading.Thread):
    """Peak resident memory (MB) of the server process and of each of its descendants, sampled from /proc."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every, self.stop = pid, every, threading.Event()
        self.server_mb, self.worker_mb, self.workers_seen = 0.0, 0.0, set()

    def run(self) -> None:
        while not self.stop.is_set():
            self.server_mb = max(self.server_mb, _rss_mb(self.pid))
            for child in _descendants(self.pid):
                self.workers_seen.add(child)
                self.worker_mb = max(self.worker_mb, _rss_mb(child))
            self.stop.wait(self.every)


def _rss_mb(pid: int) -> float:
    """Resident memory of `pid`, 0 for a process that has just ended."""
    try:
        rss = browsing.rss_mb(pid)
    except OSError:
        return 0.0
    return 0.0 if rss != rss else rss


def cpu_seconds(match) -> float:
    """CPU seconds (user + system) used so far by every live process whose command name `match` accepts."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if match(name):
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick  # own + children
    return total


def _own_cpu_seconds(pid: int) -> float:
    """CPU seconds of process `pid` itself (its threads, not its children)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += [int(c) for c in children]
        frontier += [int(c) for c in children]
    return found


async def load(page, url: str, ready: str, timeout_s: float) -> float:
    """Seconds from opening `url` until `ready` (a JavaScript predicate) holds."""
    start = time.perf_counter()
    await page.goto(url, timeout=timeout_s * 1000)
    await page.wait_for_function(ready, timeout=timeout_s * 1000, polling=50)
    return time.perf_counter() - start


async def alert_text(page, timeout_s: float) -> str:
    """The first alert's text on the page (waits for one)."""
    alert = page.locator(ALERT).first
    await alert.wait_for(timeout=timeout_s * 1000)
    return " ".join((await alert.inner_text()).split())


async def student(browser, base: str, number: int, delay: float, deadline: float, loads: list, outcomes: list):
    """One student: preset link -> Train -> Papers -> back to Train, timing each page load."""
    await asyncio.sleep(delay)
    context = await browser.new_context(viewport={"width": 1280, "height": 720})
    page = await context.new_page()
    link = f"{base}/?preset={urllib.parse.quote(PRESETS[number % len(PRESETS)])}"
    try:
        loads.append(("train", await load(page, link, READY, 180)))
        await page.locator(".st-key-train-start button").click()
        left = max(deadline - time.monotonic(), 1)
        try:
            await page.wait_for_function("() => /Finished|Diverged at step|Not started/.test(document.body.innerText)",
                                         timeout=min(left, 300) * 1000, polling=250)
            text = await page.inner_text("body")
            outcomes.append("refused" if "Not started" in text else "trained")
        except Exception:
            outcomes.append("still waiting or training at the deadline")
        loads.append(("papers", await load(page, f"{base}/papers", IDLE, 120)))
        loads.append(("train again", await load(page, link, READY, 120)))
    except Exception as error:  # a student whose page never came: a result of the load test, not a crash
        outcomes.append(f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    finally:
        await context.close()


async def freezing_link_beside_a_tab(browser, base: str) -> dict:
    """Before the class arrives: the freezing link in one tab and, at the same moment, the Train page in another
    browser. Seconds until the link's page shows its one line, and until the other tab is ready."""
    contexts = [await browser.new_context(viewport={"width": 1280, "height": 720}) for _ in range(2)]
    hostile, other = [await context.new_page() for context in contexts]

    async def answered() -> tuple[str, float]:
        start = time.perf_counter()
        await hostile.goto(f"{base}/?{FREEZING_LINK}")
        return await alert_text(hostile, 60), time.perf_counter() - start

    (line, link_s), other_s = await asyncio.gather(answered(), load(other, base, READY, 120))
    # The same two browsers opening two ordinary links at once: what two pages loading together cost this machine.
    plain_s = await asyncio.gather(*(load(page, f"{base}/?preset={urllib.parse.quote(PRESETS[0])}", READY, 120)
                                     for page in (hostile, other)))
    for context in contexts:
        await context.close()
    return {"line": line[:300], "link_answered_s": link_s, "other_tab_ready_s": other_s,
            "two_plain_tabs_s": max(plain_s)}


async def attacker(browser, base: str, attacks: dict):
    """The hostile student, while the class works: the probe that outgrows its estimate, then a flood of fresh
    cookies (each a browser context of its own)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 720})
    page = await context.new_page()
    start = time.perf_counter()
    try:  # train the small ViT at patch 2, then probe its parameter Jacobian on Inside (by the sidebar: same session)
        await load(page, f"{base}/?{VIT_PATCH_2}", READY, 120)
        await page.locator(".st-key-train-start button").click()
        await page.get_by_text("Finished", exact=False).first.wait_for(timeout=240_000)
        await page.locator('[data-testid="stSidebarNav"] a', has_text="Inside").click()
        await page.locator(".st-key-inside-inputs").wait_for(timeout=60_000)
        await page.wait_for_function(IDLE, timeout=120_000)
        probes = page.locator(".st-key-inside-probes input")
        await probes.click()
        await probes.fill("param-jacobian")
        await page.get_by_role("option", name="param-jacobian", exact=True).click(timeout=60_000)
        await page.keyboard.press("Escape")
        await page.wait_for_function(IDLE, timeout=120_000)
        await page.locator(".st-key-inside-run-probes button").first.click()
        cancel = page.locator(".st-key-inside-cancel button").first
        await cancel.wait_for(timeout=120_000)
        await cancel.wait_for(state="detached", timeout=600_000)  # the probe job ended, one way or another
        await page.wait_for_function(IDLE, timeout=120_000)
        alerts = [" ".join(text.split()) for text in await page.locator(ALERT).all_inner_texts()]
        charts = await page.evaluate(browsing.CHART_TITLES)
        drawn = any("sub-block Jacobian" in title for title in charts)
        shown = "probed: its figure is drawn" if drawn else (alerts[0][:300] if alerts else
                                                              "no figure, no message: " + " ".join(charts)[:300])
        attacks["param-jacobian on a ViT at patch 2"] = {"line": shown, "seconds": time.perf_counter() - start}
    except Exception as error:
        attacks["param-jacobian on a ViT at patch 2"] = {
            "line": f"no answer: {type(error).__name__}: {str(error).splitlines()[0][:160]}",
            "seconds": time.perf_counter() - start}
    await context.close()

    flood = {"queued": 0, "refused": 0, "other": 0, "lines": set()}
    long_run = f"{base}/?preset={urllib.parse.quote(PRESETS[2])}&train.steps=20000"  # minutes of training each
    kept = []  # the flood's contexts stay open (their jobs held) until the class is over
    for _ in range(FLOOD):  # each a fresh context: new cookies, as a cleared browser or a forged XSRF value
        context = await browser.new_context()
        kept.append(context)
        page = await context.new_page()
        try:
            await load(page, long_run, READY, 120)
            await page.locator(".st-key-train-start button").click()
            await page.wait_for_function("() => /Queued: |Not started|of 20000 · /.test(document.body.innerText)",
                                         timeout=120_000, polling=250)
            refused = page.locator(ALERT, has_text="Not started").first
            if await refused.count():
                flood["refused"] += 1
                flood["lines"].add(" ".join((await refused.inner_text()).split())[:200])
            else:
                flood["queued"] += 1
        except Exception:
            flood["other"] += 1
    flood["lines"] = sorted(flood["lines"])
    attacks["flood of fresh contexts"] = flood
    return kept


async def class_run(base: str, students: int, arrival_s: float, budget_s: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=browsing.CHROMIUM, headless=True,
                                          args=browsing.CHROMIUM_ARGS)
        reference_context = await browser.new_context(viewport={"width": 1280, "height": 720})
        reference_page = await reference_context.new_page()
        reference = await load(reference_page, base, READY, 120)  # one page load with nobody else on the server
        await reference_context.close()
        link = await freezing_link_beside_a_tab(browser, base)

        loads: list[tuple[str, float]] = []
        outcomes: list[str] = []
        attacks: dict = {}
        deadline = time.monotonic() + budget_s
        tasks = [student(browser, base, n, arrival_s * n / max(students - 1, 1), deadline, loads, outcomes)
                 for n in range(students - 1)]
        tasks.append(attacker(browser, base, attacks))
        started = time.perf_counter()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=budget_s)
        wall = time.perf_counter() - started
        for context in done[-1] if isinstance(done[-1], list) else []:
            await context.close()
        await browser.close()
    seconds = [s for _, s in loads]
    return {"reference_page_load_s": reference, "freezing_link": link, "page_loads": len(seconds),
            "page_load_median_s": statistics.median(seconds) if seconds else None,
            "page_load_worst_s": max(seconds) if seconds else None,
            "page_load_median_ratio": statistics.median(seconds) / reference if seconds else None,
            "by_page": {name: statistics.median([s for n, s in loads if n == name])
                        for name in {n for n, _ in loads}},
            "outcomes": {o: outcomes.count(o) for o in set(outcomes)}, "attacks": attacks, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30, help="browser contexts, the attacker included (2-60)")
    parser.add_argument("--arrival-s", type=float, default=90.0, help="seconds over which the students arrive")
    parser.add_argument("--budget-s", type=float, default=600.0, help="the whole run stops after this")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if not 2 <= args.students <= 60:
        parser.error("--students: give 2 to 60 (each is a Chromium context on this machine)")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp, browsing.serve(Path(tmp) / "home", env=SERVER_ENV) as base:
        sampler = MemorySampler(base.pid)
        sampler.start()
        browser_cpu = cpu_seconds(lambda name: "chrom" in name)
        server_cpu = cpu_seconds(lambda name: name.startswith(("streamlit", "python")))
        server_alone = _own_cpu_seconds(base.pid)
        result = asyncio.run(class_run(base, args.students, args.arrival_s, args.budget_s))
        # Where the two cores went: the browsers (the load generator, on the same machine) against the server and
        # its workers (every python process: nothing else runs during the benchmark).
        result["cpu_s"] = {"browsers": cpu_seconds(lambda name: "chrom" in name) - browser_cpu,
                           "server and workers": cpu_seconds(lambda n: n.startswith(("streamlit", "python"))) - server_cpu,
                           "server process alone": _own_cpu_seconds(base.pid) - server_alone}
        sampler.stop.set()
        sampler.join()
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    result.update(server_peak_mb=sampler.server_mb, worker_peak_mb=sampler.worker_mb,
                  worker_processes_seen=len(sampler.workers_seen), cores=os.cpu_count(), load_after=load)
    print(f"{args.students} students (one hostile) arriving over {args.arrival_s:.0f} s, {os.cpu_count()} cores, "
          f"load average after {load}")
    link = result["freezing_link"]
    print(f"freezing link: its page said in {link['link_answered_s']:.2f} s: {link['line'][:160]!r}; a second browser's "
          f"Train page was ready in {link['other_tab_ready_s']:.2f} s meanwhile (one page alone: "
          f"{result['reference_page_load_s']:.2f} s; two ordinary links opened together: {link['two_plain_tabs_s']:.2f} s)")
    print(f"page load: median {result['page_load_median_s']:.2f} s, worst {result['page_load_worst_s']:.2f} s over "
          f"{result['page_loads']} loads; alone on the server {result['reference_page_load_s']:.2f} s "
          f"(median ratio {result['page_load_median_ratio']:.1f}x); by page "
          + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(result["by_page"].items())))
    print(f"students' runs: {result['outcomes']}")
    print(f"CPU seconds over the {result['wall_s']:.0f} s of the class: " + ", ".join(
        f"{k} {v:.0f}" for k, v in result["cpu_s"].items()))
    for name, outcome in result["attacks"].items():
        print(f"attack, {name}: {outcome}")
    print(f"peak memory: server {sampler.server_mb:.0f} MB, largest worker {sampler.worker_mb:.0f} MB "
          f"({len(sampler.workers_seen)} worker processes seen)")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
