"""Fixtures shared by the test files."""

import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
sys.path.insert(0, str(APP))  # the app's helper package `explorer_app`, importable as under `streamlit run`


@pytest.fixture(autouse=True)
def explorer_home(tmp_path_factory, monkeypatch):
    """Every test records runs into its own store, never the user's (~/.explorer)."""
    path = tmp_path_factory.mktemp("explorer-home")
    monkeypatch.setenv("EXPLORER_HOME", str(path))
    yield path
    from explorer.data.files import restrict_reads

    restrict_reads(None)  # an app test (AppTest runs the server's script in this process) restricts reads


@pytest.fixture(scope="session")
def worker_pool():
    """Two warm worker processes shared by the job tests (each importing torch costs seconds)."""
    from explorer_app.workers import WorkerPool

    pool = WorkerPool(2)
    pool.warm()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def local_ray():
    """One private local Ray for the tests that use it (starting Ray costs tens of seconds); those tests run
    last (pytest_collection_modifyitems), so it is started once and no other test runs beside it."""
    ray = pytest.importorskip("ray")
    from explorer.parallel import connect_ray

    connect_ray(cpus=2)
    yield ray
    ray.shutdown()


def pytest_collection_modifyitems(items):
    """The tests on the shared local Ray run last, one after the other (the order within each group is kept)."""
    on_ray = [item for item in items if "local_ray" in getattr(item, "fixturenames", ())]
    items[:] = [item for item in items if item not in on_ray] + on_ray


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory):
    """{name: notebook} of every notebook executed top to bottom in fast mode, each by a fresh kernel in a
    folder of its own, two kernels at a time with one torch thread each (a notebook's small runs gain little
    from a second thread, so the two cores of a CI machine run two notebooks); a notebook that failed to run
    maps to its exception. Shared by the notebook tests and the static site's tests."""
    pytest.importorskip("nbclient")
    sys.path.insert(0, str(ROOT / "notebooks"))
    import build_site

    saved = {key: os.environ.get(key) for key in ("EXPLORER_FAST", "OMP_NUM_THREADS")}
    os.environ.update(EXPLORER_FAST="1", OMP_NUM_THREADS="1")  # the kernels inherit them
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {path.stem: pool.submit(build_site.execute, path, tmp_path_factory.mktemp(path.stem), 600)
                       for path in build_site.NOTEBOOKS}
            return {name: future.exception() or future.result() for name, future in futures.items()}
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection or resolve a host fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def open_page():
    """open_page("train", query={...}) -> a streamlit AppTest of the whole app, switched to that page and run."""
    from streamlit.testing.v1 import AppTest

    def open_(page: str, query: dict | None = None, timeout: float = 120):
        at = AppTest.from_file(str(APP / "streamlit_app.py"), default_timeout=timeout)
        for key, value in (query or {}).items():
            at.query_params[key] = value
        at.switch_page(f"views/{page}.py")
        return at.run()

    return open_


def plotly_array(values) -> "np.ndarray":
    """A data array of a figure's JSON (e.g. an AppTest chart's proto.spec) as floats: plotly sends numpy
    arrays as base64 typed arrays {dtype, bdata, shape} and lists as lists (None for gaps -> nan)."""
    import base64

    import numpy as np

    if isinstance(values, dict) and "bdata" in values:
        array = np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(float)
        shape = values.get("shape")
        if shape:
            array = array.reshape([int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape)
        return array
    return np.array([[np.nan if v is None else v for v in row] if isinstance(row, list) else
                     (np.nan if row is None else row) for row in values], dtype=float)


def plain(markdown: str) -> str:
    """An element's markdown body as the reader sees it: the app escapes user-supplied text (backslashes
    before punctuation, invisible word joiners inside would-be autolinks)."""
    import re

    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")
