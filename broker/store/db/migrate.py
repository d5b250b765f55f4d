"""Apply the Alembic history programmatically (no alembic.ini needed)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

import migrations
from broker.process.settings import ConfigError

MIGRATIONS_DIR = Path(migrations.__file__).parent
MIGRATION_LOCK = 0x41524348  # PostgreSQL advisory lock key ("ARCH"): replicas starting together migrate in turn


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":  # the next one waits here, then finds the schema at head
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    with engine.begin() as connection:
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def require_head(engine: Engine) -> None:
    """Raise ConfigError, one line, if the schema is behind this code's migrations (`serve` on PostgreSQL, which does
    not migrate: the deploy files run `archipelago db upgrade` first). A schema ahead, migrated by a newer replica,
    is what an older one runs against during a rolling update: allowed."""
    script = ScriptDirectory.from_config(alembic_config(engine))
    head = script.get_current_head()
    with engine.connect() as connection:  # read as Alembic keeps it (its MigrationContext logs at INFO)
        current = (connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
                   if inspect(connection).has_table("alembic_version") else None)
    known = {revision.revision for revision in script.walk_revisions()}
    if current == head or (current is not None and current not in known):
        return
    raise ConfigError(f"the database schema is at {current or 'no revision'}; this broker needs {head}: run "
                      f"`archipelago db upgrade` first")
