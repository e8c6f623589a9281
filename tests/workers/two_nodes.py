"""Drain the queue with a dispatcher on a local Ray of two nodes (two raylets on this machine), then
print the placement groups' states as JSON. Run as ``python -m tests.workers.two_nodes DB_URL DATA_DIR``
by test_multinode.py: a second Ray cluster cannot share the test session's process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster as RayCluster

from ablate.backend.db.database import Database
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings
from tests.workers.fakes import FakeRunner


def main(db_url: str, data_dir: str) -> None:
    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    database = Database.from_url(db_url)
    try:
        nodes.add_node(num_cpus=1)
        ray.init(address=nodes.address, namespace="ablate-two-nodes", log_to_driver=False)
        nodes.wait_for_nodes()
        settings = make_settings(Path(data_dir), max_concurrent_runs=1)
        Dispatcher(settings, database, runners={"fake": FakeRunner}).drain(timeout_s=180)
        states = [pg["state"] for pg in ray.util.placement_group_table().values()]
        print(json.dumps({"placement_groups": states}))
    finally:
        database.dispose()
        ray.shutdown()
        nodes.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
