"""The state of the machine around a measurement, recorded in every run's provenance.

A benchmark measured while other work loads the host is not a measurement of the image: on a busy
2-core machine the demo's repeats spread 25-69% and an identical rerun differed by +136%. A runner
takes a :func:`sample` before it starts its processes and one after they end, and merges
:func:`provenance` of the two into ``RunResult.provenance`` (strings, like every provenance value):

* ``host_load_start`` / ``host_load_end``: the 1-minute load average; ``host_cpus``: CPUs of the host;
* ``host_run_cpu_s`` / ``host_run_wall_s``: CPU time of the run's (reaped) child processes and the
  wall time between the samples. Their ratio is how many CPUs the run itself kept busy, which is
  subtracted from the end load to leave the load of other work;
* ``host_other_gpu_processes``: compute processes on the GPUs other than the run's, from
  ``nvidia-smi`` where there is one (GPU runs only);
* ``host_busy``: ``true`` when other work's load (the start load, or the end load minus the run's own
  CPUs, whichever is larger) reaches half the CPU count, or another process computes on the GPU;
  ``host_busy_reason`` then says so: "measured while the host was busy: load 9.1 on 2 CPUs".

The comparison reads ``host_busy`` from the runs' provenance, lists busy cells under "What is
missing" and leaves those runs out of the release-over-release verdicts unless asked to keep them.
Child CPU time comes from ``getrusage(RUSAGE_CHILDREN)``: with several runs in one
dispatcher process at once it counts all of their children, so it is a bound, not an exact figure.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass

# Other work's load at or above this share of the CPUs makes the host "busy".
BUSY_SHARE_OF_CPUS = 0.5
_NVIDIA_SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HostSample:
    load1: float | None  # None where the OS has no load average
    cpus: int
    wall: float  # time.monotonic()
    children_cpu_s: float  # user + system time of reaped child processes so far
    gpu_pids: frozenset[int] | None  # compute processes on the GPUs; None when not asked or unknown


def _gpu_pids() -> frozenset[int] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return frozenset(int(x) for x in out.stdout.split() if x.strip().isdigit())


def sample(*, gpu: bool = False) -> HostSample:
    """The host's state now; ``gpu`` also lists the compute processes on its GPUs."""
    try:
        load1: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load1 = None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return HostSample(
        load1=load1,
        cpus=os.cpu_count() or 1,
        wall=time.monotonic(),
        children_cpu_s=usage.ru_utime + usage.ru_stime,
        gpu_pids=_gpu_pids() if gpu else None,
    )


def other_load(start: HostSample, end: HostSample) -> float | None:
    """Load of work other than the run: the start load, or the end load less the run's own CPUs."""
    if start.load1 is None or end.load1 is None:
        return None
    wall = max(end.wall - start.wall, 1e-9)
    own = max(0.0, end.children_cpu_s - start.children_cpu_s) / wall
    return max(start.load1, end.load1 - own)


def provenance(
    start: HostSample, end: HostSample, *, own_pids: frozenset[int] = frozenset()
) -> dict[str, str]:
    """Provenance entries (strings) describing the host around a run measured between two samples."""
    wall = max(end.wall - start.wall, 0.0)
    cpu = max(0.0, end.children_cpu_s - start.children_cpu_s)
    out = {
        "host_cpus": str(end.cpus),
        "host_run_cpu_s": f"{cpu:.3f}",
        "host_run_wall_s": f"{wall:.3f}",
    }
    if start.load1 is not None:
        out["host_load_start"] = f"{start.load1:.2f}"
    if end.load1 is not None:
        out["host_load_end"] = f"{end.load1:.2f}"
    reasons = []
    others = other_load(start, end)
    if others is not None and others >= BUSY_SHARE_OF_CPUS * end.cpus:
        reasons.append(f"load {max(start.load1 or 0.0, end.load1 or 0.0):.1f} on {end.cpus} CPUs")
    if start.gpu_pids is not None or end.gpu_pids is not None:
        seen = (start.gpu_pids or frozenset()) | (end.gpu_pids or frozenset())
        foreign = sorted(seen - own_pids)
        out["host_other_gpu_processes"] = str(len(foreign))
        if foreign:
            reasons.append(f"{len(foreign)} other process(es) on the GPU")
    out["host_busy"] = "true" if reasons else "false"
    if reasons:
        out["host_busy_reason"] = "measured while the host was busy: " + ", ".join(reasons)
    return out
