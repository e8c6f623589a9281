"""A measured scaling curve, and how it is written: a markdown table, a plotly figure as JSON, and one
self-contained HTML page with every figure found in a results folder (plotly.js inlined once, no CDN:
the page opens offline). ``benchmarks/scaling.py`` measures the curves.
"""

from __future__ import annotations

import html
import json
import os
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

PAGE = "scaling.html"
ORDER = (
    "ingest",
    "report",
    "history",
    "list_runs",
    "dispatch",
)  # the order; other figures after them


@dataclass
class Curve:
    """Medians measured at each ``x``: one line per ``series`` (None where not measured), and
    ``columns`` that only the table shows (ratios, seeding times)."""

    name: str  # the file stem under the results folder
    title: str
    x_label: str
    y_label: str
    x: list[int]
    series: dict[str, list[float | None]]
    columns: dict[str, list[str]] = field(default_factory=dict)
    log_y: bool = False
    note: str = ""


def conditions() -> str:
    """When and where a curve was measured: the date, the cores and the load average (1, 5, 15 min)."""
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{now}, {os.cpu_count()} cores ({platform.machine()}), load average {load}"


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def markdown_table(curve: Curve) -> str:
    head = [curve.x_label, *curve.series, *curve.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, x in enumerate(curve.x):
        cells = [f"{x:,}"]
        cells += [_cell(ys[i]) for ys in curve.series.values()]
        cells += [values[i] for values in curve.columns.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(curve: Curve) -> go.Figure:
    """Lines with markers against a logarithmic x axis (the sizes grow by factors)."""
    traces = [
        go.Scatter(x=curve.x, y=ys, name=name, mode="lines+markers", connectgaps=False)
        for name, ys in curve.series.items()
    ]
    fig = go.Figure(data=traces)
    fig.update_layout(
        title={"text": curve.title},
        template="plotly_white",
        xaxis={"title": {"text": curve.x_label}, "type": "log", "tickvals": curve.x},
        yaxis={"title": {"text": curve.y_label}, "type": "log" if curve.log_y else "linear"},
        legend={"orientation": "h", "y": -0.25},
        meta={"note": curve.note, "table": markdown_table(curve)},
    )
    return fig


def write(curve: Curve, out: Path) -> Path:
    """Write ``<name>.json`` (the figure, with its table and note in ``layout.meta``) and rebuild the
    page of every figure in ``out``; returns the page."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{curve.name}.json").write_text(figure(curve).to_json(), encoding="utf-8")
    return write_page(out)


def write_page(out: Path) -> Path:
    """One HTML page of every ``*.json`` figure in ``out``, each with its table and note."""
    sections, scripts = [], []
    paths = sorted(
        out.glob("*.json"), key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else len(ORDER), p.stem)
    )
    for i, path in enumerate(paths):
        fig = json.loads(path.read_text(encoding="utf-8"))
        meta = fig.get("layout", {}).get("meta", {})
        sections.append(
            f'<section><div id="fig{i}" style="height:480px"></div>'
            f"<pre>{html.escape(meta.get('table', ''))}</pre>"
            f"<p>{html.escape(meta.get('note', ''))}</p></section>"
        )
        # The figure JSON as a script literal: "</" would end the script element.
        literal = json.dumps(fig).replace("</", "<\\/")
        scripts.append(f'(function(f){{Plotly.newPlot("fig{i}", f.data, f.layout);}})({literal});')
    page = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Ablate scaling curves</title>'
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        '<body style="font-family:sans-serif;max-width:1000px;margin:auto">'
        "<h1>Ablate scaling curves</h1>" + "".join(sections) + f"<script>{''.join(scripts)}</script>"
        "</body></html>"
    )
    path = out / PAGE
    path.write_text(page, encoding="utf-8")
    return path
