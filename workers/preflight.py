"""Preflight health check, run on the worker right before the runner: are the expected devices visible,
does the driver meet the release's requirement, is enough device memory free?

The comparisons are pure functions fed by small probes (``nvidia-smi``, ``ppu-smi``, psutil), so they
are tested with realistic tool output on machines without the devices. A tool that fails (exits
non-zero, e.g. ``nvidia-smi`` exiting 9 when the driver is not loaded, or hangs) fails the node with its
output. A missing tool depends on the mode (``ABLATE_PREFLIGHT``): ``lenient`` leaves the fact
*unverified* (recorded, not failed: a PPU node whose image lacks ``ppu-smi`` should not be declared
broken by us), ``strict`` fails the node, ``off`` skips the whole check. A tool that answers with too few
devices or too old a driver fails the run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
DEFAULT_MIN_FREE_FRACTION = 0.8  # a device less free than this is still held by someone else
DEFAULT_MIN_HOST_FREE_GIB = 0.5


@dataclass(frozen=True)
class Device:
    index: str
    uuid: str = ""
    driver: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None


@dataclass
class PreflightReport:
    ok: bool
    reason: str | None = None
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DriverRequirement:
    label: str  # e.g. "CUDA 13.0" or "PPU"
    minimum: str

    def describe(self) -> str:
        return f"{self.label} builds need driver >= {self.minimum}"


# --- versions -----------------------------------------------------------------------------------


def version_tuple(text: str) -> tuple[int, ...]:
    """``"580.65.06"`` -> (580, 65, 6); ``"v1.1.0-rc"`` -> (1, 1, 0). Non-numeric text -> ()."""
    m = re.search(r"\d+(?:\.\d+)*", text)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def version_at_least(actual: str, minimum: str) -> bool:
    a, b = version_tuple(actual), version_tuple(minimum)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def _minimum_of(value: Any) -> str | None:
    """``">=580"``, ``"580"``, ``{"driver": ">=580"}``, ``{"min_driver": "575"}`` -> ``"580"``."""
    if isinstance(value, Mapping):
        for key in ("driver", "min_driver", "minimum", "min", "version"):
            if key in value:
                return _minimum_of(value[key])
        return None
    text = str(value).strip()
    return (text.lstrip(">=~ ").strip() or None) if version_tuple(text) else None


def driver_requirements(
    requirements: Mapping[str, Any], accelerator: str, cuda_version: str | None = None
) -> list[DriverRequirement]:
    """The driver minimums of a release that apply to this run.

    Keys like ``cuda_13.0`` / ``cuda12.8`` / ``CUDA 13.0.2`` name a CUDA build; ``ppu_driver`` / ``ppu``
    / ``driver`` the PPU driver. When the run's CUDA build is known only its rule applies; when it is
    not, the weakest CUDA rule does (the release ships builds for each, so any of them could run).
    """
    acc = accelerator.lower()
    cuda: dict[tuple[int, ...], DriverRequirement] = {}
    other: list[DriverRequirement] = []
    for key, value in requirements.items():
        k = str(key).lower().replace(" ", "_")
        minimum = _minimum_of(value)
        if minimum is None:
            continue
        if k.startswith("cuda"):
            ver = version_tuple(k)[:2]
            cuda[ver] = DriverRequirement(f"CUDA {'.'.join(map(str, ver))}", minimum)
        elif acc == "ppu" and k in ("ppu_driver", "ppu", "driver", "ppu_sdk_driver"):
            other.append(DriverRequirement("PPU", minimum))
    if acc == "ppu":
        return other
    if acc != "gpu" or not cuda:
        return []
    if cuda_version:
        want = version_tuple(cuda_version)[:2]
        if want in cuda:
            return [cuda[want]]
    weakest = min(cuda.values(), key=lambda r: version_tuple(r.minimum))
    return [weakest]


def check_driver(actual: str | None, requirements: Sequence[DriverRequirement]) -> str | None:
    for req in requirements:
        if actual is None:
            continue  # unverified; recorded by the caller
        if not version_at_least(actual, req.minimum):
            return f"driver {actual} is too old: {req.describe()}"
    return None


def check_devices(expected: int, visible: Sequence[Device], kind: str) -> str | None:
    if len(visible) < expected:
        ids = ", ".join(d.index for d in visible) or "none"
        return f"expected {expected} {kind} device(s) visible, found {len(visible)} ({ids})"
    return None


def check_free_memory(devices: Sequence[Device], min_free_fraction: float) -> str | None:
    for d in devices:
        if d.total_bytes and d.free_bytes is not None and d.free_bytes < min_free_fraction * d.total_bytes:
            return (
                f"device {d.index} has only {d.free_bytes / GIB:.1f} of {d.total_bytes / GIB:.1f} GiB free "
                f"(need {min_free_fraction:.0%}); another process is holding it"
            )
    return None


# --- probes -------------------------------------------------------------------------------------


def parse_smi_csv(text: str) -> list[Device]:
    """Rows of ``--query-gpu=index,uuid,driver_version,memory.total,memory.free --format=csv,
    noheader,nounits`` (memory in MiB)."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        total = int(float(parts[3]) * 1024**2) if _num(parts[3]) else None
        free = int(float(parts[4]) * 1024**2) if _num(parts[4]) else None
        out.append(Device(parts[0], parts[1], parts[2], total, free))
    return out


def parse_smi_list(text: str, kind: str = "PPU") -> list[Device]:
    """``ppu-smi -L`` / ``nvidia-smi -L`` lines: ``PPU 0: PPU (UUID: GPU-019e...)``."""
    out = []
    for m in re.finditer(rf"^{kind}\s+(\d+):.*?(?:UUID:\s*([^)\s]+))?\)?\s*$", text, re.M):
        out.append(Device(m.group(1), m.group(2) or ""))
    return out


def _num(s: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)?", s))


def visible_subset(devices: Sequence[Device], visible_env: str | None) -> list[Device]:
    """The devices a ``CUDA_VISIBLE_DEVICES``-style variable leaves visible (indices or UUIDs)."""
    if visible_env is None:
        return list(devices)
    wanted = [v.strip() for v in visible_env.split(",") if v.strip()]
    return [d for d in devices if d.index in wanted or (d.uuid and d.uuid in wanted)]


MODES = ("strict", "lenient", "off")
TOOL_TIMEOUT_S = 20.0


class ToolFailed(Exception):
    """A device tool that exists but failed: the node's devices are not usable as they are."""


def _run(argv: list[str]) -> str | None:
    """The tool's output; None when it is not installed. Raises :class:`ToolFailed` when it fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolFailed(f"`{argv[0]}` did not answer within {TOOL_TIMEOUT_S:g} s") from exc
    except OSError as exc:
        raise ToolFailed(f"`{argv[0]}` could not be started: {exc}") from exc
    if done.returncode != 0:
        output = " ".join(f"{done.stdout}\n{done.stderr}".split())[-1000:]
        raise ToolFailed(f"`{' '.join(argv)}` exited with {done.returncode}: {output or '(no output)'}")
    return done.stdout


QUERY = "index,uuid,driver_version,memory.total,memory.free"


def _visible(visible: Sequence[str] | None) -> str | None:
    """The devices to check: those given (the run's own, from the dispatcher), else the worker's
    ``CUDA_VISIBLE_DEVICES`` (Ray sets it for GPUs only)."""
    return ",".join(visible) if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES")


def probe_gpus(visible: Sequence[str] | None = None) -> list[Device] | None:
    text = _run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
    if text is None:
        return None
    return visible_subset(parse_smi_csv(text), _visible(visible))


def probe_ppus(visible: Sequence[str] | None = None) -> list[Device] | None:
    # ppu-smi mirrors nvidia-smi; the CSV query gives driver and memory where the version supports it.
    try:
        text = _run(["ppu-smi", f"--query-ppu={QUERY}", "--format=csv,noheader,nounits"])
    except ToolFailed:
        text = ""  # older ppu-smi versions lack the CSV query; the listing below decides
    devices = parse_smi_csv(text) if text else []
    if not devices:
        listing = _run(["ppu-smi", "-L"])
        if listing is None:
            return None
        devices = parse_smi_list(listing, "PPU")
    return visible_subset(devices, _visible(visible))


HOST_FREE_REUSE_S = 1.0  # a reading of the host's free memory serves the runs of the next second
_host_free: list[tuple[float, int]] = []  # (when, bytes), this process's last reading


def host_free_bytes() -> int:
    """The host's available memory, read at most once per HOST_FREE_REUSE_S in this process (short runs
    back to back on one worker would otherwise read /proc/meminfo once each)."""
    import psutil

    now = time.monotonic()
    if _host_free and now - _host_free[0][0] < HOST_FREE_REUSE_S:
        return _host_free[0][1]
    free = int(psutil.virtual_memory().available)
    _host_free[:] = [(now, free)]
    return free


# --- the check ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightCheck:
    """What to check on a node for its share of a run: ``expected_devices`` of ``accelerator`` visible,
    a driver meeting the release's ``requirements`` (for its ``cuda_version`` build, when known), at
    least ``min_free_fraction`` of each device's memory and ``min_host_free_gib`` of the host's free.
    ``mode`` is one of :data:`MODES` (see the module's docstring); ``visible``: the device indices the
    run was given on this node (else the worker's ``CUDA_VISIBLE_DEVICES``)."""

    accelerator: str
    expected_devices: int
    requirements: Mapping[str, Any] | None = None
    cuda_version: str | None = None
    min_free_fraction: float = DEFAULT_MIN_FREE_FRACTION
    min_host_free_gib: float = DEFAULT_MIN_HOST_FREE_GIB
    mode: str = "lenient"
    visible: Sequence[str] | None = None


def run_preflight(check: PreflightCheck, *, probe: Any = None) -> PreflightReport:
    """Check this worker for one node's share of a run. ``probe`` replaces the device probe in tests."""
    acc = check.accelerator.lower()
    mode = check.mode
    facts: dict[str, str] = {"preflight.accelerator": acc}
    if mode == "off":
        facts["preflight"] = "off"
        return PreflightReport(True, None, facts)
    free = host_free_bytes()
    facts["preflight.host_free_gib"] = f"{free / GIB:.1f}"
    if free < check.min_host_free_gib * GIB:
        return PreflightReport(False, f"only {free / GIB:.2f} GiB host memory free", facts)
    if acc == "cpu":
        return PreflightReport(True, None, facts)
    tool = "nvidia-smi" if acc == "gpu" else "ppu-smi"
    try:
        devices = (
            probe() if probe is not None else (probe_gpus if acc == "gpu" else probe_ppus)(check.visible)
        )
    except ToolFailed as exc:
        facts["preflight.devices"] = f"failed ({tool} failed)"
        return PreflightReport(False, f"device tool failed: {exc}", facts)
    if devices is None:
        if mode == "strict":
            facts["preflight.devices"] = f"failed ({tool} not available)"
            return PreflightReport(
                False, f"`{tool}` is not installed on the node (ABLATE_PREFLIGHT=strict)", facts
            )
        facts["preflight.devices"] = f"unverified ({tool} not available)"
        return PreflightReport(True, None, facts)
    facts["preflight.devices"] = ",".join(d.index for d in devices) or "none"
    reason = check_devices(check.expected_devices, devices, acc.upper())
    if reason:
        return PreflightReport(False, reason, facts)
    reqs = driver_requirements(check.requirements or {}, acc, check.cuda_version)
    driver = next((d.driver for d in devices if d.driver), None)
    facts["preflight.driver"] = driver or "unverified"
    if reqs:
        facts["preflight.driver_requirement"] = "; ".join(r.describe() for r in reqs)
    reason = check_driver(driver, reqs) or check_free_memory(devices, check.min_free_fraction)
    return PreflightReport(reason is None, reason, facts)
