"""Small helpers shared by the figure modules (variant order, speed-up lookup).

Numbers in labels and hover text are written by :mod:`ablate.backend.domain.formatting`, as on the
dashboard's tables and in the reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ablate.backend.analysis.ablation import LadderAnalysis, VariantResult


def variant_order(ladders: Iterable[LadderAnalysis]) -> list[str]:
    """Variants in ladder order, first appearance wins across workloads."""
    return list(dict.fromkeys(v.variant for ladder in ladders for v in ladder.variants))


def speedup_of(ladder: LadderAnalysis, v: VariantResult) -> tuple[float | None, float | None, float | None]:
    """(ratio, ci_low, ci_high) vs the baseline; the baseline itself is exactly 1."""
    if ladder.baseline_missing:
        return None, None, None
    if v.variant == ladder.baseline:
        return (1.0, None, None) if v.summary.n else (None, None, None)
    c = v.vs_baseline
    if c is None or c.ratio is None:
        return None, None, None
    return c.ratio, c.ci_low, c.ci_high


def has_data(ladders: Mapping[str, LadderAnalysis]) -> bool:
    return any(v.summary.n for ladder in ladders.values() for v in ladder.variants)
