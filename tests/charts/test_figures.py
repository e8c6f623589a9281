import html
import json

import numpy as np
import plotly.graph_objects as go
import pytest

from ablate.backend.analysis.ablation import analyze_ladder
from ablate.backend.analysis.stats import summarize
from ablate.backend.charts import (
    DEFAULT_LADDER_COLORS,
    ablation_bars,
    contribution_waterfall,
    figure_to_div,
    memory_bars,
    plotly_js_source,
    release_trend,
    run_series,
    speedup_heatmap,
    throughput_vs_memory,
    variant_colors,
)
from ablate.backend.domain import formatting as fmt

N = 199
LADDER = list(DEFAULT_LADDER_COLORS)
TPUT = dict(zip(LADDER, [1000.0, 1090.0, 1110.0, 1320.0, 1390.0], strict=True))
MEM = dict(zip(LADDER, [61.0, 61.5, 60.0, 55.0, 41.0], strict=True))
WORKLOADS = ["llama3-8b", "qwen2.5-7b"]
REL, CLU = "training-nv-pytorch:25.12", "gpu-h20-16x"


def ladder(metric, centers, scale=1.0):
    rungs = [(n, [c * scale * f for f in (0.99, 1.0, 1.012)]) for n, c in centers.items()]
    return analyze_ladder(rungs, metric, n_resamples=N)


@pytest.fixture(scope="module")
def tput():
    return {w: ladder("throughput_tokens_per_s", TPUT, 1 + i) for i, w in enumerate(WORKLOADS)}


@pytest.fixture(scope="module")
def mem():
    return {w: ladder("peak_memory_gib", MEM, 1 + i / 10) for i, w in enumerate(WORKLOADS)}


def colors_of(fig):
    out = {}
    for t in fig.data:
        c = t.marker.color if t.marker and t.marker.color else t.line.color
        out[t.name] = c
    return out


def test_ablation_bars(tput):
    fig = ablation_bars(tput, release=REL, cluster=CLU)
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == LADDER
    assert all(list(t.x) == WORKLOADS for t in fig.data)
    assert fig.data[0].y == (1.0, 1.0)
    assert fig.data[1].y[0] == pytest.approx(1.09)
    assert fig.data[1].error_y.array[0] is not None
    assert REL in fig.layout.title.text and CLU in fig.layout.title.text
    assert "(\u00d7" in fig.layout.yaxis.title.text and fig.layout.xaxis.title.text == "Workload"
    assert fig.layout.legend.orientation == "h"


def test_contribution_waterfall(tput):
    lad = tput["llama3-8b"]
    fig = contribution_waterfall(lad, release=REL, cluster=CLU, workload="llama3-8b")
    assert [t.name for t in fig.data] == [*LADDER, "Total"]
    # floating bars stack exactly from 100% to the total
    level = 100.0
    for t in fig.data[1:-1]:
        assert t.base[0] == pytest.approx(level)
        level += t.y[0]
    assert level == pytest.approx(fig.data[-1].y[0]) == pytest.approx(139.0)
    assert fig.layout.yaxis.title.text.endswith("(%)")
    assert REL in fig.layout.title.text and "llama3-8b" in fig.layout.title.text


def test_speedup_heatmap(tput):
    fig = speedup_heatmap(tput, release=REL, cluster=CLU)
    assert len(fig.data) == 1
    hm = fig.data[0]
    assert list(hm.x) == LADDER and list(hm.y) == WORKLOADS
    assert hm.z[0][0] == 1.0 and hm.z[1][4] == pytest.approx(1.39)
    assert "(\u00d7)" in hm.colorbar.title.text


def test_memory_bars(mem):
    fig = memory_bars(mem, release=REL, cluster=CLU)
    assert len(fig.data) == 5
    assert fig.layout.yaxis.title.text == "Peak memory (GiB)"
    assert fig.data[4].y[0] == pytest.approx(41.0)
    assert CLU in fig.layout.title.text


def test_throughput_vs_memory(tput, mem):
    fig = throughput_vs_memory(tput, mem, release=REL, cluster=CLU)
    assert len(fig.data) == 5
    assert fig.layout.xaxis.title.text == "Peak memory (GiB)"
    assert fig.layout.yaxis.title.text == "Throughput (tokens/s)"
    assert list(fig.data[0].text) == WORKLOADS


def test_release_trend():
    rels = ["25.09", "25.10", "25.12"]
    points = {
        "Base": {r: summarize([100.0 + i, 101.0 + i, 99.0 + i]) for i, r in enumerate(rels)},
        "AC2+ACCL+CompilerOpt+CkptOpt": {"25.12": summarize([140.0, 141.0]), "26.01": None},
    }
    fig = release_trend(points, releases=rels, metric="throughput_tokens_per_s", cluster=CLU, workload="w")
    assert len(fig.data) == 2
    assert list(fig.data[0].x) == rels
    assert fig.data[1].y == (None, None, 140.5)
    assert list(fig.layout.xaxis.categoryarray) == rels
    assert fig.layout.yaxis.title.text == "Throughput (tokens/s)"
    assert CLU in fig.layout.title.text and "25.09" in fig.layout.title.text


def test_run_series_large_input():
    n = 100_000
    steps = np.arange(n)
    fig = run_series(
        {"step_time_s": (steps, np.full(n, 0.5)), "loss": (steps[::10], np.linspace(3, 1, n // 10))},
        run_label="run-42",
        release=REL,
        cluster=CLU,
    )
    assert len(fig.data) == 2
    assert isinstance(fig.data[0], go.Scattergl) and isinstance(fig.data[1], go.Scatter)
    assert fig.layout.yaxis.title.text == "Step time (s)"
    assert fig.layout.yaxis2.title.text == "Loss"
    assert fig.layout.xaxis2.title.text == "Step"
    assert len(fig.to_json()) < 1_500_000  # arrays are base64-encoded, not JSON lists
    with pytest.raises(ValueError):
        run_series({"loss": ([1, 2], [1.0])})
    with pytest.raises(ValueError):
        run_series({"loss": (np.arange(100_001), np.zeros(100_001))})


def test_variant_colours_consistent_between_charts(tput, mem):
    a = colors_of(ablation_bars(tput))
    m = colors_of(memory_bars(mem))
    w = colors_of(contribution_waterfall(tput["llama3-8b"]))
    for name in LADDER:
        assert a[name] == m[name] == w[name] == DEFAULT_LADDER_COLORS[name]


def test_variant_colors_stable_for_custom_names():
    c1 = variant_colors(["Base", "MyOpt", "Other"])
    c2 = variant_colors(["Other", "MyOpt"])
    assert c1["Base"] == DEFAULT_LADDER_COLORS["Base"]
    assert c1["MyOpt"] == c2["MyOpt"] or c1["Other"] == c2["Other"]  # hash-based, collisions probe
    many = variant_colors([f"v{i}" for i in range(15)])
    assert len(set(many.values())) == 15
    assert not set(many.values()) & set(DEFAULT_LADDER_COLORS.values())
    assert variant_colors(["x", "y"]) == variant_colors(["x", "y"])
    rungs = [("Base", [1.0, 1.1]), ("MyOpt", [2.0, 2.1])]
    lad = {"w": analyze_ladder(rungs, "throughput_tokens_per_s", n_resamples=N)}
    shared = variant_colors(["Base", "MyOpt", "Other"])
    assert colors_of(ablation_bars(lad, colors=shared))["MyOpt"] == shared["MyOpt"]


def test_figures_are_deterministic(tput, mem):
    def build():
        t = {w: ladder("throughput_tokens_per_s", TPUT, 1 + i) for i, w in enumerate(WORKLOADS)}
        m = {w: ladder("peak_memory_gib", MEM, 1 + i / 10) for i, w in enumerate(WORKLOADS)}
        figs = [
            ablation_bars(t, release=REL, cluster=CLU),
            contribution_waterfall(t["llama3-8b"], release=REL, cluster=CLU),
            speedup_heatmap(t),
            memory_bars(m),
            throughput_vs_memory(t, m),
            run_series({"step_time_s": ([1, 2, 3], [0.5, 0.6, 0.5])}),
        ]
        return [f.to_json() for f in figs], [figure_to_div(f, f"fig-{i}") for i, f in enumerate(figs)]

    j1, d1 = build()
    j2, d2 = build()
    assert j1 == j2 and d1 == d2
    for j in j1:
        json.loads(j)


EMPTY_CASES = [
    lambda: ablation_bars({}, release=REL, cluster=CLU),
    lambda: ablation_bars({"w": analyze_ladder([("Base", [])], "throughput_tokens_per_s")}),
    lambda: contribution_waterfall(None),
    lambda: contribution_waterfall(
        analyze_ladder([("A", [1.0])], "throughput_tokens_per_s", baseline="Base")
    ),
    lambda: speedup_heatmap({}),
    lambda: memory_bars({}),
    lambda: throughput_vs_memory({}, {}),
    lambda: release_trend({}, releases=[], metric="step_time_s"),
    lambda: release_trend({"Base": {"x": None}}, releases=["a"], metric="step_time_s"),
    lambda: run_series({}),
    lambda: run_series({"loss": ([], [])}),
]


@pytest.mark.parametrize("make", EMPTY_CASES)
def test_empty_input_gives_no_data_figure(make):
    fig = make()
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text.startswith("no data")
    assert fig.layout.title.text


def test_figure_to_div_and_plotly_js():
    fig = ablation_bars({})
    div = figure_to_div(fig, "ablation-1")
    assert 'id="ablation-1"' in div
    assert "<html" not in div and "cdn.plot.ly" not in div and "<script src" not in div
    with pytest.raises(ValueError):
        figure_to_div(fig, 'bad" id')
    js = plotly_js_source()
    assert len(js) > 1_000_000 and "plotly" in js[:2000].lower()


def test_hover_text_reads_like_the_tables(tput, mem):
    """Labels and hover text use the shared formatter: the dashboard's and the report's numbers."""
    lad = tput["llama3-8b"]
    last = lad.variants[-1]
    c = last.vs_baseline
    bars = ablation_bars(tput)
    hover = next(t for t in bars.data if t.name == last.variant).hovertext[0]
    # plotly reads markup in text: "<0.001" is escaped to show literally (see test_plain_text.py).
    expected = f"llama3-8b: {fmt.ratio_ci(c.ratio, c.ci_low, c.ci_high)}, n=3, p={fmt.pvalue(c.p_value)}"
    assert html.escape(expected, quote=False) in hover
    base_hover = next(t for t in bars.data if t.name == lad.baseline).hovertext[0]
    assert base_hover.endswith(f"llama3-8b: {fmt.ratio(1.0)}, n=3, p={fmt.MISSING}")
    waterfall = contribution_waterfall(lad)
    assert waterfall.data[-1].texttemplate == fmt.pct(lad.total.ratio * 100, signed=False)
    step = waterfall.data[1].hovertext[0]
    assert f"(step {fmt.ratio(lad.variants[1].step.ratio)}, " in step and "% of the gain)" in step
    s = mem["llama3-8b"].variants[0].summary
    mem_hover = memory_bars(mem).data[0].hovertext[0]
    assert mem_hover.endswith(f"{fmt.num_ci(s.median, s.ci_low, s.ci_high, unit='GiB')}, n=3")
    assert "GiB [" in mem_hover and "n/a" not in mem_hover
    scatter = throughput_vs_memory(tput, mem).data[0].hovertext[0]
    assert f"Peak memory: {fmt.quantity(s.median, 'GiB', fmt.MEDIAN_DIGITS)}" in scatter
    missing = release_trend(
        {"Base": {"a": summarize([1.0, 1.1, 1.2]), "b": None}},
        releases=["a", "b"],
        metric="step_time_s",
    )
    assert missing.data[0].hovertext[1] == f"Base<br>b: {fmt.MISSING}, n=0"
