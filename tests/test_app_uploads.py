"""Uploads on the Train page (AppTest): a spec JSON fills the form; bad or oversized files are refused
with a message; a text corpus becomes data.path, stored by its hash, never executed."""

import explorer
from conftest import plain
from explorer.runs import home


def uploader(at, key):
    return next(w for w in at.get("file_uploader") if w.proto.id.endswith(key) or getattr(w, "key", None) == key)


def test_an_uploaded_spec_fills_the_form(open_page):
    spec = explorer.preset("ancre-fig2c-ancre").with_values({"train.seed": 4})
    at = open_page("train")
    uploader(at, "train-upload-spec").set_value(("spec.json", spec.to_json().encode(), "application/json")).run()
    assert not at.exception
    assert at.selectbox(key="spec:topology.name").value == "ancre"
    assert at.number_input(key="spec:train.-.seed").value == 4
    got = explorer.ExperimentSpec.from_query({k: at.query_params[k] for k in at.query_params})
    assert got.to_dict() == spec.to_dict()


def test_a_bad_spec_upload_names_the_field(open_page):
    at = open_page("train")
    bad = b'{"model": {"name": "mlp", "depth": 0}}'
    uploader(at, "train-upload-spec").set_value(("spec.json", bad, "application/json")).run()
    assert not at.exception
    assert any("spec upload" in plain(e.value) and "model.depth" in plain(e.value) for e in at.error)
    uploader(at, "train-upload-spec").set_value(("spec.json", b"\xff\xfe not json", "application/json")).run()
    assert any("not UTF-8" in plain(e.value) for e in at.error)


def test_an_oversized_upload_is_refused(open_page, monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_UPLOAD_KB", "1")
    at = open_page("train")
    big = explorer.ExperimentSpec.default().to_json().encode() + b" " * 2048
    uploader(at, "train-upload-spec").set_value(("spec.json", big, "application/json")).run()
    assert any("above this server's limit of 1 KiB" in plain(e.value) and "EXPLORER_MAX_UPLOAD_KB" in plain(e.value) for e in at.error)
    assert at.selectbox(key="spec:model.name").value == explorer.ExperimentSpec.default().model.name


def test_a_text_upload_becomes_the_corpus(open_page):
    at = open_page("train", query={"data": "text", "model": "gpt"})
    text = ("def residual(x):\n    return x + f(x)\n" * 400).encode()
    uploader(at, "train-upload-text").set_value(("corpus.txt", text, "text/plain")).run()
    assert not at.exception
    path = at.text_input(key="spec:data.text.path").value
    assert path.startswith(str(home() / "uploads")) and open(path, "rb").read() == text
    assert not at.error
    assert not at.button(key="train-start").disabled


def test_a_text_upload_that_is_not_utf8_is_refused(open_page):
    at = open_page("train", query={"data": "text", "model": "gpt"})
    uploader(at, "train-upload-text").set_value(("corpus.txt", b"ok \xff\xfe broken", "text/plain")).run()
    assert not at.exception
    assert any("not UTF-8 text (byte 3)" in plain(e.value) for e in at.error)
    assert at.text_input(key="spec:data.text.path").value == ""


def test_the_uploaders_state_this_servers_limit(open_page, monkeypatch):
    """The widget's own limit is the server's, in the whole megabytes Streamlit takes, and its help gives the
    exact number (not Streamlit's configured default)."""
    monkeypatch.setenv("EXPLORER_MAX_UPLOAD_KB", "3000")
    at = open_page("train", query={"data": "text", "model": "gpt"})
    for key in ("train-upload-spec", "train-upload-text"):
        proto = uploader(at, key).proto
        assert proto.max_upload_size_mb == 3 and "at most 3000 KiB" in proto.help, (key, proto)
