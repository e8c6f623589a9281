"""benchmarks/adaptive_simulation.py runs as documented and its design meets issue 28's error goals
(false verdicts, power, runs saved at CV 1%); the runs-per-side goal (<= 4) is not met (4.3 in
pools of 10 comparisons, 4.9 without a pool; docs/statistics.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "benchmarks" / "adaptive_simulation.py")


def test_simulation_prints_the_table_and_meets_the_goals() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, SCRIPT, "--trials", "20000", "--seed", "3"],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    ).stdout  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| 1%") or line.startswith("| 2%")
            or line.startswith("| 5%")]  # fmt: skip
    assert len(rows) == 3 * 4 * 2  # CV x drop x design
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 5, verdicts
    met = [v for v in verdicts if "runs per side" not in v]
    assert len(met) == 4 and all(v.startswith("PASS") for v in met), verdicts
    (runs,) = [v for v in verdicts if "runs per side" in v]
    assert float(runs.split("runs per side ")[1].split()[0]) <= 4.5, runs
    assert any(line.startswith("info  CV 5%, no change") for line in out.splitlines())


def test_bad_trials_are_refused() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run(
        [sys.executable, SCRIPT, "--trials", "0"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2 and "--trials must be at least 1" in got.stderr
