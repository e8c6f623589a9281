"""History: one cluster x workload x variant x metric across the releases of an image family.

Per release, in family order (:func:`~ablate.backend.services.comparison.order_family`): the cell's
n, median and interval (:func:`ablate.backend.analysis.history.release_history`), and the verdict of
that release against its previous one, taken from that release's own comparison
(:func:`~ablate.backend.services.comparison.build_release_comparison` with the same options), so it
is exactly the verdict the release page shows. That costs one comparison build per release with
data; several cells share the builds (:func:`family_histories`), and a build the caller already
has is reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ablate.backend.analysis.history import History, HistoryInput, release_history
from ablate.backend.db.models import Cluster, Release, Variant, Workload
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.services.comparison import (
    ComparisonOptions,
    ReleaseComparison,
    order_family,
)
from ablate.backend.services.comparison.build import ReleaseVerdicts, release_verdicts
from ablate.backend.services.comparison.loading import (
    load_catalog,
    load_rows,
    metric_units,
    values_by_release,
)
from ablate.backend.services.errors import NotFound
from ablate.backend.services.runs import check_metric_names


@dataclass(frozen=True)
class CellKey:
    cluster: str
    workload: str
    variant: str
    metric: str


@dataclass(frozen=True)
class CellHistory:
    image: str
    key: CellKey
    unit: str
    history: History


def _check_names(session: Session, image: str, key: CellKey) -> None:
    """404 at the first parameter that names nothing; 422 for an unknown metric."""
    if session.scalar(select(Release.id).where(Release.image == image).limit(1)) is None:
        raise NotFound.at("image", f"no release of image {image!r}")
    for loc, model, name in (
        ("cluster", Cluster, key.cluster),
        ("workload", Workload, key.workload),
        ("variant", Variant, key.variant),
    ):
        if session.scalar(select(model.id).where(model.name == name)) is None:
            raise NotFound.at(loc, f"no {loc} is named {name!r}")
    check_metric_names(session, [key.metric])


def cell_history(
    session: Session,
    image: str,
    key: CellKey,
    options: ComparisonOptions | None = None,
    *,
    built: Mapping[str, ReleaseComparison] | None = None,
) -> CellHistory:
    """The history of one cell and metric; unknown names are refused, naming which."""
    _check_names(session, image, key)
    return family_histories(session, image, [key], options, built=built)[0]


def family_histories(
    session: Session,
    image: str,
    keys: Sequence[CellKey],
    options: ComparisonOptions | None = None,
    *,
    built: Mapping[str, ReleaseComparison] | None = None,
) -> list[CellHistory]:
    """The history of each key (same order) over the family of ``image``.

    ``built`` maps release refs to comparisons already built with ``options`` (e.g. the report's
    own release), so they are not built again.
    """
    opts = options or ComparisonOptions()
    family = order_family(session.scalars(select(Release).where(Release.image == image)))
    # Only the keys' cells: a family of dozens of releases of thousands of cells holds millions of rows.
    cells = {(k.cluster, k.workload, k.variant) for k in keys}
    rows = load_rows(session, release_ids=[r.id for r in family], cells=cells) if family else None
    values = values_by_release(rows, load_catalog(session, rows, family)) if rows else {}
    units = metric_units(rows) if rows else {}

    def cell_values(release: Release, key: CellKey) -> list[float]:
        by_metric = values.get(release.id, {}).get((key.cluster, key.workload, key.variant), {})
        return sorted(by_metric.get(key.metric, ()))

    # Each release's verdicts (kept apart from full comparisons: see release_verdicts).
    verdicts: dict[str, ReleaseVerdicts] = {ref: ReleaseVerdicts.of(c) for ref, c in (built or {}).items()}
    for index, release in enumerate(family):
        # A verdict needs values in this release; the first release has no previous one.
        if index and release.ref not in verdicts and any(cell_values(release, k) for k in keys):
            verdicts[release.ref] = release_verdicts(session, release.ref, options=opts)

    out = []
    for key in keys:
        inputs = []
        for release in family:
            got = verdicts.get(release.ref)
            cell = got.cells.get((key.cluster, key.workload, key.variant, key.metric)) if got else None
            inputs.append(
                HistoryInput(
                    release=release.ref,
                    values=cell_values(release, key),
                    verdict=cell[0] if cell else None,
                    indicated=cell[1] if cell else None,
                    change_pct=cell[2] if cell else None,
                    against=got.baseline if got is not None else None,
                )
            )
        history = release_history(
            inputs, confidence=opts.confidence, noisy_cv=opts.noisy_cv, min_n=opts.min_n
        )
        unit = units.get(key.metric) or describe_metric(key.metric).unit
        out.append(CellHistory(image, key, unit, history))
    return out


# The report's history section: at most this many cells, so a release of hundreds of cells keeps a
# report of a few megabytes (each chart is a few kB of JSON, and each release costs one build).
MAX_REPORT_HISTORIES = 12
# Which cells come first: those a reader must look at, then the rest in the release's order.
_ATTENTION = {"regressed": 0, "suspect": 1, "improved": 2, "not testable": 3, "unchanged": 4}


@dataclass(frozen=True)
class ReleaseHistories:
    """The histories of a release's cells that its report shows, and how many it leaves out."""

    items: tuple[CellHistory, ...]
    total: int  # cells of the release with values of the metric
    limit: int

    @property
    def omitted(self) -> int:
        return self.total - len(self.items)


def release_histories(
    session: Session,
    comp: ReleaseComparison,
    options: ComparisonOptions | None = None,
    *,
    limit: int = MAX_REPORT_HISTORIES,
) -> ReleaseHistories | None:
    """The primary metric's history for at most ``limit`` cells of the release: regressions first,
    then suspects, improvements, untestable and unchanged cells. None when the release has no
    primary metric or is the only release of its image (a history of one point says nothing)."""
    metric = comp.primary_metric
    image = comp.release.image
    family_size = session.scalar(select(func.count()).select_from(Release).where(Release.image == image))
    if metric is None or (family_size or 0) < 2:
        return None
    deltas = [d for d in comp.deltas if d.metric == metric and d.status != "no data in this release"]
    ranked = sorted(enumerate(deltas), key=lambda p: (_ATTENTION.get(p[1].summary_verdict, 5), p[0]))
    keys = [CellKey(d.cluster, d.workload, d.variant, metric) for _, d in ranked[:limit]]
    # A comparison against an explicitly chosen baseline is not the release's verdict on its own page.
    built = {comp.release.ref: comp} if comp.baseline_source != "explicit" else {}
    items = family_histories(session, image, keys, options, built=built)
    return ReleaseHistories(tuple(items), len(deltas), limit)
