"""Image grids of what a model computes inside: attention weights per block and head (`attention_maps`)
and RGB feature maps, e.g. PCA of a skip vs a skipless model's features (`pca_grid`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.plots.common import _FMT, _finish, _spacing


def attention_maps(maps: Any, title: str, max_heads: int = 4) -> go.Figure:
    """Grid of attention-weight heatmaps: rows = blocks (1 = first), columns = the first `max_heads` heads.

    `maps` is (blocks, heads, T, T) or (heads, T, T) with rows = queries, columns = keys. All
    panels share one colour scale fixed at 0..1 so weights compare across layers and heads.
    """
    try:
        a = np.asarray(maps, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"maps must be a numeric array: {exc}") from None
    if a.ndim == 3:
        a = a[None]
    if a.ndim != 4 or a.shape[-1] != a.shape[-2] or 0 in a.shape:
        raise ValueError(f"maps must be (blocks, heads, T, T) or (heads, T, T), got shape {np.shape(maps)}")
    if int(max_heads) < 1:
        raise ValueError(f"max_heads must be >= 1, got {max_heads}")
    layers, heads = a.shape[:2]
    shown = min(heads, int(max_heads))
    fig = make_subplots(
        rows=layers, cols=shown,
        subplot_titles=[f"block {l + 1}, head {h + 1}" for l in range(layers) for h in range(shown)],
        horizontal_spacing=_spacing(shown, 0.04), vertical_spacing=_spacing(layers, 0.08),
    )
    for l in range(layers):
        for h in range(shown):
            fig.add_trace(go.Heatmap(
                z=a[l, h], zmin=0.0, zmax=1.0, colorscale="Viridis", showscale=(l == 0 and h == 0),
                colorbar=dict(title=dict(text="weight")), name=f"block {l + 1} head {h + 1}",
                hovertemplate=(f"block {l + 1}, head {h + 1}<br>query %{{y}}<br>key %{{x}}"
                               f"<br>weight %{{z:{_FMT}}}<extra></extra>"),
            ), row=l + 1, col=h + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="key position", row=layers)
    fig.update_yaxes(title_text="query position", col=1)
    suffix = f" (first {shown} of {heads} heads)" if shown < heads else ""
    return _finish(fig, title + suffix, height=max(350, 230 * layers + 120), width=max(450, 230 * shown + 150))


def pca_grid(images: Any, row_labels: Sequence[str], col_labels: Sequence[str], title: str,
             inputs: Any = None) -> go.Figure:
    """A rows x cols grid of RGB images, e.g. PCA feature maps of a skip vs a skipless model side by side.

    `images` is (rows, cols, H, W, 3) float RGB in [0, 1]; each panel is a `go.Image` whose z is
    the image scaled to 0..255 (uint8), the range `go.Image` expects. Row labels go on the
    left, column labels above the top row. `inputs` (cols, H', W', 3) in [0, 1], e.g. the `pca`
    probe's `images`, adds a first row "images" with the images the maps were computed from (at
    their own resolution: each panel keeps its aspect ratio, so a 4 x 4 map sits under its 16 x 16 image).
    """
    arr = _rgb("images", images, 5)
    rows, cols = arr.shape[:2]
    if len(row_labels) != rows:
        raise ValueError(f"row_labels has {len(row_labels)} entries for {rows} rows")
    if len(col_labels) != cols:
        raise ValueError(f"col_labels has {len(col_labels)} entries for {cols} columns")
    grid, names = list(arr), [str(r) for r in row_labels]
    if inputs is not None:
        first = _rgb("inputs", inputs, 4)
        if len(first) < cols:
            raise ValueError(f"inputs has {len(first)} images for {cols} columns")
        grid, names = [first[:cols], *grid], ["images", *names]
    fig = make_subplots(rows=len(grid), cols=cols, column_titles=[str(c) for c in col_labels],
                        horizontal_spacing=_spacing(cols, 0.02),
                        vertical_spacing=_spacing(len(grid), 0.04))
    for r, row in enumerate(grid):
        pixels = np.round(np.clip(row, 0.0, 1.0) * 255).astype(np.uint8)
        for c in range(cols):
            fig.add_trace(go.Image(
                z=pixels[c], name=f"{names[r]} / {col_labels[c]}",
                hovertemplate=(f"{names[r]} / {col_labels[c]}<br>pixel x %{{x}}, y %{{y}}"
                               "<br>RGB %{z}<extra></extra>"),
            ), row=r + 1, col=c + 1)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    for r, label in enumerate(names):
        fig.update_yaxes(title_text=label, row=r + 1, col=1)
    return _finish(fig, title, height=max(300, 200 * len(grid) + 100), width=max(400, 200 * cols + 120))


def _rgb(name: str, images: Any, ndim: int) -> np.ndarray:
    """`images` as a float array of `ndim` dimensions ending in RGB, every value finite and in [0, 1]."""
    try:
        arr = np.asarray(images, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array: {exc}") from None
    shape = "(rows, cols, H, W, 3)" if ndim == 5 else "(images, H, W, 3)"
    if arr.ndim != ndim or arr.shape[-1] != 3 or 0 in arr.shape:
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
        raise ValueError(f"{name} must hold finite RGB values in [0, 1]")
    return arr
