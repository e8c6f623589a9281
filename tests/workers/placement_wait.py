"""A multi-node run whose placement group cannot be placed while other work holds a node. Run as
``python -m tests.workers.placement_wait DB_URL DATA_DIR`` by test_placement_wait.py (a second Ray
cluster cannot share the test session's process): a CPU-less head and two one-CPU workers, one of them
held by a plain Ray task; a dispatcher (placement timeout 3 s) drains the queue the test filled."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import ray

from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings, own_ray
from tests.workers.fakes import FakeRunner


def main(db_url: str, data_dir: str) -> None:
    with own_ray(db_url, [{"num_cpus": 1}, {"num_cpus": 1}], "ablate-placement") as (_, database):
        started = Path(data_dir) / "blocker-started"

        @ray.remote(num_cpus=1)
        def blocker() -> None:
            started.write_text("holding one worker's CPU")
            time.sleep(600)

        held = blocker.remote()
        while not started.exists():
            time.sleep(0.1)
        settings = make_settings(Path(data_dir), max_concurrent_runs=2, placement_timeout_s=3.0)
        Dispatcher(settings, database, runners={"fake": FakeRunner}).drain(timeout_s=180)
        ray.cancel(held, force=True)
        print(json.dumps({"drained_at": time.time()}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
