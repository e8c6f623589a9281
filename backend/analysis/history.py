"""One cell and metric across the releases of an image family: per release, the summary the release
page gives that cell (n, median and its interval, :func:`~ablate.backend.analysis.stats.summarize_many`)
and the verdict of that release against the one before it.

The verdicts come in with the values: they are those of each release's own comparison (one
Benjamini-Hochberg family per release), which only a whole release's build can give. This module
adds no statistic of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ablate.backend.analysis.stats import SUMMARY_CI_METHOD, summarize_many
from ablate.backend.domain.statistics import CONFIDENCE, MIN_N, NOISY_CV

# What a release's verdict is filed under, as the release page counts it (ReleaseDelta.summary_verdict).
VERDICTS: tuple[str, ...] = ("regressed", "suspect", "improved", "unchanged", "not testable", "not compared")


@dataclass(frozen=True)
class HistoryInput:
    """One release of the family, oldest first: its values of the cell and metric, and its verdict."""

    release: str
    values: Sequence[float]
    verdict: str | None = None  # one of VERDICTS; None: no row for this cell in its comparison
    indicated: str | None = None  # the direction the medians point to (a suspect's direction)
    change_pct: float | None = None  # oriented change against the previous release, > 0 better
    against: str | None = None  # the release it was compared with


@dataclass(frozen=True)
class HistoryEntry:
    release: str
    n: int
    median: float | None
    ci_low: float | None  # SUMMARY_CI_METHOD; None below 2 values
    ci_high: float | None
    noisy: bool
    verdict: str | None
    indicated: str | None
    change_pct: float | None
    against: str | None


@dataclass(frozen=True)
class History:
    entries: tuple[HistoryEntry, ...]  # family order, oldest first
    confidence: float
    interval_method: str = SUMMARY_CI_METHOD


def release_history(
    inputs: Sequence[HistoryInput],
    *,
    confidence: float = CONFIDENCE,
    noisy_cv: float = NOISY_CV,
    min_n: int = MIN_N,
) -> History:
    """The summary of each release's values (in the order given) with its verdict.

    Raises ValueError for an unknown verdict or a release given twice: a history is one point per
    release.
    """
    releases = [i.release for i in inputs]
    if len(set(releases)) != len(releases):
        raise ValueError("each release appears once in a history")
    for i in inputs:
        if i.verdict is not None and i.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {i.verdict!r}; expected one of {', '.join(VERDICTS)}")
    summaries = summarize_many(
        [i.values for i in inputs], noisy_cv=noisy_cv, min_n=min_n, confidence=confidence
    )
    return History(
        entries=tuple(
            HistoryEntry(
                release=i.release,
                n=s.n,
                median=s.median,
                ci_low=s.ci_low,
                ci_high=s.ci_high,
                noisy=s.shown_noisy,
                verdict=i.verdict,
                indicated=i.indicated,
                change_pct=i.change_pct,
                against=i.against,
            )
            for i, s in zip(inputs, summaries, strict=True)
        ),
        confidence=confidence,
    )
