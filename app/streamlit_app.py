"""Residual Explorer: the web app. Start it with `streamlit run app/streamlit_app.py`.

Five pages: Train (live runs), Inside (probe a run), Compare (overlay runs, launch a grid),
Papers (each paper's claims, rerun at CPU scale) and Theory (the closed-form results).
"""

import sys
from pathlib import Path

import streamlit as st

from explorer_app.limits import LimitError, limits

VIEWS = Path(__file__).resolve().parent / "views"  # resolved: st.Page reads a relative path from the script's folder
# Training threads and the server share one interpreter lock; hand it over every 1 ms instead of Python's
# default 5 ms, so the live view keeps redrawing while a job trains (measured in the browser on 2 cores:
# 1.25 -> 2.25-2.75 chart refreshes per second).
sys.setswitchinterval(0.001)

st.set_page_config(page_title="Residual Explorer", page_icon=":material/account_tree:", layout="wide")

pages = [
    st.Page(VIEWS / "train.py", title="Train", icon=":material/model_training:", default=True),  # served at /
    st.Page(VIEWS / "inside.py", title="Inside", icon=":material/biotech:", url_path="inside"),
    st.Page(VIEWS / "compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
    st.Page(VIEWS / "papers.py", title="Papers", icon=":material/menu_book:", url_path="papers"),
    st.Page(VIEWS / "theory.py", title="Theory", icon=":material/functions:", url_path="theory"),
]
page = st.navigation(pages)
try:
    limits()  # a mistyped EXPLORER_MAX_* variable is a message on every page, not a traceback
except LimitError as error:
    st.error(f"This server is misconfigured: {error}", icon=":material/settings:")
    st.stop()
page.run()
