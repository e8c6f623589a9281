import html
import json

import numpy as np
import plotly.graph_objects as go
import pytest

from ablate.backend.analysis.ablation import LadderOptions, analyze_ladder
from ablate.backend.analysis.stats import summarize
from ablate.backend.charts import (
    DEFAULT_LADDER_COLORS,
    TrendSpec,
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
FEW_DRAWS = LadderOptions(n_resamples=N)
LADDER = list(DEFAULT_LADDER_COLORS)
TPUT = dict(zip(LADDER, [1000.0, 1090.0, 1110.0, 1320.0, 1390.0], strict=True))
MEM = dict(zip(LADDER, [61.0, 61.5, 60.0, 55.0, 41.0], strict=True))
WORKLOADS = ["llama3-8b", "qwen2.5-7b"]
REL, CLU = "training-nv-pytorch:25.12", "gpu-h20-16x"


def ladder(metric, centers, scale=1.0):
    rungs = [(n, [c * scale * f for f in (0.99, 1.0, 1.012)]) for n, c in centers.items()]
    return analyze_ladder(rungs, metric, options=FEW_DRAWS)


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
    fig = release_trend(points, TrendSpec(rels, "throughput_tokens_per_s"), cluster=CLU, workload="w")
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
    lad = {"w": analyze_ladder(rungs, "throughput_tokens_per_s", options=FEW_DRAWS)}
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
    lambda: release_trend({}, TrendSpec([], "step_time_s")),
    lambda: release_trend({"Base": {"x": None}}, TrendSpec(["a"], "step_time_s")),
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
        TrendSpec(["a", "b"], "step_time_s"),
    )
    assert missing.data[0].hovertext[1] == f"Base<br>b: {fmt.MISSING}, n=0"


def repeats_of(centers, scale=1.0, first_id=0):
    """workload -> variant -> (run id, value): the runs behind :func:`ladder`'s rungs."""
    out, run_id = {}, first_id
    for i, w in enumerate(WORKLOADS):
        for name, c in centers.items():
            for f in (0.99, 1.0, 1.012):
                run_id += 1
                out.setdefault(w, {}).setdefault(name, []).append((run_id, c * scale * (1 + i) * f))
    return out


def test_ablation_bars_show_each_repeat_as_a_point_over_its_bar(tput):
    reps = repeats_of(TPUT)
    fig = ablation_bars(tput, repeats=reps)
    bars = [t for t in fig.data if t.type == "bar"]
    points = [t for t in fig.data if t.type == "scatter"]
    assert [t.name for t in bars] == [t.name for t in points] == LADDER
    n_slots = len(LADDER)
    width = (1 - fig.layout.bargap) / n_slots * (1 - fig.layout.bargroupgap)
    for slot, (bar, pts) in enumerate(zip(bars, points, strict=True)):
        assert pts.xaxis == "x2" and pts.legendgroup == bar.legendgroup == bar.name
        assert pts.marker.color == bar.marker.color and pts.showlegend is False
        ids = [rid for w in WORKLOADS for rid, _ in reps[w][bar.name]]
        assert list(pts.customdata) == ids  # one point per run, its id kept
        for k, (x, y, hover) in enumerate(zip(pts.x, pts.y, pts.hovertext, strict=True)):
            w = k // 3
            # x: within its own bar (workload w, this variant's slot); y: the run over Base's geomean.
            center = w - (1 - fig.layout.bargap) / 2 + (1 - fig.layout.bargap) / n_slots * (slot + 0.5)
            assert abs(x - center) <= width / 2
            value = reps[WORKLOADS[w]][bar.name][k % 3][1]
            base = [v for _, v in reps[WORKLOADS[w]]["Base"]]
            assert y == pytest.approx(value / float(np.exp(np.mean(np.log(base)))))
            assert f"run {ids[k]}: {fmt.ratio(y)}" in hover
    # The points' axis overlays the bars' with the same range.
    assert fig.layout.xaxis2.overlaying == "x" and fig.layout.xaxis2.visible is False
    assert list(fig.layout.xaxis.range) == list(fig.layout.xaxis2.range) == [-0.5, len(WORKLOADS) - 0.5]
    # Jitter is seeded: the same runs give the same figure; without repeats there are no points.
    assert ablation_bars(tput, repeats=reps).to_json() == fig.to_json()
    assert len(set(points[0].x[:3])) == 3  # spread, not stacked
    assert all(t.type == "bar" for t in ablation_bars(tput).data)


def test_lower_is_better_repeats_are_oriented_like_the_bars():
    lad = {
        "w": analyze_ladder([("Base", [2.0, 2.0]), ("Fast", [1.0, 1.0])], "step_time_s", options=FEW_DRAWS)
    }
    fig = ablation_bars(lad, repeats={"w": {"Base": [(1, 2.0), (2, 2.0)], "Fast": [(3, 1.0), (4, 1.0)]}})
    fast = next(t for t in fig.data if t.type == "scatter" and t.name == "Fast")
    assert list(fast.y) == [2.0, 2.0]  # half the step time: a 2x speed-up, as its bar says


def test_memory_bars_show_repeats(mem):
    reps = repeats_of(MEM)
    fig = memory_bars(mem, repeats=reps)
    points = [t for t in fig.data if t.type == "scatter"]
    assert len(points) == len(LADDER)
    assert sorted(points[4].y) == sorted(v for w in WORKLOADS for _, v in reps[w][LADDER[4]])
    assert "GiB" in points[4].hovertext[0] and "run " in points[4].hovertext[0]


def test_value_labels_sit_inside_the_bar_base_clear_of_the_whiskers(tput):
    for bar in ablation_bars(tput).data:
        assert bar.textposition == "inside" and bar.insidetextanchor == "start"
        assert bar.texttemplate == "%{y:.2f}\u00d7"


def test_titles_start_below_the_modebar(tput, mem):
    from ablate.backend.charts.layout import TITLE_TOP

    for fig in (ablation_bars(tput), speedup_heatmap(tput), memory_bars(mem), ablation_bars({})):
        title = fig.layout.title
        # plotly's modebar takes the top ~30 px of the figure: the title is anchored below it.
        assert title.yref == "container" and title.y == 1 and title.yanchor == "top"
        assert title.pad.t == TITLE_TOP >= 30
        assert fig.layout.margin.t >= TITLE_TOP + 40  # room for a 16 px title between them and the plot


def test_heatmap_hover_has_intervals_and_marks_not_significant():
    lad = {
        "w1": analyze_ladder(
            [("Base", [100.0, 104.0, 96.0]), ("Same", [101.0, 99.0, 103.0]), ("Fast", [130.0, 131.0, 129.0]),
             ("Once", [140.0])],
            "throughput_tokens_per_s",
            options=FEW_DRAWS,
        )
    }  # fmt: skip
    fig = speedup_heatmap(lad)
    hm = fig.data[0]
    text, hover = list(hm.text[0]), list(hm.hovertext[0])
    same, fast = lad["w1"].variant("Same").vs_baseline, lad["w1"].variant("Fast").vs_baseline
    assert not same.significant and fast.significant
    assert text == [
        fmt.ratio(1.0),
        f"{fmt.ratio(same.ratio)} n.s.",
        fmt.ratio(fast.ratio),
        f"{fmt.ratio(1.4)} n/t",
    ]
    assert fmt.ratio_ci(same.ratio, same.ci_low, same.ci_high) in hover[1] and "not significant" in hover[1]
    assert (
        fmt.ratio_ci(fast.ratio, fast.ci_low, fast.ci_high) in hover[2]
        and f"q={fmt.qvalue(fast.q_value)}" in hover[2]
    )
    assert "not testable" in hover[3] and "baseline" in hover[0]
    # The two unsupported cells are greyed over, and a note says what the marks mean.
    veils = [(s.x0, s.x1) for s in fig.layout.shapes]
    assert veils == [(0.5, 1.5), (2.5, 3.5)]
    assert "n.s." in fig.layout.annotations[0].text and "n/t" in fig.layout.annotations[0].text


def test_heatmap_all_significant_has_no_marks(tput):
    fig = speedup_heatmap(tput)
    assert not fig.layout.shapes and not fig.layout.annotations
    assert all("\u00d7 [" in h for row in fig.data[0].hovertext for h in row[1:])


def test_run_series_shows_warmup_apart_and_scales_step_time_to_measured_steps():
    n = 30
    steps = np.arange(1, n + 1)
    times = np.r_[[90.0, 3.0], np.linspace(0.5, 0.6, n - 2)]  # a compiled run's first steps
    loss = np.linspace(5.0, 2.0, n)
    fig = run_series({"step_time_s": (steps, times), "loss": (steps, loss)}, warmup_steps=2)
    names = [t.name for t in fig.data]
    assert names == [
        "Step time",
        "Step time \u00b7 warm-up (not measured)",
        "Loss",
        "Loss \u00b7 warm-up (not measured)",
    ]
    measured, warm = fig.data[0], fig.data[1]
    assert list(measured.x) == list(range(3, n + 1)) and list(warm.x) == [1, 2]
    low, high = fig.layout.yaxis.range
    assert 0 <= low < 0.5 and 0.6 < high < 1.0  # the measured steps fill the axis, not 90 s
    # Off-scale warm-up steps are drawn at the top, pointing up; the slowest is labelled, each hovered.
    assert list(warm.y) == pytest.approx([high, high])
    assert list(warm.marker.symbol) == ["triangle-up", "triangle-up"]
    assert warm.text[0].startswith("90") and warm.text[1] == ""
    assert "90" in warm.hovertext[0] and "3 s" in warm.hovertext[1]
    # The loss axis keeps its whole curve: its warm-up points are on scale.
    assert fig.layout.yaxis2.range is None and list(fig.data[3].marker.symbol) == ["diamond", "diamond"]
    # Without warm-up steps, one trace per metric as before.
    assert len(run_series({"step_time_s": (steps, times)}).data) == 1


def test_a_ladder_without_its_base_runs_says_why_its_charts_are_empty():
    """A release without Base runs showed an empty chart with no word on why."""
    no_base = analyze_ladder(
        [("Base", []), ("Base+ACCL", [1.0, 1.1, 1.05])], "throughput_tokens_per_s", options=FEW_DRAWS
    )
    assert no_base.baseline_missing
    for fig in (ablation_bars({"w": no_base}), contribution_waterfall(no_base, workload="w")):
        (note,) = fig.layout.annotations
        assert note.text == "no data: no succeeded Base runs to compare with"
