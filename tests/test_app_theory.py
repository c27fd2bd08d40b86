"""The Theory page: it renders, and every slider moves the plotted numbers the way explorer.theory says."""

import json

import numpy as np
import pytest

from conftest import plotly_array
from explorer import theory
from explorer.topology import depth_rule

CHARTS = ("theory-dca-gains", "theory-dca-thresholds", "theory-dca-fig5-left", "theory-dca-fig5-right",
          "theory-tau-layers", "theory-tau-depths", "theory-skip-softmax", "theory-skip-mimetic")


def chart(at, key: str) -> dict:
    """The figure JSON of the chart drawn by figures.show(..., key=key)."""
    found = [c for c in at.get("plotly_chart") if c.proto.id.endswith(f"chart-{key}")]
    assert len(found) == 1, f"expected one chart {key!r}, found {len(found)}"
    return json.loads(found[0].proto.spec)


def lines(fig: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {trace["name"]: (plotly_array(trace["x"]), plotly_array(trace["y"])) for trace in fig["data"]}


def metric(at, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert len(found) == 1, f"expected one metric {label!r}, found {[m.label for m in at.metric]}"
    return found[0]


@pytest.fixture
def page(open_page):
    at = open_page("theory")
    assert not at.exception
    return at


SECTION_CHARTS = {"DCA: gain bounds": CHARTS[:4], "τ: norm growth with depth": CHARTS[4:6],
                  "Cutting the Skip: softmax conditioning": CHARTS[6:]}


def show(at, section: str):
    """Open one section of the page (only the chosen one is computed)."""
    at.radio(key="theory-section").set_value(section).run()
    assert not at.exception
    return at


def test_page_renders_every_chart_without_messages(page):
    latex = 0
    for section, keys in SECTION_CHARTS.items():
        show(page, section)
        drawn = [c.proto.id for c in page.get("plotly_chart")]
        assert len(drawn) == len(keys)  # the other sections are not computed
        for key in keys:
            assert sum(i.endswith(f"chart-{key}") for i in drawn) == 1, key
        assert not page.error and not page.warning
        latex += len(page.get("latex"))
    assert latex >= 6  # the formulas of each section


def test_dca_d_slider_moves_gain_bounds_and_table(page):
    before = lines(chart(page, "theory-dca-gains"))["G1 (GRN-v1)"][1]
    page.slider(key="theory-dca-d").set_value(512).run()
    assert not page.exception
    kappa, lambda_max = page.slider(key="theory-dca-kappa").value, page.slider(key="theory-dca-lmax").value
    curves = lines(chart(page, "theory-dca-gains"))
    ranks = curves["G1 (GRN-v1)"][0]
    np.testing.assert_array_equal(ranks, np.arange(512))
    expected = theory.gain_lower_bounds(512, ranks, kappa * lambda_max, lambda_max)
    for name, values in (("G1 (GRN-v1)", expected.g1), ("G2 (GRN-v2)", expected.g2), ("G3 (GRN-v3)", expected.g3)):
        np.testing.assert_allclose(curves[name][1], values, rtol=1e-12)
    assert before.size == 256 and not np.allclose(before, curves["G1 (GRN-v1)"][1][:256])

    table = page.dataframe[0].value.set_index("architecture")
    r_star = page.slider(key="theory-dca-r").value
    point = theory.gain_lower_bounds(512, r_star, kappa * lambda_max, lambda_max)
    limits = theory.rank_thresholds(512, kappa)
    assert table.loc["GRN-v2", "gain lower bound G_k"] == pytest.approx(point.g2, rel=1e-12)
    assert table.loc["GRN-v1", "rank threshold (r* at most)"] == pytest.approx(limits.grn_v1, rel=1e-12)
    same_v12, same_v3 = theory.equal_error_collective_rank(512, r_star, kappa)
    assert table.loc["GRN-v3", "equal-error rank (Prop. 4.4)"] == pytest.approx(same_v3, rel=1e-12)
    assert table.loc["GRN-v1", "r* within threshold"] == ("yes" if r_star <= limits.grn_v1 else "no")


def test_dca_kappa_and_printed_constant_move_thresholds(page):
    page.slider(key="theory-dca-kappa").set_value(0.2).run()
    page.toggle(key="theory-dca-printed").set_value(True).run()
    assert not page.exception
    d = page.slider(key="theory-dca-d").value
    curves = lines(chart(page, "theory-dca-thresholds"))
    kappas = curves["(4.3) GRN-v3"][0]
    printed = theory.rank_thresholds(d, kappas, as_printed=True)
    np.testing.assert_allclose(curves["(4.1) GRN-v1"][1], printed.grn_v1, rtol=1e-12)
    np.testing.assert_allclose(curves["(4.3) GRN-v3"][1], printed.grn_v3, rtol=1e-12)
    assert not np.allclose(curves["(4.3) GRN-v3"][1], theory.rank_thresholds(d, kappas).grn_v3, rtol=1e-12, atol=0)

    lambda_max = page.slider(key="theory-dca-lmax").value
    gains = lines(chart(page, "theory-dca-gains"))["G3 (GRN-v3)"]
    expected = theory.gain_lower_bounds(d, gains[0], 0.2 * lambda_max, lambda_max, as_printed=True).g3
    np.testing.assert_allclose(gains[1], expected, rtol=1e-12)


def test_dca_rank_not_below_d_shows_error_and_keeps_charts(page):
    page.slider(key="theory-dca-d").set_value(64).run()
    page.slider(key="theory-dca-r").set_value(64).run()
    assert not page.exception
    assert len(page.error) == 1
    message = page.error[0].value
    assert "collective rank r" in message and "dimension d" in message and "r* = 64" in message
    assert chart(page, "theory-dca-gains")["data"]  # the curves over r* < d are still drawn
    page.slider(key="theory-dca-r").set_value(63).run()
    assert not page.error and not page.exception


def test_figure5_is_the_library_figure(page):
    expected = theory.figure5_curves()
    left = lines(chart(page, "theory-dca-fig5-left"))
    right = lines(chart(page, "theory-dca-fig5-right"))
    for i, d in enumerate(expected.dims):
        np.testing.assert_allclose(left[f"G1, d = {d}"][1], expected.g1_vs_ratio[i], rtol=1e-12)
        np.testing.assert_allclose(left[f"G2, d = {d}"][0], expected.ratios, rtol=1e-12)
        np.testing.assert_allclose(right[f"G2, d = {d}"][1], expected.g2_vs_kappa[i], rtol=1e-12)


def test_tau_depth_rule_and_activation_move_the_prediction(page):
    show(page, 'τ: norm growth with depth')
    page.slider(key="theory-tau-depth").set_value(50).run()
    page.radio(key="theory-tau-rule").set_value("1/L^0.25").run()
    assert not page.exception
    expected = theory.predicted_norm_growth(49, 50 ** -0.25)
    curves = lines(chart(page, "theory-tau-layers"))
    np.testing.assert_array_equal(curves["upper: (1 + 2τ²)^l"][0], np.arange(50))
    np.testing.assert_allclose(curves["upper: (1 + 2τ²)^l"][1], expected.upper, rtol=1e-12)
    np.testing.assert_allclose(curves["lower: Theorem 4 recursion"][1], expected.lower, rtol=1e-12)
    assert metric(page, "τ") == f"{50 ** -0.25:.4g}"

    page.radio(key="theory-tau-activation").set_value("linear").run()
    curves = lines(chart(page, "theory-tau-layers"))
    assert list(curves) == ["exact (no ReLU): (1 + 2τ²)^l"]
    linear = theory.predicted_norm_growth(49, 50 ** -0.25, activation="linear").upper
    np.testing.assert_allclose(curves["exact (no ReLU): (1 + 2τ²)^l"][1], linear, rtol=1e-12)

    depths = lines(chart(page, "theory-tau-depths"))
    x, y = depths["τ = 1/sqrt(L): exact"]
    ends = [theory.predicted_norm_growth(int(L) - 1, depth_rule("1/sqrt(L)", int(L)), activation="linear").upper[-1]
            for L in x]
    np.testing.assert_allclose(y, ends, rtol=1e-12)
    assert np.all(y < np.e ** 2)  # the paper's bounded case


def test_tau_overflow_warns_and_names_the_sliders(page):
    show(page, 'τ: norm growth with depth')
    page.radio(key="theory-tau-rule").set_value("a number").run()
    page.slider(key="theory-tau-value").set_value(2.0).run()
    page.slider(key="theory-tau-depth").set_value(1000).run()
    assert not page.exception
    assert any("overflows" in w.value and "τ" in w.value and "depth L" in w.value for w in page.warning)
    upper = lines(chart(page, "theory-tau-layers"))["upper: (1 + 2τ²)^l"][1]
    assert np.isnan(upper[-1]) and np.isfinite(upper[0])


def test_tau_real_network_lies_between_the_bounds(page):
    show(page, 'τ: norm growth with depth')
    page.slider(key="theory-tau-depth").set_value(400).run()
    assert page.button(key="theory-tau-check").disabled  # too deep to build on every click
    page.slider(key="theory-tau-depth").set_value(10).run()
    page.button(key="theory-tau-check").click().run()
    assert not page.exception
    curves = lines(chart(page, "theory-tau-layers"))
    measured = curves["measured at init (real network)"][1]
    assert np.all(np.isfinite(measured[:9])) and np.isnan(measured[9])  # h_0..h_8 probed, h_9 not
    assert measured[0] == pytest.approx(1.0)
    lower, upper = curves["lower: Theorem 4 recursion"][1], curves["upper: (1 + 2τ²)^l"][1]
    assert np.all(measured[:9] >= 0.8 * lower[:9]) and np.all(measured[:9] <= 1.25 * upper[:9])


def test_softmax_chart_follows_explorer(page):
    show(page, 'Cutting the Skip: softmax conditioning')
    page.slider(key="theory-skip-n").set_value(12).run()
    page.slider(key="theory-skip-beta").set_value(3.0).run()
    page.select_slider(key="theory-skip-temperature").set_value(0.5).run()
    assert not page.exception
    alpha, seed = page.slider(key="theory-skip-alpha").value, page.number_input(key="theory-skip-seed").value
    logits = theory.sample_mimetic_logits(12, 12, alpha, 3.0, rng=int(seed), tokens="identity")
    bounds = theory.softmax_condition_bounds(logits, 0.5)
    fig = chart(page, "theory-skip-softmax")
    ratios, kappas = lines(fig)["κ(S_τ(M))"]
    expected = [theory.softmax_condition(logits, bounds.row_range / r) for r in ratios]
    np.testing.assert_allclose(kappas, expected, rtol=1e-6)
    assert fig["layout"]["shapes"][0]["x0"] == pytest.approx(bounds.row_range / 0.5)
    assert metric(page, "row range Δ") == f"{bounds.row_range:.4g}"
    assert metric(page, "diagonal gap γ") == f"{bounds.diagonal_gap:.4g}"
    assert metric(page, "κ(S_τ(M))") == f"{theory.softmax_condition(logits, 0.5):.4g}"
    upper = lines(fig)["upper bound (1 + ε)/(1 − ε)"][1]
    finite = np.isfinite(upper)
    assert finite.any() and np.all(kappas[finite] <= upper[finite] * (1 + 1e-9))  # Prop. 1 holds on the chart


def test_mimetic_beta_moves_attention_conditioning(page):
    show(page, 'Cutting the Skip: softmax conditioning')
    page.slider(key="theory-skip-beta").set_value(0.0).run()
    assert not page.exception
    n, alpha = page.slider(key="theory-skip-n").value, page.slider(key="theory-skip-alpha").value
    trials = page.slider(key="theory-skip-trials").value
    diffuse = theory.mimetic_attention_condition(n, n, alpha, 0.0, rng=0, trials=trials)
    assert metric(page, "κ, Gaussian tokens") == f"{diffuse:.4g}"
    curves = lines(chart(page, "theory-skip-mimetic"))
    betas, kappas = curves["X = I: M = αZ + βI"]
    expected = [theory.mimetic_attention_condition(n, n, alpha, b, rng=0, tokens="identity", trials=trials)
                for b in betas]
    np.testing.assert_allclose(kappas, expected, rtol=1e-9)
    assert kappas[0] > 100 * kappas[-1]  # beta buys conditioning (App. A.2.1)

    table = page.dataframe[-1].value.set_index("entry")
    stats = theory.mimetic_logit_statistics(n, alpha, 0.0)
    assert table.loc["gap γ = C_ii − C_ij", "variance (exact)"] == pytest.approx(stats.gap_var, rel=1e-12)


def test_constant_logits_warn_instead_of_failing(page):
    show(page, 'Cutting the Skip: softmax conditioning')
    page.slider(key="theory-skip-alpha").set_value(0.0).run()
    page.slider(key="theory-skip-beta").set_value(0.0).run()
    assert not page.exception
    assert any("Δ = 0" in w.value and "α" in w.value and "β" in w.value for w in page.warning)
    assert not any(c.proto.id.endswith("chart-theory-skip-softmax") for c in page.get("plotly_chart"))


def test_grn_v2_and_v3_curves_that_nearly_coincide_both_show(page):
    """G2 and G3 (and thresholds (4.2) and (4.3)) nearly coincide: the v3 curve is dashed over a wider v2 curve,
    and a caption gives their largest difference as explorer.theory computes it."""
    d, kappa = page.slider(key="theory-dca-d").value, page.slider(key="theory-dca-kappa").value
    lambda_max = page.slider(key="theory-dca-lmax").value
    captions = [c.value for c in page.caption]
    for key, v2, v3 in (("theory-dca-gains", "G2 (GRN-v2)", "G3 (GRN-v3)"),
                        ("theory-dca-thresholds", "(4.2) GRN-v2", "(4.3) GRN-v3")):
        traces = {t["name"]: t for t in chart(page, key)["data"]}
        assert traces[v3]["line"]["dash"] == "dash" and "dash" not in traces[v2]["line"]
        assert traces[v2]["line"]["width"] > traces[v3]["line"]["width"]
        curves = lines(chart(page, key))
        x = curves[v2][0]
        if key == "theory-dca-gains":
            expected = theory.gain_lower_bounds(d, x, kappa * lambda_max, lambda_max)
            gap = np.abs(expected.g2 - expected.g3)
        else:
            expected = theory.rank_thresholds(d, x)
            gap = np.abs(expected.grn_v2 - expected.grn_v3)
        assert 0 < gap.max() < 0.05 * np.abs(curves[v2][1]).max()  # close enough to hide one under the other
        assert any(f"{v2} (wide) and {v3} (dashed over it) differ by at most {gap.max():.3g}" in c for c in captions)
