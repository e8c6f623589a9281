"""A stand-in benchmark for CI tests: JSON-lines step records on stdout, chatter on stderr.

``python fake_benchmark.py --tokens-per-s 1000 --steps 5 [--fail CODE] [--touch FILE]``: prints one
``{"step": N, "throughput_tokens_per_s": ..., "step_time_s": ...}`` line per step (the rate varies by
+-1% around the given one), or, with ``--fail``, a traceback-like message on stderr and exits CODE.
``--touch`` creates FILE first (a test can see that the benchmark ran).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens-per-s", type=float, default=1000.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--fail", type=int, default=0)
    ap.add_argument("--touch", type=Path)
    args = ap.parse_args()
    if args.touch:
        args.touch.write_text("ran\n")
    print("fake benchmark starting", file=sys.stderr, flush=True)
    for step in range(1, args.steps + 1):
        if args.fail and step == 3:
            print("Traceback (most recent call last):", file=sys.stderr)
            print("RuntimeError: CUDA out of memory (fake)", file=sys.stderr, flush=True)
            return args.fail
        tps = args.tokens_per_s * (1 + 0.01 * ((step % 3) - 1))
        print(
            json.dumps({"step": step, "throughput_tokens_per_s": tps, "step_time_s": 8192 / tps}), flush=True
        )
    print("fake benchmark done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
