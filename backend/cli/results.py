"""`ablate results submit`: the CI client of ``POST /api/v1/results``.

Each file is one batch, all or nothing. Its Idempotency-Key is the sha256 of the file's bytes, so
retrying (here on connection errors and 5xx, with back-off, or by CI re-running the job) can never
store a result twice: the server answers a repeat with the first run ids.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import typer

from ablate.backend.cli.common import SERVER, TOKEN, App, console, fail
from ablate.backend.cli.http import auth_headers, describe_problem, server_url
from ablate.backend.config import BackoffPolicy
from ablate.backend.errors import AblateError

app = App(help="Results from CI: submit result files to a server.", no_args_is_help=True)

RETRYABLE = {429, 500, 502, 503, 504}


def idempotency_key(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def load_batch(path: Path) -> tuple[bytes, bytes]:
    """(body to send, bytes the key derives from). A file holds a batch, a list, or one result."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AblateError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AblateError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(data, dict) and "results" in data:
        return raw, raw  # sent byte for byte: what the server checks is exactly the file
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise AblateError(f'{path}: expected {{"results": [...]}}, a list of results, or one result')
    return json.dumps({"results": data}).encode(), raw


def post_with_retries(
    client: httpx.Client,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    retries: int,
    backoff_s: float,
    give_up_after_s: float | None = None,
) -> httpx.Response:
    """POST, retrying connection errors and 5xx with exponential back-off (safe: the key is stable),
    at most ``retries`` times and, with ``give_up_after_s``, no later than that many seconds from now."""
    deadline = None if give_up_after_s is None else time.monotonic() + give_up_after_s
    for attempt in itertools.count():
        problem: Exception | None = None
        try:
            response = client.post(url, content=body, headers=headers)
        except httpx.TransportError as exc:
            problem = exc
        else:
            if response.status_code not in RETRYABLE:
                return response
        pause = BackoffPolicy(backoff_s, 30.0).delay_s(attempt + 1)
        if deadline is not None:
            pause = min(pause, deadline - time.monotonic())
        if attempt >= retries or (deadline is not None and pause <= 0):
            if problem is None:
                return response
            raise AblateError(f"cannot reach {url} after {attempt + 1} attempts: {problem!r}") from None
        time.sleep(pause)
    raise AssertionError("unreachable")


@app.command()
def submit(
    files: list[Path] = typer.Argument(..., help="Result files (JSON)."),
    server: str | None = SERVER,
    token: str | None = TOKEN,
    retries: int = typer.Option(5, "--retries", min=0, help="Retries on connection errors and 5xx."),
    backoff: float = typer.Option(0.5, "--backoff", min=0.0, help="First back-off in seconds (doubles)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds per request."),
) -> None:
    """Submit result files; print the run ids. Exits 1 with the server's message if one is refused."""
    base = server_url(server)
    headers = {"Content-Type": "application/json", **auth_headers(token)}
    failed = 0
    with httpx.Client(timeout=timeout) as client:
        for path in files:
            body, key_source = load_batch(path)
            response = post_with_retries(
                client,
                f"{base}/api/v1/results",
                body,
                {**headers, "Idempotency-Key": idempotency_key(key_source)},
                retries=retries,
                backoff_s=backoff,
            )
            if response.status_code in (200, 201):
                out = response.json()
                state = "stored" if out.get("created") else "already stored"
                ids = " ".join(str(i) for i in out.get("run_ids", []))
                console.print(f"{path}: {state}: runs {ids}", highlight=False, soft_wrap=True)
            else:
                failed += 1
                console.print(
                    f"[bold red]{path}: refused:[/] {describe_problem(response)}",
                    highlight=False,
                    soft_wrap=True,
                )
    if failed:
        fail(f"{failed} of {len(files)} file(s) refused")
