"""Runners and log parsers found through entry points, so a team can add its own in a package of its own.

A distribution declares them in its metadata (``[project.entry-points."ablate.runners"]`` in
pyproject.toml, ``entry_points={"ablate.runners": [...]}`` in setup.py); Ablate's own runners and
parsers are declared the same way in its pyproject.toml. Nothing is imported until a name is asked
for, so looking a runner up never imports torch. The standard library only: this is the ground floor.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

RUNNERS_GROUP = "ablate.runners"
PARSERS_GROUP = "ablate.parsers"


class UnknownPluginError(ValueError):
    """A name that no entry point of the group (nor an in-process registration) provides."""


class PluginLoadError(ValueError):
    """An entry point that exists but cannot be used: its import fails, or it names the wrong thing."""


@dataclass(frozen=True)
class _Found:
    name: str
    value: str  # "module:attribute"
    distribution: str  # "name version", for the messages


def _describe(ep: EntryPoint) -> _Found:
    dist = getattr(ep, "dist", None)
    where = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    return _Found(ep.name, ep.value, where)


# Keyed on sys.path: a distribution put on the path later (a test's temporary one, a plugin folder
# added at start-up) is seen, while repeated look-ups in one process do not rescan site-packages.
@lru_cache(maxsize=8)
def _scan(group: str, path: tuple[str, ...]) -> dict[str, tuple[EntryPoint, ...]]:
    found: dict[str, list[EntryPoint]] = {}
    seen: set[tuple[str, str, str]] = set()
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        # One distribution seen twice on the path (an editable install and its source tree) is one.
        key = (ep.name, ep.value, dist.name if dist is not None else "")
        if key not in seen:
            seen.add(key)
            found.setdefault(ep.name, []).append(ep)
    return {name: tuple(eps) for name, eps in found.items()}


class PluginGroup:
    """The entry points of one group plus names registered in this process (tests, benchmarks)."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind  # "runner", "parser": for the messages
        self._registered: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, factory: Callable[..., Any]) -> None:
        """Add (or override) a name in this process only; entry points are how packages add one."""
        self._registered[name] = factory

    def _entry_points(self) -> dict[str, tuple[EntryPoint, ...]]:
        return _scan(self.group, tuple(sys.path))

    def names(self) -> list[str]:
        return sorted(set(self._entry_points()) | set(self._registered))

    def load(self, name: str) -> Callable[..., Any]:
        """The factory (class or function) registered as ``name``. Raises UnknownPluginError naming the
        group and the names there are, or PluginLoadError naming the entry point and why it failed."""
        if name in self._registered:
            return self._registered[name]
        eps = self._entry_points().get(name)
        if not eps:
            known = ", ".join(self.names()) or "none (is the ablate package installed with its metadata?)"
            raise UnknownPluginError(
                f"unknown {self.kind} {name!r} (no entry point of that name in group {self.group!r}); "
                f"known {self.kind}s: {known}"
            )
        if len(eps) > 1:
            where = "; ".join(f"{f.value} from {f.distribution}" for f in map(_describe, eps))
            raise PluginLoadError(
                f"{self.kind} {name!r} is declared by more than one entry point in group "
                f"{self.group!r}: {where}; uninstall one or rename it"
            )
        found = _describe(eps[0])
        what = (
            f"{self.kind} {name!r} (entry point {found.name} = {found.value} in group {self.group!r}, "
            f"from {found.distribution})"
        )
        try:
            factory = eps[0].load()
        except Exception as exc:  # any import-time failure of someone else's package: say which one
            raise PluginLoadError(f"{what} failed to load: {type(exc).__name__}: {exc}") from exc
        if not callable(factory):
            raise PluginLoadError(f"{what} is not callable: it names a {type(factory).__name__}")
        return factory
