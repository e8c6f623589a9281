"""Catalog ids by name for CI batches, cached per process and engine."""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ablate.backend.db.models import (
    Cluster,
    Release,
    Run,
    RunSource,
    Variant,
    Workload,
)
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.schemas.results import ResultIn
from ablate.backend.services import catalog
from ablate.backend.services.catalog import Entry


class CatalogIds:
    """Catalog ids by name, kept per engine so a single-result request needs no lookup statements.

    Safe because names are never changed and clusters, workloads and variants are never deleted.
    A release can be deleted and created again under the same name with a new id: a stale cached id
    then fails the runs' foreign key, and :func:`submit_results_retrying` drops the cache and tries
    again looking every name up. That needs ids that are never handed out again, which holds for
    PostgreSQL's sequences but not for SQLite (a deleted largest id is reused), so on SQLite release
    ids are not cached (its lookups are in-process calls, not round trips). Each server process or
    worker keeps its own cache and finds a stale id by its own foreign-key failure.
    """

    def __init__(self, cache_releases: bool) -> None:
        self.cache_releases = cache_releases
        self.ids: dict[tuple[type, str], int] = {}

    def get(self, model: type, name: str) -> int | None:
        return self.ids.get((model, name))

    def put(self, model: type, name: str, entry_id: int) -> None:
        if model is not Release or self.cache_releases:
            self.ids[(model, name)] = entry_id

    def forget_release(self, ref: str) -> None:
        self.ids.pop((Release, ref), None)

    def clear(self) -> None:
        self.ids.clear()


_CATALOG_IDS: weakref.WeakKeyDictionary[Engine, CatalogIds] = weakref.WeakKeyDictionary()


def catalog_ids(engine: Engine) -> CatalogIds:
    """This process's catalog ids for the engine's database."""
    ids = _CATALOG_IDS.get(engine)
    if ids is None:
        ids = _CATALOG_IDS.setdefault(engine, CatalogIds(cache_releases=engine.dialect.name != "sqlite"))
    return ids


class _CatalogLookup:
    """Catalog entries of one batch, each resolved (or created) once.

    With ``cached``, names given as plain strings are taken from this process's :class:`CatalogIds`
    (no statement when known); without, every name is looked up and the cache refreshed.
    """

    def __init__(self, session: Session, token_scope: str | None, *, cached: bool) -> None:
        self.session = session
        self.may_create_release = token_scope == "admin"
        self.named: dict[tuple[type, str], Any] = {}
        self.releases: dict[str, int] = {}
        self.ids = catalog_ids(session.get_bind().engine)
        self.cached = cached

    def _release_id(self, release: str | ReleaseCreate, loc: str) -> int:
        ref = release if isinstance(release, str) else f"{release.image}:{release.tag}"
        if ref not in self.releases:
            known = self.ids.get(Release, ref) if self.cached and isinstance(release, str) else None
            if known is None:
                known = catalog.resolve_release(
                    self.session, release, loc, may_create=self.may_create_release
                ).id
                self.ids.put(Release, ref, known)
            self.releases[ref] = known
        return self.releases[ref]

    def _named_id(self, model: type[Entry], value: str | BaseModel, loc: str) -> int:
        if self.cached and isinstance(value, str) and (known := self.ids.get(model, value)) is not None:
            return known
        entry = catalog.resolve_named(self.session, model, value, loc, self.named)
        self.ids.put(model, entry.name, entry.id)
        return entry.id

    def run_for(self, result: ResultIn, loc: str, key: str | None) -> Run:
        return Run(
            release_id=self._release_id(result.release, f"{loc}.release"),
            cluster_id=self._named_id(Cluster, result.cluster, f"{loc}.cluster"),
            workload_id=self._named_id(Workload, result.workload, f"{loc}.workload"),
            variant_id=self._named_id(Variant, result.variant, f"{loc}.variant"),
            repeat=result.repeat if result.repeat is not None else -1,  # -1: numbered by _number_repeats
            attempt=1,
            source=RunSource.ci.value,
            idempotency_key=key,
            queue_order=0,
        )
