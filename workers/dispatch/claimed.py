"""Claimed runs (:class:`Claimed`, what :mod:`.claims` returns) and what their specs are built from.

A claim's ``UPDATE ... RETURNING`` gives each run's :class:`RunNames` (the catalog rows it names, its
study and the study's status); :func:`load_claimed` reads those catalog rows in one query and turns
them into the plain values the spec builder takes (:class:`~.spec.RunRows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from ablate.backend.db.base import among_ids
from ablate.backend.db.models import Cluster, Release, Run, StudyStatus, Variant, Workload
from ablate.backend.domain.placement import excluded_nodes
from ablate.workers.dispatch.spec import RunRows


@dataclass(frozen=True)
class Claimed:
    run_id: int
    attempt: int
    queue_order: int
    # the devices taken for it: per node rank, (Ray node id, device indices); empty for a CPU run
    devices: tuple[tuple[str, tuple[int, ...]], ...] = ()
    fail: str = ""  # claimed only to fail it at once (it waited past ABLATE_WAIT_DEADLINE_S)
    # what the claim's RETURNING read of the run, for :func:`load_claimed`
    names: RunNames | None = None


@dataclass(frozen=True)
class RunNames:
    """The catalog rows a claimed run names, its study (and that study's status when claimed) and its
    provenance: read by the claiming statement itself, so nothing reads the claimed runs again."""

    workload_id: int
    variant_id: int
    cluster_id: int
    release_id: int
    study_id: int | None = None
    study_status: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def combo(self) -> _Combo:
        return (self.workload_id, self.variant_id, self.cluster_id, self.release_id)


def columns(obj: Any, exclude: tuple[str, ...] = ("id", "created_at")) -> dict[str, Any]:
    return {c.key: getattr(obj, c.key) for c in obj.__table__.columns if c.key not in exclude}


def load_claimed(session: Session, claimed: Sequence[Claimed]) -> tuple[list[RunRows], set[int]]:
    """The rows of claimed runs (in claim order) as plain values for the spec builder, and the studies
    to refresh: those not ``running`` when claimed (a claim can only move a study to running; one
    running already stays so). What each run names came back from the claim itself (:class:`RunNames`);
    its workload, variant, cluster and release are read by one query over the distinct combinations
    the batch names (a batch of 64 runs names a handful)."""
    if not claimed:
        return [], set()
    named = [(c, _require_names(c)) for c in claimed]
    catalog = _catalog_rows(session, [c.run_id for c in claimed])
    rows = []
    for c, n in named:
        workload, variant, cluster, release = catalog[n.combo]
        rows.append(
            RunRows(
                run_id=c.run_id,
                attempt=c.attempt,
                release_ref=f"{release['image']}:{release['tag']}",
                workload=dict(workload),
                variant=dict(variant),
                cluster=dict(cluster),
                release=dict(release),
                excluded_nodes=excluded_nodes(n.provenance),
            )
        )
    running = StudyStatus.running.value
    return rows, {n.study_id for _, n in named if n.study_id is not None and n.study_status != running}


def _require_names(c: Claimed) -> RunNames:
    if c.names is None:
        raise ValueError(f"run {c.run_id}: a claim without what the run names (claim it with claim_runs)")
    return c.names


_Combo = tuple[int, int, int, int]  # workload, variant, cluster and release ids


def _catalog_rows(session: Session, run_ids: list[int]) -> dict[_Combo, tuple[dict[str, Any], ...]]:
    """The workload, variant, cluster and release rows (column values, as :func:`columns` gives them)
    of each distinct combination these runs name, in one query: one row per combination. Plain columns,
    no ORM objects: nothing here is changed, and loading objects cost more than the query."""
    combos = (
        select(Run.workload_id, Run.variant_id, Run.cluster_id, Run.release_id)
        .where(among_ids(session, Run.id, run_ids))
        .distinct()
        .subquery()
    )
    tables = [cast(Table, m.__table__) for m in (Workload, Variant, Cluster, Release)]
    keep = [[col for col in t.columns if col.key not in ("id", "created_at")] for t in tables]
    wt, vt, ct, rt = tables
    q = (
        select(
            wt.c.id,
            vt.c.id,
            ct.c.id,
            rt.c.id,
            *[col.label(f"t{i}_{col.key}") for i, cols in enumerate(keep) for col in cols],
        )
        .select_from(combos)
        .join(wt, wt.c.id == combos.c.workload_id)
        .join(vt, vt.c.id == combos.c.variant_id)
        .join(ct, ct.c.id == combos.c.cluster_id)
        .join(rt, rt.c.id == combos.c.release_id)
    )
    out: dict[_Combo, tuple[dict[str, Any], ...]] = {}
    for row in session.execute(q):
        values = iter(row[4:])
        out[(row[0], row[1], row[2], row[3])] = tuple(
            {col.key: next(values) for col in cols} for cols in keep
        )
    return out


def rows_by_id(session: Session, model: Any, ids: set[int]) -> dict[int, dict[str, Any]]:
    """The rows of ``model`` with these ids, as their column values (see :func:`columns`)."""
    return {obj.id: columns(obj) for obj in session.scalars(select(model).where(model.id.in_(ids)))}
