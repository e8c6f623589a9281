"""API tokens over the admin API."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ablate.backend.schemas.common import Name, Out, Strict


class TokenCreate(Strict):
    name: Name
    scope: Literal["read", "submit", "admin"]


class TokenOut(Out):
    id: int
    name: str
    scope: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    secret: str
