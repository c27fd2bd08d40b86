"""The character-level `text` dataset: windows, split, vocabulary, entropy, local files and refusals."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch

import explorer
from explorer.data import TASKS, Dataset, build_dataset, dims
from explorer.data.text import MAX_BYTES, corpus, decode, encode, unigram_entropy, vocabulary
from explorer.registries import SpecError
from explorer.spec import _build_section

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def _clear_cache():
    explorer.data.clear_cache()
    yield
    explorer.data.clear_cache()


def section(**params):
    """A validated data section for `text`, checked as a spec checks it.

    Built without a model: a full spec would also need a model that accepts language-modeling data.
    """
    sec = _build_section("data", {"name": "text", **params})
    explorer.registry("datasets")["text"].info.check(sec.params)
    return sec


def build(**params) -> Dataset:
    return build_dataset(section(**params))


def random_file(tmp_path, n: int, name: str = "random.txt", seed: int = 0) -> str:
    """A file of n random letters: every window of a dozen characters occurs in it once."""
    rng = random.Random(seed)
    path = tmp_path / name
    path.write_text("".join(rng.choice(LETTERS) for _ in range(n)), encoding="utf-8")
    return str(path)


def window_text(x: torch.Tensor, y: torch.Tensor, vocab: str) -> str:
    """The T + 1 characters of a window: its inputs and the last target."""
    return decode(x, vocab) + decode(y[-1:], vocab)


# ---- the default text ----------------------------------------------------------------------


def test_default_text_is_the_python_documentation_topics():
    from pydoc_data.topics import topics

    expected = "\n\n".join(topics[key] for key in sorted(topics))
    assert corpus() == expected
    assert corpus("", 1000) == expected[:1000]
    assert "language-modeling" in TASKS


def test_shapes_dtypes_and_targets_are_the_next_characters(no_network):
    sec = section(max_chars=20_000, context=32)
    data = build_dataset(sec)
    text, vocab = corpus("", 20_000), vocabulary(sec.params)
    assert data.dims == dims(sec) == ((32,), len(set(text)), "language-modeling")
    assert data.task == "language-modeling" and data.name == "text"
    for x, y in (data.split("train"), data.split("val")):
        assert x.dtype == y.dtype == torch.int64
        assert x.shape == y.shape and x.shape[1] == 32 and len(x) > 0
        assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    # the training windows are consecutive stretches of the text, stride T, from an offset below T
    first = window_text(data.x_train[0], data.y_train[0], vocab)
    offset = text.find(first)
    assert 0 <= offset < 32
    for i in range(len(data.x_train)):
        start = offset + 32 * i
        assert window_text(data.x_train[i], data.y_train[i], vocab) == text[start:start + 33]


def test_validation_windows_come_from_the_end_and_never_overlap_training(tmp_path):
    n, context = 4000, 16
    path = random_file(tmp_path, n)
    text = corpus(path)
    data = build(path=path, context=context, val_fraction=0.25, n_val=5)
    vocab = vocabulary({"path": path})

    def starts(x, y):
        found = [text.find(window_text(a, b, vocab)) for a, b in zip(x, y)]
        assert all(s >= 0 for s in found)
        return found

    train_starts = starts(data.x_train, data.y_train)
    val_starts = starts(data.x_val, data.y_val)
    last_train_char = max(train_starts) + context  # windows hold context + 1 characters
    assert last_train_char < min(val_starts)
    assert min(val_starts) == n - n // 4  # the validation text is the last quarter and its first window leads
    assert len(val_starts) == 5 and val_starts == sorted(set(val_starts))
    assert all((s - min(val_starts)) % context == 0 for s in val_starts)
    assert max(val_starts) > n - n // 8  # evenly spaced over the validation text, not bunched at its start
    # training uses every window that fits before the validation text
    assert max(train_starts) + 2 * context + 1 > n - n // 4
    assert train_starts == list(range(train_starts[0], train_starts[0] + context * len(train_starts), context))


def test_n_val_caps_and_fewer_windows_are_all_kept(tmp_path):
    path = random_file(tmp_path, 2000)
    few = build(path=path, context=10, val_fraction=0.1, n_val=3)
    many = build(path=path, context=10, val_fraction=0.1, n_val=10_000)
    assert len(few.x_val) == 3
    assert len(many.x_val) == (200 - 1) // 10  # all stride-10 windows of the last 200 characters
    assert torch.equal(many.x_val[0], few.x_val[0])


def test_vocabulary_covers_every_id_and_round_trips(tmp_path):
    path = tmp_path / "mixed.txt"
    content = ("Grüße, 世界! tab\there; ünïcödé ≠ ascii. " * 40)
    path.write_text(content, encoding="utf-8")
    params = {"path": str(path), "context": 8}
    vocab = vocabulary(params)
    assert vocab == "".join(sorted(set(content)))
    data = build(**params)
    ids = torch.cat([data.x_train.flatten(), data.y_train.flatten(), data.x_val.flatten(), data.y_val.flatten()])
    assert int(ids.min()) >= 0 and int(ids.max()) < len(vocab) == data.output_dim
    encoded = encode(content, vocab)
    assert encoded.dtype == torch.int64 and encoded.shape == (len(content),)
    assert decode(encoded, vocab) == content
    assert decode(encoded.tolist(), vocab) == content
    assert [vocab[i] for i in encoded[:10].tolist()] == list(content[:10])
    with pytest.raises(ValueError):
        encode("abc#", "abc")
    with pytest.raises(ValueError):
        decode([0, 3], "abc")


def test_vocabulary_includes_characters_seen_only_in_validation(tmp_path):
    path = tmp_path / "tail.txt"
    path.write_text("ab" * 450 + "xyz" * 33 + "x", encoding="utf-8")  # x, y and z only in the last 100 of 1000
    assert vocabulary({"path": str(path), "val_fraction": 0.1}) == "abxyz"
    data = build(path=str(path), context=8, val_fraction=0.1)
    assert data.output_dim == 5


def test_unigram_entropy_matches_an_independent_count(tmp_path):
    path = tmp_path / "skewed.txt"
    rng = random.Random(1)
    train = "".join(rng.choice("aaaabbc") for _ in range(900))
    val = "".join(rng.choice("xyz") for _ in range(100))  # counted only if the split were wrong
    path.write_text(train + val, encoding="utf-8")
    counts = Counter(train)
    expected = -sum(c / 900 * math.log(c / 900) for c in counts.values())
    assert unigram_entropy({"path": str(path), "val_fraction": 0.1}) == pytest.approx(expected, rel=1e-12)
    whole = Counter(train + val)
    assert expected != pytest.approx(-sum(c / 1000 * math.log(c / 1000) for c in whole.values()))


def test_data_seeds_cut_different_training_windows(tmp_path):
    path = random_file(tmp_path, 3000)
    text = corpus(path)
    vocab = vocabulary({"path": path})
    offsets = set()
    for seed in range(6):
        data = build(path=path, context=16, seed=seed)
        offsets.add(text.find(window_text(data.x_train[0], data.y_train[0], vocab)))
        explorer.data.clear_cache()
        again = build(path=path, context=16, seed=seed)
        assert torch.equal(data.x_train, again.x_train) and torch.equal(data.x_val, again.x_val)
    assert len(offsets) > 1 and all(0 <= o < 16 for o in offsets)
    a, b = build(path=path, context=16, seed=0), build(path=path, context=16, seed=5)
    assert torch.equal(a.x_val, b.x_val)  # validation does not depend on the seed


def test_local_file_with_home_and_line_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_bytes(("line one\r\nline two\r\n" * 100).encode("utf-8"))
    text = corpus("~/notes.txt")
    assert text == "line one\nline two\n" * 100
    assert "\r" not in vocabulary({"path": "~/notes.txt"})
    data = build(path="~/notes.txt", context=8, max_chars=600)
    assert data.output_dim == len(set(text[:600]))


# ---- refusals ------------------------------------------------------------------------------


def refused(**params) -> SpecError:
    with pytest.raises(SpecError) as caught:
        section(**params)
    return caught.value


def test_refuses_a_missing_file_and_a_folder(tmp_path):
    error = refused(path=str(tmp_path / "nowhere.txt"))
    assert error.path == "data.path" and "does not exist" in error.message
    error = refused(path=str(tmp_path))
    assert error.path == "data.path" and "folder" in error.message


def test_refuses_a_file_over_the_size_limit(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: nothing is written
    assert MAX_BYTES == 20_000_000
    error = refused(path=str(path))
    assert error.path == "data.path" and "20 MB" in error.message


def test_refuses_text_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(("café " * 500).encode("latin-1"))
    error = refused(path=str(path))
    assert error.path == "data.path" and "UTF-8" in error.message
    pickled = tmp_path / "data.pkl"
    pickled.write_bytes(b"\x80\x04\x95" + bytes(range(256)) * 10)
    assert refused(path=str(pickled)).path == "data.path"


def test_refuses_a_text_too_short_for_the_context(tmp_path):
    path = random_file(tmp_path, 500)
    error = refused(path=path, context=64)
    assert error.path == "data.context"
    assert "500 characters" in error.message
    section(path=path, context=8)  # the same file serves a shorter context
    error = refused(path=path, context=8, max_chars=50)
    assert error.path == "data.max_chars" and "50 characters" in error.message
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert refused(path=str(empty)).path == "data.context"


def test_registered_params():
    entry = explorer.registry("datasets")["text"]
    assert entry.defaults() == {"path": "", "context": 64, "max_chars": 0, "val_fraction": 0.1, "n_val": 256,
                                "seed": 0}
    with pytest.raises(SpecError) as caught:
        _build_section("data", {"name": "text", "context": 3})
    assert caught.value.path == "data.context"
