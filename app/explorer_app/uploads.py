"""Uploads: a spec JSON to load into the form, a UTF-8 text file to train the GPT on.

Both are size-limited (EXPLORER_MAX_UPLOAD_KB) and validated; an uploaded spec is parsed as JSON
and checked like any other spec, and a text file is only decoded and stored. Nothing uploaded is
unpickled or executed. Stored text files go to EXPLORER_HOME/uploads, named by their SHA-256.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

import explorer
from explorer.registry import SpecError
from explorer.runs import home
from explorer_app import spec_form
from explorer_app.limits import Limits


def uploads_dir() -> Path:
    return home() / "uploads"


def _read_limited(file, caps: Limits, what: str) -> bytes | None:
    data = file.getvalue()
    if len(data) > caps.max_upload_bytes:
        st.error(f"{what}: {file.name} is {len(data) / 1024:.0f} KiB, above this server's limit of "
                 f"{caps.max_upload_kb} KiB (EXPLORER_MAX_UPLOAD_KB); upload a smaller file.", icon=":material/error:")
        return None
    return data


def spec_uploader(caps: Limits, key: str):
    """A spec JSON uploader; returns the uploaded ExperimentSpec once (on the run it arrives), else None."""
    file = st.file_uploader("Load a spec (JSON)", type=["json"], key=key,
                            help="A file saved with the 'Spec (JSON)' download, or any spec `explorer train --spec FILE` reads.")
    if file is None or st.session_state.get(f"{key}:done") == file.file_id:
        return None
    st.session_state[f"{key}:done"] = file.file_id
    data = _read_limited(file, caps, "spec upload")
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
        return explorer.ExperimentSpec.from_json(text)
    except UnicodeDecodeError:
        st.error(f"spec upload: {file.name} is not UTF-8 text; upload the JSON file the app or CLI saved.",
                 icon=":material/error:")
    except SpecError as error:
        st.error(f"spec upload: **{error.path}**: {error.message}", icon=":material/error:")
    return None


def text_corpus_uploader(raw: dict, caps: Limits, key: str) -> None:
    """For the `text` dataset: an uploader whose file becomes data.path (stored under EXPLORER_HOME/uploads)."""
    if raw["data"].get("name") != "text":
        return
    file = st.file_uploader("Train on your own text (UTF-8 .txt)", type=["txt", "md", "py"], key=key,
                            help="Leave empty to use Python's bundled documentation text.")
    if file is None:
        return
    data = _read_limited(file, caps, "text upload")
    if data is None:
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        st.error(f"text upload: {file.name} is not UTF-8 text (byte {error.start}); save it as UTF-8 and upload "
                 "it again.", icon=":material/error:")
        return
    path = uploads_dir() / f"{hashlib.sha256(data).hexdigest()[:16]}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    widget = spec_form.widget_key("data", "text", "path")
    if st.session_state.get(widget) != str(path):
        st.session_state[widget] = str(path)
        st.rerun()
