"""The home page and the releases list: latest release per image family with its headline
speed-up over Base, recent regressions, and studies in progress."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from ablate.backend.config import Settings
from ablate.backend.dashboard.filters import Filters
from ablate.backend.dashboard.views.deltas import DeltaRow, delta_rows
from ablate.backend.dashboard.views.release import options_from
from ablate.backend.dashboard.views.studies import StudyListItem, study_items
from ablate.backend.db.models import Cluster, Platform, Release, Workload
from ablate.backend.services import catalog
from ablate.backend.services import comparison as comparison_service
from ablate.backend.services.comparison import failures

# Families shown on the home page; older ones are one click away on the releases list.
MAX_FAMILIES = 12
MAX_REGRESSIONS = 20


@dataclass
class Headline:
    cluster: str
    workload: str
    variant: str  # the last rung with values: the whole ladder's end-to-end gain
    baseline: str
    ratio: float
    ci_low: float | None
    ci_high: float | None
    significant: bool


@dataclass
class FamilyCard:
    image: str
    platform: str
    latest: str
    latest_tag: str
    release_date: str | None
    n_releases: int
    previous: str | None
    headlines: list[Headline] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    missing: int = 0
    why_no_headline: str = ""  # said when there is no headline: no runs, all failed (and why), no Base


@dataclass
class HomePage:
    filters: Filters
    families: list[FamilyCard]
    regressions: list[tuple[str, DeltaRow]]  # (release ref, row)
    studies: list[StudyListItem]
    total_releases: int
    options: dict[str, list[str]]


def families(session: Session, platform: str | None) -> dict[str, list[Release]]:
    """image -> releases of that image, oldest first (the comparison service's order)."""
    by_image: dict[str, list[Release]] = defaultdict(list)
    for release in catalog.list_releases(session, platform=platform):
        by_image[release.image].append(release)
    return {image: comparison_service.order_family(rels) for image, rels in sorted(by_image.items())}


def _card(
    session: Session, image: str, releases: list[Release], settings: Settings, filters: Filters
) -> tuple[FamilyCard, list[tuple[str, DeltaRow]]]:
    latest = releases[-1]
    comp = comparison_service.build_release_comparison(session, latest.ref, options=options_from(settings))
    card = FamilyCard(
        image=image,
        platform=latest.platform,
        latest=latest.ref,
        latest_tag=latest.tag,
        release_date=latest.release_date.isoformat() if latest.release_date else None,
        n_releases=len(releases),
        previous=comp.baseline.ref if comp.baseline else None,
        missing=len(comp.missing),
    )
    if comp.primary_metric:
        card.verdicts = comp.verdict_counts(comp.primary_metric)
        for entry in comp.ladders:
            if entry.metric != comp.primary_metric:
                continue
            if filters.cluster and entry.cluster != filters.cluster:
                continue
            if filters.workload and entry.workload != filters.workload:
                continue
            total = entry.analysis.total
            if total is None or total.ratio is None:
                continue
            card.headlines.append(
                Headline(
                    cluster=entry.cluster,
                    workload=entry.workload,
                    variant=total.contender,
                    baseline=total.reference,
                    ratio=total.ratio,
                    ci_low=total.ci_low,
                    ci_high=total.ci_high,
                    significant=total.significant,
                )
            )
    if not card.headlines:
        card.why_no_headline = failures.why_no_headline(comp.cells, comp.baseline_variant)
    regressions = [
        d
        for d in comp.regressions
        if (not filters.cluster or d.cluster == filters.cluster)
        and (not filters.workload or d.workload == filters.workload)
    ]
    return card, [(latest.ref, row) for row in delta_rows(regressions)]


def home_page(session: Session, filters: Filters, settings: Settings) -> HomePage:
    fams = families(session, filters.platform)
    cards: list[FamilyCard] = []
    regressions: list[tuple[str, DeltaRow]] = []
    for image, releases in list(fams.items())[:MAX_FAMILIES]:
        card, regs = _card(session, image, releases, settings, filters)
        cards.append(card)
        regressions.extend(regs)
    return HomePage(
        filters=filters,
        families=cards,
        regressions=regressions[:MAX_REGRESSIONS],
        studies=study_items(session, limit=50, active_only=True),
        total_releases=sum(len(r) for r in fams.values()),
        options=filter_options(session),
    )


def filter_options(session: Session) -> dict[str, list[str]]:
    return {
        "clusters": [c.name for c in catalog.list_named(session, Cluster)],
        "platforms": [p.value for p in Platform],
        "workloads": [w.name for w in catalog.list_named(session, Workload)],
    }


@dataclass
class ReleaseListPage:
    filters: Filters
    families: dict[str, list[Release]]  # newest first within a family


def releases_page(session: Session, filters: Filters) -> ReleaseListPage:
    fams = families(session, filters.platform)
    return ReleaseListPage(filters=filters, families={k: list(reversed(v)) for k, v in fams.items()})
