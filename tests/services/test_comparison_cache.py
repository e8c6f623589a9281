"""Kept comparisons are never stale: every write a comparison reads, committed before a read begins,
makes that read build afresh (services/comparison/cache.py, the triggers of migration 0015).

Each test reads once (kept), checks that a second read is the kept one, writes through a real path
(ingest, an exclusion, a delete, a new release, a status change as the dispatcher writes it, a catalog
edit) and checks that the next read shows the write.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import delete, event, select, update

from ablate.backend.db.database import Database
from ablate.backend.db.models import Release, Run, RunMetric, RunStatus, Variant
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import comparison as svc
from ablate.backend.services import hygiene
from ablate.backend.services.comparison.cache import ComparisonCache, cache_for
from ablate.backend.services.history import CellKey, cell_history
from ablate.backend.services.ingest import submit_results
from ablate.backend.services.tokens import Principal
from tests.reports import seed
from tests.reports.seed import REL_2512, ReleaseSpec

OPTS = svc.ComparisonOptions(n_resamples=200)
REF = f"{seed.IMAGE}:25.12"
WHO = Principal(1, "test-admin", "admin")
LLAMA = "deepspeed/llama3-8b"


@pytest.fixture
def standard(database: Database) -> Database:
    seed.seed_standard(database)
    return database


def _build(database: Database, ref: str = REF, **kw: Any) -> svc.ReleaseComparison:
    with database.read() as s:
        return svc.build_release_comparison(s, ref, options=kw.pop("options", OPTS), **kw)


def _kept(database: Database, ref: str = REF, **kw: Any) -> svc.ReleaseComparison:
    """Build twice and check that the second read reused the first build (the cache is in use)."""
    first = _build(database, ref, **kw)
    second = _build(database, ref, **kw)
    assert second.deltas is first.deltas, "the second read should reuse the kept build"
    return second


def _run_id(c: svc.ReleaseComparison, release: str, variant: str = "Base", repeat: int = 0) -> int:
    return next(
        r.run_id
        for r in c.runs
        if r.release.endswith(release) and (r.workload, r.variant, r.repeat) == (LLAMA, variant, repeat)
    )


def _ingest(database: Database, results: list[dict[str, Any]]) -> None:
    with database.transaction() as session:
        batch = ResultsBatch.model_validate({"results": results})
        submit_results(session, batch, token_scope="admin", idempotency_key=None)


def test_ingest_after_a_kept_read_is_seen(standard: Database) -> None:
    before = _kept(standard)
    n = len([r for r in before.runs if r.release == REF])
    _ingest(standard, [seed._result(REL_2512, LLAMA, "Base", 7, status="succeeded")])
    after = _build(standard)
    assert len([r for r in after.runs if r.release == REF]) == n + 1


def test_exclusion_and_inclusion_are_seen(standard: Database) -> None:
    run_id = _run_id(_kept(standard), "25.12")
    with standard.transaction() as s:
        hygiene.exclude_run(s, run_id, "bad node", WHO)
    assert next(r for r in _kept(standard).runs if r.run_id == run_id).status == "excluded"
    with standard.transaction() as s:
        hygiene.include_run(s, run_id, "node was fine", WHO)
    assert next(r for r in _build(standard).runs if r.run_id == run_id).status == RunStatus.succeeded


def test_baseline_and_lookback_writes_are_seen(standard: Database) -> None:
    """An exclusion in the baseline (25.11) and one in a lookback release (25.10) change 25.12's build."""
    before = _kept(standard)
    base_id = _run_id(before, "25.11")
    with standard.transaction() as s:
        hygiene.exclude_run(s, base_id, "bad node", WHO)
    after = _kept(standard)
    assert next(r for r in after.runs if r.run_id == base_id).status == "excluded"
    delta = next(d for d in after.deltas if (d.workload, d.variant) == (LLAMA, "Base") and d.result)
    assert delta.result is not None and delta.result.n_baseline == 4  # five repeats less the excluded
    with standard.read() as s:
        old = s.scalars(
            select(Run.id).join(Release).where(Release.tag == "25.10", Run.status == RunStatus.succeeded)
        ).all()
    with standard.transaction() as s:
        s.execute(delete(RunMetric).where(RunMetric.run_id.in_(old)))  # plain SQL: no service knows
    points = [p for d in _build(standard).deltas for p in d.history]
    assert points and not any(p.release.endswith("25.10") for p in points)


def test_delete_is_seen(standard: Database) -> None:
    before = _kept(standard)
    run_id = _run_id(before, "25.12", variant=seed.VARIANTS[-1])
    with standard.transaction() as s:
        s.execute(delete(Run).where(Run.id == run_id))
    assert run_id not in {r.run_id for r in _kept(standard).runs}
    with standard.transaction() as s:
        hygiene.delete_release(s, f"{seed.IMAGE}:25.11", WHO)
    after = _build(standard)
    assert after.baseline is not None and after.baseline.ref == f"{seed.IMAGE}:25.10"


def test_a_new_baseline_is_seen(standard: Database) -> None:
    _kept(standard)
    seed.seed_release(standard, ReleaseSpec("25.11.5", {"torch": "2.9.0"}))  # between 25.11 and 25.12
    after = _kept(standard)
    assert after.baseline is not None and after.baseline.ref == f"{seed.IMAGE}:25.11.5"
    # An explicit baseline is another build, kept apart from the default one.
    explicit = _kept(standard, baseline_ref=f"{seed.IMAGE}:25.10")
    assert explicit.baseline is not None and explicit.baseline.ref == f"{seed.IMAGE}:25.10"
    assert _build(standard).baseline_source == "previous"


def test_a_status_change_by_the_dispatcher_is_seen(standard: Database) -> None:
    """The dispatcher writes run states with Core UPDATE statements (workers/dispatch/claims.py)."""
    run_id = _run_id(_kept(standard), "25.12", variant=seed.VARIANTS[1])
    with standard.transaction() as s:
        s.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.failed.value, error="OOM"))
    after = _kept(standard)
    assert next(r for r in after.runs if r.run_id == run_id).status == RunStatus.failed
    assert any(f"run {run_id} failed" in line for line in after.missing)


def test_a_release_or_catalog_edit_is_seen(standard: Database) -> None:
    _kept(standard)
    with standard.transaction() as s:
        s.execute(update(Release).where(Release.tag == "25.12").values(manifest={"torch": "2.10.0"}))
    assert _kept(standard).release.manifest == {"torch": "2.10.0"}
    with standard.transaction() as s:
        s.execute(update(Variant).where(Variant.name == "Base").values(description="vendor image"))
    assert next(v for v in _build(standard).variants if v.name == "Base").description == "vendor image"


def test_options_are_kept_apart(standard: Database) -> None:
    plain = _kept(standard)
    busy = _kept(standard, options=svc.ComparisonOptions(n_resamples=200, busy_hosts=True))
    assert busy.deltas is not plain.deltas and busy.deltas[0].busy_included


def test_a_write_during_a_build_never_leaves_a_stale_build(standard: Database) -> None:
    """A write that commits after a build loaded its rows (so the build misses it) but before the
    build is kept: the build is kept under the versions read before the write, so the next read,
    after the write's commit, builds afresh and sees it."""
    run_id = _run_id(_kept(standard), "25.12", variant=seed.VARIANTS[2])
    fired = threading.Event()

    def write_once(conn: Any, cursor: Any, statement: str, *a: Any) -> None:
        if fired.is_set() or "run_metrics" not in statement:
            return
        fired.set()  # right after the build's load of the runs and metrics: commit a status change

        def write() -> None:
            with standard.transaction() as s:
                s.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.cancelled.value))

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(timeout=30)
        assert not writer.is_alive(), "the write did not commit within 30 s"

    with standard.transaction() as s:  # a write the kept build has not seen: the next read builds
        s.execute(update(Run).where(Run.id == run_id).values(error=None))
    event.listen(standard.engine, "after_cursor_execute", write_once)
    try:
        during = _build(standard)
    finally:
        event.remove(standard.engine, "after_cursor_execute", write_once)
    assert fired.is_set()
    assert next(r for r in during.runs if r.run_id == run_id).status == RunStatus.succeeded  # loaded before
    after = _build(standard)
    assert next(r for r in after.runs if r.run_id == run_id).status == RunStatus.cancelled


def test_a_build_inside_a_rolled_back_write_is_never_reused(standard: Database) -> None:
    """A build made in a transaction that wrote (its versions changed, not committed) and rolled back,
    then another write committed: the next read must show the committed write, not the rolled-back
    one. (With counters, both writes would have taken the same next value.)"""
    c = _kept(standard)
    first, second = _run_id(c, "25.12", repeat=0), _run_id(c, "25.12", repeat=1)

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), standard.transaction() as s:
        hygiene.exclude_run(s, first, "never committed", WHO)
        s.flush()
        inside = svc.build_release_comparison(s, REF, options=OPTS)
        assert next(r for r in inside.runs if r.run_id == first).status == "excluded"
        raise RolledBack
    with standard.transaction() as s:
        hygiene.exclude_run(s, second, "committed", WHO)
    status = {r.run_id: r.status for r in _build(standard).runs}
    assert (status[first], status[second]) == (RunStatus.succeeded, "excluded")


def test_a_cell_history_sees_a_write_after_a_kept_read(standard: Database) -> None:
    """The history reads each release's verdicts, kept apart from full comparisons: a plain-SQL write
    that makes 25.12's Base on llama 30% slower turns its verdict to regressed on the next read."""
    key = CellKey(seed.CLUSTER["name"], LLAMA, "Base", "throughput_tokens_per_s")

    def entry() -> Any:
        with standard.read() as s:
            history = cell_history(s, seed.IMAGE, key, OPTS)
        return next(e for e in history.history.entries if e.release == REF)

    assert entry().verdict != "regressed"
    assert entry().verdict != "regressed"  # kept
    ids = [
        r.run_id
        for r in _build(standard).runs
        if r.release == REF and (r.workload, r.variant) == (LLAMA, "Base")
    ]
    with standard.transaction() as s:
        s.execute(
            update(RunMetric)
            .where(RunMetric.run_id.in_(ids), RunMetric.name == "throughput_tokens_per_s")
            .values(value=RunMetric.value * 0.7)
        )
    assert entry().verdict == "regressed"


def test_the_cache_is_bounded_by_the_runs_it_holds() -> None:
    cache = ComparisonCache(max_weight=10)
    cache.put("a", 1, 4)
    cache.put("b", 2, 4)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3, 4)  # over the bound: b, the least recently used, goes
    assert (cache.get("b"), cache.get("a"), cache.get("c")) == (None, 1, 3)
    assert cache.weight == 8
    cache.put("huge", 4, 11)  # larger than the whole bound: never kept
    assert cache.get("huge") is None and len(cache) == 2


def test_each_database_has_its_own_cache(standard: Database, database: Database) -> None:
    with standard.read() as s:
        mine = cache_for(s)
    other = Database.from_url(str(standard.engine.url.render_as_string(hide_password=False)))
    try:
        with other.read() as s:
            assert cache_for(s) is not mine
    finally:
        other.dispose()


def _versions(database: Database) -> dict[int, int]:
    from ablate.backend.db.models import ComparisonVersion

    with database.read() as s:
        return {row.release_id: row.version for row in s.scalars(select(ComparisonVersion))}


def test_one_transaction_over_two_releases_changes_both_versions(standard: Database) -> None:
    """PostgreSQL bumps a release's version once per transaction (migration 0017): a transaction
    that writes many rows of two releases, and a later one that writes one of them again, each give
    every release they wrote a new version, and a kept read builds afresh."""
    before = _kept(standard)
    releases = sorted({r.release for r in before.runs})
    assert len(releases) >= 2
    with standard.read() as s:
        ids = {r.ref: r.id for r in s.scalars(select(Release)) if r.ref in releases}
    assert set(ids) == set(releases)
    versions = _versions(standard)
    with standard.transaction() as s:
        s.execute(update(Run).where(Run.release_id.in_(ids.values())).values(attempt=Run.attempt + 1))
        s.execute(update(RunMetric).values(value=RunMetric.value))
    once = _versions(standard)
    assert all(once[rid] != versions.get(rid) for rid in ids.values()), (versions, once)
    assert _build(standard).deltas is not before.deltas
    with standard.transaction() as s:
        s.execute(update(Run).where(Run.release_id == ids[REF]).values(attempt=Run.attempt + 1))
    twice = _versions(standard)
    assert twice[ids[REF]] != once[ids[REF]]
    assert all(twice[rid] == once[rid] for ref, rid in ids.items() if ref != REF)
