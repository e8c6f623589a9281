"""Megatron-LM training logs: ``iteration 100/ 1000 | elapsed time per iteration (ms): ... | ...``.

tokens/s = global batch size * seq_len / step time; the TFLOP/s/GPU Megatron prints is taken as is.
Memory report lines (``memory (MB) | allocated: ... | max allocated: ... | max reserved: ...``) give
the peaks.
"""

from __future__ import annotations

import re

from ablate.workers.parsers.base import LogParser, StepRecord

_ITER = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|")
_FIELD = re.compile(r"^\s*(?P<key>[^:|]+?)\s*:\s*(?P<value>\S+)\s*$")


class MegatronParser(LogParser):
    name = "megatron"

    def _feed(self, line: str) -> list[StepRecord]:
        if "memory (MB)" in line and "|" in line:
            return self._memory(line)
        if "iteration" not in line or "|" not in line:
            return []
        m = _ITER.search(line)
        if not m:
            return self.bad()
        fields: dict[str, float] = {}
        for part in line[m.end() :].split("|"):
            fm = _FIELD.match(part)
            if fm:
                try:
                    fields[fm["key"].lower()] = float(fm["value"])
                except ValueError:
                    continue  # e.g. "learning rate: N/A"
        ms = fields.get("elapsed time per iteration (ms)")
        if ms is None or ms <= 0:
            return self.bad()
        self.total_steps = int(m["total"])
        step_time = ms / 1000.0
        values = {"step_time_s": step_time}
        gb = fields.get("global batch size") or self.global_batch
        if gb:
            values["throughput_samples_per_s"] = gb / step_time
            if self.seq_len:
                values["throughput_tokens_per_s"] = gb * self.seq_len / step_time
        if "throughput per gpu (tflop/s/gpu)" in fields:
            values["tflops_per_device"] = fields["throughput per gpu (tflop/s/gpu)"]
        if "lm loss" in fields:
            values["loss"] = fields["lm loss"]
        return self._record(int(m["step"]), values)

    def _memory(self, line: str) -> list[StepRecord]:
        fields = {}
        for part in line.split("|")[1:]:
            fm = _FIELD.match(part)
            if fm:
                try:
                    fields[fm["key"].lower()] = float(fm["value"])
                except ValueError:
                    return self.bad()
        if "max allocated" not in fields:
            return self.bad()
        for key, name in (("max allocated", "peak_memory_gib"), ("max reserved", "peak_memory_reserved_gib")):
            if key in fields:
                self.summary[name] = max(self.summary.get(name, 0.0), fields[key] / 1024)
        return []
