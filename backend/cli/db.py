"""`ablate db`: schema migrations."""

from __future__ import annotations

from collections.abc import Callable

import typer
from sqlalchemy import Engine

from ablate.backend.cli.common import App, console, open_database
from ablate.backend.db import migrate
from ablate.backend.db.session import check_connection

app = App(help="Database schema: upgrade, downgrade, current.", no_args_is_help=True)

URL = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL or the embedded SQLite).")


def _move(step: Callable[[Engine, str], None], revision: str, url: str | None) -> None:
    """Migrate up or down to ``revision`` and say where the database now is."""
    database = open_database(url)
    check_connection(database.engine)
    step(database.engine, revision)
    console.print(f"database at {migrate.current_revision(database.engine) or 'base'}")


@app.command()
def upgrade(
    revision: str = typer.Argument("head", help="Target revision (default: the newest)."),
    url: str | None = URL,
) -> None:
    """Apply migrations up to REVISION."""
    _move(migrate.upgrade, revision, url)


@app.command()
def downgrade(
    revision: str = typer.Argument(..., help="Target revision; `base` empties the schema."),
    url: str | None = URL,
) -> None:
    """Revert migrations down to REVISION."""
    _move(migrate.downgrade, revision, url)


@app.command()
def current(url: str | None = URL) -> None:
    """Print the database's current revision and the newest this code knows."""
    database = open_database(url)
    check_connection(database.engine)
    migrate.assert_not_newer(database.engine)
    rev = migrate.current_revision(database.engine)
    head = migrate.head_revision()
    state = "up to date" if rev == head else "needs `ablate db upgrade`"
    console.print(f"current: {rev or 'base (empty)'}  head: {head}  ({state})")
