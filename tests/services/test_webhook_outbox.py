"""The outbox's guarantees at the service level, on SQLite and PostgreSQL: an event exists exactly
when its cause is committed; concurrent workers never claim the same delivery; an expired lease is
taken over under the same delivery id and the first worker's late answer is not recorded."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from ablate.backend.config import Settings
from ablate.backend.db.base import utcnow
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run, WebhookDelivery, WebhookEvent
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import ingest, studies
from ablate.backend.services.webhooks import delivery, outbox, subscriptions
from tests.services.conftest import Catalog

URL = "http://127.0.0.1:9/hook"  # never contacted here


def _hook(database: Database, events: list[str]) -> int:
    with database.transaction() as s:
        return subscriptions.create_webhook(
            s, url=URL, secret="a-secret-of-tests", events=events, description=None, created_by=None,
            allow_private=True,
        ).id  # fmt: skip


def _count(database: Database) -> int:
    with database.read() as s:
        return int(s.scalar(select(func.count()).select_from(WebhookDelivery)) or 0)


def test_an_event_is_written_only_with_the_change_that_causes_it(database: Database, seeded: Catalog) -> None:
    _hook(database, ["study.finished", "study.failed"])
    plan = StudyPlan.model_validate(
        {"release": seeded.release, "cluster": seeded.cluster, "variants": seeded.variants[:1],
         "workloads": seeded.workloads[:1], "repeats": 1, "order_seed": 3}
    )  # fmt: skip
    with database.transaction() as s:
        study_id = studies.create_study(s, plan).id
    ok = RunResult("succeeded", metrics={"throughput_tokens_per_s": (100.0, "tokens/s")})
    with pytest.raises(RuntimeError), database.transaction() as s:
        run = s.scalars(select(Run).where(Run.study_id == study_id)).one()
        ingest.record_run_result(s, run, ok)
        assert s.scalar(select(func.count()).select_from(WebhookDelivery)) == 1  # written in here
        raise RuntimeError("the transaction fails after the study finished")
    assert _count(database) == 0  # rolled back with it
    with database.transaction() as s:
        run = s.scalars(select(Run).where(Run.study_id == study_id)).one()
        ingest.record_run_result(s, run, ok)
    with database.read() as s:
        [row] = s.scalars(select(WebhookDelivery)).all()
    assert row.event == "study.finished" and row.status == "pending" and row.attempts == 0
    # the status recomputed again (nothing changed): no second event
    with database.transaction() as s:
        studies.refresh_study_status(s, study_id)
    assert _count(database) == 1


def test_concurrent_workers_never_claim_the_same_delivery(database: Database) -> None:
    _hook(database, ["study.failed"])
    with database.transaction() as s:
        for i in range(40):
            outbox.enqueue(s, WebhookEvent.study_failed, f"event {i}", {"n": i})
    taken: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def claim(owner: str) -> None:
        start.wait()
        while True:
            with database.transaction() as s:
                got = delivery.claim_due(s, owner, limit=3, lease_s=600)
            if not got:
                return
            taken[owner] += [d.id for d in got]

    threads = [threading.Thread(target=claim, args=(o,)) for o in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not set(taken["a"]) & set(taken["b"])
    assert len(taken["a"]) + len(taken["b"]) == 40
    with database.read() as s:
        owners = s.execute(select(WebhookDelivery.lease_owner, WebhookDelivery.attempts)).all()
    assert {a for _o, a in owners} == {1} and {o for o, _a in owners} <= {"a", "b"}


def test_an_expired_lease_is_taken_over_under_the_same_id(database: Database) -> None:
    _hook(database, ["study.failed"])
    cfg = Settings(webhook_backoff_s=10, webhook_max_backoff_s=60, webhook_max_attempts=5)
    t0 = utcnow()
    with database.transaction() as s:
        [delivery_id] = outbox.enqueue(s, WebhookEvent.study_failed, "x", {}, now=t0)
    with database.transaction() as s:
        [first] = delivery.claim_due(s, "a", limit=5, lease_s=10, now=t0)
    with database.transaction() as s:
        assert delivery.claim_due(s, "b", limit=5, lease_s=10, now=t0 + timedelta(seconds=9)) == []
    with database.transaction() as s:
        [second] = delivery.claim_due(s, "b", limit=5, lease_s=10, now=t0 + timedelta(seconds=11))
    assert first.delivery_id == second.delivery_id == delivery_id and first.body == second.body
    assert (first.attempt, second.attempt) == (1, 2)
    late = delivery.Outcome(200, None, 5)
    with database.transaction() as s:
        assert delivery.record(s, "a", first, late, cfg) is None  # no longer a's
    with database.transaction() as s:
        assert delivery.record(s, "b", second, delivery.Outcome(500, "HTTP 500: x", 5), cfg) == "pending"
    with database.read() as s:
        row = s.scalars(select(WebhookDelivery)).one()
    assert row.lease_owner is None and [h["status_code"] for h in row.history] == [500]
    # the next attempt after the first backoff (10 s doubling, capped at 60 s)
    assert row.next_attempt_at >= t0 + timedelta(seconds=10)
    assert [cfg.webhook_backoff.delay_s(n) for n in (1, 2, 3, 4, 5)] == [10, 20, 40, 60, 60]
