"""docs/configuration.md is generated from ablate.backend.config.Settings and must match it exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import Field

from ablate.backend.cli.config_docs import DEFAULT_PATH, render
from ablate.backend.config import Settings

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))


def ablate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ABLATE, *args], capture_output=True, text=True, env=dict(os.environ), timeout=120)


def test_committed_reference_matches_settings() -> None:
    committed = DEFAULT_PATH.read_text(encoding="utf-8")
    assert committed == render(), (
        "docs/configuration.md is stale: a Settings field changed. Run `ablate config-docs` and commit it."
    )


def test_every_field_has_a_row_with_its_env_var_and_description() -> None:
    text = render()
    for name, field in Settings.model_fields.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `ABLATE_{name.upper()}` |"))
        assert field.description, f"Settings.{name} needs a description for the reference"
        assert " ".join(field.description.split()).replace("|", "\\|") in row


def test_a_new_field_changes_the_reference() -> None:
    class Extended(Settings):
        queue_depth: int = Field(default=7, description="A field another engineer adds later.")

    text = render(Extended)
    assert text != render()
    assert "| `ABLATE_QUEUE_DEPTH` | `int` | `7` | A field another engineer adds later. |" in text


def test_cli_check_passes_on_the_committed_file() -> None:
    proc = ablate("config-docs", "--check")
    assert proc.returncode == 0, proc.stderr


def test_cli_writes_then_check_detects_drift(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    assert ablate("config-docs", "--check", "--output", str(out)).returncode != 0  # missing file

    wrote = ablate("config-docs", "--output", str(out))
    assert wrote.returncode == 0, wrote.stderr
    assert out.read_text(encoding="utf-8") == render()
    assert ablate("config-docs", "--check", "--output", str(out)).returncode == 0

    out.write_text(out.read_text(encoding="utf-8").replace("`8000`", "`8080`"), encoding="utf-8")
    stale = ablate("config-docs", "--check", "--output", str(out))
    assert stale.returncode == 1
    assert "Traceback" not in stale.stderr
    assert "out of date" in stale.stderr
