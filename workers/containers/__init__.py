"""Running a rung inside its container image, the way the release notes do (``docker run --ipc=host
--net=host IMAGE ljperf ...``), on the node Ray placed the run on.

A cluster with ``container: {runtime: podman | docker, ...}`` runs every run that has an image through
that runtime's command line: host network and IPC, only the run's devices (GPUs through CDI for podman,
``--gpus`` for docker; PPUs through the device files the cluster names), the run's environment passed
by name (``-e NAME``, values never on a command line), its log directory mounted at the same path. Ray
never needs to be inside the image: the node task stays on the host and supervises the runtime's client.

Containers carry labels (run, attempt, and the owner: host, Ray worker pid and its start time), so what a
killed worker leaves behind is found and removed by label (:func:`sweep_orphans`), and every container
has a name derived from the run, so a cancel or timeout removes it by name (:func:`remove`): killing
the runtime's client does not stop a docker container.

Everything here is plain functions over plain dicts (a run's container travels in
:class:`~ablate.backend.domain.runner.RunSpec` as a dict), usable by the runners below the dispatcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

RUNTIMES = ("podman", "docker")
# Opt-in to Ray's own ``runtime_env.image_uri`` (the image must contain Ray and the cluster's Python).
RAY_IMAGE_URI = "ray-image-uri"
PULL_POLICIES = ("missing", "always", "never")
DEFAULT_PULL_TIMEOUT_S = 1800.0
LABEL_RUN = "ablate.run"
LABEL_ATTEMPT = "ablate.attempt"
LABEL_OWNER = "ablate.owner"  # "<host> <pid> <process start time>" of the Ray worker that started it
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MOUNT = re.compile(r"^(/[^:]*):(/[^:]*)(:(ro|rw|z|Z|ro,z|ro,Z|rw,z|rw,Z))?$")
# Options that would undo what the runner controls (the run's name, its removal, its image pull).
_RESERVED_OPTIONS = ("--name", "--rm", "--pull", "--detach", "-d")
_RUN_KEYS = ("image", "attempt")  # what a run's container dict adds to the cluster's settings


class ContainerError(Exception):
    """An image could not be made ready or a container not started. ``kind``: ``image`` (the image is
    missing, denied or broken: retrying elsewhere will not help) or ``node`` (this node's runtime is
    missing or failing: another node may do)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ContainerConfig:
    """A cluster's ``container:`` definition (see docs/deployment.md)."""

    runtime: str = "podman"
    options: tuple[str, ...] = ()  # extra flags for ``run``, e.g. ["--shm-size=16g"]
    mounts: tuple[str, ...] = ()  # "HOST:CONTAINER[:ro]"
    pull: str = "missing"  # missing | always | never
    pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S
    # PPU (or any non-GPU accelerator) device files, "{index}" is each of the run's device indices.
    device_files: tuple[str, ...] = ()
    python: str = "python3"  # the image's interpreter, for the built-in torch-llm runner
    binary: str | None = None  # the runtime's client, when it is not on PATH under its name

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ContainerConfig:
        """Validate a ``container:`` mapping; ValueError names the first problem."""
        if not isinstance(data, Mapping):
            raise ValueError("container must be a mapping such as {runtime: podman}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"container: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        runtime = str(data.get("runtime") or "podman")
        if runtime not in (*RUNTIMES, RAY_IMAGE_URI):
            raise ValueError(
                f"container.runtime must be one of {', '.join((*RUNTIMES, RAY_IMAGE_URI))}, not {runtime!r}"
            )
        pull = str(data.get("pull") or "missing")
        if pull not in PULL_POLICIES:
            raise ValueError(f"container.pull must be one of {', '.join(PULL_POLICIES)}, not {pull!r}")
        options = _strings(data.get("options"), "container.options")
        for opt in options:
            if opt.split("=", 1)[0] in _RESERVED_OPTIONS:
                raise ValueError(
                    f"container.options may not contain {opt!r}: Ablate names, pulls and removes containers"
                )
        mounts = _strings(data.get("mounts"), "container.mounts")
        for m in mounts:
            if not _MOUNT.match(m):
                raise ValueError(
                    f"container.mounts: {m!r} is not HOST_PATH:CONTAINER_PATH[:ro] with absolute paths"
                )
        devices = _strings(data.get("device_files"), "container.device_files")
        for d in devices:
            if not d.startswith("/dev/") or "{index}" not in d:
                raise ValueError(f"container.device_files: {d!r} must be a /dev path with {{index}} in it")
        try:
            timeout = float(data.get("pull_timeout_s") or DEFAULT_PULL_TIMEOUT_S)
        except (TypeError, ValueError):
            raise ValueError("container.pull_timeout_s must be a number of seconds") from None
        if not 0 < timeout <= 86400:
            raise ValueError("container.pull_timeout_s must be above 0 and at most 86400")
        python = str(data.get("python") or "python3")
        binary = data.get("binary")
        return cls(runtime, options, mounts, pull, timeout, devices, python, str(binary) if binary else None)

    @classmethod
    def of_run(cls, container: Mapping[str, Any]) -> ContainerConfig:
        """The cluster's settings inside a run's container dict (which adds "image" and "attempt")."""
        return cls.parse({k: v for k, v in container.items() if k not in _RUN_KEYS})

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @property
    def client(self) -> str:
        return self.binary or self.runtime


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{what} must be a list of non-empty strings")
    return tuple(value)


def image_reference(image: str, tag: str, registry: str | None) -> str:
    """A release's own image: ``<registry>/<image>:<tag>`` (no registry: ``image:tag`` as given)."""
    ref = f"{image}:{tag}"
    return f"{registry.rstrip('/')}/{ref}" if registry else ref


@dataclass
class ImageFacts:
    """What was made ready on a node before the measured window: recorded apart from the metrics."""

    reference: str
    image_id: str
    repo_digest: str | None
    size_bytes: int | None
    pulled: bool
    pull_s: float

    def provenance(self) -> dict[str, str]:
        out = {
            "image": self.reference,
            "image_id": self.image_id,
            "image_pulled": "yes" if self.pulled else "no (present on the node)",
            "image_pull_s": f"{self.pull_s:.3f}",
        }
        if self.repo_digest:
            out["image_digest"] = self.repo_digest
        if self.size_bytes is not None:
            out["image_size_bytes"] = str(self.size_bytes)
        return out


Log = Callable[[str], None]


def run_client(argv: Sequence[str], timeout: float, *, node: str) -> subprocess.CompletedProcess[str]:
    """Run the runtime's client; a missing client is this node's fault (another node may have one)."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        raise ContainerError(
            f"no container runtime {argv[0]!r} on node {node} (not found on PATH)", "node"
        ) from None
    except PermissionError as exc:
        raise ContainerError(
            f"container runtime {argv[0]!r} on node {node} cannot be run: {exc}", "node"
        ) from None


def error_text(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


_NOT_FOUND = ("not found", "manifest unknown", "no such image", "does not exist", "name unknown", "404")
_DENIED = ("denied", "unauthorized", "authentication required", "403", "401")
_NO_DAEMON = ("cannot connect to the docker daemon", "is the docker daemon running")
_UNREACHABLE = ("pinging container registry", "connection refused", "no such host", "i/o timeout", "tls")


def _classify(ref: str, action: str, text: str, node: str) -> ContainerError:
    low = text.lower()
    if any(s in low for s in _NO_DAEMON):
        return ContainerError(
            f"image {ref}: the docker daemon is not reachable on node {node}: {text}", "node"
        )
    if any(s in low for s in _DENIED):
        return ContainerError(f"image {ref}: access denied while trying to {action}: {text}", "image")
    if any(s in low for s in _NOT_FOUND):
        return ContainerError(f"image {ref}: not found ({action}): {text}", "image")
    if any(s in low for s in _UNREACHABLE):
        return ContainerError(
            f"image {ref}: not on node {node}, and its registry cannot be reached to {action}: {text}",
            "image",
        )
    return ContainerError(f"image {ref}: could not {action} on node {node}: {text}", "image")


def inspect_image(cfg: ContainerConfig, ref: str, *, node: str | None = None) -> dict[str, Any] | None:
    """The runtime's record of a local image (id, repo digests, size), or None when it is not there."""
    node = node or socket.gethostname()
    # Plain ``image inspect`` prints a JSON array on both runtimes (podman 4 ignores ``--format json``).
    proc = run_client([cfg.client, "image", "inspect", ref], 60, node=node)
    if proc.returncode != 0:
        low = (proc.stderr or "").lower()
        if any(s in low for s in ("no such", "not known", "unknown", "not found")):
            return None
        raise _classify(ref, "inspect it", error_text(proc), node)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise ContainerError(f"image {ref}: {cfg.client} image inspect printed no JSON", "node") from None
    first = data[0] if isinstance(data, list) and data else data
    return first if isinstance(first, dict) else None


def _repo_digest(data: Mapping[str, Any], ref: str) -> str | None:
    """The registry digest of ``ref``'s repository, when the image came from a registry."""
    digests = [str(d) for d in (data.get("RepoDigests") or [])]
    repo = ref.rsplit("@", 1)[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    return next((d for d in digests if d.split("@", 1)[0].endswith(repo)), digests[0] if digests else None)


def prepare_image(cfg: ContainerConfig, ref: str, log: Log | None = None) -> ImageFacts:
    """Make ``ref`` present on this node (pulling it under the cluster's policy and timeout) and return
    its id, repo digest and size. Raises :class:`ContainerError` naming the image and the cause."""
    node = socket.gethostname()
    say = log or (lambda _text: None)
    t0 = time.monotonic()
    local = None if cfg.pull == "always" else inspect_image(cfg, ref, node=node)
    pulled = False
    if local is None:
        if cfg.pull == "never":
            raise ContainerError(
                f"image {ref}: not present on node {node} and the cluster's pull policy is never", "image"
            )
        say(f"ablate: pulling {ref} with {cfg.runtime} (timeout {cfg.pull_timeout_s:g} s)")
        try:
            proc = run_client([cfg.client, "pull", ref], cfg.pull_timeout_s, node=node)
        except subprocess.TimeoutExpired:
            raise ContainerError(
                f"image {ref}: pull did not finish within {cfg.pull_timeout_s:g} s on node {node}", "node"
            ) from None
        for line in (proc.stderr or "").splitlines()[-20:]:
            say(f"ablate: {cfg.runtime} pull: {line}")
        if proc.returncode != 0:
            raise _classify(ref, "pull it", error_text(proc), node)
        pulled = True
        local = inspect_image(cfg, ref, node=node)
        if local is None:
            raise ContainerError(
                f"image {ref}: pulled, but {cfg.runtime} does not list it on node {node}", "node"
            )
    facts = ImageFacts(
        reference=ref,
        image_id=_full_id(str(local.get("Id") or local.get("ID") or "")),
        repo_digest=_repo_digest(local, ref),
        size_bytes=int(local["Size"]) if isinstance(local.get("Size"), int | float) else None,
        pulled=pulled,
        pull_s=time.monotonic() - t0,
    )
    say(f"ablate: image {ref} is {facts.image_id}" + (f" ({facts.repo_digest})" if facts.repo_digest else ""))
    return facts


def _full_id(image_id: str) -> str:
    return image_id if not image_id or image_id.startswith("sha256:") else f"sha256:{image_id}"


# --- running ---------------------------------------------------------------------------------------


@dataclass
class Launch:
    """One container to start: the client's argv and environment, and the name to remove it by."""

    argv: list[str]
    env: dict[str, str]
    name: str
    client: str
    labels: dict[str, str] = field(default_factory=dict)


def owner_label() -> str:
    """This process (the Ray worker that starts containers): host, pid and start time (a pid alone may
    be reused)."""
    import psutil

    me = psutil.Process()
    return f"{socket.gethostname()} {me.pid} {me.create_time():.2f}"


def run_labels(run_id: int, attempt: int) -> dict[str, str]:
    """The labels of a run's containers: the run, the attempt and the owner (this Ray worker)."""
    return {LABEL_RUN: str(run_id), LABEL_ATTEMPT: str(attempt), LABEL_OWNER: owner_label()}


def container_name(run_id: int, attempt: int, node_rank: int, rank: int | None) -> str:
    name = f"ablate-run{run_id}-a{attempt}-n{node_rank}"
    return name + (f"-r{rank}" if rank is not None else "")


@dataclass(frozen=True)
class ContainerRun:
    """Which run a container is for and what it gets: its ``name`` and ``labels`` (see
    :func:`container_name`, :func:`run_labels`), the run's ``accelerator`` and the variable that lists
    its devices (``visible_devices_env``), and the run's log directory (mounted at the same path)."""

    name: str
    labels: Mapping[str, str]
    accelerator: str
    visible_devices_env: str | None
    log_dir: str


def launch(
    container: Mapping[str, Any],
    argv: Sequence[str],
    env: Mapping[str, str],
    run: ContainerRun,
    *,
    cwd: str | None = None,
    extra_mounts: Sequence[str] = (),
) -> Launch:
    """The runtime's ``run`` command for ``argv`` inside ``container["image"]``, for ``run``.

    ``env`` is the run's own environment (not the host's): each variable goes in by name (``-e NAME``)
    and its value through the client's environment. GPUs: podman gets one CDI device per index
    (``nvidia.com/gpu=<i>``), docker ``--gpus '"device=i,j"'``; inside, the devices are renumbered from 0,
    so the visible-devices variable is not passed on. PPUs: each of the cluster's ``device_files`` per
    index, and the visible-devices variable as it is."""
    cfg = ContainerConfig.of_run(container)
    image = str(container["image"])
    run_env = {str(k): str(v) for k, v in env.items()}
    devices: list[str] = []
    indices = [i for i in run_env.get(run.visible_devices_env or "", "").split(",") if i.strip()]
    if run.accelerator == "gpu" and indices:
        run_env.pop(run.visible_devices_env or "", None)
        if cfg.runtime == "docker":
            devices += ["--gpus", f'"device={",".join(indices)}"']
        else:
            devices += [arg for i in indices for arg in ("--device", f"nvidia.com/gpu={i}")]
    elif run.accelerator not in ("gpu", "cpu") and indices:
        devices += [
            arg for i in indices for tpl in cfg.device_files for arg in ("--device", tpl.format(index=i))
        ]
    bad = sorted(k for k in run_env if not _ENV_NAME.match(k))
    if bad:
        raise ValueError(f"environment variable name(s) a container cannot take: {', '.join(bad)}")
    cmd = [cfg.client, "run", "--rm", "--name", run.name, "--pull", "never", "--net=host", "--ipc=host"]
    for key, value in sorted(run.labels.items()):
        cmd += ["--label", f"{key}={value}"]
    cmd += devices
    for mount in [f"{run.log_dir}:{run.log_dir}", *extra_mounts, *cfg.mounts]:
        cmd += ["-v", mount]
    for key in sorted(run_env):
        cmd += ["-e", key]
    if cwd:
        cmd += ["-w", cwd]
    cmd += [*cfg.options, image, *argv]
    client_env = {**os.environ, **run_env}
    return Launch(cmd, client_env, run.name, cfg.client, dict(run.labels))


def remove(client: str, name: str, timeout: float = 60.0) -> None:
    """Stop and remove a container by name, if it is still there (best effort, never raises)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [client, "rm", "-f", name],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _labelled(client: str, label: str) -> list[tuple[str, str]]:
    """(container id, label value) of every container (running or not) carrying ``label``."""
    try:
        ps = subprocess.run(
            [client, "ps", "-a", "-q", "--no-trunc", "--filter", f"label={label}"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        ids = ps.stdout.split() if ps.returncode == 0 else []
        if not ids:
            return []
        fmt = '{{.Id}} {{index .Config.Labels "' + label + '"}}'
        out = subprocess.run(
            [client, "inspect", "--format", fmt, *ids], capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    pairs = []
    for line in out.stdout.splitlines():
        cid, _, value = line.partition(" ")
        if cid:
            pairs.append((cid, value.strip()))
    return pairs


def sweep_orphans(client: str, *, owner: str | None = None) -> list[str]:
    """Remove this host's Ablate containers whose owner (a Ray worker) is gone, or, given ``owner``,
    every container of that owner. Returns the ids removed."""
    import psutil

    host = socket.gethostname()
    gone = []
    for cid, value in _labelled(client, LABEL_OWNER):
        parts = value.split()
        if len(parts) != 3 or parts[0] != host:
            continue  # another host's container (a shared runtime), or not ours to judge
        if owner is not None:
            if value == owner:
                gone.append(cid)
            continue
        try:
            alive = abs(psutil.Process(int(parts[1])).create_time() - float(parts[2])) < 0.05
        except (psutil.Error, ValueError):
            alive = False
        if not alive:
            gone.append(cid)
    for cid in gone:
        remove(client, cid)
    return gone


def run_containers(client: str, run_id: int) -> list[str]:
    """Ids of the containers (running or not) that carry ``run_id``'s label: for tests and the reaper."""
    return [cid for cid, value in _labelled(client, LABEL_RUN) if value == str(run_id)]


def package_mounts() -> list[str]:
    """Read-only mounts that put this installation's ``ablate`` package at /opt/ablate inside a container
    (the built-in torch-llm runner's child imports it; the image brings Python and torch), and at its own
    path too, for an interpreter that resolves ``ablate`` by an editable install's path mapping."""
    from pathlib import Path

    from ablate.backend.domain import runner as domain_runner

    workers = Path(__file__).resolve().parent.parent
    backend = Path(domain_runner.__file__).resolve().parent.parent
    mounts = [f"{backend}:/opt/ablate/ablate/backend:ro", f"{workers}:/opt/ablate/ablate/workers:ro"]
    return mounts + [f"{p}:{p}:ro" for p in (backend, workers)]


def has_client(client: str) -> bool:
    return shutil.which(client) is not None
