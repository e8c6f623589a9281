"""API tokens: the secret is shown once; the database keeps only its sha256.

A secret is high-entropy random, so a plain (unsalted) sha256 is enough to make a stolen table useless
and lets the lookup use the unique index on ``secret_hash``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import ApiToken, TokenScope
from ablate.backend.schemas.common import parse_db_id
from ablate.backend.services.errors import Conflict, NotFound, ValidationProblem

PREFIX = "abl_"
# Scopes include the ones below them: admin may submit and read, submit may read.
RANK = {TokenScope.read.value: 0, TokenScope.submit.value: 1, TokenScope.admin.value: 2}
# last_used_at is a write; doing it at most once a minute per token keeps reads read-only.
TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class Principal:
    token_id: int
    name: str
    scope: str

    def allows(self, scope: str) -> bool:
        return RANK[self.scope] >= RANK[scope]


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


_DURATION = re.compile(r"([0-9]{1,6})([mhdw])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME = timedelta(days=3660)  # ten years: a longer one is a mistake, and "never" is no expiry


def parse_lifetime(text: str, field: str = "expires_in") -> timedelta:
    """``30d``, ``12h``, ``90m`` or ``2w`` as a duration; a clear problem at ``field`` otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or int(m[1]) == 0:
        raise ValidationProblem.at(
            field, f"{text!r} is not a lifetime: a positive whole number and a unit m, h, d or w (e.g. 30d)"
        )
    lifetime = timedelta(seconds=int(m[1]) * _UNIT_S[m[2]])
    if lifetime > MAX_LIFETIME:
        raise ValidationProblem.at(field, f"{text!r} is longer than ten years; leave it out for no expiry")
    return lifetime


def create_token(
    session: Session, name: str, scope: str, expires_in: str | None = None
) -> tuple[ApiToken, str]:
    """A new token and its secret (the only time the secret exists outside the client); ``expires_in``
    (see :func:`parse_lifetime`) makes it stop working that long from now."""
    lifetime = parse_lifetime(expires_in) if expires_in is not None else None
    if scope not in RANK:
        raise ValidationProblem.at("scope", f"unknown scope {scope!r}; one of {', '.join(RANK)}")
    name = name.strip()
    if not name or len(name) > 200:
        raise ValidationProblem.at("name", "a token needs a name of 1 to 200 characters")
    if session.scalars(select(ApiToken).where(ApiToken.name == name)).first() is not None:
        raise Conflict.at("name", f"a token named {name!r} already exists")
    secret = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(name=name, scope=scope, secret_hash=hash_secret(secret))
    if lifetime is not None:
        token.expires_at = utcnow() + lifetime
    session.add(token)
    session.flush()
    return token, secret


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def find_token(session: Session, ref: str | int) -> ApiToken:
    """A token by id or name."""
    if isinstance(ref, int) or (ref.isascii() and ref.isdigit()):
        token_id = parse_db_id(str(ref))  # an id past the column's range is simply not there
        token = session.get(ApiToken, token_id) if token_id is not None else None
    else:
        token = session.scalars(select(ApiToken).where(ApiToken.name == ref)).first()
    if token is None:
        raise NotFound.at("token", f"no token {ref!r}")
    return token


def revoke_token(session: Session, ref: str | int) -> ApiToken:
    token = find_token(session, ref)
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.flush()
    return token


def authenticate(session: Session, secret: str) -> ApiToken | None:
    """The live token whose secret this is, or None (unknown, revoked or expired)."""
    token, refusal = check(session, secret)
    return None if refusal else token


def check(session: Session, secret: str, now: datetime | None = None) -> tuple[ApiToken | None, str | None]:
    """The token whose secret this is and why it is refused (None: it is live). Unknown and revoked
    read alike; an expired one says when it expired (whoever asks holds its secret)."""
    digest = hash_secret(secret)
    token = session.scalars(select(ApiToken).where(ApiToken.secret_hash == digest)).first()
    # The index lookup already matched; the constant-time comparison keeps the check itself
    # free of timing differences should the lookup ever become a scan or a prefix match.
    if token is None or not hmac.compare_digest(token.secret_hash, digest) or token.revoked_at is not None:
        return None, "the token is unknown or revoked"
    if token.expires_at is not None and token.expires_at <= (now or utcnow()):
        return token, (
            f"the token {token.name!r} expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC; "
            "ask an admin for a new one"
        )
    return token, None


def touch(session: Session, token: ApiToken) -> None:
    now = utcnow()
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        token.last_used_at = now
