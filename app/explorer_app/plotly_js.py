"""plotly.js for the charts redrawn in place (figures.show(..., live=True)), served by app/server.py.

The file is the installed plotly package's own bundle: the version its figures' JSON is written for, read
from disk (no network). Light to import: server.py adds the route before torch and the library load.
"""

import importlib.util
from pathlib import Path

served: str | None = None  # the URL path, once the server has the route; until then figures use st.plotly_chart


def bundle() -> Path:
    return Path(importlib.util.find_spec("plotly").origin).parent / "package_data" / "plotly.min.js"


def route():
    """The Starlette route that serves bundle() at /vendor/plotly.min.js under the server's base URL path (a
    class served behind a proxy at /explorer/ finds it at /explorer/vendor/...); making it switches the
    in-place charts on."""
    from starlette.responses import FileResponse
    from starlette.routing import Route

    global served
    path = bundle()

    async def plotly_js(request):
        return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    served = under_base("vendor/plotly.min.js")
    return Route(served, plotly_js)


def under_base(path: str) -> str:
    """`path` under the server's base URL path: /path, or /explorer/path behind a proxy at /explorer/."""
    from streamlit import config

    base = config.get_option("server.baseUrlPath").strip("/")
    return f"/{base}/{path}" if base else f"/{path}"
