"""Show a plotly figure with its downloads (interactive HTML, and PNG rendered only when asked for)."""

from __future__ import annotations

import functools
import importlib.util
import re

import plotly.graph_objects as go
import streamlit as st

from explorer import plots


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "figure"


def show(fig: go.Figure, key: str, name: str | None = None, downloads: bool = True) -> None:
    """Draw `fig` full width; below it, HTML and PNG download buttons (file names from `name`).

    The PNG is rendered on click (kaleido + Chromium); without kaleido the button is disabled and says
    what to install (the chart's own camera button still saves a PNG from the browser).
    """
    st.plotly_chart(fig, key=f"chart-{key}", config={"displaylogo": False}, theme=None)
    if not downloads:
        return
    stem = _file_stem(name or (fig.layout.title.text or key))
    row = st.container(horizontal=True)  # buttons as wide as their labels: narrow columns cut them to "H.."
    row.download_button("Download HTML", data=lambda: plots.to_html_bytes(fig), file_name=f"{stem}.html",
                         mime="text/html", key=f"html-{key}", on_click="ignore", icon=":material/download:")
    row.download_button("Download PNG", data=lambda: plots.to_png_bytes(fig), file_name=f"{stem}.png",
                          mime="image/png", key=f"png-{key}", on_click="ignore", icon=":material/download:",
                          disabled=not _png_export_installed(), help=None if _png_export_installed() else plots.PNG_FIX)


@functools.cache  # asked at every redraw of every figure: a search of sys.path each time
def _png_export_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None
