"""Package manifest diff between two image releases: the suspects listed beside a regression.

Versions are compared with ``packaging.version.Version`` when both parse as PEP 440. Otherwise
(image tags such as "25.12-cu128", driver strings) they fall back to a natural string order in
which digit runs compare as numbers, so "25.9" < "25.12" as a human expects. Package names are
matched case- and separator-insensitively (PEP 503 normalisation), reported as spelled in ``new``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class PackageChange:
    name: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ManifestDiff:
    added: tuple[PackageChange, ...]
    removed: tuple[PackageChange, ...]
    upgraded: tuple[PackageChange, ...]
    downgraded: tuple[PackageChange, ...]
    # Different strings that compare equal (e.g. "1.0" vs "1.0.0") count as unchanged.
    unchanged: tuple[PackageChange, ...]

    @property
    def changed(self) -> tuple[PackageChange, ...]:
        """Everything that is not unchanged, sorted by name."""
        return tuple(sorted(self.added + self.removed + self.upgraded + self.downgraded, key=_sort_key))

    def by_kind(self, *, unchanged: bool = False) -> tuple[tuple[str, tuple[PackageChange, ...]], ...]:
        """(kind, its changes): added, removed, upgraded, downgraded, and with ``unchanged`` the unchanged."""
        kinds = (
            ("added", self.added),
            ("removed", self.removed),
            ("upgraded", self.upgraded),
            ("downgraded", self.downgraded),
        )
        return (*kinds, ("unchanged", self.unchanged)) if unchanged else kinds


def _natural_key(v: str) -> tuple[tuple[int, int | str], ...]:
    # (0, number) sorts before (1, text) so mixed parts always compare without TypeError.
    return tuple((0, int(p)) if p.isdigit() else (1, p.lower()) for p in _DIGITS.split(v.strip()) if p)


def compare_versions(old: str, new: str) -> int:
    """-1 if new < old, 0 if equal, 1 if new > old."""
    try:
        a, b = Version(old), Version(new)
    except InvalidVersion:
        ka, kb = _natural_key(old), _natural_key(new)
        return (kb > ka) - (kb < ka)
    return (b > a) - (b < a)


def _sort_key(c: PackageChange) -> tuple[str, str]:
    return (canonicalize_name(c.name), c.name)


def diff_manifests(old: Mapping[str, str], new: Mapping[str, str]) -> ManifestDiff:
    """Classify every package of either manifest; each list is sorted by name."""
    old_by = {canonicalize_name(k): (k, v) for k, v in old.items()}
    new_by = {canonicalize_name(k): (k, v) for k, v in new.items()}
    added: list[PackageChange] = []
    removed: list[PackageChange] = []
    upgraded: list[PackageChange] = []
    downgraded: list[PackageChange] = []
    unchanged: list[PackageChange] = []
    for key in sorted(old_by.keys() | new_by.keys()):
        if key not in old_by:
            name, v = new_by[key]
            added.append(PackageChange(name, None, v))
        elif key not in new_by:
            name, v = old_by[key]
            removed.append(PackageChange(name, v, None))
        else:
            _, ov = old_by[key]
            name, nv = new_by[key]
            cmp = 0 if ov == nv else compare_versions(ov, nv)
            change = PackageChange(name, ov, nv)
            (upgraded if cmp > 0 else downgraded if cmp < 0 else unchanged).append(change)
    return ManifestDiff(
        added=tuple(sorted(added, key=_sort_key)),
        removed=tuple(sorted(removed, key=_sort_key)),
        upgraded=tuple(sorted(upgraded, key=_sort_key)),
        downgraded=tuple(sorted(downgraded, key=_sort_key)),
        unchanged=tuple(sorted(unchanged, key=_sort_key)),
    )


@dataclass(frozen=True)
class DeclaredCheck:
    """A declared component beside what the image holds (``found`` None: not in the image)."""

    component: str
    declared: str
    found: str | None
    state: str  # matches | differs | not found


def check_declared(declared: Mapping[str, str], found: Mapping[str, str]) -> tuple[DeclaredCheck, ...]:
    """Each declared component with the version found in the image and whether they agree: ``2.9.0``
    agrees with ``2.9.0+cu128`` (a local build tag) or ``2.9.0.post1``, not with ``2.9.1``. Names match
    as PEP 503 names, and a library's ``lib`` prefix may be left out (``nccl`` finds ``libnccl``)."""
    norm: dict[str, str] = {str(canonicalize_name(k)): v for k, v in found.items()}
    out = []
    for name, want in sorted(declared.items()):
        key = str(canonicalize_name(name))
        have = norm.get(key) or norm.get(f"lib{key}")
        if have is None:
            state = "not found"
        elif have == want or re.match(re.escape(want) + r"([.+\-_a-z]|$)", have):
            state = "matches"
        else:
            state = "differs"
        out.append(DeclaredCheck(name, want, have, state))
    return tuple(out)
