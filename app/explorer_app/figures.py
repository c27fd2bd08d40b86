"""Show a plotly figure with its downloads (interactive HTML, and PNG rendered only when asked for), and the
other parts of a page that follow a run: a progress bar and a small table.

Figures that change while the page is open (a training run's loss, heatmap and probe charts) are live
parts: a small component (live_chart.js, with the plotly.js that app/server.py serves, plotly_js.py) keeps
one chart and updates it in place, and, given a feed link (live_feed.py), follows the run by polling the
server instead of waiting for the page's reruns; progress bars and tables (a Compare grid's runs) follow a
feed the same way. The other figures, and every part when app/server.py does not serve the app
(`streamlit run app/streamlit_app.py`, Streamlit's AppTest), are drawn by Streamlit's own elements
(st.plotly_chart, st.progress, st.dataframe).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from explorer import plots
from explorer_app import live_feed, plotly_js

CONFIG = {"displaylogo": False}


@functools.cache
def _live_part():
    """The live parts' mount command, registered once per server."""
    return st.components.v2.component("explorer_live_chart", js=Path(__file__).with_name("live_chart.js").read_text(),
                                      isolate_styles=False)  # not in a shadow root: plotly.js styles the document


def progress(fraction: float, text: str, key: str, feed: live_feed.Link | None = None) -> None:
    """A progress bar; given a feed link it follows the feed's progress between the page's reruns."""
    if feed is None:
        st.progress(fraction, text=text)
        return
    _live_part()(data={"kind": "progress", "progress": {"fraction": fraction, "text": text}, "feed": feed.to_data()},
                 key=f"progress-{key}", on_stale_change=live_feed.mark_stale)


def table(rows: list[dict], key: str, progress_column: str | None = None, feed: live_feed.Link | None = None) -> None:
    """A small table of `rows` (dicts with the same keys), `progress_column`'s values (0-100) drawn as bars.
    Where the app's server serves the live parts it is one, following `feed` between the page's reruns;
    elsewhere st.dataframe draws it."""
    if not live_feed.served:
        config = {progress_column: st.column_config.ProgressColumn(progress_column, min_value=0, max_value=100,
                                                                   format="%.0f%%")} if progress_column else None
        st.dataframe(rows, hide_index=True, key=f"table-{key}", column_config=config, placeholder="-")
        return
    _live_part()(data={"kind": "table", "table": live_table(rows, progress_column).to_data(),
                       "feed": feed.to_data() if feed else None},
                 key=f"table-{key}", on_stale_change=live_feed.mark_stale)


def live_table(rows: list[dict], progress_column: str | None = None) -> live_feed.Table:
    """`rows` as a live table's columns and cells: numbers to 4 significant digits (the progress column's
    as they are), None as an empty cell."""
    columns = tuple(rows[0]) if rows else ()

    def cell(column, value):
        if value is None or column == progress_column or isinstance(value, (bool, int, str)):
            return value
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return live_feed.Table(columns, tuple(tuple(cell(c, row.get(c)) for c in columns) for row in rows), progress_column)


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "figure"


def show(fig: go.Figure, key: str, name: str | None = None, downloads: bool = True, live: bool = False,
         feed: live_feed.Link | None = None, current: Callable[[], go.Figure] | None = None) -> None:
    """Draw `fig` full width; below it, HTML and PNG download buttons (file names from `name`).

    `live`: the figure changes while the page is open; it is updated in place where the server serves
    plotly.js, instead of remounted at every redraw, and follows `feed` (a live_feed link) between reruns.
    `current()`: the figure as it is when a download is clicked (a live chart's moves on after the page drew
    it; default `fig`). The PNG is rendered on click (kaleido + Chromium); without kaleido the button is
    disabled and says what to install (the chart's own camera button still saves a PNG from the browser).
    """
    if live and plotly_js.served:
        _live_part()(data={"kind": "chart", "figure": fig.to_json(), "src": plotly_js.served, "config": CONFIG,
                           "feed": feed.to_data() if feed else None},
                     key=f"chart-{key}", on_stale_change=live_feed.mark_stale)
    else:
        st.plotly_chart(fig, key=f"chart-{key}", config=CONFIG, theme=None)
    if not downloads:
        return
    current = current or (lambda: fig)
    stem = _file_stem(name or (fig.layout.title.text or key))
    row = st.container(horizontal=True)  # buttons as wide as their labels: narrow columns cut them to "H.."
    row.download_button("Download HTML", data=lambda: plots.to_html_bytes(current()), file_name=f"{stem}.html",
                        mime="text/html", key=f"html-{key}", on_click="ignore", icon=":material/download:")
    row.download_button("Download PNG", data=lambda: plots.to_png_bytes(current()), file_name=f"{stem}.png",
                        mime="image/png", key=f"png-{key}", on_click="ignore", icon=":material/download:",
                        disabled=not _png_export_installed(), help=None if _png_export_installed() else plots.PNG_FIX)


@functools.cache  # asked at every redraw of every figure: a search of sys.path each time
def _png_export_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None
