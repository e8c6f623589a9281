"""Did every rung move alike? A release whose rungs all moved by one factor, Base included, looks
exactly like a change of the environment (a loaded host, a driver, a power cap): an A/A rerun on a
busier host read "suspect regression -39 to -56%" on every rung (issue 27). A change the release
makes rarely touches every rung alike; the environment does.

The rungs of one cluster, workload and metric are *alike* when

- there are at least two of them and every one is testable (>= 2 values a side);
- every rung's change passes the threshold in the same direction, and each rung's own Welch test
  (with the between-session variance the comparison adds) rejects "no change" (``p < alpha``);
- Welch's heterogeneity test (Welch 1951: one-way comparison of means with unequal variances and
  few degrees of freedom each) finds no sign that they moved by different factors (``p >= alpha``).

The pure statistic; the comparison service says it, and with busy hosts recorded it says the
environment moved, not the release. Proven by benchmarks/stats_simulation.py (table environment).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from ablate.backend.analysis.regression import ReleasePair
from ablate.backend.analysis.stats import clean_many
from ablate.backend.analysis.welch import WelchInput, WelchLog, welch_log_many
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.domain.statistics import ALPHA, THRESHOLD_PCT

COMMON_SHIFT_METHOD = (
    "every rung past the threshold in one direction with its own p < alpha, and Welch's "
    "heterogeneity test (unequal variances) finding no difference between the rungs' log changes "
    "(p >= alpha)"
)


@dataclass(frozen=True)
class CommonShift:
    """The rungs of one cluster, workload and metric, release over release, taken together."""

    n_rungs: int
    alike: bool  # every rung moved, in one direction, by what may be one factor
    shift_pct: float | None  # raw weighted mean change of the rungs, percent
    improvement_pct: float | None  # oriented: > 0 is better
    heterogeneity_p: float | None  # Welch's test that the rungs moved by different factors
    reason: str  # why they are or are not alike
    method: str = COMMON_SHIFT_METHOD


def _welch_heterogeneity(d: Sequence[float], se: Sequence[float], df: Sequence[float]) -> float:
    """p of Welch's (1951) test that means with variances ``se^2`` (estimated on ``df``) are equal."""
    k = len(d)
    w = np.array([1.0 / (s * s) for s in se])
    x = np.asarray(d, dtype=float)
    total = float(w.sum())
    mean = float((w * x).sum()) / total
    a = float(((1.0 - w / total) ** 2 / np.asarray(df, dtype=float)).sum())
    f = float((w * (x - mean) ** 2).sum()) / (k - 1) / (1.0 + 2.0 * (k - 2) / (k * k - 1) * a)
    df2 = (k * k - 1) / (3.0 * a) if a > 0 else math.inf
    if f <= 0:
        return 1.0  # no spread between the rungs (scipy.stats.f.sf's value at its support's edge)
    return float(special.fdtrc(k - 1, df2, f))  # as scipy.stats.f.sf, without its argument checks


def common_shift(
    pairs: Sequence[ReleasePair], *, threshold_pct: float = THRESHOLD_PCT, alpha: float = ALPHA
) -> CommonShift:
    """Whether the rungs ``pairs`` (one cluster, workload and metric; old and new values each)
    all moved alike. Raises ValueError when the pairs do not share one metric."""
    return common_shifts([pairs], threshold_pct=threshold_pct, alpha=alpha)[0]


def common_shifts(
    groups: Sequence[Sequence[ReleasePair]], *, threshold_pct: float = THRESHOLD_PCT, alpha: float = ALPHA
) -> list[CommonShift]:
    """:func:`common_shift` of each group of rungs, the Welch tests of all of them in one batch."""
    if any(len({p.metric for p in pairs}) > 1 for pairs in groups):
        raise ValueError("a common shift is judged over the rungs of one metric")
    tested = [p for pairs in groups if len(pairs) >= 2 for p in pairs]
    flat = clean_many([side for p in tested for side in (p.contender, p.baseline)])
    inputs = [
        WelchInput(flat[2 * k], flat[2 * k + 1], p.session_var, p.session_df) for k, p in enumerate(tested)
    ]
    tests = welch_log_many(inputs)
    out, at = [], 0
    for pairs in groups:
        k = len(pairs)
        if k < 2:
            out.append(CommonShift(k, False, None, None, None, f"{k} rung: nothing to move alike"))
            continue
        out.append(_judge(pairs, tests[at : at + k], threshold_pct, alpha))
        at += k
    return out


def _judge(
    pairs: Sequence[ReleasePair], tests: Sequence[WelchLog | None], threshold_pct: float, alpha: float
) -> CommonShift:
    """One group of ``k >= 2`` rungs, their tests done."""
    k = len(pairs)
    if any(t is None for t in tests):
        return CommonShift(k, False, None, None, None, "a rung is not testable")
    ts = [t for t in tests if t is not None]
    mdef = describe_metric(pairs[0].metric, pairs[0].unit, pairs[0].better)
    sign = 1.0 if mdef.direction == "higher" else -1.0
    d = [t.log_ratio for t in ts]
    # A rung without spread is measured exactly: weight it as a tiny variance, not an infinite one.
    se = [max(t.se, 1e-9) for t in ts]
    dfs = [t.df if t.df is not None and math.isfinite(t.df) else 1e6 for t in ts]
    w = [1.0 / (s * s) for s in se]
    mean = math.fsum(wi * di for wi, di in zip(w, d, strict=True)) / math.fsum(w)
    shift = math.expm1(mean) * 100.0
    improvement = sign * shift
    p_het = _welch_heterogeneity(d, se, dfs)
    changes = [sign * math.expm1(x) * 100.0 for x in d]
    same_way = all(c >= threshold_pct for c in changes) or all(c <= -threshold_pct for c in changes)
    if not same_way:
        reason = "the rungs did not all move past the threshold in one direction"
    elif any(t.p_value >= alpha for t in ts):
        reason = "a rung's change is within its noise"
    elif p_het < alpha:
        reason = f"the rungs moved by different factors (p={p_het:.3g})"
    else:
        reason = (
            f"every rung moved alike: {improvement:+.1f}% on average over {k} rungs "
            f"(no sign they moved differently, p={p_het:.2g})"
        )
        return CommonShift(k, True, shift, improvement, p_het, reason)
    return CommonShift(k, False, shift, improvement, p_het, reason)
