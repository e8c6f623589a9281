"""Small helpers shared by the figure modules (variant order, speed-up lookup, plain-text labels).

Numbers in labels and hover text are written by :mod:`ablate.backend.domain.formatting`, as on the
dashboard's tables and in the reports.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping

from ablate.backend.analysis.ablation import LadderAnalysis, speedup_of

__all__ = ["has_data", "plain", "plain_all", "plain_lines", "speedup_of", "variant_order"]


def plain(text: object) -> str:
    """``text`` as plotly shows it literally: its HTML-like markup escaped.

    plotly reads a subset of HTML in every text it draws (titles, axis and tick labels, legend
    names, hover text, annotations: ``<a href>``, ``<b>``, ``<br>``, ``<span style>``...) and
    decodes entities, so a user's name (release tag, variant, workload, cluster, metric) must pass
    through here before it reaches a figure, or it could draw a live link or bold text.
    ``&lt;`` / ``&gt;`` / ``&amp;`` render as ``<`` / ``>`` / ``&``.
    """
    return html.escape(str(text), quote=False)


def plain_all(texts: Iterable[object]) -> list[str]:
    """:func:`plain` of each (category values: workloads and variants on an axis)."""
    return [plain(t) for t in texts]


def plain_lines(*lines: object) -> str:
    """Hover text: each line plain text, the lines joined by plotly's only markup we use, ``<br>``."""
    return "<br>".join(plain(line) for line in lines)


def variant_order(ladders: Iterable[LadderAnalysis]) -> list[str]:
    """Variants in ladder order, first appearance wins across workloads."""
    return list(dict.fromkeys(v.variant for ladder in ladders for v in ladder.variants))


def has_data(ladders: Mapping[str, LadderAnalysis]) -> bool:
    return any(v.summary.n for ladder in ladders.values() for v in ladder.variants)
