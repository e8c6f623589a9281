"""Drain the queue with a dispatcher on a local Ray of two nodes (two raylets on this machine), then
print the placement groups' states as JSON. Run as ``python -m tests.workers.two_nodes DB_URL DATA_DIR``
by test_multinode.py: a second Ray cluster cannot share the test session's process."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster as RayCluster

from ablate.backend.db.database import Database
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings
from tests.workers.fakes import FakeRunner


@contextmanager
def ray_nodes(db_url: str, namespace: str, *workers: dict[str, Any]) -> Iterator[Database]:
    """A local Ray of a one-CPU head and ``workers`` (``add_node`` arguments) joined by this process,
    and the database; both shut down on exit."""
    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    database = Database.from_url(db_url)
    try:
        for args in workers:
            nodes.add_node(**args)
        ray.init(address=nodes.address, namespace=namespace, log_to_driver=False)
        nodes.wait_for_nodes()
        yield database
    finally:
        database.dispose()
        ray.shutdown()
        nodes.shutdown()


def main(db_url: str, data_dir: str) -> None:
    with ray_nodes(db_url, "ablate-two-nodes", {"num_cpus": 1}) as database:
        settings = make_settings(Path(data_dir), max_concurrent_runs=1)
        Dispatcher(settings, database, runners={"fake": FakeRunner}).drain(timeout_s=180)
        states = [pg["state"] for pg in ray.util.placement_group_table().values()]
        print(json.dumps({"placement_groups": states}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
