"""HTML embedding of figures: a fixed div id, the figure as a JSON data block, plotly.js from the
installed package (no CDN), and one script that draws every embedded figure.

No figure brings an inline script of its own (plotly's ``to_html`` does): a page's
Content-Security-Policy then needs no ``'unsafe-inline'`` for scripts. The figure travels in a
``<script type="application/json">`` data block, which a browser never executes (CSP does not
apply to it), and :data:`DRAW_FIGURES_JS` turns each block into a plot. The dashboard serves that
script as a file; the self-contained report inlines it and allows it by its hash.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline
from markupsafe import Markup
from plotly.io.json import to_json_plotly

_DIV_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

# Draws every figure of the page: the data block names its div. Runs once, after the page is parsed.
DRAW_FIGURES_JS = """\
(function () {
  "use strict";
  function draw() {
    var blocks = document.querySelectorAll("script[type='application/json'][data-plotly-figure]");
    Array.prototype.forEach.call(blocks, function (block) {
      var div = document.getElementById(block.getAttribute("data-plotly-figure"));
      if (!div || div.classList.contains("js-plotly-plot")) return;
      var embedded = JSON.parse(block.textContent);
      Plotly.newPlot(div, embedded.figure.data, embedded.figure.layout, embedded.config);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
"""


def figure_to_div(fig: go.Figure, div_id: str) -> str:
    """The figure as an HTML fragment with a caller-chosen id, so exports are byte-identical.

    plotly.js and :data:`DRAW_FIGURES_JS` must be loaded separately, once per page.
    """
    if not _DIV_ID.match(div_id):
        raise ValueError(f"div_id must match {_DIV_ID.pattern}, got {div_id!r}")
    # plotly's JSON encoder writes <, > and / as \\u escapes: the text cannot close the block.
    data = pio.to_json(fig, validate=False)
    config = to_json_plotly(PLOTLY_CONFIG)
    body = f'{{"figure": {data}, "config": {config}}}'
    height = f"{fig.layout.height or 480}px"
    return (
        f'<div style="height:{height}; width:100%;">'
        f'<div id="{div_id}" class="plotly-graph-div" style="height:100%; width:100%;"></div>'
        f'<script type="application/json" data-plotly-figure="{div_id}">{body}</script>'
        "</div>"
    )


@dataclass(frozen=True)
class Chart:
    """A figure ready to embed (the report's, the dashboard's): its div, title, kind and traces."""

    div_id: str
    title: str
    html: Markup
    kind: str = ""
    traces: int = 0  # the dashboard's browser tests check that every trace was drawn


def embed(fig: go.Figure, div_id: str, kind: str = "") -> Chart:
    """``fig`` as a :class:`Chart` under ``div_id`` (:func:`figure_to_div`)."""
    title = html.unescape(fig.layout.title.text or div_id)  # the chart's title is plotly plain text
    # plotly-generated markup with our own escaping of the data block: trusted
    return Chart(div_id, title, Markup(figure_to_div(fig, div_id)), kind, len(fig.data))


@lru_cache(maxsize=1)
def plotly_js_source() -> str:
    """The minified plotly.js bundled with the installed plotly package."""
    return plotly.offline.get_plotlyjs()
