"""The ``command`` runner: run any benchmark command (ljperf, torchrun, deepspeed ...) and parse its log.

The variant's factors are realised by what the dispatcher resolved into the spec (image, env, the
variant's runner_options such as a different command); this runner cannot look inside the command, so
it accepts any factor except those physically impossible on the cluster (ACCL/AC2 on cpu).
"""

from __future__ import annotations

import shlex
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ablate.backend.domain.factors import factor_error, normalize_factor
from ablate.backend.domain.runner import ProgressCallback, RunResult, RunSpec
from ablate.backend.domain.states import FailureKind
from ablate.workers.parsers import LogParser, get_parser
from ablate.workers.parsers.summary import context_for, no_metrics_reason, summarize
from ablate.workers.runners import hostload
from ablate.workers.runners.process import (
    ProcessGroup,
    ProcOutcome,
    RunProcess,
    describe_returncode,
    start_run_process,
)

NAME = "command"
_CPU_IMPOSSIBLE = {"accl": "ACCL needs GPU/PPU collectives", "ac2": "AC2 is a GPU/PPU golden image"}


def _argv(command: Any) -> list[str]:
    if isinstance(command, str):
        return shlex.split(command)
    if isinstance(command, list | tuple) and command and all(isinstance(c, str) for c in command):
        return list(command)
    raise ValueError("runner_options.command must be a non-empty string or list of strings")


def _tokens_per_s(values: dict[str, float], parser: LogParser) -> float | None:
    if "throughput_tokens_per_s" in values:
        return values["throughput_tokens_per_s"]
    if "throughput_samples_per_s" in values and parser.seq_len:
        return values["throughput_samples_per_s"] * parser.seq_len
    if "step_time_s" in values and parser.seq_len and parser.global_batch and values["step_time_s"] > 0:
        return parser.seq_len * parser.global_batch / values["step_time_s"]
    return None


def launch_env(spec: RunSpec) -> dict[str, str]:
    """The torchrun-style variables the command reads: where it is among the run's nodes and, when it
    is one process per device, its rank. ``per-node``: NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR,
    MASTER_PORT (torchrun/deepspeed take these as arguments); ``per-device`` adds RANK, WORLD_SIZE,
    LOCAL_RANK and LOCAL_WORLD_SIZE."""
    env = {
        "NNODES": str(spec.nnodes),
        "NODE_RANK": str(spec.node_rank),
        "NPROC_PER_NODE": str(max(1, spec.local_world_size)),
        "MASTER_ADDR": spec.master_addr,
        "MASTER_PORT": str(spec.master_port),
    }
    if spec.launch == "per-device":
        env |= {
            "RANK": str(spec.rank),
            "WORLD_SIZE": str(spec.world_size),
            "LOCAL_RANK": str(spec.local_rank),
            "LOCAL_WORLD_SIZE": str(max(1, spec.local_world_size)),
        }
    return env


class CommandRunner:
    name = NAME

    def supported_factors(self, accelerator: str) -> set[str]:
        """The ladder factors realisable here; any other factor is accepted too (see module doc)."""
        known = {"accl", "ac2", "compiler_opt", "ckpt_opt"}
        return known - set(_CPU_IMPOSSIBLE) if accelerator.lower() == "cpu" else known

    def check_factors(self, factors: Iterable[str], accelerator: str) -> str | None:
        acc = accelerator.lower()
        for raw in factors:
            f = normalize_factor(raw)
            if acc == "cpu" and f in _CPU_IMPOSSIBLE:
                return factor_error(NAME, raw, acc, _CPU_IMPOSSIBLE[f])
        return None

    def run(self, spec: RunSpec, progress: ProgressCallback | None = None) -> RunResult:
        if err := self.check_factors(spec.factors, spec.accelerator):
            return RunResult.failed(err, "benchmark", environment=dict(spec.env))
        try:
            cmd = _resolve(spec)
        except ValueError as exc:
            return RunResult.failed(f"invalid command run: {exc}", "benchmark", environment=dict(spec.env))
        group = ProcessGroup()
        host_start = hostload.sample(gpu=spec.accelerator.lower() == "gpu")
        t0 = time.monotonic()
        try:
            process = RunProcess(
                cmd.argv, cmd.env, cmd.log_path, rank=cmd.rank, cwd=spec.runner_options.get("cwd")
            )
            start_run_process(group, spec, process)
        except (OSError, ValueError) as exc:
            return RunResult.failed(
                f"could not start command {cmd.argv[0]!r}: {exc}",
                "infrastructure",
                provenance=cmd.provenance,
                environment=cmd.env,
            )
        out = group.wait(spec.timeout_s, _progress_reader(cmd, progress))[0]
        elapsed = time.monotonic() - t0
        cmd.provenance.update(
            hostload.provenance(host_start, hostload.sample(gpu=host_start.gpu_pids is not None))
        )
        return _outcome(spec, cmd, out, elapsed)


@dataclass
class _Command:
    """A command run as resolved from its spec, before anything starts."""

    argv: list[str]
    parser: LogParser
    parser_name: str
    env: dict[str, str]  # the spec's environment and the launch variables: what the command sees
    warmup: int
    total: int  # steps expected, for progress when the log does not say (0: unknown)
    log_path: Path
    rank: int | None  # the rank a per-device process logs as, else None
    provenance: dict[str, str]


def _resolve(spec: RunSpec) -> _Command:
    """The command, its parser and its environment; ValueError for a bad command or parser."""
    opts, w = spec.runner_options, spec.workload
    parser_name = str(w.get("parser") or opts.get("parser") or "jsonl")
    argv = _argv(opts.get("command"))
    parser = get_parser(
        parser_name,
        {
            "seq_len": w.get("seq_len"),
            "global_batch": w.get("global_batch"),
            **(opts.get("parser_options") or {}),
        },
    )
    warmup = int(w.get("warmup_steps") or 0)
    rank = spec.rank if spec.launch == "per-device" else None
    return _Command(
        argv=argv,
        parser=parser,
        parser_name=parser_name,
        env=dict(spec.env) | launch_env(spec),
        warmup=warmup,
        total=int(opts.get("total_steps") or warmup + int(w.get("measured_steps") or 0) or 0),
        log_path=Path(spec.log_file(rank)),
        rank=rank,
        provenance={
            "runner": NAME,
            "host": socket.gethostname(),
            "command": shlex.join(argv),
            "parser": parser_name,
            "variant": str(spec.variant.get("name", "")),
            "factors": ",".join(spec.factors),
            "launch": spec.launch,
        },
    )


def _progress_reader(cmd: _Command, progress: ProgressCallback | None) -> Callable[[int, str], None]:
    """Feeds each output line to the parser and reports each step record it yields."""

    def on_line(_index: int, line: str) -> None:
        parser = cmd.parser
        for rec in parser.feed(line):
            if progress is not None:
                progress(
                    rec.step, parser.total_steps or cmd.total or rec.step, _tokens_per_s(rec.values, parser)
                )

    return on_line


def _outcome(spec: RunSpec, cmd: _Command, out: ProcOutcome, elapsed: float) -> RunResult:
    """The result of a command that ran: how it ended, and what its log says."""
    parsed = cmd.parser.finish()
    prov = cmd.provenance
    if out.log_error:  # the run went on without its log (full disk): its metrics are kept, the gap said
        prov["log_error"] = out.log_error[:500]
    prov["malformed_lines"] = str(parsed.malformed_lines)
    prov["step_records"] = str(len(parsed.steps))
    if parsed.malformed_examples:
        prov["first_malformed_line"] = parsed.malformed_examples[0]
    # every outcome carries the log and what ran; a failure adds its reason, a success its numbers
    ran = RunResult(
        status="succeeded",
        log_tail=out.tail_text,
        log_path=out.log_path,
        provenance=prov,
        environment=cmd.env,
    )

    def fail(error: str, kind: FailureKind) -> RunResult:
        return replace(ran, status="failed", error=error, failure_kind=kind)

    if out.cancelled is not None:
        return fail(f"cancelled: {out.cancelled}", "infrastructure")
    if out.timed_out:
        return fail(f"timed out after {spec.timeout_s:g} s (process group killed)", "timeout")
    code = out.returncode if out.returncode is not None else -9
    if code != 0:
        return fail(
            f"command {describe_returncode(code)}{last_words(out.tail_text)}",
            "infrastructure" if code < 0 else "benchmark",
        )
    metrics, series = summarize(parsed, context_for(spec.workload, spec.cluster, cmd.parser))
    if not metrics and spec.rank != 0:
        # Only global rank 0 must report: the other nodes' launchers (and ranks) usually print no
        # metrics; their exit code is what counts.
        return ran
    if not metrics:
        why = no_metrics_reason(cmd.parser_name, parsed, cmd.warmup)
        return fail(f"command printed no metrics: {why}", "benchmark")
    metrics.setdefault("elapsed_s", (elapsed, "s"))
    return replace(ran, metrics=metrics, series=series)


def last_words(tail: str | None, lines: int = 2, limit: int = 300) -> str:
    """The command's last output lines (its own account of why it failed, usually), for the one-line
    reason a study's follower prints; progress-event lines are the runner's, not the command's."""
    said = [line.strip() for line in (tail or "").splitlines() if line.strip() and not line.startswith("@@")]
    if not said:
        return ""
    text = " | ".join(said[-lines:])
    return f": {text[: limit - 1] + '…' if len(text) > limit else text}"  # as `ablate ci run` says it
