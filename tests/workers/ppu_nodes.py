"""Drain the queue with a dispatcher on a local Ray of a CPU head and two fake PPU nodes (three raylets
on this machine: ``resources={"PPU": 16}``, labels ``pool=ppu`` and ``rack=a|b``), then print what Ray's
device allocator still holds as JSON. Run as ``python -m tests.workers.ppu_nodes DB_URL DATA_DIR`` by
test_multinode.py: a second Ray cluster cannot share the test session's process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster as RayCluster

from ablate.backend.db.database import Database
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings


def main(db_url: str, data_dir: str) -> None:
    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    database = Database.from_url(db_url)
    try:
        for rack, cpus in (("a", 3), ("b", 2)):
            nodes.add_node(num_cpus=cpus, resources={"PPU": 16}, labels={"pool": "ppu", "rack": rack})
        ray.init(address=nodes.address, namespace="ablate-ppu-nodes", log_to_driver=False)
        nodes.wait_for_nodes()
        settings = make_settings(Path(data_dir), max_concurrent_runs=2)
        dispatcher = Dispatcher(settings, database)
        dispatcher.drain(timeout_s=240)
        devices = dispatcher.submitter.devices
        print(json.dumps({"held": ray.get(devices.holding.remote()) if devices else None}))
    finally:
        database.dispose()
        ray.shutdown()
        nodes.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
