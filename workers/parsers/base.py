"""Incremental log parsers: lines in, step records and summary metrics out.

A parser never raises on input: a line meant for it that it cannot read is skipped and counted in
``malformed_lines``. Step records carry canonical metric names (see ``METRIC_UNITS``); deriving the
summary (warm-up dropped, medians) is shared by every parser in :mod:`ablate.workers.parsers.summary`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Size suffixes used by DeepSpeed/Megatron-style logs.
_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


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


class LogParser(ABC):
    """Feed lines with :meth:`feed`; call :meth:`finish` once at the end."""

    name: str = ""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})
        self._steps: dict[int, dict[str, float]] = {}
        self.summary: dict[str, float] = {}
        self.units: dict[str, str] = {}
        self.malformed_lines = 0
        self.total_steps: int | None = None

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
        try:
            return self._feed(line.rstrip("\r\n"))
        except Exception:
            # A parser bug on an odd line must not take the run down; count it instead.
            self.malformed_lines += 1
            return []

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

    def bad(self) -> list[StepRecord]:
        self.malformed_lines += 1
        return []

    def finish(self) -> ParseResult:
        steps = [StepRecord(s, dict(v)) for s, v in sorted(self._steps.items())]
        return ParseResult(
            steps, dict(self.summary), dict(self.units), self.malformed_lines, self.total_steps
        )


def scaled(number: str, suffix: str = "") -> float:
    """'12.3', 'G' -> 1.23e10."""
    return float(number) * _SCALE[suffix]


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
    raise ValueError(f"unknown memory unit {unit!r}")
