"""A server a class can share. Hostile links, uploads and files reach the page only as text."""

import os
import pickle
import re

import pytest
import explorer
from conftest import plain

HOST = "example.invalid"
LINK = f"[Session expired - log in again](http://{HOST}/login)"
IMAGE = f"![x](http://{HOST}/a.png)"
# markdown that makes a link or an image ("](" or "![" without a backslash before them) or a GitHub-style
# autolink (http:// or www. with nothing but escapes between the letters: an invisible word joiner breaks it)
ACTIVE_MARKDOWN = re.compile(r"(?<!\\)\]\(|(?<!\\)!\[|https?:\\?/|www\\?\.")


def bodies(at) -> list[str]:
    """Everything the page sent as markdown: error/warning/info/success bodies, markdown and captions."""
    elements = [*at.error, *at.warning, *at.info, *at.success, *at.markdown, *at.caption]
    return [element.proto.body for element in elements]


@pytest.mark.parametrize("query", [{"model": LINK}, {"model": IMAGE}, {"data": "identity", "data.dim": IMAGE},
                                   {IMAGE: "1"}, {f"model.{LINK}": "3"}])
def test_a_hostile_link_is_shown_as_text(open_page, query):
    at = open_page("train", query=query)
    assert not at.exception
    shown = [body for body in bodies(at) if HOST.replace(".", "\\.") in body or HOST in body]
    assert shown, "the page should say the link's experiment is not valid, quoting it"
    for body in shown:
        assert not ACTIVE_MARKDOWN.search(body), body
        assert HOST.replace(".", "\\.") in body  # quoted, escaped


def test_escape_disarms_markdown():
    from explorer_app.messages import escape

    text = escape(f"{LINK} {IMAGE} <img src=x> **b** :red[x] $x$ www.{HOST}")
    assert not ACTIVE_MARKDOWN.search(text)
    assert "<" not in text.replace("\\<", "") and "www." not in text


def test_a_link_cannot_probe_server_files(open_page, tmp_path, monkeypatch):
    """`?data=text&data.path=...` outside EXPLORER_DATA_DIR says the same thing whether the
    file exists or not, and nothing about its length or content."""
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(tmp_path / "data"))
    secret = tmp_path / "secret.txt"
    secret.write_text("x" * 5000)
    shown = []
    for path in (secret, tmp_path / "missing.txt"):
        at = open_page("train", query={"data": "text", "model": "gpt", "data.path": str(path)})
        assert not at.exception
        [error] = [plain(e.value) for e in at.error if "data.path" in plain(e.value)]
        shown.append(error.replace(str(path), "PATH"))
    assert shown[0] == shown[1] and "EXPLORER_DATA_DIR" in shown[0]
    assert "5000" not in shown[0] and "exist" not in shown[0]


def test_a_corrupt_checkpoint_on_inside_probe_is_one_clear_line(open_page):
    """Inside -> Probe on a damaged checkpoint names the file and what to do; torch's own
    text (which advises weights_only=False) is not shown."""
    spec = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 3, "train.steps": 4, "train.log_every": 2})
    explorer.train(spec, callbacks=[explorer.StoreRecorder(label="stored")])
    store = explorer.RunStore()
    path = store.checkpoint_path(store.list()[0]["id"])
    path.write_bytes(pickle.dumps(type("Evil", (), {"__reduce__": lambda self: (os.system, ("true",))})()))
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    at.button(key="inside-run-probes").click().run()
    assert not at.exception
    [warning] = [plain(w.value) for w in at.warning if "checkpoint" in plain(w.value)]
    assert str(path) in warning and "move it" in warning and "weights_only" not in warning
    assert "\n" not in warning


def test_why_train_is_off_is_shown_beside_it(open_page):
    """With ?train.steps=20001 the reason is in the main area, not only in a collapsed section."""
    at = open_page("train", query={"train.steps": "20001"})
    assert not at.exception
    assert at.button(key="train-start").disabled
    assert any("train.steps" in plain(e.value) and "EXPLORER_MAX_STEPS" in plain(e.value) for e in at.main.error)


@pytest.mark.parametrize("query", [{"data": "identity", "data.dim": "4096", "data.n_train": "50000", "data.seed": "0"},
                                   {"model.depth": "10000", "model.width": "65536"},
                                   {"data": "shapes", "model": "vit", "data.size": "128", "data.n_train": "200000"}])
def test_a_link_that_asks_for_too_much_memory_is_refused_before_anything_is_built(open_page, query, monkeypatch):
    """The message is shown, Train is off, and no dataset was generated."""
    import explorer.data.base

    built = []
    monkeypatch.setattr(explorer.data.base, "_remember", lambda key, dataset: built.append(key))
    at = open_page("train", query=query)
    assert not at.exception
    assert at.button(key="train-start").disabled
    assert any("EXPLORER_MAX_" in plain(e.value) for e in at.main.error)
    assert built == []


def test_an_oversized_spec_upload_is_refused(open_page):
    import json

    at = open_page("train")
    upload = json.dumps({"data": {"name": "identity", "dim": 4096, "n_train": 1000000}}).encode()
    from test_app_uploads import uploader

    uploader(at, "train-upload-spec").set_value(("big.json", upload, "application/json")).run()
    assert not at.exception
    at.run()  # the form loaded from the upload is validated on the next run
    assert any("EXPLORER_MAX_DATA_MB" in plain(e.value) for e in at.error)
    assert at.button(key="train-start").disabled
