"""Full-factorial analysis: main effects and two-way interactions of optimisations.

When runs cover every on/off combination of a set of factors (each variant = the set of factors
switched on), the classic 2^k contrasts separate what each factor is worth on its own from how
pairs of factors interact. Everything is computed on the log of the metric, oriented so that
larger is better (log for higher-is-better metrics, -log for lower-is-better), hence:

* ``factor = exp(effect)`` is a multiplicative speed-up: the ratio of geometric means with the
  factor on vs off, averaged over the other factors; > 1 means the factor helps.
* A two-way interaction is reported at full size: effect_AB = effect_A | B on - effect_A | B off
  (averaged over the other factors), so ``factor`` = x1.04 means A gains 4% more with B on than
  off. (Yates' convention halves it: a 4% synergy printed as x1.020.)

Intervals are t-based per contrast with Welch-Satterthwaite standard errors: each cell's own
variance, se^2 = sum w_i^2 s_i^2 / n_i, df by Satterthwaite, so cells that are noisier and have
fewer runs do not borrow the quiet cells' precision (the pooled-variance interval covered 69% in
that design). With a single run in some cell its variance is unknown, so the pooled within-cell
variance (df = N - 2^k) is used and named in ``Effect.method``; with one repeat per cell there is
no error estimate, so no interval. A design missing any combination is reported
(``complete`` False, ``missing`` listed) and no effects are computed: contrasts of an incomplete
design would silently mix effects together.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ablate.backend.analysis.stats import (
    LOG_RESOLUTION,
    clean_values,
    exp_shown,
    finite_or_none,
    t_critical,
    t_two_sided_p,
)
from ablate.backend.domain.metrics import Direction, MetricDef, describe_metric
from ablate.backend.domain.statistics import CONFIDENCE

MAX_FACTORS = 12
WELCH_EFFECT_METHOD = "t-interval, welch-satterthwaite standard error per contrast (log scale)"
POOLED_EFFECT_METHOD = "t-interval, pooled within-cell variance (a cell has one run)"
ZERO_VARIANCE_NOTE = (
    "zero variance: every cell's repeats are equal (a deterministic metric): the effects are exact "
    "differences, no interval or p-value"
)


def _var(y: np.ndarray) -> float:
    """Sample variance of one cell's log values; 0 below two values or for rounding-level spread."""
    if y.size < 2:
        return 0.0
    v = float(y.var(ddof=1))
    return v if math.sqrt(v) >= LOG_RESOLUTION else 0.0


@dataclass(frozen=True)
class Effect:
    factors: tuple[str, ...]  # one name: main effect; two: interaction
    log_effect: float
    factor: float  # exp(log_effect); > 1 is better
    ci_low: float | None  # on the factor scale
    ci_high: float | None
    se: float | None  # standard error of log_effect
    p_value: float | None  # two-sided t-test of log_effect == 0
    df: float | None = None  # degrees of freedom of the interval
    method: str = ""


@dataclass(frozen=True)
class FactorialAnalysis:
    metric: str
    unit: str
    direction: Direction
    factors: tuple[str, ...]
    complete: bool
    missing: tuple[tuple[str, ...], ...]  # factor combinations with no values (sorted)
    main_effects: tuple[Effect, ...]
    interactions: tuple[Effect, ...]
    n_cells: int
    n_values: int
    df: int | None  # error degrees of freedom
    confidence: float
    reasons: tuple[str, ...]


def factors_from_variant(name: str, *, base: str = "Base", sep: str = "+") -> frozenset[str]:
    """Factors switched on in a ladder variant name: "AC2+ACCL" -> {AC2, ACCL}, "Base" -> {}."""
    return frozenset(p.strip() for p in name.split(sep) if p.strip() and p.strip() != base)


@dataclass(frozen=True)
class _Layout:
    """One analysis' pooled cells: the metric, the factors, every on/off combination of them (fewer
    factors first) with the values of each, and the combinations that have none."""

    metric: str
    mdef: MetricDef
    confidence: float
    names: tuple[str, ...]
    combos: tuple[frozenset[str], ...]
    pooled: dict[frozenset[str], list[float]]
    missing: tuple[tuple[str, ...], ...]


def _layout(
    cells: Sequence[tuple[str | Iterable[str], Sequence[float]]],
    metric: str,
    mdef: MetricDef,
    factors: Sequence[str] | None,
    confidence: float,
) -> _Layout:
    """Cells with equal factor sets pooled; raises ValueError on unknown or too many factors."""
    pooled: dict[frozenset[str], list[float]] = {}
    for key, values in cells:
        fs = factors_from_variant(key) if isinstance(key, str) else frozenset(key)
        pooled.setdefault(fs, []).extend(float(v) for v in values)

    seen = sorted(set().union(*pooled.keys())) if pooled else []
    names = tuple(factors) if factors is not None else tuple(seen)
    unknown = sorted(set(seen) - set(names))
    if unknown:
        raise ValueError(f"cells use factors not in `factors`: {unknown}")
    if len(names) > MAX_FACTORS:
        raise ValueError(f"at most {MAX_FACTORS} factors, got {len(names)}")

    combos = tuple(frozenset(c) for r in range(len(names) + 1) for c in itertools.combinations(names, r))
    absent = (tuple(sorted(c)) for c in combos if not pooled.get(c))
    missing = tuple(sorted(absent, key=lambda t: (len(t), t)))
    return _Layout(metric, mdef, confidence, names, combos, pooled, missing)


def _analysis(
    layout: _Layout,
    *,
    main_effects: tuple[Effect, ...] = (),
    interactions: tuple[Effect, ...] = (),
    df: int | None = None,
    reasons: tuple[str, ...] = (),
) -> FactorialAnalysis:
    return FactorialAnalysis(
        metric=layout.metric,
        unit=layout.mdef.unit,
        direction=layout.mdef.direction,
        factors=layout.names,
        complete=not layout.missing,
        missing=layout.missing,
        main_effects=main_effects,
        interactions=interactions,
        n_cells=sum(1 for c in layout.combos if layout.pooled.get(c)),
        n_values=sum(len(v) for v in layout.pooled.values()),
        df=df,
        confidence=layout.confidence,
        reasons=reasons,
    )


@dataclass(frozen=True)
class _CellStats:
    """Each combination's mean, count and variance of the oriented log values (in combination order)."""

    means: np.ndarray
    counts: np.ndarray
    cell_var: np.ndarray
    df: int  # error degrees of freedom
    s2: float | None  # pooled within-cell variance; None without error degrees of freedom
    welch: bool  # every cell has 2+ values: Welch-Satterthwaite per contrast

    @classmethod
    def of(cls, logs: Sequence[np.ndarray]) -> _CellStats:
        means = np.array([y.mean() for y in logs])
        counts = np.array([y.size for y in logs], dtype=float)
        # Equal repeats (a deterministic metric such as memory) give a mean that differs from them in
        # the last digit, hence a "variance" of rounding (1e-32) and p ~ 1e-30: spreads below
        # LOG_RESOLUTION are none, as in welch_log, and zero variance is named instead of tested.
        cell_var = np.array([_var(y) for y in logs])
        ss = float(((counts - 1) * cell_var).sum())
        df = int(counts.sum()) - len(logs)
        s2 = ss / df if df > 0 else None
        return cls(means, counts, cell_var, df, s2, bool((counts >= 2).all()))


def _oriented_logs(layout: _Layout, sign: float) -> list[np.ndarray] | None:
    """Each combination's log values, oriented so that larger is better; None with a non-positive value."""
    logs: list[np.ndarray] = []
    for c in layout.combos:
        arr = clean_values(layout.pooled[c])
        if arr[0] <= 0:
            return None
        logs.append(sign * np.log(arr))
    return logs


def _effect(subset: tuple[str, ...], layout: _Layout, stats: _CellStats) -> Effect:
    """The contrast of ``subset`` (one factor: main effect; two: interaction) with its interval."""
    # +1/-1 coding of each factor per cell.
    signs = np.prod([np.array([1.0 if f in c else -1.0 for c in layout.combos]) for f in subset], axis=0)
    # Full size: the contrast is averaged over the factors not in it only (2^(k - order) cells
    # per sign), e.g. a main effect is mean(on) - mean(off) and AB is A|B on - A|B off.
    w = signs / 2.0 ** (len(layout.names) - len(subset))
    est = float(w @ stats.means)
    se = edf = None
    method = ""
    if stats.welch:
        parts = w**2 * stats.cell_var / stats.counts
        se = math.sqrt(float(parts.sum()))
        denom = float((parts**2 / (stats.counts - 1)).sum())
        edf = float(parts.sum()) ** 2 / denom if denom > 0 else None
        method = WELCH_EFFECT_METHOD
    elif stats.s2 is not None:
        se = math.sqrt(stats.s2 * float((w**2 / stats.counts).sum()))
        edf = float(stats.df)
        method = POOLED_EFFECT_METHOD
    lo = hi = p = None
    if se is not None and edf is not None and se > 0:
        tcrit = t_critical(layout.confidence, edf)
        lo, hi = exp_shown(est - tcrit * se), exp_shown(est + tcrit * se)
        p = t_two_sided_p(est / se, edf)
    return Effect(
        factors=subset,
        log_effect=est,
        factor=exp_shown(est),
        ci_low=finite_or_none(lo),
        ci_high=finite_or_none(hi),
        se=finite_or_none(se),
        p_value=finite_or_none(p),
        df=finite_or_none(edf),
        method=method,
    )


def analyze_factorial(
    cells: Sequence[tuple[str | Iterable[str], Sequence[float]]],
    metric: str,
    *,
    unit: str | None = None,
    factors: Sequence[str] | None = None,
    confidence: float = CONFIDENCE,
    better: str | None = None,
) -> FactorialAnalysis:
    """Effects of each factor. A cell is (variant name or set of factors on, values).

    ``factors`` defaults to every factor seen, sorted; cells with equal factor sets are pooled.
    """
    mdef = describe_metric(metric, unit, better)
    layout = _layout(cells, metric, mdef, factors, confidence)
    if not layout.names:
        return _analysis(layout, reasons=("no factors",))
    if layout.missing:
        n_missing, n_combos = len(layout.missing), len(layout.combos)
        return _analysis(
            layout, reasons=(f"not full-factorial: {n_missing} of {n_combos} combinations missing",)
        )
    logs = _oriented_logs(layout, 1.0 if mdef.direction == "higher" else -1.0)
    if logs is None:
        return _analysis(layout, reasons=("non-positive values: log effects undefined",))
    stats = _CellStats.of(logs)
    reasons: list[str] = []
    if stats.df == 0:
        reasons.append("one value per combination: no error estimate, no intervals")
    elif stats.s2 == 0:
        reasons.append(ZERO_VARIANCE_NOTE)
    return _analysis(
        layout,
        main_effects=tuple(_effect((f,), layout, stats) for f in layout.names),
        interactions=tuple(_effect(pair, layout, stats) for pair in itertools.combinations(layout.names, 2)),
        df=stats.df,
        reasons=tuple(reasons),
    )


@dataclass(frozen=True)
class FactorialDesign:
    """A full-factorial design found among the variants of a study or release.

    ``background`` is switched on in every cell; each cell adds one subset of ``factors``.
    ``cells`` lists (variant, factors of the design it switches on) in the standard order:
    fewer factors first, then by factor order.
    """

    factors: tuple[str, ...]
    background: tuple[str, ...]
    cells: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def label(self) -> str:
        """E.g. "2x2 factorial (ckpt_opt x compiler_opt)"."""
        return f"{'x'.join('2' for _ in self.factors)} factorial ({' x '.join(self.factors)})"


def find_factorial_design(
    variants: Sequence[tuple[str, Iterable[str]]], *, min_factors: int = 2
) -> FactorialDesign | None:
    """The largest set of >= ``min_factors`` factors whose every on/off combination is a variant.

    ``variants`` are (name, factors switched on), e.g. from the Variant rows. A combination counts
    only with everything else held fixed: some background set B and, for each subset S of the
    factors, a variant whose factors are exactly B | S. A ladder (each rung adding a factor to the
    last) is not a factorial: {}, {a}, {a, b} lacks {b}. Variants sharing one factor set are
    ambiguous as a cell (two images, say) and are left out. Ties between designs of the same size
    go to the smallest background, then by factor names, so the choice is deterministic.
    """
    by_set: dict[frozenset[str], list[str]] = {}
    for name, factors in variants:
        by_set.setdefault(frozenset(factors), []).append(name)
    unique = {fs: names[0] for fs, names in by_set.items() if len(names) == 1}
    best: tuple[tuple, FactorialDesign] | None = None
    for background in sorted(unique, key=lambda fs: (len(fs), sorted(fs))):
        extra = sorted({f for fs in unique if background < fs for f in fs - background})
        if len(extra) < min_factors or len(extra) > MAX_FACTORS:
            continue
        for size in range(len(extra), min_factors - 1, -1):
            if best is not None and size < len(best[1].factors):
                break
            for chosen in itertools.combinations(extra, size):
                subsets = [frozenset(c) for r in range(size + 1) for c in itertools.combinations(chosen, r)]
                if not all(background | s in unique for s in subsets):
                    continue
                key = (-size, len(background), sorted(background), chosen)
                if best is None or key < best[0]:
                    cells = tuple(
                        (unique[background | s], tuple(f for f in chosen if f in s)) for s in subsets
                    )
                    best = (key, FactorialDesign(chosen, tuple(sorted(background)), cells))
                break  # the first complete set of this size in sorted order is the one to keep
    return best[1] if best else None
