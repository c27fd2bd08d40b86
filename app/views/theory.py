"""Theory page: the papers' closed-form results under sliders.

One tab per paper result: DeepCrossAttention's gain bounds and rank thresholds (Theorem 4.3,
Proposition 4.4, Figure 5), the tau paper's forward-norm growth against depth, and Cutting the
Skip's softmax conditioning (Proposition 1) with mimetic initialisation (Appendix A.2). Every
curve comes from explorer.theory, or on request from a real network built with explorer's public
API, so the page shows what the library computes, including where it corrects a printed constant.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import explorer
from explorer import plots, theory
from explorer.registries import DEPTH_RULES
from explorer.topology import depth_rule
from explorer_app import figures

NUMBER = "a number"  # the tau radio's choice for a fixed tau instead of a depth rule
CHECK_MAX_DEPTH = 300  # deepest real network the norm check builds (about 1 s on 2 CPU cores)
CHECK_EXAMPLES = 64  # validation images the norm check averages over
TEMPERATURES = [m * 10.0 ** e for e in range(-2, 2) for m in (1, 2, 5)] + [100.0]
MIMETIC_BETAS = np.linspace(0.0, 10.0, 21)
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


def _finite(values) -> np.ndarray:
    """`values` as floats with inf replaced by NaN, so plotly leaves a gap instead of failing to scale."""
    arr = np.asarray(values, dtype=float)
    return np.where(np.isfinite(arr), arr, np.nan)


def _dash(fig: go.Figure, names: list[str]) -> None:
    """Draw the named traces dashed (bounds, or the second curve of a pair)."""
    for name in names:
        fig.update_traces(line_dash="dash", selector=dict(name=name))


def _overlap(fig: go.Figure, below: str, above: str, x, y_below, y_above, xname: str) -> str:
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


def _mark_x(fig: go.Figure, x: float, text: str, log: bool = False) -> None:
    """A dotted vertical line at data value x, labelled at the top (annotations on a log axis take log10 of x)."""
    fig.add_vline(x=x, line_dash="dot")
    fig.add_annotation(x=math.log10(x) if log else x, y=1, yref="paper", yanchor="bottom", text=text, showarrow=False)


# --------------------------------------------------------------------------- DCA


def dca_table(d: int, r_star: int, kappa: float, lambda_max: float, as_printed: bool) -> None:
    """Theorem 4.3 and Proposition 4.4 at the chosen point, one row per GRN variant."""
    gains = theory.gain_lower_bounds(d, r_star, kappa * lambda_max, lambda_max, as_printed=as_printed)
    limits = theory.rank_thresholds(d, kappa, as_printed=as_printed)
    rows = {"GRN-v1": (gains.g1, limits.grn_v1), "GRN-v2": (gains.g2, limits.grn_v2),
            "GRN-v3": (gains.g3, limits.grn_v3)}
    table = pd.DataFrame({
        "architecture": list(rows),
        "gain lower bound G_k": [g for g, _ in rows.values()],
        "rank threshold (r* at most)": [float(t) for _, t in rows.values()],
        "r* within threshold": ["yes" if r_star <= t else "no" for _, t in rows.values()],
    })
    if kappa < 1:
        same_v12, same_v3 = theory.equal_error_collective_rank(d, r_star, kappa, as_printed=as_printed)
        table["equal-error rank (Prop. 4.4)"] = [float(same_v12), float(same_v12), float(same_v3)]
    st.dataframe(table, hide_index=True, key="theory-dca-table")
    equal_error = ("Equal-error rank: the collective rank at which the GRN matches ResNet's best error; below 0 "
                   "means any rank does." if kappa < 1 else
                   "Proposition 4.4 needs κ < 1 (it divides by 1 − κ²): lower the κ slider to see it.")
    st.caption(f"A negative gain bound guarantees nothing (it is not a loss). {equal_error}")


def dca_gains_figure(d: int, r_star: int | None, kappa: float, lambda_max: float,
                     as_printed: bool) -> tuple[go.Figure, str]:
    """Theorem 4.3(ii)'s three bounds over every r* < d, r* marked when it is valid; and a note on how close G2
    and G3 are (G3 is drawn dashed over G2, which it nearly covers)."""
    ranks = np.arange(d)
    gains = theory.gain_lower_bounds(d, ranks, kappa * lambda_max, lambda_max, as_printed=as_printed)
    fig = plots.theory_curves(
        ranks, {"G1 (GRN-v1)": gains.g1, "G2 (GRN-v2)": gains.g2, "G3 (GRN-v3)": gains.g3},
        title=f"Theorem 4.3(ii): gain lower bounds vs collective rank "
              f"(d = {d}, κ = {kappa:g}, λmax = {lambda_max:g})",
        xlabel="collective rank r*", ylabel="lower bound on the gain G_k")
    note = _overlap(fig, "G2 (GRN-v2)", "G3 (GRN-v3)", ranks, gains.g2, gains.g3, "r*")
    fig.add_hline(y=0, line_color="grey")
    if r_star is not None:
        _mark_x(fig, r_star, f"r* = {r_star}")
    return fig, note


def dca_thresholds_figure(d: int, r_star: int | None, kappa: float, as_printed: bool) -> tuple[go.Figure, str]:
    """Theorem 4.3(i)'s thresholds (4.1)-(4.3) over kappa in [0, 1], with the chosen kappa and r* marked; and a
    note on how close (4.2) and (4.3) are ((4.3) is drawn dashed over (4.2), which it nearly covers)."""
    kappas = np.linspace(0.0, 1.0, 101)
    limits = theory.rank_thresholds(d, kappas, as_printed=as_printed)
    fig = plots.theory_curves(
        kappas, {"(4.1) GRN-v1": limits.grn_v1, "(4.2) GRN-v2": limits.grn_v2, "(4.3) GRN-v3": limits.grn_v3},
        title=f"Theorem 4.3(i): largest r* at which each GRN beats ResNet's trade-off (d = {d})",
        xlabel="κ = λmin / λmax", ylabel="rank threshold (units of r*)")
    note = _overlap(fig, "(4.2) GRN-v2", "(4.3) GRN-v3", kappas, limits.grn_v2, limits.grn_v3, "κ")
    _mark_x(fig, kappa, f"κ = {kappa:g}")
    if r_star is not None:
        fig.add_hline(y=r_star, line_dash="dot", annotation_text=f"r* = {r_star}")
    return fig, note


def figure5_panel(x, g1_rows, g2_rows, dims, title: str, xlabel: str) -> go.Figure:
    """One panel of DCA Figure 5: G1 (solid) and G2 (dashed) lower bounds, one colour per d."""
    curves, colors = {}, {}
    for color, d, g1, g2 in zip(plots.PALETTE, dims, g1_rows, g2_rows):
        for name, g in ((f"G1, d = {d}", g1), (f"G2, d = {d}", g2)):
            curves[name] = g
            colors[name] = color
    fig = plots.theory_curves(x, curves, title=title, xlabel=xlabel, ylabel="gain lower bound", colors=colors)
    _dash(fig, [name for name in curves if name.startswith("G2")])
    return fig


def dca_tab() -> None:
    st.markdown(
        r"DeepCrossAttention (Section 4) compares architectures on a linear task $y = Ax$ with low-rank layers. "
        r"$G_k$ is how much lower the best excess risk of GRN-v$k$ is than ResNet's *at the same number of "
        r"parameters*; $r_*$ is the ResNet's collective rank (sum of its layers' ranks) and "
        r"$\kappa = \lambda_{\min}/\lambda_{\max}$ of $A - I$ measures how far the task is from low rank "
        r"($\kappa \to 0$: nearly low rank, easy for ResNet). The bounds grow with $d$ and $\kappa$ and shrink "
        r"with $r_*$: the gated residuals help most when the layers are narrow and the task is not low rank.")
    cols = st.columns(4)
    d = cols[0].slider("dimension d", 8, 2048, 256, step=8, key="theory-dca-d")
    r_star = cols[1].slider("collective rank r*", 0, 2048, 50, key="theory-dca-r",
                            help="r* = sum of the ResNet layers' ranks; the theorem needs r* < d")
    kappa = cols[2].slider("κ = λmin / λmax", 0.01, 1.0, 0.5, step=0.01, key="theory-dca-kappa",
                           help="extreme eigenvalues of A − I (assumed positive semi-definite)")
    lambda_max = cols[3].slider("λmax", 0.5, 20.0, 10.0, step=0.5, key="theory-dca-lmax")
    as_printed = st.toggle("GRN-v3 with the paper's printed constant π(d+1) (default: π(d+2), Lemma B.1 corrected)",
                           key="theory-dca-printed")

    if r_star >= d:
        st.error(f"The collective rank r* = {r_star} must be below the dimension d = {d} (Theorem 4.3 assumes "
                 f"r* < d): lower the **collective rank r\\*** slider or raise the **dimension d** slider.")
        marked = None
    else:
        dca_table(d, r_star, kappa, lambda_max, as_printed)
        marked = r_star

    constant = r"\pi(d+1)" if as_printed else r"\pi(d+2)"
    st.latex(r"G_1 \ge (d-r_*)\lambda_{\min}^2 - (\sqrt{d+r_*}-\sqrt{d})^2(\lambda_{\max}^2-\lambda_{\min}^2)")
    st.latex(r"G_2 \ge (d-r_*)\lambda_{\min}^2 - (\sqrt{1+r_*}-1)^2(\lambda_{\max}^2-\lambda_{\min}^2)")
    st.latex(r"G_3 \ge (d-\epsilon-r_*)\lambda_{\min}^2 + \tfrac{\epsilon}{2}\lambda_{\max}^2"
             r" - (\sqrt{1.6+r_*}-1)^2(\lambda_{\max}^2-\lambda_{\min}^2),\quad \epsilon = \frac{1}{" + constant + "}")
    gains_fig, gains_note = dca_gains_figure(d, marked, kappa, lambda_max, as_printed)
    show(gains_fig, key="theory-dca-gains", name="dca-gain-bounds")
    if gains_note:
        st.caption(gains_note)

    xi = r"\frac{1}{\pi(d^2-1)}" if as_printed else r"\frac{1}{\pi(d+2)(d-1)}"
    st.latex(r"\frac{r_*}{d} \le \bigl(1+\kappa(\sqrt{\kappa^2+1}-\kappa)\bigr)^2-1 \;(4.1),\qquad"
             r" r_* \le \bigl(1+\kappa(\sqrt{\kappa^2+d}-\kappa)\bigr)^2-1 \;(4.2)")
    st.latex(r"r_* \le \bigl(1+\eta(\sqrt{\eta^2+d}-\eta)\bigr)^2-1.6 \;(4.3),\quad"
             r" \eta = \sqrt{\frac{(\kappa(1+\xi_0)-\xi_0)^2+\xi_0}{1+\xi_0}},\quad \xi_0 = " + xi)
    st.caption("Below a threshold, the GRN reaches a lower error than ResNet with the same parameter count. "
               "(4.1) scales with d; (4.2) and (4.3) only with about √d, because GRN-v2/v3 pay d parameters per "
               "gate. G1 ≥ 0 exactly within (4.1) and G2 ≥ 0 exactly within (4.2); (4.3) is slightly more "
               "conservative than G3 ≥ 0.")
    thresholds_fig, thresholds_note = dca_thresholds_figure(d, marked, kappa, as_printed)
    show(thresholds_fig, key="theory-dca-thresholds", name="dca-rank-thresholds")
    if thresholds_note:
        st.caption(thresholds_note)

    st.subheader("Figure 5, recomputed")
    st.caption("The paper's settings (the figure's dimensions are not in the text; these are explorer's choice). "
               "Solid: G1, dashed: G2.")
    fig5 = theory.figure5_curves()
    left, right = st.columns(2)
    with left:
        show(figure5_panel(fig5.ratios, fig5.g1_vs_ratio, fig5.g2_vs_ratio, fig5.dims,
                           "Figure 5 (left): gain vs r*/d (λmin = 5, λmax = 10)", "r* / d"),
             key="theory-dca-fig5-left", name="dca-figure5-left")
    with right:
        show(figure5_panel(fig5.kappas, fig5.g1_vs_kappa, fig5.g2_vs_kappa, fig5.dims,
                           "Figure 5 (right): gain vs κ (λmax = 10, r* = 50)", "κ = λmin / λmax"),
             key="theory-dca-fig5-right", name="dca-figure5-right")


# --------------------------------------------------------------------------- tau


@st.cache_data(show_spinner=False)
def final_norm_vs_depth(settings: tuple, activation: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Depths L and, per tau setting, the predicted E||h_{L-1}||^2/||h_0||^2 bounds after the L-1 residual layers."""
    depths = np.unique(np.geomspace(2, 1000, 40).round().astype(int))
    curves = {}
    with np.errstate(over="ignore"):
        for setting in settings:
            ends = [theory.predicted_norm_growth(L - 1, depth_rule(setting, L), activation=activation) for L in depths]
            label = f"τ = {setting}"
            if activation == "linear":
                curves[f"{label}: exact"] = np.array([g.upper[-1] for g in ends])
            else:
                curves[f"{label}: upper"] = np.array([g.upper[-1] for g in ends])
                curves[f"{label}: lower"] = np.array([g.lower[-1] for g in ends])
    return depths, curves


@st.cache_data(show_spinner=False)
def measured_norm_growth(depth: int, setting: str | float) -> np.ndarray:
    """(mean ||h_l|| / mean ||h_0||)^2 for l = 0..L-2 of the tau paper's MLP-ResNet at init (norms probe)."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": depth, "topology.value": setting})
    model, data = explorer.build(spec)
    model = model.double().eval()
    ratio = explorer.probe(model, data.x_val[:CHECK_EXAMPLES].double(), "norms")["relative_input_norm"]
    return np.asarray(ratio, dtype=float) ** 2


def tau_layers_figure(growth: theory.NormGrowth, tau: float, measured: np.ndarray | None) -> go.Figure:
    """The predicted bounds (or exact curve) layer by layer, with the real network's measurement when there is one."""
    if growth.activation == "linear":
        curves = {"exact (no ReLU): (1 + 2τ²)^l": _finite(growth.upper)}
    else:
        curves = {"upper: (1 + 2τ²)^l": _finite(growth.upper), "lower: Theorem 4 recursion": _finite(growth.lower)}
    if measured is not None:
        padded = np.full(growth.layer.size, np.nan)
        padded[: measured.size] = measured
        curves["measured at init (real network)"] = padded
    ratio = "E‖h<sub>l</sub>‖² / ‖h<sub>0</sub>‖²"
    fig = plots.theory_curves(growth.layer, curves, log_y=True, xlabel="residual layer l", ylabel=ratio,
                              title=f"Predicted {ratio} through {growth.layer[-1]} residual layers (τ = {tau:.4g})")
    if measured is not None:
        fig.update_traces(mode="lines+markers", marker_size=4, selector=dict(name="measured at init (real network)"))
    return fig


def tau_depth_figure(settings: tuple, activation: str, depth: int) -> tuple[go.Figure, bool]:
    """Final predicted norm vs depth, one colour per tau setting (lower bounds dashed); and whether any overflowed."""
    depths, curves = final_norm_vs_depth(settings, activation)
    colors = {}
    for color, setting in zip(plots.PALETTE, settings):
        colors.update({name: color for name in curves if name.startswith(f"τ = {setting}:")})
    overflow = any(not np.all(np.isfinite(y)) for y in curves.values())
    ratio = "E‖h<sub>L−1</sub>‖² / ‖h<sub>0</sub>‖²"
    fig = plots.theory_curves(depths, {name: _finite(y) for name, y in curves.items()}, log_x=True, log_y=True,
                              colors=colors, title=f"Predicted {ratio} vs depth L", xlabel="depth L", ylabel=ratio)
    _dash(fig, [name for name in curves if name.endswith(": lower")])
    _mark_x(fig, depth, f"L = {depth}", log=True)
    return fig, overflow


def tau_tab() -> None:
    st.markdown(
        r"The tau paper's ResNet is $h_l = \mathrm{relu}(h_{l-1} + \tau W_l h_{l-1})$ with $L - 1$ residual "
        r"layers and Kaiming weights $\mathcal{N}(0, 2/m)$. Each layer multiplies the expected squared norm by at "
        r"most $1 + 2\tau^2$, so $\tau = 1/\sqrt{L}$ keeps it below $e^2$ at any depth, while "
        r"$\tau = L^{-1/2+c}$ makes it grow at least like $L^{2c}$: $1/\sqrt{L}$ is the sharp threshold between "
        r"a stable and an exploding forward pass.")
    cols = st.columns([1, 2, 1, 1])
    depth = cols[0].slider("depth L", 2, 1000, 100, key="theory-tau-depth")
    rule = cols[1].radio("τ rule", [*DEPTH_RULES, NUMBER], index=1, horizontal=True, key="theory-tau-rule")
    number = cols[2].slider("τ (for 'a number')", 0.0, 2.0, 0.1, step=0.01, key="theory-tau-value",
                            disabled=rule != NUMBER)
    activation = cols[3].radio("activation", ["relu", "linear"], horizontal=True, key="theory-tau-activation")
    setting = number if rule == NUMBER else rule
    tau = depth_rule(setting, depth)

    with np.errstate(over="ignore"):
        growth = theory.predicted_norm_growth(depth - 1, tau, activation=activation)
    st.latex(r"h_l = \mathrm{relu}(h_{l-1} + \tau W_l h_{l-1}),\quad (W_l)_{ij} \sim \mathcal{N}(0, 2/m),\quad"
             r" \frac{\mathbb{E}\|h_l\|^2}{\|h_0\|^2} \le (1+2\tau^2)^l \quad(\text{equality without the ReLU})")
    st.latex(r"\mathbb{E}\|h_l\|^2 \ge \max\Bigl(\mathbb{E}\|h_{l-1}\|^2,\; \tau^2 \sum_{a<l} \mathbb{E}\|h_a\|^2\Bigr)"
             r"\quad(\text{Theorem 4, App. G});\qquad \tau = \tfrac{1}{\sqrt{L}}:\ (1+\tfrac{2}{L})^{L-1} < e^2")
    metrics = st.columns(3)
    metrics[0].metric("τ", f"{tau:.4g}")
    bound = "=" if activation == "linear" else "≤"
    metrics[1].metric(f"after L − 1 layers, E‖h‖²/‖h₀‖² {bound}", f"{growth.upper[-1]:.4g}")
    if activation == "relu":
        metrics[2].metric("after L − 1 layers, E‖h‖²/‖h₀‖² ≥", f"{growth.lower[-1]:.4g}")
    if not np.all(np.isfinite(growth.upper)):
        st.warning(f"The predicted norm overflows floating point (above 1e308) at τ = {tau:.4g} and L = {depth}; "
                   "the chart leaves those layers out. Lower the **τ** slider or the **depth L** slider to see the "
                   "whole curve.")

    can_check = activation == "relu" and depth <= CHECK_MAX_DEPTH
    why_not = None if can_check else (
        f"available for the ReLU network up to L = {CHECK_MAX_DEPTH}: choose activation relu and a smaller depth L")
    if st.button("Check on a real network", key="theory-tau-check", disabled=not can_check, help=why_not):
        st.session_state["theory-tau-checked"] = (depth, setting)
    measured = None
    if can_check and st.session_state.get("theory-tau-checked") == (depth, setting):
        with st.spinner("Building the network and probing its norms..."):
            measured = measured_norm_growth(depth, setting)
        st.caption(f"Measured: the tau paper's MLP-ResNet (width 128, Kaiming init, seed 0) on {CHECK_EXAMPLES} "
                   "digits images, squared ratio of mean norms from explorer's `norms` probe (which sees each "
                   "block's input, so the last layer is not measured).")
    show(tau_layers_figure(growth, tau, measured), key="theory-tau-layers", name="tau-norm-growth-by-layer")

    settings = tuple(DEPTH_RULES) + ((number,) if rule == NUMBER else ())
    fig, overflow = tau_depth_figure(settings, activation, depth)
    if overflow:
        st.caption("Some curves overflow floating point at large depth and stop there.")
    show(fig, key="theory-tau-depths", name="tau-norm-growth-vs-depth")


# --------------------------------------------------------------------------- Cutting the Skip


def softmax_sweep(logits: np.ndarray, ratio_now: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Delta/tau on a log grid covering 0.01..100 and `ratio_now`; at each, kappa(S_tau(M)) and Proposition 1's bounds.

    The lower bound is left out where it is below 1 (every condition number is at least 1).
    """
    row_range = theory.softmax_condition_bounds(logits).row_range
    ratios = np.geomspace(min(1e-2, ratio_now / 3), max(1e2, ratio_now * 3), 81)
    temperatures = row_range / ratios
    bounds = [theory.softmax_condition_bounds(logits, t) for t in temperatures]
    lower = np.array([b.diffuse_lower for b in bounds])
    return ratios, {
        "κ(S_τ(M))": _finite([theory.softmax_condition(logits, t) for t in temperatures]),
        "lower bound 1/(e^(Δ/τ) − 1)": _finite(np.where(lower >= 1, lower, np.inf)),
        "upper bound (1 + ε)/(1 − ε)": _finite([b.dominant_upper for b in bounds]),
    }


def softmax_figure(logits: np.ndarray, temperature: float, row_range: float) -> go.Figure:
    """kappa and Proposition 1's bounds against Delta/tau, the chosen temperature marked."""
    ratios, curves = softmax_sweep(logits, row_range / temperature)
    n = logits.shape[0]
    fig = plots.theory_curves(ratios, curves, log_x=True, log_y=True,
                              title=f"Proposition 1: conditioning of the softmax of M = αZ + βI ({n} × {n})",
                              xlabel="logit range / temperature Δ/τ", ylabel="condition number κ")
    _dash(fig, [name for name in curves if name != "κ(S_τ(M))"])
    _mark_x(fig, row_range / temperature, f"τ = {temperature:g}", log=True)
    return fig


@st.cache_data(show_spinner=False)
def mimetic_sweep(n: int, alpha: float, trials: int, seed: int) -> dict[str, np.ndarray]:
    """Median kappa of softmax(M) over MIMETIC_BETAS, for Gaussian tokens and for X = I."""
    return {
        label: np.array([theory.mimetic_attention_condition(n, n, alpha, beta, rng=seed, tokens=tokens, trials=trials)
                         for beta in MIMETIC_BETAS])
        for label, tokens in (("Gaussian tokens: X(αZ + βI)Xᵀ", "gaussian"), ("X = I: M = αZ + βI", "identity"))
    }


def mimetic_statistics_table(d: int, alpha: float, beta: float) -> pd.DataFrame:
    """Eqs. 18-20's moments of the mimetic logits: exact variances next to the printed ones."""
    exact = theory.mimetic_logit_statistics(d, alpha, beta)
    printed = theory.mimetic_logit_statistics(d, alpha, beta, as_printed=True)
    return pd.DataFrame({
        "entry": ["diagonal C_ii", "off-diagonal C_ij", "gap γ = C_ii − C_ij"],
        "mean": [exact.diag_mean, exact.offdiag_mean, exact.gap_mean],
        "variance (exact)": [exact.diag_var, exact.offdiag_var, exact.gap_var],
        "variance (as printed, Eqs. 18–20)": [printed.diag_var, printed.offdiag_var, printed.gap_var],
    })


def skip_tab() -> None:
    st.markdown(
        r"Without skips, a Transformer's attention Jacobian is only as well conditioned as the attention matrix "
        r"$S = \mathrm{softmax}(M/\tau)$. If every row of the logits $M$ spans a small range $\Delta$, $S$ is close "
        r"to the rank-one uniform matrix and badly conditioned; if each diagonal logit beats the rest of its row by "
        r"a gap $\gamma$, $S$ is close to the identity and $\kappa \approx 1$. Mimetic initialisation "
        r"$W_Q W_K^\top = \alpha Z + \beta I$ buys that diagonal dominance with $\beta$.")
    cols = st.columns(5)
    n = cols[0].slider("tokens n = dimension d", 2, 64, 10, key="theory-skip-n")
    alpha = cols[1].slider("α (random part)", 0.0, 3.0, 0.1, step=0.01, key="theory-skip-alpha")
    beta = cols[2].slider("β (identity part)", 0.0, 10.0, 5.0, step=0.1, key="theory-skip-beta")
    temperature = cols[3].select_slider("temperature τ", TEMPERATURES, value=1.0, format_func=lambda t: f"{t:g}",
                                        key="theory-skip-temperature")
    seed = int(cols[4].number_input("seed", 0, 10_000, 0, key="theory-skip-seed"))

    st.subheader("Proposition 1: diffuse rows vs diagonal dominance")
    st.latex(r"\Delta = \max_i \bigl(\max_j M_{ij} - \min_j M_{ij}\bigr),\quad"
             r" \gamma = \min_i \bigl(M_{ii} - \max_{j \ne i} M_{ij}\bigr),\quad Z_{ij} \sim \mathcal{N}(0, 1/d)")
    st.latex(r"\kappa(S_\tau(M)) \ge \frac{1}{e^{\Delta/\tau}-1} \approx \frac{\tau}{\Delta},\qquad"
             r" \kappa(S_\tau(M)) \le \frac{1+\varepsilon}{1-\varepsilon},\ \ \varepsilon = 2(n-1)\,e^{-\gamma/\tau}"
             r"\ \ (\gamma > 0)")
    st.caption("The paper states κ ≳ τ/Δ and an unspecified ε(γ/τ) → 0; the explicit constants are the ones "
               "derived in explorer.theory.softmax_condition_bounds. The logits here are A.2.1's literal setup, "
               "M = αZ + βI (tokens X = I), with Z drawn from the seed.")
    logits = theory.sample_mimetic_logits(n, n, alpha, beta, rng=seed, tokens="identity")
    now = theory.softmax_condition_bounds(logits, temperature)
    if now.row_range == 0:
        st.warning("With α = 0 and β = 0 every logit is 0 (Δ = 0): the softmax is exactly uniform, rank one, and "
                   "its condition number is infinite. Raise the **α** or **β** slider.")
    else:
        metrics = st.columns(5)
        metrics[0].metric("row range Δ", f"{now.row_range:.4g}")
        metrics[1].metric("diagonal gap γ", f"{now.diagonal_gap:.4g}")
        metrics[2].metric("κ(S_τ(M))", f"{theory.softmax_condition(logits, temperature):.4g}")
        metrics[3].metric("lower bound", f"{now.diffuse_lower:.4g}",
                          help="every condition number is at least 1, so a lower bound below 1 says nothing")
        upper = f"{now.dominant_upper:.4g}" if math.isfinite(now.dominant_upper) else "none (γ too small)"
        metrics[4].metric("upper bound", upper, help="needs ε < 1, i.e. γ/τ > ln(2(n − 1))")
        show(softmax_figure(logits, temperature, now.row_range), key="theory-skip-softmax",
             name="skip-softmax-conditioning")

    st.subheader("Mimetic initialisation: attention conditioning vs β")
    trials = st.slider("draws per point (median)", 1, 11, 9, key="theory-skip-trials")
    st.caption("Softmax at τ = 1, as in Appendix A.2.1, which reports κ ≈ 1.1 for α = 0.1, β = 5 and κ ≈ 730 for "
               "β = 0 (n = d = 10, one draw).")
    curves = mimetic_sweep(n, alpha, trials, seed)
    now_gaussian = theory.mimetic_attention_condition(n, n, alpha, beta, rng=seed, trials=trials)
    now_identity = theory.mimetic_attention_condition(n, n, alpha, beta, rng=seed, tokens="identity",
                                                      trials=trials)
    metrics = st.columns(2)
    metrics[0].metric("κ, Gaussian tokens", f"{now_gaussian:.4g}")
    metrics[1].metric("κ, X = I", f"{now_identity:.4g}")
    fig = plots.theory_curves(MIMETIC_BETAS, {name: _finite(y) for name, y in curves.items()}, log_y=True,
                              xlabel="β", ylabel="condition number κ",
                              title=f"Median κ(softmax(M)) at init vs β (α = {alpha:g}, n = d = {n}, {trials} draws)")
    _mark_x(fig, beta, f"β = {beta:g}")
    show(fig, key="theory-skip-mimetic", name="skip-mimetic-conditioning")

    st.latex(r"C = \alpha X Z X^\top + \beta X X^\top:\quad \mathbb{E}\,C_{ii} = \beta d,\quad"
             r" \operatorname{Var} C_{ij} = (\alpha^2 + \beta^2) d\ \ \text{(printed: } \alpha^2 + \beta^2 d\text{)}")
    st.dataframe(mimetic_statistics_table(n, alpha, beta), hide_index=True, key="theory-skip-statistics")
    st.caption("Eqs. 18–20 for Gaussian tokens. The paper uses Var(x_iᵀ Z x_j) ≈ 1; it is exactly d, so the "
               "off-diagonal and gap variances differ from the printed ones when α > 0.")


st.title("Theory")
st.markdown("The closed-form results of three of the papers, recomputed live by `explorer.theory`.")
# Only the chosen section runs (st.tabs computed all three before the first paint: 13-43 s of placeholders).
SECTIONS = {"DCA: gain bounds": dca_tab, "τ: norm growth with depth": tau_tab,
            "Cutting the Skip: softmax conditioning": skip_tab}
chosen = st.radio("Section", list(SECTIONS), horizontal=True, key="theory-section", label_visibility="collapsed")
SECTIONS[chosen]()
