"""The history chart: median with its interval per release, each verdict kind its own marker and
legend entry."""

from __future__ import annotations

from ablate.backend.analysis.history import HistoryInput, release_history
from ablate.backend.charts import history_chart
from ablate.backend.charts.trend import VERDICT_MARKERS


def test_history_chart_marks_each_verdict_kind_apart() -> None:
    verdicts = [None, "regressed", "improved", "suspect", "not testable", "unchanged"]
    history = release_history(
        [
            HistoryInput(f"img:{i}", [100.0 + i, 101.0 + i, 99.5 + i] if i != 4 else [104.0], v)
            for i, v in enumerate(verdicts)
        ]
    )
    fig = history_chart(history, variant="Base", metric="throughput_tokens_per_s", cluster="c", workload="w")
    line, *markers = fig.data
    assert line.name == "Base" and list(line.x) == [f"img:{i}" for i in range(6)]
    assert list(line.y) == [e.median for e in history.entries]
    assert line.error_y.array[0] == history.entries[0].ci_high - history.entries[0].median
    by_name = {t.name: t for t in markers}
    # Unchanged and uncompared releases get no marker; the four others one trace each.
    assert [t.meta["verdict"] for t in markers] == ["regressed", "improved", "suspect", "not testable"]
    for verdict, (label, symbol, _color) in VERDICT_MARKERS.items():
        trace = by_name[label]
        assert trace.marker.symbol == symbol
        (i,) = [k for k, v in enumerate(verdicts) if v == verdict]
        assert list(trace.x) == [f"img:{i}"] and list(trace.y) == [history.entries[i].median]
    assert len({t.marker.symbol for t in markers}) == 4
    assert "w · Base" in fig.layout.title.text


def test_history_without_verdicts_has_the_line_only() -> None:
    history = release_history([HistoryInput("img:1", [1.0, 1.1]), HistoryInput("img:2", [1.2, 1.3])])
    fig = history_chart(history, variant="Base", metric="step_time_s")
    assert [t.name for t in fig.data] == ["Base"]
