"""Where dataset files (MNIST, CIFAR-10, a text corpus: every `data.path`) may be read from.

The library and the CLI read any local path their user names: it is that user's machine. A server
shared by many users (the web app) must not: it calls `restrict_reads(roots)` once, and from then on
`local_path` refuses every path that does not resolve (symlinks followed) inside one of those folders,
before anything is read or even looked up, with one message whatever the file (so a link cannot tell
whether a file exists, nor its size or content).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from explorer.registries import SpecError

_allowed_roots: tuple[Path, ...] | None = None  # None: any local path may be read


def restrict_reads(roots: Iterable[str | os.PathLike] | None) -> None:
    """Allow dataset files only inside `roots` (None: anywhere again). Process-wide: a server's setting."""
    global _allowed_roots
    _allowed_roots = None if roots is None else tuple(Path(root).expanduser().resolve() for root in roots)


def allowed_roots() -> tuple[Path, ...] | None:
    """The folders dataset files may be read from, or None when any local path may be."""
    return _allowed_roots


def local_path(path: str) -> str:
    """The absolute path `data.path` names (with ~ expanded); SpecError when reads are restricted and it
    resolves outside the allowed folders."""
    if "\x00" in path:
        raise SpecError("data.path", "contains a NUL character, which no file name has; give the path to the file")
    full = os.path.abspath(os.path.expanduser(path))
    roots = _allowed_roots
    if roots is None:
        return full
    resolved = Path(full).resolve()  # strict=False: no error, and no answer, for a missing file
    if not any(resolved == root or root in resolved.parents for root in roots):
        raise SpecError("data.path", f"this server reads dataset files only from {roots[0]} (EXPLORER_DATA_DIR) "
                                     "or from uploaded files; put the files there, or upload the text")
    return str(resolved)  # read what was checked, not a link that may change later
