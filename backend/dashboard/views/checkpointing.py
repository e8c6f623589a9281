"""The release page's checkpointing section: for each cluster and workload the release ran, the
advisor's recommendation and its two figures (memory and throughput against k)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from ablate.backend import charts
from ablate.backend.charts import Chart
from ablate.backend.charts.checkpointing import advisor_charts
from ablate.backend.dashboard.filters import Filters
from ablate.backend.services.advice import CheckpointingAdvice, release_advice


@dataclass
class AdvisorItem:
    advice: CheckpointingAdvice
    charts: list[Chart]  # memory, then throughput against k


@dataclass
class AdvisorView:
    items: list[AdvisorItem] = field(default_factory=list)
    not_advised: list[str] = field(default_factory=list)

    @property
    def chart_count(self) -> int:
        return sum(len(item.charts) for item in self.items)


def _slug(*parts: str) -> str:
    cleaned = "-".join("".join(ch if ch.isalnum() else "-" for ch in p) for p in parts)
    return "chart-advisor-" + "-".join(filter(None, cleaned.split("-")))


def advisor_view(session: Session, ref: str, filters: Filters) -> AdvisorView | None:
    """The section for the page's filters, or None when there is nothing to say."""
    advice = release_advice(session, ref)
    view = AdvisorView()
    for item in advice.items:
        if (filters.cluster and item.cluster != filters.cluster) or (
            filters.workload and item.workload != filters.workload
        ):
            continue
        shown = [
            charts.embed(fig, _slug(kind, item.cluster, item.workload), f"advisor-{kind}")
            for kind, fig in advisor_charts(item)
        ]
        view.items.append(AdvisorItem(item, shown))
    view.not_advised = list(advice.not_advised)
    return view if view.items or view.not_advised else None
