"""What the commands that run here share: errors as one line on stderr, and a session on the broker's own database
for the commands that act on it directly (`tokens create`, `tokens revoke`)."""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator

from typing import TYPE_CHECKING

import typer

from broker.store.errors import Conflict, Invalid, NotFound

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"archipelago: {message}", err=True)
    raise typer.Exit(code)


def one_line_errors(command: Callable) -> Callable:
    """Turn configuration errors into the one-line message the user acts on."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from broker.process.settings import ConfigError  # here, not at start: `--help` and `version` stay quick

        try:
            return command(*args, **kwargs)
        except (ConfigError, NotFound, Conflict, Invalid) as exc:
            fail(str(exc))

    return wrapper


@contextlib.contextmanager
def database_session() -> Iterator[Session]:
    """For commands that act on the broker's database directly; errors are one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from broker.process.settings import ConfigError, get_settings
    from broker.store.db import migrate
    from broker.store.db.runtime import open_database

    try:
        settings = get_settings()
        path = settings.sqlite_path
        if path is not None and not path.exists():  # opening it would make an empty one
            raise ConfigError(f"there is no broker database at {path}: set ARCHIPELAGO_DATABASE_URL to the broker's "
                              "(beside `make demo`: source demo-run/admin.env)")
        database = open_database(settings, upgrade=False)
        try:
            migrate.require_head(database.engine)
            with database.write() as session:
                yield session
        finally:
            database.dispose()
    except (ConfigError, NotFound, Conflict, Invalid) as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        fail(f"the broker's database: {str(exc).splitlines()[0]}")
