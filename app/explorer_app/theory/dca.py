"""DeepCrossAttention's gain bounds and rank thresholds (Theorem 4.3, Proposition 4.4, Figure 5), under sliders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from explorer import plots, theory
from explorer_app.theory.common import dash, mark_x, overlap, show

TITLE = "DCA: gain bounds"


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
    note = overlap(fig, "G2 (GRN-v2)", "G3 (GRN-v3)", ranks, gains.g2, gains.g3, "r*")
    fig.add_hline(y=0, line_color="grey")
    if r_star is not None:
        mark_x(fig, r_star, f"r* = {r_star}")
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
    note = overlap(fig, "(4.2) GRN-v2", "(4.3) GRN-v3", kappas, limits.grn_v2, limits.grn_v3, "κ")
    mark_x(fig, kappa, f"κ = {kappa:g}")
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
    dash(fig, [name for name in curves if name.startswith("G2")])
    return fig


def section() -> None:
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
