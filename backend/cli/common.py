"""What every command shares: the console, and turning expected failures into one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from ablate.backend.config import Settings, get_settings
from ablate.backend.db.database import Database
from ablate.backend.errors import AblateError

console = Console()
err_console = Console(stderr=True)


class App(typer.Typer):
    """A Typer app that ends expected failures with one clear line and exit code 1, never a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except AblateError as exc:
            fail(str(exc))
        except OperationalError as exc:
            orig = getattr(exc, "orig", None) or exc
            fail(f"database error: {str(orig).strip().splitlines()[0] if str(orig).strip() else orig!r}")
        except SQLAlchemyError as exc:
            fail(f"database error: {type(exc).__name__}: {exc}".splitlines()[0])


def fail(message: str, code: int = 1) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise SystemExit(code)


def settings() -> Settings:
    return get_settings()


def read_yaml(path: Path) -> Any:
    """A YAML (or JSON) file's content; a missing file or bad syntax is one line naming the file."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AblateError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise AblateError(f"{path}: not valid YAML: {exc}".splitlines()[0]) from None


def open_database(url: str | None = None, *, create: bool = True) -> Database:
    return Database.from_url(url or settings().resolved_database_url, create=create)
