"""Drain the queue on a local Ray of two fake PPU nodes whose ``ppu-smi`` (a real script on PATH) fails
with exit 9 on the node where it first runs and works on the other. Run as ``python -m
tests.workers.preflight_nodes DB_URL DATA_DIR BIN_DIR`` by test_preflight_nodes.py (a second Ray cluster
cannot share the test session's process). Prints the node ids as JSON: the failing one is the node
whose raylet pid the tool wrote."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings, own_ray
from tests.workers.fakes import FakeRunner


def main(db_url: str, data_dir: str, bin_dir: str) -> None:
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"  # the raylets' workers inherit it
    workers = [{"num_cpus": 1, "resources": {"PPU": 1}}] * 2
    with own_ray(db_url, workers, "ablate-preflight") as (nodes, database):
        settings = make_settings(Path(data_dir), max_concurrent_runs=1, preflight="strict")
        Dispatcher(settings, database, runners={"fake": FakeRunner}).drain(timeout_s=180)
        raylets = {str(n.all_processes["raylet"][0].process.pid): n.node_id for n in nodes.worker_nodes}
        print(json.dumps({"raylets": raylets}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
