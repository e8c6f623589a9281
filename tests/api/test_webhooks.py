"""Webhooks (issue 26, point 5): admins manage them; events from the real code paths go out of the
durable outbox to a real local receiver, signed, with stable delivery ids; 500s are retried with
backoff; private targets are refused; a server killed mid-delivery sends the event again under the
same id after a restart. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, ReleaseWatch, Run, Variant, WebhookDelivery, Workload
from ablate.backend.domain.runner import RunResult
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from ablate.backend.schemas.studies import StudyPlan
from ablate.backend.services import catalog, ingest, studies
from ablate.backend.services.webhooks import subscriptions
from ablate.backend.services.webhooks.targets import refused_reason
from ablate.backend.services.webhooks.worker import WebhookWorker
from tests.api.conftest import auth, make_token
from tests.api.helpers import REF, assert_problem, create_release, result
from tests.api.test_ci_check import BASELINE, CELLS
from tests.support.live_server import LiveServer, start_live_server
from tests.support.webhook_receiver import Receiver

SECRET = "s3cret-for-tests"
FAST = {
    "webhook_allow_private": True,  # the receiver listens on 127.0.0.1
    "webhook_backoff_s": 0.2,
    "webhook_poll_s": 0.1,
    "webhook_timeout_s": 10.0,
    "webhook_lease_s": 12.0,
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def hooked(db_url: str) -> Iterator[LiveServer]:
    """A live server whose webhook worker may reach the local receiver, retrying fast."""
    server = start_live_server(db_url, settings=FAST)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def admin(hooked: LiveServer) -> Iterator[httpx.Client]:
    token = make_token(hooked.database, "hook-admin", "admin")
    with httpx.Client(base_url=hooked.api, timeout=30.0, headers=auth(token)) as c:
        yield c


def add_hook(admin: httpx.Client, url: str, events: list[str]) -> dict[str, Any]:
    response = admin.post("/webhooks", json={"url": url, "secret": SECRET, "events": events})
    assert response.status_code == 201, response.text
    return response.json()


def deliveries(admin: httpx.Client, hook_id: int) -> list[dict[str, Any]]:
    response = admin.get(f"/webhooks/{hook_id}/deliveries")
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(condition: Any, timeout_s: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)  # polling the database until the worker has written
    raise AssertionError(f"{what} not reached within {timeout_s}s")


def settled(database: Database) -> bool:
    """Every release looked at since its last results, and nothing left to deliver."""
    with database.read() as s:
        behind = s.scalar(
            select(func.count())
            .select_from(ReleaseWatch)
            .where(ReleaseWatch.version > ReleaseWatch.checked_version)
        )
        pending = s.scalar(
            select(func.count()).select_from(WebhookDelivery).where(WebhookDelivery.status == "pending")
        )
    return behind == 0 and pending == 0


def check_headers(item: Any, event: str) -> dict[str, Any]:
    assert item.signature_ok(SECRET), item.headers
    assert not item.signature_ok("another-secret")
    assert item.headers["x-ablate-event"] == event
    assert item.headers["content-type"] == "application/json"
    body: dict[str, Any] = item.json
    assert body["event"] == event and body["delivery"] == item.headers["x-ablate-delivery"]
    assert isinstance(body["text"], str) and body["text"].startswith("Ablate: ")
    return body


def test_admins_manage_webhooks_and_the_secret_never_comes_back(
    hooked: LiveServer, admin: httpx.Client, receiver: Receiver
) -> None:
    submitter = make_token(hooked.database, "hook-ci", "submit")
    body = {"url": receiver.url, "secret": SECRET, "events": ["study.failed", "study.finished"]}
    assert_problem(httpx.post(f"{hooked.api}/webhooks", json=body, timeout=30), 401)
    assert_problem(httpx.post(f"{hooked.api}/webhooks", json=body, headers=auth(submitter), timeout=30), 403)
    assert_problem(httpx.get(f"{hooked.api}/webhooks", headers=auth(submitter), timeout=30), 403)
    created = add_hook(admin, receiver.url, ["study.failed", "study.finished", "study.failed"])
    assert "secret" not in created and SECRET not in json.dumps(created)
    assert created["events"] == ["study.failed", "study.finished"] and created["created_by"] == "hook-admin"
    listed = admin.get("/webhooks").json()
    assert [h["id"] for h in listed] == [created["id"]] and SECRET not in json.dumps(listed)
    assert admin.get(f"/webhooks/{created['id']}").json() == created
    assert deliveries(admin, created["id"]) == []
    # bad input: one clear error naming the field, nothing written
    bad = assert_problem(
        admin.post("/webhooks", json={**body, "events": ["study.done"]}), 422, loc="events[0]"
    )
    assert "unknown event 'study.done'" in bad["detail"]
    assert_problem(admin.post("/webhooks", json={**body, "events": []}), 422)
    assert_problem(admin.post("/webhooks", json={**body, "url": "ftp://example.com/x"}), 422, loc="url")
    assert_problem(admin.post("/webhooks", json={**body, "secret": "short"}), 422)
    assert_problem(admin.post("/webhooks", json={**body, "token": "x"}), 422)
    assert len(admin.get("/webhooks").json()) == 1
    assert admin.delete(f"/webhooks/{created['id']}").status_code == 204
    assert_problem(admin.get(f"/webhooks/{created['id']}"), 404, loc="webhook_id")
    assert_problem(admin.delete(f"/webhooks/{created['id']}"), 404)


PRIVATE = [
    ("http://127.0.0.1:9/hook", "loopback"),
    ("http://localhost/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/hook", "private"),
    ("http://[fd00:ec2::254]/hook", "private"),
    ("http://100.100.100.200/hook", "metadata"),
    ("http://0.0.0.0/hook", "unspecified"),
]


def test_private_targets_are_refused_at_creation(db_url: str) -> None:
    with start_live_server(db_url) as server:  # the default: private targets refused
        token = make_token(server.database, "hook-admin", "admin")
        for url, reason in PRIVATE:
            body = {"url": url, "secret": SECRET, "events": ["study.failed"]}
            response = httpx.post(f"{server.api}/webhooks", json=body, headers=auth(token), timeout=30)
            problem = assert_problem(response, 422, loc="url")
            assert reason in problem["detail"], (url, problem)
            assert "ABLATE_WEBHOOK_ALLOW_PRIVATE" in problem["detail"]
        unknown = {"url": "http://no-such-host.invalid/x", "secret": SECRET, "events": ["study.failed"]}
        response = httpx.post(f"{server.api}/webhooks", json=unknown, headers=auth(token), timeout=30)
        assert "does not resolve" in assert_problem(response, 422, loc="url")["detail"]
        assert httpx.get(f"{server.api}/webhooks", headers=auth(token), timeout=30).json() == []


def test_address_classes() -> None:
    import ipaddress

    for address in ("::ffff:127.0.0.1", "100.64.0.1", "fe80::1", "224.0.0.1", "192.0.2.1"):
        assert refused_reason(ipaddress.ip_address(address)) is not None, address
    for address in ("93.184.215.14", "2606:4700::1111", "8.8.8.8"):
        assert refused_reason(ipaddress.ip_address(address)) is None, address


def _catalog(database: Database) -> None:
    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
        catalog.create_named(s, Cluster, ClusterDef(name="cpu-1", accelerator="cpu", devices_per_node=0))
        catalog.create_named(s, Variant, VariantDef(name="Base", position=0, factors=[]))
        catalog.create_named(s, Workload, WorkloadDef(name="tiny-a", runner="torch-llm"))


def _finish_study(database: Database, outcomes: list[str]) -> int:
    """A study of len(outcomes) runs, each finished through ingest (the dispatcher's path)."""
    plan = StudyPlan.model_validate(
        {"release": REF, "cluster": "cpu-1", "variants": ["Base"], "workloads": ["tiny-a"],
         "repeats": len(outcomes), "order_seed": 1}
    )  # fmt: skip
    with database.transaction() as s:
        study_id = studies.create_study(s, plan).id
    with database.transaction() as s:
        runs = s.scalars(select(Run).where(Run.study_id == study_id).order_by(Run.queue_order)).all()
        for run, outcome in zip(runs, outcomes, strict=True):
            metrics = {"throughput_tokens_per_s": (100.0, "tokens/s")} if outcome == "succeeded" else {}
            result = RunResult(outcome, metrics=metrics, error=None if outcome == "succeeded" else "boom")
            ingest.record_run_result(s, run, result)
    return study_id


def test_study_finished_and_failed_are_delivered_signed(
    hooked: LiveServer, admin: httpx.Client, receiver: Receiver
) -> None:
    hook = add_hook(admin, receiver.url, ["study.finished", "study.failed"])
    _catalog(hooked.database)
    finished = _finish_study(hooked.database, ["succeeded", "succeeded"])
    failed = _finish_study(hooked.database, ["succeeded", "failed"])
    got = {r.headers["x-ablate-event"]: r for r in receiver.wait_for(2)}
    ok = check_headers(got["study.finished"], "study.finished")
    assert ok["study"]["id"] == finished and ok["study"]["status"] == "succeeded"
    assert ok["study"]["runs"] == {"succeeded": 2} and ok["study"]["release"] == REF
    assert ok["study"]["url"].endswith(f"/studies/{finished}") and "2 run(s) succeeded" in ok["text"]
    bad = check_headers(got["study.failed"], "study.failed")
    assert bad["study"]["id"] == failed and "1 of 2 run(s) failed" in bad["text"]
    wait_until(lambda: settled(hooked.database), what="outbox drained")
    history = deliveries(admin, hook["id"])
    assert [d["event"] for d in history] == ["study.failed", "study.finished"]  # newest first
    for d in history:
        assert d["status"] == "delivered" and d["attempts"] == 1 and d["last_status_code"] == 200
        assert [a["status_code"] for a in d["history"]] == [200] and d["body"]["delivery"] == d["delivery_id"]
    assert len(receiver.received) == 2  # each event once


def _seed_regression(admin: httpx.Client) -> None:
    create_release(admin, tag="25.11", release_date="2025-11-15")
    create_release(admin)
    results = []
    for position, (variant, sides) in enumerate(CELLS.items()):
        for ref, values in zip((BASELINE, REF), sides, strict=True):
            results += [
                result(
                    release=ref,
                    variant={"name": variant, "position": position, "factors": []},
                    metrics={"throughput_tokens_per_s": value},
                    series={},
                )
                for value in values
            ]
    response = admin.post("/results", json={"results": results})
    assert response.status_code == 201, response.text


def test_a_regression_and_its_resolution_are_announced_once(
    hooked: LiveServer, admin: httpx.Client, receiver: Receiver
) -> None:
    hook = add_hook(admin, receiver.url, ["release.regression", "release.resolved"])
    _seed_regression(admin)
    [item] = receiver.wait_for(1, event="release.regression")
    body = check_headers(item, "release.regression")
    assert body["release"]["ref"] == REF and body["release"]["baseline"] == BASELINE
    [cell] = body["cells"]  # the clear 10% drop; the suspect and the noisy gain are not regressions
    assert (cell["variant"], cell["metric"]) == ("Base", "throughput_tokens_per_s")
    assert cell["change_pct"] == pytest.approx(-9.99, abs=0.01) and cell["q_value"] < 0.05
    assert cell["ci_low_pct"] < cell["change_pct"] < cell["ci_high_pct"] < 0
    assert f"{REF} regressed against {BASELINE} in 1 cell(s)" in body["text"] and "-9.99%" in body["text"]
    wait_until(lambda: settled(hooked.database), what="verdicts checked")
    # More results of the release that change nothing: no second announcement.
    steady = [result(release=REF, variant="AC2+ACCL", metrics={"throughput_tokens_per_s": 1001.0}, series={})]
    assert admin.post("/results", json={"results": steady}).status_code == 201
    wait_until(lambda: settled(hooked.database), what="verdicts checked")
    assert len(receiver.received) == 1
    # The cell's release side brought back within the threshold: resolved.
    back = [
        result(release=REF, variant="Base", metrics={"throughput_tokens_per_s": v}, series={})
        for v in [1000.0, 1001.0, 999.0, 1002.0] * 5
    ]
    assert admin.post("/results", json={"results": back}).status_code == 201
    [gone] = receiver.wait_for(1, event="release.resolved")
    resolved = check_headers(gone, "release.resolved")
    assert [(c["variant"], c["metric"]) for c in resolved["cells"]] == [("Base", "throughput_tokens_per_s")]
    assert "1 regression(s) resolved" in resolved["text"]
    wait_until(lambda: settled(hooked.database), what="verdicts checked")
    assert len(receiver.received) == 2
    assert {d["event"] for d in deliveries(admin, hook["id"])} == {"release.regression", "release.resolved"}


def test_receiver_errors_are_retried_with_backoff_then_given_up(db_url: str, receiver: Receiver) -> None:
    receiver.statuses = [500, 503, 200]
    with start_live_server(db_url, settings={**FAST, "webhook_max_attempts": 3}) as server:
        token = make_token(server.database, "hook-admin", "admin")
        with httpx.Client(base_url=server.api, timeout=30.0, headers=auth(token)) as admin:
            hook = add_hook(admin, receiver.url, ["study.finished", "study.failed"])
            _catalog(server.database)
            _finish_study(server.database, ["succeeded"])
            tries = receiver.wait_for(3)
            ids = {t.headers["x-ablate-delivery"] for t in tries}
            assert len(ids) == 1 and len({t.body for t in tries}) == 1  # the same delivery, same bytes
            # the second attempt waited at least the first backoff, the third twice that
            assert tries[1].at - tries[0].at >= 0.2 and tries[2].at - tries[1].at >= 0.4
            wait_until(lambda: settled(server.database), what="outbox drained")
            [d] = deliveries(admin, hook["id"])
            assert d["status"] == "delivered" and d["attempts"] == 3
            assert [a["status_code"] for a in d["history"]] == [500, 503, 200]
            assert d["history"][0]["error"].startswith("HTTP 500")
            # A receiver that never answers 2xx: given up after webhook_max_attempts, with the errors kept.
            receiver.statuses = [500] * 3
            _finish_study(server.database, ["failed"])
            wait_until(lambda: settled(server.database), what="outbox drained")
            latest = deliveries(admin, hook["id"])[0]
            assert latest["event"] == "study.failed" and latest["status"] == "failed"
            assert latest["attempts"] == 3 and [a["status_code"] for a in latest["history"]] == [500] * 3
            assert len(receiver.received) == 6


def test_a_private_target_is_refused_again_at_delivery(database: Database, receiver: Receiver) -> None:
    """A webhook made while private targets were allowed, delivered by a worker that refuses them:
    the attempt fails naming the reason, and the receiver gets nothing."""
    with database.transaction() as s:
        subscriptions.create_webhook(
            s, url=receiver.url, secret=SECRET, events=["study.finished"], description=None,
            created_by=None, allow_private=True,
        )  # fmt: skip
    _catalog(database)
    _finish_study(database, ["succeeded"])
    cfg = Settings(database_url="", webhook_backoff_s=0.2, webhook_max_attempts=1)
    worker = WebhookWorker(cfg, database)
    assert worker.deliver_due() == 1
    with database.read() as s:
        [row] = s.scalars(select(WebhookDelivery)).all()
    assert row.status == "failed" and row.last_status_code is None
    assert "loopback" in (row.last_error or "") and "ABLATE_WEBHOOK_ALLOW_PRIVATE" in (row.last_error or "")
    assert receiver.received == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(db_url: str, data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ABLATE_DATABASE_URL": db_url,
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_WEBHOOK_ALLOW_PRIVATE": "true",
        "ABLATE_WEBHOOK_POLL_S": "0.1",
        "ABLATE_WEBHOOK_TIMEOUT_S": "10",
        "ABLATE_WEBHOOK_LEASE_S": "11",
        "ABLATE_LOG_LEVEL": "warning",
    }
    ablate = str(Path(sys.executable).with_name("ablate"))
    proc = subprocess.Popen(
        [ablate, "serve", "--no-dispatcher", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ablate serve exited during start-up"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)  # polling the port until the server answers
    proc.kill()
    raise AssertionError("ablate serve was not ready within 60 s")


def test_a_server_killed_mid_delivery_sends_the_event_again_under_the_same_id(
    db_url: str, database: Database, receiver: Receiver, tmp_path: Path
) -> None:
    port = _free_port()
    token = make_token(database, "hook-admin", "admin")
    server = _serve(db_url, tmp_path, port)
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        body = {"url": receiver.url, "secret": SECRET, "events": ["study.finished"]}
        created = httpx.post(f"{api}/webhooks", json=body, headers=auth(token), timeout=30)
        assert created.status_code == 201, created.text
        receiver.hold()  # the first delivery reaches the receiver and gets no answer
        _catalog(database)
        _finish_study(database, ["succeeded"])
        assert receiver.wait_held(60), "the delivery never arrived"
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        with database.read() as s:
            [row] = s.scalars(select(WebhookDelivery)).all()
        assert row.status == "pending" and row.attempts == 1 and row.lease_owner is not None
        receiver.release()
        server = _serve(db_url, tmp_path, port)  # leases end after 11 s: the new server sends it again
        first, again = receiver.wait_for(2, timeout_s=120)
        assert first.headers["x-ablate-delivery"] == again.headers["x-ablate-delivery"] == row.delivery_id
        assert first.body == again.body and again.signature_ok(SECRET)
        wait_until(lambda: settled(database), what="outbox drained")
        with database.read() as s:
            [row] = s.scalars(select(WebhookDelivery)).all()
        assert row.status == "delivered" and row.attempts == 2
        assert [a["status_code"] for a in row.history] == [200]  # the killed attempt left no record
        assert len(receiver.received) == 2
    finally:
        server.kill()
        server.wait(30)


def test_the_webhook_commands_over_the_server(hooked: LiveServer, receiver: Receiver) -> None:
    from typer.testing import CliRunner

    from ablate.backend.cli.main import app

    runner = CliRunner()
    token = make_token(hooked.database, "hook-admin", "admin")
    remote = ["--server", hooked.url, "--token", token]
    # the secret from standard input (no echo, not in the shell's history)
    added = runner.invoke(
        app, ["webhook", "add", receiver.url, "-e", "study.finished", "--json", *remote], input=f"{SECRET}\n"
    )
    assert added.exit_code == 0, added.output
    hook = json.loads(added.stdout[added.stdout.index("{") :])
    assert hook["events"] == ["study.finished"] and SECRET not in added.stdout
    listed = runner.invoke(app, ["webhook", "list", *remote])
    assert listed.exit_code == 0 and receiver.url in listed.stdout and "study.finished" in listed.stdout
    _catalog(hooked.database)
    _finish_study(hooked.database, ["succeeded"])
    [item] = receiver.wait_for(1)
    wait_until(lambda: settled(hooked.database), what="outbox drained")
    shown = runner.invoke(app, ["webhook", "deliveries", str(hook["id"]), *remote])
    assert shown.exit_code == 0, shown.output
    assert item.headers["x-ablate-delivery"] in shown.stdout and "delivered" in shown.stdout
    submitter = make_token(hooked.database, "hook-ci", "submit")
    refused = runner.invoke(app, ["webhook", "list", "--server", hooked.url, "--token", submitter])
    assert refused.exit_code == 1 and "HTTP 403" in str(refused.exception)
    bad = runner.invoke(
        app, ["webhook", "add", receiver.url, "-e", "study.done", "--secret", SECRET, *remote]
    )
    assert bad.exit_code == 1 and "unknown event 'study.done'" in str(bad.exception)
    removed = runner.invoke(app, ["webhook", "remove", str(hook["id"]), *remote])
    assert removed.exit_code == 0 and f"removed webhook {hook['id']}" in removed.stdout
    again = runner.invoke(app, ["webhook", "remove", str(hook["id"]), *remote])
    assert again.exit_code == 1 and "does not exist" in str(again.exception)
