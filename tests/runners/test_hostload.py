"""The host's state around a run: real samples around a real child process, and the busy rule."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ablate.workers.runners.hostload import HostSample, other_load, provenance, sample


def test_samples_around_a_real_child_count_its_cpu_time() -> None:
    start = sample()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    end = sample()
    prov = provenance(start, end)
    assert float(prov["host_run_cpu_s"]) > 0 and float(prov["host_run_wall_s"]) > 0
    assert int(prov["host_cpus"]) >= 1 and prov["host_busy"] in ("true", "false")
    if start.load1 is not None:
        assert float(prov["host_load_start"]) >= 0


def _s(load: float, wall: float, cpu: float, gpu: frozenset[int] | None = None) -> HostSample:
    return HostSample(load1=load, cpus=2, wall=wall, children_cpu_s=cpu, gpu_pids=gpu)


def test_the_run_s_own_load_is_not_counted_as_other_work() -> None:
    # The run kept both CPUs busy for 100 s (200 CPU-s): an end load of 2.2 is mostly the run itself.
    quiet = provenance(_s(0.1, 0.0, 0.0), _s(2.2, 100.0, 200.0))
    assert quiet["host_busy"] == "false" and "host_busy_reason" not in quiet
    assert other_load(_s(0.1, 0.0, 0.0), _s(2.2, 100.0, 200.0)) == pytest.approx(0.2)


def test_a_loaded_host_is_flagged_with_the_figures() -> None:
    busy = provenance(_s(9.1, 0.0, 0.0), _s(8.0, 10.0, 1.0))
    assert busy["host_busy"] == "true"
    assert busy["host_busy_reason"] == "measured while the host was busy: load 9.1 on 2 CPUs"
    gpu = provenance(_s(0.0, 0.0, 0.0, frozenset({41})), _s(0.0, 1.0, 0.0, frozenset()))
    assert (
        gpu["host_other_gpu_processes"] == "1" and "1 other process(es) on the GPU" in gpu["host_busy_reason"]
    )
