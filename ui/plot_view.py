"""A Plotly chart inside ``gr.HTML`` that reports clicks to Python.

``gr.Plot`` in Gradio 6 has only a ``change`` event, so a click on a heatmap cell never
reaches Python. This component draws the figure with the plotly.js that ships inside the
``plotly`` Python package (served locally: works offline) and turns ``plotly_click`` into a
custom ``point_click`` event whose data is ``{"x", "y", "curve"}``.

The script is plotly.js's cartesian bundle (scatter, bar, heatmap and the other 2-D traces: all the page draws),
kept in ``ui/vendor`` from npm's ``plotly.js-cartesian-dist-min`` at the plotly.js version the ``plotly`` package
writes figures for: 1.5 MB against the full bundle's 4.8 MB, which a browser takes ~0.3 s longer to evaluate on every
page open (2 cores). Another ``plotly`` version gets its own full bundle. It is served from a copy under the working
folder, named by a relative path: the page's config (``/config``) would otherwise show where the server's Python
packages are installed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import gradio as gr
import plotly
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

log = logging.getLogger(__name__)
CARTESIAN_JS = Path(__file__).resolve().parent / "vendor" / f"plotly-cartesian-{get_plotlyjs_version()}.min.js"
FULL_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
PLOTLY_JS = CARTESIAN_JS if CARTESIAN_JS.is_file() else FULL_JS
SERVED_COPY = Path(".gradio") / "layercut" / (PLOTLY_JS.name if PLOTLY_JS == CARTESIAN_JS else
                                              f"plotly-{plotly.__version__}.min.js")  # relative to the working folder

# A plot first drawn inside a hidden block gets its props without ``height``: fall back, never fail.
_TEMPLATE = '<div class="lc-plot" style="height: ${typeof height === "undefined" ? 460 : height}px"></div>'

_CSS = """
.lc-plot { width: 100%; min-height: 120px; }
"""

# Nothing reaches outside: no Plotly logo, no "edit in Chart Studio" or send-to-cloud link; the mode bar keeps only
# "download as PNG" (twice the pixels, for slides).
CONFIG = {"responsive": True, "displaylogo": False, "showLink": False, "showSendToCloud": False,
          "showEditInChartStudio": False, "showTips": False, "displayModeBar": "hover",
          "modeBarButtons": [["toImage"]],
          "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "layercut"}}

_JS = r"""
const div = element.querySelector('.lc-plot');
const config = CONFIG_JSON;
let bound = false;
function draw() {
  if (!window.Plotly) { setTimeout(draw, 50); return; }
  const fig = props.value;
  if (!fig || typeof fig !== 'object' || !fig.data) { window.Plotly.purge(div); return; }
  window.Plotly.react(div, fig.data, fig.layout || {}, config).then(() => {
    div.dataset.rendered = String(Number(div.dataset.rendered || 0) + 1);
  });
  if (!bound) {
    bound = true;
    div.on('plotly_click', (event) => {
      const point = event && event.points && event.points[0];
      if (point) trigger('point_click', {x: point.x, y: point.y, curve: point.curveNumber});
    });
  }
}
// Charts in a tab that was hidden when they were drawn have no width: redraw on resize.
new ResizeObserver(() => { if (window.Plotly && div.data) window.Plotly.Plots.resize(div); }).observe(div);
draw();
watch('value', draw);
"""


_JS = _JS.replace("CONFIG_JSON", json.dumps(CONFIG))


class PlotView(gr.HTML):
    """Shows a Plotly figure (given as ``go.Figure`` or its JSON dict); clicks fire ``point_click``."""

    def __init__(self, value: go.Figure | dict | None = None, *, height: int = 460, **kwargs):
        # Relative URL: works at the root and behind a path prefix (e.g. a Space's proxy).
        head = f'<script src="gradio_api/file={plotly_path()}"></script>'
        super().__init__(value=value, html_template=_TEMPLATE, css_template=_CSS, js_on_load=_JS, head=head,
                         height=height, **kwargs)

    def postprocess(self, value):
        if isinstance(value, go.Figure):
            return json.loads(value.to_json())
        return value

    def api_info(self) -> dict:
        return {"type": "object", "description": "a Plotly figure as JSON ({data, layout})"}


@functools.cache
def plotly_path() -> str:
    """Where the page asks for plotly.js: the copy's relative path, served as a static file; the installed file's
    absolute path only when the working folder cannot be written to."""
    try:
        if not SERVED_COPY.is_file() or SERVED_COPY.stat().st_size != PLOTLY_JS.stat().st_size:
            _copy_atomically(PLOTLY_JS, SERVED_COPY)
    except OSError as err:
        log.warning("Serving plotly.js from where it is installed (%s): the page's config names that path", err)
        gr.set_static_paths([str(PLOTLY_JS)])
        return PLOTLY_JS.as_posix()
    gr.set_static_paths([str(SERVED_COPY.resolve())])
    return SERVED_COPY.as_posix()


def _copy_atomically(source: Path, target: Path) -> None:
    """Copy via a temporary file and a rename: a server starting beside this one never reads half a script."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copyfile(source, staging)
        os.replace(staging, target)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
