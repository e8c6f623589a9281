"""Log parsers for the command runner: ``get_parser(name, options)``.

Parsers are found through the ``ablate.parsers`` entry points (Ablate's own are declared in its
pyproject.toml; a team's package declares its own, see docs/runners.md): each names a
:class:`LogParser` subclass, built with the options mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ablate.backend.domain.plugins import PARSERS_GROUP, PluginGroup, PluginLoadError
from ablate.workers.parsers.base import LogParser, ParseResult, StepRecord

PARSERS = PluginGroup(PARSERS_GROUP, "parser")


def register_parser(name: str, factory: Callable[[dict[str, Any]], LogParser]) -> None:
    """Add a parser in this process only (tests); a package adds one with an ``ablate.parsers``
    entry point."""
    PARSERS.register(name, factory)


def known_parsers() -> list[str]:
    return PARSERS.names()


def get_parser(name: str, options: Mapping[str, Any] | None = None) -> LogParser:
    """A fresh parser. Options: ``seq_len``/``global_batch`` (context for token rates) plus the
    parser's own. Unknown names, parsers that cannot be loaded and bad options raise ValueError."""
    parser = PARSERS.load(name)(dict(options or {}))
    if not isinstance(parser, LogParser):
        raise PluginLoadError(
            f"parser {name!r} (group {PARSERS_GROUP!r}) made a {type(parser).__name__}, "
            "not a LogParser (ablate.workers.parsers.base)"
        )
    return parser


__all__ = [
    "PARSERS",
    "LogParser",
    "ParseResult",
    "StepRecord",
    "get_parser",
    "known_parsers",
    "register_parser",
]
