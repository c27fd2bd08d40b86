"""The tau paper's forward-norm growth against depth (Theorems 1 and 4), with a check on real networks."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

import explorer
from explorer import plots, theory
from explorer.registries import DEPTH_RULES
from explorer.topology import depth_rule
from explorer_app.theory.common import dash, finite, mark_x, show

TITLE = "τ: norm growth with depth"
NUMBER = "a number"  # the tau radio's choice for a fixed tau instead of a depth rule
CHECK_MAX_DEPTH = 300  # deepest real network the norm check builds (about 1 s on 2 CPU cores)
CHECK_EXAMPLES = 64  # validation images the norm check averages over


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
        curves = {"exact (no ReLU): (1 + 2τ²)^l": finite(growth.upper)}
    else:
        curves = {"upper: (1 + 2τ²)^l": finite(growth.upper), "lower: Theorem 4 recursion": finite(growth.lower)}
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
    fig = plots.theory_curves(depths, {name: finite(y) for name, y in curves.items()}, log_x=True, log_y=True,
                              colors=colors, title=f"Predicted {ratio} vs depth L", xlabel="depth L", ylabel=ratio)
    dash(fig, [name for name in curves if name.endswith(": lower")])
    mark_x(fig, depth, f"L = {depth}", log=True)
    return fig, overflow


def section() -> None:
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
