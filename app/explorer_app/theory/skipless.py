"""Cutting the Skip's softmax conditioning (Proposition 1) and mimetic initialisation (Appendix A.2), under sliders."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from explorer import plots, theory
from explorer_app.theory.common import dash, finite, mark_x, show

TITLE = "Cutting the Skip: softmax conditioning"
TEMPERATURES = [m * 10.0 ** e for e in range(-2, 2) for m in (1, 2, 5)] + [100.0]
MIMETIC_BETAS = np.linspace(0.0, 10.0, 21)


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
        "κ(S_τ(M))": finite([theory.softmax_condition(logits, t) for t in temperatures]),
        "lower bound 1/(e^(Δ/τ) − 1)": finite(np.where(lower >= 1, lower, np.inf)),
        "upper bound (1 + ε)/(1 − ε)": finite([b.dominant_upper for b in bounds]),
    }


def softmax_figure(logits: np.ndarray, temperature: float, row_range: float) -> go.Figure:
    """kappa and Proposition 1's bounds against Delta/tau, the chosen temperature marked."""
    ratios, curves = softmax_sweep(logits, row_range / temperature)
    n = logits.shape[0]
    fig = plots.theory_curves(ratios, curves, log_x=True, log_y=True,
                              title=f"Proposition 1: conditioning of the softmax of M = αZ + βI ({n} × {n})",
                              xlabel="logit range / temperature Δ/τ", ylabel="condition number κ")
    dash(fig, [name for name in curves if name != "κ(S_τ(M))"])
    mark_x(fig, row_range / temperature, f"τ = {temperature:g}", log=True)
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


def section() -> None:
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
    fig = plots.theory_curves(MIMETIC_BETAS, {name: finite(y) for name, y in curves.items()}, log_y=True,
                              xlabel="β", ylabel="condition number κ",
                              title=f"Median κ(softmax(M)) at init vs β (α = {alpha:g}, n = d = {n}, {trials} draws)")
    mark_x(fig, beta, f"β = {beta:g}")
    show(fig, key="theory-skip-mimetic", name="skip-mimetic-conditioning")

    st.latex(r"C = \alpha X Z X^\top + \beta X X^\top:\quad \mathbb{E}\,C_{ii} = \beta d,\quad"
             r" \operatorname{Var} C_{ij} = (\alpha^2 + \beta^2) d\ \ \text{(printed: } \alpha^2 + \beta^2 d\text{)}")
    st.dataframe(mimetic_statistics_table(n, alpha, beta), hide_index=True, key="theory-skip-statistics")
    st.caption("Eqs. 18–20 for Gaussian tokens. The paper uses Var(x_iᵀ Z x_j) ≈ 1; it is exactly d, so the "
               "off-diagonal and gap variances differ from the printed ones when α > 0.")


st.title("Theory")
st.markdown("The closed-form results of three of the papers, recomputed live by `explorer.theory`.")
