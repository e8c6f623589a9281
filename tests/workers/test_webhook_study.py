"""A real tiny study run by `ablate serve`'s in-process dispatcher ends with a signed
``study.finished`` at a local receiver: the event comes from the dispatcher's own recording path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ablate.backend.api.app import create_app
from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import VariantDef, WorkloadDef
from ablate.backend.server import bind_socket, start_background_server
from ablate.backend.services.webhooks import subscriptions
from tests.support.webhook_receiver import Receiver
from tests.workers.conftest import CPU1, make_settings, queue_study

TINY = WorkloadDef(name="tiny-hook", model="tiny", runner="torch-llm", seq_len=16, micro_batch=1,
                   precision="fp32", warmup_steps=1, measured_steps=1)  # fmt: skip
SECRET = "a-secret-of-tests"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.stop()


def test_a_tiny_study_run_by_the_dispatcher_is_announced(
    ray_local: str, database: Database, tmp_path: Path, receiver: Receiver
) -> None:
    with database.transaction() as s:
        subscriptions.create_webhook(
            s, url=receiver.url, secret=SECRET, events=["study.finished", "study.failed"],
            description=None, created_by=None, allow_private=True,
        )  # fmt: skip
    q = queue_study(database, cluster=CPU1, variants=[VariantDef(name="eager")], workloads=[TINY])
    settings = make_settings(tmp_path, webhook_allow_private=True, webhook_poll_s=0.1)
    app = create_app(settings, database, run_dispatcher=True)
    server = start_background_server(app, bind_socket("127.0.0.1", 0))
    try:
        [item] = receiver.wait_for(1, timeout_s=180)
    finally:
        server.stop()
    assert item.signature_ok(SECRET) and item.headers["x-ablate-event"] == "study.finished"
    body = item.json
    assert body["study"]["id"] == q.study_id and body["study"]["runs"] == {"succeeded": 1}
    assert len(receiver.received) == 1
