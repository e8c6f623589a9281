"""Small runners for dispatcher tests: fast, and able to crash or hang on purpose.

They are handed to the dispatcher as factories, so they travel to Ray workers by reference to this
module (the workers import it from the driver's sys.path).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from ablate.backend.domain.runner import ProgressCallback, RunResult, RunSpec


def _write_whole(path: Path, text: str) -> None:
    """Written whole or not at all (a rename): tests poll for these files and must never read one
    empty (a CI run under load read a pid file between its creation and its write)."""
    partial = path.with_name(f".{path.name}.partial")  # hidden: no glob of the folder sees it
    partial.write_text(text)
    partial.replace(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fake_node() -> str:
    """The fake node's name (``FAKE_NODE`` in its raylet's environment), else the Ray node id."""
    if os.environ.get("FAKE_NODE"):
        return os.environ["FAKE_NODE"]
    import ray

    return str(ray.get_runtime_context().get_node_id())


def hold_devices(folder: Path, spec: RunSpec) -> list[Path]:
    """Mark this node's devices of the run (its visible-devices variable) busy: ``<node>.<index>`` holding
    this process's pid and the run, a device being busy while that process lives (the fake ``ppu-smi``
    of fleet_nodes.py reads these). A device already held by a live process is a double booking: it is
    written down as ``collision-*`` for the test to find."""
    folder.mkdir(parents=True, exist_ok=True)
    name = "CUDA_VISIBLE_DEVICES"
    visible = [v for v in (spec.env.get(name) or os.environ.get(name) or "").split(",") if v]
    node = fake_node()
    held = []
    for index in visible:
        path = folder / f"{node}.{index}"
        try:
            pid, run = path.read_text().split()
            if _pid_alive(int(pid)):
                _write_whole(
                    folder / f"collision-{node}-{index}-{spec.run_id}",
                    f"run {spec.run_id} on run {run}'s device",
                )
        except (OSError, ValueError):
            pass
        _write_whole(path, f"{os.getpid()} {spec.run_id}")
        held.append(path)
    return held


class FakeRunner:
    """``runner_options``: ``steps`` and ``step_s`` (progress), ``fail`` ("benchmark"), ``crash_once``
        (a marker path: the first attempt kills its own Ray worker), ``child`` (start a long-lived child in
        its own session and write its pid to ``<log_dir>/run-<id>.child``), ``hang`` (sleep forever), ``nan``
    (report a throughput that ingest refuses), ``node_dir`` (write the Ray node id of each rank there),
    ``hold_until`` (a marker path: wait until it exists), ``actor_unavailable_once`` (a marker path: the
    first attempt raises Ray's ActorUnavailableError), ``hold_dir`` (hold this node's visible devices
    while running, as a real benchmark holds device memory: see :func:`hold_devices`), ``write_log`` (write
    a line to its log file first, as every real runner does)."""

    name = "fake"

    def supported_factors(self, accelerator: str) -> set[str]:
        return {"compiler_opt", "ckpt_opt", "accl", "ac2"}

    def check_factors(self, factors: Iterable[str], accelerator: str) -> str | None:
        return None

    def run(self, spec: RunSpec, progress: ProgressCallback | None = None) -> RunResult:
        opts = spec.runner_options
        if opts.get("write_log"):  # an OSError here is the node's disk, not the benchmark
            log_file = Path(spec.log_file())
            log_file.parent.mkdir(parents=True, exist_ok=True)
            log_file.write_text(f"fake run {spec.run_id} attempt {spec.attempt}\n")
        marker = opts.get("crash_once")
        if marker:  # each attempt writes one line in its own log file (a retry must keep the crashed one's)
            log = Path(spec.log_file())
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"fake run {spec.run_id} attempt {spec.attempt}\n")
        if marker and not Path(marker).exists():
            Path(marker).write_text("crashed")
            os.kill(os.getpid(), signal.SIGKILL)
        gone = opts.get("actor_unavailable_once")
        if gone and not Path(gone).exists():  # as a call to an actor that restarts raises
            Path(gone).write_text("raised")
            from ray.exceptions import ActorUnavailableError

            raise ActorUnavailableError("the actor is restarting", None)
        if opts.get("node_dir"):  # say which Ray node this rank runs on
            import ray

            node = ray.get_runtime_context().get_node_id()
            Path(opts["node_dir"]).mkdir(parents=True, exist_ok=True)
            _write_whole(Path(opts["node_dir"]) / f"rank{spec.rank}-{os.getpid()}", node)
        held = (
            hold_devices(Path(opts["hold_dir"]), spec)
            if opts.get("hold_dir") and spec.local_rank == 0
            else []
        )
        while opts.get("hold_until") and not Path(opts["hold_until"]).exists():
            time.sleep(0.1)  # until the test lets go (it kills a node meanwhile)
        if opts.get("fail"):
            return RunResult.failed("the benchmark failed by itself", "benchmark", environment=spec.env)
        if opts.get("child"):
            child = subprocess.Popen(["sleep", "600"], start_new_session=True)
            Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
            _write_whole(Path(spec.log_dir) / f"run-{spec.run_id}.child", str(child.pid))
        steps = int(opts.get("steps", 3))
        for step in range(1, steps + 1):
            time.sleep(float(opts.get("step_s", 0.0)))
            if progress is not None:
                progress(step, steps, 100.0 * step)
        while opts.get("hang") or opts.get("child"):
            time.sleep(1)
        for path in held:  # given back as a process frees device memory when it ends
            path.unlink(missing_ok=True)
        throughput = math.nan if opts.get("nan") else 1000.0 + spec.run_id
        return RunResult(
            status="succeeded",
            metrics={
                "throughput_tokens_per_s": (throughput, "tokens/s"),
                "step_time_s": (0.01, "s"),
            },
            series={"loss": ([1, 2, 3], [3.0, 2.5, 2.0])},
            provenance={"runner": "fake", "world": f"{spec.world_size}x{spec.local_world_size}"},
            environment=dict(spec.env),
        )
