"""Two-sample comparison of a contender against a reference, oriented by the metric registry.

Shared by the ablation ladder (variant vs Base, variant vs previous rung) and the release
regression check, so "speed-up", its CI and its p-value mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ablate.backend.analysis.stats import (
    DEFAULT_N_RESAMPLES,
    bootstrap_median_cis,
    clean_values,
    finite_or_none,
    mann_whitney_p,
    min_possible_p,
    sorted_median,
)
from ablate.backend.domain.metrics import Direction, orient_ratio

TEST_NAME = "mann-whitney-u two-sided"


@dataclass(frozen=True)
class Comparison:
    """Contender vs reference. ``ratio`` > 1 means the contender is better, whatever the metric."""

    contender: str
    reference: str
    n_contender: int
    n_reference: int
    contender_median: float | None
    reference_median: float | None
    ratio: float | None  # oriented ratio of medians
    ci_low: float | None  # bootstrap CI of the oriented ratio of medians
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney U; None when a side has < 2 values
    min_possible_p: float | None  # floor of the exact test for these sample sizes
    significant: bool  # p_value < alpha
    alpha: float
    test: str
    reasons: tuple[str, ...]


def _ratio_higher(mc: np.ndarray, mr: np.ndarray) -> np.ndarray:
    return mc / mr


def _ratio_lower(mc: np.ndarray, mr: np.ndarray) -> np.ndarray:
    return mr / mc


# Oriented ratio of medians from the medians of (contender, reference), for the batched bootstrap.
RATIO_OF_MEDIANS = {"higher": _ratio_higher, "lower": _ratio_lower}


@dataclass(frozen=True)
class Pair:
    """One comparison to make: a contender sample against a reference sample."""

    contender: Sequence[float]
    reference: Sequence[float]
    direction: Direction
    contender_name: str = "contender"
    reference_name: str = "reference"


def compare_many(
    pairs: Sequence[Pair],
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> list[Comparison]:
    """:func:`compare_samples` of many pairs; the bootstraps run batched (same results, faster)."""
    cleaned = [(clean_values(p.contender), clean_values(p.reference)) for p in pairs]
    wanted: dict[str, list[int]] = {"higher": [], "lower": []}
    for i, (c, r) in enumerate(cleaned):
        if c.size and r.size and c[0] > 0 and r[0] > 0:
            wanted[pairs[i].direction].append(i)
    cis: dict[int, tuple[float | None, float | None]] = {}
    for direction, members in wanted.items():
        if members:
            found = bootstrap_median_cis(
                [cleaned[i] for i in members],
                RATIO_OF_MEDIANS[direction],
                confidence=confidence,
                n_resamples=n_resamples,
                seed=seed,
            )
            cis.update(zip(members, found, strict=True))
    return [
        _comparison(p, c, r, cis.get(i), alpha)
        for i, (p, (c, r)) in enumerate(zip(pairs, cleaned, strict=True))
    ]


def compare_samples(
    contender: Sequence[float],
    reference: Sequence[float],
    direction: Direction,
    *,
    contender_name: str = "contender",
    reference_name: str = "reference",
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Oriented ratio of medians, its two-sample bootstrap CI, and a Mann-Whitney p-value."""
    pair = Pair(contender, reference, direction, contender_name, reference_name)
    return compare_many([pair], alpha=alpha, confidence=confidence, n_resamples=n_resamples, seed=seed)[0]


def _comparison(
    pair: Pair, c: np.ndarray, r: np.ndarray, ci: tuple[float | None, float | None] | None, alpha: float
) -> Comparison:
    contender_name, reference_name, direction = pair.contender_name, pair.reference_name, pair.direction
    reasons: list[str] = []
    mc = sorted_median(c) if c.size else None
    mr = sorted_median(r) if r.size else None
    if c.size == 0:
        reasons.append(f"{contender_name}: no values")
    if r.size == 0:
        reasons.append(f"{reference_name}: no values")

    ratio = ci_low = ci_high = None
    if mc is not None and mr is not None:
        if ci is None:
            # Ratios (and their logs, used for contribution shares) need strictly positive values.
            reasons.append("non-positive values: ratio undefined")
        else:
            ratio = orient_ratio(direction, mc, mr)
            ci_low, ci_high = ci
            if ci_low is None and (c.size < 2 or r.size < 2):
                reasons.append("fewer than 2 values: no confidence interval")

    p = mann_whitney_p(c, r)
    floor = min_possible_p(int(c.size), int(r.size))
    if c.size and r.size and p is None:
        reasons.append("fewer than 2 values: no significance test")
    elif floor is not None and floor >= alpha:
        reasons.append(f"n too small for significance: min possible p={floor:.3g} >= alpha={alpha:g}")
    significant = p is not None and p < alpha
    return Comparison(
        contender=contender_name,
        reference=reference_name,
        n_contender=int(c.size),
        n_reference=int(r.size),
        contender_median=mc,
        reference_median=mr,
        ratio=finite_or_none(ratio),
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p,
        min_possible_p=floor,
        significant=significant,
        alpha=alpha,
        test=TEST_NAME,
        reasons=tuple(reasons),
    )
