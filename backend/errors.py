"""Errors that end a command with one clear line, or an API request with a problem body."""

from __future__ import annotations


class AblateError(Exception):
    """An expected failure with a message meant for the user."""


class ConfigError(AblateError):
    """A setting is malformed or names something that cannot be reached."""


class SchemaError(AblateError):
    """The database schema does not match what this code expects."""
