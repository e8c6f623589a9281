"""What `ablate ci run` does between starting a benchmark and submitting its result: run the command
with its output streamed to the job's log, parse that output with the workers' log parsers and
summarise it as the command runner does, and build one result of the submission contract
(docs/results-contract.md) with the job's CI context in its provenance."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

from pydantic import BaseModel, ValidationError

from ablate.backend.cli.ci_context import ci_provenance
from ablate.backend.domain.metrics import get_metric
from ablate.backend.errors import AblateError
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.schemas.common import UNION_TAGS
from ablate.workers.parsers import LogParser
from ablate.workers.parsers.summary import context_for, no_metrics_reason, summarize
from ablate.workers.runners.process import describe_returncode

TAIL_LINES = 50  # of the output, kept as the result's log tail
ERROR_LINES = 20  # of stderr, in a failed run's error
MAX_PROVENANCE = 2_000  # characters of one provenance value (the contract's bound)

DEFINITIONS: dict[str, type[BaseModel]] = {
    "cluster": ClusterDef,
    "workload": WorkloadDef,
    "variant": VariantDef,
}


@dataclass
class Cell:
    """The release and the three catalog entries a result belongs to: each a name, or its definition."""

    release: str
    entries: dict[str, str | dict[str, Any]]  # kind -> name or definition (fields the user gave)
    known: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> the server's definition

    def definition(self, kind: str) -> dict[str, Any]:
        """The entry's full definition when known (defaults filled), else {}: the parser's context."""
        value = self.entries[kind]
        if isinstance(value, dict):
            return dict(DEFINITIONS[kind].model_validate(value).model_dump())
        return self.known.get(kind, {})


def load_definitions(path: Path, data: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Cluster, workload and variant definitions of a ``--define`` file in the plan's syntax
    (``cluster:`` or ``clusters:``, ``workloads:``, ``variants:``; a plan's other keys are ignored,
    names without a definition too), checked with the server's schemas: kind -> name -> definition."""
    if not isinstance(data, dict):
        raise AblateError(f"{path}: expected a mapping with cluster(s), workloads and variants")
    found: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in DEFINITIONS}
    sections = {
        "cluster": [data.get("cluster")] if data.get("cluster") is not None else [],
        "clusters": data.get("clusters") or [],
        "workloads": data.get("workloads") or [],
        "variants": data.get("variants") or [],
    }
    for section, items in sections.items():
        kind = section.rstrip("s")
        if not isinstance(items, list):
            raise AblateError(f"{path}: {section}: expected a list of definitions")
        for i, item in enumerate(items):
            if isinstance(item, str):
                continue
            where = f"{section}[{i}]" if section != "cluster" else section
            try:
                model = DEFINITIONS[kind].model_validate(item)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(p) for p in first["loc"] if p not in UNION_TAGS)
                raise AblateError(f"{path}: {where}{'.' + loc if loc else ''}: {first['msg']}") from None
            name = str(getattr(model, "name"))  # noqa: B009 - every definition has one
            if name in found[kind]:
                raise AblateError(f"{path}: {where}: {kind} {name!r} is defined twice")
            found[kind][name] = model.model_dump(mode="json", exclude_unset=True)
    return found


@dataclass
class CommandOutcome:
    returncode: int
    started_at: datetime
    finished_at: datetime
    elapsed_s: float
    output_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _forward_sigterm(proc: subprocess.Popen[str]) -> Iterator[None]:
    """A CI cancelling the job signals us; the benchmark gets the same signal (a terminal's Ctrl-C
    reaches both already: they share the foreground process group)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_command(
    argv: Sequence[str], parser: LogParser, *, stdout: IO[str], stderr: IO[str]
) -> CommandOutcome:
    """Run ``argv``, relaying its stdout and stderr line by line to ours (the job's log) and feeding
    both to ``parser`` (benchmarks print metrics on either). Raises AblateError when it cannot start."""
    started_at, t0 = datetime.now(UTC), time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
        )
    except OSError as exc:
        raise AblateError(f"cannot start command {argv[0]!r}: {exc.strerror or exc}") from None
    lines: queue.Queue[tuple[bool, str | None]] = queue.Queue()

    def pump(stream: IO[str], is_err: bool) -> None:
        for line in stream:
            lines.put((is_err, line))
        lines.put((is_err, None))

    assert proc.stdout is not None and proc.stderr is not None
    for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
        threading.Thread(target=pump, args=(stream, is_err), daemon=True).start()
    output: deque[str] = deque(maxlen=TAIL_LINES)
    errors: deque[str] = deque(maxlen=ERROR_LINES)
    open_streams = 2
    with _forward_sigterm(proc):
        try:
            while open_streams:
                is_err, line = lines.get()
                if line is None:
                    open_streams -= 1
                    continue
                sink = stderr if is_err else stdout
                sink.write(line)
                sink.flush()
                text = line.rstrip("\r\n")
                output.append(text)
                if is_err:
                    errors.append(text)
                parser.feed(text)
            code = proc.wait()
        except BaseException:
            # Interrupted (Ctrl-C): the benchmark goes too, never left running behind the job.
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
    return CommandOutcome(
        code, started_at, datetime.now(UTC), time.monotonic() - t0, list(output), list(errors)
    )


def read_log(path: Path, parser: LogParser) -> list[str]:
    """Feed an existing log to ``parser``; returns its last lines (the log tail)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                text = line.rstrip("\r\n")
                tail.append(text)
                parser.feed(text)
    except OSError as exc:
        raise AblateError(f"cannot read {path}: {exc.strerror}") from None
    return list(tail)


def exit_code_of(returncode: int) -> int:
    """A child's return code as a shell reports it (a signal N is 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else "..." + value[-(limit - 3) :]


@dataclass
class Built:
    """The result to submit, and what it says about the job: succeeded, or why not."""

    result: dict[str, Any]
    succeeded: bool
    reason: str | None


@dataclass(frozen=True)
class Capture:
    """What the job ran and what came of it: the ``command`` with its ``outcome``, or the existing
    ``log_file`` read instead (no command, no outcome); ``log_tail`` is the output's last lines."""

    command: Sequence[str] | None
    outcome: CommandOutcome | None
    log_tail: Sequence[str]
    log_file: Path | None


def build_result(
    cell: Cell,
    *,
    repeat: int | None,
    parser_name: str,
    parser: LogParser,
    key: str,
    capture: Capture,
) -> Built:
    """One result of the contract: metrics summarised as the command runner summarises them
    (warm-up steps dropped, medians, rates derived from the workload), or a failed result naming why."""
    workload, cluster = cell.definition("workload"), cell.definition("cluster")
    provenance: dict[str, Any] = {
        "runner": "ci",
        "host": socket.gethostname(),
        "parser": parser_name,
        **ci_provenance(),
    }
    if capture.command:
        provenance["command"] = _clip(shlex.join(capture.command), MAX_PROVENANCE)
    if capture.log_file is not None:
        provenance["log_file"] = _clip(str(capture.log_file), MAX_PROVENANCE)
    parsed = parser.finish()
    warmup = int(workload.get("warmup_steps") or 0)
    provenance["step_records"] = str(len(parsed.steps))
    provenance["malformed_lines"] = str(parsed.malformed_lines)
    if parsed.malformed_examples:
        provenance["first_malformed_line"] = _clip(parsed.malformed_examples[0], MAX_PROVENANCE)
    if warmup:
        provenance["warmup_steps"] = str(warmup)
    result: dict[str, Any] = {"release": cell.release, **cell.entries}
    if repeat is not None:
        result["repeat"] = repeat
    metrics: dict[str, tuple[float, str]] = {}
    series: dict[str, tuple[list[int], list[float]]] = {}
    reason: str | None = None
    kind = "benchmark"
    outcome = capture.outcome
    if outcome is not None and outcome.returncode != 0:
        errors = "\n".join(outcome.stderr_tail).strip()
        reason = f"command {describe_returncode(outcome.returncode)}" + (f": {errors}" if errors else "")
        kind = "infrastructure" if outcome.returncode < 0 else "benchmark"
    else:
        metrics, series = summarize(parsed, context_for(workload, cluster, parser))
        if not metrics:
            what = "command" if outcome is not None else f"log {capture.log_file}"
            reason = f"{what} printed no metrics: {no_metrics_reason(parser_name, parsed, warmup)}"
        elif outcome is not None:
            metrics.setdefault("elapsed_s", (outcome.elapsed_s, "s"))
    if reason is None:
        result["status"] = "succeeded"
        result["metrics"] = {
            name: value if get_metric(name) else {"value": value, "unit": unit}
            for name, (value, unit) in metrics.items()
        }
        if series:
            result["series"] = {name: {"steps": s, "values": v} for name, (s, v) in series.items()}
    else:
        result |= {"status": "failed", "error": _clip(reason, 10_000), "failure_kind": kind}
    result["provenance"] = provenance
    if capture.log_tail:
        result["log_tail"] = _clip("\n".join(capture.log_tail), 65_536)
    if outcome is not None:
        result["started_at"] = _stamp(outcome.started_at)
        result["finished_at"] = _stamp(outcome.finished_at)
    result["idempotency_key"] = key
    return Built(result, reason is None, reason)


def write_result(path: Path, result: Mapping[str, Any]) -> None:
    """The batch file, written whole (a rename): a job killed mid-write leaves the old file or none."""
    body = json.dumps({"results": [result]}, indent=2, ensure_ascii=False) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise AblateError(f"cannot write {path}: {exc.strerror}") from None
