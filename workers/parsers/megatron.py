"""Megatron-LM training logs and their descendants (Megatron-DeepSpeed, GPT-NeoX):
``iteration 100/ 1000 | elapsed time per iteration (ms): ... | ...``.

Fields read from anywhere on the line (GPT-NeoX puts ``samples/sec: ...`` before the iteration):

- ``elapsed time per iteration (ms)`` (required) -> step time;
- ``global batch size`` -> samples/s and, with the seq length, tokens/s = batch * seq_len / step time;
- ``samples per second`` / ``samples/sec`` -> samples/s as measured (beats the derived one);
- ``tokens per gpu per second (tgs)`` -> tokens/s per device;
- ``throughput per GPU (TFLOP/s/GPU)``, ``TFLOPs: 69.8`` and ``approx flops per GPU: 112.9TFLOPS`` (any of
  K/M/G/T/P/E, ``FLOPS``/``FLOPs``/``flops``; the unit is required) -> TFLOPS per device;
- ``lm loss`` / ``lm_loss`` -> loss (a ``nan`` loss is left out, the step's timing kept);
- ``actual seqlen`` (Megatron-DeepSpeed's curriculum) -> that step's seq length for tokens/s.

A field above with a value that is not a number makes the line malformed. The seq length comes from
the workload or the log's argument dump (``seq_length ..... 4096``). Validation lines (``validation
loss at iteration 100 | lm loss value: ...``) are not training steps and are ignored. Memory report
lines (``memory (MB) | allocated: ... | max allocated: ... | max reserved: ...``) give the peaks.
"""

from __future__ import annotations

import math
import re

from ablate.workers.parsers.base import NUMBER, LogParser, Malformed, StepRecord, number, scaled

_ITER = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|")
# A training-iteration line: "iteration N/ ..." (validation lines say "at iteration N |").
_ITER_LIKE = re.compile(r"\biteration\s+\d+\s*/")
_FIELD = re.compile(r"^\s*(?P<key>[^:|]+?)\s*:\s*(?P<value>\S(?:.*\S)?)\s*$")
_FLOPS = re.compile(rf"(?P<v>{NUMBER})\s*(?P<u>[kKMGTPE]?)flops", re.IGNORECASE)
_ELAPSED = "elapsed time per iteration (ms)"
# field -> metric, for plain positive numbers
_RATES = {
    "throughput per gpu (tflop/s/gpu)": "tflops_per_device",
    "tflops": "tflops_per_device",
    "samples per second": "throughput_samples_per_s",
    "samples/sec": "throughput_samples_per_s",
    "tokens per gpu per second (tgs)": "throughput_tokens_per_s_per_device",
}
_LOSS = ("lm loss", "lm_loss")


def _fields(parts: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in parts:
        fm = _FIELD.match(part)
        if fm:
            fields[fm["key"].lower()] = fm["value"]
    return fields


class MegatronParser(LogParser):
    name = "megatron"

    def _feed(self, line: str) -> list[StepRecord]:
        if "memory (MB)" in line and "|" in line:
            return self._memory(line)
        if "iteration" not in line or "|" not in line:
            self._read_context(line)
            return []
        if not _ITER_LIKE.search(line):
            return []  # validation results, or chatter that mentions iterations
        m = _ITER.search(line)
        if not m:
            return self.bad("an iteration line without 'iteration N/ TOTAL |'")
        fields = _fields(line[: m.start()].split("|") + line[m.end() :].split("|"))
        if _ELAPSED not in fields:
            return self.bad(f"an iteration line without '{_ELAPSED}'")
        step_time = number(fields[_ELAPSED], _ELAPSED, positive=True) / 1000.0
        values = {"step_time_s": step_time}
        gb = self.global_batch
        if "global batch size" in fields:
            gb = int(number(fields["global batch size"], "global batch size", positive=True))
        if gb:
            values["throughput_samples_per_s"] = gb / step_time
        for key, metric in _RATES.items():
            if key in fields:
                values[metric] = number(fields[key], key, positive=True)  # measured beats derived
        if "approx flops per gpu" in fields:
            values["tflops_per_device"] = self._tflops(fields["approx flops per gpu"])
        seq = self.seq_len
        if "actual seqlen" in fields:
            seq = int(number(fields["actual seqlen"], "actual seqlen", positive=True))
        if seq and "throughput_samples_per_s" in values:
            values["throughput_tokens_per_s"] = values["throughput_samples_per_s"] * seq
        for key in _LOSS:
            # A nan/inf loss is a diverged step, not a misprint: its timing stays, the loss is left out.
            if key in fields and fields[key].lower().lstrip("+-") not in ("nan", "inf"):
                values["loss"] = number(fields[key], key)
        self.total_steps = int(m["total"])
        return self._record(int(m["step"]), values)

    @staticmethod
    def _tflops(text: str) -> float:
        m = _FLOPS.fullmatch(text)
        if not m:
            raise Malformed(f"approx flops per GPU {text!r} is not a number with a FLOPS unit")
        value = scaled(m["v"], m["u"].upper()) / 1e12
        if not math.isfinite(value) or value <= 0:
            raise Malformed(f"approx flops per GPU {text!r} is not a positive number")
        return value

    def _memory(self, line: str) -> list[StepRecord]:
        fields = _fields(line.split("|")[1:])
        if "max allocated" not in fields:
            return self.bad("a memory report without 'max allocated'")
        peaks = {}
        for key, name in (("max allocated", "peak_memory_gib"), ("max reserved", "peak_memory_reserved_gib")):
            if key in fields:
                mib = number(fields[key], f"{key} (MB)")
                if mib < 0:
                    raise Malformed(f"{key} (MB) {fields[key]!r} is negative")
                peaks[name] = mib / 1024
        for name, gib in peaks.items():  # only once the whole line has been read
            if gib > 0:
                self.summary[name] = max(self.summary.get(name, 0.0), gib)
        return []
