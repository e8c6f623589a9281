"""Built comparisons kept in memory, reused only while nothing they read has changed.

A release comparison reads the runs and metrics of the release, its baseline and its lookback
releases, their release rows, and catalog rows and image manifests. The database's triggers
(migration 0015) give ``comparison_versions`` a new value in the same transaction as every write of
those rows, whoever writes them. A build first reads the versions (one query), then everything else, and is
kept under the versions it read: its data is at least that new. A later read reuses it only when it
reads the same versions, that is when no write has committed since; a write acknowledged before a
read began has changed a version, so the read builds afresh. A version value is never given twice
(a sequence on PostgreSQL, a random 64-bit number on SQLite): a build made inside a transaction that
wrote and then rolled back is kept under values no later write takes. Release ids are never reused
(migration 0013).

Each process keeps its own cache (several API workers: several caches; correctness comes from the
versions, not from telling processes). One cache per engine, so two databases never share entries,
bounded by the runs and deltas its comparisons hold (``Settings.comparison_cache_runs``), least recently used
out first.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterable

from sqlalchemy import case, func, literal, select, union_all
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ablate.backend.db.models import ComparisonVersion, Release

GLOBAL = 0  # the row counting what every comparison reads (migration 0015)
WROTE = -1  # in family_versions' answer: 1 when the reading transaction has written (not a release)


class ComparisonCache:
    """A least-recently-used map whose bound is the summed weight of its values (runs and deltas)."""

    def __init__(self, max_weight: int) -> None:
        self.max_weight = max_weight
        self.weight = 0
        self._items: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()  # API handlers run in threads
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> object | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: object, weight: int) -> None:
        weight = max(1, weight)
        if weight > self.max_weight:
            return  # larger than the whole budget: never kept
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.weight -= old[1]
            self._items[key] = (value, weight)
            self.weight += weight
            while self.weight > self.max_weight:
                _key, (_value, w) = self._items.popitem(last=False)
                self.weight -= w

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.weight = 0

    def __len__(self) -> int:
        return len(self._items)


# engine -> (full comparisons, release verdicts): two LRUs, so that a history scanning every release
# of a family (more full comparisons than the budget holds) cannot push the small verdicts out.
_caches: weakref.WeakKeyDictionary[Engine, tuple[ComparisonCache, ComparisonCache]] = (
    weakref.WeakKeyDictionary()
)
_caches_lock = threading.Lock()


def _budget() -> int:
    from ablate.backend.config import get_settings

    return int(get_settings().comparison_cache_runs)


def cache_for(session: Session, *, verdicts: bool = False) -> ComparisonCache | None:
    """The cache of full comparisons (``verdicts``: of release verdicts) of the session's engine; None
    when the budget is 0 (caching switched off)."""
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    with _caches_lock:
        pair = _caches.get(engine)
        if pair is None:
            budget = _budget()
            if budget <= 0:
                return None
            pair = _caches[engine] = (ComparisonCache(budget), ComparisonCache(budget))
        return pair[1] if verdicts else pair[0]


def family_versions(session: Session, images: Iterable[str]) -> dict[int, int]:
    """release id -> version of every release of these images, and of :data:`GLOBAL`, in one query.

    Read before anything else of a build: the rows it loads afterwards are at least this new."""
    family = (
        select(Release.id, ComparisonVersion.version)
        .outerjoin(ComparisonVersion, ComparisonVersion.release_id == Release.id)
        .where(Release.image.in_(sorted(set(images))))
    )
    shared = select(ComparisonVersion.release_id, ComparisonVersion.version).where(
        ComparisonVersion.release_id == GLOBAL
    )
    parts = [family, shared]
    if session.get_bind().dialect.name == "postgresql":
        # PostgreSQL's triggers run at commit: a transaction that has written reads versions that do
        # not count its own writes yet, so what it builds is neither kept nor taken from the cache.
        wrote = case((func.txid_current_if_assigned().is_(None), 0), else_=1)
        parts.append(select(literal(WROTE), wrote))
    rows = session.execute(union_all(*parts)).all()
    out = {int(rid): int(version or 0) for rid, version in rows}
    out.setdefault(GLOBAL, 0)
    return out
