"""Ids and numbers in URLs are ASCII integers in range, on the API and the dashboard (issue 30): ids
past PostgreSQL's INTEGER and digits of other scripts (Arabic-Indic, full-width) are refused with a
clear 4xx that names the parameter, never a 500; a study's default name is cut to the column."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import httpx
import pytest

from ablate.backend.services import tokens
from ablate.backend.services.errors import NotFound
from tests.api.helpers import REF, RELEASE, assert_problem, create_release, snapshot
from tests.support.live_server import LiveServer

BIG = "2147483648"  # one past PostgreSQL's INTEGER
ARABIC = "\u0661\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660"  # Arabic-Indic 10^10
ARABIC_ONE = "\u0661"
FULL_WIDTH_ONE = "\uff11"


def _cursor(before: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": before}).encode()).decode().rstrip("=")


def _page_refused(live_server: LiveServer, path: str, param: str) -> None:
    response = httpx.get(live_server.url + path, timeout=30)
    assert response.status_code in (404, 422), (path, response.status_code, response.text[-500:])
    assert "Traceback" not in response.text and "Internal Server Error" not in response.text, path
    assert param in response.text, (path, response.text[-500:])


@pytest.mark.parametrize("bad", [BIG, ARABIC, ARABIC_ONE, FULL_WIDTH_ONE, "+1", "1_0", "0"])
def test_ids_are_ascii_integers_in_range_on_the_dashboard_and_the_api(
    live_server: LiveServer, client: httpx.Client, bad: str
) -> None:
    before = snapshot(live_server.database)
    q = quote(bad, safe="")
    for path, param in (
        (f"/runs?ids={q}", "ids"),
        (f"/runs?ids=1,{q}", "ids"),
        (f"/runs?study={q}", "study"),
        (f"/compare?baseline_runs={q}&contender_runs=1", "baseline_runs"),
        (f"/compare?baseline_runs=1&contender_runs=2,{q}", "contender_runs"),
        (f"/compare?baseline_study={q}&contender_study=1", "baseline_study"),
    ):
        _page_refused(live_server, path, param)
    for path, loc in (
        (f"/compare?baseline_runs={q}&contender_runs=1", "baseline_runs"),
        (f"/compare?baseline_runs=1&contender_runs=3,{q}", "contender_runs"),
        (f"/compare?baseline_study={q}&contender_study=1", "baseline_study"),
    ):
        body = assert_problem(client.get(path), 422)
        assert any(loc in str(e["loc"]) for e in body["errors"]), (path, body)
    assert snapshot(live_server.database) == before


def test_a_cursor_past_the_id_range_is_refused_on_the_dashboard(live_server: LiveServer) -> None:
    _page_refused(live_server, f"/runs?cursor={_cursor(2**31)}", "cursor")
    _page_refused(live_server, f"/runs?cursor={_cursor(10**30)}", "cursor")


def test_the_default_study_name_is_cut_to_the_column(live_server: LiveServer, admin: httpx.Client) -> None:
    image = "i" * 100
    create_release(admin, image=image, tag="t" * 64)
    cluster = {"name": "c" * 200, "accelerator": "cpu", "devices_per_node": 0}
    plan = {
        "release": f"{image}:{'t' * 64}",
        "cluster": cluster,
        "variants": [{"name": "Base", "factors": []}],
        "workloads": [{"name": "tiny", "runner": "torch-llm", "measured_steps": 10}],
        "repeats": 1,
    }
    response = admin.post("/studies", json=plan)
    assert response.status_code == 201, response.text
    name = response.json()["name"]
    assert len(name) == 200 and name.startswith(f"{image}:") and name.endswith("\u2026"), name
    assert admin.get(f"/studies/{response.json()['id']}").json()["name"] == name
    assert REF  # the helpers' release stays untouched


def test_a_token_id_past_the_range_is_not_found(live_server: LiveServer) -> None:
    """`ablate token revoke 2147483648` (ids and names share the argument): not there, not a driver error."""
    with live_server.database.transaction() as session:
        for ref in (BIG, "9" * 30):
            with pytest.raises(NotFound):
                tokens.find_token(session, ref)


@pytest.mark.parametrize(
    ("field", "value", "loc"),
    [
        ("release_date", 0, "release_date"),
        ("release_date", 1765756800, "release_date"),
        ("release_date", "2025-13-01", "release_date"),
        ("release_date", "2025-12-15T00:00:00Z", "release_date"),
        ("manifest", {"torch": "2.9\u0000"}, "manifest.torch"),
        ("manifest", {"torch": "2.9\u001b[31m"}, "manifest.torch"),
    ],
)
def test_release_dates_and_manifest_values_are_checked_on_the_api(
    live_server: LiveServer, admin: httpx.Client, field: str, value: object, loc: str
) -> None:
    before = snapshot(live_server.database)
    body = {**RELEASE, field: value}
    assert_problem(admin.post("/releases", json=body), 422, loc=loc)
    assert snapshot(live_server.database) == before
