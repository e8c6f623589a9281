"""API tokens over the admin API."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from ablate.backend.schemas.common import Name, Out, Strict


class TokenCreate(Strict):
    name: Name
    scope: Literal["read", "submit", "admin"]
    # a lifetime such as "30d", "12h", "90m" or "2w" (checked by the service); absent: never expires
    expires_in: str | None = Field(default=None, max_length=20)


class TokenOut(Out):
    id: int
    name: str
    scope: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    expires_at: datetime | None


class TokenCreated(TokenOut):
    secret: str
