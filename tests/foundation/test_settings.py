"""Settings come from ABLATE_* variables only, with an embedded SQLite default."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.backend.config import Settings


def test_default_database_is_sqlite_in_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ABLATE_DATABASE_URL", raising=False)
    monkeypatch.setenv("ABLATE_DATA_DIR", str(tmp_path))
    settings = Settings()
    assert settings.resolved_database_url == f"sqlite:///{tmp_path / 'ablate.sqlite'}"
    assert settings.is_embedded_sqlite
    assert settings.ray_address == ""


def test_prefixed_variables_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABLATE_DATABASE_URL", " postgresql+psycopg://u@h/db ")
    monkeypatch.setenv("ABLATE_MAX_BODY_BYTES", "1024")
    monkeypatch.setenv("DATABASE_URL", "sqlite:///ignored")
    settings = Settings()
    assert settings.resolved_database_url == "postgresql+psycopg://u@h/db"
    assert settings.max_body_bytes == 1024
    assert not settings.is_embedded_sqlite
