"""What runs inside Ray: one task per node of a run, which preflights the node and runs its ranks.

Each node task gets the specs of its node (see :mod:`ablate.workers.dispatch.spec`): one launcher
(``per-node``), one spec per local rank (``per-device``, with the global RANK/WORLD_SIZE/LOCAL_RANK), or,
for runners that start a single node's ranks themselves (torch-llm), one spec with ``local_world_size``.
The task first gives the run its own devices on the node (exported in the cluster's visible-devices
variable), runs the specs side by side and, when one fails, kills the others' processes so they do not
sit in a collective until the timeout. It returns the node's facts and log files with the result.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import socket
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from ablate.backend.domain.runner import (
    ProgressCallback,
    Runner,
    RunResult,
    RunSpec,
    get_runner,
    visible_devices_env,
)
from ablate.workers import containers, preflight
from ablate.workers.containers.manifest import read_image
from ablate.workers.dispatch import holders, logs, reaper
from ablate.workers.dispatch.image_check import check_image_devices

PROGRESS_INTERVAL_S = 1.0
STARTED_AFTER_S = 0.5  # a node task says it started (ending its placement wait) after this long


def _now() -> str:
    return datetime.now(UTC).isoformat()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def rendezvous() -> tuple[str, int]:
    """Run on node 0 of a multi-node run: the address and a free port for MASTER_ADDR/MASTER_PORT."""
    import ray

    return ray.util.get_node_ip_address(), free_port()


_boards: dict[str, Any] = {}  # board actor name -> handle, looked up once per worker process


def _board(board: Any) -> Any:
    """The board actor: a handle as given, or looked up by its name (see ``ray_runtime.start_board``)."""
    if not isinstance(board, str):
        return board
    if board not in _boards:
        import ray

        _boards[board] = ray.get_actor(board)
    return _boards[board]


def throttled_progress(board: Any, run_id: int, interval_s: float = PROGRESS_INTERVAL_S) -> ProgressCallback:
    """Forward at most one progress report per ``interval_s`` (and always the last step) to the board
    actor (a handle, or its name), fire-and-forget: progress must never slow the benchmark it measures."""
    last = [0.0]

    def report(step: int, total: int, throughput: float | None) -> None:
        latest[:] = [int(step), int(total), throughput]
        now = time.monotonic()
        if board is None or (now - last[0] < interval_s and step < total):
            return
        last[0] = now
        try:
            _board(board).report.remote(run_id, int(step), int(total), throughput)
        except Exception:  # best effort: a board that cannot be found must not fail the run
            return

    latest: list[Any] = []
    # The last report, returned with the result. mypy does not type attributes set on a function; a
    # callable class would, at the cost of restructuring this callback.
    report.latest = latest  # type: ignore[attr-defined]
    return report


def _kill_descendants_except(keep: set[int]) -> None:
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process().children(recursive=True):
            if p.pid not in keep:
                with contextlib.suppress(psutil.Error, OSError):
                    if os.getpgid(p.pid) == p.pid:
                        os.killpg(p.pid, 9)
                    p.kill()


def _run_ranks(runner: Runner, specs: list[RunSpec], progress: ProgressCallback) -> RunResult:
    if len(specs) == 1:
        return runner.run(specs[0], progress)
    failed = threading.Event()
    keep = {pid for pid in [reaper.reaper_pid()] if pid}

    def one(spec: RunSpec) -> RunResult:
        res = runner.run(spec, progress if spec.rank == 0 else None)
        if not res.succeeded and not failed.is_set():
            failed.set()
            _kill_descendants_except(keep)  # peers of a dead rank would block in a collective
        return res

    with ThreadPoolExecutor(len(specs)) as pool:
        results = list(pool.map(one, specs))
    bad = [r for r in results if not r.succeeded]
    # the root cause is a benchmark failure or the first infrastructure one, not the peers we killed
    bad.sort(key=lambda r: r.failure_kind != "benchmark")
    return bad[0] if bad else results[0]


class _NotPlaced(Exception):
    """The node cannot give this run its devices."""


_read_images: set[str] = set()  # image ids this worker process has read the contents of
SWEEP_EVERY_S = 60.0  # the orphan sweep (one `ps` of the runtime) at most this often per worker
_last_sweep = [-SWEEP_EVERY_S]


def _prepare_container(lead: RunSpec) -> tuple[dict[str, str], dict[str, Any] | None]:
    """Before the measured window: remove what dead workers left on this node, then make the run's
    image present (pull under the cluster's policy and timeout), its progress in ``node<N>-image.log``.
    Returns the image's facts (id, digest, size, pull time) for the provenance and, the first time
    this worker meets an image, what it holds (read from its files); raises ContainerError."""
    assert lead.container is not None
    cfg = containers.ContainerConfig.parse(
        {k: v for k, v in lead.container.items() if k not in ("image", "attempt")}
    )
    reaper.containers(cfg.client)  # a killed worker's containers go with it
    if time.monotonic() - _last_sweep[0] >= SWEEP_EVERY_S:  # what workers whose reaper died too left
        _last_sweep[0] = time.monotonic()
        containers.sweep_orphans(cfg.client)
    path = lead.log_file(part="image")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as log_file:

        def say(text: str) -> None:
            log_file.write(f"{_now()} {text}\n")
            log_file.flush()

        try:
            facts = containers.prepare_image(cfg, str(lead.container["image"]), say)
        except containers.ContainerError as exc:
            say(f"ablate: {exc}")
            raise
        contents = None
        if facts.image_id and facts.image_id not in _read_images:
            try:
                found = read_image(cfg, facts.reference)
            except (containers.ContainerError, OSError, tarfile.TarError) as exc:  # a reading, not the run
                say(f"ablate: could not read what the image holds: {exc}")
            else:
                _read_images.add(facts.image_id)
                say(f"ablate: the image holds {len(found.components)} components")
                contents = {
                    "digest": facts.repo_digest or facts.image_id,
                    "reference": facts.reference,
                    **found.to_dict(),
                }
    return facts.provenance(), contents


def _place_on_node(
    rank_specs: list[RunSpec], checks: dict[str, Any], device_ids: list[str] | None
) -> tuple[dict[str, str], Path | None]:
    """Fill in what only the node knows: a free MASTER_PORT for a run of one node (port 0), and the
    devices the dispatcher took for this run on this node, exported in the cluster's visible-devices
    variable; say (see :mod:`.holders`) that this process and the run's processes hold them. Returns the
    node's facts for the provenance (host, Ray node id, node rank, visible devices) and the holder file.
    Raises :class:`~ablate.workers.dispatch.holders.Fenced` when the devices were taken back already."""
    lead = rank_specs[0]
    facts = {"host": socket.gethostname(), "node_rank": str(lead.node_rank)}
    if lead.master_port == 0:
        port = free_port()
        rank_specs[:] = [replace(s, master_addr="127.0.0.1", master_port=port) for s in rank_specs]
    import ray

    if not ray.is_initialized():  # run in-process (tests, tools): no node to share
        return facts, None

    node_id = ray.get_runtime_context().get_node_id()
    facts["node_id"] = node_id
    attempt = int(checks.get("attempt", 1))
    holder = str(checks.get("holder") or f"{lead.run_id}.{attempt}")
    held = holders.register(node_id, holder, lead.node_rank) if device_ids is not None else None
    name = visible_devices_env(lead.cluster)
    ids = device_ids
    if ids is None and name:  # a GPU run without an allocation (none was taken): Ray's ids
        ids = [str(i) for i in ray.get_gpu_ids()] or None
    marker = {holders.HOLDER_ENV: holder} if held is not None else {}
    value = ",".join(ids) if name and ids is not None else None
    for s in rank_specs:
        s.env = {**s.env, **marker, **({name: value} if name and value is not None else {})}
    if name and value is not None:
        facts["visible_devices"] = f"{name}={value}"
    return facts, held


@dataclass
class _NodeTask:
    """What one node task learns as it goes, for its answer (see :func:`run_node`)."""

    host: str
    rank_specs: list[RunSpec]
    lead: RunSpec  # the first rank's spec; after placement, as placed
    facts: dict[str, str]  # for the run's provenance
    node: dict[str, str]  # this node's own facts
    last_progress: list[Any] = field(default_factory=list)
    preflight_failed: bool = False  # the dispatcher keeps the run's next attempts off this node
    image_contents: dict[str, Any] | None = None
    held: Path | None = None  # the holder file of the run's devices here

    @classmethod
    def begin(cls, specs: list[dict[str, Any]]) -> _NodeTask:
        host = socket.gethostname()
        rank_specs = [RunSpec.from_dict(s) for s in specs]
        lead = rank_specs[0]
        return cls(host, rank_specs, lead, {"host": host}, {"host": host, "node_rank": str(lead.node_rank)})


def run_node(
    specs: list[dict[str, Any]],
    checks: dict[str, Any],
    board: Any = None,
    runner_factory: Callable[[], Runner] | None = None,
    device_ids: list[str] | None = None,
) -> dict[str, Any]:
    """The body of a node task. Never raises for run failures: returns a RunResult dict with times,
    this node's facts and its log files (see :func:`ablate.workers.dispatch.logs.collect`).
    ``board``: the progress board or its actor name; ``device_ids``: the device indices the dispatcher
    took for this run on this node (None for a CPU run)."""
    # Said only once the task has run a moment: a task that ends sooner is seen ending, and most runs
    # then cost the board nothing (a lookup and a call per run was measurable on small runs).
    notice = _say_started_later(board, specs, checks)
    reaper.active()
    started = _now()
    task = _NodeTask.begin(specs)
    try:
        _place(task, checks, device_ids)
        result = _check_and_run(task, checks, board, runner_factory, device_ids)
    except _NotPlaced as exc:
        result = RunResult.failed(f"on {task.host}: {exc}", "infrastructure", environment=task.lead.env)
    except containers.ContainerError as exc:
        # A missing or denied image fails the run (no other node has it either); a node whose runtime
        # is missing or broken is kept out of the next attempt, like a failed preflight.
        node_fault = exc.kind == "node"
        task.preflight_failed = node_fault
        result = RunResult.failed(
            str(exc), "infrastructure" if node_fault else "benchmark", environment=task.lead.env
        )
    except Exception as exc:  # a runner must not raise; if one does, say so instead of crashing
        result = _raised(exc, task)
    finally:
        _never_mind(notice)
        reaper.idle()
        holders.unregister(task.held)
    return _answer(task, result, started)


def _place(task: _NodeTask, checks: dict[str, Any], device_ids: list[str] | None) -> None:
    """The run's port and devices on this node (see :func:`_place_on_node`), then its image."""
    try:
        task.node, task.held = _place_on_node(task.rank_specs, checks, device_ids)
    except holders.Fenced as exc:  # its dispatcher lost it: the infrastructure's doing
        raise _NotPlaced(str(exc)) from exc
    task.lead = task.rank_specs[0]
    if task.lead.container:
        image_facts, task.image_contents = _prepare_container(task.lead)
        task.facts.update(image_facts)
        task.node.update({k: v for k, v in image_facts.items() if k in ("image_id", "image_digest")})


def _check_and_run(
    task: _NodeTask,
    checks: dict[str, Any],
    board: Any,
    runner_factory: Callable[[], Runner] | None,
    device_ids: list[str] | None,
) -> RunResult:
    """Preflight this node (and the image's view of its devices), then run the ranks."""
    lead = task.lead
    check = preflight.PreflightCheck(
        checks.get("accelerator", lead.accelerator),
        int(checks.get("expected_devices", 0)),
        checks.get("driver_requirements") or {},
        cuda_version=checks.get("cuda_version"),
        min_free_fraction=float(checks.get("min_free_fraction", preflight.DEFAULT_MIN_FREE_FRACTION)),
        mode=str(checks.get("preflight", "lenient")),
        visible=device_ids,  # the run's own devices (Ray sets nothing for a custom resource)
    )
    report = preflight.run_preflight(check)
    task.facts.update(report.facts)
    if report.ok and lead.container:
        report = check_image_devices(
            lead, int(checks.get("expected_devices", 0)), str(checks.get("preflight", "lenient"))
        )
        task.facts.update(report.facts)
    task.preflight_failed = not report.ok
    if not report.ok:
        return RunResult.failed(
            f"preflight failed on {task.host}: {report.reason}", "infrastructure", environment=lead.env
        )
    runner = runner_factory() if runner_factory is not None else get_runner(lead.runner_name)
    progress = throttled_progress(board, lead.run_id)
    result = _run_ranks(runner, task.rank_specs, progress)
    # set on the function by throttled_progress (why it is untyped: see there)
    task.last_progress = list(progress.latest)  # type: ignore[attr-defined]
    return result


def _raised(exc: Exception, task: _NodeTask) -> RunResult:
    """The result of a node task whose runner raised ``exc`` (called while handling it)."""
    host, lead = task.host, task.lead
    if _is_ray_error(exc):  # an actor or node of Ray went away: infrastructure, retried
        return RunResult.failed(
            f"Ray failed under the run: {type(exc).__name__}: {exc}",
            "infrastructure",
            environment=lead.env,
        )
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        # the node's disk (full, read-only, not ours), not the benchmark: retried, maybe elsewhere
        return RunResult.failed(
            f"the disk of {host} refused a write: {exc}", "infrastructure", environment=lead.env
        )
    return RunResult.failed(
        f"runner raised {type(exc).__name__}: {exc}",
        "benchmark",
        log_tail=traceback.format_exc()[-4000:],
        environment=lead.env,
    )


def _answer(task: _NodeTask, result: RunResult, started: str) -> dict[str, Any]:
    """What the node task returns to the dispatcher."""
    lead = task.lead
    result.provenance = {**task.facts, **result.provenance}
    if not result.environment:
        result.environment = dict(lead.env)
    result.environment.pop(holders.HOLDER_ENV, None)  # ours, not the run's
    return {
        "result": result.to_dict(),
        "started_at": started,
        "finished_at": _now(),
        "host": task.host,
        "node_id": _ray_node_id(),
        "preflight_failed": task.preflight_failed,  # the next attempts are kept off this node
        "progress": task.last_progress or None,
        "node": task.node,
        "logs": logs.collect(lead),
        "image_contents": task.image_contents,
    }


# A write refused by the file system: full, over quota, read-only, or a path that is not ours to write.
DISK_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EIO}
)


def _is_ray_error(exc: BaseException) -> bool:
    try:
        from ray import exceptions as rx
    except ImportError:
        return False
    return isinstance(exc, rx.RayError)


_later: dict[int, tuple[float, Any, list[dict[str, Any]], dict[str, Any]]] = {}  # notices not yet due
_later_lock = threading.Lock()
_later_thread: list[threading.Thread] = []
_later_keys = itertools.count()


def _say_started_later(board: Any, specs: list[dict[str, Any]], checks: dict[str, Any]) -> int:
    """:func:`_say_started` after STARTED_AFTER_S unless :func:`_never_mind` comes first. One thread per
    worker process sends what is due (a timer thread per task slowed small runs measurably)."""
    key = next(_later_keys)
    if board is None:
        return key
    with _later_lock:
        _later[key] = (time.monotonic() + STARTED_AFTER_S, board, specs, checks)
        if not _later_thread or not _later_thread[0].is_alive():
            _later_thread[:] = [threading.Thread(target=_send_due, name="ablate-started", daemon=True)]
            _later_thread[0].start()
    return key


def _never_mind(key: int) -> None:
    with _later_lock:
        _later.pop(key, None)


def _send_due() -> None:
    while True:
        time.sleep(STARTED_AFTER_S / 5)
        now = time.monotonic()
        with _later_lock:
            due = [_later.pop(k) for k in [k for k, v in _later.items() if v[0] <= now]]
        for _, board, specs, checks in due:
            _say_started(board, specs, checks)


def _say_started(board: Any, specs: list[dict[str, Any]], checks: dict[str, Any]) -> None:
    """Tell the dispatcher (through the board) that Ray started this node task: its placement wait ends."""
    if board is None or not specs:
        return
    try:
        _board(board).started.remote(int(specs[0]["run_id"]), int(checks.get("attempt", 1)))
    except Exception:  # best effort, like progress
        return


def _ray_node_id() -> str | None:
    """The Ray node this task runs on (None outside Ray, e.g. a runner test calling run_node directly)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
