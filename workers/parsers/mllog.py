"""MLPerf logging: ``:::MLLOG {"key": ..., "value": ..., "time_ms": ..., "metadata": {...}}``.

Understood keys: run_start/run_stop (-> elapsed_s), global_batch_size and max_sequence_length (context
for token rates), tracked_stats / throughput (per-step throughput, ``options["throughput_unit"]``
"samples/s" by default or "tokens/s"), train_loss. The step is metadata "step", else samples_count
divided by the global batch, else epoch_num.
"""

from __future__ import annotations

import json
from typing import Any

from ablate.workers.parsers.base import LogParser, StepRecord

PREFIX = ":::MLLOG"


class MllogParser(LogParser):
    name = "mllog"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self._start_ms: float | None = None
        self._gb = self.global_batch
        self._seq = self.seq_len
        self._max_samples = 0.0
        self._last_ms: float | None = None
        self._unit = str(self.options.get("throughput_unit", "samples/s"))

    def _step(self, meta: dict[str, Any]) -> int | None:
        if isinstance(meta.get("step"), int | float):
            return int(meta["step"])
        if isinstance(meta.get("samples_count"), int | float):
            self._max_samples = max(self._max_samples, float(meta["samples_count"]))
            return int(meta["samples_count"] // self._gb) if self._gb else int(meta["samples_count"])
        if isinstance(meta.get("epoch_num"), int | float):
            return int(meta["epoch_num"])
        return None

    def _throughput(self, value: float) -> dict[str, float]:
        if self._unit.startswith("token"):
            return {"throughput_tokens_per_s": value}
        return {"throughput_samples_per_s": value}

    def _feed(self, line: str) -> list[StepRecord]:
        at = line.find(PREFIX)
        if at < 0:
            return []
        try:
            ev = json.loads(line[at + len(PREFIX) :])
            key, value = ev["key"], ev.get("value")
            meta = ev.get("metadata") or {}
            time_ms = float(ev["time_ms"]) if "time_ms" in ev else None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            return self.bad()
        if time_ms is not None:
            self._last_ms = time_ms
        if key == "run_start":
            self._start_ms = time_ms
        elif key == "run_stop":
            if self._start_ms is not None and time_ms is not None:
                self.summary["elapsed_s"] = (time_ms - self._start_ms) / 1000.0
                if self._max_samples:
                    self.summary["throughput_samples_per_s"] = self._max_samples / self.summary["elapsed_s"]
        elif key == "global_batch_size":
            self._gb = int(value)
            self.options["global_batch"] = self._gb
        elif key in ("max_sequence_length", "seq_length", "sequence_length"):
            self._seq = int(value)
            self.options["seq_len"] = self._seq
        elif key in ("tracked_stats", "throughput"):
            stats = value if isinstance(value, dict) else {"throughput": value}
            step = self._step(meta)
            if step is None or not isinstance(stats.get("throughput"), int | float):
                return self.bad()
            values = self._throughput(float(stats["throughput"]))
            if isinstance(stats.get("train_step_time"), int | float):
                values["step_time_s"] = float(stats["train_step_time"])
            if isinstance(stats.get("loss"), int | float):
                values["loss"] = float(stats["loss"])
            return self._record(step, values)
        elif key in ("train_loss", "loss"):
            step = self._step(meta)
            if step is None or not isinstance(value, int | float):
                return self.bad()
            return self._record(step, {"loss": float(value)})
        elif key == "samples_count" or "samples_count" in meta:
            self._step(meta)
        return []
