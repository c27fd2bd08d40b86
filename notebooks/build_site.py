"""Build a static HTML site of the executed notebooks, every figure included (works offline).

    python notebooks/build_site.py OUTDIR                  # all six, fast mode (EXPLORER_FAST=1)
    python notebooks/build_site.py OUTDIR --full           # the full experiments (about 12 minutes)
    python notebooks/build_site.py OUTDIR 00_quickstart    # some notebooks only

Each notebook is executed top to bottom in a fresh kernel (nbclient) and converted with nbconvert's
HTML exporter; OUTDIR gets one NAME.html and the executed NAME.ipynb per notebook and an index.html linking them. The figures
survive because the notebooks call `explorer.plots.notebook_mode()`: every figure's output carries
an HTML copy next to plotly's JSON, and plotly.js is inlined once per page (no CDN). The equations are
typeset by a copy of MathJax 2 in OUTDIR/mathjax (from the jupyter-server-mathjax package, in the
notebooks and test extras), and the interactive outputs (ipywidgets, Panel), which need a live kernel and
whose viewers come from CDNs, are replaced on the pages by a note: a page loads nothing from the network.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(HERE.glob("*.ipynb"))
# The copy build_site makes, relative to a page: nbconvert's CDN configuration, then ours (config/local/).
MATHJAX_URL = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe,local/explorer"
# The package's fonts are STIX-Web's, not MathJax's default TeX font (whose font data it does not have).
MATHJAX_LOCAL_CONFIG = """MathJax.Hub.Config({"HTML-CSS": {availableFonts: ["STIX-Web"], preferredFont: "STIX-Web",
                                  webFont: "STIX-Web", imageFont: null}});
MathJax.Ajax.loadComplete("[MathJax]/config/local/explorer.js");
"""


def copy_mathjax(outdir: Path) -> None:
    """Copy MathJax 2 (jupyter-server-mathjax's, about 10 MB) into OUTDIR/mathjax, with our configuration."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise SystemExit("the site's equations need MathJax on disk: pip install jupyter-server-mathjax "
                         "(it comes with pip install -e \".[notebooks]\")") from None
    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", outdir / "mathjax", dirs_exist_ok=True)
    (outdir / "mathjax" / "config" / "local").mkdir(exist_ok=True)
    (outdir / "mathjax" / "config" / "local" / "explorer.js").write_text(MATHJAX_LOCAL_CONFIG)


# Outputs that only a live kernel can bring to life: ipywidgets' views and Panel's dashboards (whose loaders
# would fetch Panel from its CDN).
LIVE_OUTPUTS = ("application/vnd.jupyter.widget-view+json", "application/vnd.holoviews_load.v0+json",
                "application/vnd.holoviews_exec.v0+json")
LIVE_NOTE = ("<p><em>Interactive output: it needs a running kernel. Open this notebook in JupyterLab "
             "(<code>jupyter lab notebooks/</code>) to use it.</em></p>")


def is_live(output: dict) -> bool:
    return any(kind in output.get("data", {}) for kind in LIVE_OUTPUTS)


def static_copy(notebook):
    """The notebook as its static page shows it: each cell's live outputs (and the empty displays beside
    them) replaced by one note, and no saved widget state (its viewer comes from a CDN). The executed
    notebook keeps them all."""
    import nbformat

    page = nbformat.from_dict(notebook)  # a deep copy
    page.metadata.pop("widgets", None)
    for cell in page.cells:
        outputs = cell.get("outputs", [])
        if any(map(is_live, outputs)):
            empty = [out.get("output_type") == "display_data" and not out.get("data") for out in outputs]
            cell.outputs = [out for out, blank in zip(outputs, empty) if not (blank or is_live(out))]
            cell.outputs.append(nbformat.v4.new_output("display_data", data={"text/html": LIVE_NOTE}))
    return page


def execute(path: Path, folder: Path | None = None, timeout: int = 900):
    """The notebook at `path` run top to bottom by a fresh kernel (in `folder`, by default the notebook's own,
    with the current environment); its outputs are in the returned notebook."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(folder or path.parent)}}).execute()
    return notebook


def write_page(notebook, name: str, outdir: Path) -> Path:
    """Write OUTDIR/NAME.html of an executed notebook and the notebook itself, OUTDIR/NAME.ipynb (to download,
    or to open in JupyterLab with its outputs)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", mathjax_url=MATHJAX_URL)
    exporter.require_js_url = ""  # nothing on the page needs require.js; without it plotly.js sets window.Plotly
    body, _ = exporter.from_notebook_node(static_copy(notebook), resources={"metadata": {"name": name}})
    nbformat.write(notebook, outdir / f"{name}.ipynb")
    page = outdir / f"{name}.html"
    page.write_text(body, encoding="utf-8")
    return page


def describe(notebook) -> tuple[str, str]:
    """A notebook's title (its first heading) and its first paragraph as plain text, as the index lists them."""
    source = next((cell.source for cell in notebook.cells if cell.cell_type == "markdown"), "")
    title = next((line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")), "")
    paragraphs = [" ".join(block.split()) for block in re.split(r"\n\s*\n", source)
                  if block.strip() and not block.lstrip().startswith("#")]
    paragraph = re.sub(r"\*+([^*]+)\*+", r"\1", paragraphs[0] if paragraphs else "")  # emphasis as plain text
    return title, paragraph if len(paragraph) <= 400 else paragraph[:399].rsplit(" ", 1)[0] + "…"


def write_site(outdir: str | os.PathLike, executed: dict, mode: str) -> list[Path]:
    """The site of notebooks already executed (`executed`: {name: notebook}): a page each, MathJax, and an
    index that says what each notebook teaches; `mode` says how they were executed."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    copy_mathjax(outdir)
    pages, rows = [], []
    for name, notebook in executed.items():
        pages.append(write_page(notebook, name, outdir))
        title, paragraph = describe(notebook)
        rows.append(f"<li><a href='{html.escape(name)}.html'><b>{html.escape(title or name)}</b></a> "
                    f"(<a href='{html.escape(name)}.ipynb'>notebook</a>)<br>{html.escape(paragraph)}</li>")
    (outdir / "index.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>Residual Explorer notebooks</title>"
        "<style>body{font-family:sans-serif;max-width:52em;margin:2em auto;line-height:1.4}li{margin:0 0 1em}</style>"
        "<script type='text/x-mathjax-config'>MathJax.Hub.Config({tex2jax: {inlineMath: [['$', '$']]}});</script>"
        f"<script src='{MATHJAX_URL}'></script>"
        f"<h1>Residual Explorer notebooks</h1><p>Executed in {html.escape(mode)}.</p><ul>{''.join(rows)}</ul>\n",
        encoding="utf-8")
    return pages


def build_site(outdir: str | os.PathLike, names: list[str] | None = None, fast: bool = True) -> list[Path]:
    """Execute the notebooks of `names` (stems; all when empty) and write their site; returns the pages."""
    from tqdm.auto import tqdm

    chosen = [p for p in NOTEBOOKS if not names or p.stem in names]
    unknown = sorted(set(names or []) - {p.stem for p in NOTEBOOKS})
    if unknown:
        raise SystemExit(f"no notebook named {', '.join(unknown)}; known: {', '.join(p.stem for p in NOTEBOOKS)}")
    os.environ["EXPLORER_FAST"] = "1" if fast else "0"  # the kernels inherit it
    executed = {path.stem: execute(path) for path in tqdm(chosen, desc="notebooks", unit="notebook")}
    return write_site(outdir, executed, "fast mode (EXPLORER_FAST=1)" if fast else "full mode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("names", nargs="*", help="notebook names without .ipynb (default: all)")
    parser.add_argument("--full", action="store_true", help="run the full experiments instead of fast mode")
    args = parser.parse_args()
    pages = build_site(args.outdir, args.names, fast=not args.full)
    print(f"wrote {len(pages)} pages and index.html to {args.outdir}")


if __name__ == "__main__":
    main()
