"""What the Theory page's sections share: showing a figure after the page's first paint, and small plotly helpers
for bounds drawn against curves."""

from __future__ import annotations

import math
import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from explorer_app import figures

FIRST_PAINT_S = 0.4  # a session's first visit: how long the text and sliders have to themselves (see `show`)


def show(fig: go.Figure, key: str, name: str) -> None:
    """`figures.show`, from the page's second run on in a session. The first run stops at its first figure,
    waits FIRST_PAINT_S and reruns: the browser paints the text and sliders before it loads and runs plotly.js
    (4.7 MB), which held the first slider back (first slider on a fresh server, 2-core machine, medians of 6:
    2.14 s -> 1.59 s; the figures come about half a second later)."""
    if not st.session_state.get("theory-painted"):
        st.session_state["theory-painted"] = True
        time.sleep(FIRST_PAINT_S)  # what came before is on its way to the browser: let it paint
        st.rerun()
    figures.show(fig, key=key, name=name)


def finite(values) -> np.ndarray:
    """`values` as floats with inf replaced by NaN, so plotly leaves a gap instead of failing to scale."""
    arr = np.asarray(values, dtype=float)
    return np.where(np.isfinite(arr), arr, np.nan)


def dash(fig: go.Figure, names: list[str]) -> None:
    """Draw the named traces dashed (bounds, or the second curve of a pair)."""
    for name in names:
        fig.update_traces(line_dash="dash", selector=dict(name=name))


def overlap(fig: go.Figure, below: str, above: str, x, y_below, y_above, xname: str) -> str:
    """Draw `above` dashed over a wider `below`, so two curves that nearly coincide both show, and say by how much
    they differ (the largest gap and where it is), so a reader knows the second line is there and how close it is."""
    fig.update_traces(line_width=4, selector=dict(name=below))
    fig.update_traces(line_dash="dash", line_width=2, selector=dict(name=above))
    gap = np.abs(np.asarray(y_below, dtype=float) - np.asarray(y_above, dtype=float))
    if not np.isfinite(gap).any():
        return ""
    i = int(np.nanargmax(np.where(np.isfinite(gap), gap, np.nan)))
    scale = np.nanmax(np.abs(np.concatenate([np.ravel(y_below), np.ravel(y_above)]).astype(float)))
    return (f"{below} (wide) and {above} (dashed over it) differ by at most {gap[i]:.3g} "
            f"(at {xname} = {float(np.ravel(x)[i]):.3g}), against values up to {scale:.4g}.")


def mark_x(fig: go.Figure, x: float, text: str, log: bool = False) -> None:
    """A dotted vertical line at data value x, labelled at the top (annotations on a log axis take log10 of x)."""
    fig.add_vline(x=x, line_dash="dot")
    fig.add_annotation(x=math.log10(x) if log else x, y=1, yref="paper", yanchor="bottom", text=text, showarrow=False)
