"""A stand-in benchmark for CI tests: JSON-lines step records on stdout, chatter on stderr.

``python fake_benchmark.py --tokens-per-s 1000 --steps 5 [--fail CODE] [--touch FILE]``: prints one
``{"step": N, "throughput_tokens_per_s": ..., "step_time_s": ...}`` line per step (the rate varies by
+-1% around the given one), or, with ``--fail``, a traceback-like message on stderr and exits CODE.
``--touch`` creates FILE first (a test can see that the benchmark ran). ``--format ljperf`` prints
lines as examples/plans/gpu-ladder-nv-25.12.yaml's regex patterns read them instead
(``step 6/8 | loss 2.40 | step_time 1.02 s | tokens/s 8031.4 | mem 61.2 GiB``). Arguments it does
not know are ignored, so it can stand in for ``docker run ... IMAGE ljperf benchmark ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--tokens-per-s", type=float, default=1000.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--fail", type=int, default=0)
    ap.add_argument("--touch", type=Path)
    ap.add_argument("--format", choices=("jsonl", "ljperf"), default="jsonl")
    args, _ = ap.parse_known_args()
    if args.touch:
        args.touch.write_text("ran\n")
    print("fake benchmark starting", file=sys.stderr, flush=True)
    for step in range(1, args.steps + 1):
        if args.fail and step == 3:
            print("Traceback (most recent call last):", file=sys.stderr)
            print("RuntimeError: CUDA out of memory (fake)", file=sys.stderr, flush=True)
            return args.fail
        tps = args.tokens_per_s * (1 + 0.01 * ((step % 3) - 1))
        if args.format == "ljperf":
            line = f"step {step}/{args.steps} | loss {3 - step * 0.05:.2f} | step_time {8192 / tps:.4f} s"
            print(f"{line} | tokens/s {tps:.1f} | mem 61.2 GiB", flush=True)
        else:
            record = {"step": step, "throughput_tokens_per_s": tps, "step_time_s": 8192 / tps}
            print(json.dumps(record), flush=True)
    print("fake benchmark done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
