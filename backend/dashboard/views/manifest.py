"""Manifest rows for a table: every component of either release with its change, sorted by name."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.backend.analysis.manifest import ManifestDiff


@dataclass
class ManifestRow:
    name: str
    old: str | None
    new: str | None
    change: str  # added | removed | upgraded | downgraded | unchanged


def manifest_rows(diff: ManifestDiff | None, manifest: dict[str, object] | None = None) -> list[ManifestRow]:
    """From a diff when there is a baseline, else the release's own manifest (change "unchanged")."""
    if diff is None:
        return [ManifestRow(str(k), None, str(v), "unchanged") for k, v in sorted((manifest or {}).items())]
    rows = [
        ManifestRow(c.name, c.old, c.new, kind)
        for kind, changes in diff.by_kind(unchanged=True)
        for c in changes
    ]
    return sorted(rows, key=lambda r: r.name.lower())
