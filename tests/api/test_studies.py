"""Study routes over HTTP: plan in, run matrix out, cancel."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import httpx

from ablate.backend.db.models import DispatcherPresence
from tests.api.helpers import REF, assert_problem, create_release, snapshot
from tests.support.live_server import LiveServer

CPU = {"name": "cpu-box", "accelerator": "cpu", "devices_per_node": 0}
LADDER = [
    {"name": "Base", "factors": []},
    {"name": "CompilerOpt", "factors": ["compiler_opt"], "position": 1},
    {"name": "CompilerOpt+CkptOpt", "factors": ["compiler_opt", "ckpt_opt"], "position": 2},
]
WORKLOADS = [{"name": "tiny", "runner": "torch-llm", "measured_steps": 10}]


def plan(**overrides: object) -> dict[str, object]:
    return {
        "release": REF,
        "cluster": CPU,
        "variants": LADDER,
        "workloads": WORKLOADS,
        "repeats": 2,
        **overrides,
    }


def test_create_get_cancel(live_server: LiveServer, admin: httpx.Client, client: httpx.Client) -> None:
    create_release(admin)
    r = admin.post("/studies", json=plan(order_seed=5, name="nightly"))
    assert r.status_code == 201, r.text
    study = r.json()
    assert study["status"] == "queued" and study["order_seed"] == 5 and study["name"] == "nightly"
    assert study["variants"] == ["Base", "CompilerOpt", "CompilerOpt+CkptOpt"] and study["workloads"] == [
        "tiny"
    ]
    runs = study["runs"]
    assert len(runs) == 6 and study["counts"] == {"queued": 6}
    assert [r["repeat"] for r in runs] == [0, 0, 0, 1, 1, 1]
    assert all(r["progress"] is None and r["status"] == "queued" for r in runs)
    assert [r["queue_order"] for r in runs] == sorted(r["queue_order"] for r in runs)
    got = client.get(f"/studies/{study['id']}").json()
    assert got["runs"] == runs
    listed = client.get("/studies").json()
    assert [s["id"] for s in listed] == [study["id"]] and listed[0]["release"] == REF
    second = admin.post(
        "/studies", json=plan(cluster="cpu-box", variants=["Base"], workloads=["tiny"], repeats=1)
    )
    assert second.status_code == 201, second.text
    assert second.json()["runs"][0]["queue_order"] > max(r["queue_order"] for r in runs)
    cancelled = admin.post(f"/studies/{study['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["counts"] == {"cancelled": 6}
    assert client.get("/runs", params={"study_id": study["id"], "status": "cancelled"}).json()["items"]


def test_refusals(live_server: LiveServer, admin: httpx.Client, submit_token: str) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    bad = plan(variants=[LADDER[0], {"name": "Base+ACCL", "factors": ["accl"]}])
    body = assert_problem(admin.post("/studies", json=bad), 422, loc="variants[1].factors")
    assert "Base+ACCL" in body["detail"] and "accl" in body["detail"]
    assert_problem(admin.post("/studies", json=plan(release="training-nv-pytorch:1.0")), 404, loc="release")
    assert_problem(admin.post("/studies", json=plan(repeats=0)), 422, loc="repeats")
    assert_problem(
        admin.post("/studies", json=plan(workloads=[{"name": "t", "runner": "nope"}])),
        422,
        loc="workloads[0].runner",
    )
    assert_problem(
        admin.post("/studies", json=plan(), headers={"Authorization": f"Bearer {submit_token}"}), 403
    )
    assert_problem(admin.get("/studies/999"), 404)
    assert_problem(admin.post("/studies/999/cancel"), 404)
    assert snapshot(live_server.database) == before


def test_queued_runs_say_when_no_dispatcher_serves_their_cluster(
    live_server: LiveServer, admin: httpx.Client, admin_token: str
) -> None:
    from ablate.backend.db.base import utcnow
    from ablate.backend.db.models import Cluster
    from ablate.workers.dispatch import leases
    from tests.api.test_hygiene_cli import _ablate

    create_release(admin)
    study = admin.post("/studies", json=plan(repeats=1)).json()
    never = "waiting: no dispatcher serves cluster 'cpu-box' (none seen in the last 24 h)"
    assert admin.get(f"/studies/{study['id']}").json()["waiting"] == never
    run_id = study["runs"][0]["id"]
    assert admin.get(f"/runs/{run_id}").json()["waiting"] == never
    # a dispatcher announces it serves the cluster: nothing to say any more
    with live_server.database.transaction() as s:
        cluster_id = s.query(Cluster.id).filter_by(name="cpu-box").scalar()
        leases.announce(s, "d1", gcs_address="10.0.0.5:6379", served=[cluster_id], lease_s=30)
    assert admin.get(f"/studies/{study['id']}").json()["waiting"] is None
    assert admin.get(f"/runs/{run_id}").json()["waiting"] is None
    with live_server.database.transaction() as s:
        leases.retire(s, "d1")
    just_now = admin.get(f"/runs/{run_id}").json()["waiting"]
    assert re.fullmatch(r"waiting: no dispatcher serves cluster 'cpu-box' \(last seen \d+ s ago\)", just_now)
    # one that stopped renewing 12 minutes ago (killed): the newest of the two is the last seen
    with live_server.database.transaction() as s:
        leases.retire(s, "d1")
        s.query(DispatcherPresence).filter_by(owner="d1").update(
            {"heartbeat_at": utcnow() - timedelta(minutes=14), "expires_at": utcnow() - timedelta(minutes=14)}
        )
        twelve = utcnow() - timedelta(minutes=12, seconds=5)
        leases.announce(s, "d2", gcs_address="10.0.0.5:6379", served=[cluster_id], lease_s=30, now=twelve)
    waiting = "waiting: no dispatcher serves cluster 'cpu-box' (last seen 12 min ago)"
    assert admin.get(f"/studies/{study['id']}").json()["waiting"] == waiting
    # `ablate study show` and the study page say it too
    shown = _ablate("study", "show", str(study["id"]), "--server", live_server.url, token=admin_token)
    assert shown.returncode == 0, shown.stderr
    assert waiting in shown.stdout
    page = admin.get(f"{live_server.url}/studies/{study['id']}").text
    alert = re.search(r'<div class="alert" id="study-waiting">([^<]*)</div>', page)
    assert alert and html.unescape(alert.group(1)) == waiting
