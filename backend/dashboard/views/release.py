"""The release page: ablation charts and tables per cluster and workload, manifest and its diff,
release-over-release verdicts, notes and report downloads. A ladder release shows each rung's step
and share of the gain with a waterfall; a factorial release shows its main effects and interactions
(chart and table) instead, since a step over the previous cell of a factorial mixes effects.
Everything comes from one :class:`~ablate.backend.services.comparison.ReleaseComparison`; this
module only selects and shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sqlalchemy.orm import Session

from ablate.backend import charts
from ablate.backend.analysis.ablation import LadderAnalysis, VariantResult, speedup_of
from ablate.backend.analysis.factorial import FactorialAnalysis
from ablate.backend.charts import Chart
from ablate.backend.charts.plan import cluster_chart_plan
from ablate.backend.config import Settings
from ablate.backend.dashboard import links
from ablate.backend.dashboard.filters import Filters
from ablate.backend.dashboard.views.checkpointing import AdvisorView, advisor_view
from ablate.backend.dashboard.views.deltas import DeltaRow, Sides, delta_rows, short_labels, split_deltas
from ablate.backend.dashboard.views.manifest import ManifestRow, manifest_rows
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services import comparison as comparison_service
from ablate.backend.services import history as history_service
from ablate.backend.services import images as images_service
from ablate.backend.services.comparison import ComparisonOptions, ReleaseComparison
from ablate.backend.services.errors import ValidationProblem

REPORT_FORMATS = (("html", "HTML report"), ("md", "Markdown"), ("csv", "CSV"), ("json", "JSON"))


@dataclass
class LadderRow:
    variant: str
    n: int
    median: float | None
    ci_low: float | None
    ci_high: float | None
    cv: float | None
    noisy: bool
    noisy_reasons: str
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    p_value: float | None
    q_value: float | None  # Benjamini-Hochberg across the release: what "significant" reads
    significant: bool | None  # None for the baseline and where no test ran
    step: float | None
    step_low: float | None
    step_high: float | None
    step_reference: str | None  # the rung the step is measured against
    skipped: tuple[str, ...]  # rungs without values that the step spans
    share: float | None
    share_low: float | None
    share_high: float | None
    reasons: str
    # The succeeded runs behind each number (ablate.backend.dashboard.links); None where nothing backs it.
    runs_url: str | None = None  # n and the median
    speedup_runs_url: str | None = None  # this variant and the baseline
    step_runs_url: str | None = None  # this variant and its reference rung
    share_runs_url: str | None = None  # every rung of the chain the shares split
    history_url: str | None = None  # this cell across the family's releases


@dataclass
class LadderTable:
    cluster: str
    workload: str
    metric: str
    label: str
    unit: str
    baseline: str | None
    total: float | None
    total_low: float | None
    total_high: float | None
    rows: list[LadderRow]
    reasons: str
    waterfall_html: str | None = None
    # False for a factorial release: steps and shares are not shown (see FactorialTable).
    ladder: bool = True
    total_runs_url: str | None = None  # the baseline and the last rung with values


@dataclass
class FactorialRow:
    name: str  # a factor, or two joined by a multiplication sign
    kind: str  # main effect | interaction
    factor: float
    low: float | None
    high: float | None
    p_value: float | None
    significant: bool | None
    method: str


@dataclass
class FactorialTable:
    cluster: str
    workload: str
    metric: str
    label: str
    unit: str
    design: str
    background: tuple[str, ...]
    n_values: int
    rows: list[FactorialRow]
    reasons: str
    # Every effect is a contrast over all cells of the design: one run list backs them all.
    runs_url: str | None = None


@dataclass
class ClusterSection:
    cluster: str
    accelerator: str
    device_model: str | None
    charts: list[Chart] = field(default_factory=list)
    tables: list[LadderTable] = field(default_factory=list)
    memory_tables: list[LadderTable] = field(default_factory=list)
    factorial_charts: list[Chart] = field(default_factory=list)
    factorial_tables: list[FactorialTable] = field(default_factory=list)


@dataclass
class HistoryView:
    """The history chart of one cell and metric across the family (``?history_cluster=...``)."""

    cluster: str
    workload: str
    variant: str
    metric: str
    chart: Chart
    api_url: str
    # (release, n, verdict, run list) per release: the chart's points as links to their runs.
    points: list[tuple[str, int, str | None, str | None]]


@dataclass
class ReleasePage:
    comparison: ReleaseComparison
    filters: Filters
    options: dict[str, list[str]]
    sections: list[ClusterSection]
    deltas: list[DeltaRow]  # with a verdict or suspect
    unchanged: list[DeltaRow]  # folded away on the page
    delta_labels: tuple[str, str]
    manifest: list[ManifestRow]
    downloads: list[tuple[str, str, str]]  # (format, label, url)
    has_data: bool
    advisor: AdvisorView | None = None  # the checkpointing advisor's section
    history: HistoryView | None = None
    images: dict[str, Any] | None = None  # the images the runs ran in, what they hold vs the manifest

    @property
    def chart_count(self) -> int:
        n = sum(len(s.charts) + sum(1 for t in s.tables if t.waterfall_html) for s in self.sections)
        return n + (self.advisor.chart_count if self.advisor else 0) + (1 if self.history else 0)


def options_from(settings: Settings) -> ComparisonOptions:
    return ComparisonOptions.from_settings(settings)


def report_url(ref: str, fmt: str) -> str:
    return f"/api/v1/releases/{quote(ref, safe=':/')}/report?format={fmt}"


def _row(ladder: LadderAnalysis, v: VariantResult, where: _Where | None) -> LadderRow:
    s = v.summary
    vs = v.vs_baseline
    step = v.step
    speedup, speedup_low, speedup_high = speedup_of(ladder, v)
    return LadderRow(
        variant=v.variant,
        n=s.n,
        median=s.median,
        ci_low=s.ci_low,
        ci_high=s.ci_high,
        cv=s.cv,
        noisy=s.shown_noisy,
        noisy_reasons=", ".join(s.reasons),
        speedup=speedup,
        speedup_low=speedup_low,
        speedup_high=speedup_high,
        p_value=vs.p_value if vs else None,
        q_value=vs.q_value if vs else None,
        significant=vs.significant if vs and vs.testable else None,
        step=step.ratio if step else None,
        step_low=step.ci_low if step else None,
        step_high=step.ci_high if step else None,
        step_reference=v.previous_variant if step else None,
        skipped=v.skipped,
        share=v.share,
        share_low=v.share_ci_low,
        share_high=v.share_ci_high,
        reasons="; ".join([*v.reasons, *(vs.reasons if vs else ())]),
        **(_row_links(ladder, v, where) if where else {}),
    )


@dataclass(frozen=True)
class _Where:
    """The release and cell a ladder table belongs to: what its links filter on."""

    release: str
    cluster: str
    workload: str

    def runs(self, variants: str | list[str]) -> str | None:
        return links.cell_runs_url([links.Scope(release=self.release)], self.cluster, self.workload, variants)


def _row_links(ladder: LadderAnalysis, v: VariantResult, where: _Where) -> dict[str, str | None]:
    with_values = [x.variant for x in ladder.variants if x.summary.n]
    base = ladder.baseline
    return {
        "runs_url": where.runs(v.variant) if v.summary.n else None,
        "speedup_runs_url": where.runs([base, v.variant]) if base and v.vs_baseline else None,
        "step_runs_url": where.runs([v.previous_variant, v.variant])
        if v.step and v.previous_variant
        else None,
        "share_runs_url": where.runs(with_values) if v.share is not None else None,
        "history_url": links.history_url(
            where.release, where.cluster, where.workload, v.variant, ladder.metric
        ),
    }


def factorial_table(
    comp: ReleaseComparison, cluster: str, workload: str, fa: FactorialAnalysis
) -> FactorialTable:
    mdef = describe_metric(fa.metric, fa.unit)
    design = comp.factorial_design
    rows = [
        FactorialRow(
            name=e.factors[0] if len(e.factors) == 1 else " \u00d7 ".join(e.factors),
            kind="main effect" if len(e.factors) == 1 else "interaction",
            factor=e.factor,
            low=e.ci_low,
            high=e.ci_high,
            p_value=e.p_value,
            significant=None if e.p_value is None else e.p_value < comp.method.alpha,
            method=e.method,
        )
        for e in (*fa.main_effects, *fa.interactions)
    ]
    return FactorialTable(
        cluster=cluster,
        workload=workload,
        metric=fa.metric,
        label=mdef.label,
        unit=mdef.unit,
        design=design.label if design else comp.factorial_note,
        background=design.background if design else (),
        n_values=fa.n_values,
        rows=rows,
        reasons="; ".join(fa.reasons),
        runs_url=_Where(comp.release.ref, cluster, workload).runs([v for v, _ in design.cells])
        if design and fa.n_values
        else None,
    )


def ladder_table(
    cluster: str, workload: str, ladder: LadderAnalysis, release: str | None = None
) -> LadderTable:
    """The table of one ladder; with ``release``, every number links to the runs behind it."""
    mdef = describe_metric(ladder.metric, ladder.unit)
    total = ladder.total
    where = _Where(release, cluster, workload) if release else None
    last = next((v.variant for v in reversed(ladder.variants) if v.summary.n), None)
    return LadderTable(
        cluster=cluster,
        workload=workload,
        metric=ladder.metric,
        label=mdef.label,
        unit=mdef.unit,
        baseline=ladder.baseline,
        total=total.ratio if total else None,
        total_low=total.ci_low if total else None,
        total_high=total.ci_high if total else None,
        rows=[_row(ladder, v, where) for v in ladder.variants],
        reasons="; ".join(ladder.reasons),
        total_runs_url=where.runs([ladder.baseline, last])
        if where and total and ladder.baseline and last
        else None,
    )


def slug(*parts: str) -> str:
    # Plotly div ids must be stable and valid: letters, digits, dashes.
    cleaned = "-".join("".join(ch if ch.isalnum() else "-" for ch in p) for p in parts)
    return "chart-" + "-".join(filter(None, cleaned.split("-")))


def _section(
    comp: ReleaseComparison, cluster: Any, workloads: list[str] | None, colors: dict[str, str]
) -> ClusterSection:
    section = ClusterSection(cluster.name, cluster.accelerator, cluster.device_model)
    ref = comp.release.ref
    shown = comp.cluster_ladders(cluster.name, workloads)
    tables: dict[str, LadderTable] = {}
    for workload, ladder in (shown.primary or {}).items():
        table = tables[workload] = ladder_table(cluster.name, workload, ladder, ref)
        table.ladder = shown.waterfalls  # else the factorial section says what each factor is worth
        section.tables.append(table)
    for workload, ladder in (shown.memory or {}).items():
        table = ladder_table(cluster.name, workload, ladder, ref)
        table.ladder = shown.waterfalls
        section.memory_tables.append(table)
    for planned in cluster_chart_plan(comp, cluster.name, colors, workloads):
        if planned.kind in ("ablation", "memory"):
            div = slug(planned.kind, cluster.name)
            section.charts.append(charts.embed(planned.draw(), div, planned.kind))
        elif planned.kind == "factorial":
            div = slug("factorial", cluster.name)
            section.factorial_charts.append(charts.embed(planned.draw(), div, "factorial"))
        elif planned.kind == "waterfall" and planned.workload is not None:
            div = slug("waterfall", cluster.name, planned.workload)
            tables[planned.workload].waterfall_html = charts.embed(planned.draw(), div, "waterfall").html
    if shown.effects:
        section.factorial_tables += [
            factorial_table(comp, cluster.name, w, fa) for w, fa in shown.effects.items()
        ]
    return section


def history_key(params: Mapping[str, str]) -> history_service.CellKey | None:
    """The cell and metric of ``?history_cluster=...&history_workload=...`` (all four, or none)."""
    values = [(params.get(k) or "").strip() for k in links.HISTORY_KEYS]
    if not any(values):
        return None
    missing = [k for k, v in zip(links.HISTORY_KEYS, values, strict=True) if not v]
    if missing:
        raise ValidationProblem.at(missing[0], "a history names a cluster, workload, variant and metric")
    if any(len(v) > 265 for v in values):
        raise ValidationProblem.at("history", "a name is at most 265 characters")
    return history_service.CellKey(*values)


def history_view(
    session: Session, comp: ReleaseComparison, key: history_service.CellKey, opts: ComparisonOptions
) -> HistoryView:
    result = history_service.cell_history(
        session, comp.release.image, key, opts, built={comp.release.ref: comp}
    )
    fig = charts.history_chart(
        result.history,
        variant=key.variant,
        metric=key.metric,
        unit=result.unit,
        cluster=key.cluster,
        workload=key.workload,
    )
    return HistoryView(
        cluster=key.cluster,
        workload=key.workload,
        variant=key.variant,
        metric=key.metric,
        chart=charts.embed(fig, "chart-history", "history"),
        api_url=links.history_api_url(comp.release.image, key.cluster, key.workload, key.variant, key.metric),
        points=[
            (
                e.release,
                e.n,
                e.verdict,
                links.cell_runs_url([links.Scope(release=e.release)], key.cluster, key.workload, key.variant)
                if e.n
                else None,
            )
            for e in result.history.entries
        ],
    )


def release_page(
    session: Session,
    ref: str,
    filters: Filters,
    settings: Settings,
    params: Mapping[str, str] | None = None,
) -> ReleasePage:
    """The release page; ``params`` (the query) may name a cell whose history the page shows."""
    key = history_key(params or {})
    opts = options_from(settings)
    comp = comparison_service.build_release_comparison(session, ref, options=opts)
    cluster_names = [c.name for c in comp.clusters]
    workload_names = [w.name for w in comp.workloads]
    clusters = [c for c in comp.clusters if not filters.cluster or c.name == filters.cluster]
    workloads = [filters.workload] if filters.workload else None
    colors = charts.variant_colors(v.name for v in comp.variants)
    sections = [_section(comp, c, workloads, colors) for c in clusters]
    sides = (
        Sides(links.Scope(release=comp.baseline.ref), links.Scope(release=comp.release.ref))
        if comp.baseline
        else None
    )
    shown, unchanged = split_deltas(
        delta_rows(
            (
                d
                for d in comp.deltas
                if (not filters.cluster or d.cluster == filters.cluster)
                and (not filters.workload or d.workload == filters.workload)
            ),
            sides,
        )
    )
    return ReleasePage(
        comparison=comp,
        filters=filters,
        options={"clusters": cluster_names, "workloads": workload_names},
        sections=sections,
        deltas=shown,
        unchanged=unchanged,
        delta_labels=short_labels(comp.baseline.ref, comp.release.ref) if comp.baseline else ("", ""),
        manifest=manifest_rows(comp.manifest_diff, comp.release.manifest),
        downloads=[(fmt, label, report_url(comp.release.ref, fmt)) for fmt, label in REPORT_FORMATS],
        has_data=any(c.succeeded for c in comp.cells),
        advisor=advisor_view(session, comp.release.ref, filters),
        history=history_view(session, comp, key, opts) if key else None,
        images=images_service.release_images(session, comp.release.ref),
    )
