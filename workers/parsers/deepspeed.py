"""DeepSpeed logs: the engine's throughput timer, ``steps: N loss: ... samples/sec: ...`` lines of
Megatron-DeepSpeed/DeepSpeedExamples, and the flops profiler's summary.

The throughput timer (``[timer.py:NNN:stop]``, any prefix such as ``[Rank 0]`` or a launcher's
``0:``) in the forms DeepSpeed has printed:

- before 0.7: ``0/40, SamplesPerSec=83.4, MemAllocated=0.26GB, MaxMemAllocated=9.02GB``
- the 0.7 era: ``0/17, RunningAvgSamplesPerSec=158.3, CurrSamplesPerSec=159.6, MemAllocated=1.75GB, ...``
- current: ``epoch=0/micro_step=20/global_step=20, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., ...``

The step is ``global_step``, else the ``epoch/step`` pair; the step count restarts with each epoch
there, so a later epoch's steps are placed after the highest step seen before it. Samples/s is
CurrSamplesPerSec, else SamplesPerSec (the older running average); peak memory is MaxMemAllocated in
the unit printed (GB, MB, GiB, ...; a number without a unit is malformed). Only the values used must
be readable: the running average DeepSpeed prints as ``-inf`` before its start step does not spoil a
line whose current rate is fine, but a 0.7+ line without CurrSamplesPerSec or MaxMemAllocated was cut
short and is malformed.

DeepSpeed's samples/s are for the global batch (ThroughputTimer counts train_batch_size samples);
tokens/s = samples/s * seq_len, and step time = global_batch / samples/s when the batch is known.
Both come from the workload, or from the log's argument/config dump (``seq_length ..... 4096``,
``train_batch_size ..... 64``), which wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ablate.workers.parsers.base import NUMBER, LogParser, Malformed, StepRecord, number, scaled, to_gib

_GLOBAL_STEP = re.compile(r"\bglobal_step=(?P<step>\S*?)(?:,|\s|$)")
_EPOCH_STEP = re.compile(r"(?:^|[\s\]])(?P<epoch>\d+)/(?P<step>\d+),\s*\w*SamplesPerSec=")
# Values run to the next comma or space: "12abc" or "1.2.3" must fail whole, not read as 12 or 1.2.
_FIELD = re.compile(r"\b(?P<key>\w+)=(?P<value>[^,\s]*)")
_VALUE_UNIT = re.compile(rf"(?P<v>{NUMBER})(?P<u>[A-Za-z]*)")
_STEPS = re.compile(
    r"steps:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)\s+"
    r"iter time \(s\):\s*(?P<t>\S+)\s+samples/sec:\s*(?P<sps>\S+)"
)
_NUM = r"(?P<v>-?[\d.]+(?:[eE][-+]?\d+)?)\s*(?P<u>[kKMGTP]?)"
_PROF_FLOPS = re.compile(r"^FLOPS per GPU\b.*:\s*" + _NUM + r"FLOPS\s*$")
_PROF_SPS = re.compile(r"^samples/second:\s*(?P<v>[\d.]+)\s*$")
_PROF_ITER = re.compile(r"^iter latency:\s*(?P<v>[\d.]+)\s*(?P<u>s|ms|us)\s*$")
_PROF_STEP = re.compile(r"Profile Summary at step (?P<step>\d+)")
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class DeepSpeedParser(LogParser):
    name = "deepspeed"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._epoch_base: dict[int, int] = {}  # epoch -> step index its step 0 maps to

    def _per_step(self, samples_per_s: float) -> dict[str, float]:
        v = {"throughput_samples_per_s": samples_per_s}
        if self.seq_len:
            v["throughput_tokens_per_s"] = samples_per_s * self.seq_len
        if self.global_batch and samples_per_s > 0:
            v["step_time_s"] = self.global_batch / samples_per_s
        return v

    def _feed(self, line: str) -> list[StepRecord]:
        text = line.strip()
        if "SamplesPerSec=" in text:
            return self._timer(text)
        if text.startswith("steps:") or " steps: " in text:
            m = _STEPS.search(text)
            if not m:
                return self.bad("a 'steps:' line without loss, iter time and samples/sec")
            values = self._per_step(number(m["sps"], "samples/sec", positive=True))
            values["step_time_s"] = number(m["t"], "iter time (s)", positive=True)  # measured beats derived
            values["loss"] = number(m["loss"], "loss")
            return self._record(int(m["step"]), values)
        if self._read_context(text):
            return []
        return self._profiler(text)

    def _timer(self, text: str) -> list[StepRecord]:
        fields = {m["key"]: m["value"] for m in _FIELD.finditer(text)}
        if "CurrSamplesPerSec" in fields:
            rate_key = "CurrSamplesPerSec"
            # 0.7 on prints all four values; a line that stops early may have lost digits too.
            if "MaxMemAllocated" not in fields:
                raise Malformed("a throughput-timer line cut short (no MaxMemAllocated)")
        elif "SamplesPerSec" in fields:
            rate_key = "SamplesPerSec"
        elif "RunningAvgSamplesPerSec" in fields:
            raise Malformed("a throughput-timer line cut short (no CurrSamplesPerSec)")
        else:
            return []  # e.g. "ThroughputSamplesPerSec=" of some other tool: not the timer's line
        step = self._timer_step(text)
        values = self._per_step(number(fields[rate_key], rate_key, positive=True))
        if "MaxMemAllocated" in fields:
            m = _VALUE_UNIT.fullmatch(fields["MaxMemAllocated"])
            if not m or not m["u"]:
                raise Malformed(f"MaxMemAllocated {fields['MaxMemAllocated']!r} is not a size with a unit")
            peak = to_gib(number(m["v"], "MaxMemAllocated"), m["u"])
            if peak < 0:
                raise Malformed(f"MaxMemAllocated {fields['MaxMemAllocated']!r} is negative")
            if peak > 0:  # 0.0GB is what a CPU-only run prints: no device memory was measured
                values["peak_memory_gib"] = peak
        return self._record(step, values)

    def _timer_step(self, text: str) -> int:
        if m := _GLOBAL_STEP.search(text):
            if not m["step"].isdigit():
                raise Malformed(f"global_step {m['step']!r} is not a step number")
            return int(m["step"])
        m = _EPOCH_STEP.search(text)
        if not m:
            raise Malformed("a throughput-timer line without global_step= or an epoch/step pair")
        epoch, step = int(m["epoch"]), int(m["step"])
        if epoch not in self._epoch_base:
            self._epoch_base[epoch] = max(self._steps, default=0) if self._epoch_base else 0
        return self._epoch_base[epoch] + step

    def _finish(self) -> None:
        # The seq length or batch may have been stated after the first timer lines.
        for values in self._steps.values():
            sps = values.get("throughput_samples_per_s")
            if sps:
                for key, value in self._per_step(sps).items():
                    values.setdefault(key, value)

    def _profiler(self, text: str) -> list[StepRecord]:
        if m := _PROF_STEP.search(text):
            self.units["profile_step"] = "1"
            self.summary["profile_step"] = float(m["step"])
        elif text.startswith("FLOPS per GPU"):
            if not (m := _PROF_FLOPS.match(text)):
                return self.bad("a flops-profiler 'FLOPS per GPU' line without a FLOPS value")
            self.summary["tflops_per_device"] = scaled(m["v"], m["u"]) / 1e12
        elif text.startswith("samples/second:"):
            if not (m := _PROF_SPS.match(text)):
                return self.bad("a flops-profiler 'samples/second' line without a number")
            self.summary["throughput_samples_per_s"] = float(m["v"])
        elif text.startswith("iter latency:"):
            if not (m := _PROF_ITER.match(text)):
                return self.bad("a flops-profiler 'iter latency' line without a time")
            self.summary["step_time_s"] = float(m["v"]) * _TIME[m["u"]]
        return []
