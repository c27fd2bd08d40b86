"""The static site of the executed notebooks keeps every figure (notebooks/build_site.py, fast mode).

Writes every page from the notebooks the notebook tests executed. Checks that each figure of the executed quickstart is in the
HTML (its div and the script that draws it) with plotly.js inlined once, that a cell's interactive outputs
became one note, and, in Chromium with no network (skipped without it except in CI), that every figure is
drawn with its title, every equation is typeset (MathJax from the site's folder) and nothing is requested
from the network.
"""

import html
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
PAGES = ["00_quickstart", "03_idinit"]  # the figures' page, and one with a Panel dashboard (its JS and CSS)
PLOTLY_JS_BANNER = "plotly.js v"  # the licence banner at the top of the plotly.js bundle


@pytest.fixture(scope="module")
def site(tmp_path_factory, executed_notebooks):
    """The site of every notebook, written from the notebooks the notebook tests executed (fast mode)."""
    failed = [name for name, notebook in executed_notebooks.items() if isinstance(notebook, BaseException)]
    if failed:
        pytest.fail(f"{', '.join(failed)} did not run (tests/test_notebooks.py says why)")
    outdir = tmp_path_factory.mktemp("site")
    build_site.write_site(outdir, executed_notebooks, "fast mode (EXPLORER_FAST=1)")
    return outdir


def need_chromium() -> None:
    """Skip without Chromium or Playwright; in CI (CI=true), fail."""
    missing = [w for w, ok in (("Chromium", Path(browsing.CHROMIUM).exists()),
                               ("playwright", importlib.util.find_spec("playwright") is not None)) if not ok]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs {' and '.join(missing)}")
        pytest.skip(f"needs {' and '.join(missing)}")


def figures_of(notebook: dict) -> list[dict]:
    return [out["data"] for cell in notebook["cells"] if cell["cell_type"] == "code"
            for out in cell.get("outputs", []) if PLOTLY in out.get("data", {})]


def test_every_figure_of_the_quickstart_is_in_its_page(site):
    page = (site / "00_quickstart.html").read_text(encoding="utf-8")
    unescaped = page.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u002f", "/")  # plotly's JSON in HTML
    figures = figures_of(json.loads((site / "00_quickstart.ipynb").read_text(encoding="utf-8")))
    assert len(figures) >= 3
    for data in figures:
        fallback = "".join(data["text/html"])  # nbformat stores text as a list of lines
        div = re.search(r'<div id="([0-9a-f-]+)" class="plotly-graph-div"', fallback).group(1)
        assert f'id="{div}"' in page
        assert re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div), page)
        title = json.dumps(data[PLOTLY]["layout"]["title"]["text"])[1:-1]
        assert title in page or title in unescaped, title
    assert page.count(PLOTLY_JS_BANNER) == 1, "plotly.js must be inlined exactly once"
    assert not re.search(r'<script[^>]+src="https?://', page), "no script from the network (plotly.js, MathJax)"
    assert (site / build_site.MATHJAX_URL.split("?")[0]).is_file()
    assert "unpkg.com" not in page  # the widgets' viewer: their saved state is left out
    assert (site / "index.html").read_text().count("00_quickstart.html") == 1


def test_the_index_says_what_each_notebook_teaches(site, executed_notebooks):
    """Each notebook has one entry: a link to its page, its title and its opening paragraph (a reader picks a
    lesson from the index, not from a file name)."""
    index = (site / "index.html").read_text(encoding="utf-8")
    for name, notebook in executed_notebooks.items():
        title, paragraph = build_site.describe(notebook)
        assert index.count(f"href='{name}.html'") == 1 and title and len(paragraph.split()) >= 10, name
        assert html.escape(title) in index and html.escape(paragraph) in index, name


def test_the_page_draws_every_figure_offline_in_chromium(site, tmp_path):
    need_chromium()
    figures = figures_of(json.loads((site / "00_quickstart.ipynb").read_text(encoding="utf-8")))
    titles = [data[PLOTLY]["layout"]["title"]["text"] for data in figures]
    with browsing.browser(tmp_path / "profile", height=1200) as page:
        page.context.set_offline(True)
        page.goto((site / "00_quickstart.html").as_uri())
        page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figures)}",
                               timeout=60_000)
        drawn = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                              ".map(g => (g.layout.title || {}).text || '')")
    for title in titles:
        assert title in drawn


@pytest.mark.parametrize("name", PAGES)
def test_a_page_typesets_its_equations_and_asks_no_network(site, tmp_path, name):
    """Every equation is typeset by the site's own MathJax (each $...$ becomes a math/tex script and a
    typeset .MathJax element), and the page requests nothing but files (no CDN: MathJax, Panel, widgets)."""
    need_chromium()
    with browsing.browser(tmp_path / "profile", height=1200) as page:
        requested = browsing.requests_elsewhere(page)
        page.context.set_offline(True)
        page.goto((site / f"{name}.html").as_uri())
        page.wait_for_function("() => { const n = document.querySelectorAll('script[type^=\"math/tex\"]').length;"
                               " return n > 0 && document.querySelectorAll('.MathJax').length === n; }", timeout=60_000)
        page.wait_for_load_state("networkidle")
    assert requested == []


def test_a_live_output_becomes_a_note_on_the_page(site):
    """ipywidgets' views and Panel's dashboard need a kernel: on the page each such cell shows one note instead,
    while the executed notebook keeps them (to open in JupyterLab)."""
    notebook = json.loads((site / "03_idinit.ipynb").read_text(encoding="utf-8"))
    live_cells = [cell for cell in notebook["cells"] if any(map(build_site.is_live, cell.get("outputs", [])))]
    assert len(live_cells) >= 2 and "widgets" in notebook["metadata"]  # an ipywidgets cell and the dashboard
    page = (site / "03_idinit.html").read_text(encoding="utf-8")
    assert page.count(build_site.LIVE_NOTE) == len(live_cells)
    assert not any(kind in page for kind in build_site.LIVE_OUTPUTS)
