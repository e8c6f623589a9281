"""One release against another for one cluster + workload + variant + metric (the pairwise check of
:mod:`ablate.backend.analysis.regression`).

Verdict rule (Bencher-style, thresholds stored in the result):

* ``improved`` / ``regressed`` need BOTH ``|improvement_pct| >= threshold_pct`` AND ``q < alpha``,
  q being the Benjamini-Hochberg adjusted p-value of Welch's t on the log values (ratio of
  geometric means) across the comparisons of one batch: one release, or one run-set comparison.
* ``not testable`` when a side has fewer than two (positive) values: no test can reach
  significance, so nothing is claimed, not even "unchanged"; reports list these cells.
* Otherwise ``unchanged``. ``unchanged`` is not a proof of no change: ``indicated`` holds the
  direction the estimate points to by the threshold alone. The row is **suspect** (``suspect``)
  when the change passes the threshold AND its own test rejects (raw p < alpha) but the release's
  adjustment does not confirm it (q >= alpha): at most alpha of unchanged comparisons, whatever the
  release's size (benchmarks/stats_simulation.py, table suspects). Passing the threshold alone flagged
  29-42% of unchanged comparisons at CV 5%. Dashboards show suspects apart, never as green.

``change_pct`` is the percent change of geometric means ((new / old - 1) * 100), with its Welch
interval. ``improvement_pct`` is the same number oriented by the metric registry: equal for
higher-is-better metrics, negated for lower-is-better ones (a 5% longer step time is -5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from ablate.backend.analysis.moderated import Prior, prior_variance
from ablate.backend.analysis.stats import (
    BH_METHOD,
    CLAMPED_NOTE,
    LOG_SHOWN,
    WELCH_LOG_INTERVAL,
    WELCH_LOG_TEST,
    beyond_shown,
    clean_many,
    finite_or_none,
    sorted_median,
)
from ablate.backend.analysis.welch import WelchInput, WelchLog, capped_note, welch_family
from ablate.backend.domain.metrics import Direction, describe_metric
from ablate.backend.domain.statistics import ALPHA, CONFIDENCE, THRESHOLD_PCT

Verdict = Literal["improved", "regressed", "unchanged", "not testable"]
TEST_NAME = WELCH_LOG_TEST
INTERVAL_METHOD = WELCH_LOG_INTERVAL
NOT_TESTABLE: Verdict = "not testable"


@dataclass(frozen=True)
class RegressionResult:
    metric: str
    unit: str
    direction: Direction
    n_baseline: int
    n_contender: int
    baseline_median: float | None
    contender_median: float | None
    change_pct: float | None  # raw: (geometric mean contender / baseline - 1) * 100
    change_ci_low: float | None  # Welch interval of change_pct
    change_ci_high: float | None
    improvement_pct: float | None  # oriented: > 0 is better
    improvement_ci_low: float | None
    improvement_ci_high: float | None
    p_value: float | None  # raw two-sided Welch p; None when not testable
    q_value: float | None  # adjusted across the batch (``adjustment``)
    testable: bool  # both sides have >= 2 positive values
    significant: bool  # q_value < alpha
    exceeds_threshold: bool
    indicated: Verdict | None  # direction by threshold alone, whether or not it is significant
    verdict: Verdict
    threshold_pct: float
    alpha: float
    test: str
    interval_method: str
    adjustment: str
    confidence: float
    reasons: tuple[str, ...]
    # Unchanged, past the threshold, p < alpha but q >= alpha: unconfirmed, shown apart (module doc).
    suspect: bool = False
    # Between-session variance added to the difference's (log scale; 0: none, e.g. same session).
    session_var: float = 0.0


@dataclass(frozen=True)
class ReleasePair:
    """One release-over-release check to make: the repeats of the old and the new release."""

    baseline: Sequence[float]
    contender: Sequence[float]
    metric: str
    unit: str | None = None
    better: str | None = None  # a custom metric's stored direction ("higher" / "lower")
    # Variance of the difference the repeats cannot show (2 tau^2 for two sessions, analysis/session.py),
    # the df of its estimate, and what the result's reasons say about it.
    session_var: float = 0.0
    session_df: float | None = None
    session_note: str | None = None
    # Pairs sharing a pool (and metric) share a moderated variance (``moderate``): e.g. the rungs of
    # one cluster and workload, which measure the same model on the same hardware.
    pool: str | None = None


@dataclass(frozen=True)
class VerdictRule:
    """What a verdict of one batch of comparisons needs (module doc): the minimum change in percent,
    the level q must stay below, the confidence of the interval, and how q was adjusted."""

    threshold_pct: float = THRESHOLD_PCT
    alpha: float = ALPHA
    confidence: float = CONFIDENCE
    adjustment: str = BH_METHOD


def compare_releases_many(
    pairs: Sequence[ReleasePair],
    *,
    threshold_pct: float = THRESHOLD_PCT,
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
    adjust: bool = True,
    moderate: bool = False,
) -> list[RegressionResult]:
    """:func:`compare_releases` of many pairs, their p-values adjusted as one family (Benjamini-
    Hochberg) when ``adjust``: pass every comparison of one release in one call. ``moderate``
    shrinks each side's variance toward the one the pairs of its metric share (analysis/moderated.py)."""
    flat = clean_many([side for p in pairs for side in (p.baseline, p.contender)])
    cleaned = list(zip(flat[::2], flat[1::2], strict=True))
    priors = _priors(pairs, cleaned) if moderate else {}
    inputs = [
        WelchInput(c, b, p.session_var, p.session_df, priors.get((p.metric, p.pool)))
        for p, (b, c) in zip(pairs, cleaned, strict=True)
    ]
    tests, adjusted, method = welch_family(inputs, confidence, adjust=adjust)
    rule = VerdictRule(threshold_pct, alpha, confidence, method)
    return [
        _compare(p, sides, t, q, rule) for p, sides, t, q in zip(pairs, cleaned, tests, adjusted, strict=True)
    ]


def _priors(
    pairs: Sequence[ReleasePair], cleaned: Sequence[tuple[np.ndarray, np.ndarray]]
) -> dict[tuple[str, str | None], Prior]:
    """The moderation prior of each metric and pool, from every side with 2+ positive values: the
    variances of the logs of all sides of one size in one array call."""
    keys: list[tuple[str, str | None]] = []
    by_size: dict[int, list[np.ndarray]] = {}
    at: list[tuple[int, int]] = []  # (size, index among the sides of that size) of each side
    for p, arrays in zip(pairs, cleaned, strict=True):
        for x in arrays:
            if x.size >= 2 and x[0] > 0:
                keys.append((p.metric, p.pool))
                same = by_size.setdefault(int(x.size), [])
                at.append((int(x.size), len(same)))
                same.append(x)
    variances = {n: np.log(np.stack(xs)).var(ddof=1, axis=1).tolist() for n, xs in by_size.items()}
    sides: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for key, (n, j) in zip(keys, at, strict=True):
        sides.setdefault(key, []).append((variances[n][j], n - 1))
    out = {}
    for key, found in sides.items():
        prior = prior_variance(found)
        if prior is not None:
            out[key] = prior
    return out


def compare_releases(
    baseline: Sequence[float],
    contender: Sequence[float],
    metric: str,
    *,
    unit: str | None = None,
    threshold_pct: float = THRESHOLD_PCT,
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
) -> RegressionResult:
    """Compare the repeats of the new release (``contender``) with the previous one (``baseline``);
    one comparison, so q equals p."""
    return compare_releases_many(
        [ReleasePair(baseline, contender, metric, unit)],
        threshold_pct=threshold_pct,
        alpha=alpha,
        confidence=confidence,
        adjust=False,
    )[0]


def pct_of_log_ratio(log_ratio: float) -> float:
    """The percent change a log ratio is, ``(exp(log_ratio) - 1) * 100``."""
    # Clamped above as a shown ratio is (stats.LOG_SHOWN); below, expm1 tends to -1 without error.
    return math.expm1(min(log_ratio, LOG_SHOWN)) * 100.0


def _positive(b: np.ndarray, c: np.ndarray) -> bool:
    """Both sides have values, all positive (sorted: the first is the smallest)."""
    return bool(b.size and c.size and b[0] > 0 and c[0] > 0)


def _change_pct(
    b: np.ndarray, c: np.ndarray, t: WelchLog | None, reasons: list[str]
) -> tuple[float | None, float | None, float | None]:
    """(percent change of geometric means, interval low, interval high), what it notes in ``reasons``."""
    change = lo = hi = None
    positive = _positive(b, c)
    if b.size and c.size and not positive:
        reasons.append("non-positive values: percent change of geometric means undefined")
    elif t is not None:
        change = pct_of_log_ratio(t.log_ratio)
        lo, hi = pct_of_log_ratio(t.log_low), pct_of_log_ratio(t.log_high)
        reasons += capped_note(t)
        if beyond_shown(t.log_ratio, t.log_low, t.log_high):
            reasons.append(CLAMPED_NOTE)
    elif positive:
        log_ratio = float(np.log(c).mean() - np.log(b).mean())  # one value a side: no interval
        change = pct_of_log_ratio(log_ratio)
        if beyond_shown(log_ratio):
            reasons.append(CLAMPED_NOTE)
    return change, lo, hi


class _Judgement(NamedTuple):  # one a comparison: a tuple is the cheapest to make
    verdict: Verdict
    indicated: Verdict | None  # direction by threshold alone
    significant: bool
    exceeds: bool
    suspect: bool


def _judge(
    t: WelchLog | None, q: float | None, improvement: float | None, rule: VerdictRule, reasons: list[str]
) -> _Judgement:
    """The verdict of one comparison by ``rule`` (module doc), what it notes in ``reasons``."""
    alpha, threshold_pct = rule.alpha, rule.threshold_pct
    significant = q is not None and q < alpha
    exceeds = improvement is not None and abs(improvement) >= threshold_pct
    indicated: Verdict | None = None
    if improvement is not None:
        indicated = ("improved" if improvement > 0 else "regressed") if exceeds else "unchanged"
    suspect = False
    if t is None:
        verdict: Verdict = NOT_TESTABLE
    elif exceeds and significant and indicated:
        verdict = indicated
    else:
        verdict = "unchanged"
        p = t.p_value
        if exceeds and p < alpha:
            suspect = True
            reasons.append(
                f"suspect: {indicated} by {abs(improvement or 0):.2f}% (p={p:.3g}) but not confirmed "
                f"across the comparison's tests (q={q:.3g})"
            )
        elif exceeds:
            reasons.append(f"{indicated} by {abs(improvement or 0):.2f}% but within the noise (p={p:.3g})")
        elif significant:
            reasons.append(f"significant but below the {threshold_pct:g}% threshold")
    return _Judgement(verdict, indicated, significant, exceeds, suspect)


def _compare(
    pair: ReleasePair,
    sides: tuple[np.ndarray, np.ndarray],
    t: WelchLog | None,
    q: float | None,
    rule: VerdictRule,
) -> RegressionResult:
    """One comparison: ``sides`` are the cleaned (baseline, contender) values, ``t`` their test (None:
    not testable) and ``q`` its adjusted p-value."""
    b, c = sides
    mdef = describe_metric(pair.metric, pair.unit, pair.better)
    sign = 1.0 if mdef.direction == "higher" else -1.0
    reasons: list[str] = []
    if b.size == 0:
        reasons.append("baseline: no values")
    if c.size == 0:
        reasons.append("contender: no values")
    change, lo, hi = _change_pct(b, c, t, reasons)
    improvement = None if change is None else sign * change
    if sign > 0:
        imp_lo, imp_hi = lo, hi
    else:
        imp_lo = None if hi is None else -hi
        imp_hi = None if lo is None else -lo
    judged = _judge(t, q, improvement, rule, reasons)
    if t is None and _positive(b, c):
        reasons.append(f"not testable (n={b.size} vs {c.size}): a test needs 2 values a side")
    if pair.session_note and t is not None:
        reasons.append(pair.session_note)
    return RegressionResult(
        metric=pair.metric,
        unit=mdef.unit,
        direction=mdef.direction,
        n_baseline=int(b.size),
        n_contender=int(c.size),
        baseline_median=sorted_median(b) if b.size else None,
        contender_median=sorted_median(c) if c.size else None,
        change_pct=finite_or_none(change),
        change_ci_low=finite_or_none(lo),
        change_ci_high=finite_or_none(hi),
        improvement_pct=finite_or_none(improvement),
        improvement_ci_low=finite_or_none(imp_lo),
        improvement_ci_high=finite_or_none(imp_hi),
        p_value=None if t is None else t.p_value,
        q_value=q,
        testable=t is not None,
        significant=judged.significant,
        exceeds_threshold=judged.exceeds,
        indicated=judged.indicated,
        verdict=judged.verdict,
        threshold_pct=rule.threshold_pct,
        alpha=rule.alpha,
        test=TEST_NAME if t is None else t.method,
        interval_method=INTERVAL_METHOD,
        adjustment=rule.adjustment,
        confidence=rule.confidence,
        reasons=tuple(reasons),
        suspect=judged.suspect,
        session_var=pair.session_var if t is not None else 0.0,
    )
