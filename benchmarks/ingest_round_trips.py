"""Round trips to PostgreSQL of one ``POST /api/v1/results`` request, counted at the wire.

    python benchmarks/ingest_round_trips.py [--batch 1] [--requests 5]

Runs the app in-process on a fresh PostgreSQL database, traces every connection's libpq protocol
(``PGconn.trace``) and counts the client's synchronising messages: each simple ``Query`` and each
``Sync`` (an extended-protocol statement, or the pool's ping) waits for the server once; Syncs
sent back to back (the end of a pipeline of statements) wait once together. Pool
pings, ``BEGIN``, ``COMMIT`` and the rollback on returning a connection are all counted. The first
request warms the connection pool and any per-process caches and is not counted; the figure is the
median over ``--requests`` further requests, each with a new idempotency key.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _db import fresh_database
from fastapi.testclient import TestClient
from ingest import make_results, seed_catalog
from sqlalchemy import event

from ablate.backend.api.app import create_app
from ablate.backend.config import Settings
from ablate.backend.db.database import Database


def count_round_trips(trace: Path) -> int:
    """Frontend messages that wait for the server: ``Query`` (simple protocol) and ``Sync``. Syncs
    sent back to back with no server message between them (a pipeline's end: its statements, the
    commit's and the pipeline's own Sync go out together) wait once."""
    n = 0
    previous = ""
    for line in trace.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        # libpq trace lines: [timestamp] direction length message-type ...
        fields = [p for p in parts if p]
        direction = "F" if "F" in fields else "B" if "B" in fields else ""
        if not direction:
            continue
        i = fields.index(direction)
        kind = fields[i + 2].split(" ")[0] if len(fields) > i + 2 else ""
        if direction == "F" and (kind == "Query" or (kind == "Sync" and previous not in ("Sync", "Flush"))):
            n += 1
        previous = kind if direction == "F" else "B"
    return n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1, help="results per request")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--points", type=int, default=100)
    args = parser.parse_args()
    results = make_results(args.batch * (args.requests + 1), args.points)
    with fresh_database() as url, tempfile.TemporaryDirectory() as tmp:
        secret = seed_catalog(url)
        trace = Path(tmp) / "trace.txt"
        sink = trace.open("w")
        database = Database.from_url(url)

        def traced(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.pgconn.trace(sink.fileno())

        event.listen(database.engine, "connect", traced)
        app = create_app(Settings(database_url=url), database)
        counts = []
        with TestClient(app) as client:
            headers = {"Authorization": f"Bearer {secret}"}
            for r in range(args.requests + 1):
                body = json.dumps({"results": results[r * args.batch : (r + 1) * args.batch]})
                before = count_round_trips(trace)
                response = client.post(
                    "/api/v1/results", content=body, headers={**headers, "Idempotency-Key": f"rt-{r}"}
                )
                if response.status_code != 201:
                    sys.exit(f"{response.status_code}: {response.text[:300]}")
                if r:
                    counts.append(count_round_trips(trace) - before)
        database.dispose()
        sink.close()
    print(f"batch of {args.batch}: round trips per request {statistics.median(counts)} (each: {counts})")


if __name__ == "__main__":
    main()
