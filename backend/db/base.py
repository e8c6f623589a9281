"""Declarative base shared by every model, with one naming convention for constraints; the clock
and the row-claiming WHERE (`picked_rows`) the services and the dispatcher share."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    BigInteger,
    ColumnElement,
    DateTime,
    MetaData,
    Select,
    Table,
    TypeDecorator,
    any_,
    event,
    literal,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Session

# Named constraints keep migrations identical on SQLite (batch mode needs names) and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on both dialects (SQLite drops the zone on the way in)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; Ablate stores UTC-aware timestamps only")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def picked_rows(
    session: Session, pick: Select[int], id_column: InstrumentedAttribute[int]
) -> ColumnElement[bool]:
    """The WHERE of an UPDATE that claims the rows ``pick`` (``SELECT <table>.id ... LIMIT n``) chooses;
    on PostgreSQL rows another claimer has locked are skipped, not waited for."""
    if session.get_bind().dialect.name == "postgresql":
        # A CTE is evaluated exactly once; PostgreSQL may re-run an ``IN (subquery LIMIT n)`` and
        # then take more than n rows.
        picked = pick.with_for_update(skip_locked=True, of=id_column).cte("picked")
        return id_column == picked.c.id
    return id_column.in_(pick)


def among_ids(session: Session, column: Any, ids: Iterable[int]) -> ColumnElement[bool]:
    """``column IN ids``; on PostgreSQL ``column = ANY(<one array parameter>)``: the same statement text
    whatever the number of ids. (An ``IN`` renders a parameter an id, and psycopg converts a statement
    of over 50 parameters anew every time: a per-batch cost on the dispatcher's hot path.)"""
    values = list(ids)
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(literal(values, ARRAY(BigInteger)))
    return column.in_(values)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


@event.listens_for(Table, "after_parent_attach")
def _never_reuse_ids(table: Table, parent: object) -> None:
    """SQLite reuses a deleted row's id unless the key says AUTOINCREMENT (migration 0013): audit entries
    and links would then point at another row. Ignored on PostgreSQL and on composite keys."""
    if parent is Base.metadata:
        table.dialect_options["sqlite"]["autoincrement"] = True
