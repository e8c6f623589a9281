"""Two arbitrary sets of runs (releases, studies or run ids), compared cell against cell."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.analysis.regression import ReleasePair
from ablate.backend.db.models import Release, Run, RunStatus, Study
from ablate.backend.domain.metrics import describe_metric
from ablate.backend.schemas.common import ID_RULE, parse_db_id
from ablate.backend.services import catalog
from ablate.backend.services.comparison.family import manifest_diff
from ablate.backend.services.comparison.loading import (
    Catalog,
    Cell,
    Rows,
    load_catalog,
    load_rows,
    metric_units,
    pick_metrics,
)
from ablate.backend.services.comparison.model import ComparisonOptions, ReleaseDelta, RunSet, RunSetComparison
from ablate.backend.services.errors import NotFound, ValidationProblem


def parse_run_ids(text: str, loc: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; refuses anything but row ids in ASCII digits (:func:`parse_db_id`)."""
    ids: list[int] = []
    for part in (p for p in text.split(",") if p.strip()):
        run_id = parse_db_id(part)
        if run_id is None:
            msg = f"expected comma-separated run ids: {part.strip()[:20]!r} is not {ID_RULE}"
            raise ValidationProblem.at(loc, msg)
        ids.append(run_id)
    if not ids:
        raise ValidationProblem.at(loc, f"expected comma-separated run ids, got {text!r}")
    if len(ids) > 10_000:
        raise ValidationProblem.at(loc, "at most 10000 run ids")
    return sorted(set(ids))


def release_run_ids(session: Session, ref: str, loc: str) -> list[int]:
    release = catalog.get_release(session, ref, loc)
    return list(session.scalars(select(Run.id).where(Run.release_id == release.id).order_by(Run.id)))


def study_run_ids(session: Session, study_id: int, loc: str) -> list[int]:
    if session.get(Study, study_id) is None:
        raise NotFound.at(loc, f"study {study_id} does not exist")
    return list(session.scalars(select(Run.id).where(Run.study_id == study_id).order_by(Run.id)))


def compare_run_sets(
    session: Session,
    baseline_ids: Sequence[int],
    contender_ids: Sequence[int],
    *,
    baseline_label: str = "baseline",
    contender_label: str = "contender",
    options: ComparisonOptions | None = None,
) -> RunSetComparison:
    """Compare two sets of runs cell by cell (cluster, workload, variant).

    When each set holds exactly one cell they are compared with each other whatever their names
    (e.g. three runs of one variant against three of another). Otherwise cells are paired by
    equal (cluster, workload, variant); unpaired cells are listed in ``missing``. Unknown run ids
    are a 404; runs that did not succeed are left out of the statistics and listed.
    """
    opts = options or ComparisonOptions()
    ids = sorted(set(baseline_ids) | set(contender_ids))
    rows = load_rows(session, run_ids=ids)
    unknown = sorted(set(ids) - set(rows.runs))
    if unknown:
        raise NotFound.at("runs", f"run(s) {', '.join(map(str, unknown[:20]))} do not exist")
    release_ids = sorted({r.release_id for r in rows.runs.values()})
    releases = list(session.scalars(select(Release).where(Release.id.in_(release_ids))))
    loaded = _Loaded(rows, load_catalog(session, rows, releases), [])
    base_set, base_cells = _side(loaded, baseline_ids, "baseline")
    cont_set, cont_cells = _side(loaded, contender_ids, "contender")
    base_set = dataclasses.replace(base_set, label=baseline_label)
    cont_set = dataclasses.replace(cont_set, label=contender_label)
    present = {m for c in cont_cells.values() for m in c} & {m for c in base_cells.values() for m in c}
    metrics = pick_metrics(present, opts.metrics)
    pairs = _pairs(base_cells, cont_cells, loaded.missing)
    deltas = _deltas(loaded, pairs, (base_cells, cont_cells), metrics, opts)
    diff = None
    if len(base_set.releases) == 1 and len(cont_set.releases) == 1 and base_set.releases != cont_set.releases:
        by_ref = {r.ref: r for r in releases}
        diff = manifest_diff(by_ref[base_set.releases[0]], by_ref[cont_set.releases[0]])
    return RunSetComparison(
        baseline=base_set,
        contender=cont_set,
        method=opts.method_info(),
        metrics=metrics,
        deltas=deltas,
        manifest_diff=diff,
        missing=tuple(loaded.missing),
    )


@dataclass(frozen=True)
class _Loaded:
    """The runs of both sets, their catalog, and the notes on what is left out (filled as it goes)."""

    rows: Rows
    cat: Catalog
    missing: list[str]


CellValues = dict[Cell, dict[str, list[float]]]


def _side(loaded: _Loaded, run_ids: Sequence[int], label: str) -> tuple[RunSet, CellValues]:
    rows, cat = loaded.rows, loaded.cat
    cells: CellValues = defaultdict(lambda: defaultdict(list))
    for rid in sorted(set(run_ids)):
        _rel, cl, wl, var, _rep, status, _kind, _study, _busy = rows.runs[rid]
        cell = (cat.clusters[cl].name, cat.workloads[wl].name, cat.variants[var].name)
        if status != RunStatus.succeeded:
            loaded.missing.append(f"{label}: run {rid} ({'/'.join(cell)}) is {status}: left out")
            continue
        for name, (value, _u) in rows.metrics.get(rid, {}).items():
            cells[cell][name].append(value)
    refs = sorted({cat.releases[rows.runs[r].release_id].ref for r in run_ids})
    return RunSet(label, tuple(sorted(set(run_ids))), tuple(refs)), cells


def _pairs(base_cells: CellValues, cont_cells: CellValues, missing: list[str]) -> list[tuple[Cell, Cell]]:
    """(baseline cell, contender cell) to compare: the only cell of each, else cells of equal names."""
    if len(base_cells) == 1 and len(cont_cells) == 1:
        return [(next(iter(base_cells)), next(iter(cont_cells)))]
    pairs = [(c, c) for c in sorted(set(base_cells) & set(cont_cells))]
    for c in sorted(set(base_cells) - set(cont_cells)):
        missing.append(f"baseline cell {'/'.join(c)} has no counterpart in the contender set")
    for c in sorted(set(cont_cells) - set(base_cells)):
        missing.append(f"contender cell {'/'.join(c)} has no counterpart in the baseline set")
    if not pairs:
        missing.append("no cells to compare")
    return pairs


def _deltas(
    loaded: _Loaded,
    pairs: Sequence[tuple[Cell, Cell]],
    sides: tuple[CellValues, CellValues],  # baseline, contender
    metrics: Sequence[str],
    opts: ComparisonOptions,
) -> tuple[ReleaseDelta, ...]:
    """Every pair and metric, the compared ones tested as one batch (one Benjamini-Hochberg family)."""
    base_cells, cont_cells = sides
    units, directions = metric_units(loaded.rows), loaded.rows.directions
    delta_rows: list[tuple[tuple[str, ...], str, str, str, int | None]] = []
    checks: list[ReleasePair] = []
    for b_cell, c_cell in pairs:
        label = (
            c_cell
            if b_cell == c_cell
            else tuple(x if x == y else f"{y} vs {x}" for x, y in zip(b_cell, c_cell, strict=True))
        )
        for metric in metrics:
            unit = units.get(metric) or describe_metric(metric).unit
            old = tuple(sorted(base_cells[b_cell].get(metric, ())))
            new = tuple(sorted(cont_cells[c_cell].get(metric, ())))
            if old and new:
                delta_rows.append((label, metric, unit, "compared", len(checks)))
                checks.append(ReleasePair(old, new, metric, unit, directions.get(metric)))
            else:
                status = "no baseline data" if new else "no data in this release"
                delta_rows.append((label, metric, unit, status, None))
    results = opts.compare(checks)
    return tuple(
        ReleaseDelta(
            cluster, workload, variant, metric, unit, status, None if i is None else results[i], None, ()
        )
        for (cluster, workload, variant), metric, unit, status, i in delta_rows
    )
