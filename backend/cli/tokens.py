"""`ablate token`: API tokens, straight in the database (how the first admin token comes to be)."""

from __future__ import annotations

import typer
from rich.table import Table

from ablate.backend.cli.common import App, console, open_database, settings
from ablate.backend.cli.serve import prepare_database
from ablate.backend.db.database import Database
from ablate.backend.services import tokens

app = App(help="API tokens: create (the secret is printed once), list, revoke.", no_args_is_help=True)

URL = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL or the embedded SQLite).")


def _database(url: str | None) -> Database:
    database = open_database(url)
    prepare_database(database, embedded=url is None and settings().is_embedded_sqlite)
    return database


@app.command()
def create(
    name: str = typer.Option(..., "--name", help="Who uses it, e.g. ci-nv."),
    scope: str = typer.Option("submit", "--scope", help="read, submit or admin."),
    expires_in: str | None = typer.Option(
        None, "--expires-in", help="Lifetime, e.g. 30d, 12h, 90m or 2w (default: never expires)."
    ),
    url: str | None = URL,
) -> None:
    """Create a token and print its secret: the only time it is shown (the database keeps a hash)."""
    database = _database(url)
    with database.transaction() as session:
        token, secret = tokens.create_token(session, name, scope, expires_in)
        token_id, expires_at = token.id, token.expires_at
    until = f", expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else ""
    console.print(
        f"token {token_id} {name!r} (scope {scope}{until}); secret, shown only now:",
        highlight=False,
        soft_wrap=True,
    )
    # plain print: the secret must be copyable without rich's wrapping or markup
    print(secret)


@app.command("list")
def list_(url: str | None = URL) -> None:
    """Every token with scope, last use and revocation (never the secret)."""
    database = _database(url)
    with database.read() as session:
        rows = tokens.list_tokens(session)
    table = Table("id", "name", "scope", "created", "last used", "revoked", "expires")
    for t in rows:
        table.add_row(
            str(t.id),
            t.name,
            t.scope,
            f"{t.created_at:%Y-%m-%d %H:%M}",
            f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "-",
            f"{t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "-",
            f"{t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at else "never",
        )
    console.print(table)


@app.command()
def revoke(token: str = typer.Argument(..., help="Token id or name."), url: str | None = URL) -> None:
    """Revoke a token: requests with it get 401 from now on."""
    database = _database(url)
    with database.transaction() as session:
        revoked = tokens.revoke_token(session, token)
        name = revoked.name
    console.print(f"revoked token {name!r}", highlight=False, soft_wrap=True)
