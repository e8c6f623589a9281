"""A run's log files, one per node (and per rank where the runner has ranks), kept where the API reads them.

Runners write ``<log_dir>/run-<id>/attempt-<A>/node<N>[-rank<R>].log`` on the node that runs them (one
folder per attempt: a retry never overwrites the logs of the attempt that failed). The node task
returns its files (the last :data:`SHIP_BYTES` of each) with its result, and the dispatcher writes any
it cannot already see under its own log directory: on one machine or a shared file system nothing is
copied; on a real cluster the API (which reads the dispatcher's data directory) still serves every
node's log.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ablate.backend.domain.runner import ATTEMPT_OUTCOME, LOG_NAME, RunSpec, attempt_log_folder

log = logging.getLogger(__name__)

SHIP_BYTES = 4 * 1024 * 1024
_CUT = "[... the start of this log was left on node {host}; this is its last {size} bytes ...]\n"


def collect(spec: RunSpec) -> list[dict[str, Any]]:
    """This node's log files of the run: name, size, the (tail of the) text, and the host."""
    # Plain strings and os calls: this runs in every node task, where Path objects per file cost more
    # than the rest of the task (a trivial run has no log files at all).
    folder = str(attempt_log_folder(spec.log_dir, spec.run_id, spec.attempt))
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[dict[str, Any]] = []
    for name in names:
        m = LOG_NAME.match(name)
        if m is None or int(m["node"]) != spec.node_rank:
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - SHIP_BYTES))
                data = f.read(SHIP_BYTES)
        except OSError as exc:
            log.warning("log %s unreadable: %s", path, exc)
            continue
        out.append({"name": name, "size": size, "text": data.decode("utf-8", "replace")})
    return out


def keep(files: list[dict[str, Any]] | None, spec: RunSpec, host: str) -> None:
    """Write the node's shipped log files under this process's log directory unless they are there
    already (same machine or shared file system). Never raises: logs must not lose a result."""
    if not files:
        return
    folder = Path(spec.log_file()).parent
    for entry in files:
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


def note_outcome(log_dir: str | Path, run_id: int, attempt: int, outcome: str, reason: str) -> None:
    """Keep what became of an attempt that did not finish its run (e.g. retried after an infrastructure
    failure) beside its logs, where the API lists it with them. Never raises: it must not stop a retry."""
    folder = Path(attempt_log_folder(log_dir, run_id, attempt))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"attempt": attempt, "outcome": outcome, "reason": reason})
        (folder / ATTEMPT_OUTCOME).write_text(text, encoding="utf-8")
    except OSError as exc:
        log.warning("could not note the outcome of attempt %s of run %s: %s", attempt, run_id, exc)
