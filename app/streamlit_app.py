"""Residual Explorer: the web app. Start it with `streamlit run app/streamlit_app.py`.

Five pages: Train (live runs), Inside (probe a run), Compare (overlay runs, launch a grid),
Papers (each paper's claims, rerun at CPU scale) and Theory (the closed-form results); with EXPLORER_ADMIN_TOKEN set,
Admin (every job) and Class (the teacher's page) too. A running class's pushed link shows above every page.
"""

from pathlib import Path

# Heavy libraries are imported here, before any page runs: two sessions importing pandas at the same moment
# see a "partially initialized module" error. app/server.py imports them when the server starts, so the first
# visitor does not wait for them; under `streamlit run app/streamlit_app.py` the first script run does.
import numpy  # noqa: F401
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import streamlit as st
import torch  # noqa: F401

import explorer  # noqa: F401
import explorer.papers  # noqa: F401  (the presets and claims the pages list)
from explorer.runs import StoreError, home
from explorer.settings import SettingError, admin_token
from explorer_app import layout, messages, state
from explorer_app.limits import limits, restrict_data_reads

TRAINING_PAGES = ("", "compare", "papers")  # Train (served at /), Compare and Papers submit jobs; Theory, Inside never
WARM_DELAY_S = 1.5  # the worker processes import torch: on 2 cores, let the browser draw the page first
VIEWS = Path(__file__).resolve().parent / "views"  # resolved: st.Page reads a relative path from the script's folder

st.set_page_config(page_title="Residual Explorer", page_icon="🔀", layout="wide")
layout.projector()

pages = [
    st.Page(VIEWS / "train.py", title="Train", icon=":material/model_training:", default=True),  # served at /
    st.Page(VIEWS / "inside.py", title="Inside", icon=":material/biotech:", url_path="inside"),
    st.Page(VIEWS / "compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
    st.Page(VIEWS / "papers.py", title="Papers", icon=":material/menu_book:", url_path="papers"),
    st.Page(VIEWS / "theory.py", title="Theory", icon=":material/functions:", url_path="theory"),
]
if admin_token():  # the operator's page exists only when a token is set
    pages.append(st.Page(VIEWS / "admin.py", title="Admin", icon=":material/admin_panel_settings:", url_path="admin"))
    pages.append(st.Page(VIEWS / "classroom.py", title="Class", icon=":material/school:", url_path="classroom"))
page = st.navigation(pages)
restrict_data_reads()  # before any page can validate a spec that names a file
try:
    limits()  # a mistyped EXPLORER_MAX_* variable is a message on every page, not a traceback
except SettingError as error:
    st.error(f"This server is misconfigured: {error}", icon=":material/settings:")
    st.stop()


def store_failure(error: StoreError) -> None:
    """The run store cannot be opened or written: one line naming EXPLORER_HOME, not the server's folders."""
    reason = str(error).replace(str(home()), "EXPLORER_HOME")
    st.error(f"The run store cannot be used: {messages.escape(reason)}. Tell whoever runs this server.",
             icon=":material/database:")


def class_banner(train_page) -> None:
    """The link a running class's teacher pushed (explorer.classroom), above every page: the teacher's line and a
    link to the Train page set up with it. The class file is parsed again only when it changed."""
    room = state.classroom().read()
    if not (room.open and room.link):
        return
    said = f" {messages.escape(room.message)}" if room.message else ""
    with st.container(border=True, key="class-banner"):
        st.markdown(f":material/campaign: **From your teacher:**{said}")
        st.page_link(train_page, label=f"Open {messages.escape(room.link_text)} on Train", icon=":material/link:",
                     query_params=room.link_params())


if page.url_path != "classroom":  # the teacher's own page says what it pushed
    class_banner(pages[0])
if page.url_path in TRAINING_PAGES:
    try:
        state.store()  # the store their jobs record into: one that cannot open is said before any button is drawn
    except StoreError as error:
        store_failure(error)
        st.stop()
try:
    page.run()
except StoreError as error:  # e.g. an empty runs.sqlite beside checkpoints, a full or read-only disk
    store_failure(error)
except Exception as error:  # the page's own bug or a broken file: a one-line message, never a traceback
    st.error(f"This page stopped on an unexpected error: {messages.failure(error)}. Reload the page; if it comes "
             "back, tell whoever runs this server.", icon=":material/error:")
else:
    if page.url_path in TRAINING_PAGES:  # after a page that trains is drawn: start the workers (no-op once started)
        try:
            state.job_queue().warm(delay=WARM_DELAY_S)  # opens the run store the queue records into
        except StoreError as error:
            store_failure(error)
        except Exception as error:
            st.error(f"The training workers could not start: {messages.failure(error)}. Tell whoever runs this "
                     "server.", icon=":material/error:")
