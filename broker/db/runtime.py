"""The database a running process works on: settings → engine → migrated schema → sessions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from broker.db import migrate
from broker.db.session import check_connection, make_engine, make_sessionmaker
from broker.settings import Settings

if TYPE_CHECKING:
    from broker.db.fencing import Fence


@dataclass
class Database:
    engine: Engine
    sessions: sessionmaker[Session]
    fence: Fence | None = None  # set for the loop services of a replica that holds the leader lease

    def dispose(self) -> None:
        self.engine.dispose()

    def ensure_leading(self) -> None:
        """Before a loop service acts on a member: raise `Fenced` if its replica may have lost the lease."""
        if self.fence is not None:
            self.fence.ensure_valid()


def open_database(settings: Settings, *, upgrade: bool) -> Database:
    """Connect (failing with one line if unreachable) and, if asked, bring the schema to head."""
    if settings.sqlite_path is not None:
        settings.sqlite_path.resolve().parent.mkdir(parents=True, exist_ok=True)
        # readable by this user only: it holds token hashes and encrypted kubeconfigs (SQLite gives its
        # journal and WAL files the database file's mode)
        os.close(os.open(settings.sqlite_path, os.O_WRONLY | os.O_CREAT, 0o600))
    engine = make_engine(settings.database_url)
    check_connection(engine)
    if upgrade:
        migrate.upgrade(engine)
    return Database(engine, make_sessionmaker(engine))
