"""A run's log files: one per node (and per rank where the runner starts ranks), as the dispatcher keeps
them under ``<log_dir>/run-<id>/`` (see ``ablate.workers.dispatch.logs``).

Only names of the form ``node<N>[-rank<R>].log`` are ever listed or opened, so a request cannot reach
any other file (no path traversal). The host of each node comes from the run's provenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend.domain.runner import LOG_NAME
from ablate.backend.services.errors import NotFound
from ablate.backend.services.runs import get_run


def _folder(log_dir: Path, run_id: int) -> Path:
    return log_dir / f"run-{run_id}"


def list_logs(session: Session, run_id: int, log_dir: Path) -> list[dict[str, Any]]:
    """The run's log files, by node rank then rank: name, node rank, rank, host, size in bytes."""
    run = get_run(session, run_id)
    prov = run.provenance or {}
    folder = _folder(log_dir, run.id)
    items = []
    for path in folder.iterdir() if folder.is_dir() else []:
        m = LOG_NAME.match(path.name)
        if m is None or not path.is_file():
            continue
        node = int(m["node"])
        host = prov.get(f"node{node}.host") or (prov.get("host") if node == 0 else None)
        items.append(
            {
                "name": path.name,
                "node_rank": node,
                "rank": int(m["rank"]) if m["rank"] is not None else None,
                "host": host,
                "size": path.stat().st_size,
            }
        )
    items.sort(key=lambda i: (i["node_rank"], -1 if i["rank"] is None else i["rank"]))
    return items


def log_file(session: Session, run_id: int, name: str, log_dir: Path) -> Path:
    """The path of one log file of the run; NotFound unless it is one of the run's log files."""
    run = get_run(session, run_id)
    path = _folder(log_dir, run.id) / name
    if LOG_NAME.match(name) is None or not path.is_file():
        raise NotFound.at("name", f"run {run.id} has no log file {name!r}")
    return path
