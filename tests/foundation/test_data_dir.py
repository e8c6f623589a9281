"""Start-up checks that the data directory (the embedded database, run logs, reports) can be written,
and says so in one line naming it, instead of failing later as a run or a lost log (issue 30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.foundation.test_cli import ablate, assert_one_line_error


@pytest.mark.parametrize("command", [["serve", "--port", "1"], ["dispatcher"]])
def test_an_unwritable_data_directory_is_one_clear_line(tmp_path: Path, command: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    # Below a file: no directory can be made there, for root as for anyone (modes do not stop root).
    bad = blocker / "data"
    proc = ablate(*command, env={"ABLATE_DATA_DIR": str(bad), "ABLATE_DATABASE_URL": ""})
    assert_one_line_error(proc, f"data directory {bad}", "ABLATE_DATA_DIR")


def test_a_writable_data_directory_is_created(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    proc = ablate("db", "upgrade", env={"ABLATE_DATA_DIR": str(data), "ABLATE_DATABASE_URL": ""})
    assert proc.returncode == 0, proc.stderr
    assert data.is_dir() and not list(data.glob(".ablate-write-check*"))
