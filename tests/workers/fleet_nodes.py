"""A small fleet on a local Ray: a CPU-less head, two fake PPU nodes (``PPU: 16`` each, labels ``pool=ppu``,
``rack=a|b``) and a fake GPU node (``GPU: 2``, ``pool=gpu``), with a real ``ppu-smi`` stand-in on PATH that
reports a device busy while a live process holds it (see ``fakes.hold_devices``). Run as ``python -m
tests.workers.fleet_nodes DB_URL DATA_DIR`` by test_fleet.py (a second Ray cluster cannot share the test
session's process), after the test queued the studies of every scenario; each scenario's dispatchers
serve only its own clusters, one scenario after the other:

``two``      two dispatchers, one run each, 8 PPUs of node a each; the second starts once the first holds
             its devices (so its preflight sees them busy);
``restart``  a dispatcher runs X (8 PPUs of node b) and then hangs; a second dispatcher, with Y queued
             (all 16 PPUs of node b), takes over after X's lease expired;
``busy``     one dispatcher, 4 runs at once: three runs of 2 nodes x 16 PPUs (the whole pool, each
             longer than the placement timeout), then a GPU run.

Prints, as JSON, the waiting reasons seen per run id."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.workers.dispatch.dispatcher import Dispatcher
from tests.workers.conftest import make_settings, own_ray
from tests.workers.fakes import FakeRunner

PPU_SMI = """#!{python}
import os, sys
from pathlib import Path

node, hold = os.environ.get("FAKE_NODE", "?"), Path(os.environ["FAKE_HOLD_DIR"])

def busy(i):
    try:
        pid = int((hold / f"{{node}}.{{i}}").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True

for i in range(16):
    if "-L" in sys.argv:
        print(f"PPU {{i}}: PPU (UUID: PPU-{{node}}-{{i}})")
    else:
        print(f"{{i}}, PPU-{{node}}-{{i}}, 1.5.0, 65536, {{1024 if busy(i) else 65000}}")
"""

RUNNERS = {"fake": FakeRunner}


def _seen(database: Database, seen: dict[int, list[str]]) -> None:
    from sqlalchemy import select

    with database.read() as s:
        for run_id, error in s.execute(select(Run.id, Run.error).where(Run.status == "queued")):
            if error and error.startswith("waiting") and error not in seen.setdefault(run_id, []):
                seen[run_id].append(error)


def _terminal(database: Database, clusters: list[str]) -> bool:
    from sqlalchemy import select

    from ablate.backend.db.models import Cluster

    with database.read() as s:
        states = s.scalars(
            select(Run.status).join(Cluster, Cluster.id == Run.cluster_id).where(Cluster.name.in_(clusters))
        ).all()
    return bool(states) and all(st in ("succeeded", "failed", "cancelled") for st in states)


def _holding(hold: Path, node: str) -> bool:
    """A live process holds a device of ``node``."""
    for path in hold.glob(f"{node}.*"):
        try:
            os.kill(int(path.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            continue
        return True
    return False


def _until(cond: object, step: object, limit_s: float, what: str) -> None:
    end = time.monotonic() + limit_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > end:
            raise TimeoutError(what)
        step()  # type: ignore[operator]


def two(database: Database, data: Path, hold: Path, seen: dict[int, list[str]]) -> None:
    settings = make_settings(data, max_concurrent_runs=1)
    first = Dispatcher(settings, database, runners=RUNNERS, cluster_names=["ppu-a-8"])
    second = Dispatcher(settings, database, runners=RUNNERS, cluster_names=["ppu-a-8"])
    first.connect()
    second.connect()
    _until(lambda: _holding(hold, "a"), lambda: first.step(0.1), 120, "the first run never held its devices")

    def both() -> None:
        first.step(0.05)
        second.step(0.05)
        _seen(database, seen)

    _until(lambda: _terminal(database, ["ppu-a-8"]), both, 180, "scenario two did not end")
    first.shutdown()
    second.shutdown()


def restart(database: Database, data: Path, hold: Path, seen: dict[int, list[str]]) -> None:
    settings = make_settings(data, max_concurrent_runs=1, device_release_grace_s=600.0)
    hung = Dispatcher(settings, database, runners=RUNNERS, cluster_names=["ppu-b-8"])
    hung.connect()
    _until(lambda: _holding(hold, "b"), lambda: hung.step(0.1), 120, "run X never held its devices")
    # `hung` stops here (no renewals) while its node task runs on; a second dispatcher serves both clusters
    both = ["ppu-b-8", "ppu-b-16"]
    settings = make_settings(data, max_concurrent_runs=2)
    later = Dispatcher(settings, database, runners=RUNNERS, cluster_names=both)
    later.connect()

    def step() -> None:
        later.step(0.1)
        _seen(database, seen)

    _until(lambda: _terminal(database, ["ppu-b-8", "ppu-b-16"]), step, 240, "scenario restart did not end")
    for _ in range(5):  # the hung one wakes up: nothing of it may count or take devices back
        hung.step(0.1)
    hung.shutdown()
    later.shutdown()


def busy(database: Database, data: Path, hold: Path, seen: dict[int, list[str]]) -> None:
    settings = make_settings(data, max_concurrent_runs=4, placement_timeout_s=2.0)
    dispatcher = Dispatcher(settings, database, runners=RUNNERS, cluster_names=["ppu-2x16", "gpu-1"])
    dispatcher.connect()

    def step() -> None:
        dispatcher.step(0.1)
        _seen(database, seen)

    _until(lambda: _terminal(database, ["ppu-2x16", "gpu-1"]), step, 240, "scenario busy did not end")
    dispatcher.shutdown()


def main(db_url: str, data_dir: str) -> None:
    data = Path(data_dir)
    hold, bin_dir = data / "held", data / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "ppu-smi").write_text(PPU_SMI.format(python=sys.executable))
    (bin_dir / "ppu-smi").chmod(0o755)
    # the raylets, and so their workers, inherit these
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    os.environ["FAKE_HOLD_DIR"] = str(hold)
    workers = [
        {
            "num_cpus": 3,
            "resources": {"PPU": 16},
            "labels": {"pool": "ppu", "rack": rack},
            "env_vars": {"FAKE_NODE": rack},
        }
        for rack in ("a", "b")
    ]
    workers.append({"num_cpus": 2, "num_gpus": 2, "labels": {"pool": "gpu"}, "env_vars": {"FAKE_NODE": "g"}})
    seen: dict[int, list[str]] = {}
    with own_ray(db_url, workers, "ablate-fleet") as (_, database):
        for scenario in sys.argv[3:]:
            {"two": two, "restart": restart, "busy": busy}[scenario](database, data, hold, seen)
    print(json.dumps({"waiting": seen}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
