"""Messages that carry user-supplied text (a URL, an upload, a file, the run store) shown as text.

Streamlit renders st.error / st.warning / st.info / st.caption / st.markdown (and widget labels and
help) as markdown: a value such as `[log in](http://...)` or `![x](http://...)` from a link would become
a clickable link or an image the visitor's browser fetches. Every piece of such text goes through
`escape` (or `spec_error` for a SpecError) before it reaches one of those calls.
"""

from __future__ import annotations

import re

from explorer.registries import SpecError

_ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# GitHub-flavoured autolinks (bare http://..., www...., a@b.c) are found after escapes are resolved, so
# a backslash does not stop them: an invisible word joiner after the ":" of "://", after "www" and after "@" does.
_AUTOLINK = re.compile(r"(:(?=//)|(?i:www)(?=\.)|@)")
WORD_JOINER = "\u2060"


def escape(text: object) -> str:
    """`text` as markdown that shows it literally: every ASCII punctuation character backslash-escaped (no
    links, images, HTML, emphasis, :icons: or $math$) and autolinks broken by an invisible word joiner."""
    joined = _AUTOLINK.sub(lambda m: m.group(1) + WORD_JOINER, str(text))
    return _ASCII_PUNCTUATION.sub(r"\\\1", joined)


def spec_error(error: SpecError) -> str:
    """`**path**: message` of a SpecError, both parts escaped."""
    return f"**{escape(error.path)}**: {escape(error.message)}"


def failure(error: BaseException) -> str:
    """An unexpected error in one line, escaped: its type and the first line of its text."""
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return escape(f"{type(error).__name__}: {first}" if first else type(error).__name__)


def steps_text(status: str, steps_done: int, total: int | None, diverged_at: int | None = None) -> str:
    """How far a run went, in the words every page uses: "diverged at step 3 of 10" for a diverged run (the steps
    logged after its divergence do not count), else "10 of 10 steps"."""
    of = f" of {total}" if total else ""
    if status == "diverged" and diverged_at is not None:
        return f"diverged at step {diverged_at}{of}"
    return f"{steps_done}{of} steps"
