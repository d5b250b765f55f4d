"""The models and the one Alembic history agree, on both backends, in both directions."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from broker.db import migrate
from broker.db.models import Base
from tests.conftest import fresh_postgres_database

import pytest

TABLES = {"clusters", "nodes", "hypernodes", "tenants", "queues", "tokens", "jobs", "placements", "events", "leases",
          "cluster_overrides"}


@pytest.fixture
def empty_database_url(backend, tmp_path):
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        with fresh_postgres_database() as url:
            yield url


def _differences(engine) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_upgrade_creates_every_table_and_matches_the_models(empty_database_url):
    engine = create_engine(empty_database_url)
    migrate.upgrade(engine)
    assert TABLES <= set(inspect(engine).get_table_names())
    assert _differences(engine) == []
    engine.dispose()


def test_upgrade_downgrade_upgrade(empty_database_url):
    engine = create_engine(empty_database_url)
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    assert not TABLES & set(inspect(engine).get_table_names())
    migrate.upgrade(engine)
    assert _differences(engine) == []
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_replicas_that_start_together_migrate_in_turn(empty_database_url):
    """Each replica's `db upgrade` at the same moment: one migrates, the others wait and find the schema at head."""
    failures: list[Exception] = []

    def upgrade() -> None:
        engine = create_engine(empty_database_url)
        try:
            migrate.upgrade(engine)
        except Exception as exc:  # e.g. DuplicateTable, when two create the same table
            failures.append(exc)
        finally:
            engine.dispose()

    replicas = [threading.Thread(target=upgrade) for _ in range(3)]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.join()
    assert failures == []
