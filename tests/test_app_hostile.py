"""A server a class can share. Hostile links, uploads and files reach the page only as text."""

import os
import pickle
import re
import time
from pathlib import Path

import pytest
import torch

import explorer
from conftest import plain

HOST = "example.invalid"
LINK = f"[Session expired - log in again](http://{HOST}/login)"
IMAGE = f"![x](http://{HOST}/a.png)"
# markdown that makes a link or an image ("](" or "![" without a backslash before them) or a GitHub-style
# autolink (http:// or www. with nothing but escapes between the letters: an invisible word joiner breaks it)
ACTIVE_MARKDOWN = re.compile(r"(?<!\\)\]\(|(?<!\\)!\[|https?:\\?/|www\\?\.")


def bodies(at) -> list[str]:
    """Everything the page sent as markdown: error/warning/info/success bodies, markdown and captions."""
    elements = [*at.error, *at.warning, *at.info, *at.success, *at.markdown, *at.caption]
    return [element.proto.body for element in elements]


@pytest.mark.parametrize("query", [{"model": LINK}, {"model": IMAGE}, {"data": "identity", "data.dim": IMAGE},
                                   {IMAGE: "1"}, {f"model.{LINK}": "3"}])
def test_a_hostile_link_is_shown_as_text(open_page, query):
    at = open_page("train", query=query)
    assert not at.exception
    shown = [body for body in bodies(at) if HOST.replace(".", "\\.") in body or HOST in body]
    assert shown, "the page should say the link's experiment is not valid, quoting it"
    for body in shown:
        assert not ACTIVE_MARKDOWN.search(body), body
        assert HOST.replace(".", "\\.") in body  # quoted, escaped


def test_escape_disarms_markdown():
    from explorer_app.messages import escape

    text = escape(f"{LINK} {IMAGE} <img src=x> **b** :red[x] $x$ www.{HOST}")
    assert not ACTIVE_MARKDOWN.search(text)
    assert "<" not in text.replace("\\<", "") and "www." not in text


def test_a_link_cannot_probe_server_files(open_page, tmp_path, monkeypatch):
    """`?data=text&data.path=...` outside EXPLORER_DATA_DIR says the same thing whether the
    file exists or not, and nothing about its length or content."""
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(tmp_path / "data"))
    secret = tmp_path / "secret.txt"
    secret.write_text("x" * 5000)
    shown = []
    for path in (secret, tmp_path / "missing.txt"):
        at = open_page("train", query={"data": "text", "model": "gpt", "data.path": str(path)})
        assert not at.exception
        [error] = [plain(e.value) for e in at.error if "data.path" in plain(e.value)]
        shown.append(error.replace(str(path), "PATH"))
    assert shown[0] == shown[1] and "EXPLORER_DATA_DIR" in shown[0]
    assert "5000" not in shown[0] and "exist" not in shown[0]


def test_a_corrupt_checkpoint_on_inside_probe_is_one_clear_line(open_page):
    """Inside -> Probe on a damaged checkpoint names the file (in EXPLORER_HOME, not the server's path) and what
    to do; torch's own text (which advises weights_only=False) is not shown."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 4, "train.log_every": 2})
    explorer.train(spec, callbacks=[explorer.StoreRecorder(label="stored")])
    store = explorer.RunStore()
    path = store.checkpoint_path(store.list()[0]["id"])
    path.write_bytes(pickle.dumps(type("Evil", (), {"__reduce__": lambda self: (os.system, ("true",))})()))
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    from test_app_inside import probe

    probe(at)  # the probe job's worker reads the checkpoint
    assert not at.exception
    [warning] = [plain(w.value) for w in at.warning if "checkpoint" in plain(w.value)]
    assert f"checkpoints/{path.name} in EXPLORER_HOME" in warning and "move that file aside" in warning
    assert str(path.parent) not in warning and "weights_only" not in warning  # no server path, no torch advice
    assert "\n" not in warning


def test_why_train_is_off_is_shown_beside_it(open_page):
    """With ?train.steps=20001 the reason is in the main area, not only in a collapsed section."""
    at = open_page("train", query={"train.steps": "20001"})
    assert not at.exception
    assert at.button(key="train-start").disabled
    assert any("train.steps" in plain(e.value) and "EXPLORER_MAX_STEPS" in plain(e.value) for e in at.main.error)


@pytest.mark.parametrize("query", [{"data": "identity", "data.dim": "4096", "data.n_train": "50000", "data.seed": "0"},
                                   {"model.depth": "10000", "model.width": "65536"},
                                   {"data": "shapes", "model": "vit", "data.size": "128", "data.n_train": "200000"}])
def test_a_link_that_asks_for_too_much_memory_is_refused_before_anything_is_built(open_page, query, monkeypatch):
    """The message is shown, Train is off, and no dataset was generated."""
    import explorer.data.base

    built = []
    monkeypatch.setattr(explorer.data.base, "_remember", lambda key, dataset: built.append(key))
    at = open_page("train", query=query)
    assert not at.exception
    assert at.button(key="train-start").disabled
    assert any("EXPLORER_MAX_" in plain(e.value) for e in at.main.error)
    assert built == []


def test_an_oversized_spec_upload_is_refused(open_page):
    import json

    at = open_page("train")
    upload = json.dumps({"data": {"name": "identity", "dim": 4096, "n_train": 1000000}}).encode()
    from test_app_uploads import uploader

    uploader(at, "train-upload-spec").set_value(("big.json", upload, "application/json")).run()
    assert not at.exception
    at.run()  # the form loaded from the upload is validated on the next run
    assert any("EXPLORER_MAX_DATA_MB" in plain(e.value) for e in at.error)
    assert at.button(key="train-start").disabled


def a_store_with_a_damaged_row(column: str) -> tuple[str, str]:
    """(good id, damaged id): two runs recorded, then one's `column` overwritten with text that is not JSON."""
    import sqlite3

    store = explorer.RunStore()
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 4, "train.log_every": 2})
    bad = store.create(spec, label="damaged", status="finished")
    good = store.create(spec, label="sound", status="finished")
    with sqlite3.connect(store.db_path) as conn:
        conn.execute(f"UPDATE runs SET {column} = '{{not json' WHERE id = ?", (bad,))
    conn.close()
    return good, bad


@pytest.mark.parametrize("column", ["spec", "final"])
@pytest.mark.parametrize("page, everything", [("inside", "inside-all"), ("compare", "compare-all-runs")])
def test_a_damaged_row_is_skipped_with_a_one_line_notice(open_page, column, page, everything):
    """Inside and Compare list the other runs and say which one they left out, in the session's own view too."""
    good, bad = a_store_with_a_damaged_row(column)
    at = open_page(page)
    for toggle in (False, True):
        at.toggle(key=everything).set_value(toggle).run()
        assert not at.exception
        [notice] = [plain(w.value) for w in at.warning if bad[:12] in plain(w.value)]
        assert "explorer runs delete" in notice and "\n" not in notice
    listed = at.selectbox(key="inside-run").options if page == "inside" else at.multiselect(key="compare-runs").options
    assert any(good[:6] in option for option in listed) and not any(bad[:6] in option for option in listed)


@pytest.mark.parametrize("page", ["train", "compare", "inside"])
def test_a_store_that_cannot_open_is_one_line_naming_explorer_home(open_page, explorer_home, page):
    """An empty runs.sqlite beside checkpoints is not replaced; each page says so once, without the server's
    folders, and never shows Streamlit's error box, on load or on a rerun."""
    (explorer_home / "checkpoints").mkdir()
    (explorer_home / "checkpoints" / ("a" * 32 + ".pt")).write_bytes(b"a checkpoint")
    (explorer_home / "runs.sqlite").write_bytes(b"")
    at = open_page(page)
    for _ in range(2):
        assert not at.exception
        [error] = [plain(e.value) for e in at.error]
        assert "EXPLORER_HOME" in error and "empty" in error and str(explorer_home) not in error
        at.run()
    assert (explorer_home / "runs.sqlite").stat().st_size == 0


def browser_driver():
    """The browser driver (benchmarks/app_responsiveness.py: Streamlit + Playwright + Debian's Chromium); the
    test is skipped without Chromium or Playwright, except in CI, where it fails."""
    from browsers import browsing, skip_without_browser

    missing = skip_without_browser()
    assert not missing, f"CI needs {' and '.join(missing)} for the browser test"
    return browsing


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One app server (default settings) and one Chromium for the browser tests that need no settings of their
    own: (browsing, base URL, page, the diverged run). Its store starts with a run trained on a GPU elsewhere
    (tests/data/cuda_store, train.device=cuda), first in the store, and a run that diverged (non-finite weights).
    The tests that start a Chromium of their own come before the first test that uses this one in the file: one
    Playwright at a time in a process."""
    import shutil

    browsing = browser_driver()
    root = tmp_path_factory.mktemp("hostile")
    home = root / "home"
    shutil.copytree(Path(__file__).parent / "data" / "cuda_store", home)
    diverging = explorer.preset("tau-fig1-1/L").with_values({"topology.name": "cascaded", "optim.lr": 100.0,
                                                             "train.steps": 20, "train.log_every": 5})
    with pytest.MonkeyPatch.context() as env:  # (a module fixture starts before each test's own EXPLORER_HOME)
        env.setenv("EXPLORER_HOME", str(home))
        run = explorer.train(diverging, callbacks=[explorer.StoreRecorder(store=explorer.RunStore(home),
                                                                          label="diverged")])
    with browsing.serve(home) as base, browsing.browser(root / "profile") as page:
        yield browsing, base, page, run


@pytest.fixture
def app_page(served):
    """The shared server's (browsing, base URL, page, diverged run); the tabs a test opened are closed after it."""
    page = served[2]
    yield served
    for other in page.context.pages:
        if other is not page:
            other.close()


def test_train_on_a_store_that_cannot_open_is_one_line_in_a_browser(tmp_path):
    """The same in a real browser (Streamlit + Playwright + Debian's Chromium), on load and on reload: the
    queue's warm-up after the page, outside its handler, shows no exception box either."""
    browsing = browser_driver()
    home = tmp_path / "home"
    (home / "checkpoints").mkdir(parents=True)
    (home / "checkpoints" / ("a" * 32 + ".pt")).write_bytes(b"a checkpoint")
    (home / "runs.sqlite").write_bytes(b"")
    errors = "[data-testid='stAlertContentError']"
    with browsing.serve(home, entry="streamlit_app.py") as base, browsing.browser(tmp_path / "profile") as page:
        for load in (page.goto, lambda _: page.reload()):
            load(base)
            page.wait_for_function(f"() => document.querySelector(\"{errors}\") && {browsing.NOT_RUNNING}",
                                   timeout=60_000)
            time.sleep(3)  # a moment for what the script run draws after the page (the workers' warm-up)
            shown = page.locator(errors).all_inner_texts()
            assert browsing.exceptions(page) == 0
            assert len(shown) == 1 and "EXPLORER_HOME" in shown[0] and str(home) not in shown[0], shown
    assert (home / "runs.sqlite").stat().st_size == 0


def test_the_tabs_of_one_browser_share_its_job_cap(tmp_path):
    """EXPLORER_MAX_JOBS_PER_SESSION counts a browser's tabs together (Streamlit's per-browser XSRF cookie):
    with a cap of 1, a second tab of the same browser is told "Not started", in one line, while its first tab
    trains; another browser (a tab without the cookie, so with a token of its own) still trains."""
    browsing = browser_driver()
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 20000,
                                                              "train.log_every": 50})
    env = {"EXPLORER_MAX_JOBS_PER_SESSION": "1", "EXPLORER_MAX_JOBS": "2"}
    with browsing.serve(tmp_path / "home", env=env) as base, browsing.browser(tmp_path / "profile") as page:
        page.goto(browsing.train_page_url(base, spec))
        browsing.wait_ready(page, 180_000)
        page.locator(".st-key-train-start button").click()
        page.locator(".st-key-train-stop button:enabled").first.wait_for(timeout=120_000)  # it trains
        tab = page.context.new_page()
        tab.goto(browsing.train_page_url(base, spec))
        browsing.wait_ready(tab, 180_000)
        tab.locator(".st-key-train-start button").click()
        refusal = tab.get_by_text("Not started:", exact=False).first
        refusal.wait_for(timeout=120_000)
        assert "across its tabs" in refusal.inner_text() and browsing.exceptions(tab) == 0
        page.context.clear_cookies()  # what another browser is to the server: no cookie yet, so a token of its own
        other = page.context.new_page()
        other.goto(browsing.train_page_url(base, spec))
        browsing.wait_ready(other, 180_000)
        other.locator(".st-key-train-start button").click()
        other.locator(".st-key-train-stop button:enabled").first.wait_for(timeout=120_000)
        other.locator(".st-key-train-stop button").first.click()
        page.locator(".st-key-train-stop button").first.click()


def test_a_probe_too_big_for_the_server_is_refused_while_it_serves_others(app_page):
    """A heavy Inside probe in a real browser: a 2048-wide linear model on a 500 MB dataset, 64 validation
    inputs, Probe. The page says in one line which probe does not fit and how many inputs do; the server's
    process builds nothing (its resident memory stays near what it was) and a second tab loads meanwhile."""
    import threading

    browsing, base, page, _ = app_page
    query = ("data=identity&data.dim=2048&data.n_train=30000&model=linear&model.width=2048&model.depth=1"
             "&train.steps=2&train.log_every=1")
    page.goto(f"{base}/?{query}")
    browsing.wait_ready(page, 180_000)
    page.locator(".st-key-train-start button").click()
    page.get_by_text("Finished", exact=False).first.wait_for(timeout=600_000)
    page.locator('[data-testid="stSidebarNav"] a', has_text="Inside").click()
    page.locator(".st-key-inside-inputs").wait_for(timeout=60_000)
    time.sleep(1.0)  # the rerun the click started may begin a moment later
    page.wait_for_function(browsing.IDLE, timeout=60_000)
    page.locator(".st-key-inside-inputs input[type=range]").first.focus()
    page.keyboard.press("End")
    page.wait_for_function("() => document.querySelector(\".st-key-inside-inputs [data-testid='stSliderThumbValue']\")"
                           ".innerText === '64'", timeout=60_000)
    time.sleep(1.0)
    page.wait_for_function(browsing.IDLE, timeout=60_000)
    before = browsing.rss_mb(base.pid)
    peak, sampling = [before], threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak.append(browsing.rss_mb(base.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        page.locator(".st-key-inside-run-probes button").first.click()
        other = page.context.new_page()
        other.goto(f"{base}/")
        browsing.wait_ready(other, 120_000)
        assert browsing.exceptions(other) == 0
        refusal = page.get_by_text("Not probed:", exact=False).first
        refusal.wait_for(timeout=120_000)
    finally:
        sampling.set()
        sampler.join()
    shown = refusal.inner_text()
    assert "jacobian" in shown and "64 validation inputs" in shown and "use at most" in shown, shown
    assert "EXPLORER_MAX_MODEL_MB" in shown and "\n" not in shown.strip()
    assert browsing.exceptions(page) == 0
    assert max(peak) < before + 300, (before, max(peak))  # the probe's GBs were never allocated here


def test_inside_probes_a_diverged_run_and_a_gpu_run_in_a_browser(app_page):
    """Inside in a real browser, on the runs it must explain: a diverged run (non-finite weights) is probed
    and shows the weights and norms it has, with the undefined quantities named, never an exception box; a
    run trained on a GPU elsewhere (tests/data/cuda_store, train.device=cuda) opens and is probed here on CPU."""
    browsing, base, page, run = app_page  # the server's store holds both runs
    # it trained on to its logged step after the loss blew up: its stored weights are not finite
    assert run.status == "diverged" and not all(torch.isfinite(p).all() for p in run.model.parameters())
    for label, added in (("diverged", None), ("on cuda", "coefficients")):  # to the default probes
        page.goto(f"{base}/inside")
        page.locator(".st-key-inside-all label").first.wait_for(timeout=180_000)
        page.wait_for_function(browsing.IDLE, timeout=60_000)
        page.locator(".st-key-inside-all label").first.click()  # every run in the store
        time.sleep(1.0)
        page.wait_for_function(browsing.IDLE, timeout=60_000)
        browsing.choose(page, "inside-run", label)
        time.sleep(1.0)
        page.wait_for_function(browsing.IDLE, timeout=60_000)
        if added:
            browsing.choose(page, "inside-probes", added)
            page.keyboard.press("Escape")
            page.locator("h1").first.click()
            time.sleep(1.0)
            page.wait_for_function(browsing.IDLE, timeout=60_000)
        page.locator(".st-key-inside-run-probes button").first.click()
        probes = ["jacobian", "weights", "norms", *([added] if added else [])]
        for name in probes:  # each probe's heading, once the job has drawn its results
            page.locator("h4", has_text=re.compile(rf"^{name} \(step \d+\)")).first.wait_for(timeout=300_000)
        text = page.locator("[data-testid='stMain']").first.inner_text()
        assert browsing.exceptions(page) == 0, label
        assert "Not probed" not in text and "does not apply" not in text, text[:2000]
        if label == "diverged":  # its spectra are undefined, and their figures say why (Playwright's text
            # search reaches into the charts' shadow roots)
            page.get_by_text("undefined: singular_values", exact=False).first.wait_for(timeout=60_000)


def test_a_link_built_to_stall_the_parser_is_one_line_while_a_second_tab_loads(app_page):
    """`0:1*1111111111,` nine times then `x` as topology.shortcuts: a backtracking pattern would hold the
    interpreter (and so every session of the server) for many minutes. The page says in one line what is wrong
    with the field, and another tab of the server loads meanwhile and afterwards."""
    browsing, base, page, _ = app_page
    freezing = "0:1*1111111111," * 9 + "x"
    query = f"preset=ancre-fig2b-none&topology=shortcuts&topology.shortcuts={freezing}"
    page.goto(f"{base}/?{query}")
    other = page.context.new_page()
    other.goto(f"{base}/?preset=ancre-fig2b-0:2")
    browsing.wait_ready(other, 120_000)
    alert = page.locator('[data-testid="stAlert"]', has_text="topology.shortcuts").first
    alert.wait_for(timeout=120_000)
    shown = " ".join(alert.inner_text().split())
    assert "'x' is not a shortcut" in shown and "0:3*0.5" in shown, shown
    assert browsing.exceptions(page) == 0 and browsing.exceptions(other) == 0
    other.reload()
    browsing.wait_ready(other, 120_000)
