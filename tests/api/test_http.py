"""HTTP concerns: problem+json for 404/405, the body cap, probes, /metrics, OpenAPI and docs."""

from __future__ import annotations

import httpx

from tests.api.conftest import auth, make_token
from tests.api.helpers import assert_problem, create_release, result, snapshot
from tests.support.live_server import LiveServer, start_live_server


def test_unknown_route_and_method_are_problems(live_server: LiveServer, client: httpx.Client) -> None:
    assert_problem(client.get("/nothing-here"), 404)
    # outside /api/v1 the dashboard answers 404 with a page; never a stack trace either way
    outside = httpx.get(f"{live_server.url}/nope")
    assert outside.status_code == 404 and "Traceback" not in outside.text
    assert_problem(client.delete("/runs"), 405)
    assert_problem(client.put("/results", json={}), 405)


def test_body_cap_by_content_length_and_by_stream(db_url: str) -> None:
    with start_live_server(db_url, settings={"max_body_bytes": 2048}) as server:
        big = b'{"results": [' + b" " * 4096 + b"]}"
        token = make_token(server.database, "admin", "admin")
        before = snapshot(server.database)
        with httpx.Client(base_url=server.api, timeout=10, headers=auth(token)) as c:
            r = c.post("/results", content=big, headers={"Content-Type": "application/json"})
            body = assert_problem(r, 413)
            assert "2048" in body["detail"]

            def chunks():  # no Content-Length: the cap counts what streams in
                for _ in range(8):
                    yield b" " * 512

            assert_problem(
                c.post("/results", content=chunks(), headers={"Content-Type": "application/json"}), 413
            )
            assert_problem(
                c.post("/releases", content=chunks(), headers={"Content-Type": "application/json"}), 413
            )
            assert c.get("/runs").status_code == 200  # the server is fine afterwards
        assert snapshot(server.database) == before


def test_probes_and_metrics(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    assert httpx.get(f"{live_server.url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{live_server.url}/readyz").json()["status"] == "ready"
    create_release(admin)
    ci.post("/results", json={"results": [result(), result(repeat=1, status="failed", metrics={})]})
    ci.get("/runs/12345")
    text = httpx.get(f"{live_server.url}/metrics").text
    assert 'ablate_runs{status="succeeded"} 1.0' in text and 'ablate_runs{status="failed"} 1.0' in text
    assert 'ablate_runs{status="queued"} 0.0' in text
    assert 'ablate_http_requests_total{method="POST",route="/api/v1/results",status="201"} 1.0' in text
    assert 'route="/api/v1/runs/{run_id}",status="404"' in text
    assert "ablate_http_request_duration_seconds_bucket" in text


def test_openapi_and_docs(live_server: LiveServer) -> None:
    spec = httpx.get(f"{live_server.url}/api/v1/openapi.json").json()
    assert "/api/v1/results" in spec["paths"] and "/api/v1/runs/{run_id}/series/{metric}" in spec["paths"]
    body = spec["paths"]["/api/v1/results"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ResultsBatch"}
    assert "ResultIn" in spec["components"]["schemas"]
    docs = httpx.get(f"{live_server.url}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
