"""Live charts without reruns: a page publishes a feed of its live charts, and the browser polls it.

Redrawing a live chart by rerunning a Streamlit fragment runs the fragment's script on the server and
re-renders every element of the fragment in the browser: on a 2-core machine, a share of a core taken from
the training. So a page publishes a *feed*: a
function, called by the server's route (not by a script run), that says what the live parts show now: a
progress bar, charts, a small table (the Compare grid's runs). The browser's live parts (live_chart.js) poll
the route five times a second (less often, down to once a second, while nothing changes: a run queued or
paused), and only a chart whose version changed is built and sent. A feed also gives a
*stamp* of what the page's own widgets show (a run's status, its place in the queue, which charts it has).
When the stamp differs from the one the page was drawn with, the browser reruns the fragment that drew the
part once (`stale()`), so the buttons and messages follow.

app/server.py serves the route (`route()`). Where it does not (Streamlit's AppTest, `streamlit run
app/streamlit_app.py`), `served` is False and pages redraw on their timers.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from explorer_app import plotly_js

MAX_FEEDS = 256  # feeds kept at once (one per browser session and page that follows a job); least recently read go first
IDLE_S = 1800.0  # a feed nobody read for this long is dropped
MAX_QUERY = 4096  # the longest `have` query accepted (a page has a handful of charts)
POLL_S = 0.2  # how often the browser asks while the page shows an active run

served = False  # True once app/server.py serves route()
_feeds: OrderedDict[str, Feed] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class Chart:
    """One live chart of a feed's state: `build()` draws it (a plotly Figure), called only when `version`
    is new to the feed."""

    version: str
    build: Callable[[], Any]


@dataclass(frozen=True)
class Table:
    """A live table: column names, rows of cells (text or numbers, shown as text), and the column whose numbers
    (0 to 100) are drawn as progress bars."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    progress_column: str | None = None

    def to_data(self) -> dict:
        return {"columns": list(self.columns), "rows": [list(row) for row in self.rows],
                "progress_column": self.progress_column}


@dataclass(frozen=True)
class State:
    """What a feed's live parts show now: the page's stamp, whether the run may still change, the progress
    bar (fraction, text), the charts by name and a table (small: sent whole at every read, like the progress)."""

    stamp: str
    active: bool
    progress: tuple[float, str] | None = None
    charts: dict[str, Chart] = field(default_factory=dict)
    table: Table | None = None


@dataclass(frozen=True)
class Link:
    """What a live part on the page needs to follow a feed: the feed's URL, the part's name in it, the
    version the page drew and the page's stamp; `drawn` orders links in time (the browser keeps the stamp of
    the newest: a part that Streamlit hands its earlier data again must not wind the page's stamp back)."""

    url: str
    part: str
    version: str
    stamp: str
    drawn: int = field(default_factory=lambda: time.monotonic_ns() // 1000)  # microseconds: exact in a JS number

    def to_data(self) -> dict:
        return {"url": self.url, "part": self.part, "version": self.version, "stamp": self.stamp,
                "drawn": self.drawn, "period_ms": int(POLL_S * 1000)}


class Feed:
    """A published source and the charts it last built (shared by the polls of one page)."""

    def __init__(self, source: Callable[[], State], key: Hashable = None):
        self.source, self.key = source, key
        self.read_at = time.monotonic()
        self._built: dict[str, tuple[str, str]] = {}  # chart -> (version, figure JSON)
        self._lock = threading.Lock()

    def read(self, have: dict[str, str]) -> dict:
        """The state as JSON-ready data, with the charts whose version differs from `have`'s."""
        with self._lock:
            self.read_at = time.monotonic()
            state = self.source()
            charts = {}
            for name, chart in state.charts.items():
                if self._built.get(name, (None,))[0] != chart.version:
                    self._built[name] = (chart.version, chart.build().to_json())
                if have.get(name) != chart.version:
                    charts[name] = {"version": chart.version, "figure": self._built[name][1]}
            progress = None if state.progress is None else {"fraction": state.progress[0], "text": state.progress[1]}
            table = None if state.table is None else state.table.to_data()
            return {"stamp": state.stamp, "active": state.active, "progress": progress, "charts": charts,
                    "table": table}


def publish(source: Callable[[], State], token: str | None = None, key: Hashable = None) -> str:
    """Serve `source` under `token` (replacing what it served) or under a new unguessable token; returns the
    token. A page keeps its token across reruns, so its parts keep polling one URL. `key` says what the
    source shows (e.g. a run and the page's chart options): a feed already serving the same key is kept,
    with the figures it built."""
    with _lock:
        _drop_idle()
        if token is None or token not in _feeds:
            token = secrets.token_urlsafe(16)
        kept = _feeds.get(token)
        if key is None or kept is None or kept.key != key:
            _feeds[token] = Feed(source, key)
        _feeds.move_to_end(token)
        while len(_feeds) > MAX_FEEDS:
            _feeds.popitem(last=False)
    return token


def read(token: str, have: dict[str, str]) -> dict | None:
    """What the feed `token` shows now (None: no such feed, or it was dropped)."""
    with _lock:
        feed = _feeds.get(token)
        if feed is not None:
            _feeds.move_to_end(token)
    return None if feed is None else feed.read(have)


def _drop_idle() -> None:
    cutoff = time.monotonic() - IDLE_S
    for token in [token for token, feed in _feeds.items() if feed.read_at < cutoff]:
        del _feeds[token]


def url(token: str) -> str:
    return plotly_js.under_base(f"live/{token}")


def link(token: str | None, part: str, version: str, stamp: str) -> Link | None:
    """The link a live part follows, or None where no feed is served (the page's timer redraws it)."""
    return Link(url(token), part, version, stamp) if served and token else None


# ---- the page's side: the browser found the stamp changed ----------------------------------------

STALE_KEY = "explorer-live-stale"


def mark_stale() -> None:
    """A live part's callback: the page's widgets no longer show the run's state."""
    st.session_state[STALE_KEY] = True


def stale() -> bool:
    """Whether a live part asked for a rerun since the last call (its fragment reruns; the Train page then
    reruns whole)."""
    return bool(st.session_state.pop(STALE_KEY, False))


# ---- the server's side ---------------------------------------------------------------------------

def route():
    """The Starlette route GET <base>/live/{token}?have={"chart": version, ...}; making it switches the
    feeds on. 404: no such feed (the page publishes a new one when it reruns)."""
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    global served

    def live(request):  # a plain function: Starlette runs it in a thread, off the server's event loop
        query = request.query_params.get("have", "{}")
        try:
            have = json.loads(query) if len(query) <= MAX_QUERY else None
        except ValueError:
            have = None
        if not isinstance(have, dict) or not all(isinstance(v, str) for v in have.values()):
            return Response("have must be a JSON object of chart versions", status_code=400)
        body = read(request.path_params["token"], have)
        if body is None:
            return Response("no such feed", status_code=404)
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    served = True
    return Route(url("{token}"), live)
