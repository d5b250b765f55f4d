"""Apply the Alembic history programmatically (no alembic.ini needed)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Engine

import migrations

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
