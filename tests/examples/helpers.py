"""Paths and loaders shared by the example tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RELEASES = EXAMPLES / "releases"
PLANS = EXAMPLES / "plans"
DEMO_RELEASE = EXAMPLES / "demo" / "release.yaml"
# One synthetic release per example, so that no example changes what another shows.
EXAMPLE_RELEASES = EXAMPLES / "example-releases"
FACTORIAL_RELEASE = EXAMPLE_RELEASES / "factorial.yaml"
SWEEP_RELEASE = EXAMPLE_RELEASES / "ckpt-sweep.yaml"
CI_RESULTS_RELEASE = EXAMPLE_RELEASES / "ci-results.yaml"
EXAMPLE_RELEASE_FILES = (FACTORIAL_RELEASE, SWEEP_RELEASE, CI_RESULTS_RELEASE)
SAMPLE_RESULTS = EXAMPLES / "results" / "sample-results.json"
# shared/ lies beside the checkout (and beside CI's clone).
SEEDS = ROOT.parent / "shared" / "seeds"

NV_2512 = RELEASES / "training-nv-pytorch-25.12.yaml"
XPU_2501 = RELEASES / "training-xpu-pytorch-25.01.yaml"
XPU_2601 = RELEASES / "training-xpu-pytorch-26.01.yaml"
REAL_RELEASES = (NV_2512, XPU_2501, XPU_2601)
# Which seed note each manifest transcribes (shared/seeds/README.md names them).
SEED_OF = {
    NV_2512.name: "000_efd75e1cc72c9f45.txt",
    XPU_2501.name: "001_e8321031b655760a.txt",
    XPU_2601.name: "002_1a6503aba6ee3d3c.txt",
}

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def ablate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ABLATE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120
    )
