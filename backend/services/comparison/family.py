"""A release among its image family (oldest first), and what changed in its manifest."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from ablate.backend.analysis.manifest import ManifestDiff, diff_manifests
from ablate.backend.db.models import Release


def _natural_key(tag: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p.lower()) for p in re.split(r"(\d+)", tag) if p)


def order_family(releases: Iterable[Release]) -> list[Release]:
    """Releases of one image, oldest first.

    By ``packaging.version`` when every tag parses (25.9 < 25.12 < 26.01), else by release date when
    every release has one, else by tag in natural order. One rule for the whole family keeps the
    order total: mixing rules pairwise could make A < B < C < A.
    """
    items = list(releases)

    def version(tag: str) -> Version | None:
        try:
            return Version(tag)
        except InvalidVersion:
            return None

    versions = {r.id: version(r.tag) for r in items}
    if all(v is not None for v in versions.values()):
        return sorted(items, key=lambda r: (versions[r.id], _natural_key(r.tag), r.id))
    if all(r.release_date is not None for r in items):
        return sorted(items, key=lambda r: (r.release_date, _natural_key(r.tag), r.id))
    return sorted(items, key=lambda r: (_natural_key(r.tag), r.id))


def manifest_diff(
    old: Release,
    new: Release,
    found_old: Mapping[str, str] | None = None,
    found_new: Mapping[str, str] | None = None,
) -> ManifestDiff:
    """Components added, removed and changed from ``old`` to ``new``: the declared manifests, with what
    the releases' images were found to hold in their place where both images were read (the files are
    the truth; a note may be stale)."""
    if found_old is not None and found_new is not None:
        return diff_manifests(
            {**_str_map(old.manifest), **found_old}, {**_str_map(new.manifest), **found_new}
        )
    return diff_manifests(_str_map(old.manifest), _str_map(new.manifest))


def _str_map(m: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (m or {}).items()}
