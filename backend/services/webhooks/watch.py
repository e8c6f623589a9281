"""Regressions as events: which releases to look at again, and what changed since the last look.

Ingest calls :func:`mark_releases` in the transaction that stores results: the release's
``release_watch.version`` goes up. The delivery worker finds releases whose ``checked_version`` is
behind (:func:`dirty_releases`) and :func:`check_release` recomputes the comparison of the release and
of the release after it in its family (whose default baseline it is), as ``ablate ci check`` without
``--baseline`` sees them. Then, in one transaction holding the release's watch row, the regressed
cells are compared with those already announced: new ones go out as ``release.regression``, ones no
longer regressed as ``release.resolved``, and the row keeps the new set. A comparison that began
before the stored one is dropped, so two API processes checking at once announce nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ablate.backend.config import Settings
from ablate.backend.db.base import utcnow
from ablate.backend.db.database import Database
from ablate.backend.db.models import Release, ReleaseWatch, WebhookEvent
from ablate.backend.services.comparison import ComparisonOptions, build_release_comparison, order_family
from ablate.backend.services.webhooks import events
from ablate.backend.services.webhooks.outbox import subscribers


def _insert(session: Session) -> Any:
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(ReleaseWatch)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(ReleaseWatch)


def mark_releases(session: Session, release_ids: Iterable[int]) -> None:
    """Ask for another look at these releases' verdicts (one upsert; ids sorted so that concurrent
    transactions lock rows in the same order)."""
    ids = sorted(set(release_ids))
    if not ids:
        return
    stmt = _insert(session).values(
        [{"release_id": i, "version": 1, "checked_version": 0, "regressions": {}} for i in ids]
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[ReleaseWatch.release_id], set_={"version": ReleaseWatch.version + 1}
    )
    session.execute(stmt)


def dirty_releases(session: Session, *, limit: int = 20) -> list[tuple[int, int]]:
    """(release id, version) of releases with results newer than their last check."""
    rows = session.execute(
        select(ReleaseWatch.release_id, ReleaseWatch.version)
        .where(ReleaseWatch.version > ReleaseWatch.checked_version)
        .order_by(ReleaseWatch.release_id)
        .limit(limit)
    )
    return [(int(r), int(v)) for r, v in rows]


def _targets(session: Session, release_id: int) -> list[int]:
    """The release and the one after it in its family (whose default baseline it is)."""
    release = session.get(Release, release_id)
    if release is None:
        return []
    family = order_family(session.scalars(select(Release).where(Release.image == release.image)))
    index = next(i for i, r in enumerate(family) if r.id == release.id)
    return [r.id for r in family[index : index + 2]]


def _regressed(database: Database, settings: Settings, release_id: int) -> tuple[str | None, dict[str, Any]]:
    """(baseline ref, key -> cell) of the release's regressed cells against its default baseline."""
    with database.read() as session:
        release = session.get(Release, release_id)
        if release is None:
            return None, {}
        comparison = build_release_comparison(
            session, release.ref, options=ComparisonOptions.from_settings(settings)
        )
    baseline = comparison.baseline.ref if comparison.baseline else None
    cells: dict[str, Any] = {}
    for d in comparison.deltas:
        r = d.result
        if r is None or r.verdict != "regressed":
            continue
        key = "|".join((baseline or "", d.cluster, d.workload, d.variant, d.metric))
        cells[key] = {
            "baseline": baseline,
            "cluster": d.cluster,
            "workload": d.workload,
            "variant": d.variant,
            "metric": d.metric,
            "unit": d.unit,
            "change_pct": r.change_pct,
            "ci_low_pct": r.change_ci_low,
            "ci_high_pct": r.change_ci_high,
            "q_value": r.q_value,
            "baseline_median": r.baseline_median,
            "release_median": r.contender_median,
        }
    return baseline, cells


def _lock_row(session: Session, release_id: int) -> ReleaseWatch | None:
    """The release's watch row, made if missing, locked for this transaction (on SQLite the insert
    has taken the database's write lock already)."""
    session.execute(
        _insert(session)
        .values(release_id=release_id, version=0, checked_version=0, regressions={})
        .on_conflict_do_nothing(index_elements=[ReleaseWatch.release_id])
    )
    return session.scalars(
        select(ReleaseWatch)
        .where(ReleaseWatch.release_id == release_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def _announce(database: Database, settings: Settings, release_id: int) -> list[str]:
    started: datetime = utcnow()
    baseline, current = _regressed(database, settings, release_id)
    with database.transaction() as session:
        release = session.get(Release, release_id)
        if release is None:
            return []
        row = _lock_row(session, release_id)
        if row is None or (row.state_as_of is not None and row.state_as_of > started):
            return []  # a newer look got there first
        known: dict[str, Any] = dict(row.regressions or {})
        new = [cell for key, cell in current.items() if key not in known]
        gone = [cell for key, cell in known.items() if key not in current]
        row.regressions = current
        row.state_as_of = started
        sent: list[str] = []
        if new:
            sent += events.release_changed(session, release, baseline, new, resolved=False)
        if gone:
            olds = {cell.get("baseline") for cell in gone}
            old_baseline = next(iter(olds)) if len(olds) == 1 else baseline
            sent += events.release_changed(session, release, old_baseline, gone, resolved=True)
        return sent


def listening(session: Session) -> bool:
    """Whether any webhook subscribes to a release event."""
    return bool(
        subscribers(session, WebhookEvent.release_regression)
        or subscribers(session, WebhookEvent.release_resolved)
    )


def mark_checked(session: Session, release_id: int, version: int) -> None:
    session.execute(
        update(ReleaseWatch)
        .where(ReleaseWatch.release_id == release_id, ReleaseWatch.checked_version < version)
        .values(checked_version=version)
    )


def mark_all_checked(session: Session) -> None:
    """Nobody listens to release events: every release counts as looked at, nothing is computed (a
    later subscriber hears of changes after it subscribed, compared with what was announced before)."""
    session.execute(
        update(ReleaseWatch)
        .where(ReleaseWatch.version > ReleaseWatch.checked_version)
        .values(checked_version=ReleaseWatch.version)
    )


def check_release(database: Database, settings: Settings, release_id: int, version: int) -> list[str]:
    """Look again at ``release_id`` (and its successor); returns the delivery ids written."""
    with database.read() as session:
        targets = _targets(session, release_id)
    sent: list[str] = []
    for target in targets:
        sent += _announce(database, settings, target)
    with database.transaction() as session:
        mark_checked(session, release_id, version)
    return sent
