"""MLPerf logging: ``:::MLLOG {"key": ..., "value": ..., "time_ms": ..., "metadata": {...}}``.

Understood keys: run_start/run_stop (-> elapsed_s), global_batch_size and the sequence length
(``max_sequence_length``, ``seq_length``, ``sequence_length``, ``max_seq_length``: context for token
rates; the log's value wins over the workload's), tracked_stats / throughput (per-step throughput,
``options["throughput_unit"]`` "samples/s" by default or "tokens/s"), train_loss. With samples/s and a
known sequence length every step also gets tokens/s = samples/s * sequence length, also the steps
logged before the length was. The step is metadata "step", else samples_count divided by the global
batch, else epoch_num.

A value read must be a finite number (a positive one for throughput and the context keys; JSON's
``NaN``, ``true`` or a string is malformed). tracked_stats with no throughput or loss in it (e.g.
``{"train_epoch_timing": ...}``) are other statistics, not malformed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ablate.workers.parsers.base import LogParser, Malformed, StepRecord

PREFIX = ":::MLLOG"
_SEQ_KEYS = ("max_sequence_length", "seq_length", "sequence_length", "max_seq_length")


def _num(value: Any, what: str, *, positive: bool = False) -> float:
    """A JSON number (not a bool, not NaN/Infinity), else Malformed naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Malformed(f"{what} {value!r} is not a finite number")
    if positive and value <= 0:
        raise Malformed(f"{what} {value!r} is not a positive number")
    return float(value)


def _count(value: Any, what: str) -> int:
    n = _num(value, what, positive=True)
    if n != int(n):
        raise Malformed(f"{what} {value!r} is not a whole number")
    return int(n)


class MllogParser(LogParser):
    name = "mllog"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._start_ms: float | None = None
        self._gb = self.global_batch
        self._seq = self.seq_len
        self._max_samples = 0.0
        self._last_ms: float | None = None
        self._unit = str(self.options.get("throughput_unit", "samples/s"))

    def _step(self, meta: dict[str, Any]) -> int | None:
        if meta.get("step") is not None:
            return int(_num(meta["step"], "metadata step"))
        if meta.get("samples_count") is not None:
            samples = _num(meta["samples_count"], "metadata samples_count")
            self._max_samples = max(self._max_samples, samples)
            return int(samples // self._gb) if self._gb else int(samples)
        if meta.get("epoch_num") is not None:
            return int(_num(meta["epoch_num"], "metadata epoch_num"))
        return None

    def _throughput(self, value: float) -> dict[str, float]:
        if self._unit.startswith("token"):
            return {"throughput_tokens_per_s": value}
        if self._seq:
            return {"throughput_samples_per_s": value, "throughput_tokens_per_s": value * self._seq}
        return {"throughput_samples_per_s": value}

    def _finish(self) -> None:
        if self._seq and not self._unit.startswith("token"):
            for values in self._steps.values():
                if "throughput_samples_per_s" in values:
                    values.setdefault(
                        "throughput_tokens_per_s", values["throughput_samples_per_s"] * self._seq
                    )

    def _feed(self, line: str) -> list[StepRecord]:
        at = line.find(PREFIX)
        if at < 0:
            return []
        try:
            ev = json.loads(line[at + len(PREFIX) :])
            key, value = ev["key"], ev.get("value")
            meta = ev.get("metadata") or {}
        except json.JSONDecodeError as exc:
            return self.bad(f"truncated or invalid JSON ({exc.msg})")
        except (KeyError, TypeError, AttributeError):
            return self.bad("an event that is not an object with a key")
        if not isinstance(meta, dict):
            return self.bad("metadata that is not an object")
        time_ms = _num(ev["time_ms"], "time_ms") if "time_ms" in ev else None
        if time_ms is not None:
            self._last_ms = time_ms
        if key == "run_start":
            self._start_ms = time_ms
        elif key == "run_stop":
            if self._start_ms is not None and time_ms is not None:
                if time_ms <= self._start_ms:
                    return self.bad("run_stop at or before run_start")
                self.summary["elapsed_s"] = (time_ms - self._start_ms) / 1000.0
                if self._max_samples:
                    self.summary["throughput_samples_per_s"] = self._max_samples / self.summary["elapsed_s"]
        elif key == "global_batch_size":
            self._gb = _count(value, key)
            self.options["global_batch"] = self._gb
        elif key in _SEQ_KEYS:
            self._seq = _count(value, key)
            self.options["seq_len"] = self._seq
        elif key in ("tracked_stats", "throughput"):
            return self._tracked(key, value, meta)
        elif key in ("train_loss", "loss"):
            step = self._step(meta)
            if step is None:
                return self.bad(f"{key} without a step, samples_count or epoch_num in its metadata")
            return self._record(step, {"loss": _num(value, key)})
        elif key == "samples_count" or "samples_count" in meta:
            self._step(meta)
        return []

    def _tracked(self, key: str, value: Any, meta: dict[str, Any]) -> list[StepRecord]:
        if isinstance(value, dict):
            stats = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            stats = {"throughput": value}
        else:
            return self.bad(f"{key} value {value!r} is neither a number nor an object of statistics")
        if not any(k in stats for k in ("throughput", "loss", "train_step_time")):
            return []  # other statistics (e.g. train_epoch_timing)
        step = self._step(meta)
        if step is None:
            return self.bad(f"{key} without a step, samples_count or epoch_num in its metadata")
        values: dict[str, float] = {}
        if "throughput" in stats:
            values.update(self._throughput(_num(stats["throughput"], "throughput", positive=True)))
        if "train_step_time" in stats:
            values["step_time_s"] = _num(stats["train_step_time"], "train_step_time", positive=True)
        if "loss" in stats:
            values["loss"] = _num(stats["loss"], "loss")
        return self._record(step, values)
