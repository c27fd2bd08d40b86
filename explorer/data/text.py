"""Character-level language modeling: next-character prediction over a text, nothing downloaded.

The default text ships with every Python installation: the standard library's documentation
topics (`pydoc_data.topics`, about 465K characters). `data.path` names a local UTF-8 file
instead; it is only read and decoded, never executed or unpickled. The last `val_fraction`
of the text validates (a split by position, so no window straddles both), and each example
is a window of `context` characters whose targets are the same window shifted by one.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

import numpy as np
import torch

from explorer.data.base import DATASETS, SEED
from explorer.data.files import local_path
from explorer.registries import Param, SpecError

MAX_BYTES = 20_000_000  # 20 MB: a text file larger than this is refused (the whole file is read and encoded)
MIN_WINDOWS = 4  # windows each split must hold at least, whatever the training offset
DEFAULT_SOURCE = "the Python documentation topics (pydoc_data.topics)"
FILE_HINT = "set data.path to a local UTF-8 text file, or leave it empty for " + DEFAULT_SOURCE


# ---- the text ----------------------------------------------------------------------------


def corpus(path: str = "", max_chars: int = 0) -> str:
    """The text `path` names (the Python documentation topics when empty), cut to its first max_chars (0 = all).

    Cached: a file is read again only when its size or modification time changes. Line ends
    are normalised to "\\n" as in Python's text mode. A file that cannot serve raises SpecError
    at data.path saying how to fix it.
    """
    if not path:
        text = _default_text()
    else:
        full = local_path(path)
        try:
            stat = os.stat(full)
        except FileNotFoundError:
            raise SpecError("data.path", f"file {full} does not exist; {FILE_HINT}") from None
        except OSError as err:
            raise SpecError("data.path", f"cannot read {full} ({err.strerror}); {FILE_HINT}") from None
        text = _read_text(full, stat.st_size, stat.st_mtime_ns)
    return text[:max_chars] if max_chars > 0 else text


@lru_cache(maxsize=1)
def _default_text() -> str:
    """The standard library's documentation topics, joined in sorted-key order with blank lines."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise SpecError("data.path", "this Python installation lacks pydoc_data, the default text; set data.path "
                                     "to a local UTF-8 text file") from None
    return "\n\n".join(topics[key] for key in sorted(topics))


@lru_cache(maxsize=4)
def _read_text(full: str, size: int, mtime_ns: int) -> str:
    """The decoded file; size and mtime only key the cache (a changed file is read again)."""
    if os.path.isdir(full):
        raise SpecError("data.path", f"{full} is a folder; point data.path at a UTF-8 text file inside it")
    if size > MAX_BYTES:
        raise SpecError("data.path", f"{full} is {size / 1e6:.1f} MB, over the {MAX_BYTES // 1_000_000} MB limit; "
                                     "point data.path at a shorter excerpt of it")
    try:
        with open(full, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise SpecError("data.path", f"cannot read {full} ({err.strerror}); {FILE_HINT}") from None
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is not part of the text
    except UnicodeDecodeError as err:
        raise SpecError("data.path", f"{full} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start} "
                                     "cannot be decoded); convert it to UTF-8 (e.g. iconv -t UTF-8) or choose "
                                     "another file") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _params(params: dict) -> dict:
    """The data section's parameters with defaults for those missing."""
    return {**DATASETS["text"].defaults(), **params}


def _used_text(p: dict) -> str:
    return corpus(p["path"], p["max_chars"])


def _n_val_chars(n_chars: int, val_fraction: float) -> int:
    """Characters at the end of the text that validate."""
    return max(1, int(round(val_fraction * n_chars)))


# ---- vocabulary and encoding ---------------------------------------------------------------


def vocabulary(params: dict) -> str:
    """The sorted distinct characters of the used text (training and validation: none unknown); id = position."""
    p = _params(params)
    return _vocabulary_of(_used_text(p))


@lru_cache(maxsize=4)
def _vocabulary_of(text: str) -> str:
    return "".join(sorted(set(text)))


def encode(text: str, vocab: str) -> torch.Tensor:
    """Character ids (int64, shape (len(text),)) of `text` in `vocab`; ValueError on a character not in it."""
    if not text:
        return torch.zeros(0, dtype=torch.int64)
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    codes = np.frombuffer(vocab.encode("utf-32-le"), dtype=np.uint32)
    order = np.argsort(codes, kind="stable")
    position = np.searchsorted(codes[order], points).clip(0, max(len(codes) - 1, 0))
    if not len(codes) or (codes[order][position] != points).any():
        missing = sorted(set(text) - set(vocab))
        raise ValueError(f"characters not in the vocabulary: {''.join(missing[:20])!r}")
    return torch.from_numpy(order[position].astype(np.int64))


def decode(ids, vocab: str) -> str:
    """The text of a 1-d sequence of character ids (a tensor or a list of ints)."""
    if getattr(ids, "ndim", 1) != 1:
        raise ValueError(f"decode takes a 1-d sequence of ids, got {ids.ndim} dimensions")
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if any(not isinstance(i, int) for i in ids):
        raise ValueError("decode takes a 1-d sequence of integer ids")
    bad = [i for i in ids if not 0 <= i < len(vocab)]
    if bad:
        raise ValueError(f"id {bad[0]} is outside the vocabulary of {len(vocab)} characters")
    return "".join(vocab[i] for i in ids)


def unigram_entropy(params: dict) -> float:
    """Entropy (nats) of the training text's character frequencies.

    The bar a language model must beat: predicting every character from its frequency alone
    gives this cross-entropy on the training text.
    """
    p = _params(params)
    text = _used_text(p)
    train = text[:len(text) - _n_val_chars(len(text), p["val_fraction"])]
    counts = torch.bincount(encode(train, _vocabulary_of(text))).double()
    freq = counts[counts > 0] / counts.sum()
    return float(-(freq * freq.log()).sum())


# ---- windows -----------------------------------------------------------------------------


def _long_enough(n_chars: int, context: int, val_fraction: float) -> bool:
    """Whether both splits hold MIN_WINDOWS windows of context + 1 characters (training from any offset)."""
    n_val = _n_val_chars(n_chars, val_fraction)
    return n_chars - n_val >= (MIN_WINDOWS + 1) * context and n_val >= MIN_WINDOWS * context + 1


def _chars_needed(context: int, val_fraction: float) -> int:
    """The shortest text length that is long enough (both conditions grow with the length)."""
    # lower bounds (rounding moves the validation share by at most half a character), then step up
    n = max(math.floor(((MIN_WINDOWS + 1) * context - 0.5) / (1 - val_fraction)),
            math.floor((MIN_WINDOWS * context + 0.5) / val_fraction)) - 1
    while not _long_enough(n, context, val_fraction):
        n += 1
    return n


def _check(p):
    """Refuse a path that cannot serve, or a text too short for the context, naming the fix."""
    text = _used_text(p)  # raises at data.path for a missing, oversized or non-UTF-8 file
    context, val_fraction = p["context"], p["val_fraction"]
    if _long_enough(len(text), context, val_fraction):
        return
    needed = _chars_needed(context, val_fraction)
    fits = [t for t in range(context - 1, 3, -1) if _long_enough(len(text), t, val_fraction)]
    shorter = f"lower data.context to {fits[0]} or less, or " if fits else ""
    where = DEFAULT_SOURCE if not p["path"] else local_path(p["path"])
    if p["max_chars"] and len(corpus(p["path"])) >= needed:
        raise SpecError("data.max_chars", f"the first {len(text)} characters of {where} are too few for context "
                                          f"{context}: at least {MIN_WINDOWS} windows of {context + 1} characters in "
                                          f"training and in validation need {needed}; {shorter}set data.max_chars to "
                                          f"{needed} or more (0 = all)")
    raise SpecError("data.context", f"{where} has {len(text)} characters, too few for context {context}: at least "
                                    f"{MIN_WINDOWS} windows of {context + 1} characters in training and in "
                                    f"validation need {needed}; {shorter}use a longer text")


def _windows(ids: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of context + 1 ids at `starts`: inputs (N, T) and the targets, the same shifted by one."""
    index = starts[:, None] + torch.arange(context)
    return ids[index], ids[index + 1]


@DATASETS.register(
    "text",
    "character-level language modeling on the Python documentation text or a local UTF-8 file (next character)",
    (
        Param("path", "str", "", "a local UTF-8 text file (at most 20 MB); empty = " + DEFAULT_SOURCE),
        Param("context", "int", 64, "characters per example (sequence length T)", low=4, high=2048),
        Param("max_chars", "int", 0, "use only the first max_chars characters of the text (0 = all)", low=0),
        Param("val_fraction", "float", 0.1, "share of the text, at its end, held out for validation",
              low=0.01, high=0.5),
        Param("n_val", "int", 256, "validation windows at most, evenly spaced (every log evaluates them all)",
              low=1),
        SEED,
    ),
    dims=lambda p: ((p["context"],), len(vocabulary(p)), "language-modeling"),
    check=_check,
)
def text_dataset(path: str, context: int, max_chars: int, val_fraction: float, n_val: int, seed: int):
    """Windows of context + 1 characters, stride context: x the first T ids, y the last T (next characters).

    Training windows start at an offset 0..T-1 drawn from the seed, so data seeds cut the
    training text differently; validation windows do not depend on the seed.
    """
    p = dict(path=path, context=context, max_chars=max_chars, val_fraction=val_fraction, n_val=n_val, seed=seed)
    _check(p)
    used = _used_text(p)
    ids = encode(used, _vocabulary_of(used))
    split = len(used) - _n_val_chars(len(used), val_fraction)
    train, val = ids[:split], ids[split:]

    offset = int(torch.randint(context, (1,), generator=torch.Generator().manual_seed(seed)))
    span = (len(train) - offset - 1) // context * context  # consecutive windows: reshape, no index tensor
    x_train = train[offset:offset + span].view(-1, context).clone()
    y_train = train[offset + 1:offset + 1 + span].view(-1, context).clone()

    available = (len(val) - 1) // context  # stride-context windows in the validation text
    kept = min(n_val, available)
    chosen = torch.arange(kept) * available // kept  # evenly spaced and distinct, so never overlapping
    x_val, y_val = _windows(val, chosen * context, context)
    return x_train, y_train, x_val, y_val
