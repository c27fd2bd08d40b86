"""The static site of the executed notebooks keeps every figure (notebooks/build_site.py, fast mode).

Builds the quickstart's page and checks that each figure of the executed notebook is in the HTML (its
div and the script that draws it) with plotly.js inlined once, and, in Chromium with no network
(skipped without it except in CI), that every figure is drawn on the page with its title and the
equations are typeset (MathJax from the site's folder).
"""

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
sys.path.insert(0, str(ROOT / "benchmarks"))
pytest.importorskip("nbconvert")
pytest.importorskip("nbclient")
import build_site  # noqa: E402
import app_responsiveness as browsing  # noqa: E402  (the browser driver)

PLOTLY = "application/vnd.plotly.v1+json"
PLOTLY_JS_BANNER = "plotly.js v"  # the licence banner at the top of the plotly.js bundle


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("site")
    build_site.build_site(outdir, ["00_quickstart"], fast=True)
    return outdir


def figures_of(notebook: dict) -> list[dict]:
    return [out["data"] for cell in notebook["cells"] if cell["cell_type"] == "code"
            for out in cell.get("outputs", []) if PLOTLY in out.get("data", {})]


def test_every_figure_of_the_quickstart_is_in_its_page(site):
    page = (site / "00_quickstart.html").read_text(encoding="utf-8")
    figures = figures_of(json.loads((site / "00_quickstart.ipynb").read_text(encoding="utf-8")))
    assert len(figures) >= 3
    for data in figures:
        fallback = "".join(data["text/html"])  # nbformat stores text as a list of lines
        div = re.search(r'<div id="([0-9a-f-]+)" class="plotly-graph-div"', fallback).group(1)
        assert f'id="{div}"' in page
        assert re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div), page)
        title = data[PLOTLY]["layout"]["title"]["text"]
        assert json.dumps(title)[1:-1] in page
    assert page.count(PLOTLY_JS_BANNER) == 1, "plotly.js must be inlined exactly once"
    assert not re.search(r'<script[^>]+src="https?://', page), "no script from the network (plotly.js, MathJax)"
    assert (site / build_site.MATHJAX_URL.split("?")[0]).is_file()
    assert "unpkg.com" not in page  # the widgets' viewer: their saved state is left out
    assert (site / "index.html").read_text().count("00_quickstart.html") == 1


def test_the_page_draws_every_figure_offline_in_chromium(site, tmp_path):
    missing = [w for w, ok in (("Chromium", Path(browsing.CHROMIUM).exists()),
                               ("playwright", importlib.util.find_spec("playwright") is not None)) if not ok]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs {' and '.join(missing)}")
        pytest.skip(f"needs {' and '.join(missing)}")
    figures = figures_of(json.loads((site / "00_quickstart.ipynb").read_text(encoding="utf-8")))
    titles = [data[PLOTLY]["layout"]["title"]["text"] for data in figures]
    with browsing.browser(tmp_path / "profile", height=1200) as page:
        page.context.set_offline(True)
        page.goto((site / "00_quickstart.html").as_uri())
        page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figures)}",
                               timeout=60_000)
        drawn = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                              ".map(g => (g.layout.title || {}).text || '')")
        # the equations typeset by the site's own MathJax: no TeX source left in the text
        page.wait_for_function("() => document.querySelectorAll('.MathJax').length >= 5 && "
                               "!document.body.innerText.includes('\\\\tau')", timeout=60_000)
    for title in titles:
        assert title in drawn
