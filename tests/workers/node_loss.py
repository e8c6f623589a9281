"""Lose a Ray node in the middle of a two-node run. Run as ``python -m tests.workers.node_loss DB_URL
DATA_DIR NODE_DIR RELEASE`` by test_node_loss.py (a second Ray cluster cannot share the test session's
process): a local Ray of a CPU-less head and three one-CPU workers; a dispatcher in a thread drains the
queue the test filled. Once both ranks of the first run report their nodes, the node of rank 1 is killed
(no graceful shutdown) and the run's hold released. Prints the killed node's id as JSON."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import select

from ablate.backend.db.models import Run
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings, own_ray
from tests.workers.fakes import FakeRunner

DEADLINE_S = 150.0  # the whole drain on a loaded machine; the stall this guards against took hours


def main(db_url: str, data_dir: str, node_dir: str, release: str) -> None:
    with own_ray(db_url, [{"num_cpus": 1}] * 3, "ablate-node-loss") as (nodes, database):
        settings = make_settings(Path(data_dir), max_concurrent_runs=1, placement_timeout_s=60.0)
        dispatcher = Dispatcher(settings, database, runners={"fake": FakeRunner})
        stop = threading.Event()
        thread = threading.Thread(target=dispatcher.run_forever, args=(stop,), name="node-loss-dispatcher")
        thread.start()
        try:
            end = time.monotonic() + DEADLINE_S
            ranks: dict[str, str] = {}
            while len(ranks) < 2 and time.monotonic() < end:
                ranks = {p.name.split("-")[0]: p.read_text() for p in Path(node_dir).glob("rank*")}
                time.sleep(0.1)
            victim = next(w for w in nodes.worker_nodes if w.node_id == ranks["rank1"])
            nodes.remove_node(victim, allow_graceful=False)
            Path(release).write_text("go")
            while time.monotonic() < end:
                with database.read() as s:
                    statuses = set(s.scalars(select(Run.status)))
                if statuses <= {"succeeded", "failed"}:
                    break
                time.sleep(0.2)
            print(json.dumps({"killed": victim.node_id}))
        finally:
            stop.set()
            thread.join(30.0)


if __name__ == "__main__":
    main(*sys.argv[1:5])
