"""The runner interface: what the dispatcher hands a runner, and what it gets back.

Everything here is plain data that survives ``to_dict``/``from_dict`` (JSON-compatible), because specs
and results cross process and Ray boundaries. :class:`RunResult` is the one in-memory shape of a run's
outcome, from the runner to the ingest that stores it (CI results are parsed into it too). Runners
are looked up by name with :func:`get_runner` among the ``ablate.runners`` entry points (Ablate's own live
in ``ablate.workers.runners``), imported on first use, so this layer imports nothing above it and never
imports torch.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import PurePath
from typing import Any, Literal, Protocol, runtime_checkable

from ablate.backend.domain.factors import normalize_factor
from ablate.backend.domain.plugins import RUNNERS_GROUP, PluginGroup, PluginLoadError
from ablate.backend.domain.states import FailureKind

Status = Literal["succeeded", "failed"]
# How the ``command`` runner starts a benchmark (``runner_options.launch``): one launcher per node (the
# default; torchrun, deepspeed, mpirun start their own per-device processes) or one process per device.
LAUNCH_MODES = ("per-node", "per-device")
DEFAULT_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
# The built-in runner (ablate.workers.runners.torch_llm): what a workload that names no runner runs.
DEFAULT_RUNNER = "torch-llm"


def visible_devices_env(cluster: Mapping[str, Any]) -> str | None:
    """The variable that names a run's devices on a node (None on a CPU cluster)."""
    if str(cluster.get("accelerator") or "cpu").lower() == "cpu":
        return None
    return str(cluster.get("visible_devices_env") or DEFAULT_VISIBLE_DEVICES_ENV)


# The name of one log file of a run (see RunSpec.log_file): node rank, and the rank when there are ranks;
# ``node<N>-image.log`` is what the node did to make the run's container image ready (the pull).
LOG_NAME = re.compile(r"^node(?P<node>\d{1,6})(?:-rank(?P<rank>\d{1,9})|-(?P<part>image))?\.log$")
# Each attempt of a run keeps its own log folder, ``run-<id>/attempt-<N>/``, so a retry never overwrites
# the logs of the attempt that failed. Runs logged before that kept their files in ``run-<id>/`` itself.
ATTEMPT_DIR = re.compile(r"^attempt-(?P<attempt>\d{1,6})$")
# What became of an attempt that did not finish the run (JSON: "outcome", "reason"), kept in its folder.
ATTEMPT_OUTCOME = "outcome.json"


def attempt_log_folder(log_dir: str | PurePath, run_id: int, attempt: int) -> PurePath:
    """``<log_dir>/run-<id>/attempt-<N>``: where one attempt of a run keeps its log files."""
    return PurePath(log_dir) / f"run-{run_id}" / f"attempt-{attempt}"


@dataclass
class RunSpec:
    """One run, fully resolved by the dispatcher.

    ``env`` is the exact, final set of environment variables the run must see on top of the worker's
    environment (variant env merged with release rules). Rank fields describe this process's place in a
    torch.distributed group; the defaults mean a single process. ``local_world_size`` > 1 with
    ``world_size`` == 1 asks the runner to start that many ranks on this host itself. ``node_rank`` and
    ``nnodes`` place this node among the run's nodes; ``launch`` is how the ``command`` runner starts
    the benchmark: ``per-node`` (one launcher per node, like ``torchrun``) or ``per-device`` (one process
    per device, each with its global rank).
    """

    run_id: int
    workload: dict[str, Any]
    variant: dict[str, Any]
    cluster: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    log_dir: str = "."
    timeout_s: float = 3600.0
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    local_world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    launch: str = "per-device"
    attempt: int = 1  # which attempt of the run this is: each keeps its own log folder
    # The container this run executes in (the cluster's container settings, "image" and "attempt"), or
    # None: processes on the host. See ablate.workers.containers.
    container: dict[str, Any] | None = None

    def log_file(self, rank: int | None = None, part: str | None = None) -> str:
        """Where this node's log (or one rank's, when the runner starts ranks) goes: one file each,
        ``<log_dir>/run-<id>/attempt-<A>/node<N>[-rank<R>].log``, so no two processes (and no two
        attempts) write the same file (``part="image"``: ``node<N>-image.log``, the image's pull)."""
        name = (
            f"node{self.node_rank}"
            + (f"-rank{rank}" if rank is not None else f"-{part}" if part else "")
            + ".log"
        )
        return str(attempt_log_folder(self.log_dir, self.run_id, self.attempt) / name)

    @property
    def factors(self) -> list[str]:
        """The variant's factors, normalised (see :func:`normalize_factor`)."""
        return [normalize_factor(f) for f in self.variant.get("factors") or []]

    @property
    def accelerator(self) -> str:
        return str(self.cluster.get("accelerator", "cpu")).lower()

    @property
    def runner_name(self) -> str:
        return str(self.workload.get("runner") or DEFAULT_RUNNER)

    @property
    def runner_options(self) -> dict[str, Any]:
        """Workload runner options overlaid by the variant's (a variant may e.g. switch the command)."""
        return {**(self.workload.get("runner_options") or {}), **(self.variant.get("runner_options") or {})}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown RunSpec fields: {sorted(unknown)}")
        spec = cls(**{k: v for k, v in data.items() if k in known})
        spec.env = {str(k): str(v) for k, v in spec.env.items()}
        return spec


@dataclass
class RunResult:
    """What a run produced: the one in-memory shape of a result, from a runner (or a CI submission)
    to the rows ingest stores.

    ``metrics`` maps a name to ``(value, unit)`` (unit "" means the registry's unit of a known
    metric); ``series`` maps a name to ``(steps, values)``; ``better`` states "higher" or "lower" for
    custom metrics whose unit does not say it. ``failure_kind`` tells the benchmark's own failure (bad
    config, exception, no metrics) from the infrastructure's (signal, OOM kill, unreachable peers)
    and from a timeout."""

    status: Status
    metrics: dict[str, tuple[float, str]] = field(default_factory=dict)
    series: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    failure_kind: FailureKind | None = None
    log_tail: str = ""
    log_path: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    better: dict[str, str] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def to_dict(self) -> dict[str, Any]:
        """Plain data: a copy that shares nothing mutable with this result, metrics and series as
        lists (what JSON and :meth:`from_dict` read). Written out rather than ``dataclasses.asdict``:
        this runs once per node task, where ``asdict``'s deep copy cost more than the rest."""
        return {
            "status": self.status,
            "metrics": {k: [float(v), str(u)] for k, (v, u) in self.metrics.items()},
            "series": {k: [list(map(int, s)), list(map(float, v))] for k, (s, v) in self.series.items()},
            "provenance": _plain_dict(self.provenance),
            "error": self.error,
            "failure_kind": self.failure_kind,
            "log_tail": self.log_tail,
            "log_path": self.log_path,
            "environment": _plain_dict(self.environment),
            "better": _plain_dict(self.better),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            status=data["status"],
            metrics={k: (float(v[0]), str(v[1])) for k, v in (data.get("metrics") or {}).items()},
            series={
                k: ([int(x) for x in v[0]], [float(x) for x in v[1]])
                for k, v in (data.get("series") or {}).items()
            },
            provenance={str(k): str(v) for k, v in (data.get("provenance") or {}).items()},
            error=data.get("error"),
            failure_kind=data.get("failure_kind"),
            log_tail=data.get("log_tail") or "",
            log_path=data.get("log_path"),
            environment={str(k): str(v) for k, v in (data.get("environment") or {}).items()},
            better={str(k): str(v) for k, v in (data.get("better") or {}).items()},
        )

    @classmethod
    def failed(
        cls,
        error: str,
        failure_kind: FailureKind,
        *,
        log_tail: str = "",
        log_path: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> RunResult:
        return cls(
            status="failed",
            error=error,
            failure_kind=failure_kind,
            log_tail=log_tail,
            log_path=log_path,
            provenance=dict(provenance or {}),
            environment=dict(environment or {}),
        )


_SCALARS = (str, int, float, bool, type(None))


def _plain_dict(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` that shares nothing mutable with it: a shallow copy when every key and value is
    a scalar (a dict of strings, the usual case), a deep copy otherwise."""
    if all(type(k) in _SCALARS and type(v) in _SCALARS for k, v in data.items()):
        return dict(data)
    return copy.deepcopy(dict(data))


# (step, total_steps, latest throughput in tokens/s or None). Raising from the callback cancels the run:
# the runner kills its processes and returns a failed result (failure_kind "infrastructure").
ProgressCallback = Callable[[int, int, float | None], None]


class RunCancelled(Exception):
    """May be raised by a progress callback to stop a run."""


@runtime_checkable
class Runner(Protocol):
    name: str

    def supported_factors(self, accelerator: str) -> set[str]:
        """Factors this runner can really implement on clusters of ``accelerator``."""
        ...

    def check_factors(self, factors: Iterable[str], accelerator: str) -> str | None:
        """None if every factor can be implemented, else a message naming the first one that cannot."""
        ...

    def run(self, spec: RunSpec, progress: ProgressCallback | None = None) -> RunResult:
        """Execute the run (blocking). Never raises for benchmark or process failures: returns a failed
        RunResult instead."""
        ...


# Runners come from the ``ablate.runners`` entry points (Ablate's own are declared in its pyproject.toml;
# a team's package declares its own): nothing is imported until a runner is asked for by name.
RUNNERS = PluginGroup(RUNNERS_GROUP, "runner")


def register_runner(name: str, factory: Callable[[], Runner]) -> None:
    """Add a runner in this process only (tests, benchmarks); a package adds one with an entry point in
    the ``ablate.runners`` group (docs/runners.md)."""
    RUNNERS.register(name, factory)


def known_runners() -> list[str]:
    return RUNNERS.names()


def get_runner(name: str) -> Runner:
    """A fresh runner instance by name. An unknown name raises UnknownPluginError (a ValueError) naming
    the entry point group and the known runners; one that cannot be loaded, PluginLoadError."""
    factory = RUNNERS.load(name)
    runner = factory()
    if not isinstance(runner, Runner):
        raise PluginLoadError(
            f"runner {name!r} (group {RUNNERS_GROUP!r}) made a {type(runner).__name__}, which lacks the "
            "Runner interface (name, supported_factors, check_factors, run)"
        )
    return runner


def check_spec_factors(spec: RunSpec) -> str | None:
    """Convenience for the dispatcher: the spec's runner's verdict on the spec's factors."""
    return get_runner(spec.runner_name).check_factors(spec.factors, spec.accelerator)
