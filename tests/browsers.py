"""What the browser tests share: the app's server and browser drivers (benchmarks/app_responsiveness.py, also the
responsiveness benchmark's), and the skip of a browser test module where Chromium or Playwright is missing."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import app_responsiveness as browsing  # noqa: E402

__all__ = ["browsing", "skip_without_browser"]


def skip_without_browser(*modules: str) -> list[str]:
    """Skip the calling test module (or test) when Chromium, Playwright or one of `modules` is missing; in CI
    (CI=true) the browser tests must run, so there it returns what is missing, for the tests to fail on."""
    packages = ("playwright", *modules)
    found = [("Chromium", Path(browsing.CHROMIUM).exists())]
    found += [(name, importlib.util.find_spec(name) is not None) for name in packages]
    missing = [what for what, ok in found if not ok]
    if missing and os.environ.get("CI") != "true":
        pytest.skip(f"needs {' and '.join(missing)} (apt-get install chromium; pip install {' '.join(packages)})",
                    allow_module_level=True)
    return missing
