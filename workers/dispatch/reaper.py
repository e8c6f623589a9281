"""A watchdog per Ray worker process that kills the runner's processes when the worker dies.

Runners start their children in new sessions (so a timeout can kill a whole process tree), which
also means the children do *not* die with the Ray worker: ``ray.cancel(force=True)``, an OOM kill or a
crashed worker would leave a training process running on the node, holding its devices and skewing
the next run. So the first run on a worker starts this small process (itself in a new session, so it
survives the worker's process group being killed). While a run is active it records the worker's
descendants a few times a second; when the worker dies (its end of our stdin pipe closes without a
``quit``) it kills every recorded process and process group that still exists.

Protocol on stdin, one word a line: ``active`` / ``idle`` (poll fast / stop polling), ``quit``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import psutil

ACTIVE_POLL_S = 0.2
# "idle" is said only once no run started for this long: a worker running short runs back to back
# writes (and wakes its reaper) once, not twice per run; between them the reaper keeps polling.
IDLE_AFTER_S = 1.0

_started: subprocess.Popen[str] | None = None  # the launcher; its stdin pipe reaches the reaper
_reaper: int | None = None  # the detached reaper's pid
_lock = threading.Lock()
_state_lock = threading.Lock()  # orders "active" and "idle" on the pipe
_active = [False]  # what the reaper was told last
_idle_due: list[float | None] = [None]  # when "idle" is said, unless a run starts first
_idler: list[threading.Thread] = []


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _send(word: str) -> None:
    proc = _started
    if proc is None or proc.stdin is None or not _alive(_reaper):
        return
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.write(word + "\n")
        proc.stdin.flush()


def ensure_started() -> None:
    """Start this worker's reaper once; later calls are free. The reaper detaches (a double fork): Ray
    kills a worker's direct children when the worker exits, which would take the reaper with it
    before it could clean up."""
    global _started, _reaper
    with _lock:
        if _started is not None and _alive(_reaper):
            return
        _active[0] = False  # a new reaper starts idle
        launcher = subprocess.Popen(
            [sys.executable, "-m", "ablate.workers.dispatch.reaper", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            close_fds=True,
        )
        assert launcher.stdout is not None
        line = launcher.stdout.readline()  # the launcher prints the detached reaper's pid and exits
        launcher.stdout.close()
        launcher.wait()
        _started, _reaper = launcher, int(line) if line.strip().isdigit() else None


def active() -> None:
    """A run starts on this worker: the reaper records its processes from now on."""
    ensure_started()
    with _state_lock:
        _idle_due[0] = None
        if not _active[0]:
            _active[0] = True
            _send("active")


def idle() -> None:
    """The run ended: the reaper stops polling IDLE_AFTER_S from now, unless another run starts first."""
    with _state_lock:
        _idle_due[0] = time.monotonic() + IDLE_AFTER_S
        if not _idler or not _idler[0].is_alive():
            _idler[:] = [threading.Thread(target=_idle_later, name="ablate-reaper-idle", daemon=True)]
            _idler[0].start()


def _idle_later() -> None:
    while True:
        time.sleep(IDLE_AFTER_S / 4)
        with _state_lock:
            due = _idle_due[0]
            if due is not None and time.monotonic() >= due:
                _idle_due[0] = None
                _active[0] = False
                _send("idle")


_container_clients: set[str] = set()


def containers(client: str) -> None:
    """Tell the reaper this worker starts containers through ``client``: when the worker dies, the
    reaper removes its containers too (killing a runtime's client does not stop its container)."""
    if client not in _container_clients:
        _container_clients.add(client)
        _send(f"containers {client}")


def reaper_pid() -> int | None:
    return _reaper


# --- the reaper process -------------------------------------------------------------------------


def _descendants(parent: psutil.Process, me: int) -> dict[int, float]:
    pids = _child_pids(parent.pid)
    if pids is None:  # no /proc/<pid>/task/<tid>/children (kernel without CONFIG_PROC_CHILDREN)
        try:
            return {p.pid: p.create_time() for p in parent.children(recursive=True) if p.pid != me}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return {}
    out: dict[int, float] = {}
    for pid in pids:
        if pid != me:
            with contextlib.suppress(psutil.Error):
                out[pid] = psutil.Process(pid).create_time()
    return out


def _child_pids(root: int) -> list[int] | None:
    """Every descendant of ``root``, read from each thread's ``children`` file: a few small reads,
    where psutil's ``children(recursive=True)`` reads the stat file of every process on the machine
    (about 15 ms with 120 processes, once per run and per poll). None when the kernel lacks the file."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    out: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def _kill_recorded(seen: dict[int, float]) -> None:
    # First re-collect what the recorded processes started since the last poll, then kill groups
    # (a runner child leads its own session, so its group holds e.g. compile workers) and pids.
    procs: list[psutil.Process] = []
    for pid, created in seen.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.01:  # not a recycled pid
                procs.append(p)
                procs.extend(p.children(recursive=True))
    kill_with_groups(procs)


def kill_with_groups(procs: list[psutil.Process]) -> None:
    """SIGKILL each process, and the whole process group of each one that leads its own (a runner
    child leads its own session, so its group holds e.g. compile workers)."""
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == p.pid:
                os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            p.kill()


def main(parent_pid: int) -> None:
    me = os.getpid()
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        return
    seen: dict[int, float] = {}
    clients: set[str] = set()
    is_active = threading.Event()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            if is_active.wait(timeout=1.0):
                current = _descendants(parent, me)
                seen.update(current)
                # forget what exited normally, so a long-lived worker's record stays small
                for pid in [p for p in seen if p not in current and not psutil.pid_exists(p)]:
                    seen.pop(pid, None)
                time.sleep(ACTIVE_POLL_S)

    threading.Thread(target=poll, daemon=True).start()
    for line in sys.stdin:
        word = line.strip()
        if word == "quit":
            done.set()
            return
        if word == "active":
            seen.update(_descendants(parent, me))
            is_active.set()
        elif word == "idle":
            is_active.clear()
            seen.clear()
        elif word.startswith("containers "):
            clients.add(word.split(" ", 1)[1])
    # EOF without quit: the worker is gone (killed, crashed, cancelled with force).
    done.set()
    _kill_recorded(seen)
    for client in clients:  # its containers are orphans now: their owner label names a dead pid
        from ablate.workers.containers import sweep_orphans

        sweep_orphans(client)


def _detach() -> None:
    """Fork: the launcher prints the child's pid and exits; the child (the reaper) keeps stdin."""
    child = os.fork()
    if child:
        print(child, flush=True)
        os._exit(0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)


if __name__ == "__main__":
    _detach()
    main(int(sys.argv[1]))
