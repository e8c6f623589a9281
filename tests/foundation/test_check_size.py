"""`.ci/check-size` finds what is over issue 32's limits (functions over 80 lines, files over 500,
functions with more than 7 parameters), reports without failing, and fails with --strict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "check-size"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def write_tree(root: Path) -> None:
    (root / "backend").mkdir()
    (root / "workers").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (root / "backend" / "long.py").write_text(f"def long_one():\n{body}\n\n\ndef short():\n    return 1\n")
    (root / "backend" / "many.py").write_text(
        "class C:\n"
        "    def eight(self, a, b, c, d, e, f, g, h, *args, **kwargs):\n        return a\n\n"
        "    def seven(self, a, b, c, d, e, f, *, g):\n        return a\n"
    )
    (root / "workers" / "big.py").write_text("\n".join(f"V{i} = {i}" for i in range(501)) + "\n")


def test_it_lists_each_kind_and_only_those(tmp_path: Path) -> None:
    write_tree(tmp_path)
    out = run("--root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "backend/long.py:1: long_one: 86 function lines (limit 80)" in lines
    assert "backend/many.py:2: C.eight: 8 parameters (limit 7)" in lines
    assert "workers/big.py:1: 501 file lines (limit 500)" in lines
    assert len(lines) == 4  # short() and C.seven are within the limits; the last line is the summary
    assert lines[-1].startswith("check-size: 1 files over 500 lines, 1 functions over 80 lines")
    assert lines[-1].endswith("(report only)")


def test_strict_fails_when_anything_is_over_and_passes_when_nothing_is(tmp_path: Path) -> None:
    write_tree(tmp_path)
    assert run("--strict", "--root", str(tmp_path)).returncode == 1
    for name in ("long.py", "many.py"):
        (tmp_path / "backend" / name).unlink()
    (tmp_path / "workers" / "big.py").write_text("V = 1\n")
    assert run("--strict", "--root", str(tmp_path)).returncode == 0


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    out = run("--root", str(tmp_path), "nowhere")
    assert out.returncode != 0 and "no folder" in out.stderr and "nowhere" in out.stderr


def test_typer_commands_are_exempt_from_the_parameter_limit_only(tmp_path: Path) -> None:
    """Each parameter of a Typer command is a CLI option declared in its signature: they cannot be
    bundled, so a command (decorated, or with every parameter a typer.Option/Argument) is not listed
    for its parameters; its length still is, and so is any other function's parameter count."""
    (tmp_path / "backend").mkdir()
    (tmp_path / "workers").mkdir()
    options = ", ".join(f'o{i}: int = typer.Option({i}, "--o{i}")' for i in range(9))
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (tmp_path / "backend" / "cli.py").write_text(
        "import typer\n\napp = typer.Typer()\n\n\n"
        f'@app.command("one")\ndef one({options}):\n    return o0\n\n\n'
        f"@app.command\ndef bare(a, b, c, d, e, f, g, h):\n{body}\n\n\n"
        f"def registered_elsewhere(r: str = typer.Argument(...), {options}):\n    return r\n\n\n"
        f"def half(a, b, c, d, e, f, g, {options}):\n    return a\n\n\n"
        "@app.callback()\ndef other(a, b, c, d, e, f, g, h):\n    return a\n"
    )
    out = run("--root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:-1] == [
        "backend/cli.py:12: bare: 86 function lines (limit 80)",
        "backend/cli.py:104: half: 16 parameters (limit 7)",
        "backend/cli.py:109: other: 8 parameters (limit 7)",
    ]
