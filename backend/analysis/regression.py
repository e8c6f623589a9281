"""Release-over-release checks for one cluster + workload + variant + metric.

* The pairwise check (:mod:`ablate.backend.analysis.release_pair`): the repeats of the new release
  against those of an earlier one, Welch's t on the log values, a verdict when the change passes
  the threshold and the batch's Benjamini-Hochberg q is below alpha; ``suspect`` when only its own
  test rejects.
* The lookback and trend checks (:mod:`ablate.backend.analysis.lookback_checks`): the new release's
  median against the medians of the last ``k`` releases, through a prediction interval, and the
  slope of the log medians over that window.

This module gathers both under one name, which the services, reports and tests import.
"""

from __future__ import annotations

from ablate.backend.analysis.lookback_checks import (
    LOOKBACK_METHOD,
    TREND_METHOD,
    LookbackRequest,
    LookbackResult,
    LookbackRule,
    TrendResult,
    lookback,
    lookback_many,
    trend_many,
)
from ablate.backend.analysis.release_pair import (
    INTERVAL_METHOD,
    NOT_TESTABLE,
    TEST_NAME,
    RegressionResult,
    ReleasePair,
    Verdict,
    VerdictRule,
    compare_releases,
    compare_releases_many,
    pct_of_log_ratio,
)

__all__ = [
    "INTERVAL_METHOD",
    "LOOKBACK_METHOD",
    "NOT_TESTABLE",
    "TEST_NAME",
    "TREND_METHOD",
    "LookbackRequest",
    "LookbackResult",
    "LookbackRule",
    "RegressionResult",
    "ReleasePair",
    "TrendResult",
    "Verdict",
    "VerdictRule",
    "compare_releases",
    "compare_releases_many",
    "lookback",
    "lookback_many",
    "pct_of_log_ratio",
    "trend_many",
]
