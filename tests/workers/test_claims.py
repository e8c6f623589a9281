"""Claims and leases on both databases: no run claimed twice, expired leases re-queued, stale owners
refused."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import update

from ablate.backend.db.base import utcnow
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, Study
from ablate.backend.schemas.catalog import VariantDef
from ablate.backend.services.studies import refresh_study_statuses
from ablate.workers.dispatch import claimed, claims, leases
from tests.workers.conftest import CPU1, FAKE, queue_study


def _queue(database: Database, repeats: int) -> list[int]:
    return queue_study(database, cluster=CPU1, variants=[VariantDef(name="A"), VariantDef(name="B")],
                       workloads=[FAKE], repeats=repeats).run_ids  # fmt: skip


def test_claims_follow_queue_order(database: Database) -> None:
    ids = _queue(database, 2)
    with database.transaction() as s:
        got = claims.claim_runs(s, "me", limit=3, lease_s=30)
    assert [c.run_id for c in got] == ids[:3]
    assert all(c.attempt == 1 for c in got)


def test_concurrent_dispatchers_never_take_the_same_run(database: Database) -> None:
    ids = _queue(database, 10)  # 20 runs
    taken: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def worker(owner: str) -> None:
        mine: list[int] = []
        try:
            while True:
                with database.transaction() as s:
                    got = claims.claim_runs(s, owner, limit=2, lease_s=30)
                if not got:
                    break
                mine.extend(c.run_id for c in got)
        except BaseException as exc:
            errors.append(exc)
        taken[owner] = mine

    threads = [threading.Thread(target=worker, args=(f"d{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    everything = [r for mine in taken.values() for r in mine]
    assert sorted(everything) == sorted(ids)  # each exactly once


def test_expired_leases_are_requeued_then_failed(database: Database) -> None:
    ids = _queue(database, 1)
    with database.transaction() as s:
        claims.claim_runs(s, "dead", limit=2, lease_s=30)
        past = utcnow() - timedelta(seconds=1)
        s.execute(update(Run).values(lease_expires_at=past))
        s.execute(update(Run).where(Run.id == ids[1]).values(attempt=3))
        reaped = leases.reap_expired(s, max_attempts=3)
    assert reaped.requeued == [ids[0]] and reaped.failed == [ids[1]]
    with database.read() as s:
        first, second = s.get(Run, ids[0]), s.get(Run, ids[1])
        assert first is not None and second is not None
        assert (first.status, first.attempt, first.lease_owner) == ("queued", 2, None)
        assert second.status == "failed" and second.failure_kind == "infrastructure"
        assert second.error == "infrastructure: lease expired after 3 attempts"


def test_a_stale_owner_can_neither_renew_nor_finish(database: Database) -> None:
    ids = _queue(database, 1)
    with database.transaction() as s:
        claims.claim_runs(s, "old", limit=1, lease_s=30)
        s.execute(update(Run).where(Run.id == ids[0]).values(lease_owner="new"))
    with database.transaction() as s:
        assert leases.renew_leases(s, "old", [ids[0]], lease_s=30) == set()
        assert leases.hold_for_finish(s, "old", [ids[0]], lease_s=30) == {}
        assert not leases.write_progress(s, "old", ids[0], 1, 2, None)
        assert list(leases.hold_for_finish(s, "new", [ids[0]], lease_s=30)) == [ids[0]]


def test_claimed_runs_load_as_the_rows_their_specs_are_built_from(database: Database) -> None:
    q = queue_study(
        database,
        cluster=CPU1,
        variants=[VariantDef(name="A"), VariantDef(name="B", env={"CHECKPOINT_OPTIMIZATION": "true"})],
        workloads=[FAKE],
    )
    with database.transaction() as s:
        got = claims.claim_runs(s, "me", limit=2, lease_s=30)
        rows, studies = claimed.load_claimed(s, got)
        assert claimed.load_claimed(s, []) == ([], set())
    assert studies == {q.study_id}
    assert [r.run_id for r in rows] == [c.run_id for c in got] == q.run_ids  # claim order
    assert {r.variant["name"]: r.variant["env"] for r in rows} == {
        "A": {},
        "B": {"CHECKPOINT_OPTIMIZATION": "true"},
    }
    for r in rows:
        assert r.attempt == 1 and r.release_ref == "training-nv-pytorch:25.12"
        assert r.workload["name"] == "fake" and r.workload["runner_options"] == {"steps": 3}
        assert r.cluster["name"] == "cpu-1" and r.cluster["accelerator"] == "cpu"
        assert r.release["platform"] == "gpu"
        for values in (r.workload, r.variant, r.cluster, r.release):
            assert "id" not in values and "created_at" not in values


def test_a_claim_names_only_the_studies_it_may_move_to_running(database: Database) -> None:
    q = queue_study(
        database, cluster=CPU1, variants=[VariantDef(name="A"), VariantDef(name="B")], workloads=[FAKE]
    )
    with database.transaction() as s:
        rows, studies = claimed.load_claimed(s, claims.claim_runs(s, "me", limit=1, lease_s=30))
        assert studies == {q.study_id}  # queued: this claim makes it running
        refresh_study_statuses(s, studies)
    with database.transaction() as s:
        rows, studies = claimed.load_claimed(s, claims.claim_runs(s, "me", limit=1, lease_s=30))
        assert [r.run_id for r in rows] == q.run_ids[1:2] and studies == set()  # running already
        assert s.get(Study, q.study_id).status == "running"
