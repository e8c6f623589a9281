"""The compare page: two releases side by side, or a baseline set of runs against a contender set.

Two releases: the contender's comparison against the chosen baseline release gives the verdicts
and the manifest diff; each release's own ladder gives the side-by-side ablation charts.
Two run sets (run ids or whole studies, or a release against a run set): cells are compared with
the same statistics. What a side is, its label and its errors come from
:mod:`ablate.backend.services.compare_sides`, as for ``GET /api/v1/compare``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend import charts
from ablate.backend.charts import Chart
from ablate.backend.config import Settings
from ablate.backend.dashboard import links
from ablate.backend.dashboard.filters import Filters
from ablate.backend.dashboard.views.deltas import DeltaRow, Sides, delta_rows, short_labels, split_deltas
from ablate.backend.dashboard.views.home import families, filter_options
from ablate.backend.dashboard.views.manifest import ManifestRow, manifest_rows
from ablate.backend.dashboard.views.release import options_from, slug
from ablate.backend.services import comparison as comparison_service
from ablate.backend.services.compare_sides import (
    PAGE_FIELDS,
    CompareSide,
    ReleaseSide,
    StudySide,
    any_given,
    compare_sides,
    parse_sides,
)
from ablate.backend.services.comparison import ReleaseComparison, RunSetComparison


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
    deltas: list[DeltaRow] = field(default_factory=list)  # with a verdict or suspect
    unchanged: list[DeltaRow] = field(default_factory=list)
    column_labels: tuple[str, str] = ("", "")
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


def _top(fig: Any) -> float:
    """Highest bar plus its error bar, or highest run point: both sides get the same y axis."""
    top = 0.0
    for trace in fig.data:
        plus = list(trace.error_y.array or ()) if trace.error_y is not None else []
        for i, y in enumerate(trace.y or ()):
            if y is not None:
                err = plus[i] if i < len(plus) and plus[i] is not None else 0.0
                top = max(top, float(y) + float(err))
    return top


def _ablation_figure(comp: ReleaseComparison, cluster: str, filters: Filters) -> Any | None:
    if not comp.primary_metric:
        return None
    ladders = comp.ladder_map(cluster, comp.primary_metric)
    if filters.workload:
        ladders = {w: lad for w, lad in ladders.items() if w == filters.workload}
    if not ladders:
        return None
    colors = charts.variant_colors(v.name for v in comp.variants)
    repeats = comp.repeat_map(cluster, comp.primary_metric)
    return charts.ablation_bars(
        ladders, release=comp.release.ref, cluster=cluster, colors=colors, repeats=repeats
    )


def _side_by_side(
    baseline: ReleaseComparison, contender: ReleaseComparison, cluster: str, filters: Filters
) -> SideBySide:
    figs = [_ablation_figure(baseline, cluster, filters), _ablation_figure(contender, cluster, filters)]
    top = max((_top(f) for f in figs if f is not None), default=0.0)
    out: list[Chart | None] = []
    for side, fig in zip(("a", "b"), figs, strict=True):
        if fig is None:
            out.append(None)
            continue
        if top > 0:  # a little room above the tallest whisker or point
            fig.update_yaxes(range=[0, top * 1.12])
        out.append(charts.embed(fig, slug("compare", side, cluster), "ablation"))
    return SideBySide(cluster, out[0], out[1])


def _releases(
    session: Session, page: ComparePage, settings: Settings, sides: tuple[ReleaseSide, ReleaseSide]
) -> None:
    opts = options_from(settings)
    contender = compare_sides(session, *sides, options=opts)
    assert isinstance(contender, ReleaseComparison)
    baseline = comparison_service.build_release_comparison(session, sides[0].ref, options=opts)
    page.mode = "releases"
    page.a, page.b = sides[0].ref, sides[1].ref
    page.baseline_label, page.contender_label = sides[0].label, sides[1].label
    page.column_labels = short_labels(page.a, page.b)
    rows = delta_rows(contender.deltas, Sides(_scope(sides[0]), _scope(sides[1])))
    page.deltas, page.unchanged = split_deltas(_filtered(rows, page.filters))
    page.manifest = manifest_rows(contender.manifest_diff)
    page.missing = contender.missing
    page.threshold_pct, page.alpha = contender.method.threshold_pct, contender.method.alpha
    clusters = list(
        dict.fromkeys([*(c.name for c in baseline.clusters), *(c.name for c in contender.clusters)])
    )
    for cluster in clusters:
        if page.filters.cluster and cluster != page.filters.cluster:
            continue
        page.charts.append(_side_by_side(baseline, contender, cluster, page.filters))


def _scope(side: CompareSide) -> links.Scope:
    """The runs a side stands for, as the run list filters them."""
    if isinstance(side, ReleaseSide):
        return links.Scope(release=side.ref)
    if isinstance(side, StudySide):
        return links.Scope(study=side.study_id)
    return links.Scope(run_ids=tuple(side.run_ids))


def _side_title(side: CompareSide, releases: tuple[str, ...]) -> str:
    """``3 runs of training-nv-pytorch:25.12``; a release side is its ref alone."""
    if isinstance(side, ReleaseSide) or not releases:
        return side.label
    return f"{side.label} of {', '.join(releases)}"


def _runs(
    session: Session, page: ComparePage, settings: Settings, sides: tuple[CompareSide, CompareSide]
) -> None:
    result = compare_sides(session, *sides, options=options_from(settings))
    assert isinstance(result, RunSetComparison)
    page.mode = "runs"
    base_refs, cont_refs = result.baseline.releases, result.contender.releases
    page.baseline_label = _side_title(sides[0], base_refs)
    page.contender_label = _side_title(sides[1], cont_refs)
    single = len(base_refs) == 1 and len(cont_refs) == 1 and base_refs != cont_refs
    page.column_labels = short_labels(base_refs[0], cont_refs[0]) if single else ("baseline", "contender")
    # Hand-picked run sets are small: every row stays visible, nothing is folded.
    rows = delta_rows(result.deltas, Sides(_scope(sides[0]), _scope(sides[1])))
    page.deltas = _filtered(rows, page.filters)
    page.manifest = manifest_rows(result.manifest_diff) if result.manifest_diff else []
    page.missing = result.missing
    page.threshold_pct, page.alpha = result.method.threshold_pct, result.method.alpha
    page.a = ", ".join(result.baseline.releases)
    page.b = ", ".join(result.contender.releases)


@dataclass(frozen=True)
class CompareQuery:
    """The compare form's values, stripped: each side a release (``a``/``b``), run ids or a study
    id; empty is not given."""

    a: str = ""
    b: str = ""
    baseline_runs: str = ""
    contender_runs: str = ""
    baseline_study: str = ""
    contender_study: str = ""

    def given(self) -> bool:
        """Whether the query says anything about any side (the page shows only its form if not)."""
        return any_given(
            self.a, self.b, self.baseline_runs, self.contender_runs, self.baseline_study, self.contender_study
        )

    def sides(self) -> tuple[CompareSide, CompareSide]:
        """Both sides, parsed; a side not given exactly one way is refused (422 at its role)."""
        return parse_sides(PAGE_FIELDS, asdict(self))


def compare_page(session: Session, filters: Filters, settings: Settings, query: CompareQuery) -> ComparePage:
    fams = families(session, filters.platform)
    choices = [r.ref for releases in fams.values() for r in reversed(releases)]
    page = ComparePage(
        mode="form",
        filters=filters,
        options=filter_options(session),
        release_choices=choices,
        a=query.a or None,
        b=query.b or None,
        baseline_runs=query.baseline_runs,
        contender_runs=query.contender_runs,
    )
    if not query.given():
        return page
    sides = query.sides()
    if isinstance(sides[0], ReleaseSide) and isinstance(sides[1], ReleaseSide):
        _releases(session, page, settings, (sides[0], sides[1]))
    else:
        _runs(session, page, settings, sides)
    return page
