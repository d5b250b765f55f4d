"""Engines and sessions; SQLite is tuned for one writer and many readers, and begins its transactions as
`Database.read` and `Database.write` ask (broker.store.db.runtime)."""

from __future__ import annotations

from typing import Iterator, Sequence, TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from broker.process.settings import ConfigError

T = TypeVar("T")


def make_engine(database_url: str) -> Engine:
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10,
                             connect_args={"connect_timeout": 5})
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


# Execution option `Database.write` sets: begin with SQLite's write lock (BEGIN IMMEDIATE).
WRITE_LOCK = "archipelago_write_lock"


def _sqlite_connect(dbapi_connection, _record) -> None:
    # the driver's own transaction handling off: it begins only before an INSERT, UPDATE or DELETE, so the
    # SELECTs before it see whatever was committed last; `_sqlite_begin` begins every transaction instead
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(connection) -> None:
    """A deferred BEGIN (its first SELECT fixes what the transaction sees; readers never take the write lock), or
    for a write BEGIN IMMEDIATE: a transaction that read first and then wants to write fails at once if another
    writer committed in between, so a writer takes the lock before it reads, and a second one waits for it."""
    connection.exec_driver_sql("BEGIN IMMEDIATE" if connection.get_execution_options().get(WRITE_LOCK) else "BEGIN")


def check_connection(engine: Engine) -> None:
    """Raise ConfigError with one line if the database cannot be reached."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise ConfigError(f"cannot reach the database at {engine.url.render_as_string(hide_password=True)}: "
                          f"{reason}") from None


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


IN_CHUNK = 1000  # ids per IN (...) list, well inside both backends' bind-parameter limits


def in_chunks(values: Sequence[T]) -> Iterator[Sequence[T]]:
    """Long id lists in slices an IN (...) clause takes on SQLite and PostgreSQL alike."""
    for start in range(0, len(values), IN_CHUNK):
        yield values[start:start + IN_CHUNK]
