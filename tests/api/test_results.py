"""POST /results over HTTP: the contract's success path, idempotency, and every refusal storing nothing."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from ablate.backend.api.routes.results import _misread, _parse, _parse_simd, _raw_brackets
from ablate.backend.db.models import Cluster, Run, RunMetric, RunSeries
from ablate.backend.schemas.results import ResultsBatch, compact_series
from tests.api.conftest import auth, make_token
from tests.api.helpers import CLUSTER, REF, RELEASE, assert_problem, create_release, result, snapshot
from tests.support.live_server import LiveServer, start_live_server


def test_contract_example_is_stored(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    create_release(admin)
    r = ci.post("/results", json={"results": [result(repeat=0), result(repeat=1)]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["created"] is True and len(body["run_ids"]) == 2
    run = ci.get(f"/runs/{body['run_ids'][0]}").json()
    assert run["release"] == REF and run["cluster"] == "h200-2x8" and run["variant"] == "AC2+ACCL+CompilerOpt"
    assert run["source"] == "ci" and run["status"] == "succeeded" and run["repeat"] == 0
    assert {m["name"]: (m["value"], m["unit"]) for m in run["metrics"]} == {
        "peak_memory_gib": (61.2, "GiB"),
        "step_time_s": (5.08, "s"),
        "throughput_tokens_per_s": (412345.0, "tokens/s"),
    }
    assert run["series"] == [{"metric": "step_time_s", "n_points": 3, "min": 5.08, "max": 5.3, "last": 5.08}]
    assert run["provenance"] == {"host": "node-17", "driver": "580.65", "torch": "2.9.0"}
    assert run["started_at"].startswith("2026-12-01T10:00:00")
    series = ci.get(f"/runs/{body['run_ids'][0]}/series/step_time_s").json()
    assert series["steps"] == [1, 2, 3] and series["values"] == [5.3, 5.1, 5.08] and series["unit"] == "s"
    # once known, entries may be named alone; custom metrics state their unit
    by_name = result(cluster="h200-2x8", workload="deepspeed/llama3-8b", variant="AC2+ACCL+CompilerOpt")
    by_name["metrics"]["grad_norm"] = {"value": 0.8, "unit": "1", "better": "lower"}
    r2 = ci.post("/results", json={"results": [by_name]})
    assert r2.status_code == 201, r2.text
    with live_server.database.read() as s:
        assert s.scalar(select(func.count()).select_from(Cluster)) == 1
        assert s.scalar(select(func.count()).select_from(Run)) == 3


def test_same_idempotency_key_returns_first_ids_and_writes_nothing(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    payload = {"results": [result(), result(repeat=1)]}
    first = ci.post("/results", json=payload, headers={"Idempotency-Key": "ci-job-42"})
    assert first.status_code == 201
    before = snapshot(live_server.database)
    again = ci.post("/results", json=payload, headers={"Idempotency-Key": "ci-job-42"})
    assert again.status_code == 200, again.text
    assert again.json() == {"run_ids": first.json()["run_ids"], "created": False}
    assert snapshot(live_server.database) == before
    # per-result keys work without the header
    keyed = {"results": [result(repeat=5, idempotency_key="r5")]}
    one = ci.post("/results", json=keyed)
    two = ci.post("/results", json=keyed)
    assert (one.status_code, two.status_code) == (201, 200)
    assert one.json()["run_ids"] == two.json()["run_ids"]


def _bad(mutate: Any) -> dict[str, Any]:
    payload = {"results": [result(), result(repeat=1), result(repeat=2), result(repeat=3)]}
    mutate(payload["results"][3])
    return payload


def _set(path: str, value: Any) -> Any:
    def mutate(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = r
        for p in parents:
            node = node[p]
        node[last] = value

    return mutate


def _drop(field: str) -> Any:
    return lambda r: r.pop(field)


BAD_INPUTS = [
    # (id, mutation of results[3], status, loc)
    ("missing-field", _drop("workload"), 422, "results[3].workload"),
    ("unknown-field", _set("thruput", 1.0), 422, "results[3].thruput"),
    ("unknown-nested-field", _set("cluster.node", 2), 422, "results[3].cluster.node"),
    (
        "negative-throughput",
        _set("metrics.throughput_tokens_per_s", -5.0),
        422,
        "results[3].metrics.throughput_tokens_per_s",
    ),
    (
        "wrong-unit",
        _set("metrics.peak_memory_gib", {"value": 61.2, "unit": "MiB"}),
        422,
        "results[3].metrics.peak_memory_gib",
    ),
    ("custom-without-unit", _set("metrics.grad_norm", 0.5), 422, "results[3].metrics.grad_norm"),
    (
        "series-length-mismatch",
        _set("series.step_time_s", {"steps": [1, 2], "values": [1.0]}),
        422,
        "results[3].series.step_time_s",
    ),
    ("string-too-long", _set("provenance.host", "x" * 3000), 422, "results[3].provenance.host"),
    ("unknown-release", _set("release", "training-nv-pytorch:99.99"), 404, "results[3].release"),
    ("unknown-cluster-by-name", _set("cluster", "nowhere"), 404, "results[3].cluster"),
    ("conflicting-definition", _set("cluster.nodes", 4), 409, "results[3].cluster.nodes"),
    ("finished-before-started", _set("finished_at", "2026-12-01T09:00:00Z"), 422, "results[3].finished_at"),
    ("naive-timestamp", _set("started_at", "2026-12-01T10:00:00"), 422, "results[3].started_at"),
]


@pytest.mark.parametrize(
    ("mutate", "status", "loc"), [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_result_refuses_the_whole_batch(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, mutate: Any, status: int, loc: str
) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    response = ci.post("/results", json=_bad(mutate))
    body = assert_problem(response, status, loc=loc)
    assert loc in body["detail"]
    assert snapshot(live_server.database) == before


def test_nan_and_infinity_are_refused(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    for literal, where in (("NaN", "metrics.step_time_s"), ("Infinity", "series.step_time_s.values[1]")):
        text = json.dumps({"results": [result(), result(repeat=1)]})
        if where.startswith("metrics"):
            text = text.replace('"step_time_s": 5.08', f'"step_time_s": {literal}', 1)
        else:
            text = text.replace("[5.3, 5.1, 5.08]", f"[5.3, {literal}, 5.08]", 1)
        r = ci.post("/results", content=text, headers={"Content-Type": "application/json"})
        assert_problem(r, 422, loc=f"results[0].{where}")
    assert snapshot(live_server.database) == before


def test_integers_beyond_64_bits_are_refused_the_same_whatever_their_length(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    # orjson (bodies up to 1 MiB) reads both as floats; -2**63 - 1 has only 19 digits.
    create_release(admin)
    before = snapshot(live_server.database)
    details = []
    for big in (2**64, -(2**63) - 1):
        text = json.dumps({"results": [result()]})
        text = text.replace('"steps": [1, 2, 3]', f'"steps": [1, {big}, 3]', 1)
        assert str(big) in text
        r = ci.post("/results", content=text, headers={"Content-Type": "application/json"})
        details.append(
            assert_problem(r, 422, loc="results[0].series.step_time_s")["detail"].replace(str(big), "N")
        )
    assert details[0] == details[1]
    assert snapshot(live_server.database) == before


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else str(value)


def _outcome(parse: Any, body: bytes) -> Any:
    """What a parse gives, comparable: the batch as plain JSON values, or the schema's errors."""
    try:
        batch = parse(body)
    except ValidationError as exc:
        return exc.errors(include_url=False)
    return json.loads(json.dumps(batch.model_dump(mode="python", warnings=False), default=_plain))


def _by_json_module(body: bytes) -> ResultsBatch:
    return ResultsBatch.model_validate(json.loads(body, object_hook=compact_series))


@pytest.mark.parametrize("big", [2**64, -(2**63) - 1, 10**30, 2**64 - 1, -(2**63)])
@pytest.mark.parametrize("where", ["repeat", "metric", "provenance", "steps", "values"])
def test_long_integers_parse_as_the_json_module_reads_them(big: int, where: str) -> None:
    # orjson reads an integer beyond 64 bits as a float: such a parse goes the json module's way, and
    # whatever the way, the schema sees what the json module gives (exact integers).
    one = result()
    if where == "repeat":
        one["repeat"] = big
    elif where == "metric":
        one["metrics"]["step_time_s"] = big
    elif where == "provenance":
        one["provenance"]["build"] = big
    else:
        one["series"]["step_time_s"][where][1] = big
    body = json.dumps({"results": [one]}).encode()
    assert str(big) in body.decode()
    assert _outcome(lambda b: _parse([bytearray(b)]), body) == _outcome(_by_json_module, body)
    beyond = not -(2**63) <= big <= 2**64 - 1
    assert _misread(orjson.loads(body)) is beyond


def test_misread_looks_everywhere() -> None:
    assert _misread({"results": [result()]}) is False
    assert _misread({"a": [1, {"b": [2.0, -9.3e18]}]}) is True
    assert _misread({"a": np.array([1.0, 9.3e18])}) is True
    assert _misread({"a": np.array([1.0, -1e18]), "b": np.array([], dtype=np.float64)}) is False
    assert _misread([float("inf")]) is True
    assert _misread([2**70]) is False  # an exact integer is read right by both


_ODD = [
    0,
    1,
    -1,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64 - 1,
    2**64,
    10**400,
    0.0,
    1.0,
    -0.0,
    1.5,
    1e300,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    "1",
    [1],
    {"a": 1},
    2**53 + 1,
]


def _packed_by_types(obj: dict[str, Any]) -> bool:
    """Whether the series should become arrays: every step exactly an int within 64 bits signed, every
    value exactly an int or float that is finite as a float (the schema's Int and Float, strict)."""
    steps, values = obj["steps"], obj["values"]
    if not all(type(x) is int and -(2**63) <= x < 2**63 for x in steps):
        return False
    try:
        return all(type(x) in (int, float) and np.isfinite(float(x)) for x in values)
    except OverflowError:
        return False


def test_compact_series_packs_exactly_plain_numbers() -> None:
    rng = np.random.default_rng(7)
    for _ in range(3000):
        series: dict[str, Any] = {}
        for part in ("steps", "values"):
            n = int(rng.choice([0, 1, 3, 8]))
            items: list[Any] = (
                rng.integers(-3, 4, n).tolist() if rng.random() < 0.5 else rng.uniform(-2, 2, n).tolist()
            )
            for _ in range(int(rng.choice([0, 0, 1, 2]))):
                if items:
                    items[int(rng.integers(len(items)))] = _ODD[int(rng.integers(len(_ODD)))]
            series[part] = items
        out = compact_series(dict(series))
        packed = isinstance(out["steps"], np.ndarray)
        assert packed is _packed_by_types(series), series
        if packed:
            assert out["steps"].dtype == np.int64 and out["values"].dtype == np.float64
            assert out["steps"].tolist() == series["steps"]
            assert out["values"].tolist() == [float(v) for v in series["values"]]
        else:
            assert out == series


def _body(*results: dict[str, Any], escape: bool = False) -> bytes:
    """A batch as CI would send it; with ``escape``, each ``[`` inside a string written as ``\\u005b``."""
    text = json.dumps({"results": list(results)})
    if escape:
        text = text.replace('"[', '"\\u005b')
    return text.encode()


def test_simdjson_takes_plain_bodies_and_leaves_what_it_cannot_vouch_for() -> None:
    plain = _parse_simd(bytearray(_body(result(), result(log_tail="[rank0]: step 3 [ok]"))))
    assert plain is not None
    series = plain["results"][1]["series"]["step_time_s"]
    assert series["steps"].dtype == np.int64 and series["steps"].tolist() == [1, 2, 3]
    assert series["values"].dtype == np.float64 and series["values"].tolist() == [5.3, 5.1, 5.08]
    assert plain["results"][1]["log_tail"] == "[rank0]: step 3 [ok]"
    # as_buffer would flatten these into plain steps: the count of "[" gives them away
    for hidden in ([[1], [2], [3]], [[], [1, 2], [3]], [1, [2], 3]):
        nested = result(series={"step_time_s": {"steps": hidden, "values": [5.3, 5.1, 5.08]}})
        assert _parse_simd(bytearray(_body(nested))) is None
        # even beside an escaped "[" that decodes to one without being one
        assert _parse_simd(bytearray(_body(nested, result(log_tail="[x"), escape=True))) is None
    assert _parse_simd(bytearray(_body(result(log_tail="[x"), escape=True))) is not None
    twice = _body(result()).replace(b'"results"', b'"results": [], "results"', 1)
    assert _parse_simd(bytearray(twice)) is None
    assert _parse_simd(bytearray(b"[1, 2]")) is None
    # past orjson's 1 MiB too: the same outcome as the json module's (which larger bodies went through)
    points = list(range(1, 80_001))
    big = _body(result(series={"step_time_s": {"steps": points, "values": [p / 7 for p in points]}}))
    assert len(big) > 1024 * 1024 and _parse_simd(bytearray(big)) is not None
    assert _outcome(lambda b: _parse([bytearray(b)]), big) == _outcome(_by_json_module, big)
    assert _parse_simd(bytearray(b'{"results": [{"repeat": 18446744073709551616}]}')) is None


def test_raw_brackets_counts_as_bytes_count_does() -> None:
    rng = np.random.default_rng(5)
    pieces = [b"[", b"]", b"\\", b"u", b"005", b"b", b"B", b"\\u005b", b"\\u005B", b"\\u005c", b"x", b"1,"]
    for _ in range(2000):
        body = b"".join(pieces[int(i)] for i in rng.integers(len(pieces), size=int(rng.integers(0, 30))))
        expected = body.count(b"[") + body.count(b"\\u005b") + body.count(b"\\u005B")
        assert _raw_brackets(bytearray(body)) == expected, body


_AWKWARD = [*_ODD, [[1], [2]], [[]], "[", "\\u005b", {"steps": [1], "values": [1.0]}]


def test_every_way_of_parsing_reads_as_the_json_module() -> None:
    rng = np.random.default_rng(11)

    def awkward() -> Any:
        return copy.deepcopy(_AWKWARD[int(rng.integers(len(_AWKWARD)))])

    for _ in range(400):
        one = result(log_tail=str(rng.choice(["plain", "[rank0] done", "a [b] [c"])))
        series = one["series"]["step_time_s"]
        for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
            where = int(rng.integers(6))
            if where < 2:
                part = series["steps" if where == 0 else "values"]
                part[int(rng.integers(len(part)))] = awkward()
            elif where == 2:
                series["extra"] = awkward()
            elif where == 3:
                one["series"]["other"] = awkward()
            elif where == 4:
                one["provenance"][str(rng.choice(["k", "[k]"]))] = awkward()
            else:
                one["repeat"] = awkward()
        body = _body(one, result(), escape=bool(rng.random() < 0.3))
        if rng.random() < 0.2:  # a key twice: the json module keeps the last
            body = body.replace(b'"log_tail"', b'"log_tail": "first", "log_tail"', 1)
        assert _outcome(lambda b: _parse([bytearray(b)]), body) == _outcome(_by_json_module, body), body[:300]


def test_bad_json_and_empty_batch(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    body = assert_problem(
        ci.post("/results", content=b'{"results": [', headers={"Content-Type": "application/json"}), 400
    )
    assert "JSON" in body["detail"]
    assert_problem(ci.post("/results", json={"results": []}), 422, loc="results")
    assert_problem(ci.post("/results", json=[result()]), 422)
    assert_problem(
        ci.post(
            "/results", json={"results": [result(idempotency_key="a"), result(repeat=1, idempotency_key="a")]}
        ),
        422,
        loc="results[1].idempotency_key",
    )
    assert_problem(
        ci.post("/results", json={"results": [result()]}, headers={"Idempotency-Key": "x" * 201}), 422
    )
    assert snapshot(live_server.database) == before


def test_release_in_full_needs_admin(live_server: LiveServer, admin: httpx.Client, ci: httpx.Client) -> None:
    payload = {"results": [result(release=dict(RELEASE))]}
    before = snapshot(live_server.database)
    assert_problem(ci.post("/results", json=payload), 404, loc="results[0].release")
    assert snapshot(live_server.database) == before
    r = admin.post("/results", json=payload)
    assert r.status_code == 201, r.text
    assert admin.get(f"/releases/{REF}").json()["manifest"] == RELEASE["manifest"]
    conflicting = copy.deepcopy(RELEASE)
    conflicting["manifest"] = {"torch": "2.8.0"}
    assert_problem(
        admin.post("/results", json={"results": [result(release=conflicting)]}),
        409,
        loc="results[0].release.manifest",
    )


def test_auth_on_results(live_server: LiveServer, admin: httpx.Client, client: httpx.Client) -> None:
    create_release(admin)
    payload = {"results": [result()]}
    reader = make_token(live_server.database, "reader", "read")
    before = snapshot(live_server.database)
    r = client.post("/results", json=payload)
    assert_problem(r, 401)
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert_problem(client.post("/results", json=payload, headers=auth("abl_wrong")), 401)
    assert_problem(client.post("/results", json=payload, headers={"Authorization": "Basic abc"}), 401)
    body = assert_problem(client.post("/results", json=payload, headers=auth(reader)), 403)
    assert reader not in json.dumps(body)
    assert snapshot(live_server.database) == before


@pytest.mark.parametrize("same_key", [True, False], ids=["same-key", "different-keys"])
def test_concurrent_submissions_store_each_result_once(
    live_server: LiveServer, admin: httpx.Client, submit_token: str, same_key: bool
) -> None:
    create_release(admin)
    clients = 20

    def submit(i: int) -> httpx.Response:
        key = "shared" if same_key else f"job-{i}"
        payload = {
            "results": [result(repeat=0 if same_key else i), result(repeat=100 + (0 if same_key else i))]
        }
        with httpx.Client(base_url=live_server.api, timeout=60, headers=auth(submit_token)) as c:
            return c.post("/results", json=payload, headers={"Idempotency-Key": key})

    with ThreadPoolExecutor(clients) as pool:
        responses = list(pool.map(submit, range(clients)))
    assert all(r.status_code in (200, 201) for r in responses), [r.text for r in responses]
    ids = [tuple(r.json()["run_ids"]) for r in responses]
    with live_server.database.read() as s:
        stored = s.scalar(select(func.count()).select_from(Run))
        metrics = s.scalar(select(func.count()).select_from(RunMetric))
        series = s.scalar(select(func.count()).select_from(RunSeries))
        clusters = s.scalar(select(func.count()).select_from(Cluster))
    if same_key:
        assert len(set(ids)) == 1 and stored == 2
        assert sum(r.status_code == 201 for r in responses) == 1
    else:
        assert len({i for pair in ids for i in pair}) == 2 * clients == stored
    assert metrics == 3 * stored and series == stored and clusters == 1
    assert CLUSTER["name"] == "h200-2x8"


def _by_name(**overrides: Any) -> dict[str, Any]:
    """A result naming catalog entries that exist (the form the per-process id cache serves)."""
    return result(
        cluster="h200-2x8", workload="deepspeed/llama3-8b", variant="AC2+ACCL+CompilerOpt", **overrides
    )


def _release_of(database: Any, run_id: int) -> int:
    with database.read() as s:
        return int(s.scalar(select(Run.release_id).where(Run.id == run_id)))


def test_release_deleted_and_created_again_by_another_worker_gets_the_new_results(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, db_url: str
) -> None:
    """Two servers on one database stand for two worker processes: each keeps its own catalog ids
    (the caches are per engine), so the second's deletion leaves the first holding a stale id."""
    create_release(admin)
    first = ci.post("/results", json={"results": [result()]})  # defines the entries in full
    assert first.status_code == 201, first.text
    cached = ci.post("/results", json={"results": [_by_name(repeat=1)]})  # now served from the cache
    assert cached.status_code == 201, cached.text
    old_release = _release_of(live_server.database, cached.json()["run_ids"][0])
    with start_live_server(db_url) as other:
        other_admin = make_token(other.database, "other-admin", "admin")
        with httpx.Client(base_url=other.api, timeout=30, headers=auth(other_admin)) as admin2:
            assert admin2.delete(f"/releases/{REF}").status_code == 200
            created = create_release(admin2)
    assert created["id"] != old_release or live_server.database.dialect == "sqlite"
    again = ci.post("/results", json={"results": [_by_name(repeat=2)]})
    assert again.status_code == 201, again.text
    assert _release_of(live_server.database, again.json()["run_ids"][0]) == created["id"]
    with live_server.database.read() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1  # the old release's runs went with it


def test_deleted_release_is_not_confused_with_one_created_after_it(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, db_url: str
) -> None:
    """SQLite hands a deleted largest id out again: a cached id must not land results on another release."""
    create_release(admin)
    assert ci.post("/results", json={"results": [result()]}).status_code == 201
    assert ci.post("/results", json={"results": [_by_name(repeat=1)]}).status_code == 201
    with start_live_server(db_url) as other:
        other_admin = make_token(other.database, "other-admin", "admin")
        with httpx.Client(base_url=other.api, timeout=30, headers=auth(other_admin)) as admin2:
            assert admin2.delete(f"/releases/{REF}").status_code == 200
            create_release(admin2, tag="26.01")
    before = snapshot(live_server.database)
    assert_problem(ci.post("/results", json={"results": [_by_name(repeat=2)]}), 404, loc="results[0].release")
    assert snapshot(live_server.database) == before


def test_token_revoked_by_another_worker_is_refused_on_the_next_request(
    live_server: LiveServer, ci: httpx.Client, submit_token: str, db_url: str
) -> None:
    """No process remembers a token: a revocation anywhere holds from the next request on."""
    assert ci.get("/runs").status_code == 200
    with start_live_server(db_url) as other:
        other_admin = make_token(other.database, "other-admin", "admin")
        with httpx.Client(base_url=other.api, timeout=30, headers=auth(other_admin)) as admin2:
            token_id = next(t["id"] for t in admin2.get("/tokens").json() if t["name"] == "test-ci")
            assert admin2.post(f"/tokens/{token_id}/revoke").status_code == 200
    assert ci.get("/runs").status_code == 401


def _repeats(database: Any) -> list[int]:
    with database.read() as session:
        return sorted(session.scalars(select(Run.repeat).where(Run.source == "ci")))


def test_repeats_are_numbered_by_the_server_and_never_stored_twice(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    # Without a repeat: the next free one of the cell, past the batch's own numbers too.
    first = ci.post("/results", json={"results": [result(), result(repeat=4), result()]})
    assert first.status_code == 201, first.text
    assert _repeats(live_server.database) == [4, 5, 6]
    assert ci.post("/results", json={"results": [result()]}).status_code == 201
    assert _repeats(live_server.database) == [4, 5, 6, 7]
    # A repeat the cell holds: refused naming the run, nothing stored.
    before = snapshot(live_server.database)
    dup = ci.post("/results", json={"results": [result(repeat=5)]})
    assert_problem(dup, 409, loc="results[0].repeat")
    assert "already stored as run" in dup.json()["detail"] and "omit repeat" in dup.json()["detail"]
    assert snapshot(live_server.database) == before
    # ...also when the duplicate is inside one batch, or sent under an idempotency key.
    assert_problem(ci.post("/results", json={"results": [result(repeat=9), result(repeat=9)]}), 422)
    keyed = ci.post("/results", json={"results": [result(repeat=6)]}, headers={"Idempotency-Key": "k-dup"})
    assert_problem(keyed, 409, loc="results[0].repeat")
    assert snapshot(live_server.database) == before
    # Another cell (another variant) numbers on its own; the same key again is answered, not refused.
    other = result(variant={"name": "Base", "factors": []}, idempotency_key="other-0")
    stored = ci.post("/results", json={"results": [other]})
    assert stored.status_code == 201 and _repeats(live_server.database) == [0, 4, 5, 6, 7]
    again = ci.post("/results", json={"results": [other]})
    assert again.status_code == 200 and again.json()["run_ids"] == stored.json()["run_ids"]


@pytest.mark.parametrize("explicit", [False, True])
def test_concurrent_submissions_of_one_cell_get_distinct_repeats(
    live_server: LiveServer, admin: httpx.Client, submit_token: str, explicit: bool
) -> None:
    """Eight jobs at once: without repeats each gets its own; with the same repeat exactly one wins."""
    create_release(admin)
    assert admin.post("/results", json={"results": [result(repeat=0)]}).status_code == 201

    def send(i: int) -> int:
        body = result(repeat=1) if explicit else result()
        with httpx.Client(base_url=live_server.api, headers=auth(submit_token), timeout=60) as c:
            return c.post(
                "/results", json={"results": [body]}, headers={"Idempotency-Key": f"job-{i}"}
            ).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(send, range(8)))
    if explicit:
        assert sorted(codes) == [201] + [409] * 7
        assert _repeats(live_server.database) == [0, 1]
    else:
        assert codes == [201] * 8
        assert _repeats(live_server.database) == list(range(9))


def _custom(value: float, unit: str, better: str | None = None, repeat: int = 0) -> dict[str, Any]:
    metric: dict[str, Any] = {"value": value, "unit": unit}
    if better is not None:
        metric["better"] = better
    return result(repeat=repeat, metrics={"throughput_tokens_per_s": 1000.0, "wait_ms": metric})


def test_a_metric_keeps_the_direction_first_stored(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    """`ms/step` stored as lower-is-better: a later `better: higher` is a 409 naming both, nothing stored."""
    create_release(admin)
    assert ci.post("/results", json={"results": [_custom(5.0, "ms/step")]}).status_code == 201
    before = snapshot(live_server.database)
    response = ci.post("/results", json={"results": [_custom(5.7, "ms/step", "higher", repeat=1)]})
    body = assert_problem(response, 409, loc="results[0].metrics.wait_ms")
    assert "'wait_ms' is stored as lower-is-better" in body["detail"]
    assert "gives higher-is-better" in body["detail"] and "better: 'lower'" in body["detail"]
    assert snapshot(live_server.database) == before
    # the stored direction, stated or read from the unit, is accepted
    again = ci.post("/results", json={"results": [_custom(5.2, "ms/step", "lower", repeat=1)]})
    assert again.status_code == 201, again.text


def test_one_batch_cannot_give_one_metric_two_directions(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    batch = [_custom(0.5, "%", "higher"), _custom(0.6, "%", "lower", repeat=1)]
    body = assert_problem(ci.post("/results", json={"results": batch}), 409, loc="results[1].metrics.wait_ms")
    assert "lower-is-better here" in body["detail"] and "higher-is-better at results[0]" in body["detail"]
    assert snapshot(live_server.database) == before


@pytest.mark.parametrize(
    ("name", "unit"), [("failures", "failures/day"), ("errors", "count"), ("oom_errors", "1/day")]
)
def test_counts_of_failures_are_lower_is_better(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, name: str, unit: str
) -> None:
    create_release(admin)
    payload = result(metrics={"throughput_tokens_per_s": 1000.0, name: {"value": 3.0, "unit": unit}})
    assert ci.post("/results", json={"results": [payload]}).status_code == 201
    with live_server.database.read() as s:
        assert s.scalar(select(RunMetric.better).where(RunMetric.name == name)) == "lower"


def test_busy_host_runs_leave_verdicts_unless_the_switch_keeps_them(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client
) -> None:
    """A release whose two last runs were measured on a busy host (40% slower): left out of the
    verdict by default, the row marked; ?busy_hosts=include keeps them; a bad value is a 422."""
    create_release(admin, tag="25.11", release_date="2025-11-15")
    create_release(admin)
    old = [
        result(release="training-nv-pytorch:25.11", metrics={"throughput_tokens_per_s": 1000.0 + r})
        for r in range(5)
    ]
    new = [
        result(
            metrics={"throughput_tokens_per_s": (600.0 if r >= 3 else 1000.0) + r},
            provenance={"host_busy": "true", "host_busy_reason": "load 9.1 on 2 CPUs"} if r >= 3 else {},
        )
        for r in range(5)
    ]
    assert ci.post("/results", json={"results": old + new}).status_code == 201

    def delta(query: str) -> dict[str, Any]:
        body = ci.get(f"/releases/{REF}/comparison{query}&metric=throughput_tokens_per_s").json()
        (d,) = body["deltas"]
        return d

    default = delta("?busy_hosts=exclude")
    assert default["busy_runs"] == 2 and default["busy_included"] is False
    assert default["result"]["n_contender"] == 3 and default["result"]["verdict"] == "unchanged"
    kept = delta("?busy_hosts=include")
    assert kept["busy_included"] is True and kept["result"]["n_contender"] == 5
    assert_problem(ci.get(f"/releases/{REF}/comparison?busy_hosts=maybe"), 422)
