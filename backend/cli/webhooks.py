"""`ablate webhook add/list/remove/deliveries`: admins' webhooks, over the server (admin token)."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import typer

from ablate.backend.cli.common import ADMIN_TOKEN, SERVER, App, console
from ablate.backend.cli.http import client, describe_problem, request_json
from ablate.backend.errors import AblateError

app = App(help="Webhooks: where events are POSTed (admin token).", no_args_is_help=True)

EVENTS = ("release.regression", "release.resolved", "study.finished", "study.failed")


@app.command()
def add(
    url: str = typer.Argument(..., help="Where to POST, e.g. https://hooks.slack.com/services/..."),
    event: list[str] = typer.Option(
        ..., "--event", "-e", help=f"Event to send (repeatable): {', '.join(EVENTS)}."
    ),
    secret: str | None = typer.Option(
        None,
        "--secret",
        help="Signs each body (X-Ablate-Signature-256); at least 8 characters. Left out: asked for "
        "without echo, or read from standard input (keeps it out of the shell's history).",
    ),
    description: str | None = typer.Option(None, "--description", help="What it is for."),
    as_json: bool = typer.Option(False, "--json", help="Print the server's JSON."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Add a webhook. The target must resolve to public addresses unless the server allows private ones."""
    if not secret:
        secret = typer.prompt("secret", hide_input=True, err=True).strip()
    body: dict[str, Any] = {"url": url, "secret": secret, "events": event}
    if description:
        body["description"] = description
    with client(server, token) as http:
        created = request_json(http, "POST", "/webhooks", json=body)
    if as_json:
        sys.stdout.write(json.dumps(created, indent=2) + "\n")
        return
    console.print(
        f"webhook {created['id']}: {created['url']} ({', '.join(created['events'])})",
        highlight=False,
        soft_wrap=True,
    )


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print the server's JSON."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Every webhook with its events (never the secret)."""
    with client(server, token) as http:
        hooks = request_json(http, "GET", "/webhooks")
    if as_json:
        sys.stdout.write(json.dumps(hooks, indent=2) + "\n")
        return
    # One line per webhook, tab-separated: URLs are long, and a table would wrap them.
    print("id\turl\tevents\tdescription\tcreated by\tcreated")
    for h in hooks:
        fields = [
            str(h["id"]),
            h["url"],
            ",".join(h["events"]),
            h.get("description") or "-",
            h.get("created_by") or "-",
            str(h["created_at"])[:16].replace("T", " "),
        ]
        print("\t".join(fields))


@app.command()
def remove(
    webhook_id: int = typer.Argument(..., help="The webhook's id (see `ablate webhook list`)."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Remove a webhook; its deliveries not yet made are dropped."""
    with client(server, token) as http:
        try:
            response = http.delete(f"/webhooks/{webhook_id}")
        except httpx.TransportError as exc:
            raise AblateError(f"cannot reach {http.base_url}: {exc}") from None
        if response.status_code >= 400:
            raise AblateError(describe_problem(response))
    console.print(f"removed webhook {webhook_id}", highlight=False)


@app.command()
def deliveries(
    webhook_id: int = typer.Argument(..., help="The webhook's id."),
    limit: int = typer.Option(20, "--limit", help="Newest deliveries shown."),
    as_json: bool = typer.Option(False, "--json", help="Print the server's JSON (bodies included)."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """A webhook's deliveries, newest first: status, attempts, each attempt's status code or error."""
    with client(server, token) as http:
        rows = request_json(http, "GET", f"/webhooks/{webhook_id}/deliveries", params={"limit": limit})
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    print("delivery\tevent\tstatus\tattempts\tcreated\tanswers")
    for d in rows:
        answers = "; ".join(
            str(a["status_code"]) if a["status_code"] and not a["error"] else (a["error"] or "?")[:80]
            for a in d["history"]
        )
        fields = [
            d["delivery_id"],
            d["event"],
            d["status"],
            str(d["attempts"]),
            str(d["created_at"])[:19].replace("T", " "),
            answers or "-",
        ]
        print("\t".join(fields))
