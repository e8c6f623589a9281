"""Small helpers shared by the figure modules (variant order, speed-up lookup).

Numbers in labels and hover text are written by :mod:`ablate.backend.domain.formatting`, as on the
dashboard's tables and in the reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ablate.backend.analysis.ablation import LadderAnalysis, speedup_of

__all__ = ["has_data", "speedup_of", "variant_order"]


def variant_order(ladders: Iterable[LadderAnalysis]) -> list[str]:
    """Variants in ladder order, first appearance wins across workloads."""
    return list(dict.fromkeys(v.variant for ladder in ladders for v in ladder.variants))


def has_data(ladders: Mapping[str, LadderAnalysis]) -> bool:
    return any(v.summary.n for ladder in ladders.values() for v in ladder.variants)
