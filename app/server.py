"""The web app's server: `streamlit run app/server.py` serves app/streamlit_app.py, warmed up.

Streamlit runs a page's script only when a browser opens it, so the first visitor of a fresh
server would wait for torch, pandas and the library to import (about 2 s on an idle 2-core CPU,
5 s under load) before the first widget appears. This `st.App` imports them in its start-up
lifespan instead, before the server answers its first request: the server takes those seconds
to start, and every page paints as soon as its own script has run. `streamlit run
app/streamlit_app.py` still works, without the warm-up.
"""

import contextlib
import gc
import importlib

import streamlit as st

# What every page needs: the modules streamlit_app.py imports, and the app's own helpers.
WARM = ("numpy", "pandas", "plotly.graph_objects", "torch", "explorer", "explorer.papers", "explorer_app.figures",
        "explorer_app.jobs", "explorer_app.limits", "explorer_app.messages", "explorer_app.spec_form",
        "explorer_app.state", "explorer_app.uploads")


@contextlib.asynccontextmanager
async def warm_up(app):
    """Import WARM once, and draw one figure (plotly builds its templates and validators on first use, 0.7 s),
    before the server answers its first request; then freeze what that made out of the garbage collector's
    scans."""
    for name in WARM:
        importlib.import_module(name)
    from explorer import plots

    plots.loss_curves([{"label": "warm-up", "history": [{"step": 0, "loss": 1.0}]}], title="warm-up").to_json()
    start_first_worker()
    # The 300,000 objects those imports made live as long as the server: moved out of the collector's reach,
    # a full collection takes microseconds instead of 0.2 s (the server has one interpreter for all pages).
    gc.collect()
    gc.freeze()
    yield


def start_first_worker() -> None:
    """Start one training worker now, beside these imports: it imports torch and trains a two-step warm-up
    (about 5 s of a core), so a click on Train on a fresh server need not wait for it. The other workers
    start after the first page that trains (streamlit_app.py)."""
    from explorer_app.limits import LimitError, limits
    from explorer_app.workers import shared_pool

    try:
        max_jobs = limits().max_jobs
    except LimitError:  # every page says what is misconfigured
        return
    shared_pool(max_jobs).warm(count=1)


app = st.App("streamlit_app.py", lifespan=warm_up)
