"""Run routes over HTTP: filters, cursor paging, detail, series with downsampling."""

from __future__ import annotations

import math

import httpx

from tests.api.helpers import assert_problem, create_release, result
from tests.support.live_server import LiveServer


def _seed(admin: httpx.Client, ci: httpx.Client) -> list[int]:
    create_release(admin)
    create_release(admin, image="training-xpu-pytorch", tag="26.01", platform="ppu")
    other = {"name": "ppu-1x16", "accelerator": "ppu", "nodes": 1, "devices_per_node": 16}
    results = [result(repeat=i) for i in range(5)]
    results += [result(release="training-xpu-pytorch:26.01", cluster=other, repeat=i) for i in range(3)]
    results.append(result(repeat=9, status="failed", metrics={}, error="OOM", failure_kind="benchmark"))
    r = ci.post("/results", json={"results": results})
    assert r.status_code == 201, r.text
    return r.json()["run_ids"]


def test_list_filters_and_cursor_paging(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    ids = _seed(admin, ci)
    page = ci.get("/runs").json()
    assert [i["id"] for i in page["items"]] == sorted(ids, reverse=True) and page["next_cursor"] is None
    item = page["items"][-1]
    assert (
        item["metrics"]["throughput_tokens_per_s"] == 412345.0
        and item["release"] == "training-nv-pytorch:25.12"
    )
    collected, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = ci.get("/runs", params=params).json()
        collected += [i["id"] for i in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert collected == sorted(ids, reverse=True)
    by = lambda **p: [i["id"] for i in ci.get("/runs", params=p).json()["items"]]  # noqa: E731
    assert len(by(release="training-xpu-pytorch:26.01")) == 3
    assert len(by(cluster="ppu-1x16")) == 3 and len(by(cluster="h200-2x8")) == 6
    assert len(by(variant="AC2+ACCL+CompilerOpt", workload="deepspeed/llama3-8b")) == 9
    assert by(status="failed") == [ids[-1]] and by(source="ci") == sorted(ids, reverse=True)
    assert by(source="scheduled") == [] and by(cluster="nowhere") == []
    assert_problem(ci.get("/runs", params={"cursor": "garbage!"}), 422, loc="cursor")
    assert_problem(ci.get("/runs", params={"status": "done"}), 422)
    assert_problem(ci.get("/runs", params={"limit": 0}), 422)


def test_detail_and_failed_run(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    ids = _seed(admin, ci)
    failed = ci.get(f"/runs/{ids[-1]}").json()
    assert failed["status"] == "failed" and failed["error"] == "OOM" and failed["failure_kind"] == "benchmark"
    assert failed["metrics"] == [] and failed["progress"] is None
    ok = ci.get(f"/runs/{ids[0]}").json()
    assert ok["progress"] == 1.0 and ok["latest_throughput"] == 412345.0
    assert_problem(ci.get("/runs/999999"), 404, loc="run_id")
    assert_problem(ci.get("/runs/abc"), 422)


def test_series_downsampled_keeps_shape(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    n = 20_000
    values = [1.0 + 0.1 * math.sin(i / 50) for i in range(n)]
    values[12_345] = 9.0  # a spike must survive
    values[777] = 0.01
    r = ci.post(
        "/results", json={"results": [result(series={"loss": {"steps": list(range(n)), "values": values}})]}
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["run_ids"][0]
    full = ci.get(f"/runs/{run_id}/series/loss").json()
    assert (
        full["n_points"] == n and len(full["values"]) == n and not full["downsampled"] and full["unit"] == "1"
    )
    small = ci.get(f"/runs/{run_id}/series/loss", params={"max_points": 300}).json()
    assert small["downsampled"] and len(small["values"]) <= 300 and small["n_points"] == n
    assert small["steps"][0] == 0 and small["steps"][-1] == n - 1
    assert max(small["values"]) == 9.0 and min(small["values"]) == 0.01
    assert_problem(ci.get(f"/runs/{run_id}/series/nothing"), 404, loc="metric")
    assert_problem(ci.get("/runs/999999/series/loss"), 404, loc="run_id")
    assert_problem(ci.get(f"/runs/{run_id}/series/loss", params={"max_points": 2}), 422)
