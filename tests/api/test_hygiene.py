"""Exclude/include runs, delete studies and releases, and the audit trail, over HTTP (both databases)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ablate.backend.db.models import AuditEvent
from tests.api.conftest import auth
from tests.api.helpers import REF, VARIANT, assert_problem, create_release, result, snapshot
from tests.api.test_studies import plan
from tests.support.live_server import LiveServer


def _submit(ci: httpx.Client, repeats: int = 2) -> list[int]:
    r = ci.post("/results", json={"results": [result(repeat=repeat) for repeat in range(repeats)]})
    assert r.status_code == 201, r.text
    return list(r.json()["run_ids"])


def _succeeded(client: httpx.Client) -> int:
    cells = client.get(f"/releases/{REF}/comparison").json()["cells"]
    return int(sum(c["succeeded"] for c in cells if c["variant"] == VARIANT["name"]))


def _audit_rows(live_server: LiveServer) -> int:
    with live_server.database.read() as s:
        return int(s.scalar(select(func.count()).select_from(AuditEvent)) or 0)


def test_exclude_include_round_trip_with_audit(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, client: httpx.Client
) -> None:
    create_release(admin)
    first, second = _submit(ci)
    r = admin.post(f"/runs/{first}/exclude", json={"reason": "  node 17 was throttling  "})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["run_id"], body["excluded"], body["exclusion_reason"]) == (
        first,
        True,
        "node 17 was throttling",
    )
    assert body["audit"]["actor"] == "test-admin" and body["audit"]["action"] == "exclude_run"
    assert body["audit"]["release"] == REF and body["audit"]["details"]["repeat"] == 0

    # still listed and shown, with the reason
    listed = {i["id"]: i for i in client.get("/runs").json()["items"]}
    assert listed[first]["exclusion_reason"] == "node 17 was throttling" and listed[first]["excluded_at"]
    assert listed[second]["excluded_at"] is None
    # the runs analyses read, and the excluded ones, as filters (where the dashboard's links land)
    kept = [i["id"] for i in client.get("/runs", params={"excluded": "false"}).json()["items"]]
    left_out = [i["id"] for i in client.get("/runs", params={"excluded": "true"}).json()["items"]]
    assert (kept, left_out) == ([second], [first])
    assert_problem(client.get("/runs", params={"excluded": "maybe"}), 422, loc="query.excluded")
    detail = client.get(f"/runs/{first}").json()
    assert detail["exclusion_reason"] == "node 17 was throttling"
    assert [e["action"] for e in detail["exclusions"]] == ["exclude_run"]
    # and gone from the analysis
    assert _succeeded(client) == 1

    assert_problem(admin.post(f"/runs/{first}/exclude", json={"reason": "again"}), 409, loc="run_id")
    r = admin.post(f"/runs/{first}/include")  # no body: the reason is optional
    assert r.status_code == 200, r.text
    assert (r.json()["excluded"], r.json()["audit"]["reason"]) == (False, None)
    assert_problem(admin.post(f"/runs/{first}/include", json={"reason": "again"}), 409, loc="run_id")
    r = admin.post(f"/runs/{first}/exclude", json={"reason": "second look: really bad"})
    assert r.status_code == 200
    r = admin.post(f"/runs/{first}/include", json={"reason": "the node was fine"})
    assert r.json()["audit"]["reason"] == "the node was fine"
    assert _succeeded(client) == 2

    # the audit: newest first, filtered, paged with a cursor
    page = client.get("/audit", params={"run_id": first, "limit": 3}).json()
    assert [e["action"] for e in page["items"]] == ["include_run", "exclude_run", "include_run"]
    rest = client.get("/audit", params={"run_id": first, "limit": 3, "cursor": page["next_cursor"]}).json()
    assert [e["action"] for e in rest["items"]] == ["exclude_run"] and rest["next_cursor"] is None
    assert client.get("/audit", params={"run_id": second}).json()["items"] == []
    assert len(client.get("/audit", params={"release": REF}).json()["items"]) == 4
    assert client.get("/audit", params={"release": "other:1"}).json()["items"] == []
    assert_problem(client.get("/audit", params={"release": "no-tag"}), 422, loc="release")
    assert_problem(client.get("/audit", params={"cursor": "garbage"}), 422, loc="cursor")


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "   "}, "reason"),
        ({"reason": "two\nlines"}, "reason"),
        ({"reason": "bell\x07"}, "reason"),
        ({"reason": "x" * 1001}, "reason"),
        ({"reason": 5}, "reason"),
        ({"reason": "ok", "by": "me"}, "by"),
    ],
)
def test_bad_reasons_are_422_and_write_nothing(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, body: dict[str, Any], loc: str
) -> None:
    create_release(admin)
    (run_id,) = _submit(ci, 1)
    before = snapshot(live_server.database)
    assert_problem(admin.post(f"/runs/{run_id}/exclude", json=body), 422, loc=loc)
    if body:  # include's reason is optional, but a given one is checked the same way
        admin.post(f"/runs/{run_id}/exclude", json={"reason": "to include"})
        before = snapshot(live_server.database)
        audits = _audit_rows(live_server)
        assert_problem(admin.post(f"/runs/{run_id}/include", json=body), 422, loc=loc)
        assert _audit_rows(live_server) == audits
    else:
        assert _audit_rows(live_server) == 0
    assert snapshot(live_server.database) == before


def test_auth_unknown_ids_and_active_runs_are_refused_and_write_nothing(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, client: httpx.Client, submit_token: str
) -> None:
    create_release(admin)
    (run_id,) = _submit(ci, 1)
    study = admin.post("/studies", json=plan(repeats=1)).json()  # queued runs: no dispatcher here
    queued = study["runs"][0]["id"]
    before = snapshot(live_server.database)
    for method, path, body in (
        ("POST", f"/runs/{run_id}/exclude", {"reason": "x"}),
        ("POST", f"/runs/{run_id}/include", None),
        ("DELETE", f"/studies/{study['id']}", None),
        ("DELETE", f"/releases/{REF}", None),
    ):
        assert_problem(client.request(method, path, json=body), 401)
        assert_problem(client.request(method, path, json=body, headers=auth(submit_token)), 403)
    assert_problem(admin.post("/runs/999999/exclude", json={"reason": "x"}), 404, loc="run_id")
    assert_problem(admin.post("/runs/999999/include"), 404, loc="run_id")
    assert_problem(admin.delete("/studies/999999"), 404, loc="study_id")
    assert_problem(admin.delete("/releases/nothing:here"), 404, loc="ref")
    assert_problem(admin.delete("/releases/no-tag"), 422, loc="ref")
    refused = assert_problem(admin.post(f"/runs/{queued}/exclude", json={"reason": "x"}), 409)
    assert "queued" in refused["detail"]
    refused = assert_problem(admin.delete(f"/studies/{study['id']}"), 409)
    assert f"run {queued} (queued)" in refused["detail"] and "cancel" in refused["detail"]
    refused = assert_problem(admin.delete(f"/releases/{REF}"), 409)
    assert f"run {queued} (queued)" in refused["detail"]
    assert snapshot(live_server.database) == before and _audit_rows(live_server) == 0


def test_delete_study_then_release_answer_what_was_deleted(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, client: httpx.Client
) -> None:
    create_release(admin)
    ci_runs = _submit(ci, 2)
    study = admin.post("/studies", json=plan(repeats=1)).json()
    assert admin.post(f"/studies/{study['id']}/cancel").status_code == 200
    r = admin.delete(f"/studies/{study['id']}")
    assert r.status_code == 200, r.text
    n = len(study["runs"])
    assert r.json()["deleted"] == {
        "studies": 1,
        "runs": n,
        "run_metrics": 0,
        "run_series": 0,
        "run_series_levels": 0,
    }
    assert r.json()["audit"]["study_id"] == study["id"]
    assert_problem(client.get(f"/studies/{study['id']}"), 404)
    assert sorted(i["id"] for i in client.get("/runs").json()["items"]) == ci_runs

    r = admin.delete(f"/releases/{REF}")
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] == {
        "releases": 1,
        "studies": 0,
        "runs": 2,
        "run_metrics": 6,
        "run_series": 2,
        "run_series_levels": 0,
    }
    assert_problem(client.get(f"/releases/{REF}"), 404)
    assert client.get("/runs").json()["items"] == []
    assert_problem(admin.delete(f"/releases/{REF}"), 404)
    # the record outlives the release, with the run ids it removed
    trail = client.get("/audit", params={"release": REF}).json()["items"]
    assert [e["action"] for e in trail] == ["delete_release", "delete_study"]
    assert trail[0]["details"]["run_ids"] == ci_runs and trail[0]["actor"] == "test-admin"
    assert (
        client.get("/audit", params={"action": "delete_study"}).json()["items"][0]["study_id"] == study["id"]
    )
    # the same release can be created again, and its run list is not confused with the old one
    create_release(admin)
    (again,) = _submit(ci, 1)
    assert [i["id"] for i in client.get("/runs", params={"release": REF}).json()["items"]] == [again]
