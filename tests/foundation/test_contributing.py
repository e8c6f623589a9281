"""The habits CONTRIBUTING.md describes are set up as it says: the pre-commit configuration is valid,
runs only local hooks (nothing fetched), and each hook's command is there after the set-up."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".pre-commit-config.yaml"


def test_the_pre_commit_configuration_is_valid_and_local() -> None:
    pre_commit = Path(sys.executable).parent / "pre-commit"
    out = subprocess.run(
        [str(pre_commit), "validate-config", str(CONFIG)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    repos = yaml.safe_load(CONFIG.read_text())["repos"]
    assert [r["repo"] for r in repos] == ["local"]  # a remote repo would be fetched
    hooks = {h["id"]: h for h in repos[0]["hooks"]}
    assert {"ruff", "ruff-format", "architecture"} <= set(hooks)
    for hook in hooks.values():
        command = shlex.split(hook["entry"])[0]
        found = (ROOT / command).exists() or command == "bash"
        assert found, f"hook {hook['id']}: {command} does not exist (CONTRIBUTING.md's set-up makes .venv)"
    assert "check-architecture" in hooks["architecture"]["entry"]


def test_every_adr_is_listed_in_the_index() -> None:
    adr = ROOT / "docs" / "adr"
    index = (adr / "README.md").read_text()
    records = sorted(p.name for p in adr.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert len(records) >= 3
    for name in records:
        assert f"({name})" in index, f"{name} is not in docs/adr/README.md"
        assert (adr / name).read_text().startswith(f"# {name[:4]}: ")
