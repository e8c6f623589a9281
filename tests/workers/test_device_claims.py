"""Claiming runs together with their devices, on both databases: concurrent dispatchers never share a
device, a run that cannot get devices waits queued saying why (and does not hold up other pools), a wait
with nothing progressing ends after the deadline, and a stopped attempt's devices stay held until they
are confirmed free. The Ray cluster is described by node records as Ray reports them (no Ray needed)."""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select, update

from ablate.backend.db.base import utcnow
from ablate.backend.db.database import Database
from ablate.backend.db.models import DeviceAllocation, Run
from ablate.backend.domain.placement import NodeInfo
from ablate.backend.schemas.catalog import ClusterDef, VariantDef
from ablate.workers.dispatch import claims, devices
from tests.workers.conftest import FAKE, queue_study


def _node(name: str, *, alive: bool = True, pool: str = "ppu", **resources: float) -> NodeInfo:
    return NodeInfo(name, f"10.0.0.{len(name)}", alive, {"CPU": 8.0, **resources}, {"pool": pool})


PPU_NODES = [_node("node-a", PPU=16), _node("node-b", PPU=16)]


def _queue(
    database: Database, name: str, nodes: int, per_node: int, runs: int, acc: str = "ppu"
) -> list[int]:
    cluster = ClusterDef(
        name=name, accelerator=acc, nodes=nodes, devices_per_node=per_node, labels={"pool": acc}
    )
    variants = [VariantDef(name=f"v{i}") for i in range(runs)]
    return queue_study(database, cluster=cluster, variants=variants, workloads=[FAKE]).run_ids


def _claim(
    database: Database, owner: str, nodes: list[NodeInfo], limit: int = 4, **kw: float
) -> list[claims.Claimed]:
    with database.transaction() as s:
        return claims.claim_runs(
            s, owner, limit=limit, lease_s=30, device_claiming=claims.DeviceClaiming(nodes, **kw)
        )


def _run(database: Database, run_id: int) -> Run:
    with database.read() as s:
        run = s.get(Run, run_id)
        assert run is not None
        return run


def test_concurrent_dispatchers_never_share_a_device(database: Database) -> None:
    ids = _queue(database, "ppu-8", 1, 8, 12)
    taken: list[claims.Claimed] = []
    errors: list[BaseException] = []

    def dispatcher(owner: str) -> None:
        try:
            for _ in range(200):  # (a claim skips the runs another one is looking at: try again)
                if len(taken) >= 4:
                    break
                taken.extend(_claim(database, owner, PPU_NODES, limit=1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=dispatcher, args=(f"d{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(taken) == 4  # two 8-PPU runs per 16-PPU node, whoever claimed them
    used = [(node, i) for c in taken for node, indices in c.devices for i in indices]
    assert len(used) == len(set(used)) == 32
    with database.read() as s:
        rows = s.execute(select(DeviceAllocation.run_id, DeviceAllocation.node_id)).all()
        assert {r.run_id for r in rows} == {c.run_id for c in taken}
    holders = ", ".join(str(r) for r in sorted(c.run_id for c in taken))
    # A waiting run's note is the last look at its pool: one taken while another dispatcher was still
    # claiming says "took them first". The next poll, with all four held, writes the settled note.
    assert _claim(database, "d-next", PPU_NODES, limit=1) == []
    waiting = _run(database, next(i for i in ids if i not in {c.run_id for c in taken}))
    assert waiting.status == "queued" and waiting.waiting_since is None  # live runs hold its pool
    assert waiting.error == (
        f"waiting for 1 node(s) of pool ppu (0 of 2 alive pool node(s) have 8 free PPU (1 needed)): "
        f"held by run(s) {holders}"
    )


def test_a_busy_pool_does_not_hold_up_runs_of_another_pool(database: Database) -> None:
    ppu = _queue(database, "ppu-2x16", 2, 16, 2)
    gpu = _queue(database, "gpu-1", 1, 1, 1, acc="gpu")
    nodes = [*PPU_NODES, _node("node-g", pool="gpu", GPU=2)]
    got = _claim(database, "me", nodes)
    assert [c.run_id for c in got] == [ppu[0], gpu[0]]  # the second PPU run waits, the GPU run goes by
    assert got[1].devices == (("node-g", (0,)),)
    assert _run(database, ppu[1]).error == (
        "waiting for 2 node(s) of pool ppu (0 of 2 alive pool node(s) have 16 free PPU (2 needed)): "
        f"held by run(s) {ppu[0]}"
    )


def test_a_pool_node_briefly_gone_is_waited_for_until_the_deadline(database: Database) -> None:
    (run_id,) = _queue(database, "ppu-2x16", 2, 16, 1)
    nodes = [PPU_NODES[0], _node("node-b", alive=False, PPU=16)]
    assert _claim(database, "me", nodes, wait_deadline_s=60) == []
    run = _run(database, run_id)
    assert run.status == "queued" and run.waiting_since is not None  # nothing it waits on is moving
    assert run.error == (
        "waiting for 2 node(s) of pool ppu (1 of 1 alive pool node(s) have 16 free PPU (2 needed)): "
        "1 pool node(s) not alive"
    )
    with database.transaction() as s:  # a minute later, still nothing progressed
        s.execute(update(Run).values(waiting_since=utcnow() - timedelta(seconds=61)))
    (got,) = _claim(database, "me", nodes, wait_deadline_s=60)
    assert got.run_id == run_id and got.devices == ()
    assert got.fail.startswith("waited 60 s (ABLATE_WAIT_DEADLINE_S) with nothing progressing: for 2 node(s)")
    # the node came back in time for a second run of the same study: it is claimed with its devices
    (again,) = _queue(database, "ppu-2x16", 2, 16, 1)
    (got,) = _claim(database, "me", PPU_NODES, wait_deadline_s=60)
    assert got.run_id == again and sorted(n for n, _ in got.devices) == ["node-a", "node-b"]


def test_a_run_the_cluster_can_never_hold_is_claimed_to_fail_at_once(database: Database) -> None:
    (run_id,) = _queue(database, "ppu-3x16", 3, 16, 1)
    (got,) = _claim(database, "me", PPU_NODES)
    # claimed without devices: the watcher fails it as unplaceable, naming what is missing
    assert (got.run_id, got.devices, got.fail) == (run_id, (), "")


def test_a_stopped_attempt_keeps_its_devices_until_confirmed_free(database: Database) -> None:
    first, second = _queue(database, "ppu-16", 1, 16, 2)
    (got,) = _claim(database, "old", PPU_NODES[:1])
    assert got.run_id == first
    with database.transaction() as s:
        devices.expire(s, [(first, 1)])
        devices.renew(s, "old", [(first, 1)], lease_s=30)  # a hung dispatcher waking up: refused
    assert _claim(database, "new", PPU_NODES[:1]) == []
    assert "held by stopped run(s)" in (_run(database, second).error or "")
    with database.transaction() as s:
        assert [(n, r, a, o) for n, r, a, o, _ in devices.expired(s)] == [("node-a", first, 1, "old")]
        assert devices.release_fenced(s, "node-a", first, 1, "new") == 0  # another claim's: not these
        assert devices.release_fenced(s, "node-a", first, 1, "old") == 16  # the fence confirmed them gone
    (got,) = _claim(database, "new", PPU_NODES[:1])
    assert got.run_id == second and got.devices == (("node-a", tuple(range(16))),)


def test_the_clusters_page_shows_which_run_holds_which_devices(database: Database, db_url: str) -> None:
    import httpx

    from ablate.backend.dashboard.views.clusters import clusters_page
    from tests.support.live_server import start_live_server

    first, _ = _queue(database, "ppu-8", 1, 8, 2)
    _claim(database, "me", PPU_NODES[:1], limit=1)
    with database.read() as s:
        (held,) = clusters_page(s).held
    assert (held.node_id, held.node_address, held.resource, held.indices) == (
        "node-a", "10.0.0.6", "PPU", list(range(8))
    )  # fmt: skip
    assert (held.run_id, held.attempt, held.live) == (first, 1, True)
    server = start_live_server(db_url)
    try:
        html = httpx.get(f"{server.url}/clusters", timeout=30).text
    finally:
        server.stop()
    row = html[html.index('<table id="held-devices">') :]
    assert f'data-run-id="{first}"' in row and "<code>PPU</code> 0,1,2,3,4,5,6,7" in row
    assert f"run #{first}</a> (attempt 1)" in row
    with database.transaction() as s:
        devices.expire(s, [(first, 1)])
    with database.read() as s:
        (held,) = clusters_page(s).held
    assert (held.run_id, held.live) == (first, False)  # stopped, not yet confirmed free


def test_study_show_says_what_a_queued_run_waits_for(database: Database, db_url: str) -> None:
    import shutil
    import subprocess
    import sys

    from tests.api.conftest import make_token
    from tests.support.live_server import start_live_server

    ppu = _queue(database, "ppu-16", 1, 16, 2)
    _claim(database, "me", PPU_NODES[:1], limit=2)
    with database.read() as s:
        study_id = s.get(Run, ppu[1]).study_id  # type: ignore[union-attr]
    token = make_token(database, "reader", "read")
    server = start_live_server(db_url)
    ablate = shutil.which("ablate", path=str(Path(sys.executable).parent)) or "ablate"
    try:
        shown = subprocess.run(
            [ablate, "study", "show", str(study_id), "--server", server.url],
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "ABLATE_TOKEN": token, "COLUMNS": "300"},
            timeout=120,
        )
    finally:
        server.stop()
    assert shown.returncode == 0, shown.stderr
    assert "queued runs waiting:" in shown.stdout
    assert f"run {ppu[1]}: waiting for 1 node(s) of pool ppu (" in shown.stdout
    assert f"held by run(s) {ppu[0]}" in shown.stdout
