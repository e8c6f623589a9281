from __future__ import annotations

import httpx

from tests.api.helpers import REF, create_release, result


def test_submit_and_read(admin: httpx.Client, ci: httpx.Client) -> None:
    create_release(admin)
    r = ci.post("/results", json={"results": [result()]}, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 201, r.text
    ids = r.json()["run_ids"]
    again = ci.post("/results", json={"results": [result()]}, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.json()["run_ids"] == ids
    run = ci.get(f"/runs/{ids[0]}").json()
    assert run["release"] == REF
    page = ci.get("/runs").json()
    assert [i["id"] for i in page["items"]] == ids
