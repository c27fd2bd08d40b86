"""Plotly figure builders for probe results and training histories.

Every function here is a pure function of plain Python / numpy inputs (so it does not depend
on the rest of the package) and returns a `plotly.graph_objects.Figure`; nothing here trains,
probes or decomposes anything, it only lays out numbers that were computed elsewhere. The
Streamlit app and the notebooks share these builders so a figure looks the same in both. A probe's
figures are declared beside the probe with `figure_for` (this module imports no probe); `probe_figures`
looks them up, and draws a probe that declared none as a table of its numbers.

Conventions shared by every figure:

* `template="plotly_white"`, a title saying what is shown, axis titles naming the quantity and
  its scale ("(log scale)"), and a hovertemplate that shows the exact values (6 significant
  digits).
* One colour per run: `run_colors(labels)` assigns colours from a fixed qualitative palette in
  label order, and every multi-run builder takes an optional `colors` mapping (label -> colour)
  so the app can keep the same colour for a run across all of its figures.
* Bad input raises ValueError naming the offending argument.
* Blocks are numbered 1..L as the spec counts them (`explorer.nn.base.n_blocks`; for a Transformer L =
  `model.depth`, a block being attention + MLP at either `model.level`). The embedded input, where a
  figure draws it, is labelled "input", never "block 0". Where a probe measures sub-blocks (the
  `norms` probe on a Transformer at module level, e.g. skipless) each keeps its own entry, labelled
  "block 3 attn" and "block 3 mlp", rather than being summed away. The probes return these labels
  (`labels`) or whole-block indices (the `pca` probe's `blocks`: 0 = the input, b = after block b),
  and every figure shows them as they are: axis categories, row titles, hover text.

`export`, `to_html_bytes` and `to_png_bytes` save figures. HTML is self-contained (plotly.js
is embedded, no CDN) because the app must work offline; PNG needs the optional `kaleido`
package and a Chromium/Chrome browser, and raises RuntimeError saying so when they are missing.

One module per figure family, each re-exported here (import from `explorer.plots`): `common` (template,
colours, number formats, axis styles, title wrapping), `curves` (training curves, closed-form curves),
`coefficients` (the connection-coefficient heatmap and its mass summary), `spectral` (spectra, singular-value
histograms, norms by depth, ranks, dead weights), `features` (attention maps, feature-map grids),
`probe_results` (the probe figure registry and the generic table), `output` (files, bytes and notebook
output) and `claims` (verdict tables, claim figures, the grid heatmap).
"""

from __future__ import annotations

from explorer.plots.claims import (
    CLAIM_MEASURES, GRID_METRICS, PER_SEED_SHOWN, VERDICT_STYLES, claim_figure, grid_figure, mode_difference,
    per_seed_summary, recorded_table, verdict_table,
)
from explorer.plots.coefficients import (
    COEFFICIENT_BASES, FORCED_GREY, MAX_CELL_TEXT, MAX_PATH_SIZE, MAX_PATHS_SHOWN, MAX_TERMS_SHOWN, MAX_TICK_LABELS,
    NO_PREFERENCE, coefficient_basis, coefficient_heatmap, mass_summary,
)
from explorer.plots.common import (
    MAX_DECADE_LABELS, NUMERICAL_ZERO, PALETTE, TEMPLATE, TITLE_LINE_CHARS, run_colors, wrap_title,
)
from explorer.plots.curves import ema, loss_curves, theory_curves
from explorer.plots.features import attention_maps, pca_grid
from explorer.plots.output import (
    PNG_FIX, PROGRESS_WIDTH, RENDERER, export, figure_bundle, notebook_mode, show_in, to_html_bytes, to_png_bytes,
    training_progress,
)
from explorer.plots.probe_results import PROBE_FIGURES, figure_for, numbers_table, probe_figures, state_labels
from explorer.plots.spectral import dead_weights, log_singular_value_histograms, norms_by_layer, rank_plot, spectra

__all__ = [
    "PALETTE",
    "PROBE_FIGURES",
    "attention_maps",
    "coefficient_basis",
    "coefficient_heatmap",
    "ema",
    "dead_weights",
    "export",
    "figure_bundle",
    "figure_for",
    "log_singular_value_histograms",
    "loss_curves",
    "mass_summary",
    "grid_figure",
    "GRID_METRICS",
    "notebook_mode",
    "norms_by_layer",
    "numbers_table",
    "pca_grid",
    "probe_figures",
    "rank_plot",
    "run_colors",
    "show_in",
    "spectra",
    "state_labels",
    "theory_curves",
    "to_html_bytes",
    "to_png_bytes",
    "training_progress",
    "verdict_table",
    "wrap_title",
    "claim_figure",
    "per_seed_summary",
    # the constants the figures are drawn with, and the claims' helpers the notebooks' tables use
    "NUMERICAL_ZERO",
    "TEMPLATE",
    "MAX_DECADE_LABELS",
    "TITLE_LINE_CHARS",
    "COEFFICIENT_BASES",
    "MAX_CELL_TEXT",
    "MAX_PATHS_SHOWN",
    "MAX_PATH_SIZE",
    "MAX_TERMS_SHOWN",
    "FORCED_GREY",
    "MAX_TICK_LABELS",
    "NO_PREFERENCE",
    "PNG_FIX",
    "RENDERER",
    "PROGRESS_WIDTH",
    "VERDICT_STYLES",
    "recorded_table",
    "mode_difference",
    "PER_SEED_SHOWN",
    "CLAIM_MEASURES",
]
