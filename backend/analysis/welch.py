"""Welch's t on log values, the one home of the two-sample test every comparison makes (the ablation
ladders, release over release, the environment's common shift): a batch of pairs at once.

A release makes thousands of these tests. Each one's sums stay exact per pair (``math.fsum``, as
:func:`ablate.backend.analysis.stats.scaled_mean_sd`), but the element-wise steps run as arrays over
the whole batch: the logs in one ``np.log``, the p-values and the critical values each in one ufunc
call. Element-wise ufuncs give every element the number a call on it alone gives, so a batch is bit
for bit the pairs one at a time (tests/analysis/test_batched.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from ablate.backend.analysis.moderated import Prior, cell_floor, squeeze
from ablate.backend.analysis.stats import (
    LOG_RESOLUTION,
    MODERATED_LOG_TEST,
    TWO_VALUES_LOG_TEST,
    TWO_VALUES_MAX_DF,
    TWO_VALUES_NOTE,
    WELCH_LOG_TEST,
    family_q_values,
)
from ablate.backend.domain.statistics import CONFIDENCE


class WelchLog(NamedTuple):
    """Welch's t on log values: log(geometric mean of c / geometric mean of r), its SE and test (a
    tuple: a release makes tens of thousands, and a tuple is made in a third of a frozen dataclass's
    time)."""

    log_ratio: float
    se: float
    df: float | None  # Welch-Satterthwaite; None when both samples have zero spread
    p_value: float
    log_low: float
    log_high: float
    method: str = WELCH_LOG_TEST


@dataclass(frozen=True)
class WelchInput:
    """One pair to test: the cleaned (sorted) contender and reference, the variance of the difference
    the repeats cannot show and its df, and the moderation prior of the pair's sides (see welch_log)."""

    c: np.ndarray
    r: np.ndarray
    extra_var: float = 0.0
    extra_df: float | None = None
    prior: Prior | None = None


# (mean, sd) of the contender's log ratios to the reference's smallest value, then the reference's.
_Sides = tuple[float, float, float, float]


def welch_log(
    c: np.ndarray,
    r: np.ndarray,
    confidence: float = CONFIDENCE,
    *,
    extra_var: float = 0.0,
    extra_df: float | None = None,
    prior: Prior | None = None,
) -> WelchLog | None:
    """Welch's unequal-variance t on log values of two positive samples (>= 2 values each).

    With two values on a side that side's variance has one degree of freedom, and the interval must
    not assume the sides share a noise level: Student's pooled t covered 56-82% when the 2-value side
    was 5x noisier, Welch-Satterthwaite 89-90%. So Welch's SE is used with its df capped at
    :data:`TWO_VALUES_MAX_DF` (named in ``method``): 95-99.9% whatever the noise ratio (conservative
    when the noise is equal); a 20% drop at CV 2% is found 76% of the time at 2 vs 2 (df 1: 53%).
    ``extra_var`` is variance of the difference that the repeats cannot show (between-session
    variance, analysis/session.py: ``2 tau^2`` for two releases measured in different sessions),
    estimated with ``extra_df`` degrees of freedom: it is added to the SE and its term enters the
    Satterthwaite df. ``prior`` (analysis/moderated.py) shrinks each side's variance toward the one the
    release's cells share, on ``d0 + n - 1`` df each (no 2-value cap then: the side's noise is known),
    never below the pair's own variance pooled over both sides and inflated (moderated.cell_floor).
    None when a side has fewer than two values or a non-positive value. Zero spread on both sides
    (deterministic metrics such as memory): the interval is the point and p is 0 for any difference
    (1 for none), since the difference is then measured without error. Spreads and differences
    below :data:`LOG_RESOLUTION` are rounding and count as none.
    """
    return welch_log_many([WelchInput(c, r, extra_var, extra_df, prior)], confidence)[0]


def capped_note(t: WelchLog) -> list[str]:
    """What a comparison's reasons say of its test's df cap (a side of 2 values, see welch_log)."""
    return [TWO_VALUES_NOTE] if t.method == TWO_VALUES_LOG_TEST else []


def welch_family(
    pairs: Sequence[WelchInput], confidence: float, *, adjust: bool
) -> tuple[list[WelchLog | None], list[float | None], str]:
    """(the test of each pair, its q-value, the adjustment's name): Benjamini-Hochberg adjusted across
    the pairs as one family when ``adjust``, else the raw p. What every batch of comparisons reports."""
    tests = welch_log_many(pairs, confidence)
    raw = [None if t is None else t.p_value for t in tests]
    return tests, *family_q_values(raw, adjust)


def welch_log_many(pairs: Sequence[WelchInput], confidence: float = CONFIDENCE) -> list[WelchLog | None]:
    """:func:`welch_log` of every pair, the element-wise steps as arrays over the batch (module doc)."""
    out: list[WelchLog | None] = [None] * len(pairs)
    testable = [i for i, p in enumerate(pairs) if _testable(p.c, p.r)]
    if not testable:
        return out
    sides = _sides_many([pairs[i] for i in testable])
    moderated = [
        pairs[i].prior is not None and (s[1] > 0 or s[3] > 0) for i, s in zip(testable, sides, strict=True)
    ]
    ests, ses, dfs, methods = [], [], [], []
    for k, (i, s) in enumerate(zip(testable, sides, strict=True)):
        p = pairs[i]
        nc, nr = int(p.c.size), int(p.r.size)
        mc, sc, mr, sr = s
        dfc, dfr = float(nc - 1), float(nr - 1)
        if moderated[k]:
            floor = cell_floor([(sc * sc, dfc), (sr * sr, dfr)])
            (varc, dfc), (varr, dfr) = (
                squeeze(sc * sc, dfc, p.prior, floor),
                squeeze(sr * sr, dfr, p.prior, floor),
            )
            sc, sr = math.sqrt(varc), math.sqrt(varr)
        vc, vr = sc * sc / nc, sr * sr / nr
        extra = p.extra_var if p.extra_var > 0 else 0.0
        se = math.sqrt(vc + vr + extra)
        extra_term = extra * extra / p.extra_df if extra and p.extra_df else 0.0  # exact without a df
        denom = vc * vc / dfc + vr * vr / dfr + extra_term
        df: float = (vc + vr + extra) ** 2 / denom if denom > 0 else (math.inf if se > 0 else 0.0)
        method = MODERATED_LOG_TEST if moderated[k] else WELCH_LOG_TEST
        if min(nc, nr) == 2 and not moderated[k]:
            df = min(df, TWO_VALUES_MAX_DF)
            method = TWO_VALUES_LOG_TEST
        ests.append(mc - mr)
        ses.append(se)
        dfs.append(df)
        methods.append(method)
    _finish(out, testable, (ests, ses, dfs, methods), confidence)
    return out


def _testable(c: np.ndarray, r: np.ndarray) -> bool:
    return c.size >= 2 and r.size >= 2 and c[0] > 0 and r[0] > 0


def _finish(
    out: list[WelchLog | None],
    testable: Sequence[int],
    found: tuple[list[float], list[float], list[float], list[str]],
    confidence: float,
) -> None:
    """The tests into ``out``: p and the critical t of every pair with spread in one call each."""
    ests, ses, dfs, methods = found
    spread = [k for k, se in enumerate(ses) if se != 0.0]
    if spread:
        df_arr = np.array([dfs[k] for k in spread])
        t_arr = np.array([ests[k] / ses[k] for k in spread])
        se_arr = np.array([ses[k] for k in spread])
        # As stats.t_two_sided_p and stats.t_critical, element by element.
        ps = (2.0 * special.stdtr(df_arr, -np.abs(t_arr))).tolist()
        halves = (special.stdtrit(df_arr, 0.5 + confidence / 2.0) * se_arr).tolist()
    at = {k: j for j, k in enumerate(spread)}
    for k, i in enumerate(testable):
        est, method = ests[k], methods[k]
        if k not in at:
            out[i] = WelchLog(est, 0.0, None, 0.0 if abs(est) >= LOG_RESOLUTION else 1.0, est, est, method)
            continue
        half = halves[at[k]]
        out[i] = WelchLog(est, ses[k], dfs[k], min(1.0, ps[at[k]]), est - half, est + half, method)


def _sides_many(pairs: Sequence[WelchInput]) -> list[_Sides]:
    """Each pair's sides as log ratios to the reference's smallest value (small numbers that keep their
    last digits, where log(x) of large or small x loses them to its magnitude; order-free), the ratios
    and logs of the whole batch in one call each."""
    parts, refs, sizes, bounds, fallback = [], [], [], [], {}
    at = 0
    for k, p in enumerate(pairs):
        ref, nc, n = float(p.r[0]), int(p.c.size), int(p.c.size + p.r.size)
        if _ratio_safe(p.c, ref) and _ratio_safe(p.r, ref):
            parts += [p.c, p.r]
            refs.append(ref)
            sizes.append(n)
            bounds.append((at, at + nc, at + n))
            at += n
        else:  # a ratio would over- or underflow: log(x) - log(ref), pair by pair
            fallback[k] = (_log_ratios(p.c, ref), _log_ratios(p.r, ref))
            bounds.append((at, at, at))
    logs = np.log(np.concatenate(parts) / np.repeat(refs, sizes)).tolist() if parts else []
    out = []
    for k, (a, b, e) in enumerate(bounds):
        lc, lr = fallback[k] if k in fallback else (logs[a:b], logs[b:e])
        mc, sc = _log_mean_sd(lc)
        mr, sr = _log_mean_sd(lr)
        out.append((mc, 0.0 if sc < LOG_RESOLUTION else sc, mr, 0.0 if sr < LOG_RESOLUTION else sr))
    return out


def _log_mean_sd(v: list[float]) -> tuple[float, float]:
    """:func:`ablate.backend.analysis.stats.mean_sd` of sorted log values, the same numbers: logs of
    floats stay below 746 in size, so its scaling against overflow never applies."""
    if v[0] == v[-1]:
        return v[0], 0.0
    m = math.fsum(v) / len(v)
    return m, math.sqrt(math.fsum([(x - m) ** 2 for x in v]) / (len(v) - 1))


def _ratio_safe(x: np.ndarray, ref: float) -> bool:
    """Whether x / ref stays a normal float for every x of sorted ``x``: the extremes bound every ratio."""
    return float(x[0]) >= ref * 1e-300 and float(x[-1]) <= ref * 1e300


def _log_ratios(x: np.ndarray, ref: float) -> list[float]:
    """log(x / ref) of sorted x, or log(x) - log(ref) where a ratio would over- or underflow."""
    if _ratio_safe(x, ref):
        return np.log(x / ref).tolist()
    return (np.log(x) - math.log(ref)).tolist()
