"""Incremental log parsers: lines in, step records and summary metrics out.

A parser never raises on input: a line meant for it that it cannot read is skipped and counted in
``malformed_lines``, and the first few are kept with the reason (``malformed_examples``), so a run that
found nothing says why. A value a parser uses must be a finite number (positive for rates, times and
memory) with a unit it knows; otherwise the line is malformed rather than read as a wrong number. Step
records carry canonical metric names (see ``METRIC_UNITS``); deriving the
summary (warm-up dropped, medians) is shared by every parser in :mod:`ablate.workers.parsers.summary`.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Size suffixes used by DeepSpeed/Megatron-style logs.
_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
# A plain decimal number; float() alone would also take "nan", "inf", "1_0" and surrounding spaces.
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(NUMBER)
# Workload context stated in argument/config dumps: Megatron's "  seq_length ........ 4096",
# DeepSpeed's "[config.py:1000:print]   train_batch_size ...... 64".
_DOTTED = re.compile(r"(?:^|\s)(?P<key>\w+)\s+\.{3,}\s*(?P<value>\S+)\s*$")
_CONTEXT_KEYS = {
    "seq_length": "seq_len",
    "train_batch_size": "global_batch",
    "global_batch_size": "global_batch",
}
# Malformed lines kept with their reason (the rest are only counted).
_EXAMPLES = 5


class Malformed(ValueError):
    """A line meant for the parser that it cannot read; the message says why."""


@dataclass
class StepRecord:
    step: int
    values: dict[str, float]


@dataclass
class ParseResult:
    steps: list[StepRecord]  # sorted by step, one record per step
    summary: dict[str, float] = field(default_factory=dict)  # values the log states for the whole run
    units: dict[str, str] = field(default_factory=dict)  # units of non-canonical metrics
    malformed_lines: int = 0
    total_steps: int | None = None  # when the log says (e.g. Megatron "iteration 10/ 100")
    malformed_examples: list[str] = field(default_factory=list)  # "line N: reason: text", the first few


class LogParser(ABC):
    """Feed lines with :meth:`feed`; call :meth:`finish` once at the end."""

    name: str = ""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})
        self._steps: dict[int, dict[str, float]] = {}
        self.summary: dict[str, float] = {}
        self.units: dict[str, str] = {}
        self.malformed_lines = 0
        self.malformed_examples: list[str] = []
        self.total_steps: int | None = None
        self._line_no = 0
        self._line = ""

    @property
    def seq_len(self) -> int | None:
        v = self.options.get("seq_len")
        return int(v) if v else None

    @property
    def global_batch(self) -> int | None:
        v = self.options.get("global_batch")
        return int(v) if v else None

    def feed(self, line: str) -> list[StepRecord]:
        """Parse one line; returns the step records it created or updated (for live progress)."""
        self._line_no += 1
        self._line = line.rstrip("\r\n")
        try:
            return self._feed(self._line)
        except Malformed as exc:
            return self.bad(str(exc))
        except Exception as exc:
            # A parser bug on an odd line must not take the run down; count it instead.
            return self.bad(f"unreadable ({type(exc).__name__}: {exc})")

    def feed_lines(self, lines: Iterable[str]) -> list[StepRecord]:
        out: list[StepRecord] = []
        for line in lines:
            out.extend(self.feed(line))
        return out

    @abstractmethod
    def _feed(self, line: str) -> list[StepRecord]: ...

    def _record(self, step: int, values: Mapping[str, float]) -> list[StepRecord]:
        """Merge values into a step (a later line about the same step wins); finite numbers only."""
        clean = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        if not clean:
            return []
        merged = self._steps.setdefault(int(step), {})
        merged.update(clean)
        return [StepRecord(int(step), dict(merged))]

    def bad(self, reason: str = "not in the expected format") -> list[StepRecord]:
        self.malformed_lines += 1
        if len(self.malformed_examples) < _EXAMPLES:
            text = self._line.strip()
            text = text if len(text) <= 160 else text[:157] + "..."
            self.malformed_examples.append(f"line {self._line_no}: {reason}: {text}")
        return []

    def _read_context(self, text: str) -> bool:
        """Take seq_len/global_batch from an argument or config dump line; the log's value wins over
        the workload's (it is what ran). True when the line was one of these."""
        m = _DOTTED.search(text)
        if not m or m["key"] not in _CONTEXT_KEYS:
            return False
        if m["value"].isdigit() and int(m["value"]) > 0:  # "None" in a dump: not stated
            self.options[_CONTEXT_KEYS[m["key"]]] = int(m["value"])
        return True

    def _finish(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Hook run before the result is built (e.g. to fill values the log's context now allows)."""

    def finish(self) -> ParseResult:
        self._finish()
        steps = [StepRecord(s, dict(v)) for s, v in sorted(self._steps.items())]
        return ParseResult(
            steps,
            dict(self.summary),
            dict(self.units),
            self.malformed_lines,
            self.total_steps,
            list(self.malformed_examples),
        )


def number(text: str, what: str, *, positive: bool = False) -> float:
    """``text`` as a finite number (> 0 with ``positive``), else Malformed naming ``what``."""
    if not _NUMBER.fullmatch(text.strip()):
        raise Malformed(f"{what} {text.strip()!r} is not a number")
    value = float(text)
    if not math.isfinite(value):
        raise Malformed(f"{what} {text.strip()!r} is not a finite number")
    if positive and value <= 0:
        raise Malformed(f"{what} {text.strip()!r} is not a positive number")
    return value


def scaled(value: str, suffix: str = "") -> float:
    """'12.3', 'G' -> 1.23e10."""
    return float(value) * _SCALE[suffix]


def to_gib(value: float, unit: str) -> float:
    """Memory in GB/GiB/MB/MiB/bytes -> GiB. Frameworks print "GB" for 2**30 bytes, so GB == GiB here."""
    u = unit.strip().lower()
    if u in ("gb", "gib", "g"):
        return value
    if u in ("mb", "mib", "m"):
        return value / 1024
    if u in ("tb", "tib", "t"):
        return value * 1024
    if u in ("kb", "kib", "k"):
        return value / 1024**2
    if u in ("b", "bytes", ""):
        return value / 1024**3
    raise Malformed(f"unknown memory unit {unit!r}")
