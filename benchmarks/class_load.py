"""A class on one server: 30 students doing the course's first steps at once, one of them hostile.

Starts `streamlit run app/server.py` on a loopback port (127.0.0.1 only) with its default limits (every
simulated student comes from 127.0.0.1, so jobs are counted per browser, as for a class behind one NAT whose
lecturer raised EXPLORER_MAX_JOBS_PER_ADDRESS), and drives Debian's Chromium
with Playwright: each student is a browser context of its own (its own cookies), arriving over
`--arrival-s` seconds. A student opens a preset link, trains it, opens the Papers page and comes back to
Train. At the same time one student tries the attacks the server must survive:
- a link whose `topology.shortcuts` would take a backtracking parser minutes (`0:1*1111111111,` x 8 + `x`);
- Inside's `param-jacobian` on a small ViT at patch 2 (65 tokens), whose memory a naive estimate misses;
- a flood of Train clicks from fresh browser contexts (new cookies), each asking for 20,000 steps.

It reports the other students' page-load times (median and worst: link opened -> Train button ready, and
the same for Papers and back), how each attack ended (the line the page showed and how long it took), and
the peak resident memory of the server and of its worker processes (sampled from /proc every 0.2 s),
against the plain reference of one idle Chromium page loading the same server before anyone arrives.
Everything is bounded: at most `--students` contexts, every wait has a timeout, and the whole run stops
after `--budget-s` seconds.

    python benchmarks/class_load.py [--students 30] [--arrival-s 30] [--budget-s 600] [--json OUT]
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
FLOOD = 8  # fresh contexts the attacker opens, each clicking Train on a long run
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
    await page.goto(url)
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
        loads.append(("train", await load(page, link, READY, 120)))
        await page.locator(".st-key-train-start button").click()
        left = max(deadline - time.monotonic(), 1)
        await page.wait_for_function("() => /Finished|diverged|waiting|full|at most/i.test(document.body.innerText)",
                                     timeout=min(left, 300) * 1000, polling=250)
        text = await page.inner_text("body")
        outcomes.append("finished" if "Finished" in text else "queued or refused")
        loads.append(("papers", await load(page, f"{base}/papers", IDLE, 120)))
        loads.append(("train again", await load(page, link, READY, 120)))
    except Exception as error:  # a student whose page never came: a result of the load test, not a crash
        outcomes.append(f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    finally:
        await context.close()


async def attacker(browser, base: str, attacks: dict):
    """The hostile student: the freezing link, the probe that outgrows its estimate, a flood of fresh cookies."""
    context = await browser.new_context(viewport={"width": 1280, "height": 720})
    page = await context.new_page()
    start = time.perf_counter()
    await page.goto(f"{base}/?{FREEZING_LINK}")
    try:
        attacks["freezing link"] = {"line": (await alert_text(page, 30))[:300], "seconds": time.perf_counter() - start}
    except Exception as error:
        attacks["freezing link"] = {"line": f"no message: {type(error).__name__}", "seconds": time.perf_counter() - start}

    start = time.perf_counter()
    try:  # train the small ViT at patch 2, then probe its parameter Jacobian on Inside
        await load(page, f"{base}/?{VIT_PATCH_2}", READY, 120)
        await page.locator(".st-key-train-start button").click()
        await page.get_by_text("Finished", exact=False).first.wait_for(timeout=240_000)
        await load(page, f"{base}/inside", IDLE, 120)
        probes = page.locator(".st-key-inside-probes input")
        await probes.click()
        await probes.fill("param-jacobian")
        await probes.press("Enter")
        await page.keyboard.press("Escape")
        await page.locator(".st-key-inside-run-probes button").click()
        await page.wait_for_function("() => /param-jacobian/.test(Array.from(document.querySelectorAll("
                                     f"'{ALERT}')).map(e => e.innerText).join(' '))", timeout=300_000, polling=250)
        attacks["param-jacobian on a ViT at patch 2"] = {"line": (await alert_text(page, 5))[:300],
                                                         "seconds": time.perf_counter() - start}
    except Exception as error:
        attacks["param-jacobian on a ViT at patch 2"] = {
            "line": f"no message: {type(error).__name__}: {str(error).splitlines()[0][:160]}",
            "seconds": time.perf_counter() - start}
    await context.close()

    flood = {"queued": 0, "refused": 0, "other": 0}
    long_run = f"{base}/?preset={urllib.parse.quote(PRESETS[0])}&train.steps=20000"
    for _ in range(FLOOD):  # each a fresh context: new cookies, as a cleared browser or a forged XSRF value
        context = await browser.new_context()
        page = await context.new_page()
        try:
            await load(page, long_run, READY, 120)
            await page.locator(".st-key-train-start button").click()
            await page.wait_for_function("() => /Step|Pause|waiting|full|at most/i.test(document.body.innerText)",
                                         timeout=60_000, polling=250)
            text = await page.inner_text("body")
            flood["refused" if ("full" in text or "at most" in text) else "queued"] += 1
        except Exception:
            flood["other"] += 1
        await context.close()  # the session ends; its job stops after EXPLORER_SESSION_GRACE_S
    attacks["flood of fresh contexts"] = flood


async def class_run(base: str, students: int, arrival_s: float, budget_s: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=browsing.CHROMIUM, headless=True,
                                          args=browsing.CHROMIUM_ARGS)
        reference_context = await browser.new_context(viewport={"width": 1280, "height": 720})
        reference_page = await reference_context.new_page()
        reference = await load(reference_page, base, READY, 120)  # one page load with nobody else on the server
        await reference_context.close()

        loads: list[tuple[str, float]] = []
        outcomes: list[str] = []
        attacks: dict = {}
        deadline = time.monotonic() + budget_s
        tasks = [student(browser, base, n, arrival_s * n / max(students - 1, 1), deadline, loads, outcomes)
                 for n in range(students - 1)]
        tasks.append(attacker(browser, base, attacks))
        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=budget_s)
        wall = time.perf_counter() - started
        await browser.close()
    seconds = [s for _, s in loads]
    return {"reference_page_load_s": reference, "page_loads": len(seconds),
            "page_load_median_s": statistics.median(seconds) if seconds else None,
            "page_load_worst_s": max(seconds) if seconds else None,
            "page_load_median_ratio": statistics.median(seconds) / reference if seconds else None,
            "by_page": {name: statistics.median([s for n, s in loads if n == name])
                        for name in {n for n, _ in loads}},
            "outcomes": {o: outcomes.count(o) for o in set(outcomes)}, "attacks": attacks, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30, help="browser contexts, the attacker included (2-60)")
    parser.add_argument("--arrival-s", type=float, default=30.0, help="seconds over which the students arrive")
    parser.add_argument("--budget-s", type=float, default=600.0, help="the whole run stops after this")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if not 2 <= args.students <= 60:
        parser.error("--students: give 2 to 60 (each is a Chromium context on this machine)")
    with tempfile.TemporaryDirectory() as tmp, browsing.serve(Path(tmp) / "home", env=SERVER_ENV) as base:
        sampler = MemorySampler(base.pid)
        sampler.start()
        result = asyncio.run(class_run(base, args.students, args.arrival_s, args.budget_s))
        sampler.stop.set()
        sampler.join()
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    result.update(server_peak_mb=sampler.server_mb, worker_peak_mb=sampler.worker_mb,
                  worker_processes_seen=len(sampler.workers_seen), cores=os.cpu_count(), load_after=load)
    print(f"{args.students} students (one hostile) arriving over {args.arrival_s:.0f} s, {os.cpu_count()} cores, "
          f"load average after {load}")
    print(f"page load: median {result['page_load_median_s']:.2f} s, worst {result['page_load_worst_s']:.2f} s over "
          f"{result['page_loads']} loads; alone on the server {result['reference_page_load_s']:.2f} s "
          f"(median ratio {result['page_load_median_ratio']:.1f}x); by page "
          + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(result["by_page"].items())))
    print(f"students' runs: {result['outcomes']}")
    for name, outcome in result["attacks"].items():
        print(f"attack, {name}: {outcome}")
    print(f"peak memory: server {sampler.server_mb:.0f} MB, largest worker {sampler.worker_mb:.0f} MB "
          f"({len(sampler.workers_seen)} worker processes seen)")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
