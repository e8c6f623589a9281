"""Ablation ladder: what each rung (Base, +ACCL, AC2, +CompilerOpt, +CkptOpt) is worth.

Input is one release x cluster x workload x metric: an ordered list of (variant, values), each
variant adding one optimisation to the previous one. For every variant we report the speed-up
over Base, the step over the previous rung with values, and each step's share of the total gain.

Ratios are of geometric means (see :mod:`comparison`). Each step names its reference rung: the
previous rung with values; when rungs in between have none, the step spans them and says so
(``skipped``, and a reason), so a failed rung never silently merges two optimisations into one.

Shares are computed on log ratios: share_i = log(step_i) / log(total). Because the step ratios
of geometric means telescope (product of steps == last / Base), the shares add up to exactly 1.
A step that loses performance has a negative share, so other shares can exceed 1. Shares are
shown only when the total gain's interval excludes no gain (a small total makes them explode:
-414% .. +568% at a true total of 1%), each with an interval from a parametric bootstrap
(generalised pivotal quantities: every rung's mean log drawn as mean - T s / sqrt(n), T from
Student's t with n - 1 df), seeded, ``n_resamples`` draws. At ``confidence`` 0.95 it covers the
true share 95-100% of the time (conservative at small n), so reports label it ">= 95%".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ablate.backend.analysis.comparison import BASELINE_SPEEDUP, Comparison, Pair, compare_many
from ablate.backend.analysis.stats import Summary, clean_many, summarize_many
from ablate.backend.domain.metrics import Direction, describe_metric
from ablate.backend.domain.statistics import ALPHA, CONFIDENCE, MIN_N, N_RESAMPLES, NOISY_CV, SEED

_ZERO_LOG_GAIN = 1e-9
# Conservative: it covers 95-100% below 10 repeats (98-99.7% at n = 3-5), so it is labelled ">= 95%".
SHARE_INTERVAL_METHOD = "parametric bootstrap of the log means (t pivots per rung), percentile; conservative"


@dataclass(frozen=True)
class VariantResult:
    variant: str
    summary: Summary
    vs_baseline: Comparison | None  # None for the baseline itself or when the baseline is missing
    step: Comparison | None  # vs the previous rung with values; None for the first such rung
    previous_variant: str | None  # the step's reference rung
    share: float | None  # share of the total log gain contributed by this step
    reasons: tuple[str, ...]
    share_ci_low: float | None = None
    share_ci_high: float | None = None
    skipped: tuple[str, ...] = ()  # rungs between the reference and this one that have no values

    @property
    def step_reference(self) -> str | None:
        return self.previous_variant


def speedup_of(ladder: LadderAnalysis, v: VariantResult) -> tuple[float | None, float | None, float | None]:
    """(ratio, ci_low, ci_high) of a rung against the ladder's baseline.

    The one place that says the baseline's own speed-up: exactly :data:`BASELINE_SPEEDUP` (no
    interval) when it has values; every chart, table and export reads it from here.
    """
    if ladder.baseline_missing:
        return None, None, None
    if v.variant == ladder.baseline:
        return (BASELINE_SPEEDUP, None, None) if v.summary.n else (None, None, None)
    c = v.vs_baseline
    if c is None or c.ratio is None:
        return None, None, None
    return c.ratio, c.ci_low, c.ci_high


@dataclass(frozen=True)
class LadderAnalysis:
    metric: str
    unit: str
    direction: Direction
    baseline: str | None
    baseline_missing: bool
    variants: tuple[VariantResult, ...]
    # Last variant with values vs the baseline: the end-to-end gain of the whole ladder.
    total: Comparison | None
    alpha: float
    confidence: float
    n_resamples: int
    seed: int
    reasons: tuple[str, ...]
    share_method: str = SHARE_INTERVAL_METHOD

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.variant == name), None)


@dataclass(frozen=True)
class LadderInput:
    """One ladder to analyse: its rungs in order, the metric, and optionally unit and baseline."""

    rungs: Sequence[tuple[str, Sequence[float]]]
    metric: str
    unit: str | None = None
    baseline: str | None = None
    better: str | None = None  # a custom metric's stored direction ("higher" / "lower")


@dataclass(frozen=True)
class LadderOptions:
    """How ladders are analysed: the level and confidence of the comparisons, the bootstrap of the
    share intervals (``n_resamples`` draws, seeded), and when a rung's summary is flagged noisy
    (``noisy_cv``, ``min_n``; see :func:`~ablate.backend.analysis.stats.summarize`)."""

    alpha: float = ALPHA
    confidence: float = CONFIDENCE
    n_resamples: int = N_RESAMPLES
    seed: int = SEED
    noisy_cv: float = NOISY_CV
    min_n: int = MIN_N


def analyze_ladder(
    rungs: Sequence[tuple[str, Sequence[float]]],
    metric: str,
    *,
    unit: str | None = None,
    baseline: str | None = None,
    options: LadderOptions = LadderOptions(),
) -> LadderAnalysis:
    """Analyse one ladder. ``baseline`` defaults to the first rung; ``unit`` is needed for custom metrics.

    Duplicate variant names are merged (their values pooled) at the first position they appear.
    """
    return _analyze([LadderInput(rungs, metric, unit, baseline)], options)[0]


@dataclass
class _Plan:
    metric: str
    unit: str
    direction: Direction
    order: list[str]
    pooled: dict[str, list[float]]
    base_name: str | None
    baseline_missing: bool
    reasons: list[str]
    # name -> (index of its vs-baseline comparison, index of its step comparison, previous rung)
    links: dict[str, tuple[int | None, int | None, str | None]]
    skipped: dict[str, tuple[str, ...]]
    cleaned: dict[str, np.ndarray]  # each rung's values, sorted (clean_values)


def _pool(item: LadderInput) -> tuple[list[str], dict[str, list[float]]]:
    """(the rungs' names in order, each one's values): duplicate names pooled at their first place."""
    order: list[str] = []
    pooled: dict[str, list[float]] = {}
    for name, values in item.rungs:
        if name not in pooled:
            order.append(name)
            pooled[name] = []
        pooled[name].extend(float(v) for v in values)
    return order, pooled


def _plan(
    item: LadderInput,
    pooled_rungs: tuple[list[str], dict[str, list[float]]],
    cleaned: dict[str, np.ndarray],
    samples: list[np.ndarray],
    pairs: list[Pair],
) -> _Plan:
    """The rungs of one ladder in order (``pooled_rungs``: :func:`_pool`, ``cleaned``: each rung's
    values, sorted), with its samples and comparisons added to the batch's."""
    mdef = describe_metric(item.metric, item.unit, item.better)
    order, pooled = pooled_rungs

    reasons: list[str] = []
    base_name = item.baseline if item.baseline is not None else (order[0] if order else None)
    baseline_missing = base_name is None or not pooled.get(base_name)
    if base_name is None:
        reasons.append("no variants")
    elif base_name not in pooled:
        reasons.append(f"baseline {base_name!r} missing")
    elif not pooled[base_name]:
        reasons.append(f"baseline {base_name!r} has no values")

    links: dict[str, tuple[int | None, int | None, str | None]] = {}
    skipped: dict[str, tuple[str, ...]] = {}
    empty: list[str] = []  # rungs without values since the last rung with values
    prev: str | None = None
    for name in order:
        arr = cleaned[name]
        samples.append(arr)
        vs_base = step = None
        if arr.size:
            # baseline_missing covers base_name None; the explicit check says so to the type checker
            if base_name is not None and not baseline_missing and name != base_name:
                vs_base = len(pairs)
                pairs.append(Pair(arr, cleaned[base_name], mdef.direction, name, base_name))
            if prev is not None:
                step = len(pairs)
                pairs.append(Pair(arr, cleaned[prev], mdef.direction, name, prev))
        links[name] = (vs_base, step, prev)
        if arr.size:
            if prev is not None and empty:
                skipped[name] = tuple(empty)
            prev = name
            empty = []
        else:
            empty.append(name)
    return _Plan(
        item.metric,
        mdef.unit,
        mdef.direction,
        order,
        pooled,
        base_name,
        baseline_missing,
        reasons,
        links,
        skipped,
        cleaned,
    )


def analyze_ladders(
    ladders: Sequence[LadderInput], *, options: LadderOptions = LadderOptions()
) -> list[LadderAnalysis]:
    """:func:`analyze_ladder` of many ladders: every summary and comparison of all of them is
    bootstrapped in a few batched calls, with the same results as one ladder at a time."""
    return _analyze(ladders, options)


def _analyze(ladders: Sequence[LadderInput], options: LadderOptions) -> list[LadderAnalysis]:
    """The ladders analysed with ``options``, as one batch (:func:`analyze_ladders`)."""
    alpha, confidence = options.alpha, options.confidence
    plans: list[_Plan] = []
    samples: list[np.ndarray] = []
    pairs: list[Pair] = []
    pooled = [_pool(item) for item in ladders]
    # Every rung of every ladder cleaned (sorted) at once, once per rung rather than per use.
    flat = iter(clean_many([values for _order, rungs in pooled for values in rungs.values()]))
    for item, rungs in zip(ladders, pooled, strict=True):
        cleaned = {name: next(flat) for name in rungs[1]}
        plans.append(_plan(item, rungs, cleaned, samples, pairs))

    summaries = iter(
        summarize_many(
            samples, noisy_cv=options.noisy_cv, min_n=options.min_n, confidence=confidence, cleaned=True
        )
    )
    # One family: every comparison of the batch (the ladders of one release) is BH-adjusted together.
    comparisons = compare_many(pairs, alpha=alpha, confidence=confidence, cleaned=True)  # _plan cleaned them
    staged = []
    for plan in plans:
        results: list[dict] = []
        for name in plan.order:
            vs_i, step_i, prev = plan.links[name]
            gap = plan.skipped.get(name, ()) if step_i is not None else ()
            reasons = [] if plan.pooled[name] else ["no values"]
            if gap:
                reasons.append(f"step measured against {prev}: {', '.join(gap)} has no values")
            results.append(
                {
                    "variant": name,
                    "summary": next(summaries),
                    "vs_baseline": None if vs_i is None else comparisons[vs_i],
                    "step": None if step_i is None else comparisons[step_i],
                    "previous": prev,
                    "reasons": reasons,
                    "skipped": gap,
                    "values": plan.cleaned[name],
                }
            )
        staged.append((plan, results, *_shown_shares(plan, results)))
    # Every ladder's share intervals in a few array operations (share_intervals_many).
    wanted = [(results, shares) for _plan, results, shares, _reasons in staged if shares]
    found = iter(share_intervals_many(wanted, confidence, options.n_resamples, options.seed))
    return [
        _ladder(plan, results, shares, next(found) if shares else {}, reasons, options)
        for plan, results, shares, reasons in staged
    ]


def _shown_shares(plan: _Plan, results: list[dict]) -> tuple[dict[str, float], list[str]]:
    """(the shares shown, the ladder's reasons): shares only when the total gain's interval excludes 1."""
    reasons = list(plan.reasons)
    total = _total(results, plan.base_name, plan.baseline_missing)
    shares = _shares(results, total, plan.base_name)
    if shares and (total is None or total.ci_low is None or total.ci_high is None):
        reasons.append("total gain has no interval: contribution shares not shown")
        shares = {}
    elif (
        shares
        and total is not None
        and total.ci_low is not None  # excluded by the branch above; restated to narrow the types
        and total.ci_high is not None
        and total.ci_low <= 1.0 <= total.ci_high
    ):
        reasons.append("total gain's interval includes no gain: contribution shares not shown")
        shares = {}
    return shares, reasons


def _ladder(
    plan: _Plan,
    results: list[dict],
    shares: dict[str, float],
    share_cis: dict[str, tuple[float | None, float | None]],
    reasons: list[str],
    options: LadderOptions,
) -> LadderAnalysis:
    total = _total(results, plan.base_name, plan.baseline_missing)
    variants = tuple(
        VariantResult(
            variant=r["variant"],
            summary=r["summary"],
            vs_baseline=r["vs_baseline"],
            step=r["step"],
            previous_variant=r["previous"] if r["step"] is not None else None,
            share=shares.get(r["variant"]),
            reasons=tuple(r["reasons"]),
            share_ci_low=share_cis.get(r["variant"], (None, None))[0],
            share_ci_high=share_cis.get(r["variant"], (None, None))[1],
            skipped=r["skipped"],
        )
        for r in results
    )
    if total is not None and total.ratio is not None and shares == {} and not reasons:
        reasons.append("total gain ~0: contribution shares undefined")
    return LadderAnalysis(
        metric=plan.metric,
        unit=plan.unit,
        direction=plan.direction,
        baseline=plan.base_name,
        baseline_missing=plan.baseline_missing,
        variants=variants,
        total=total,
        alpha=options.alpha,
        confidence=options.confidence,
        n_resamples=options.n_resamples,
        seed=options.seed,
        reasons=tuple(reasons),
    )


def _total(results: list[dict], base_name: str | None, baseline_missing: bool) -> Comparison | None:
    if baseline_missing:
        return None
    with_values = [r for r in results if r["summary"].n > 0 and r["variant"] != base_name]
    return with_values[-1]["vs_baseline"] if with_values else None


def _shares(results: list[dict], total: Comparison | None, base_name: str | None) -> dict[str, float]:
    """Per-step share of log(total). Only the chain that starts at the baseline counts."""
    if total is None or total.log_ratio is None:
        return {}
    log_total = total.log_ratio
    if abs(log_total) < _ZERO_LOG_GAIN:
        return {}
    chain = [r for r in results if r["summary"].n > 0]
    names = [r["variant"] for r in chain]
    if not names or names[0] != base_name:
        # The baseline is not the first rung with values: steps before it don't telescope to total.
        return {}
    steps = [r["step"] for r in chain[1:]]
    if any(s is None or s.log_ratio is None for s in steps):
        return {}
    return {r["variant"]: r["step"].log_ratio / log_total for r in chain[1:]}


# Ladders whose draws are held in memory at once: 256 ladders x 5 rungs x 2,000 draws is 20 MB.
_SHARE_CHUNK = 256


def share_intervals_many(
    ladders: Sequence[tuple[list[dict], dict[str, float]]], confidence: float, n_resamples: int, seed: int
) -> list[dict[str, tuple[float | None, float | None]]]:
    """Percentile intervals of every share from generalised pivotal draws of the rungs' log means,
    for many ladders (each its results and its shown shares), with the numbers one ladder at a time gives.

    Each rung's mean log value is drawn as mean - T s / sqrt(n), T ~ t(n - 1), independently; the
    shares of each draw are its log steps over its log total. The orientation cancels in the ratio.
    Every rung of the chain needs 2 values (else no intervals). Seeded: same data, same interval.
    Every ladder draws its T from a generator seeded afresh, so ladders with the same repeats per rung
    draw the same T: drawn once per such shape, and the ladders of one shape computed as arrays.
    """
    out: list[dict[str, tuple[float | None, float | None]]] = [{} for _ in ladders]
    shapes: dict[tuple[int, ...], list[tuple[int, list[dict], np.ndarray]]] = {}
    chains = []
    for i, (results, _shares) in enumerate(ladders):
        chain = [r for r in results if r["summary"].n > 0]
        if all(r["values"].size >= 2 for r in chain):
            chains.append((i, chain))
    stats_of = _rung_stats([r["values"] for _i, chain in chains for r in chain])
    at = 0
    for i, chain in chains:
        stats = stats_of[at : at + len(chain)]
        at += len(chain)
        shapes.setdefault(tuple(r["values"].size - 1 for r in chain), []).append((i, chain, stats))
    tail = (1.0 - confidence) / 2.0 * 100.0
    for dfs, members in shapes.items():
        rng = np.random.default_rng(seed)
        pivots = np.stack([rng.standard_t(df, n_resamples) for df in dfs])  # (rungs, draws)
        for start in range(0, len(members), _SHARE_CHUNK):
            part = members[start : start + _SHARE_CHUNK]
            stats = np.stack([m[2] for m in part])  # (ladders, rungs, 3)
            # The same operations, in the same order, as mean - T * s / sqrt(n) of one rung.
            draws = stats[:, :, :1] - pivots[None, :, :] * stats[:, :, 1:2] / stats[:, :, 2:3]
            total = draws[:, -1] - draws[:, 0]
            with np.errstate(divide="ignore", invalid="ignore"):
                for j in range(1, len(dfs)):
                    _share_percentiles(part, j, (draws[:, j] - draws[:, j - 1]) / total, tail, ladders, out)
    return out


def _rung_stats(rungs: Sequence[np.ndarray]) -> np.ndarray:
    """(mean, sd, sqrt(n)) of the logs of every rung (sorted values: order-independent sums), one row
    each: the rungs of one size as one array, each row's mean and sd the numbers numpy gives that row
    alone (the same reduction along the row), without three calls per rung."""
    out = np.empty((len(rungs), 3))
    by_size: dict[int, list[int]] = {}
    for k, values in enumerate(rungs):
        by_size.setdefault(int(values.size), []).append(k)
    for n, rows in by_size.items():
        logs = np.log(np.stack([rungs[k] for k in rows]))
        out[rows, 0] = logs.mean(axis=1)
        out[rows, 1] = logs.std(axis=1, ddof=1)
        out[rows, 2] = np.sqrt(n)
    return out


def _share_percentiles(
    part: Sequence[tuple[int, list[dict], np.ndarray]],
    j: int,
    share: np.ndarray,  # (ladders, draws): step j's share in every draw
    tail: float,
    ladders: Sequence[tuple[list[dict], dict[str, float]]],
    out: list[dict[str, tuple[float | None, float | None]]],
) -> None:
    finite = np.isfinite(share).all(axis=1)
    # Rows without a non-finite draw: one percentile call for all (the same numbers row by row).
    rows = np.flatnonzero(finite)
    bounds = np.percentile(share[rows], [tail, 100.0 - tail], axis=1) if rows.size else np.empty((2, 0))
    bound_of = dict(zip(rows.tolist(), zip(bounds[0].tolist(), bounds[1].tolist(), strict=True), strict=True))
    for row, (i, chain, _stats) in enumerate(part):
        variant = chain[j]["variant"]
        if variant not in ladders[i][1]:
            continue
        if row in bound_of:
            out[i][variant] = bound_of[row]
            continue
        kept = share[row][np.isfinite(share[row])]
        if kept.size == 0:
            out[i][variant] = (None, None)
            continue
        lo, hi = np.percentile(kept, [tail, 100.0 - tail])
        out[i][variant] = (float(lo), float(hi))
