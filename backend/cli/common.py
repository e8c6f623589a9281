"""What every command shares: the console, and turning expected failures into one line."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from ablate.backend.config import Settings, get_settings
from ablate.backend.db.database import Database
from ablate.backend.errors import AblateError


def _console(*, stderr: bool = False) -> Console:
    """Rich's console; off a terminal (a CI log, a pipe) lines are not wrapped at 80 columns, which
    broke paths and URLs in two."""
    plain = Console(stderr=stderr)
    return plain if plain.is_terminal else Console(stderr=stderr, soft_wrap=True)


console = _console()
err_console = _console(stderr=True)

_typer_type_label = typer.core.TyperOption.display_type_rich


def _no_flag_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    # Typer 0.29 labels every flag "<bool>" in --help, although a flag takes no value.
    return None if self.is_flag else _typer_type_label(self, ctx)


typer.core.TyperOption.display_type_rich = _no_flag_type  # type: ignore[method-assign]


# Options several commands take, spelled and explained once.
SERVER = typer.Option(None, "--server", help="Server URL (default: ABLATE_SERVER_URL).")
TOKEN = typer.Option(None, "--token", help="API token (default: ABLATE_TOKEN).")
ADMIN_TOKEN = typer.Option(None, "--token", help="Admin API token (default: ABLATE_TOKEN).")
DATABASE_URL = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL).")


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
    """A YAML (or JSON) file's content; a missing file or bad syntax is one line naming the file.

    PyYAML reads YAML 1.1, which rewrites plain scalars a person means as text (``010`` is 8,
    ``0x10`` 16, ``12:30`` 750, ``on`` True) where YAML 1.2 and the reader would not: such scalars
    are refused, asking for quotes, before anything is built. A timestamp that is no calendar date
    (month 13) is refused with its reason instead of PyYAML's traceback.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AblateError(f"cannot read {path}: {exc.strerror}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_scalars(loader, node, path, "")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise AblateError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line that keeps where it is (its own text puts line and column on a later
    line, which a one-line message used to cut off)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p) or type(exc).__name__
        return f"{what}, line {mark.line + 1}, column {mark.column + 1}" if mark else what
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_YAML_TAG = "tag:yaml.org,2002:"
_BOOLS_1_2 = frozenset({"true", "True", "TRUE", "false", "False", "FALSE"})
_PLAIN_INT = re.compile(r"-?(0|[1-9][0-9]*)")


def _rewritten(node: yaml.ScalarNode) -> bool:
    """Whether YAML 1.1 turns this plain scalar into a value its text does not read as."""
    kind = node.tag.removeprefix(_YAML_TAG)
    if node.style is not None:  # quoted or a block scalar: text as written
        return False
    if kind == "bool":
        return node.value not in _BOOLS_1_2  # on, off, yes, no
    if kind == "int":
        return not _PLAIN_INT.fullmatch(node.value)  # 010, 0x10, 0b1, 12:30, 1_000, +1
    if kind == "float":
        return "_" in node.value or ":" in node.value  # 1_000.5, 1:30.5
    return False


def _check_scalars(loader: yaml.SafeLoader, node: yaml.Node, path: Path, where: str) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            inner = f"{where}.{name}" if where else str(name)
            _check_scalars(loader, key, path, inner)
            _check_scalars(loader, value, path, inner)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_scalars(loader, item, path, f"{where}[{i}]")
    elif isinstance(node, yaml.ScalarNode):
        line = node.start_mark.line + 1
        if _rewritten(node):
            read = loader.construct_object(node)
            raise AblateError(
                f'{path}: {where}: quote it ("{node.value}" is text; YAML 1.1 reads {node.value} as '
                f"{read!r}), line {line}"
            )
        if node.tag == f"{_YAML_TAG}timestamp":
            try:
                loader.construct_object(node)
            except ValueError as exc:
                raise AblateError(
                    f"{path}: {where}: {node.value} is not a date: {exc}, line {line}"
                ) from None


def check_data_dir(cfg: Settings) -> None:
    """The data directory and its run-log directory exist (made if missing) and this user can write
    them: said at start-up in one line, not later as failed runs or lost logs."""
    for path in (cfg.data_dir, cfg.log_dir):
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ablate-write-check-"):
                pass
        except OSError as exc:
            raise AblateError(
                f"the data directory {path} cannot be written ({exc.strerror or exc}); set ABLATE_DATA_DIR "
                "to a directory this user can write, or fix its permissions"
            ) from None


def open_database(url: str | None = None, *, create: bool = True) -> Database:
    return Database.from_url(url or settings().resolved_database_url, create=create)
