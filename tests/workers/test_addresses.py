"""A cluster bound to a Ray address is served by the dispatcher connected to that Ray cluster however
the address is written (``auto``, ``host:port``, ``ray://host:port``), not by string equality."""

from __future__ import annotations

import socket
from pathlib import Path

from ablate.backend.db.database import Database
from ablate.backend.db.models import Cluster, Study
from ablate.backend.schemas.catalog import ClusterDef, VariantDef
from ablate.backend.services.dispatchers import served_cluster_ids
from ablate.backend.services.studies import study_matrix
from ablate.workers.dispatch.dispatcher import Dispatcher
from ablate.workers.dispatch.identity import names_cluster, split_address
from tests.workers.conftest import FAKE, make_settings, queue_study, runs_of
from tests.workers.fakes import FakeRunner

ELSEWHERE = "203.0.113.7:6379"  # TEST-NET-3: never this machine


def test_addresses_are_split_whatever_their_form() -> None:
    assert split_address("10.0.0.5:6379") == ("gcs", "10.0.0.5", 6379)
    assert split_address("ray://Head.example:10001") == ("ray", "head.example", 10001)
    assert split_address(" gcs://10.0.0.5:6379 ") == ("gcs", "10.0.0.5", 6379)


def test_one_cluster_named_three_ways() -> None:
    gcs = f"{socket.gethostbyname(socket.gethostname())}:6379"
    assert names_cluster("127.0.0.1:6379", gcs)  # this machine, by another of its addresses
    assert names_cluster("localhost:6379", gcs)
    assert names_cluster("ray://localhost:10001", gcs)  # Ray Client: its own port on the same head
    assert names_cluster("auto", gcs, joined="auto")
    assert names_cluster(None, gcs) and names_cluster("", gcs)  # the default cluster
    assert not names_cluster("127.0.0.1:6380", gcs)  # another Ray on this machine
    assert not names_cluster(ELSEWHERE, gcs)
    assert not names_cluster(f"ray://{ELSEWHERE}", gcs)
    assert not names_cluster("auto", "203.0.113.7:6379", joined="203.0.113.7:6379")


def test_auto_serves_clusters_bound_to_its_address_in_any_form(
    ray_local: str, database: Database, tmp_path: Path
) -> None:
    port = ray_local.rsplit(":", 1)[1]
    studies = {}
    for name, address in [
        ("by-gcs", f"127.0.0.1:{port}"),
        ("by-client", "ray://localhost:10001"),
        ("by-auto", "auto"),
        ("elsewhere", ELSEWHERE),
    ]:
        cluster = ClusterDef(name=name, accelerator="cpu", nodes=1, devices_per_node=1, ray_address=address)
        studies[name] = queue_study(
            database, cluster=cluster, variants=[VariantDef(name="A")], workloads=[FAKE]
        )
    dispatcher = Dispatcher(
        make_settings(tmp_path, ray_address="auto"), database, runners={"fake": FakeRunner}
    )

    def served_done() -> bool:
        return all(
            r.status == "succeeded"
            for n in ("by-gcs", "by-client", "by-auto")
            for r in runs_of(database, studies[n].study_id)
        )

    dispatcher.drain(timeout_s=120, until=served_done)
    with database.read() as s:  # what the running dispatcher announced
        served = {s.get(Cluster, cid).name for cid in served_cluster_ids(s)}  # type: ignore[union-attr]
        waiting = study_matrix(s, s.get(Study, studies["elsewhere"].study_id))["waiting"]  # type: ignore[arg-type]
    dispatcher.shutdown()
    assert served_done()
    assert [r.status for r in runs_of(database, studies["elsewhere"].study_id)] == ["queued"]
    assert {"by-gcs", "by-client", "by-auto"} <= served and "elsewhere" not in served
    assert waiting == (
        f"waiting: no dispatcher serves cluster 'elsewhere' (ray_address {ELSEWHERE}; "
        "none seen in the last 24 h)"
    )
    with database.read() as s:  # stopped: it serves nothing any more
        assert served_cluster_ids(s) == set()
