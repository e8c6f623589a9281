"""`ablate serve`: the API (and, by default, an in-process dispatcher)."""

from __future__ import annotations

import typer
import uvicorn

from ablate.backend.cli.common import check_data_dir, console, open_database, settings
from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from ablate.backend.db.session import check_connection
from ablate.backend.errors import AblateError
from ablate.backend.server import bounded_http

# What each worker process imports and calls (uvicorn's --factory): it reads the same ABLATE_* settings.
APP_FACTORY = "ablate.backend.api.app:create_app"
BOUNDED_HTTP = "ablate.backend.server:BoundedHttpToolsProtocol"
WORKER_START_S = 60  # how long a worker may take to answer its first health check


def prepare_database(database: Database, *, embedded: bool) -> None:
    """Embedded SQLite brings itself up to date; a server database must be migrated on purpose."""
    check_connection(database.engine)
    if embedded:
        migrate.upgrade(database.engine)
    else:
        migrate.assert_up_to_date(database.engine)


def _in_process_dispatcher(dispatcher: bool | None, workers: int) -> bool:
    """One process, one dispatcher. With several workers no worker runs one: each would claim runs
    and start a Ray driver of its own, and ``/readyz`` of one worker could not speak for another's.
    ``ablate dispatcher`` runs beside them instead (docs/deployment.md)."""
    if workers == 1:
        return dispatcher is not False
    if dispatcher:
        raise AblateError(
            f"--dispatcher runs in one process only; with --workers {workers} pass --no-dispatcher "
            "(or leave it out) and run `ablate dispatcher` beside the server"
        )
    if dispatcher is None:
        console.print(
            f"no in-process dispatcher with --workers {workers}: run `ablate dispatcher` beside the server "
            "so queued runs are executed"
        )
    return False


def serve(
    host: str | None = typer.Option(None, help="Bind address (default: ABLATE_HOST)."),
    port: int | None = typer.Option(None, help="Port (default: ABLATE_PORT)."),
    dispatcher: bool | None = typer.Option(
        None,
        "--dispatcher/--no-dispatcher",
        help="Run a dispatcher in this process too (default: yes with one worker; refused with several).",
        show_default=False,
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        max=64,
        help="API worker processes: a slow page holds one of them, not the server. With more than one, "
        "run `ablate dispatcher` beside it.",
    ),
) -> None:
    """Serve the API and dashboard."""
    cfg = settings()
    check_data_dir(cfg)
    run_dispatcher = _in_process_dispatcher(dispatcher, workers)
    database = open_database()
    prepare_database(database, embedded=cfg.is_embedded_sqlite)
    bind_host, bind_port = host or cfg.host, port or cfg.port
    url = database.engine.url.render_as_string()
    shown = f"{workers} worker processes, " if workers > 1 else ""
    console.print(f"Ablate on http://{bind_host}:{bind_port}  ({shown}database: {url})")
    if workers > 1:
        database.dispose()  # each worker opens its own engine from the same settings
        # uvicorn's supervisor starts each worker afresh (spawn: the protocol goes by import path and
        # reads its limits from the same settings) and replaces a worker that dies.
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            workers=workers,
            host=bind_host,
            port=bind_port,
            log_level=cfg.log_level,
            http=BOUNDED_HTTP,
            # A spawned worker answers the supervisor's ping only once it has imported the CLI (this
            # process's __main__) and uvicorn: past uvicorn's 5 s on a loaded machine it was killed
            # and replaced in a loop, and no worker ever served.
            timeout_worker_healthcheck=WORKER_START_S,
        )
        return
    from ablate.backend.api.app import create_app

    app = create_app(cfg, database, run_dispatcher=run_dispatcher)
    uvicorn.run(app, host=bind_host, port=bind_port, log_level=cfg.log_level, http=bounded_http(cfg))
