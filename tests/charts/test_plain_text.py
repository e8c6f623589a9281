"""User names reach every figure as plain text: no markup plotly would draw (links, bold, spans).

plotly reads a subset of HTML in every text it draws; the browser test (tests/web/test_chart_labels.py)
checks what Chromium renders, this one checks every string of each figure's JSON.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import plotly.graph_objects as go
import pytest

from ablate.backend.analysis.ablation import LadderOptions, analyze_ladder
from ablate.backend.analysis.factorial import analyze_factorial
from ablate.backend.analysis.stats import summarize
from ablate.backend.charts import (
    TrendSpec,
    ablation_bars,
    contribution_waterfall,
    figure_to_div,
    memory_bars,
    release_trend,
    run_series,
    speedup_heatmap,
    throughput_vs_memory,
)
from ablate.backend.charts._common import plain, plain_lines
from ablate.backend.charts.ablation import factorial_effects

EVIL = '<a href="https://evil.example">x</a><b>B</b>'
VARIANT = f"v{EVIL}"
WORKLOAD = f"w{EVIL}"
RELEASE = f"img:25.12{EVIL}&amp;"
CLUSTER = f"c{EVIL}"
METRIC = f"tokens{EVIL}"
# The only markup the figures write themselves: line breaks and the hover's secondary box.
OURS = re.compile(r"<br>|</?extra>")
NOISE = (0.99, 1.0, 1.01)


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _strings(value)


def _ladder(metric: str, scale: float = 1.0):
    rungs = [("Base", [100.0 * scale * f for f in NOISE]), (VARIANT, [130.0 * scale * f for f in NOISE])]
    return analyze_ladder(rungs, metric, unit="tok/s", options=LadderOptions(n_resamples=99))


def _figures() -> dict[str, go.Figure]:
    tput = {WORKLOAD: _ladder(METRIC)}
    mem = {WORKLOAD: _ladder("peak_memory_gib", 0.5)}
    where = {"release": RELEASE, "cluster": CLUSTER}
    cells = [
        ("Base", [100.0 * f for f in NOISE]),
        (f"Base+A{EVIL}", [120.0 * f for f in NOISE]),
        ("Base+B", [110.0 * f for f in NOISE]),
        (f"Base+A{EVIL}+B", [135.0 * f for f in NOISE]),
    ]
    factorial = {WORKLOAD: analyze_factorial(cells, METRIC)}
    return {
        "ablation": ablation_bars(tput, **where),
        "waterfall": contribution_waterfall(tput[WORKLOAD], **where, workload=WORKLOAD),
        "heatmap": speedup_heatmap(tput, **where),
        "memory": memory_bars(mem, **where),
        "tput-mem": throughput_vs_memory(tput, mem, **where),
        "trend": release_trend(
            {VARIANT: {RELEASE: summarize([1.0, 1.1, 1.2])}},
            TrendSpec([RELEASE], METRIC),
            cluster=CLUSTER,
            workload=WORKLOAD,
        ),
        "factorial": factorial_effects(factorial, **where),
        "series": run_series({METRIC: ([1, 2, 3], [1.0, 2.0, 3.0])}, metrics=[METRIC], run_label=VARIANT),
        "empty": ablation_bars({}, **where),
    }


@pytest.mark.parametrize("kind", list(_figures()))
def test_no_user_markup_reaches_a_figure(kind: str) -> None:
    fig = _figures()[kind]
    texts = list(_strings(fig.to_plotly_json()))
    for text in texts:
        # Any tag left after our own <br> and <extra> would be drawn by plotly.
        assert "<" not in OURS.sub("", text), (kind, text)
    shown = [html.unescape(OURS.sub("\n", t)) for t in texts]
    # ... and every name is still there, literally, wherever the figure names it.
    names = {"empty": (RELEASE, CLUSTER), "series": (VARIANT, METRIC), "factorial": (RELEASE, WORKLOAD)}
    for name in names.get(kind, (RELEASE, CLUSTER, WORKLOAD)):
        assert any(name in s for s in shown), (kind, name)
    if kind not in ("empty", "series", "factorial"):
        assert any(VARIANT in s for s in shown), kind
    if kind == "factorial":
        assert any(f"A{EVIL}" in s for s in shown)


def test_the_embedded_figure_keeps_the_escapes() -> None:
    """The HTML fragment carries the same plain text: its data block neither closes nor unescapes."""
    div = figure_to_div(_figures()["ablation"], "evil-1")
    block = re.search(r'<script type="application/json" data-plotly-figure="evil-1">(.*?)</script>', div)
    assert block is not None and "<" not in block.group(1)
    figure = json.loads(block.group(1))["figure"]
    assert plain(VARIANT) in {t["name"] for t in figure["data"]}
    assert "<script" not in div.replace('<script type="application/json"', "")


def test_plain_escapes_markup_and_entities() -> None:
    assert plain("<b>B</b> &lt;") == "&lt;b&gt;B&lt;/b&gt; &amp;lt;"
    assert plain_lines("<i>x</i>", "y") == "&lt;i&gt;x&lt;/i&gt;<br>y"
