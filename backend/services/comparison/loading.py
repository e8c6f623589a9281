"""Runs, metric values and catalog rows of a comparison, loaded in a fixed number of queries.

Core rows, not ORM entities, for the runs and their metrics: tens of thousands of tuples load several
times faster. Only succeeded runs enter the statistics; the others are kept to be counted and listed.

Runs an admin excluded (``runs.excluded_at``) are loaded here with the status ``excluded``, whatever
they ended as: every analysis reads runs through these queries, so an excluded run leaves all of them
(ladders, factorial effects, deltas, lookbacks, compare, reports, the home card, the advisor) while
still being listed as left out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Text, case, cast, func, literal, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from ablate.backend.db.models import Cluster, Release, Run, RunMetric, RunStatus, Variant, Workload
from ablate.backend.services.comparison.model import DEFAULT_LADDER, MEMORY_METRICS, PRIMARY_METRICS
from ablate.backend.services.images import digest_of

Cell = tuple[str, str, str]  # cluster, workload, variant names

EXCLUDED = "excluded"  # the status an excluded run has in every analysis
# The run's status as analyses see it, and the condition for a run to be analysed at all.
ANALYSED_STATUS = case((Run.excluded_at.is_not(None), literal(EXCLUDED)), else_=Run.status)
NOT_EXCLUDED = Run.excluded_at.is_(None)
# Why a run is not analysed: the exclusion's reason, else the run's own error.
ANALYSED_ERROR = case((Run.excluded_at.is_not(None), Run.exclusion_reason), else_=Run.error)


class RunRow(NamedTuple):
    """One run as the joined query loads it (ids, not catalog names)."""

    release_id: int
    cluster_id: int
    workload_id: int
    variant_id: int
    repeat: int
    status: str
    failure_kind: str | None
    study_id: int | None = None
    busy: bool = False  # its runner marked it measured on a busy host (provenance host_busy)


@dataclass
class Rows:
    """Runs and metric values of several releases, as loaded by one joined query."""

    runs: dict[int, RunRow] = field(default_factory=dict)  # run id -> its row
    # run id -> metric -> (value, unit)
    metrics: dict[int, dict[str, tuple[float, str]]] = field(default_factory=lambda: defaultdict(dict))
    # custom metric -> the direction ingest stored with it ("higher" / "lower")
    directions: dict[str, str] = field(default_factory=dict)


def load_rows(
    session: Session,
    release_ids: Sequence[int] = (),
    run_ids: Sequence[int] = (),
    *,
    cells: Collection[Cell] | None = None,
) -> Rows:
    """The runs of ``release_ids`` (else the runs ``run_ids``) and their metrics; with ``cells``, only
    runs whose cluster, workload and variant are among the cells' names (a superset of the cells
    when there are several: the caller picks its cells by name).

    Two narrow queries rather than one join: a run's columns once (not once per metric) and each
    metric's four, both in run id order, so the values of a cell come in the order the runs were
    recorded whatever the tables' physical order."""
    which = [Run.release_id.in_(list(release_ids))] if release_ids else [Run.id.in_(list(run_ids))]
    if cells is not None:
        # Ids by subquery: the index on (release, cluster, workload, variant) then reads only these cells.
        for column, model, names in (
            (Run.cluster_id, Cluster, {c[0] for c in cells}),
            (Run.workload_id, Workload, {c[1] for c in cells}),
            (Run.variant_id, Variant, {c[2] for c in cells}),
        ):
            which.append(column.in_(select(model.id).where(model.name.in_(sorted(names)))))
    runs = select(
        Run.id,
        Run.release_id,
        Run.cluster_id,
        Run.workload_id,
        Run.variant_id,
        Run.repeat,
        ANALYSED_STATUS,
        Run.failure_kind,
        Run.study_id,
        Run.provenance["host_busy"].as_string(),  # in the same query: no statement of its own
    ).where(*which)
    metrics = (
        select(RunMetric.run_id, RunMetric.name, RunMetric.value, RunMetric.unit, RunMetric.better)
        .where(RunMetric.run_id.in_(select(Run.id).where(*which)))
        .order_by(RunMetric.run_id, RunMetric.name)  # the (run, name) unique index's order
    )
    rows = Rows()
    # Core rows, not ORM entities: tens of thousands of tuples load several times faster.
    connection = session.connection()
    by_id = rows.runs
    for rid, rel, cl, wl, var, rep, status, kind, study, busy in connection.execute(runs.order_by(Run.id)):
        by_id[rid] = RunRow(rel, cl, wl, var, rep, status, kind, study, busy == "true")
    values = rows.metrics
    directions = rows.directions
    for rid, name, value, unit, better in connection.execute(metrics).all():
        if rid not in by_id:  # a run recorded between the two statements
            continue
        values[rid][name] = (float(value), unit)
        if better is not None and name not in directions:
            directions[name] = better
    return rows


class EnvRow(NamedTuple):
    """A run of the release as its environment notes read it (the JSON columns decoded)."""

    run_id: int
    variant_id: int
    status: str
    environment: dict[str, Any] | None
    provenance: dict[str, Any] | None
    error: str | None


def load_env_rows(session: Session, release_id: int) -> list[EnvRow]:
    """Every run of the release with its environment and provenance, each distinct JSON text decoded
    once: a release's thousands of runs share a handful of environments (one decode per run was most
    of this query's cost). The dicts are shared between runs: read them, never change them."""
    query = select(
        Run.id,
        Run.variant_id,
        ANALYSED_STATUS,
        cast(Run.environment, Text),
        cast(Run.provenance, Text),
        ANALYSED_ERROR,
    ).where(Run.release_id == release_id)
    decoded: dict[str | None, Any] = {None: None}

    def load(text: str | None) -> Any:
        found = decoded.get(text, decoded)
        if found is decoded:
            found = decoded[text] = json.loads(text)  # type: ignore[arg-type]  # None is in decoded
        return found

    return [
        EnvRow(rid, var, status, load(env), load(prov), err)
        for rid, var, status, env, prov, err in session.connection().execute(query)
    ]


def keep_same_session_baseline(rows: Rows, release_id: int, baseline_id: int) -> Rows | None:
    """When studies of the release re-ran the baseline beside it (a plan's ``baseline:``), keep only
    those baseline runs: they share the day, the nodes and the driver state with the release's own, so
    session noise cancels in the comparison. Returns None when none did (nothing changed), else the
    baseline's other runs, taken out of ``rows``: its own earlier session (:func:`rerun_values`)."""
    studies = {r.study_id for r in rows.runs.values() if r.release_id == release_id}
    studies.discard(None)
    paired = {rid for rid, r in rows.runs.items() if r.release_id == baseline_id and r.study_id in studies}
    if not paired:
        return None
    earlier = Rows(directions=rows.directions)
    for rid in [rid for rid, r in rows.runs.items() if r.release_id == baseline_id and rid not in paired]:
        earlier.runs[rid] = rows.runs.pop(rid)
        if rid in rows.metrics:
            earlier.metrics[rid] = rows.metrics.pop(rid)
    return earlier


def rerun_values(
    session: Session, earlier: Rows, rows: Rows, baseline_id: int, cat: Catalog, skip: Collection[int] = ()
) -> dict[Cell, dict[str, list[float]]]:
    """The baseline's earlier session of each cell that its re-run beside the release repeated with the
    same images: two sessions of one image, whose difference is session noise alone (issue 27's
    "reruns of the same image digest"). A cell is left out where both sessions recorded the images
    they ran in and these differ (the tag moved between them); where either recorded none, the
    release's tag is taken as the same images. ``earlier``: :func:`keep_same_session_baseline`'s runs;
    ``skip``: runs left out (busy hosts). One query, for these runs only."""
    if not earlier.runs:
        return {}
    succeeded = [rid for rid, r in earlier.runs.items() if r.status == RunStatus.succeeded]
    succeeded += [
        rid for rid, r in rows.runs.items() if r.release_id == baseline_id and r.status == RunStatus.succeeded
    ]
    query = select(Run.id, Run.provenance).where(Run.id.in_(succeeded))
    found = session.connection().execute(query).all() if succeeded else []
    images: dict[tuple[bool, Cell | None], set[str]] = defaultdict(set)  # (earlier?, cell) -> digests
    for rid, provenance in found:
        if digest := digest_of(provenance or {}):
            r = earlier.runs.get(rid) or rows.runs[rid]
            images[(rid in earlier.runs, cat.cell(r.cluster_id, r.workload_id, r.variant_id))].add(digest)

    def moved(cell: Cell) -> bool:
        old, new = images[(True, cell)], images[(False, cell)]
        return bool(old and new and old != new)

    values = values_by_release(earlier, cat, skip=skip).get(baseline_id, {})
    return {cell: dict(by_metric) for cell, by_metric in values.items() if not moved(cell)}


@dataclass
class Catalog:
    variants: dict[int, Variant]
    workloads: dict[int, Workload]
    clusters: dict[int, Cluster]
    releases: dict[int, Release]
    # id -> name, looked up once: ORM attribute access per row costs more than the row itself.
    names: tuple[dict[int, str], dict[int, str], dict[int, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.names = (
            {i: c.name for i, c in self.clusters.items()},
            {i: w.name for i, w in self.workloads.items()},
            {i: v.name for i, v in self.variants.items()},
        )

    def cell(self, cluster_id: int, workload_id: int, variant_id: int) -> Cell | None:
        """(cluster, workload, variant) names, or None when one of the ids is not in the catalog."""
        clusters, workloads, variants = self.names
        cl, wl, var = clusters.get(cluster_id), workloads.get(workload_id), variants.get(variant_id)
        return None if cl is None or wl is None or var is None else (cl, wl, var)

    def variant_key(self, variant: Variant) -> tuple[int, int, str]:
        rank = DEFAULT_LADDER.index(variant.name) if variant.name in DEFAULT_LADDER else len(DEFAULT_LADDER)
        return (variant.position, rank, variant.name)


def load_catalog(session: Session, rows: Rows, releases: Iterable[Release]) -> Catalog:
    var_ids = {r.variant_id for r in rows.runs.values()}
    wl_ids = {r.workload_id for r in rows.runs.values()}
    cl_ids = {r.cluster_id for r in rows.runs.values()}
    variants = session.scalars(select(Variant).where(Variant.id.in_(var_ids)))
    return Catalog(
        variants={v.id: v for v in variants},
        workloads={w.id: w for w in session.scalars(select(Workload).where(Workload.id.in_(wl_ids)))},
        clusters={c.id: c for c in session.scalars(select(Cluster).where(Cluster.id.in_(cl_ids)))},
        releases={r.id: r for r in releases},
    )


def pick_metrics(present: Iterable[str], wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    names = sorted(set(present))
    if wanted is not None:
        return tuple(dict.fromkeys(wanted))
    chosen: list[str] = []
    for group in (PRIMARY_METRICS, MEMORY_METRICS):
        first = next((m for m in group if m in names), None)
        if first:
            chosen.append(first)
    return tuple(chosen) if chosen else tuple(names)


# A runner's mark on a run measured while other work loaded its host (workers/runners/hostload.py).
HOST_BUSY = Run.provenance["host_busy"].as_string() == "true"


def busy_runs(rows: Rows) -> set[int]:
    """Succeeded runs among ``rows`` that their runner marked ``host_busy``."""
    return {rid for rid, r in rows.runs.items() if r.busy and r.status == RunStatus.succeeded}


def values_by_release(
    rows: Rows, cat: Catalog, skip: Collection[int] = ()
) -> dict[int, dict[Cell, dict[str, list[float]]]]:
    """release id -> (cluster, workload, variant) -> metric -> values of the succeeded runs, in one pass
    (``skip``: run ids left out, e.g. runs measured on a busy host)."""
    out: dict[int, dict[Cell, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    named: dict[tuple[int, int, int], Cell | None] = {}  # ids -> names, looked up once per cell
    for rid, (rel, cl, wl, var, _rep, status, _kind, _study, _busy) in rows.runs.items():
        if status != RunStatus.succeeded or rid in skip:
            continue
        ids = (cl, wl, var)
        cell = named[ids] if ids in named else named.setdefault(ids, cat.cell(cl, wl, var))
        if cell is None:  # not seen: the catalog holds every id of these rows (skipped as in history_values)
            continue
        by_metric = out[rel][cell]
        for name, (value, _unit) in rows.metrics.get(rid, {}).items():
            by_metric[name].append(value)
    return out


def metric_units(rows: Rows) -> dict[str, str]:
    units: dict[str, str] = {}
    for rid in sorted(rows.metrics):
        for name, (_v, unit) in rows.metrics[rid].items():
            units.setdefault(name, unit)
    return units


def history_values(
    session: Session,
    release_ids: Sequence[int],
    metrics: Sequence[str],
    cat: Catalog,
    *,
    skip_busy: bool = False,
) -> dict[int, dict[Cell, dict[str, list[float]]]]:
    """Values of the lookback releases: only succeeded runs and the analysed metrics, in one query.

    The lookback needs one median per cell and metric, so the history costs a narrow query rather
    than every run and metric (the bulk of the rows when the lookback is 5 releases).
    Cells whose cluster, workload or variant this release and its baseline do not have are left
    out: no delta reads them.
    """
    out: dict[int, dict[Cell, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    if not release_ids or not metrics:
        return out
    query = (
        select(
            Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id, RunMetric.name, RunMetric.value
        )
        .join(RunMetric, RunMetric.run_id == Run.id)
        .where(
            Run.release_id.in_(list(release_ids)),
            Run.status == RunStatus.succeeded,
            NOT_EXCLUDED,
            RunMetric.name.in_(list(metrics)),
        )
    )
    if skip_busy:
        query = query.where(~HOST_BUSY | Run.provenance["host_busy"].as_string().is_(None))
    groups: dict[tuple[int, int, int, int, str], list[float]] = defaultdict(list)
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        # One row per release, cell and metric, its values in run id order (a fifth of the rows at 5
        # repeats, each value a float as psycopg reads it rather than a row of six columns).
        keys = (Run.release_id, Run.cluster_id, Run.workload_id, Run.variant_id, RunMetric.name)
        in_order = func.array_agg(aggregate_order_by(RunMetric.value, Run.id))
        grouped = query.with_only_columns(*keys, in_order).group_by(*keys)
        for rel, cl, wl, var, name, found in connection.execute(grouped):
            groups[(rel, cl, wl, var, name)] = list(found)
    else:
        # Grouped by ids first (a tuple key per row), in run id order as PostgreSQL's groups are.
        for rel, cl, wl, var, name, value in connection.execute(query.order_by(Run.id)).all():
            groups[(rel, cl, wl, var, name)].append(float(value))
    # Named once per release, cell and metric.
    for (rel, cl, wl, var, name), values in groups.items():
        cell = cat.cell(cl, wl, var)
        if cell is not None:
            out[rel][cell][name].extend(values)
    return out
