"""Uploads: a spec JSON to load into the form, a UTF-8 text file to train the GPT on.

Both are size-limited (EXPLORER_MAX_UPLOAD_KB) and validated; an uploaded spec is parsed as JSON
and checked like any other spec, and a text file is only decoded and stored. Nothing uploaded is
unpickled or executed. Stored text files go to EXPLORER_HOME/uploads, named by their SHA-256.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import streamlit as st

import explorer
from explorer.registries import SpecError
from explorer.runs import home
from explorer_app import spec_form
from explorer_app.messages import escape, spec_error
from explorer_app.limits import Limits


def uploads_dir() -> Path:
    return home() / "uploads"


def _too_big(file, data: bytes, caps: Limits, what: str) -> str | None:
    if len(data) <= caps.max_upload_bytes:
        return None
    return (f"{what}: {escape(file.name)} is {len(data) / 1024:.0f} KiB, above this server's limit of {caps.max_upload_kb} KiB "
            "(EXPLORER_MAX_UPLOAD_KB); upload a smaller file.")


def _widget_megabytes(caps: Limits) -> int:
    """The uploader's own limit, in the whole megabytes Streamlit takes: this server's limit rounded up (the widget
    then states about the real limit; a file between the two is refused here with the exact number)."""
    return max(1, math.ceil(caps.max_upload_kb / 1024))


def spec_uploader(caps: Limits, key: str):
    """A spec JSON uploader; returns the uploaded ExperimentSpec once (on the run it arrives), else None."""
    file = st.file_uploader("Load a spec (JSON)", type=["json"], key=key, max_upload_size=_widget_megabytes(caps),
                            help="A file saved with the 'Spec (JSON)' download, or any spec `explorer train --spec FILE` "
                                 f"reads; at most {caps.max_upload_kb} KiB.")
    if file is None or st.session_state.get(f"{key}:done") == file.file_id:
        return None
    st.session_state[f"{key}:done"] = file.file_id
    data = file.getvalue()
    refusal = _too_big(file, data, caps, "spec upload")
    if refusal:
        st.error(refusal, icon=":material/error:")
        return None
    try:
        text = data.decode("utf-8")
        return explorer.ExperimentSpec.from_json(text)
    except UnicodeDecodeError:
        st.error(f"spec upload: {escape(file.name)} is not UTF-8 text; upload the JSON file the app or CLI saved.",
                 icon=":material/error:")
    except SpecError as error:
        st.error(f"spec upload: {spec_error(error)}", icon=":material/error:")
    return None


def text_corpus_uploader(raw: dict, caps: Limits, key: str) -> None:
    """For the `text` dataset: an uploader whose file becomes data.path (stored under EXPLORER_HOME/uploads)."""
    if raw["data"].get("name") != "text":
        return
    st.file_uploader("Train on your own text (UTF-8 .txt)", type=["txt", "md", "py"], key=key,
                     on_change=_store_text, args=(caps, key), max_upload_size=_widget_megabytes(caps),
                     help=f"Leave empty to use Python's bundled documentation text; at most {caps.max_upload_kb} KiB.")
    if st.session_state.get(f"{key}:error"):
        st.error(st.session_state[f"{key}:error"], icon=":material/error:")


def _store_text(caps: Limits, key: str) -> None:
    """on_change of the text uploader (runs before the form is drawn, so it may set data.path's widget)."""
    st.session_state[f"{key}:error"] = None
    file = st.session_state.get(key)
    if file is None:
        return
    data = file.getvalue()
    refusal = _too_big(file, data, caps, "text upload")
    if refusal:
        st.session_state[f"{key}:error"] = refusal
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        st.session_state[f"{key}:error"] = (f"text upload: {escape(file.name)} is not UTF-8 text (byte {error.start}); "
                                            "save it as UTF-8 and upload it again.")
        return
    path = uploads_dir() / f"{hashlib.sha256(data).hexdigest()[:16]}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    st.session_state[spec_form.widget_key("data", "text", "path")] = str(path)
