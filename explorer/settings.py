"""The one reader of the settings made by environment variables: numbers (caps, cache sizes, server limits)
and the plug-in folder.

A number variable that is unset or blank gives its default; anything else must be a whole number in range,
or the reader raises a SettingError that names the variable, what it sets, and the fix. Read at each use, so
a server, the CLI and a notebook follow a change without restarting.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.registries import SpecError


class SettingError(SpecError):
    """An environment variable holds a value that is not a whole number in its range (its field is the variable)."""


def whole_number(variable: str, default: int, meaning: str, low: int = 1) -> int:
    """The value of `variable` (a whole number >= `low`), or `default` when it is unset or blank."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        shown = text if len(text) <= 40 else text[:40] + "..."
        kind = "a positive whole number" if low == 1 else f"a whole number of at least {low}"
        raise SettingError(variable, f"{shown!r} is not valid: it sets the {meaning}; set it to {kind} "
                                     f"(default {default}) or unset it")
    return value


PLUGINS_VARIABLE = "EXPLORER_PLUGINS_DIR"


def plugins_folder() -> Path | None:
    """The folder of plug-in files named by EXPLORER_PLUGINS_DIR (each .py file in it registers entries, e.g.
    a probe in one file, and is imported with the library's own), or None when it is unset or blank."""
    text = os.environ.get(PLUGINS_VARIABLE, "").strip()
    if not text:
        return None
    folder = Path(text).expanduser()
    if not folder.is_dir():
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise SettingError(PLUGINS_VARIABLE, f"{shown!r} is not a folder: it names the folder of plug-in files "
                                             f"(probes in one file each); create it, or unset the variable")
    return folder
