"""`ablate dispatcher`: run the dispatcher on its own (one per Ray cluster)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import typer

from ablate.backend.cli.common import check_data_dir, console, open_database, settings
from ablate.backend.cli.serve import prepare_database


def dispatcher(
    max_concurrent: int | None = typer.Option(
        None, "--max-concurrent", help="Runs executed at once (default: ABLATE_MAX_CONCURRENT_RUNS)."
    ),
    cluster: list[str] | None = typer.Option(
        None, "--cluster", help="Serve only these clusters (by name; repeatable). Default: all of this Ray."
    ),
    exit_when_idle: bool = typer.Option(
        False, "--exit-when-idle", help="Stop once nothing is queued or running (batch jobs, CI)."
    ),
) -> None:
    """Claim queued runs, execute them on Ray, record their results."""
    cfg = settings()
    if max_concurrent is not None:
        cfg = cfg.model_copy(update={"max_concurrent_runs": max_concurrent})
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_data_dir(cfg)
    database = open_database()
    prepare_database(database, embedded=cfg.is_embedded_sqlite)
    from ablate.workers.dispatch.dispatcher import Dispatcher

    d = Dispatcher(cfg, database, cluster_names=cluster or None)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        console.print(f"dispatcher: {name}, stopping (in-flight runs go back to the queue)")
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    d.connect()
    url = database.engine.url.render_as_string()
    console.print(f"dispatcher {d.owner} on Ray {d.ray_address}; database {url}")
    if exit_when_idle:
        d.drain(timeout_s=float("inf"), until=stop.is_set)
        d.shutdown()
    else:
        d.run_forever(stop)
