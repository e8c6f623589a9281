"""The command runner with real child processes (small python -c scripts)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ablate.backend.domain.runner import RunCancelled, RunSpec, get_runner

RUNNER = get_runner("command")

EMIT_JSONL = """
import json, os, sys, time
print("booting", flush=True)
print("value of ABLATE_X:", os.environ.get("ABLATE_X"), flush=True)
for step in range(1, 6):
    rec = {"step": step, "step_time_s": 0.5 if step > 1 else 3.0, "loss": 10.0 - step}
    print(json.dumps(rec), flush=True)
print("{broken", flush=True)
"""


def _spec(make_spec: Callable[..., RunSpec], script: str, **kw: Any) -> RunSpec:
    options = {"command": [sys.executable, "-c", script], **kw.pop("options", {})}
    return make_spec(runner="command", parser=kw.pop("parser", "jsonl"), options=options, **kw)


def test_success_with_jsonl(make_spec: Callable[..., RunSpec]) -> None:
    events: list[tuple[int, int, float | None]] = []
    spec = _spec(
        make_spec,
        EMIT_JSONL,
        env={"ABLATE_X": "from-spec"},
        warmup_steps=1,
        measured_steps=4,
        global_batch=8,
        seq_len=128,
    )
    res = RUNNER.run(spec, lambda s, t, tps: events.append((s, t, tps)))
    assert res.succeeded, (res.error, res.log_tail)
    assert res.metrics["step_time_s"] == (0.5, "s")  # warm-up step (3.0 s) dropped
    assert res.metrics["throughput_tokens_per_s"][0] == pytest.approx(8 * 128 / 0.5)
    assert res.metrics["throughput_samples_per_s"][0] == pytest.approx(16.0)
    assert res.metrics["loss"] == (5.0, "1")
    assert "elapsed_s" in res.metrics
    assert res.series["step_time_s"][0] == [1, 2, 3, 4, 5]
    assert [e[0] for e in events] == [1, 2, 3, 4, 5] and events[-1][1] == 5
    assert events[-1][2] == pytest.approx(2048.0)
    assert res.provenance["malformed_lines"] == "1"
    assert res.provenance["host_busy"] in ("true", "false") and float(res.provenance["host_run_cpu_s"]) > 0
    assert "value of ABLATE_X: from-spec" in res.log_tail
    assert res.log_path and "booting" in Path(res.log_path).read_text()
    assert res.environment["ABLATE_X"] == "from-spec"


def test_a_full_disk_under_the_log_keeps_the_metrics(make_spec: Callable[..., RunSpec]) -> None:
    """The log file cannot be written (it is /dev/full: every write fails with ENOSPC, as on a full disk,
    for root too): the run goes on, its metrics are kept and the result says the log is incomplete."""
    spec = _spec(make_spec, EMIT_JSONL, warmup_steps=1, measured_steps=4, global_batch=8, seq_len=128)
    log_path = Path(spec.log_file(spec.rank if spec.launch == "per-device" else None))  # as the runner
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.symlink_to("/dev/full")
    res = RUNNER.run(spec)
    assert res.succeeded, (res.error, res.log_tail)
    assert res.metrics["step_time_s"] == (0.5, "s")
    assert "booting" in res.log_tail
    assert res.provenance.get("log_error") == (
        f"the log {log_path} could not be written: No space left on device"
    ), (res.log_path, res.provenance)


def test_string_command_and_cwd(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    (tmp_path / "emit.py").write_text('print(\'{"step": 1, "tokens_per_s": 99.0}\')\n')
    spec = make_spec(
        runner="command",
        parser="jsonl",
        warmup_steps=0,
        options={"command": f"{sys.executable} emit.py", "cwd": str(tmp_path)},
    )
    res = RUNNER.run(spec)
    assert res.succeeded and res.metrics["throughput_tokens_per_s"] == (99.0, "tokens/s")


def test_nonzero_exit_fails_with_tail(make_spec: Callable[..., RunSpec]) -> None:
    script = EMIT_JSONL + "\nprint('RuntimeError: NCCL error in: ...', file=sys.stderr)\nsys.exit(3)"
    res = RUNNER.run(_spec(make_spec, script))
    assert not res.succeeded and res.failure_kind == "benchmark"
    assert res.error is not None and res.error.startswith("command exit code 3: ")
    assert res.error.endswith("RuntimeError: NCCL error in: ...")  # its own last words, in the reason
    assert "NCCL error" in res.log_tail


def test_signal_is_infrastructure(make_spec: Callable[..., RunSpec]) -> None:
    res = RUNNER.run(
        _spec(make_spec, "import os, signal; print('oom soon', flush=True); os.kill(os.getpid(), 9)")
    )
    assert res.failure_kind == "infrastructure" and "SIGKILL" in (res.error or "")
    assert "oom soon" in res.log_tail


def test_timeout_kills_process_group(make_spec: Callable[..., RunSpec]) -> None:
    # The child starts a grandchild; both must die with the group.
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    res = RUNNER.run(_spec(make_spec, script, timeout_s=1.5))
    assert res.failure_kind == "timeout" and "timed out after 1.5 s" in (res.error or "")
    pid = int(res.log_tail.split("child ")[1].split()[0])
    # SIGKILL is delivered asynchronously: on a loaded machine the grandchild may still be runnable
    # for a moment after the group kill. Wait (bounded) until it is gone or a zombie awaiting its reaper.
    deadline = time.monotonic() + 30.0
    while not _dead(pid):
        assert time.monotonic() < deadline, f"grandchild {pid} still alive 30 s after the group kill"
        time.sleep(0.05)


def _dead(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    # The state follows the command name in parentheses, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


def test_no_metrics_fails(make_spec: Callable[..., RunSpec]) -> None:
    res = RUNNER.run(_spec(make_spec, "print('training finished, metrics written elsewhere')"))
    assert res.failure_kind == "benchmark" and "no metrics" in (res.error or "")
    assert "metrics written elsewhere" in res.log_tail


def test_deepspeed_0_7_log_through_the_runner(make_spec: Callable[..., RunSpec]) -> None:
    log = Path(__file__).parents[1] / "parsers" / "data" / "deepspeed_v07_gpt2.log"
    script = f"import sys; sys.stdout.write(open({str(log)!r}).read())"
    res = RUNNER.run(_spec(make_spec, script, parser="deepspeed", seq_len=1024, warmup_steps=1))
    assert res.succeeded, (res.error, res.log_tail)
    assert res.metrics["throughput_tokens_per_s"][0] == pytest.approx(98.0 * 1024)
    assert res.metrics["peak_memory_gib"] == (pytest.approx(6.91), "GiB")
    assert res.provenance["malformed_lines"] == "6"
    assert "CurrSamplesPerSec 'nan' is not a number" in res.provenance["first_malformed_line"]


def test_no_metrics_names_the_first_malformed_line(make_spec: Callable[..., RunSpec]) -> None:
    line = "[timer.py:197:stop] 0/10, CurrSamplesPerSec=garbage, MaxMemAllocated=1GB"
    script = f"print({line!r})"
    res = RUNNER.run(_spec(make_spec, script, parser="deepspeed"))
    assert res.failure_kind == "benchmark" and "no metrics" in (res.error or "")
    assert "1 malformed lines); first malformed line 1: CurrSamplesPerSec 'garbage' is not a number" in (
        res.error or ""
    )


def test_missing_executable_and_bad_options(make_spec: Callable[..., RunSpec]) -> None:
    res = RUNNER.run(make_spec(runner="command", options={"command": ["/nonexistent/ljperf", "benchmark"]}))
    assert res.failure_kind == "infrastructure" and "/nonexistent/ljperf" in (res.error or "")
    res = RUNNER.run(make_spec(runner="command", options={}))
    assert res.failure_kind == "benchmark" and "runner_options.command" in (res.error or "")
    res = RUNNER.run(make_spec(runner="command", parser="nope", options={"command": "true"}))
    assert res.failure_kind == "benchmark" and "known parsers" in (res.error or "")


def test_regex_parser_through_options(make_spec: Callable[..., RunSpec]) -> None:
    script = "for i in range(1, 4): print(f'[ljperf] step {i}/3 | tokens/s: {1000.0 * i}', flush=True)"
    options = {
        "parser_options": {
            "patterns": [
                {
                    "regex": r"step (?P<step>\d+)/(?P<total>\d+) \| tokens/s: (?P<t>[\d.]+)",
                    "metrics": {"t": "throughput_tokens_per_s"},
                }
            ]
        }
    }
    totals: list[int] = []
    res = RUNNER.run(
        _spec(make_spec, script, parser="regex", options=options, warmup_steps=1),
        lambda s, t, x: totals.append(t),
    )
    assert res.succeeded and res.metrics["throughput_tokens_per_s"][0] == pytest.approx(2500.0)
    assert totals == [3, 3, 3]  # the log's own total wins


def test_cancel(make_spec: Callable[..., RunSpec]) -> None:
    script = (
        "import json, time\n"
        "for i in range(1, 1000):\n"
        "    print(json.dumps({'step': i, 'loss': 1.0}), flush=True)\n"
        "    time.sleep(0.05)\n"
    )

    def cancel(step: int, total: int, tps: float | None) -> None:
        if step == 3:
            raise RunCancelled("operator stop")

    res = RUNNER.run(_spec(make_spec, script), cancel)
    assert res.failure_kind == "infrastructure" and "operator stop" in (res.error or "")


def test_factors() -> None:
    assert "'accl'" in (RUNNER.check_factors(["accl"], "cpu") or "")
    assert RUNNER.check_factors(["accl", "ac2", "compiler_opt", "ckpt_opt", "fp8"], "gpu") is None
    assert RUNNER.check_factors(["compiler_opt"], "cpu") is None


def test_result_serialises(make_spec: Callable[..., RunSpec]) -> None:
    res = RUNNER.run(_spec(make_spec, EMIT_JSONL))
    assert json.loads(json.dumps(res.to_dict()))["status"] == "succeeded"


PRINT_ENV = """
import json, os
keys = ["NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT"]
keys += ["RANK", "WORLD_SIZE", "LOCAL_RANK"]
print(json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
"""


@pytest.mark.parametrize("launch", ["per-node", "per-device"])
def test_the_launch_decides_the_environment_and_the_log_file(
    make_spec: Callable[..., RunSpec], launch: str
) -> None:
    from dataclasses import replace

    spec = _spec(make_spec, PRINT_ENV)
    # node 1 of 2 with 4 devices each: the launcher of that node, or the rank on its second device
    spec = replace(spec, launch=launch, nnodes=2, node_rank=1, local_world_size=4, world_size=8)
    spec = replace(spec, rank=4 if launch == "per-node" else 5, local_rank=0 if launch == "per-node" else 1)
    spec = replace(spec, master_addr="10.1.2.3", master_port=29555)
    res = RUNNER.run(spec)
    # not global rank 0: no metrics expected, the exit code decides
    assert res.succeeded and not res.metrics, (res.error, res.log_tail)
    seen = json.loads(res.log_tail.splitlines()[-1])
    node = {"NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "4", "MASTER_ADDR": "10.1.2.3"}
    assert {k: seen[k] for k in node} == node and seen["MASTER_PORT"] == "29555"
    if launch == "per-node":
        assert seen["RANK"] is None and seen["WORLD_SIZE"] is None
        assert res.log_path == str(Path(spec.log_dir) / f"run-{spec.run_id}" / "attempt-1" / "node1.log")
    else:
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["LOCAL_RANK"]) == ("5", "8", "1")
        folder = Path(spec.log_dir) / f"run-{spec.run_id}" / "attempt-1"
        assert res.log_path == str(folder / "node1-rank5.log")
    assert Path(res.log_path).is_file() and res.provenance["launch"] == launch
