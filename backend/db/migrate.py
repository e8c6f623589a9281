"""Alembic, driven from code: upgrade, downgrade, current, and the check that code and schema agree."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import ablate.migrations
from ablate.backend.errors import SchemaError

MIGRATIONS_DIR = Path(ablate.migrations.__file__).resolve().parent


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    heads = ScriptDirectory(str(MIGRATIONS_DIR)).get_heads()
    if len(heads) != 1:
        raise SchemaError(f"migrations have {len(heads)} heads; expected exactly one: {heads}")
    return heads[0]


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _known(revision: str) -> bool:
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    try:
        return script.get_revision(revision) is not None
    except Exception:
        return False


def assert_not_newer(engine: Engine) -> None:
    """Refuse a database migrated by newer code: our models would misread it."""
    current = current_revision(engine)
    if current is not None and not _known(current):
        raise SchemaError(
            f"database {engine.url.render_as_string()!r} is at migration {current!r}, "
            f"which this version of ablate does not know (newest here: {head_revision()!r}); "
            "upgrade ablate"
        )


def upgrade(engine: Engine, revision: str = "head") -> None:
    assert_not_newer(engine)
    _check_target(revision)
    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    assert_not_newer(engine)
    _check_target(revision)
    command.downgrade(alembic_config(engine), revision)


def _check_target(revision: str) -> None:
    if revision in ("head", "base") or revision.startswith(("+", "-")) or _known(revision):
        return
    raise SchemaError(f"unknown migration revision {revision!r}; newest is {head_revision()!r}")


def assert_up_to_date(engine: Engine) -> None:
    assert_not_newer(engine)
    current = current_revision(engine)
    head = head_revision()
    if current != head:
        raise SchemaError(
            f"database {engine.url.render_as_string()!r} is at migration {current or 'base (empty)'!r}, "
            f"code expects {head!r}; run `ablate db upgrade`"
        )
