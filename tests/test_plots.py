"""Tests of explorer.plots: the figures carry exactly the input numbers, labelled and coloured consistently."""

import base64
import importlib.util
import math
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

import explorer
from explorer import plots
from conftest import plotly_array
from test_probes import applicable


def _run(label, losses, status="finished", diverged_at=None, val=None, every=10):
    history = []
    for i, loss in enumerate(losses):
        row = {"step": i * every, "loss": loss, "time": 0.1 * i}
        if val is not None:
            row["val_loss"] = val[i]
        history.append(row)
    return {"label": label, "history": history, "status": status, "diverged_at": diverged_at}


def _f(values):
    return np.asarray(values, dtype=float)


# --------------------------------------------------------------------------- colours


def test_run_colors_stable_and_distinct():
    a = plots.run_colors(["skip", "skipless", "ancre"])
    assert a == plots.run_colors(["skip", "skipless", "ancre"])
    assert len(set(a.values())) == 3
    assert a["skip"] == plots.PALETTE[0] and a["ancre"] == plots.PALETTE[2]
    many = plots.run_colors([f"r{i}" for i in range(12)])
    assert len(set(many.values())) == 12  # 12 spectra: no colour repeats
    more = plots.run_colors([f"r{i}" for i in range(len(plots.PALETTE) + 1)])
    assert more[f"r{len(plots.PALETTE)}"] == plots.PALETTE[0]  # cycles past the palette


def test_colors_mapping_keeps_one_colour_per_run_across_figures():
    colors = plots.run_colors(["A", "B", "C"])
    # figure 1 shows A and C, figure 2 shows C and B: C must keep its colour
    fig1 = plots.loss_curves([_run("A", [1.0, 0.5]), _run("C", [1.0, 0.7])], colors=colors)
    fig2 = plots.spectra({"C": [3.0, 1.0], "B": [2.0, 1.0]}, "spectra", colors=colors)
    c1 = {t.legendgroup: t.line.color for t in fig1.data}
    c2 = {t.name: t.line.color for t in fig2.data}
    assert c1["C"] == c2["C"] == colors["C"]
    assert c1["A"] == colors["A"] and c2["B"] == colors["B"]
    # without a mapping, the same labels in the same order give the same colours
    f = plots.norms_by_layer({"x": [1, 2], "y": [2, 3]}, "n")
    g = plots.theory_curves([0, 1], {"x": [0, 1], "y": [1, 2]}, "t", "depth", "value")
    assert [t.line.color for t in f.data] == [t.line.color for t in g.data]
    # a label missing from the mapping gets a colour the mapping does not use
    h = plots.spectra({"A": [1.0], "new": [1.0]}, "s", colors={"A": plots.PALETTE[0]})
    assert h.data[1].line.color != plots.PALETTE[0]


# --------------------------------------------------------------------------- loss curves


def test_loss_curves_values_log_axes_and_nonfinite_dropped():
    losses = [2.0, 1.5, float("nan"), None, float("inf"), 0.8]
    run = _run("skip", losses, val=[2.1, 1.6, 1.4, None, 1.2, 1.1])
    fig = plots.loss_curves([run])
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 2  # train + dashed val
    train, val = fig.data
    np.testing.assert_array_equal(_f(train.y), [2.0, 1.5, 0.8])
    # log-x: plotted at step + 1, the true step in customdata, the axis title says so
    np.testing.assert_array_equal(_f(train.x), [1, 11, 51])
    np.testing.assert_array_equal(_f(train.customdata), [0, 10, 50])
    assert "step + 1" in fig.layout.xaxis.title.text
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "log" in fig.layout.yaxis.title.text
    np.testing.assert_array_equal(_f(val.y), [2.1, 1.6, 1.4, 1.2, 1.1])
    assert val.line.dash == "dash" and val.line.color == train.line.color
    assert "%{y:" in train.hovertemplate and "skip" in fig.layout.title.text
    assert fig.layout.title.text and fig.layout.yaxis.title.text == "loss (log scale)"


def test_loss_curves_linear_axes_and_options():
    run = _run("r", [1.0, 0.0, -1.0], val=[1.0, 1.0, 1.0])
    fig = plots.loss_curves([run], metric="loss", log_x=False, log_y=False, show_val=False)
    assert len(fig.data) == 1
    assert fig.layout.xaxis.type == "linear" and fig.layout.yaxis.type == "linear"
    np.testing.assert_array_equal(_f(fig.data[0].x), [0, 10, 20])
    np.testing.assert_array_equal(_f(fig.data[0].y), [1.0, 0.0, -1.0])  # kept on a linear axis
    logged = plots.loss_curves([run], log_y=True, show_val=False)
    np.testing.assert_array_equal(_f(logged.data[0].y), [1.0])  # non-positive cannot go on log-y
    acc = plots.loss_curves([{"label": "r", "status": "finished", "diverged_at": None,
                              "history": [{"step": 0, "accuracy": 0.1, "val_accuracy": 0.2}]}],
                            metric="accuracy", log_y=False)
    assert [t.name for t in acc.data] == ["r", "r (val_accuracy)"]


def test_loss_curves_marks_divergence():
    diverged = _run("bad", [2.0, 1.9, 5.0, float("nan")], status="diverged", diverged_at=23)
    fig = plots.loss_curves([_run("good", [2.0, 1.0]), diverged])
    names = [t.name for t in fig.data]
    assert "bad (diverged at step 23)" in names and "good" in names
    markers = [t for t in fig.data if t.name == "bad: diverged"]
    assert len(markers) == 1
    marker = markers[0]
    assert marker.marker.symbol == "x" and marker.text == ("diverged at step 23",)
    assert list(marker.x) == [24] and list(marker.customdata) == [23]  # step 23, drawn at step + 1
    # the exploded value is unknown: the marker sits above everything plotted (the old one sat at 5.0,
    # inside the curves, so the explosion was invisible)
    plotted = [v for t in fig.data if t is not marker for v in t.y]
    assert marker.y[0] > max(plotted)
    line = next(t for t in fig.data if t.name.startswith("bad"))
    assert marker.marker.color == line.line.color
    lin = plots.loss_curves([diverged], log_x=False)
    assert list(next(t for t in lin.data if t.name == "bad: diverged").x) == [23]
    # diverged at step 0 with nothing finite: still marked, nothing plotted as 0
    dead = _run("dead", [float("nan")], status="diverged", diverged_at=0)
    fig = plots.loss_curves([dead])
    assert len(fig.data[0].y) == 0 and fig.data[1].marker.symbol == "x"


def test_loss_curves_draws_divergence_at_the_exploded_loss():
    """A run that blew up from 255 to 1.8e8 (what the trainer records as diverged_loss): the marker is at
    1.8e8 and the axis reaches it, not a 255.5-258 axis with the marker at its bottom."""
    run = {**_run("tau", [255.6, 255.9], status="diverged", diverged_at=3), "diverged_loss": 1.8e8}
    fig = plots.loss_curves([run]).to_dict()
    marker = next(t for t in fig["data"] if t["name"] == "tau: diverged")
    assert marker["y"][0] == pytest.approx(1.8e8)
    assert fig["layout"]["yaxis"]["type"] == "log" and fig["layout"]["yaxis"]["exponentformat"] == "power"
    # the legend sits below the plot, so "tau (diverged at step 3)" is not clipped in a narrow column
    assert fig["layout"]["legend"]["orientation"] == "h" and fig["layout"]["legend"]["y"] < 0


def test_loss_curves_bad_input():
    with pytest.raises(ValueError, match="runs"):
        plots.loss_curves([])
    with pytest.raises(ValueError, match="runs"):
        plots.loss_curves([{"history": []}])
    with pytest.raises(ValueError, match="runs"):
        plots.loss_curves([_run("a", [1.0]), _run("a", [1.0])])


# --------------------------------------------------------------------------- coefficients


def test_coefficient_heatmap_values_labels_and_triangle():
    m = np.arange(16, dtype=float).reshape(4, 4) - 5
    fig = plots.coefficient_heatmap(m, "ANCRe coefficients (run skip)")
    assert len(fig.data) == 1 and isinstance(fig.data[0], go.Heatmap)
    expected = m.copy()
    expected[np.triu_indices(4, k=1)] = np.nan
    np.testing.assert_array_equal(_f(fig.data[0].z), expected)
    assert list(fig.data[0].x) == ["input", "block 1", "block 2", "block 3"]
    assert list(fig.data[0].y) == ["input", "block 1", "block 2", "block 3"]  # rows are states too: cell (j, i) is i:j
    assert fig.data[0].zmid == 0  # diverging scale centred at 0
    assert fig.layout.title.text == "ANCRe coefficients (run skip)"
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert m[0, 1] == -4  # the input is not modified


def test_coefficient_heatmap_log_ratio():
    c = np.tril(np.array([[1.0, 0, 0], [0.5, 2.0, 0], [0.0, 1.0, 4.0]]))
    with np.errstate(divide="ignore"):
        lr = np.log(c / c.max(axis=0))
    fig = plots.coefficient_heatmap(lr, "log ratio", log_ratio=True)
    z = _f(fig.data[0].z)
    assert np.isnan(z[2, 0])  # -inf (a zero coefficient) is blank
    assert np.isnan(z[0, 1]) and np.isnan(z[0, 2]) and np.isnan(z[1, 2])
    assert z[1, 0] == pytest.approx(math.log(0.5)) and z[2, 2] == 0
    assert fig.data[0].zmax == 0 and fig.data[0].zmid is None
    with pytest.raises(ValueError, match="matrix"):
        plots.coefficient_heatmap(c, "raw coefficients are not log ratios", log_ratio=True)


def test_a_depth_30_heatmap_labels_at_most_max_tick_labels_states_per_axis():
    n = 31  # the states x_0 .. x_30
    fig = plots.coefficient_heatmap(np.tril(np.full((n, n), 0.5)), "coefficients")
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert 2 <= len(axis.tickvals) <= plots.MAX_TICK_LABELS and len(axis.ticktext) == len(axis.tickvals)
        assert axis.tickvals[0] == "input" and axis.ticktext[0].startswith("x₀")
    assert fig.layout.yaxis.ticktext[1] == "x₂ block 2"  # every other state: x_0, x_2, ...
    small = plots.coefficient_heatmap(np.tril(np.ones((5, 5))), "coefficients")
    assert list(small.layout.xaxis.tickvals) == ["input", "block 1", "block 2", "block 3", "block 4"]


def test_long_titles_of_the_heatmap_and_the_jacobian_figure_wrap_within_title_line_chars():
    title = "Shortcut coefficients (unrolled) at step 1200 of tau 1/L^0.25 at depth 30, lr 0.01, seed 3"
    heatmap = plots.coefficient_heatmap(np.tril(np.ones((4, 4))), title)
    (jacobian,) = plots.probe_figures("jacobian", {"singular_values": np.ones((4, 8)), "chi": np.full(4, 76.87)},
                                      "step 1200")
    for fig, words in ((heatmap, title), (jacobian, "step 1200: input-output Jacobian spectrum (mean χ = 76.87)")):
        lines = fig.layout.title.text.split("<br>")
        assert len(lines) >= 2 and max(map(len, lines)) <= plots.TITLE_LINE_CHARS, lines
        assert " ".join(lines) == words  # the same words, only broken
    assert plots.wrap_title("short") == "short"
    assert plots.wrap_title("a<br><sub>kept as it is, however long the line with a tag in it is</sub>", 10) == \
        "a<br><sub>kept as it is, however long the line with a tag in it is</sub>"


def test_coefficient_heatmap_bad_input():
    with pytest.raises(ValueError, match="matrix"):
        plots.coefficient_heatmap(np.zeros((3, 4)), "t")
    with pytest.raises(ValueError, match="matrix"):
        plots.coefficient_heatmap(np.zeros(3), "t")
    with pytest.raises(ValueError, match="blocks"):
        plots.coefficient_heatmap(np.zeros((3, 3)), "t", blocks=["a", "b", "c"])
    fig = plots.coefficient_heatmap(np.zeros((3, 3)), "t", blocks=["block 1 attn", "block 1 mlp"])
    assert list(fig.data[0].x) == ["input", "block 1 attn", "block 1 mlp"]
    assert list(fig.data[0].y) == ["input", "block 1 attn", "block 1 mlp"]


# --------------------------------------------------------------------------- spectra, norms, ranks


def test_spectra_values_and_log_axis():
    curves = {"skip": np.array([4.0, 2.0, 1.0]), "skipless": np.array([9.0, 0.1, 0.01, 0.001])}
    fig = plots.spectra(curves, "Singular values of W_1")
    assert len(fig.data) == 2
    for trace, (label, y) in zip(fig.data, curves.items()):
        assert trace.name == label
        np.testing.assert_array_equal(_f(trace.y), y)
        np.testing.assert_array_equal(_f(trace.x), np.arange(1, len(y) + 1))
    assert fig.layout.yaxis.type == "log"
    assert plots.spectra(curves, "t", log_y=False).layout.yaxis.type == "linear"
    with pytest.raises(ValueError, match="curves"):
        plots.spectra({"a": np.ones((2, 2))}, "t")
    with pytest.raises(ValueError, match="curves"):
        plots.spectra({}, "t")


def test_log_singular_value_histograms():
    rng = np.random.default_rng(0)
    per_epoch = [(f"epoch {e}", rng.lognormal(size=30)) for e in range(4)]
    per_epoch.append(("epoch 4", np.array([1.0, 10.0, 0.0, 100.0])))
    fig = plots.log_singular_value_histograms(per_epoch, "IDInit Fig. 18")
    assert len(fig.data) == 5 and all(isinstance(t, go.Histogram) for t in fig.data)
    for trace, (_, sv) in zip(fig.data[:4], per_epoch):
        np.testing.assert_allclose(_f(trace.x), np.log10(sv))
    np.testing.assert_allclose(_f(fig.data[4].x), [0.0, 1.0, 2.0])  # the zero is left out
    assert "omitted" in fig.layout.annotations[4].text
    assert len({(t.xbins.start, t.xbins.size) for t in fig.data}) == 1  # shared bins
    # every column's bottom panel (xaxis3 sits above an empty cell) names the x quantity
    for axis in ("xaxis3", "xaxis4", "xaxis5"):
        assert "log10" in fig.layout[axis].title.text
    with pytest.raises(ValueError, match="per_epoch"):
        plots.log_singular_value_histograms([], "t")
    with pytest.raises(ValueError, match="per_epoch"):
        plots.log_singular_value_histograms([("a", np.ones((2, 2)))], "t")


def test_norms_by_layer():
    curves = {"skip": [1.0, 1.1, 1.3], "skipless": [1.0, 0.5, 0.2]}
    fig = plots.norms_by_layer(curves, "Forward norm by block", log_y=True)
    assert len(fig.data) == 2
    np.testing.assert_array_equal(_f(fig.data[1].y), curves["skipless"])
    assert list(fig.data[0].x) == ["block 1", "block 2", "block 3"]  # blocks count from 1
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.yaxis.title.text == "relative norm (log scale)"
    assert "block" in fig.layout.xaxis.title.text
    named = plots.norms_by_layer({"a": [1.0, 2.0, 3.0], "b": [1.0]}, "t", labels=["input", "block 1", "block 2"])
    assert list(named.data[0].x) == ["input", "block 1", "block 2"] and list(named.data[1].x) == ["input"]
    assert list(named.layout.xaxis.categoryarray) == ["input", "block 1", "block 2"]
    with pytest.raises(ValueError, match="labels"):
        plots.norms_by_layer({"a": [1.0, 2.0]}, "t", labels=["block 1"])


def test_rank_plot():
    fig = plots.rank_plot(["W1", "W2", "W3"], [3, 8, 1], [4, 8, 16], "Numerical rank")
    assert len(fig.data) == 2 and all(isinstance(t, go.Bar) for t in fig.data)
    full, rank = fig.data
    np.testing.assert_array_equal(_f(full.y), [4, 8, 16])
    np.testing.assert_array_equal(_f(rank.y), [3, 8, 1])
    assert list(rank.x) == ["W1", "W2", "W3"] and fig.layout.barmode == "overlay"
    with pytest.raises(ValueError, match="ranks"):
        plots.rank_plot(["W1"], [1, 2], [2, 2], "t")
    with pytest.raises(ValueError, match="full_ranks"):
        plots.rank_plot(["W1"], [1], [2, 2], "t")
    with pytest.raises(ValueError, match="ranks"):
        plots.rank_plot(["W1"], [5], [4], "t")


def test_theory_curves():
    x = np.linspace(1, 10, 5)
    fig = plots.theory_curves(x, {"bound": x ** 2, "exact": x}, "Theorem 4.2", "rank", "excess risk",
                              log_x=True, log_y=True)
    assert len(fig.data) == 2
    np.testing.assert_array_equal(_f(fig.data[0].x), x)
    np.testing.assert_array_equal(_f(fig.data[0].y), x ** 2)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.title.text.startswith("rank")
    with pytest.raises(ValueError, match="curves"):
        plots.theory_curves(x, {"bad": x[:3]}, "t", "x", "y")


# --------------------------------------------------------------------------- grids


def test_attention_maps_grid():
    rng = np.random.default_rng(1)
    maps = rng.random((3, 6, 5, 5))
    maps /= maps.sum(-1, keepdims=True)
    fig = plots.attention_maps(maps, "Attention (run skipless)", max_heads=4)
    assert len(fig.data) == 3 * 4
    assert all(isinstance(t, go.Heatmap) and t.zmin == 0 and t.zmax == 1 for t in fig.data)
    np.testing.assert_array_equal(_f(fig.data[0].z), maps[0, 0])
    np.testing.assert_array_equal(_f(fig.data[4 * 2 + 3].z), maps[2, 3])  # layer 3, head 4
    assert sum(bool(t.showscale) for t in fig.data) == 1  # one shared colour bar
    assert "query" in fig.data[0].hovertemplate and "key" in fig.data[0].hovertemplate
    assert "4 of 6" in fig.layout.title.text
    single = plots.attention_maps(maps[0, :2], "one layer")
    assert len(single.data) == 2


def test_attention_maps_bad_input():
    with pytest.raises(ValueError, match="maps"):
        plots.attention_maps(np.zeros((4, 4)), "t")
    with pytest.raises(ValueError, match="maps"):
        plots.attention_maps(np.zeros((1, 2, 3, 4, 4)), "t")
    with pytest.raises(ValueError, match="maps"):
        plots.attention_maps(np.zeros((2, 3, 4)), "t")
    with pytest.raises(ValueError, match="max_heads"):
        plots.attention_maps(np.zeros((2, 4, 4)), "t", max_heads=0)


def test_pca_grid():
    rng = np.random.default_rng(2)
    images = rng.random((2, 3, 6, 5, 3))
    fig = plots.pca_grid(images, ["skip", "skipless"], ["img 1", "img 2", "img 3"], "PCA of features")
    assert len(fig.data) == 6 and all(isinstance(t, go.Image) for t in fig.data)
    np.testing.assert_array_equal(np.asarray(fig.data[1 * 3 + 2].z), np.round(images[1, 2] * 255))
    texts = [a.text for a in fig.layout.annotations]
    assert texts == ["img 1", "img 2", "img 3"]
    assert fig.layout.yaxis.title.text == "skip" and fig.layout.yaxis4.title.text == "skipless"
    with pytest.raises(ValueError, match="images"):
        plots.pca_grid(images[0], ["a"], ["b"], "t")
    with pytest.raises(ValueError, match="images"):
        plots.pca_grid(images * 2, ["a", "b"], ["1", "2", "3"], "t")
    with pytest.raises(ValueError, match="row_labels"):
        plots.pca_grid(images, ["a"], ["1", "2", "3"], "t")
    with pytest.raises(ValueError, match="col_labels"):
        plots.pca_grid(images, ["a", "b"], ["1"], "t")


def test_pca_grid_draws_the_input_images_as_its_first_row():
    rng = np.random.default_rng(3)
    maps, inputs = rng.random((2, 3, 4, 4, 3)), rng.random((5, 16, 16, 3))
    fig = plots.pca_grid(maps, ["block 1", "block 2"], ["a", "b", "c"], "t", inputs=inputs)
    assert len(fig.data) == 9 and fig.layout.yaxis.title.text == "images"
    assert fig.layout.yaxis4.title.text == "block 1" and fig.layout.yaxis7.title.text == "block 2"
    np.testing.assert_array_equal(np.asarray(fig.data[2].z), np.round(inputs[2] * 255))  # input row, column c
    np.testing.assert_array_equal(np.asarray(fig.data[3 + 1].z), np.round(maps[0, 1] * 255))
    with pytest.raises(ValueError, match="inputs"):
        plots.pca_grid(maps, ["1", "2"], ["a", "b", "c"], "t", inputs=inputs[:2])
    with pytest.raises(ValueError, match="inputs"):
        plots.pca_grid(maps, ["1", "2"], ["a", "b", "c"], "t", inputs=inputs[..., 0])


# --------------------------------------------------------------------------- all figures


def test_every_figure_uses_the_white_template_and_has_titles():
    figures = [
        plots.loss_curves([_run("a", [1.0, 0.5])]),
        plots.coefficient_heatmap(np.eye(3), "c"),
        plots.spectra({"a": [2.0, 1.0]}, "s"),
        plots.log_singular_value_histograms([("e", [1.0, 2.0])], "h"),
        plots.norms_by_layer({"a": [1.0]}, "n"),
        plots.rank_plot(["W"], [1], [2], "r"),
        plots.attention_maps(np.full((1, 2, 2), 0.5), "att"),
        plots.pca_grid(np.zeros((1, 1, 2, 2, 3)), ["r"], ["c"], "p"),
        plots.theory_curves([1, 2], {"a": [1, 2]}, "t", "x", "y"),
    ]
    for fig in figures:
        assert isinstance(fig, go.Figure)
        assert fig.layout.template == pio.templates["plotly_white"]
        assert fig.layout.title.text
        assert all(t.hovertemplate for t in fig.data)


# --------------------------------------------------------------------------- export


def _no_cdn(html: str) -> None:
    assert not re.search(r"<script[^>]*src=[\"'][^\"']*cdn\.plot\.ly", html)
    assert "<script" in html and len(html) > 1_000_000  # plotly.js is embedded


def test_export_html_is_self_contained(tmp_path, no_network):
    fig = plots.spectra({"marker-run": [123.456789, 0.000987654]}, "t")
    path = plots.export(fig, tmp_path / "fig.html")
    html = path.read_text(encoding="utf-8")
    _no_cdn(html)
    # plotly stores numeric arrays as base64 of their bytes: the data is in the file
    y = np.array([123.456789, 0.000987654])
    assert "marker-run" in html and base64.b64encode(y.tobytes()).decode() in html
    data = plots.to_html_bytes(fig)
    assert isinstance(data, bytes)
    _no_cdn(data.decode("utf-8"))
    with pytest.raises(ValueError, match="path"):
        plots.export(fig, tmp_path / "fig.svg")


def test_png_export_works_or_names_the_fix(tmp_path):
    fig = plots.norms_by_layer({"a": [1.0, 2.0]}, "t")
    if importlib.util.find_spec("kaleido") is None:
        with pytest.raises(RuntimeError, match="pip install kaleido") as info:
            plots.to_png_bytes(fig)
        assert "chromium" in str(info.value).lower()
        with pytest.raises(RuntimeError, match="pip install kaleido"):
            plots.export(fig, tmp_path / "fig.png")
        assert not (tmp_path / "fig.png").exists()
        return
    try:  # kaleido is there; a browser may not be
        data = plots.to_png_bytes(fig)
    except RuntimeError as exc:
        assert "chromium" in str(exc).lower()
        return
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    path = plots.export(fig, tmp_path / "fig.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_with_a_single_logged_point_is_drawn_with_a_marker():
    fig = plots.loss_curves([{"label": "short", "history": [{"step": 0, "loss": 2.0, "val_loss": 2.1}]},
                             {"label": "long", "history": [{"step": 0, "loss": 2.0}, {"step": 5, "loss": 1.0}]}])
    modes = {trace.name: trace.mode for trace in fig.data}
    assert modes == {"short": "lines+markers", "short (val_loss)": "lines+markers", "long": "lines"}


def test_spectra_draw_numerical_zeros_on_a_floor_with_a_note():
    sv = np.array([3.0, 1.0, 0.2, 1e-21, 1e-54])
    fig = plots.spectra({"W": sv}, "spectrum").to_dict()
    floor = plots.NUMERICAL_ZERO * 3.0
    line = next(t for t in fig["data"] if t["name"] == "W")
    zeros = next(t for t in fig["data"] if t["name"] == "W: numerical zeros")
    np.testing.assert_allclose(plotly_array(line["y"])[:3], sv[:3])
    assert np.isnan(plotly_array(line["y"])[3:]).all()
    np.testing.assert_allclose(plotly_array(zeros["y"]), [floor, floor])
    np.testing.assert_allclose(plotly_array(zeros["customdata"]), sv[3:])  # the true values, on hover
    assert any("2 numerical zero" in a["text"] for a in fig["layout"]["annotations"])
    plotted = np.concatenate([plotly_array(t["y"]) for t in fig["data"]])
    assert np.nanmin(plotted) >= floor * (1 - 1e-9)  # the axis no longer reaches 1e-54
    # one exponent format on every log axis, labels at powers of ten only
    assert fig["layout"]["yaxis"]["exponentformat"] == "power" and fig["layout"]["yaxis"]["dtick"] == 1
    # nothing below the floor: no note
    assert not plots.spectra({"W": sv[:3]}, "s").layout.annotations


def test_one_log_axis_format_across_figures():
    runs = [_run("a", [2.0, 1.0, 0.5])]
    figs = [plots.loss_curves(runs), plots.norms_by_layer({"a": [1.0, 10.0, 100.0]}, "n", log_y=True),
            plots.theory_curves([1, 10, 100], {"a": [1.0, 2.0, 3.0]}, "t", "x", "y", log_x=True, log_y=True),
            plots.spectra({"a": [5.0, 1.0]}, "s")]
    for fig in figs:
        for axis in ("xaxis", "yaxis"):
            layout = fig.to_dict()["layout"][axis]
            if layout.get("type") == "log":
                assert layout["exponentformat"] == "power", (fig.layout.title.text, axis)
                assert layout.get("dtick") == 1 or layout.get("tickmode") == "array"
    # many decades (a linear net's loss from 10 down to float32's floor): every second power, labels apart
    deep = plots.loss_curves([_run("a", [10.0, 1e-3, 1e-9, 1e-14])]).layout.yaxis
    assert deep.dtick == 2 and deep.exponentformat == "power"
    # less than a decade: round labels inside the range, not every digit ("8 9 1") and never none at all
    for low, high in ((1.0, 2.0), (1.21, 1.58), (0.0213, 0.0241), (3e-5, 2.9e-4), (7.0, 7.0)):
        axis = plots.norms_by_layer({"a": [low, (low + high) / 2, high]}, "n", log_y=True).layout.yaxis
        inside = [t for t in axis.tickvals if low / 1.3 <= t <= high * 1.3]
        assert 3 <= len(inside) <= 7 and len(inside) == len(axis.tickvals), (low, high, axis.tickvals)
        steps = np.diff(axis.tickvals)
        assert np.allclose(steps, steps[0]), axis.tickvals  # evenly spaced round values
        assert list(axis.ticktext) == [f"{t:.4g}" for t in axis.tickvals]


def test_learnable_topology_heatmap_defaults_to_the_learned_coefficients():
    own = np.array([[0.0, 0, 0], [1.0, 0, 0], [0.1, 0.9, 0]])
    unrolled = np.array([[1.0, 0, 0], [1.0, 1.0, 0], [1.0, 1.0, 1.0]])  # ANCRe ingoing: all ones
    result = {"own": own, "unrolled": unrolled, "log_ratio": np.zeros((3, 3)), "learnable": np.array(True)}
    fig = plots.probe_figures("coefficients", result)[0]
    z = plotly_array(fig.to_dict()["data"][0]["z"]).reshape(3, 3)
    np.testing.assert_allclose(z[np.tril_indices(3)], own[np.tril_indices(3)])
    assert "learned" in fig.layout.title.text
    fixed = plots.probe_figures("coefficients", {**result, "learnable": np.array(False)})[0]
    np.testing.assert_allclose(plotly_array(fixed.to_dict()["data"][0]["z"]).reshape(3, 3)[np.tril_indices(3)],
                               unrolled[np.tril_indices(3)])
    assert plots.coefficient_basis(result, "log_ratio") == "log_ratio"
    with pytest.raises(ValueError, match="basis"):
        plots.coefficient_basis(result, "rows")


def test_dead_weights_chart_is_labelled_as_dead_weights():
    fig = plots.dead_weights(["W1", "W2"], [3, 0], [12, 8], "dead").to_dict()
    np.testing.assert_allclose(plotly_array(fig["data"][0]["y"]), [0.25, 0.0])
    assert "dead weights" in fig["layout"]["yaxis"]["title"]["text"]
    assert "rank" not in fig["layout"]["yaxis"]["title"]["text"]
    probe = plots.probe_figures("dead", {"names": np.array(["W1"]), "dead_weights": np.array([1]),
                                         "total_weights": np.array([4])})[0]
    assert "dead weights" in probe.layout.yaxis.title.text


def test_numerical_zeros_are_relative_to_each_matrix():
    """A small matrix's spectrum beside a large one's is not a numerical zero."""
    fig = plots.spectra({"small": [1e-3, 1e-4], "large": [1e9, 1.0, 1e-40]}, "s")
    names = [t.name for t in fig.data]
    assert "small: numerical zeros" not in names and "large: numerical zeros" in names
    np.testing.assert_allclose(plotly_array(fig.to_dict()["data"][0]["y"]), [1e-3, 1e-4])


def test_a_difference_is_drawn_on_its_own_axis():
    """02's width figure: DCA - Transformer (about 0.001) in its own panel, not on the losses' axis."""
    fig = plots.theory_curves([16, 32, 64], {"Transformer": [2.5, 2.3, 2.1], "DCA": [2.499, 2.299, 2.098],
                                             "DCA - Transformer": [-0.001, -0.001, -0.002]},
                              "w", "width", "loss", log_x=True, difference=["DCA - Transformer"],
                              difference_label="gain").to_dict()
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["DCA - Transformer"]["yaxis"] == "y2" and by_name["DCA"].get("yaxis", "y") == "y"
    assert fig["layout"]["yaxis2"]["title"]["text"] == "gain"
    with pytest.raises(ValueError, match="difference"):
        plots.theory_curves([1], {"a": [1.0]}, "t", "x", "y", difference=["b"])


def test_verdict_table_shows_each_verdict_in_its_colour_and_escapes_text():
    rows = [{"id": "a", "section": "Thm 1", "verdict": "holds", "measured": {"rate": 0.51234, "||W||": 2.0},
             "expected": "rate < 1 and ||W|| <= 2", "note": "fine", "seconds": 1.5},
            {"id": "b", "verdict": "inconclusive", "measured": {"gap": 0.01}, "per_seed": [0.02, -0.01, 0.01],
             "rule": "holds when every seed's gap > 0"},
            {"id": "c", "verdict": "does-not-hold", "summary": "skip <b>0.93</b>, skipless 0.08 val acc"},
            {"id": "d", "verdict": "not-tested"},
            {"verdict": "error", "note": "ValueError: x\nTraceback (most recent call last): ..."}]
    table = plots.verdict_table(rows)
    assert table.count("<tr>") == 6  # a header and one row each, missing fields tolerated
    green = plots.VERDICT_STYLES["holds"][0]
    inconclusive = re.search(r"verdict-inconclusive' style='color:([^']+)'", table).group(1)
    assert inconclusive != green and inconclusive == plots.VERDICT_STYLES["inconclusive"][0]
    assert "seed 0: 0.02" in table and "seed 1: -0.01" in table
    assert "rate</b>: 0.5123" in table
    assert "||W|| &lt;= 2" in table and "<= 2" not in table  # text, not markup
    assert "Traceback" not in table
    assert "does not hold at this scale" in table
    assert "skip &lt;b&gt;0.93&lt;/b&gt;, skipless 0.08 val acc" in table  # the one-line summary, as text
    assert "verdict-not-tested' style='color:" + plots.VERDICT_STYLES["not-tested"][0] in table


def test_loss_curves_smoothing_draws_the_ema_over_a_faint_raw_curve():
    losses = [4.0, 1.0, 3.0, 0.5]
    fig = plots.loss_curves([_run("r", losses)], smoothing=0.5, show_val=False)
    raw = next(t for t in fig.data if t.name == "r (raw)")
    main = next(t for t in fig.data if t.name == "r")
    assert list(raw.y) == losses and raw.opacity < 1 and raw.showlegend is False
    # hand EMA, debiased: s1 = 4; s2 = (0.5*2 + 0.5*1)/(1-0.25) = 2; s3 = (0.5*1.5 + 1.5)/(0.875)
    s1, s2, s3 = 0.5 * 4.0, 0.5 * (0.5 * 4.0) + 0.5 * 1.0, None
    s3 = 0.5 * s2 + 0.5 * 3.0
    np.testing.assert_allclose(list(main.y)[:3], [s1 / 0.5, s2 / 0.75, s3 / 0.875])
    assert [t.name for t in plots.loss_curves([_run("r", losses)], show_val=False).data] == ["r"]
    with pytest.raises(ValueError, match="smoothing"):
        plots.loss_curves([_run("r", losses)], smoothing=1.0)


# --------------------------------------------------------------------------- probe figures


@pytest.mark.parametrize("name", list(explorer.registry("probes")))
def test_every_probe_result_draws_titled_figures(name):
    _, _, _, result = applicable(name)
    figures = plots.probe_figures(name, result, "step 7")
    assert figures and all(isinstance(fig, go.Figure) for fig in figures)
    for fig in figures:
        assert fig.layout.title.text.startswith("step 7: ")
        assert fig.layout.template == pio.templates["plotly_white"]
        assert fig.data and fig.to_json()  # something drawn, and the app can send it to the browser


def test_declared_figures_are_of_registered_probes():
    assert set(plots.PROBE_FIGURES) <= set(explorer.registry("probes"))
    with pytest.raises(ValueError, match="declared twice"):
        plots.figure_for(next(iter(plots.PROBE_FIGURES)))(lambda r, head: [])


def test_a_probe_without_a_figure_is_drawn_as_a_table_of_its_numbers():
    result = {"chi": np.float64(1.234567), "per_input": np.arange(20, dtype=float) / 3,
              "maps": np.ones((2, 3)), "names": np.array(["W1", "W2"])}
    [fig] = plots.probe_figures("not-declared", result, "run a")
    assert "not-declared" in fig.layout.title.text and fig.layout.title.text.startswith("run a: ")
    names, shapes, values = fig.data[0].cells.values
    assert list(names) == list(result) and list(shapes) == ["scalar", "20", "2 x 3", "2"]
    assert values[0] == "1.235" and values[3] == "W1, W2"
    shown = values[1].split(", ")
    assert shown[:12] == [f"{v:.4g}" for v in result["per_input"][:12]] and shown[-1] == "... (20 values)"


def test_a_declared_figure_is_what_probe_figures_draws(monkeypatch):
    monkeypatch.setitem(plots.PROBE_FIGURES, "from-a-test", lambda r, head: [
        plots.norms_by_layer({"x": r["x"]}, f"{head}x by block")])
    [fig] = plots.probe_figures("from-a-test", {"x": [1.0, 2.0]}, "run b")
    assert fig.layout.title.text == "run b: x by block"
    np.testing.assert_allclose(plotly_array(fig.to_dict()["data"][0]["y"]), [1.0, 2.0])


def test_a_divergence_label_stays_inside_the_plot():
    """The label "diverged at step N" opens away from the nearer edge of the x range: a run that diverged at its
    last logged step (the right edge) is labelled to the left of its marker, an early divergence in a longer
    comparison to the right; the label is never clipped by the axes."""
    last = {**_run("tau", [255.6, 255.9], status="diverged", diverged_at=3, every=1), "diverged_loss": 1.8e8}
    for log_x in (True, False):
        alone = plots.loss_curves([last], log_x=log_x)
        marker = next(t for t in alone.data if t.name == "tau: diverged")
        assert marker.textposition == "bottom left" and marker.cliponaxis is False
    beside = plots.loss_curves([_run("long", [2.0] * 50), last], log_x=False)
    marker = next(t for t in beside.data if t.name == "tau: diverged")
    assert marker.textposition == "bottom right" and marker.cliponaxis is False


def test_the_numerical_zeros_note_sits_inside_the_figure_off_the_floor():
    """The note is placed in the plot's own (paper) coordinates, in its top corner, not on the floor where the
    numerical zeros' markers are, and is short enough per line to fit a narrow column."""
    sv = np.array([3.0, 1.0, 0.2, 1e-21, 1e-54])
    fig = plots.spectra({"W": sv}, "spectrum").to_dict()
    [note] = [a for a in fig["layout"]["annotations"] if "numerical zero" in a["text"]]
    assert note["xref"] == "paper" and note["yref"] == "paper"
    assert 0.0 <= note["x"] <= 1.0 and 0.5 <= note["y"] <= 1.0
    assert note["xanchor"] == "right" and note["yanchor"] == "top"
    assert max(len(line) for line in note["text"].split("<br>")) <= 70


def test_training_progress_shows_each_logged_step_in_the_widget_output():
    """The notebook widgets' progress: the Output shows a bar, the step and the loss at every logged step of a
    real run, replacing what it showed before, and the last text reaches the run's final step."""

    class Output:  # what show_in writes to: an ipywidgets.Output's `outputs`
        outputs = ({"output_type": "display_data", "data": {"text/plain": "the previous figure"}},)

    out, seen = Output(), []
    callback = plots.training_progress(out, "tiny", 12)
    assert "the previous figure" not in str(out.outputs)  # replaced as soon as the run is set up

    def record(event):
        callback(event)
        seen.append(out.outputs[0]["text"])

    spec = explorer.preset("idinit-fig5-idiz").with_values({"train.steps": 12, "train.log_every": 4})
    run = explorer.train(spec, callbacks=[record])
    logged = [row["step"] for row in run.history]
    for step, row in zip(logged, run.history):
        assert any(f"step {step} of 12, loss {row['loss']:.4g}" in text for text in seen), (step, seen)
    assert f"[{'#' * plots.PROGRESS_WIDTH}] step 12 of 12" in seen[-1] and "done" in seen[-1]


# --------------------------------------------------------------------------- claim verdicts: layout and figures


def _recorded_rows():
    """The full-mode rows recorded with the package: real claim runs, every paper."""
    from explorer.papers.claims import recorded

    return recorded()["rows"]


def test_verdict_table_puts_the_summary_first_why_visible_and_the_rule_folded():
    import html

    for row in _recorded_rows():
        table = plots.verdict_table([row], show_claim=False)
        measured = re.search(r"<div class='measured'[^>]*>(.*?)</div>", table)
        assert measured and measured.group(1).strip(), row["id"]  # never an empty measured line
        assert table.index("class='measured'") < table.index("class='why'") < table.index("<details class='rule'")
        folded = re.search(r"<details class='rule'[^>]*><summary>rule</summary>(.*?)</details>", table).group(1)
        assert html.escape(row["rule"]) in folded and "threshold:" in folded  # only inside the toggle
        assert html.escape(row["rule"]) not in table.replace(folded, "")
        if row["per_seed"]:  # a nested table: a line per quantity, a column per seed
            nested = re.search(r"<table class='per-seed'.*?</table>", table).group(0)
            n_seeds = max(len(v) for v in row["per_seed"].values())
            assert len(re.findall(r"<th[ >]", nested)) == n_seeds + 1 and nested.count("<tr>") == len(row["per_seed"]) + 1


def test_verdict_table_falls_back_to_the_per_seed_summary_and_escapes_it():
    import html

    per_seed = {"val acc <b> / final loss": [[0.8, 0.3], [0.7, None]], "steps a<b": [10, 20]}
    table = plots.verdict_table([{"verdict": "inconclusive", "per_seed": per_seed, "reason": "x < y"}])
    line = re.search(r"<div class='measured'[^>]*>(.*?)</div>", table).group(1)
    assert line == html.escape(plots.per_seed_summary(per_seed)) and "val acc &lt;b&gt;" in line
    assert "0.75 (0.7 to 0.8)" in line and "15 (10 to 20)" in line  # each part of a list-valued entry, averaged
    assert "0.8 /<br>0.3" in table and "0.7 /<br>—" in table  # the seeds' pairs in the nested table, stacked
    assert "x &lt; y" in table and "<b>" not in line


def test_claim_figure_draws_every_measured_per_seed_value_once_and_nothing_else():
    for row in _recorded_rows():
        fig = plots.claim_figure(row)
        numbers = [v for values in row["per_seed"].values() for item in values
                   for v in (item if isinstance(item, list) else [item])
                   if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not numbers:
            assert fig is None, row["id"]
            continue
        drawn = sorted(float(x) for trace in fig.data for x in plotly_array(trace.x))
        assert drawn == sorted(float(v) for v in numbers), row["id"]
        assert fig.layout.template == pio.templates["plotly_white"] and fig.layout.title.text
        assert all("seed" in t.hovertemplate for t in fig.data)
        n_seeds = max(len(v) for v in row["per_seed"].values())
        assert {t.name for t in fig.data} <= {f"seed {i}" for i in range(n_seeds)}


def test_claim_figure_puts_accuracies_and_losses_on_their_own_axes():
    row = next(r for r in _recorded_rows() if r["id"] == "fig1-threshold")
    fig = plots.claim_figure(row)
    titles = {name: fig.layout[name].title.text for name in fig.layout if name.startswith("xaxis")}
    assert "accuracy" in titles.values() and "loss" in titles.values()
    by_axis = {}
    for trace in fig.data:
        by_axis.setdefault(trace.xaxis, set()).update(label.replace("<br>", " ") for label in trace.y)
    accuracy_axis = next(n for n, t in titles.items() if t == "accuracy").replace("axis", "")
    assert all("val acc" in label and "loss" not in label for label in by_axis[accuracy_axis])
    wide = next(r for r in _recorded_rows() if r["id"] == "chi-at-init")  # 1 against 4e7: a log axis
    assert plots.claim_figure(wide).layout.xaxis.type == "log"
    assert plots.claim_figure({"verdict": "not-tested", "per_seed": {}}) is None
    assert plots.claim_figure({"per_seed": {"diverged": [True, False]}}) is None  # flags are not numbers


def test_claim_figure_draws_the_speed_ups_on_one_axis_and_the_share_of_steps_on_another():
    row = next(r for r in _recorded_rows() if r["id"] == "same-quality-faster")
    fig = plots.claim_figure(row)
    titles = {name.replace("axis", ""): fig.layout[name].title.text for name in fig.layout if name.startswith("xaxis")}
    labels = {}
    for trace in fig.data:
        labels.setdefault(titles[trace.xaxis], set()).update(label.replace("<br>", " ") for label in trace.y)
    assert set(labels) == {"share", "speed-up"}, titles  # no axis titled by a dangling "speed-up in"
    assert labels["share"] == {"share of steps saved"}
    assert all(label.startswith("speed-up in") for label in labels["speed-up"]) and len(labels["speed-up"]) == 2


# --------------------------------------------------------------------------- heatmaps that open their maths


def _ancre_result(logits, normalization="ingoing", temperature=1.0):
    """The coefficients probe's result on a 3-block linear ANCRe net whose logits c_ij (source i, destination j)
    are set by hand."""
    import torch

    spec = explorer.preset("ancre-fig2b-ancre").with_values({"topology.normalization": normalization,
                                                             "topology.temperature": temperature})
    model, data = explorer.build(spec)
    topology = model.stack.topology
    with torch.no_grad():
        for (i, j), value in logits.items():
            topology.logits[i, j] = value
    return explorer.probe(model, data.x_val[:4], "coefficients")


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_coefficient_heatmap_names_states_prints_values_and_fits_a_sequential_scale():
    m = np.tril(np.array([[1.0, 0, 0], [0.25, 1.0, 0], [0.5, 0.75, 1.0]]))
    fig = plots.coefficient_heatmap(m, "t")
    heat = fig.data[0]
    assert list(fig.layout.xaxis.ticktext) == ["x₀ input", "x₁ block 1", "x₂ block 2"]
    assert list(fig.layout.yaxis.ticktext) == ["x₀ input", "x₁ block 1", "x₂ block 2"]
    text = np.array(heat.text, dtype=object)
    assert text[2, 1] == "0.75" and text[1, 0] == "0.25" and text[0, 2] == ""  # values, none above the diagonal
    assert heat.customdata[2][0].startswith("<b>0:2</b>")  # cell (j, i) is the shortcut i:j
    assert (heat.zmin, heat.zmax) == (0.0, 1.0) and heat.zmid is None  # sequential over [0, max]
    assert plots.coefficient_heatmap(m * 3, "t").data[0].zmax == 3.0
    signed = plots.coefficient_heatmap(m - 0.6, "t").data[0]
    assert signed.zmid == 0 and signed.zmin == -signed.zmax == pytest.approx(-0.4)  # symmetric, only with signs
    big = plots.coefficient_heatmap(np.tril(np.ones((20, 20))), "t").data[0]
    assert big.text is None  # 19 blocks: too small to print in


def test_coefficient_heatmap_shares_one_colour_scale_across_bases_and_greys_forced_cells():
    r = _ancre_result({(0, 2): 1.0, (1, 3): -1.0, (2, 3): 2.0})
    own = plots.coefficient_heatmap(r["own"], "own", result=r, basis="own")
    unrolled = plots.coefficient_heatmap(r["unrolled"], "unrolled", result=r)  # basis found by value
    scales = [(t.zmin, t.zmax, t.colorscale) for t in (own.data[0], unrolled.data[0])]
    assert scales[0] == scales[1] and scales[0][0] == 0.0
    assert scales[0][1] == pytest.approx(max(r["own"].max(), r["unrolled"].max()))
    # the direct path x_j <- y_j holds the same value in both bases (the unrolled diagonal), so the same colour
    for fig in (own, unrolled):
        grey = _trace(fig, "forced")
        z = _f(grey.z)
        assert {colour for _, colour in grey.colorscale} == {plots.FORCED_GREY}
        np.testing.assert_allclose(np.diagonal(z), np.diagonal(r["unrolled"]))
        assert z[1, 0] == pytest.approx(1.0)  # x_1 reads only x_0: the softmax over one source gives 1
        assert "single source" in grey.customdata[1][0] and "forced" in grey.customdata[1][0]
        assert np.isnan(z[2, 0]) and np.isnan(z[3, 1])  # learned cells keep their colour
    assert "learned" in own.data[0].customdata[3][1]
    np.testing.assert_allclose(np.nan_to_num(_f(own.data[0].z))[np.tril_indices(4)], r["own"][np.tril_indices(4)])


def test_unrolled_hover_is_the_sum_over_paths_of_the_products_of_own_coefficients():
    r = _ancre_result({(0, 2): 1.0, (1, 3): -1.0, (2, 3): 2.0})
    a = r["own"]  # a[j, i]: the coefficient of x_i in x_j
    paths = {"a(0,3)": a[3, 0], "a(0,1)·a(1,3)": a[1, 0] * a[3, 1], "a(0,2)·a(2,3)": a[2, 0] * a[3, 2],
             "a(0,1)·a(1,2)·a(2,3)": a[1, 0] * a[2, 1] * a[3, 2]}
    by_hand = sum(paths.values())
    assert r["unrolled"][3, 0] == pytest.approx(by_hand)
    hover = plots.coefficient_heatmap(r["unrolled"], "u", result=r).data[0].customdata[3][0]
    assert hover.startswith("<b>0:3</b>") and hover.endswith(f"= {by_hand:.3g}")
    largest = sorted(paths, key=lambda k: -abs(paths[k]))[:plots.MAX_PATHS_SHOWN]
    symbolic = hover.split("<br>")[1]
    assert symbolic.startswith("u(0,3) = " + " + ".join(largest)) and "(1 more path)" in symbolic
    numbers = hover.split("<br>")[2]
    first = largest[0]
    assert numbers.startswith("= " + "·".join(f"{a[int(b[-2]), int(b[-4])]:.3g}" for b in first.split("·")))
    # an own cell: ANCRe's softmax of the logits over the sources of x_3, with its numbers
    own_hover = plots.coefficient_heatmap(r["own"], "o", result=r, basis="own").data[0].customdata[3][2]
    assert "exp(2/1) / (exp(0/1) + exp(-1/1) + exp(2/1))" in own_hover
    assert own_hover.split("<br>")[2].endswith(f"= {math.exp(2) / (1 + math.exp(-1) + math.exp(2)):.3g}")


def test_mass_summary_lists_the_learned_shortcuts_by_coefficient_with_their_change():
    r = _ancre_result({(0, 2): 1.0, (1, 3): -1.0, (2, 3): 2.0})
    lines = plots.mass_summary(r, top=2).split("\n")
    assert len(lines) == 3 and "where the mass went" in lines[0]
    p23 = math.exp(2) / (1 + math.exp(-1) + math.exp(2))
    assert lines[1].startswith("2:3") and f"{p23:.3f} (init 0.333, +{p23 - 1 / 3:.3f})" in lines[1]
    assert lines[2].startswith("0:2")  # 0:1 is forced (x_1 has one source): not a learned shortcut
    assert plots.mass_summary({"own": np.eye(3), "unrolled": np.eye(3)}) == ""
    fig = plots.probe_figures("coefficients", r)[0]
    assert any("where the mass went" in a.text for a in fig.layout.annotations)
    assert "no preference yet" not in plots.mass_summary(r)  # 2:3 moved far from its uniform start


def test_mass_summary_says_when_no_coefficient_has_moved_from_its_start():
    near_uniform = plots.mass_summary(_ancre_result({(0, 2): 0.02, (1, 3): 0.01}))
    assert near_uniform.splitlines()[-1].startswith("no preference yet") and "0.1" in near_uniform


def test_norms_and_spectra_hovers_carry_their_equations_with_numbers():
    model, data = explorer.build(explorer.preset("ancre-fig2b-ancre"))
    norms = explorer.probe(model, data.x_val[:8], "norms")
    fig = plots.probe_figures("norms", norms)[0]
    output = fig.data[0]
    last = output.customdata[-1]
    n, first = norms["output_norm"][-1], norms["output_norm"][0]
    assert f"= {n:.4g}" in last and f"{n:.4g} / {first:.4g} = {n / first:.4g}" in last
    assert "%{customdata}" in output.hovertemplate
    weights = explorer.probe(model, data.x_val[:8], "weights")
    spectrum = plots.probe_figures("weights", weights)[0].data[0]
    sv = weights["singular_values"][0]
    sv = sv[np.isfinite(sv)]
    assert "the layer's weight" in spectrum.hovertemplate
    assert f"{sv.max():.4g} / {sv.min():.4g} = {sv.max() / sv.min():.4g}" in spectrum.hovertemplate
