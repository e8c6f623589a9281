"""Configurable regular-expression parser, for tools whose format is not built in (e.g. ljperf).

options::

    {"patterns": [
        {"regex": "step (?P<step>\\d+)/(?P<total>\\d+) .* tokens/s: (?P<tps>[\\d.]+)",
         "metrics": {"tps": "throughput_tokens_per_s",
                     "mem": {"name": "peak_memory_gib", "scale": 0.001, "unit": "GiB"}}},
        {"regex": "total time: (?P<t>[\\d.]+)s", "metrics": {"t": "elapsed_s"}}],
     "step_group": "step", "total_group": "total",
     "malformed": "^\\[ljperf\\] step"}

A match with a step group makes a step record, one without makes summary values. A captured value
that is not a number, or a line matching ``malformed`` but no pattern, counts as malformed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ablate.workers.parsers.base import LogParser, StepRecord


@dataclass(frozen=True)
class _Metric:
    name: str
    scale: float
    unit: str | None


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    metrics: dict[str, _Metric]


class RegexParser(LogParser):
    name = "regex"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        raw = self.options.get("patterns")
        if not raw:
            raise ValueError("regex parser needs options['patterns']: a list of {regex, metrics}")
        self.step_group = str(self.options.get("step_group", "step"))
        self.total_group = str(self.options.get("total_group", "total"))
        mal = self.options.get("malformed")
        self.malformed = re.compile(mal) if mal else None
        self.patterns: list[_Pattern] = []
        for p in raw:
            metrics = {}
            for group, spec in (p.get("metrics") or {}).items():
                if isinstance(spec, str):
                    spec = {"name": spec}
                metric = _Metric(str(spec["name"]), float(spec.get("scale", 1.0)), spec.get("unit"))
                metrics[group] = metric
                if metric.unit:
                    self.units[metric.name] = metric.unit
            self.patterns.append(_Pattern(re.compile(p["regex"]), metrics))

    def _feed(self, line: str) -> list[StepRecord]:
        out: list[StepRecord] = []
        matched = False
        for pat in self.patterns:
            m = pat.regex.search(line)
            if not m:
                continue
            matched = True
            groups = m.groupdict()
            try:
                values = {
                    met.name: float(groups[g]) * met.scale
                    for g, met in pat.metrics.items()
                    if groups.get(g) is not None
                }
                step = int(groups[self.step_group]) if groups.get(self.step_group) is not None else None
                if groups.get(self.total_group) is not None:
                    self.total_steps = int(groups[self.total_group])
            except ValueError:
                return self.bad()
            if step is None:
                self.summary.update(values)
            else:
                out.extend(self._record(step, values))
        if not matched and self.malformed is not None and self.malformed.search(line):
            return self.bad()
        return out
