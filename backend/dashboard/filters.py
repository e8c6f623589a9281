"""Page filters (cluster, platform, workload) that live in the query string, so a URL can be shared."""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlencode

from fastapi import Request

from ablate.backend.db.models import Platform
from ablate.backend.services.errors import ValidationProblem

FILTER_KEYS = ("cluster", "platform", "workload")


@dataclass(frozen=True)
class Filters:
    cluster: str | None = None
    platform: str | None = None
    workload: str | None = None

    @classmethod
    def from_request(cls, request: Request) -> Filters:
        values = {k: (request.query_params.get(k) or "").strip() or None for k in FILTER_KEYS}
        platform = values["platform"]
        if platform is not None:
            platform = platform.lower()
            if platform not in {p.value for p in Platform}:
                raise ValidationProblem.at("platform", f"unknown platform {platform!r}; use gpu or ppu")
        return cls(cluster=values["cluster"], platform=platform, workload=values["workload"])

    @property
    def active(self) -> bool:
        return any((self.cluster, self.platform, self.workload))

    def items(self) -> dict[str, str]:
        return {k: v for k in FILTER_KEYS if (v := getattr(self, k))}

    def query(self, **changes: str | None) -> str:
        """The query string of these filters with ``changes`` applied ("" or None removes a key)."""
        updated = replace(self, **{k: (v or None) for k, v in changes.items()})
        items = updated.items()
        return "?" + urlencode(items) if items else "?"
