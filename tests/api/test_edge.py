"""Hostile input at the edge: huge ids, control characters, deep or non-finite JSON, out-of-range
times, loose JSON types and huge metric values are refused with 4xx problem+json (never 500), write
nothing, and leave every page answering."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from ablate.backend.db.models import RunMetric
from tests.api.helpers import REF, RELEASE, VARIANT, assert_problem, create_release, result, snapshot
from tests.support.live_server import LiveServer

BIG = 2**31  # one past PostgreSQL's INTEGER
HUGE = 10**30


def _cursor(before: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": before}).encode()).decode().rstrip("=")


def _refused(response: httpx.Response) -> None:
    assert response.status_code in (404, 422), (response.request.url, response.status_code, response.text)
    assert "Traceback" not in response.text


@pytest.mark.parametrize("big", [BIG, HUGE])
def test_ids_beyond_the_integer_range_are_refused(
    live_server: LiveServer, client: httpx.Client, admin: httpx.Client, big: int
) -> None:
    """The 13 places of issue 14 (API and dashboard) answer 404/422 for ids at or above 2^31."""
    before = snapshot(live_server.database)
    api_reads = [
        f"/runs/{big}",
        f"/runs/{big}/series/step_time_s",
        f"/studies/{big}",
        f"/runs?study_id={big}",
        f"/runs?cursor={_cursor(big)}",
        f"/compare?baseline_study={big}&contender_study=1",
        f"/compare?baseline_runs=1,{big}&contender_runs=2",
    ]
    for path in api_reads:
        assert_problem(client.get(path), 422)
    for path in (f"/studies/{big}/cancel", f"/tokens/{big}/revoke"):
        assert_problem(admin.post(path), 422)
    for path in (
        f"/runs/{big}",
        f"/studies/{big}",
        f"/compare?baseline_study={big}&contender_study=1",
        f"/compare?baseline_runs={big}&contender_runs=1",
    ):
        _refused(httpx.get(live_server.url + path))
    # The largest possible id is simply not there.
    assert_problem(client.get(f"/runs/{BIG - 1}"), 404)
    assert_problem(client.get(f"/studies/{BIG - 1}"), 404)
    assert snapshot(live_server.database) == before


def test_control_characters_in_names_paths_and_queries(live_server: LiveServer, admin: httpx.Client) -> None:
    before = snapshot(live_server.database)
    for kind, body in (
        ("workloads", {"name": "w\u0000"}),
        ("variants", {"name": "v\x07"}),
        ("clusters", {"name": "c\n1", "accelerator": "gpu"}),
        ("variants", {"name": "ok", "env": {"A\u0000": "1"}}),
        ("variants", {"name": "ok", "runner_options": {"x": ["a\u0000b"]}}),
    ):
        body = assert_problem(admin.post(f"/{kind}", json=body), 422)
        assert "control characters" in body["detail"], body
    assert_problem(admin.post("/tokens", json={"name": "t\u0000", "scope": "read"}), 422)
    assert_problem(admin.post("/releases", json={**RELEASE, "tag": "25.12\u0000"}), 422)
    for path in (
        "/runs?variant=%00",
        "/runs?release=a%0Ab",
        "/releases/x%00:1",
        "/variants/a%00",
        "/compare?a=%00",
    ):
        assert_problem(admin.get(path), 422)
    for path in ("/runs/1%00", "/releases/x%00:1", "/?cluster=%00", "/compare?a=%00&b=x"):
        _refused(httpx.get(live_server.url + path))
    assert snapshot(live_server.database) == before


def test_control_bytes_in_a_log_tail_are_stored_escaped(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    failed = result(
        status="failed", metrics={}, series={}, error="boom\u0000", log_tail="step 1\u0000\x1b[0m\n"
    )
    response = ci.post("/results", json={"results": [failed]})
    assert response.status_code == 201, response.text
    run_id = response.json()["run_ids"][0]
    run = ci.get(f"/runs/{run_id}").json()
    assert run["log_tail"] == "step 1\ufffd\ufffd[0m\n" and run["error"] == "boom\ufffd"
    assert httpx.get(f"{live_server.url}/runs/{run_id}").status_code == 200


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_free_json_is_bounded_before_anything_is_written(
    live_server: LiveServer, admin: httpx.Client
) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    deep = assert_problem(admin.post("/variants", json={"name": "deep", "runner_options": _nested(260)}), 422)
    assert "nested deeper than 32 levels" in deep["detail"], deep
    wide = {"name": "wide", "runner_options": {"x": list(range(20_000))}}
    assert "10000 values" in assert_problem(admin.post("/variants", json=wide), 422)["detail"]
    assert_problem(admin.patch(f"/releases/{REF}", json={"manifest": {"deep": _nested(40)}}), 422)
    assert_problem(admin.post("/releases", json={**RELEASE, "tag": "26.01", "manifest": {"n": 10**30}}), 422)
    # Non-finite numbers inside a manifest: NaN, Infinity and a literal beyond float64.
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        raw = json.dumps({**RELEASE, "tag": "26.02", "manifest": {"torch": "__X__"}}).replace(
            '"__X__"', literal
        )
        response = admin.post("/releases", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code in (400, 422), (literal, response.text)
        assert_problem(response, response.status_code)
    assert snapshot(live_server.database) == before
    # A variant nested within the bound is stored and read back; the lists stay readable for everyone.
    ok = admin.post("/variants", json={"name": "nested-ok", "runner_options": _nested(30)})
    assert ok.status_code == 201, ok.text
    assert admin.get("/variants").status_code == 200 and admin.get("/releases").status_code == 200


def test_times_outside_the_storable_range(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    for stamp in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z"):
        body = assert_problem(ci.post("/results", json={"results": [result(started_at=stamp)]}), 422)
        assert body["errors"][0]["loc"] == "results[0].started_at", body
    assert snapshot(live_server.database) == before


def test_json_types_are_strict(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    for bad in (
        {"metrics": {"throughput_tokens_per_s": "123"}},
        {"metrics": {"throughput_tokens_per_s": True}},
        {"metrics": {"custom": {"value": "1.5", "unit": "tokens/s"}}},
        {"repeat": "1"},
        {"repeat": 1.0},
        {"series": {"step_time_s": {"steps": [1, "2"], "values": [1.0, 2.0]}}},
        {"series": {"step_time_s": {"steps": [1, 2], "values": [1.0, False]}}},
        {"provenance": {"n": "ok", "m": [1]}},
    ):
        assert_problem(ci.post("/results", json={"results": [result(**bad)]}), 422)
    for cluster in (
        {"nodes": "2"},
        {"nodes": True},
        {"devices_per_node": 8.0},
        {"peak_tflops_per_device": "9"},
    ):
        body = {"name": "c", "accelerator": "gpu", **cluster}
        assert_problem(admin.post("/clusters", json=body), 422)
    assert_problem(admin.post("/variants", json={**VARIANT, "position": "1"}), 422)
    assert snapshot(live_server.database) == before
    # Integers are still numbers where a float is expected.
    ok = ci.post("/results", json={"results": [result(metrics={"throughput_tokens_per_s": 412345})]})
    assert ok.status_code == 201, ok.text


def _two_releases_with_results(admin: httpx.Client, ci: httpx.Client) -> str:
    """REF and a later release, three ordinary results each; the later release's ref."""
    create_release(admin)
    create_release(admin, tag="26.01")
    new = "training-nv-pytorch:26.01"
    for release, speed in ((REF, 4e5), (new, 4.2e5)):
        good = [
            result(
                release=release, repeat=i, metrics={"throughput_tokens_per_s": speed + i, "step_time_s": 5.0}
            )
            for i in range(3)
        ]
        assert ci.post("/results", json={"results": good}).status_code == 201
    return new


def _assert_pages_answer(live_server: LiveServer, ci: httpx.Client, new: str) -> None:
    """Home, releases, the release page, /compare, the comparison and every report format: 200."""
    ref = quote(new, safe=":")
    for path in ("/", "/releases", f"/releases/{ref}", f"/compare?a={quote(REF, safe=':')}&b={ref}"):
        assert httpx.get(live_server.url + path).status_code == 200, path
    assert ci.get(f"/releases/{ref}/comparison").status_code == 200
    for fmt in ("html", "md", "csv", "json"):
        assert ci.get(f"/releases/{ref}/report?format={fmt}").status_code == 200, fmt


def test_huge_metric_values_are_refused_and_pages_keep_answering(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    new = _two_releases_with_results(admin, ci)
    before = snapshot(live_server.database)
    for bad in (
        result(repeat=5, metrics={"throughput_tokens_per_s": 1e308}),
        result(repeat=5, metrics={"custom_rate": {"value": -1e300, "unit": "1", "better": "lower"}}),
        result(repeat=5, series={"step_time_s": {"steps": [1, 2], "values": [5.0, 1e16]}}),
    ):
        body = assert_problem(ci.post("/results", json={"results": [bad, bad | {"repeat": 6}]}), 422)
        assert "within ±1e+15" in body["detail"], body
    assert snapshot(live_server.database) == before
    _assert_pages_answer(live_server, ci, new)


def test_huge_values_stored_before_the_bound_keep_every_page_answering(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    """Rows from before the contract bounded values (or written by hand): 1e308 is finite and analysable."""
    new = _two_releases_with_results(admin, ci)
    with live_server.database.transaction() as session:
        session.execute(
            sa.update(RunMetric)
            .where(RunMetric.name == "throughput_tokens_per_s", RunMetric.value > 4.1e5)
            .values(value=1e308)
        )
    _assert_pages_answer(live_server, ci, new)


def test_series_packing_keeps_every_refusal_and_free_objects_intact(
    live_server: LiveServer, admin: httpx.Client
) -> None:
    """The results parser packs step series into arrays as it reads; what it cannot pack keeps the
    schema's exact errors, and a free object shaped like a series is stored as the lists it was."""
    admin_results = httpx.Client(base_url=live_server.api, headers=admin.headers, timeout=30)
    for series, loc in (
        ({"steps": [1, "2"], "values": [1.0, 2.0]}, "results[0].series.step_time_s.steps[1]"),
        ({"steps": [1, 2], "values": [1.0, True]}, "results[0].series.step_time_s.values[1]"),
        ({"steps": [1, 2**70], "values": [1.0, 2.0]}, "results[0].series.step_time_s"),
    ):
        response = admin_results.post("/results", json={"results": [result(series={"step_time_s": series})]})
        assert_problem(response, 422, loc=loc)
    # driver_requirements is a free object (the manifest holds version strings only).
    free = {"shape": {"steps": [1, 2], "values": [3.5, 4.0]}}
    release = {**RELEASE, "driver_requirements": free}
    response = admin_results.post("/results", json={"results": [result(release=release)]})
    assert response.status_code == 201, response.text
    stored = admin.get(f"/releases/{REF}").json()
    assert stored["driver_requirements"] == free
    run = admin.get(f"/runs/{response.json()['run_ids'][0]}/series/step_time_s").json()
    assert run["steps"] == [1, 2, 3] and run["values"] == [5.3, 5.1, 5.08]
    admin_results.close()
