"""On a node: which processes hold a run attempt's devices, and stopping them for good (no SQL here).

A claim of a run's devices is named by its *holder* id, ``<run>.<attempt>.<claiming dispatcher's tag>``
(unique per claim: a run a stopping dispatcher gave back keeps its attempt number). A node task writes
``<tmp>/ablate-holders/<node id>/<holder>.<rank>`` (its pid and start time) before it touches the devices
and removes it when it ends; every process it starts for the run carries
``ABLATE_DEVICE_HOLDER=<holder>`` in its environment (containers too: the variable goes into the
container). :func:`stop_and_confirm` (a tiny Ray task the dispatcher sends to the node) kills both kinds
and says how many are left; only at zero are the attempt's devices given to another run. It also leaves a
tombstone, checked under the same file lock by a node task that starts late (queued in Ray while its
dispatcher hung): such a task refuses to run instead of sharing devices with their next holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HOLDER_ENV = "ABLATE_DEVICE_HOLDER"
TOMBSTONE_KEEP_S = 86400.0


def _dir(node_id: str) -> Path:
    path = Path(tempfile.gettempdir()) / "ablate-holders" / node_id
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(node_id: str) -> Iterator[Path]:
    folder = _dir(node_id)
    with open(folder / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class Fenced(Exception):
    """This attempt's devices were already taken back (its dispatcher lost it)."""


def register(node_id: str, holder: str, rank: int) -> Path:
    """Say that this process holds the devices of ``holder`` on this node; raises :class:`Fenced` when
    they were taken back before it started."""
    import psutil

    with _locked(node_id) as folder:
        if (folder / f"{holder}.fenced").exists():
            raise Fenced(
                f"the devices of {holder} (run.attempt.claim) were taken back before its task started"
            )
        path = folder / f"{holder}.{rank}"
        path.write_text(f"{os.getpid()} {psutil.Process().create_time()}")
        return path


def unregister(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _holder_pids(folder: Path, holder: str) -> set[int]:
    import psutil

    pids: set[int] = set()
    for path in folder.glob(f"{holder}.*"):
        if path.name.endswith(".fenced"):
            continue
        try:
            pid, created = path.read_text().split()
            if abs(psutil.Process(int(pid)).create_time() - float(created)) < 0.01:
                pids.add(int(pid))
            else:
                path.unlink()
        except (ValueError, OSError, psutil.Error):
            with contextlib.suppress(OSError):
                path.unlink()
    marker = f"{HOLDER_ENV}={holder}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    pids.add(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def stop_and_confirm(node_id: str, holder: str, wait_s: float = 10.0) -> int:
    """Run on the node: fence off the claim (a late task will refuse to start), kill every process
    that holds its devices, and return how many are still alive after ``wait_s`` (0: confirmed gone)."""
    with _locked(node_id) as folder:
        (folder / f"{holder}.fenced").write_text(str(time.time()))
        for old in folder.glob("*.fenced"):  # tombstones of long ago
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > TOMBSTONE_KEEP_S:
                    old.unlink()
    end = time.monotonic() + wait_s
    while True:
        pids = _holder_pids(_dir(node_id), holder)
        if not pids or time.monotonic() > end:
            return len(pids)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
