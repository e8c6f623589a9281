"""Tokens and scopes: 401 without or with a bad/revoked token, 403 without the scope; closed reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select, update

from ablate.backend.db.models import ApiToken
from tests.api.conftest import auth, make_token
from tests.api.helpers import RELEASE, assert_problem, snapshot
from tests.support.live_server import LiveServer, start_live_server


def test_token_admin_api(live_server: LiveServer, admin: httpx.Client, client: httpx.Client) -> None:
    r = admin.post("/tokens", json={"name": "ci-nv", "scope": "submit"})
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["secret"]
    assert secret.startswith("abl_") and created["scope"] == "submit"
    listed = admin.get("/tokens").json()
    assert {t["name"] for t in listed} == {"test-admin", "ci-nv"}
    assert all("secret" not in t and "secret_hash" not in t for t in listed)
    with live_server.database.read() as s:
        stored = s.scalars(select(ApiToken).where(ApiToken.name == "ci-nv")).one()
        assert secret not in (stored.secret_hash, stored.name) and len(stored.secret_hash) == 64
    # the new token works, is remembered as used, and stops working once revoked
    assert client.get("/runs", headers=auth(secret)).status_code == 200
    with live_server.database.read() as s:
        assert s.scalars(select(ApiToken.last_used_at).where(ApiToken.name == "ci-nv")).one() is not None
    before = snapshot(live_server.database)
    assert_problem(admin.post("/tokens", json={"name": "ci-nv", "scope": "submit"}), 409, loc="name")
    assert_problem(admin.post("/tokens", json={"name": "x", "scope": "root"}), 422, loc="scope")
    assert_problem(client.post("/tokens", json={"name": "x", "scope": "read"}, headers=auth(secret)), 403)
    assert_problem(client.get("/tokens"), 401)
    assert snapshot(live_server.database) == before
    revoked = admin.post(f"/tokens/{created['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert_problem(client.get("/runs", headers=auth(secret)), 401)
    assert_problem(admin.post("/tokens/999/revoke"), 404)


def test_catalog_writes_need_admin(live_server: LiveServer, client: httpx.Client, submit_token: str) -> None:
    before = snapshot(live_server.database)
    assert_problem(client.post("/releases", json=RELEASE), 401)
    assert_problem(client.post("/releases", json=RELEASE, headers=auth(submit_token)), 403)
    assert_problem(
        client.post("/clusters", json={"name": "c", "accelerator": "cpu"}, headers=auth(submit_token)), 403
    )
    assert_problem(client.patch("/releases/a:b", json={}, headers=auth("abl_nope")), 401)
    assert snapshot(live_server.database) == before
    assert client.get("/releases").status_code == 200  # reads are open by default


def test_reads_can_be_closed(db_url: str) -> None:
    with start_live_server(db_url, settings={"read_requires_token": True}) as server:
        reader = make_token(server.database, "reader", "read")
        with httpx.Client(base_url=server.api, timeout=10) as c:
            assert_problem(c.get("/runs"), 401)
            assert_problem(c.get("/releases"), 401)
            assert c.get("/runs", headers=auth(reader)).status_code == 200
            assert_problem(c.post("/releases", json=RELEASE, headers=auth(reader)), 403)
        assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_tokens_may_expire(live_server: LiveServer, admin: httpx.Client, client: httpx.Client) -> None:
    r = admin.post("/tokens", json={"name": "ci-week", "scope": "submit", "expires_in": "7d"})
    assert r.status_code == 201, r.text
    created = r.json()
    expires = datetime.fromisoformat(created["expires_at"])
    assert timedelta(days=7) - timedelta(minutes=5) < expires - datetime.now(UTC) <= timedelta(days=7)
    assert client.get("/runs", headers=auth(created["secret"])).status_code == 200
    forever = admin.post("/tokens", json={"name": "ci-forever", "scope": "read"}).json()
    assert forever["expires_at"] is None
    # a week later (moved in the database rather than waited for): refused, saying why
    with live_server.database.transaction() as s:
        s.execute(
            update(ApiToken)
            .where(ApiToken.name == "ci-week")
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    refused = client.get("/runs", headers=auth(created["secret"]))
    assert_problem(refused, 401)
    assert "the token 'ci-week' expired at " in refused.text and " UTC" in refused.text, refused.text
    assert client.get("/runs", headers=auth(forever["secret"])).status_code == 200
    before = snapshot(live_server.database)
    for bad in ("0d", "30", "1y", "-1d", "3 days", "99999w", "٣d"):
        assert_problem(
            admin.post("/tokens", json={"name": "x", "scope": "read", "expires_in": bad}),
            422,
            loc="expires_in",
        )
    assert snapshot(live_server.database) == before
