"""Supervising child processes: stream their output line by line, keep a log, enforce a deadline.

Shared by the command runner (one process) and torch-llm (one process per local rank). Output is read
by one thread per process and handed to the caller's thread through a queue, so line callbacks (and
thus progress callbacks) always run on the thread that called :meth:`ProcessGroup.wait`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ablate.backend.domain.runner import RunSpec, visible_devices_env
from ablate.workers import containers

TAIL_LINES = 50
_EOF = object()


def merged_env(overrides: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``overrides`` on top of ``base`` (default: this process's environment)."""
    env = dict(os.environ if base is None else base)
    env.update({str(k): str(v) for k, v in overrides.items()})
    return env


def describe_returncode(code: int) -> str:
    """Human wording of a Popen return code; negative codes are signals."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = " (killed: likely out of memory or an external kill)" if -code == signal.SIGKILL else ""
    return f"killed by {name} ({code}){hint}"


@dataclass
class ProcOutcome:
    returncode: int | None
    tail: list[str]
    log_path: str
    timed_out: bool = False
    cancelled: BaseException | None = None
    killed_by_peer: bool = False  # we killed it because a sibling rank failed
    log_error: str | None = None  # the log file could not be written from then on (full disk): lines kept

    @property
    def tail_text(self) -> str:
        return "\n".join(self.tail)


@dataclass
class _Child:
    index: int
    popen: subprocess.Popen[str]
    log: IO[str]
    log_path: str
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    eof: bool = False
    killed_by_peer: bool = False
    container: tuple[str, str] | None = None  # (runtime client, container name): removed when stopped
    log_error: str | None = None

    def write(self, line: str) -> None:
        """Append a line to the log file. A write that fails (a full disk, the file system gone
        read-only) stops the log, not the run: the lines still reach the parser and the tail, so the
        metrics are kept, and the outcome says the log is incomplete."""
        if self.log_error is not None:
            return
        try:
            self.log.write(line + "\n")
        except OSError as exc:
            self._log_failed(exc)

    def close_log(self) -> None:
        if self.log.closed:
            return
        try:
            self.log.close()  # flushes the buffer: where a full disk shows
        except OSError as exc:
            self._log_failed(exc)

    def _log_failed(self, exc: OSError) -> None:
        if self.log_error is None:
            self.log_error = f"the log {self.log_path} could not be written: {exc.strerror or exc}"
        with contextlib.suppress(OSError):
            self.log.close()


LineCallback = Callable[[int, str], None]


class ProcessGroup:
    """Start processes (each in its own session, so a kill reaches its whole tree) and supervise them."""

    def __init__(self) -> None:
        self._children: list[_Child] = []
        self._queue: queue.Queue[tuple[int, object]] = queue.Queue()

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: str | Path,
        cwd: str | None = None,
        container: tuple[str, str] | None = None,
    ) -> int:
        """Start one process; returns its index. Raises OSError if it cannot be started.
        ``container``: the process is that container's runtime client (client, container name), and
        stopping it removes the container too."""
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in wait()
        try:
            popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
        except OSError:
            log.close()
            raise
        child = _Child(len(self._children), popen, log, str(log_path), container=container)
        self._children.append(child)
        threading.Thread(target=self._pump, args=(child,), daemon=True).start()
        return child.index

    def _pump(self, child: _Child) -> None:
        assert child.popen.stdout is not None
        for line in child.popen.stdout:
            self._queue.put((child.index, line.rstrip("\r\n")))
        self._queue.put((child.index, _EOF))

    def _kill(self, child: _Child, grace_s: float = 3.0) -> None:
        """SIGTERM the child's process group, SIGKILL it after ``grace_s``."""
        if child.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.popen.pid, signal.SIGTERM)
        try:
            child.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.popen.pid, signal.SIGKILL)
        # Grandchildren may still hold the pipe open; make sure nothing of the group survives.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.popen.pid, signal.SIGKILL)
        self._remove_container(child)

    @staticmethod
    def _remove_container(child: _Child) -> None:
        """A killed runtime client does not stop its container (docker's never does): remove it."""
        if child.container is not None:
            containers.remove(*child.container)

    def kill_all(self) -> None:
        for child in self._children:
            self._kill(child)

    def wait(
        self,
        timeout_s: float,
        on_line: LineCallback | None = None,
        *,
        fail_fast: bool = False,
    ) -> list[ProcOutcome]:
        """Relay lines until every process has exited or the deadline passes.

        ``fail_fast``: when one process exits non-zero, kill the rest (a dead rank leaves its peers
        blocked in collectives). An exception from ``on_line`` kills everything and is reported as
        ``cancelled`` in the outcomes.
        """
        deadline = time.monotonic() + timeout_s
        timed_out = False
        cancelled: BaseException | None = None
        while not all(c.eof for c in self._children):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            try:
                index, item = self._queue.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            child = self._children[index]
            if item is _EOF:
                child.eof = True
                code = child.popen.wait()
                if fail_fast and code != 0:
                    for other in self._children:
                        if other.popen.poll() is None:
                            other.killed_by_peer = True
                            self._kill(other)
                continue
            line = str(item)
            child.write(line)
            child.tail.append(line)
            if on_line is not None and cancelled is None:
                try:
                    on_line(index, line)
                except Exception as exc:  # the caller asked to stop
                    cancelled = exc
                    self.kill_all()
        if timed_out:
            self.kill_all()
        self._drain(grace_s=2.0)
        outcomes = []
        for child in self._children:
            if child.popen.poll() != 0:  # ``--rm`` removes a container that ended; not one whose client died
                self._remove_container(child)
            child.close_log()
            outcomes.append(
                ProcOutcome(
                    returncode=child.popen.poll(),
                    tail=list(child.tail),
                    log_path=child.log_path,
                    timed_out=timed_out,
                    cancelled=cancelled,
                    killed_by_peer=child.killed_by_peer,
                    log_error=child.log_error,
                )
            )
        return outcomes

    def _drain(self, grace_s: float) -> None:
        """Collect output still queued after a kill so logs and tails are complete."""
        end = time.monotonic() + grace_s
        while not all(c.eof for c in self._children) and time.monotonic() < end:
            try:
                index, item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            child = self._children[index]
            if item is _EOF:
                child.eof = True
            else:
                child.write(str(item))
                child.tail.append(str(item))
        for child in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=1.0)


@dataclass(frozen=True)
class RunProcess:
    """One process of a run to start: its command line, its own environment, its log file, its ``rank``
    (names its container; None: the node's only process), its working directory and the mounts its
    container gets besides the run's log directory and the cluster's."""

    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: str | Path
    rank: int | None = None
    cwd: str | None = None
    extra_mounts: Sequence[str] = ()


def start_run_process(group: ProcessGroup, spec: RunSpec, process: RunProcess) -> int:
    """Start one of ``spec``'s processes: on the host (its ``env`` on top of this process's environment),
    or, when the spec has a container, inside it (``env`` alone; see :mod:`ablate.workers.containers`).
    Raises OSError if it cannot be started, ValueError for an environment a container cannot take."""
    if not spec.container:
        return group.start(
            process.argv, env=merged_env(process.env), log_path=process.log_path, cwd=process.cwd
        )
    attempt = int(spec.container.get("attempt") or 1)
    run = containers.ContainerRun(
        name=containers.container_name(spec.run_id, attempt, spec.node_rank, process.rank),
        labels=containers.run_labels(spec.run_id, attempt),
        accelerator=spec.accelerator,
        visible_devices_env=visible_devices_env(spec.cluster),
        log_dir=spec.log_dir,
    )
    it = containers.launch(
        spec.container, process.argv, process.env, run, cwd=process.cwd, extra_mounts=process.extra_mounts
    )
    return group.start(it.argv, env=it.env, log_path=process.log_path, container=(it.client, it.name))
