"""JSON lines: ``{"step": 10, "step_time_s": 0.5, "loss": 2.1, ...}``, one object per line.

Non-JSON lines are log noise. A line that starts like a JSON object but does not decode, or an object
without an integer ``step`` (unless it is marked ``"event": "summary"``), is malformed. Source keys map
to canonical names through built-in aliases and ``options["metrics"]`` ({key: name} or
{key: {"name", "unit", "scale"}}).
"""

from __future__ import annotations

import json
from typing import Any

from ablate.backend.domain.metrics import METRIC_UNITS
from ablate.workers.parsers.base import LogParser, StepRecord

ALIASES = {
    "tokens_per_s": "throughput_tokens_per_s",
    "tokens_per_sec": "throughput_tokens_per_s",
    "samples_per_s": "throughput_samples_per_s",
    "samples_per_sec": "throughput_samples_per_s",
    "step_time": "step_time_s",
    "iter_time_s": "step_time_s",
    "tflops": "tflops_per_device",
    "peak_memory": "peak_memory_gib",
    "elapsed": "elapsed_s",
}


class JsonlParser(LogParser):
    name = "jsonl"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.step_key = str(self.options.get("step_key", "step"))
        self.mapping: dict[str, tuple[str, float]] = {k: (k, 1.0) for k in METRIC_UNITS}
        self.mapping.update({k: (v, 1.0) for k, v in ALIASES.items()})
        for key, spec in (self.options.get("metrics") or {}).items():
            if isinstance(spec, str):
                self.mapping[key] = (spec, 1.0)
            else:
                self.mapping[key] = (str(spec["name"]), float(spec.get("scale", 1.0)))
                if spec.get("unit"):
                    self.units[str(spec["name"])] = str(spec["unit"])

    def _feed(self, line: str) -> list[StepRecord]:
        text = line.strip()
        if not text.startswith("{"):
            return []
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return self.bad()
        if not isinstance(obj, dict):
            return self.bad()
        values: dict[str, float] = {}
        for key, raw in obj.items():
            if key in self.mapping and isinstance(raw, int | float) and not isinstance(raw, bool):
                name, scale = self.mapping[key]
                values[name] = float(raw) * scale
            elif key in self.mapping and raw is not None:
                return self.bad()  # a known metric that is not a number
        if obj.get("event") in ("summary", "final") or obj.get("summary") is True:
            self.summary.update(values)
            return []
        step = obj.get(self.step_key)
        if isinstance(step, bool) or not isinstance(step, int | float) or not values:
            return self.bad()
        if "total_steps" in obj and isinstance(obj["total_steps"], int):
            self.total_steps = obj["total_steps"]
        return self._record(int(step), values)
