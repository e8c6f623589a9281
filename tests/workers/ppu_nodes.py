"""Drain the queue with a dispatcher on a local Ray of a CPU head and two fake PPU nodes (three raylets
on this machine: ``resources={"PPU": 16}``, labels ``pool=ppu`` and ``rack=a|b``), then print the device
allocations the database still holds as JSON. Run as ``python -m tests.workers.ppu_nodes DB_URL DATA_DIR``
by test_multinode.py: a second Ray cluster cannot share the test session's process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ablate.workers.dispatch import devices
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings
from tests.workers.two_nodes import ray_nodes


def main(db_url: str, data_dir: str) -> None:
    ppu = [
        {"num_cpus": cpus, "resources": {"PPU": 16}, "labels": {"pool": "ppu", "rack": rack}}
        for rack, cpus in (("a", 3), ("b", 2))
    ]
    with ray_nodes(db_url, "ablate-ppu-nodes", *ppu) as database:
        dispatcher = Dispatcher(make_settings(Path(data_dir), max_concurrent_runs=2), database)
        dispatcher.drain(timeout_s=240)
        with database.read() as session:
            print(json.dumps({"held": devices.on_nodes(session)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
