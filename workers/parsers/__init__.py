"""Log parsers for the command runner: ``get_parser(name, options)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ablate.workers.parsers.base import LogParser, ParseResult, StepRecord
from ablate.workers.parsers.deepspeed import DeepSpeedParser
from ablate.workers.parsers.jsonl import JsonlParser
from ablate.workers.parsers.megatron import MegatronParser
from ablate.workers.parsers.mllog import MllogParser
from ablate.workers.parsers.regex import RegexParser

PARSERS: dict[str, type[LogParser]] = {
    p.name: p for p in (JsonlParser, MllogParser, DeepSpeedParser, MegatronParser, RegexParser)
}


def known_parsers() -> list[str]:
    return sorted(PARSERS)


def get_parser(name: str, options: Mapping[str, Any] | None = None) -> LogParser:
    """A fresh parser. Options: ``seq_len``/``global_batch`` (context for token rates) plus the
    parser's own. Unknown names and bad options raise ValueError."""
    cls = PARSERS.get(name)
    if cls is None:
        raise ValueError(f"unknown parser {name!r}; known parsers: {', '.join(known_parsers())}")
    return cls(dict(options or {}))


__all__ = ["PARSERS", "LogParser", "ParseResult", "StepRecord", "get_parser", "known_parsers"]
