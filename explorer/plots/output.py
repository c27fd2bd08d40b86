"""Figures leaving the process: files and bytes (`export`, `to_html_bytes`, `to_png_bytes`; HTML embeds
plotly.js, PNG needs kaleido and a browser) and notebook output (`notebook_mode`, `figure_bundle`, `show_in`,
`training_progress`), so a figure exported from a notebook still draws offline."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import plotly.graph_objects as go

from explorer.plots.common import _number

PNG_FIX = (
    "PNG export needs the optional `kaleido` package and a Chromium/Chrome browser: "
    "`pip install kaleido`, plus a browser (Debian: `apt-get install chromium`, or run "
    "`plotly_get_chrome`)."
)


def _png_ready() -> None:
    if importlib.util.find_spec("kaleido") is None:
        raise RuntimeError(f"kaleido is not installed. {PNG_FIX}")


def to_html_bytes(fig: go.Figure) -> bytes:
    """The figure as a self-contained HTML page (plotly.js embedded, works offline), UTF-8 bytes."""
    return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")


def to_png_bytes(fig: go.Figure) -> bytes:
    """The figure as PNG bytes; RuntimeError naming the fix when kaleido or a browser is missing."""
    _png_ready()
    try:
        return fig.to_image(format="png")
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise RuntimeError(f"PNG export failed ({exc}). {PNG_FIX}") from exc


def export(fig: go.Figure, path: str | Path) -> Path:
    """Write `fig` to `path`: self-contained HTML for ".html", PNG for ".png"; returns the path.

    HTML embeds plotly.js (no CDN) so the file opens offline. PNG needs kaleido and a
    Chromium/Chrome browser; without them this raises RuntimeError naming the fix.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        fig.write_html(path, include_plotlyjs=True, full_html=True)
    elif suffix == ".png":
        _png_ready()
        try:
            fig.write_image(path, format="png")
        except Exception as exc:
            raise RuntimeError(f"PNG export failed ({exc}). {PNG_FIX}") from exc
    else:
        raise ValueError(f"path must end with .html or .png, got {str(path)!r}")
    return path


RENDERER = "explorer"  # the plotly renderer `notebook_mode()` registers and makes the default


def figure_bundle(fig: go.Figure) -> dict[str, Any]:
    """The MIME bundle a notebook output of `fig` carries: plotly's JSON and an HTML fallback.

    JupyterLab draws the plotly JSON (interactive, with the jupyterlab-plotly renderer); an export
    (`jupyter nbconvert --to html`, the notebooks' static site) or a code host that only knows
    HTML uses `text/html`: the figure's div and the script that draws it, without plotly.js
    itself, which `notebook_mode()` puts in the notebook once.
    """
    from plotly.io import to_html
    from plotly.io.base_renderers import PlotlyRenderer

    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else dict(fig)
    bundle = PlotlyRenderer().to_mimebundle(dict(fig_dict))
    bundle["text/html"] = to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                                  default_width="100%", default_height=525, validate=False)
    return bundle


def _plotly_js_once() -> None:
    """Display plotly.js inline (no CDN) in the current cell: the HTML fallbacks draw with it."""
    from IPython.display import HTML, display
    from plotly.offline import get_plotlyjs

    display(HTML("<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"
                 f"<script type=\"text/javascript\">{get_plotlyjs()}</script>"))


def notebook_mode() -> None:
    """Make every figure a notebook shows survive export (call once, in a notebook's first cell).

    Registers and selects the plotly renderer `RENDERER`, whose output carries both plotly's JSON
    and an HTML fallback (`figure_bundle`), and shows plotly.js once, inline, in the calling cell,
    so an exported notebook draws its figures offline. Without it `fig.show()` writes the plotly
    JSON alone, which `nbconvert --to html` and code hosts drop.
    """
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class _Renderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return figure_bundle(go.Figure(fig_dict, skip_invalid=True))

    pio.renderers[RENDERER] = _Renderer()
    pio.renderers.default = RENDERER
    _plotly_js_once()


def show_in(out: Any, *items: Any) -> None:
    """Replace what an `ipywidgets.Output` shows with `items` (figures and strings), in order.

    The widget's outputs are set directly (a figure as `figure_bundle`, a string as text), so the
    figure redraws in JupyterLab (where `out.append_display_data(fig)` left an empty entry: a
    plotly figure displays itself in the running cell instead) and under nbclient (where
    `with out:` capture can stall the cell, jupyter/nbclient#312).
    """
    outputs = []
    for item in items:
        if isinstance(item, str):
            outputs.append({"output_type": "stream", "name": "stdout", "text": item if item.endswith("\n") else item + "\n"})
        elif isinstance(item, go.Figure):
            outputs.append({"output_type": "display_data", "data": figure_bundle(item), "metadata": {}})
        else:
            raise ValueError(f"show_in takes plotly figures and strings, got {type(item).__name__}")
    out.outputs = tuple(outputs)


PROGRESS_WIDTH = 30  # characters of a notebook widget's text progress bar


def training_progress(out: Any, label: str, total: int) -> Callable[[Any], None]:
    """A callback for `explorer.train(spec, callbacks=[...])` that shows the run's progress in the notebook
    widget's `ipywidgets.Output` `out`: a text bar, the step and the last logged loss, updated at every logged
    step (`train.log_every`). It replaces what `out` showed, so the previous figure does not sit there while the
    next run trains; draw the new figure with `show_in` when the run returns. Reads only the event's `kind`,
    `step` and `metrics`."""
    total = max(int(total), 1)
    show_in(out, f"{label}: starting...")

    def on_event(event: Any) -> None:
        if event.kind not in ("log", "end"):
            return
        done = min(max(int(event.step), 0), total)
        filled = round(PROGRESS_WIDTH * done / total)
        loss = _number((event.metrics or {}).get("loss"))
        text = f"{label}: [{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] step {done} of {total}"
        text += f", loss {loss:.4g}" if loss is not None else ""
        show_in(out, text + (" - done, drawing..." if event.kind == "end" else ""))

    return on_event
