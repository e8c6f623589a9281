"""release_history: per release the summary the release page gives a cell, and the verdict passed in."""

from __future__ import annotations

import statistics

import pytest

from ablate.backend.analysis.history import HistoryInput, release_history
from ablate.backend.analysis.stats import SUMMARY_CI_METHOD, summarize


def test_each_release_gets_the_single_cell_summary_and_its_verdict() -> None:
    old = [100.0, 101.0, 99.0, 100.5]
    new = [90.0, 90.5, 89.5, 90.2]
    history = release_history(
        [
            HistoryInput("img:1", old),
            HistoryInput("img:2", new, "regressed", "regressed", -10.0, "img:1"),
            HistoryInput("img:3", []),
            HistoryInput("img:4", [95.0], "not testable", "improved", 5.5, "img:2"),
        ],
        confidence=0.9,
    )
    assert history.interval_method == SUMMARY_CI_METHOD and history.confidence == 0.9
    assert [e.release for e in history.entries] == ["img:1", "img:2", "img:3", "img:4"]
    first, second, empty, single = history.entries
    for entry, values in ((first, old), (second, new)):
        expected = summarize(values, confidence=0.9)
        assert entry.n == len(values)
        assert entry.median == pytest.approx(statistics.median(values))
        assert (entry.ci_low, entry.ci_high) == (expected.ci_low, expected.ci_high)
        assert entry.ci_low is not None and entry.ci_low < entry.median < entry.ci_high
    assert first.verdict is None and first.against is None
    assert (second.verdict, second.indicated, second.change_pct, second.against) == (
        "regressed",
        "regressed",
        -10.0,
        "img:1",
    )
    assert (empty.n, empty.median, empty.ci_low, empty.noisy) == (0, None, None, False)
    # One value: a median but no interval, as a one-repeat cell on the release page.
    assert (single.n, single.median, single.ci_low, single.ci_high) == (1, 95.0, None, None)
    assert single.verdict == "not testable"


def test_a_history_refuses_a_release_twice_or_an_unknown_verdict() -> None:
    with pytest.raises(ValueError, match="once"):
        release_history([HistoryInput("a:1", [1.0]), HistoryInput("a:1", [2.0])])
    with pytest.raises(ValueError, match="unknown verdict 'worse'"):
        release_history([HistoryInput("a:1", [1.0], "worse")])
