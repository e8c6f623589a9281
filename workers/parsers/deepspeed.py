"""DeepSpeed logs: the engine's throughput timer, ``steps: N loss: ... samples/sec: ...`` lines of
Megatron-DeepSpeed/DeepSpeedExamples, and the flops profiler's summary.

DeepSpeed's samples/s are for the global batch (ThroughputTimer counts train_batch_size samples);
tokens/s = samples/s * seq_len, and step time = global_batch / samples/s when the batch is known.
"""

from __future__ import annotations

import re

from ablate.workers.parsers.base import LogParser, StepRecord, scaled, to_gib

_TIMER = re.compile(r"global_step=(?P<step>\d+)")
_KV = re.compile(r"(\w+)=(-?[\d.]+(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)")
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

    def _per_step(self, samples_per_s: float) -> dict[str, float]:
        v = {"throughput_samples_per_s": samples_per_s}
        if self.seq_len:
            v["throughput_tokens_per_s"] = samples_per_s * self.seq_len
        if self.global_batch and samples_per_s > 0:
            v["step_time_s"] = self.global_batch / samples_per_s
        return v

    def _feed(self, line: str) -> list[StepRecord]:
        text = line.strip()
        if "SamplesPerSec" in text and "global_step=" in text:
            m = _TIMER.search(text)
            kv = {k: (float(v), u) for k, v, u in _KV.findall(text)}
            if not m or "CurrSamplesPerSec" not in kv:
                return self.bad()
            values = self._per_step(kv["CurrSamplesPerSec"][0])
            if "MaxMemAllocated" in kv:
                values["peak_memory_gib"] = to_gib(*kv["MaxMemAllocated"])
            return self._record(int(m["step"]), values)
        if text.startswith("steps:") or " steps: " in text:
            m = _STEPS.search(text)
            if not m:
                return self.bad()
            values = self._per_step(float(m["sps"]))
            values["step_time_s"] = float(m["t"])  # measured beats derived
            values["loss"] = float(m["loss"])
            return self._record(int(m["step"]), values)
        return self._profiler(text)

    def _profiler(self, text: str) -> list[StepRecord]:
        if m := _PROF_STEP.search(text):
            self.units["profile_step"] = "1"
            self.summary["profile_step"] = float(m["step"])
        elif text.startswith("FLOPS per GPU"):
            if not (m := _PROF_FLOPS.match(text)):
                return self.bad()
            self.summary["tflops_per_device"] = scaled(m["v"], m["u"]) / 1e12
        elif text.startswith("samples/second:"):
            if not (m := _PROF_SPS.match(text)):
                return self.bad()
            self.summary["throughput_samples_per_s"] = float(m["v"])
        elif text.startswith("iter latency:"):
            if not (m := _PROF_ITER.match(text)):
                return self.bad()
            self.summary["step_time_s"] = float(m["v"]) * _TIME[m["u"]]
        return []
