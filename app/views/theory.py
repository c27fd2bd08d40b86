"""Theory page: the papers' closed-form results under sliders.

One section per paper that has closed-form results (explorer_app.theory: DeepCrossAttention's gain bounds and rank
thresholds, the tau paper's forward-norm growth against depth, Cutting the Skip's softmax conditioning with mimetic
initialisation). Every curve comes from explorer.theory, or on request from a real network built with explorer's
public API, so the page shows what the library computes, including where it corrects a printed constant.
"""

from __future__ import annotations

import streamlit as st

from explorer_app.theory import sections

st.title("Theory")
SECTIONS = sections()
st.markdown(f"The closed-form results of {len(SECTIONS)} of the papers, recomputed live by `explorer.theory`.")
# Only the chosen section runs (st.tabs computed all of them before the first paint: 13-43 s of placeholders).
chosen = st.radio("Section", list(SECTIONS), horizontal=True, key="theory-section", label_visibility="collapsed")
SECTIONS[chosen]()
