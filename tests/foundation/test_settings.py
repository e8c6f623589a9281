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


def test_statistical_defaults_have_one_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings, the comparison's options and the ladders' options start from the same defaults."""
    from ablate.backend.analysis.ablation import LadderOptions
    from ablate.backend.services.comparison.model import ComparisonOptions

    for name in (
        "NOISY_CV",
        "REGRESSION_THRESHOLD",
        "SIGNIFICANCE_ALPHA",
        "LOOKBACK_RELEASES",
        "LOOKBACK_MIN_HISTORY",
    ):
        monkeypatch.delenv(f"ABLATE_{name}", raising=False)
    options = ComparisonOptions.from_settings(Settings())
    assert options == ComparisonOptions()
    assert options.ladder_options == LadderOptions()
    assert (options.alpha, options.threshold_pct, options.noisy_cv, options.min_n) == (0.05, 3.0, 0.05, 3)
