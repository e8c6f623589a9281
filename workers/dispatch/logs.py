"""A run's log files, one per node (and per rank where the runner has ranks), kept where the API reads them.

Runners write ``<log_dir>/run-<id>/node<N>[-rank<R>].log`` on the node that runs them. The node task
returns its files (the last :data:`SHIP_BYTES` of each) with its result, and the dispatcher writes any
it cannot already see under its own log directory: on one machine or a shared file system nothing is
copied; on a real cluster the API (which reads the dispatcher's data directory) still serves every
node's log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ablate.backend.domain.runner import LOG_NAME, RunSpec

log = logging.getLogger(__name__)

SHIP_BYTES = 4 * 1024 * 1024
_CUT = "[... the start of this log was left on node {host}; this is its last {size} bytes ...]\n"


def collect(spec: RunSpec) -> list[dict[str, Any]]:
    """This node's log files of the run: name, size, the (tail of the) text, and the host."""
    folder = Path(spec.log_file()).parent
    out: list[dict[str, Any]] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.iterdir()):
        m = LOG_NAME.match(path.name)
        if m is None or int(m["node"]) != spec.node_rank:
            continue
        try:
            size = path.stat().st_size
            with path.open("rb") as f:
                f.seek(max(0, size - SHIP_BYTES))
                data = f.read(SHIP_BYTES)
        except OSError as exc:
            log.warning("log %s unreadable: %s", path, exc)
            continue
        out.append({"name": path.name, "size": size, "text": data.decode("utf-8", "replace")})
    return out


def keep(files: list[dict[str, Any]] | None, spec: RunSpec, host: str) -> None:
    """Write the node's shipped log files under this process's log directory unless they are there
    already (same machine or shared file system). Never raises: logs must not lose a result."""
    folder = Path(spec.log_dir) / f"run-{spec.run_id}"
    for entry in files or []:
        name, size = str(entry.get("name", "")), int(entry.get("size", 0))
        if LOG_NAME.match(name) is None:
            continue
        path = folder / name
        try:
            if path.is_file() and path.stat().st_size == size:
                continue
            text = str(entry.get("text", ""))
            if size > len(text.encode("utf-8")):
                text = _CUT.format(host=host, size=SHIP_BYTES) + text
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            log.warning("could not keep log %s of run %s: %s", name, spec.run_id, exc)
