"""The column types every table of the inventory shares, and the declarative base with its naming convention
(`models` defines the tables)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Generic, Mapping, TypeVar

from sqlalchemy import JSON, BigInteger, ColumnElement, DateTime, Integer, MetaData, Text, TypeDecorator, cast
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

Json = JSON().with_variant(JSONB(), "postgresql")
_T = TypeVar("_T")


def json_text(column: Any) -> ColumnElement[str]:
    """A JSON column read as its text on both databases (PostgreSQL hands JSONB back decoded), for `SharedJson`."""
    return cast(column, Text).label(column.key)


class _JsonTextPostgres(TypeDecorator):
    impl = Text
    cache_ok = True

    def bind_expression(self, bindvalue):
        return cast(bindvalue, JSONB)


# A bound JSON value its writer encoded already (`json.dumps`), for a JSON column: rows that store one value (the
# waiting reasons of jobs of one shape) encode it once, not once a row.
JsonText = Text().with_variant(_JsonTextPostgres(), "postgresql")


class SharedJson(Generic[_T]):
    """JSON texts decoded once each (then made what `then` makes of them), for one read of many rows: the scheduler
    reads the same few allocatables, taints and waiting reasons for thousands of nodes and jobs (decoding each took a
    fifth of a new leader's read). Rows with equal texts share one value: read-only."""

    def __init__(self, then: Callable[[Any], _T] = lambda value: value) -> None:
        self.then = then
        self.values: dict[str, _T] = {}

    def __call__(self, text: str | None) -> _T:
        if text is None:
            return self.then(None)
        value = self.values.get(text, self)
        if value is self:
            value = self.values[text] = self.then(json.loads(text))
        return value


# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a real BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class UtcDateTime(TypeDecorator):
    """Aware UTC datetimes in and out on both databases (SQLite keeps naive text; we attach UTC back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        value = as_utc(value).astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def by_reason(reasons: Mapping[str, str]) -> dict[str, list[str]]:
    """{cluster: reason} as `ReasonsByCluster` stores it: {reason: [clusters]}."""
    grouped: dict[str, list[str]] = {}
    for cluster, reason in reasons.items():
        grouped.setdefault(reason, []).append(cluster)
    return grouped


class ReasonsByCluster(TypeDecorator):
    """A waiting job's reason per cluster, stored by reason (`{"needs 8 GPUs; 0 GPUs free": ["eu-1", "eu-2"]}`): a
    job waits for a few reasons on fifty clusters, and a new leader's first cycle writes them for every waiting job
    (a quarter of the bytes: writing 8,000 jobs' took 0.5 s, grouped 0.25). Read back cluster by cluster, in name
    order. Rows written before it was hold the mapping itself, and are read as they are."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect):
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: Mapping[str, str] | None, dialect) -> dict[str, list[str]] | None:
        return None if value is None else by_reason(value)

    def process_result_value(self, value: dict | None, dialect) -> dict[str, str] | None:
        if not value or isinstance(next(iter(value.values())), str):
            return value
        return dict(sorted((cluster, reason) for reason, clusters in value.items() for cluster in clusters))


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    })
