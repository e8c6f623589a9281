"""A run's log files: one per node (and per rank where the runner starts ranks), per attempt, as the
dispatcher keeps them under ``<log_dir>/run-<id>/attempt-<N>/`` (see ``ablate.workers.dispatch.logs``).

Every attempt keeps its own folder, so the logs of an attempt that failed and was retried stay readable
beside the retry's, with what became of that attempt. Runs logged before logs were kept per attempt
have their files in ``run-<id>/`` itself; they are listed as attempt 0 (:data:`EARLIER`).

Only names of the form ``node<N>[-rank<R>|-image].log`` in those folders are ever listed or opened, so a
request cannot reach any other file (no path traversal). The host of each node comes from the run's
provenance (the last attempt's: an earlier attempt's node may have been another host).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend.db.models import Run
from ablate.backend.domain.runner import ATTEMPT_DIR, ATTEMPT_OUTCOME, LOG_NAME
from ablate.backend.services.errors import NotFound
from ablate.backend.services.runs import get_run

# The "attempt" of files kept before logs were kept per attempt (real attempts count from 1): they hold
# whatever the last attempt that wrote them wrote.
EARLIER = 0
LEGACY_REASON = "kept before each attempt had its own log folder: the last attempt's files"


@dataclass
class Attempt:
    """One attempt of a run, what became of it, and its log files."""

    attempt: int  # EARLIER (0): files of the earlier single-folder layout
    current: bool  # the run's latest attempt (its outcome is the run's status)
    outcome: str  # the run's status for the current attempt; "retried", "superseded", "unknown" before it
    reason: str | None
    files: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "current": self.current,
            "outcome": self.outcome,
            "reason": self.reason,
            "files": self.files,
        }


def _folder(log_dir: Path, run_id: int) -> Path:
    return log_dir / f"run-{run_id}"


def _files(folder: Path, run: Run, attempt: int) -> list[dict[str, Any]]:
    prov = run.provenance or {}
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
                "attempt": attempt,
                "node_rank": node,
                "rank": int(m["rank"]) if m["rank"] is not None else None,
                "host": host,
                "size": path.stat().st_size,
            }
        )
    items.sort(key=lambda i: (i["node_rank"], -1 if i["rank"] is None else i["rank"], i["name"]))
    return items


def _attempt_folders(log_dir: Path, run_id: int) -> dict[int, Path]:
    root = _folder(log_dir, run_id)
    found: dict[int, Path] = {}
    for path in root.iterdir() if root.is_dir() else []:
        m = ATTEMPT_DIR.match(path.name)
        if m is not None and path.is_dir():
            found[int(m["attempt"])] = path
    return found


def _noted(folder: Path | None) -> tuple[str, str] | None:
    """The outcome the dispatcher noted beside an attempt's logs, if it could."""
    if folder is None:
        return None
    try:
        data = json.loads((folder / ATTEMPT_OUTCOME).read_text(encoding="utf-8"))
        return str(data["outcome"]), str(data["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def attempts(session: Session, run_id: int, log_dir: Path) -> list[Attempt]:
    """Every attempt of the run, oldest first, each with its outcome and log files; the earlier layout's
    files (if any) come first, as attempt 0 (EARLIER). Empty when a first attempt logged nothing."""
    run = get_run(session, run_id)
    folders = _attempt_folders(log_dir, run.id)
    legacy = _files(_folder(log_dir, run.id), run, EARLIER)
    numbers = sorted(set(folders) | (set(range(1, run.attempt + 1)) if run.attempt > 1 else set()))
    out: list[Attempt] = []
    if legacy:
        out.append(Attempt(EARLIER, False, "unknown", LEGACY_REASON, legacy))
    for n in numbers:
        folder = folders.get(n)
        files = _files(folder, run, n) if folder is not None else []
        if n == run.attempt:
            out.append(Attempt(n, True, run.status, run.error, files))
            continue
        noted = _noted(folder)
        if noted is not None:
            out.append(Attempt(n, False, noted[0], noted[1], files))
        elif n < run.attempt:
            why = (
                "no outcome was recorded (its dispatcher was lost or stopped before recording one); "
                f"attempt {n + 1} followed"
            )
            out.append(Attempt(n, False, "superseded", why, files))
        else:  # a folder past the run's attempt: left by a run taken over meanwhile; say what is known
            out.append(Attempt(n, False, "unknown", None, files))
    return out


def list_logs(session: Session, run_id: int, log_dir: Path) -> list[dict[str, Any]]:
    """The run's log files, by attempt, then node rank, then rank: name, attempt, node rank, rank, host,
    size in bytes."""
    return [f for a in attempts(session, run_id, log_dir) for f in a.files]


def log_file(session: Session, run_id: int, name: str, log_dir: Path, attempt: int | None = None) -> Path:
    """The path of one log file of the run: of ``attempt`` (0: the earlier single-folder layout), or (None)
    of the newest attempt that has a file of that name. NotFound unless it is one of the run's log files."""
    run = get_run(session, run_id)
    if LOG_NAME.match(name) is not None:
        folders = _attempt_folders(log_dir, run.id)
        folders[EARLIER] = _folder(log_dir, run.id)
        if attempt is not None:
            candidates = [folders[attempt]] if attempt in folders else []
        else:
            candidates = [folders[n] for n in sorted(folders, reverse=True)]
        for folder in candidates:
            if (folder / name).is_file():
                return folder / name
    where = f" in attempt {attempt}" if attempt is not None else ""
    raise NotFound.at("name", f"run {run.id} has no log file {name!r}{where}")
