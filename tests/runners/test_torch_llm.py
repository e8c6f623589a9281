"""The torch-llm runner on CPU: real training runs in fresh child processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ablate.backend.domain.metrics import METRIC_UNITS
from ablate.backend.domain.runner import RunCancelled, RunResult, RunSpec, get_runner
from ablate.workers.runners.torch_llm.runner import launch_local_ranks
from ablate.workers.runners.torch_llm.train import compile_time_s

SpecFactory = Callable[..., RunSpec]
RUNNER = get_runner("torch-llm")
# An eager run has no compile time: compile_time_s is reported by compiled runs only.
CPU_METRICS = set(METRIC_UNITS) - {"peak_memory_reserved_gib", "compile_time_s"}


def _ok(res: RunResult) -> RunResult:
    assert res.succeeded, f"{res.error}\n{res.log_tail}"
    return res


def test_eager_run_reports_every_metric_and_progress(make_spec: SpecFactory) -> None:
    events: list[tuple[int, int, float | None]] = []
    spec = make_spec()
    res = _ok(RUNNER.run(spec, lambda s, t, tps: events.append((s, t, tps))))
    assert set(res.metrics) == CPU_METRICS
    for name, (value, unit) in res.metrics.items():
        assert unit == METRIC_UNITS[name]
        assert value > 0, name
    assert 0 < res.metrics["mfu"][0] < 1
    assert [e[0] for e in events] == [1, 2, 3, 4] and all(e[1] == 4 for e in events)
    assert all(e[2] and e[2] > 0 for e in events)
    steps, times = res.series["step_time_s"]
    assert steps == [1, 2, 3, 4] and len(res.series["loss"][1]) == 4
    # Summary is the median of the measured steps only (step 1 is warm-up).
    assert res.metrics["step_time_s"][0] == pytest.approx(sorted(times[1:])[1])
    assert res.metrics["loss"][0] == pytest.approx(res.series["loss"][1][-1])
    tokens_per_step = 4 * 64
    assert res.metrics["throughput_tokens_per_s"][0] == pytest.approx(
        tokens_per_step / res.metrics["step_time_s"][0]
    )
    assert res.provenance["compile"] == "eager"
    assert res.provenance["activation_checkpointing"] == "0/2 layers"
    assert res.provenance["torch"] and res.provenance["host"]
    assert res.provenance["host_busy"] in ("true", "false") and int(res.provenance["host_cpus"]) >= 1
    assert res.log_path and Path(res.log_path).is_file()
    assert "@@ablate-event" in res.log_tail
    assert res.environment["OMP_NUM_THREADS"] == "1"


def test_checkpoint_env_switch_and_layer_count(make_spec: SpecFactory) -> None:
    res = _ok(RUNNER.run(make_spec(env={"CHECKPOINT_OPTIMIZATION": "true"}, measured_steps=1)))
    assert res.provenance["activation_checkpointing"] == "2/2 layers"
    res = _ok(RUNNER.run(make_spec(factors=("ckpt_opt",), options={"ckpt_layers": 1}, measured_steps=1)))
    assert res.provenance["activation_checkpointing"] == "1/2 layers"


def test_cpu_peak_memory_is_the_runs_own_not_its_parents(make_spec: SpecFactory) -> None:
    # Linux carries ru_maxrss across fork and exec: a run started by a large process (a Ray worker,
    # or this test process late in the suite) reported that process's RSS instead of its own.
    ballast = b"\x01" * (1536 * 2**20)  # written, so resident in this process
    parent_gib = psutil.Process().memory_info().rss / 2**30
    assert parent_gib > 1.4
    res = _ok(RUNNER.run(make_spec(measured_steps=1)))
    peak = res.metrics["peak_memory_gib"][0]
    assert 0.05 < peak < parent_gib - 0.5, (peak, parent_gib)
    del ballast


@pytest.mark.slow
def test_checkpointing_lowers_peak_memory(make_spec: SpecFactory) -> None:
    # Narrow, deep-ish and many tokens: activations (~L * tokens * dim) dwarf weights and optimiser state.
    shape = {
        "options": {"n_layers": 8},
        "seq_len": 256,
        "micro_batch": 64,  # at 32 the ratio measured 0.65-0.71 (glibc's heap is not returned at once)
        "warmup_steps": 0,
        "measured_steps": 2,
    }
    eager = _ok(RUNNER.run(make_spec(**shape)))
    ckpt = _ok(RUNNER.run(make_spec(factors=("ckpt_opt",), **shape)))
    e, c = eager.metrics["peak_memory_gib"][0], ckpt.metrics["peak_memory_gib"][0]
    assert c < 0.75 * e, (e, c)
    # Recomputation changes memory and time, never the maths.
    assert ckpt.series["loss"][1] == pytest.approx(eager.series["loss"][1], rel=1e-4)
    assert ckpt.provenance["activation_checkpointing"] == "8/8 layers"


@pytest.mark.slow
@pytest.mark.parametrize("factors", [("compiler_opt",), ("compiler_opt", "ckpt_opt")])
def test_compiled_runs(make_spec: SpecFactory, factors: tuple[str, ...]) -> None:
    res = _ok(RUNNER.run(make_spec(factors=factors, warmup_steps=1, measured_steps=2)))
    assert res.provenance["compile"].startswith("torch.compile")
    assert res.metrics["throughput_tokens_per_s"][0] > 0
    assert res.metrics["compile_time_s"][0] > 0
    if "ckpt_opt" in factors:
        assert res.provenance["activation_checkpointing"] == "2/2 layers"


@pytest.mark.slow
def test_two_rank_gloo_data_parallel(make_spec: SpecFactory) -> None:
    spec = make_spec(global_batch=16, micro_batch=4)  # 2 ranks x 4 x grad_accum 2
    steps: list[int] = []
    res = _ok(launch_local_ranks(spec, 2, lambda s, t, tps: steps.append(s)))
    assert res.provenance["world_size"] == "2" and res.provenance["grad_accum"] == "2"
    assert res.provenance["distributed_backend"] == "gloo"
    tps, per_dev = (
        res.metrics["throughput_tokens_per_s"][0],
        res.metrics["throughput_tokens_per_s_per_device"][0],
    )
    assert per_dev == pytest.approx(tps / 2)
    assert tps == pytest.approx(16 * 64 / res.metrics["step_time_s"][0])
    assert res.metrics["throughput_samples_per_s"][0] == pytest.approx(16 / res.metrics["step_time_s"][0])
    assert steps == [1, 2, 3, 4]  # relayed from rank 0 only
    assert res.log_path and res.log_path.endswith("-rank0.log")
    # The same run through runner options.
    res2 = _ok(RUNNER.run(make_spec(options={"local_world_size": 2}, measured_steps=1)))
    assert res2.provenance["world_size"] == "2"


def test_refused_factors_name_the_factor() -> None:
    msg = RUNNER.check_factors(["compiler_opt", "accl"], "cpu")
    assert msg and "'accl'" in msg and "cpu" in msg and "ACCL needs GPU/PPU collectives" in msg
    assert "'ac2'" in (RUNNER.check_factors(["ac2"], "cpu") or "")
    assert "'warp_drive'" in (RUNNER.check_factors(["warp_drive"], "gpu") or "")
    assert RUNNER.check_factors(["accl", "ac2", "CompilerOpt", "ckpt_opt"], "gpu") is None
    assert RUNNER.check_factors(["accl"], "ppu") is None
    assert RUNNER.supported_factors("cpu") == {"compiler_opt", "ckpt_opt"}


def test_run_with_refused_factor_fails_without_running(make_spec: SpecFactory) -> None:
    res = RUNNER.run(make_spec(factors=("accl",)))
    assert not res.succeeded and res.failure_kind == "benchmark" and "'accl'" in (res.error or "")


def test_invalid_configuration_is_a_benchmark_failure(make_spec: SpecFactory) -> None:
    res = RUNNER.run(make_spec(global_batch=6, micro_batch=4))
    assert res.failure_kind == "benchmark" and "global_batch 6" in (res.error or "")
    res = RUNNER.run(make_spec(precision="fp8"))
    assert res.failure_kind == "benchmark" and "fp8" in (res.error or "")
    assert "Traceback" in res.log_tail


def test_gpu_cluster_without_cuda_is_infrastructure(make_spec: SpecFactory) -> None:
    res = RUNNER.run(make_spec(cluster={"accelerator": "gpu"}))
    assert res.failure_kind == "infrastructure" and "cuda" in (res.error or "").lower()


def test_timeout_kills_the_child(make_spec: SpecFactory) -> None:
    res = RUNNER.run(make_spec(timeout_s=1.0, measured_steps=10_000))
    assert res.failure_kind == "timeout" and "timed out after 1 s" in (res.error or "")


def test_killed_child_is_infrastructure(make_spec: SpecFactory) -> None:
    def kill_child(step: int, total: int, tps: float | None) -> None:
        if step == 2:
            for child in psutil.Process().children(recursive=True):
                if "ablate.workers.runners.torch_llm" in " ".join(child.cmdline()):
                    os.kill(child.pid, signal.SIGKILL)

    res = RUNNER.run(make_spec(measured_steps=200), kill_child)
    assert res.failure_kind == "infrastructure" and "SIGKILL" in (res.error or "")
    assert res.log_tail


def test_cancel_from_progress_callback(make_spec: SpecFactory) -> None:
    def cancel(step: int, total: int, tps: float | None) -> None:
        raise RunCancelled("study withdrawn")

    res = RUNNER.run(make_spec(measured_steps=200), cancel)
    assert res.failure_kind == "infrastructure" and "study withdrawn" in (res.error or "")


@pytest.mark.slow
def test_compiled_run_reports_compile_time_apart_from_measured_steps(make_spec: SpecFactory) -> None:
    # A real torch.compile (dynamo graph capture and AOT autograd) with the aot_eager backend:
    # inductor's C++ build of the same graph takes over 4 minutes on a busy 2-core machine.
    spec = make_spec(factors=("compiler_opt",), options={"compile_backend": "aot_eager"}, measured_steps=2)
    res = _ok(RUNNER.run(spec))
    assert res.provenance["compile"] == "torch.compile(mode=default, backend=aot_eager)"
    steps, times = res.series["step_time_s"]
    assert steps == [1, 2, 3]  # the warm-up step is recorded in the series, marked by provenance
    assert res.provenance["warmup_steps"] == "1"
    value, unit = res.metrics["compile_time_s"]
    assert unit == "s" and value == pytest.approx(compile_time_s(times, 1)) and value > 0
    # The step time and the throughput are of the measured steps only.
    assert res.metrics["step_time_s"][0] == pytest.approx((times[1] + times[2]) / 2)
    assert res.metrics["throughput_tokens_per_s"][0] == pytest.approx(4 * 64 / res.metrics["step_time_s"][0])


def test_compile_time_is_the_warmup_beyond_a_measured_step() -> None:
    # Two warm-up steps (90 s compile, 3 s recompile), measured steps around 0.5 s.
    assert compile_time_s([90.5, 3.5, 0.4, 0.5, 0.6], 2) == pytest.approx(90.0 + 3.0)
    # A warm-up step faster than the measured median counts nothing, never less than nothing.
    assert compile_time_s([0.3, 0.5, 0.5, 0.5], 1) == 0.0
    # No warm-up: the first step stands in, measured against the steps after it.
    assert compile_time_s([10.5, 0.5, 0.7, 0.5], 0) == pytest.approx(10.0)
    assert compile_time_s([10.5], 0) is None and compile_time_s([10.5, 0.5], 2) is None
