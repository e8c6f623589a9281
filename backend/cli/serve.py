"""`ablate serve`: the API (and, by default, an in-process dispatcher)."""

from __future__ import annotations

import typer
import uvicorn

from ablate.backend.cli.common import check_data_dir, console, open_database, settings
from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from ablate.backend.db.session import check_connection
from ablate.backend.server import bounded_http


def prepare_database(database: Database, *, embedded: bool) -> None:
    """Embedded SQLite brings itself up to date; a server database must be migrated on purpose."""
    check_connection(database.engine)
    if embedded:
        migrate.upgrade(database.engine)
    else:
        migrate.assert_up_to_date(database.engine)


def serve(
    host: str | None = typer.Option(None, help="Bind address (default: ABLATE_HOST)."),
    port: int | None = typer.Option(None, help="Port (default: ABLATE_PORT)."),
    dispatcher: bool = typer.Option(
        True, "--dispatcher/--no-dispatcher", help="Run a dispatcher in this process too."
    ),
) -> None:
    """Serve the API and dashboard."""
    cfg = settings()
    check_data_dir(cfg)
    database = open_database()
    prepare_database(database, embedded=cfg.is_embedded_sqlite)
    from ablate.backend.api.app import create_app

    app = create_app(cfg, database, run_dispatcher=dispatcher)
    bind_host, bind_port = host or cfg.host, port or cfg.port
    console.print(
        f"Ablate on http://{bind_host}:{bind_port}  (database: {database.engine.url.render_as_string()})"
    )
    uvicorn.run(app, host=bind_host, port=bind_port, log_level=cfg.log_level, http=bounded_http(cfg))
