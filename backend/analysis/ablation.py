"""Ablation ladder: what each rung (Base, +ACCL, AC2, +CompilerOpt, +CkptOpt) is worth.

Input is one release x cluster x workload x metric: an ordered list of (variant, values), each
variant adding one optimisation to the previous one. For every variant we report the speed-up
over Base, the step over the previous rung with values, and each step's share of the total gain.

Shares are computed on log ratios: share_i = log(step_i) / log(total). Because the step ratios
of medians telescope (product of steps == last / Base), the shares add up to exactly 1. A step
that loses performance has a negative share, so other shares can exceed 1. When the total gain
is ~0 (|log total| < 1e-9) the shares are meaningless and are None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ablate.backend.analysis.comparison import Comparison, Pair, compare_many
from ablate.backend.analysis.stats import DEFAULT_N_RESAMPLES, Summary, clean_values, summarize_many
from ablate.backend.domain.metrics import Direction, describe_metric

_ZERO_LOG_GAIN = 1e-9


@dataclass(frozen=True)
class VariantResult:
    variant: str
    summary: Summary
    vs_baseline: Comparison | None  # None for the baseline itself or when the baseline is missing
    step: Comparison | None  # vs the previous rung with values; None for the first such rung
    previous_variant: str | None
    share: float | None  # share of the total log gain contributed by this step
    reasons: tuple[str, ...]


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

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.variant == name), None)


@dataclass(frozen=True)
class LadderInput:
    """One ladder to analyse: its rungs in order, the metric, and optionally unit and baseline."""

    rungs: Sequence[tuple[str, Sequence[float]]]
    metric: str
    unit: str | None = None
    baseline: str | None = None


def analyze_ladder(
    rungs: Sequence[tuple[str, Sequence[float]]],
    metric: str,
    *,
    unit: str | None = None,
    baseline: str | None = None,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
    noisy_cv: float = 0.05,
    min_n: int = 3,
) -> LadderAnalysis:
    """Analyse one ladder. ``baseline`` defaults to the first rung; ``unit`` is needed for custom metrics.

    Duplicate variant names are merged (their values pooled) at the first position they appear.
    ``noisy_cv`` and ``min_n`` decide when a rung's summary is flagged noisy (see :func:`summarize`).
    """
    return analyze_ladders(
        [LadderInput(rungs, metric, unit, baseline)],
        alpha=alpha,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        noisy_cv=noisy_cv,
        min_n=min_n,
    )[0]


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


def analyze_ladders(
    ladders: Sequence[LadderInput],
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
    noisy_cv: float = 0.05,
    min_n: int = 3,
) -> list[LadderAnalysis]:
    """:func:`analyze_ladder` of many ladders: every summary and comparison of all of them is
    bootstrapped in a few batched calls, with the same results as one ladder at a time."""
    plans: list[_Plan] = []
    samples: list[list[float]] = []
    pairs: list[Pair] = []
    for item in ladders:
        mdef = describe_metric(item.metric, item.unit)
        order: list[str] = []
        pooled: dict[str, list[float]] = {}
        for name, values in item.rungs:
            if name not in pooled:
                order.append(name)
                pooled[name] = []
            pooled[name].extend(float(v) for v in values)

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
        prev: str | None = None
        cleaned = {name: clean_values(v) for name, v in pooled.items()}  # once per rung, not per use
        for name in order:
            values = cleaned[name]
            samples.append(values)
            vs_base = step = None
            if values.size:
                if not baseline_missing and name != base_name:
                    vs_base = len(pairs)
                    pairs.append(Pair(values, cleaned[base_name], mdef.direction, name, base_name))
                if prev is not None:
                    step = len(pairs)
                    pairs.append(Pair(values, cleaned[prev], mdef.direction, name, prev))
            links[name] = (vs_base, step, prev)
            if values.size:
                prev = name
        plans.append(
            _Plan(
                item.metric,
                mdef.unit,
                mdef.direction,
                order,
                pooled,
                base_name,
                baseline_missing,
                reasons,
                links,
            )
        )

    kw = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    summaries = iter(summarize_many(samples, noisy_cv=noisy_cv, min_n=min_n, **kw))
    comparisons = compare_many(pairs, alpha=alpha, **kw)
    out = []
    for plan in plans:
        results: list[dict] = []
        for name in plan.order:
            vs_i, step_i, prev = plan.links[name]
            results.append(
                {
                    "variant": name,
                    "summary": next(summaries),
                    "vs_baseline": None if vs_i is None else comparisons[vs_i],
                    "step": None if step_i is None else comparisons[step_i],
                    "previous": prev,
                    "reasons": [] if plan.pooled[name] else ["no values"],
                }
            )
        out.append(_ladder(plan, results, alpha, confidence, n_resamples, seed))
    return out


def _ladder(
    plan: _Plan, results: list[dict], alpha: float, confidence: float, n_resamples: int, seed: int
) -> LadderAnalysis:
    reasons = list(plan.reasons)
    total = _total(results, plan.base_name, plan.baseline_missing)
    shares = _shares(results, total, plan.base_name)

    variants = tuple(
        VariantResult(
            variant=r["variant"],
            summary=r["summary"],
            vs_baseline=r["vs_baseline"],
            step=r["step"],
            previous_variant=r["previous"] if r["step"] is not None else None,
            share=shares.get(r["variant"]),
            reasons=tuple(r["reasons"]),
        )
        for r in results
    )
    if total is not None and total.ratio is not None and shares == {}:
        reasons.append("total gain ~0: contribution shares undefined")
    return LadderAnalysis(
        metric=plan.metric,
        unit=plan.unit,
        direction=plan.direction,
        baseline=plan.base_name,
        baseline_missing=plan.baseline_missing,
        variants=variants,
        total=total,
        alpha=alpha,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
        reasons=tuple(reasons),
    )


def _total(results: list[dict], base_name: str | None, baseline_missing: bool) -> Comparison | None:
    if baseline_missing:
        return None
    with_values = [r for r in results if r["summary"].n > 0 and r["variant"] != base_name]
    return with_values[-1]["vs_baseline"] if with_values else None


def _shares(results: list[dict], total: Comparison | None, base_name: str | None) -> dict[str, float]:
    """Per-step share of log(total). Only the chain that starts at the baseline counts."""
    if total is None or total.ratio is None:
        return {}
    log_total = math.log(total.ratio)
    if abs(log_total) < _ZERO_LOG_GAIN:
        return {}
    chain = [r for r in results if r["summary"].n > 0]
    names = [r["variant"] for r in chain]
    if not names or names[0] != base_name:
        # The baseline is not the first rung with values: steps before it don't telescope to total.
        return {}
    steps = [r["step"] for r in chain[1:]]
    if any(s is None or s.ratio is None for s in steps):
        return {}
    return {r["variant"]: math.log(r["step"].ratio) / log_total for r in chain[1:]}
