"""The web app's server: `streamlit run app/server.py` serves app/streamlit_app.py, warmed up.

Streamlit runs a page's script only when a browser opens it, so the first visitor of a fresh
server would wait for torch, pandas and the library to import (about 2 s on an idle 2-core CPU,
5 s under load) before the first widget appears. This `st.App` imports them in its start-up
lifespan instead, before the server answers its first request: the server takes those seconds
to start, and every page paints as soon as its own script has run. `streamlit run
app/streamlit_app.py` still works, without the warm-up.
"""

import asyncio
import contextlib
import gc
import importlib

import streamlit as st

from explorer_app import live_feed, plotly_js

# What every page needs: the modules streamlit_app.py imports, and the app's own helpers.
WARM = ("numpy", "pandas", "plotly.graph_objects", "torch", "explorer", "explorer.papers", "explorer_app.figures",
        "explorer_app.jobs", "explorer_app.limits", "explorer_app.messages", "explorer_app.spec_form",
        "explorer_app.state", "explorer_app.uploads")


FIRST_WORKER_WAIT_S = 60.0  # the longest the server holds its start for its first training worker


@contextlib.asynccontextmanager
async def warm_up(app):
    """Before the server answers its first request: start the first training worker, import WARM meanwhile
    and draw one figure (plotly builds its templates and validators on first use, 0.7 s), freeze what that
    made out of the garbage collector's scans, and wait for the worker to be ready. The worker imports torch
    and trains a two-step warm-up (about 5 s of one core) on the other core while this process imports; once
    the server answers, a click on Train has a worker, and the first page's paint does not share the CPU
    with one starting (measured: both got 2-5 s slower when the worker started after the server)."""
    pool = start_first_worker()
    for name in WARM:
        importlib.import_module(name)
    from explorer import plots

    plots.loss_curves([{"label": "warm-up", "history": [{"step": 0, "loss": 1.0}]}], title="warm-up").to_json()
    # The 300,000 objects those imports made live as long as the server: moved out of the collector's reach,
    # a full collection takes microseconds instead of 0.2 s (the server has one interpreter for all pages).
    gc.collect()
    gc.freeze()
    if pool is not None:
        await asyncio.to_thread(pool.wait_started, 1, FIRST_WORKER_WAIT_S)
    yield


def start_first_worker():
    """Start one training worker in the background; its pool (None when the server's limits are
    misconfigured: every page then says what is wrong). The other workers start after the first page that
    trains (streamlit_app.py)."""
    from explorer.settings import SettingError
    from explorer_app.limits import limits
    from explorer_app.workers import shared_pool

    try:
        max_jobs = limits().max_jobs
    except SettingError:
        return None
    pool = shared_pool(max_jobs)
    pool.warm(count=1)
    return pool


app = st.App("streamlit_app.py", lifespan=warm_up, routes=[plotly_js.route(), live_feed.route()])
