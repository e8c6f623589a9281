"""The compare page: two releases side by side, or a baseline set of runs against a contender set.

Two releases: the contender's comparison against the chosen baseline release gives the verdicts
and the manifest diff; each release's own ladder gives the side-by-side ablation charts.
Two run sets (run ids or whole studies): cells are compared with the same statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from backend import charts
from backend.config import Settings
from backend.services import comparison as comparison_service
from backend.services.comparison import ReleaseComparison, RunSetComparison
from backend.services.errors import ValidationProblem
from backend.web.filters import Filters
from backend.web.views.deltas import DeltaRow, delta_rows
from backend.web.views.home import families, filter_options
from backend.web.views.manifest import ManifestRow, manifest_rows
from backend.web.views.release import Chart, chart_of, options_from, slug


@dataclass
class SideBySide:
    cluster: str
    baseline: Chart | None
    contender: Chart | None


@dataclass
class ComparePage:
    mode: str  # "form" | "releases" | "runs"
    filters: Filters
    options: dict[str, list[str]]
    release_choices: list[str]
    a: str | None = None
    b: str | None = None
    baseline_runs: str = ""
    contender_runs: str = ""
    baseline_label: str = ""
    contender_label: str = ""
    deltas: list[DeltaRow] = field(default_factory=list)
    manifest: list[ManifestRow] = field(default_factory=list)
    charts: list[SideBySide] = field(default_factory=list)
    missing: tuple[str, ...] = ()
    threshold_pct: float | None = None
    alpha: float | None = None

    @property
    def chart_count(self) -> int:
        return sum((c.baseline is not None) + (c.contender is not None) for c in self.charts)


def _filtered(deltas: list[DeltaRow], filters: Filters) -> list[DeltaRow]:
    return [
        d
        for d in deltas
        if (not filters.cluster or d.cluster == filters.cluster)
        and (not filters.workload or d.workload == filters.workload)
    ]


def _ablation_chart(comp: ReleaseComparison, cluster: str, filters: Filters, side: str) -> Chart | None:
    if not comp.primary_metric:
        return None
    ladders = comp.ladder_map(cluster, comp.primary_metric)
    if filters.workload:
        ladders = {w: lad for w, lad in ladders.items() if w == filters.workload}
    if not ladders:
        return None
    colors = charts.variant_colors(v.name for v in comp.variants)
    fig = charts.ablation_bars(ladders, release=comp.release.ref, cluster=cluster, colors=colors)
    return chart_of(fig, slug("compare", side, cluster), "ablation")


def _releases(session: Session, page: ComparePage, settings: Settings) -> None:
    assert page.a and page.b
    if page.a == page.b:
        raise ValidationProblem.at("b", "pick two different releases")
    opts = options_from(settings)
    contender = comparison_service.build_release_comparison(
        session, page.b, baseline_ref=page.a, options=opts
    )
    baseline = comparison_service.build_release_comparison(session, page.a, options=opts)
    page.mode = "releases"
    page.baseline_label, page.contender_label = page.a, page.b
    page.deltas = _filtered(delta_rows(contender.deltas), page.filters)
    page.manifest = manifest_rows(contender.manifest_diff)
    page.missing = contender.missing
    page.threshold_pct, page.alpha = contender.method.threshold_pct, contender.method.alpha
    clusters = list(
        dict.fromkeys([*(c.name for c in baseline.clusters), *(c.name for c in contender.clusters)])
    )
    for cluster in clusters:
        if page.filters.cluster and cluster != page.filters.cluster:
            continue
        page.charts.append(
            SideBySide(
                cluster,
                _ablation_chart(baseline, cluster, page.filters, "a"),
                _ablation_chart(contender, cluster, page.filters, "b"),
            )
        )


def _run_ids(session: Session, ids: str, study: str, loc: str) -> tuple[list[int], str]:
    if study:
        if not study.isdigit():
            raise ValidationProblem.at(f"{loc}_study", f"expected a study id, got {study!r}")
        return comparison_service.study_run_ids(session, int(study), f"{loc}_study"), f"study #{study}"
    parsed = comparison_service.parse_run_ids(ids, f"{loc}_runs")
    return parsed, f"{len(parsed)} run{'s' if len(parsed) != 1 else ''}"


def _runs(session: Session, page: ComparePage, settings: Settings, studies: tuple[str, str]) -> None:
    base_ids, base_label = _run_ids(session, page.baseline_runs, studies[0], "baseline")
    cont_ids, cont_label = _run_ids(session, page.contender_runs, studies[1], "contender")
    result: RunSetComparison = comparison_service.compare_run_sets(
        session,
        base_ids,
        cont_ids,
        baseline_label=base_label,
        contender_label=cont_label,
        options=options_from(settings),
    )
    page.mode = "runs"
    page.baseline_label, page.contender_label = base_label, cont_label
    page.deltas = _filtered(delta_rows(result.deltas), page.filters)
    page.manifest = manifest_rows(result.manifest_diff) if result.manifest_diff else []
    page.missing = result.missing
    page.threshold_pct, page.alpha = result.method.threshold_pct, result.method.alpha
    page.a = ", ".join(result.baseline.releases)
    page.b = ", ".join(result.contender.releases)


def compare_page(
    session: Session,
    filters: Filters,
    settings: Settings,
    *,
    a: str = "",
    b: str = "",
    baseline_runs: str = "",
    contender_runs: str = "",
    baseline_study: str = "",
    contender_study: str = "",
) -> ComparePage:
    fams = families(session, filters.platform)
    choices = [r.ref for releases in fams.values() for r in reversed(releases)]
    page = ComparePage(
        mode="form",
        filters=filters,
        options=filter_options(session),
        release_choices=choices,
        a=a or None,
        b=b or None,
        baseline_runs=baseline_runs,
        contender_runs=contender_runs,
    )
    if a and b:
        _releases(session, page, settings)
    elif (baseline_runs or baseline_study) and (contender_runs or contender_study):
        _runs(session, page, settings, (baseline_study, contender_study))
    elif a or b or baseline_runs or contender_runs or baseline_study or contender_study:
        raise ValidationProblem.at(
            "query", "give both sides: a and b (releases), or baseline_runs and contender_runs"
        )
    return page
