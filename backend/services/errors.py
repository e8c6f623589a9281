"""Expected failures of the services, each carrying what an RFC 9457 problem body needs.

Services raise these; the API turns them into ``application/problem+json`` and the CLI into one line.
Field paths are strings such as ``results[3].metrics.throughput_tokens_per_s`` so a client can point at
the exact input that was refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from ablate.backend.errors import AblateError


@dataclass(frozen=True)
class FieldError:
    loc: str
    msg: str

    def as_dict(self) -> dict[str, str]:
        return {"loc": self.loc, "msg": self.msg}


class ProblemError(AblateError):
    """An expected failure with an HTTP status, a short title and optional field errors."""

    status = 400
    title = "Bad request"
    slug = "bad-request"

    def __init_subclass__(
        cls, *, status: int | None = None, title: str | None = None, slug: str | None = None
    ) -> None:
        """A kind of problem names its status, title and slug in its class line (those it omits
        are its base's)."""
        super().__init_subclass__()
        cls.status = status or cls.status
        cls.title = title or cls.title
        cls.slug = slug or cls.slug

    def __init__(self, detail: str, errors: list[FieldError] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = list(errors or [])

    @property
    def type(self) -> str:
        return f"urn:ablate:problem:{self.slug}"

    @classmethod
    def at(cls, loc: str, msg: str) -> Self:
        """One failure at one field: the detail names it, and so does the field error."""
        return cls(f"{loc}: {msg}", [FieldError(loc, msg)])

    def __str__(self) -> str:
        # The field errors the detail does not already say (``at`` puts its one error in the detail).
        extra = [text for text in (f"{e.loc}: {e.msg}" for e in self.errors) if text not in self.detail]
        return f"{self.detail} ({'; '.join(extra)})" if extra else self.detail


class ValidationProblem(ProblemError, status=422, title="Invalid input", slug="validation"):
    pass


class NotFound(ProblemError, status=404, title="Not found", slug="not-found"):
    pass


class Conflict(ProblemError, status=409, title="Conflict", slug="conflict"):
    pass


class Unauthorized(ProblemError, status=401, title="Unauthorized", slug="unauthorized"):
    headers = {"WWW-Authenticate": 'Bearer realm="ablate"'}


class Forbidden(ProblemError, status=403, title="Forbidden", slug="forbidden"):
    pass


class PayloadTooLarge(ProblemError, status=413, title="Payload too large", slug="payload-too-large"):
    pass


# Seconds a client is asked to wait (``Retry-After``) while the database cannot be reached: about
# what a PostgreSQL restart takes.
RETRY_AFTER_S = 5
UNAVAILABLE_DETAIL = "the database cannot be reached right now; retry in a few seconds"
