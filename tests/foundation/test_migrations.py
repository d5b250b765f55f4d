"""The models and the one Alembic history agree, on both backends, in both directions."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from broker.store.db import migrate
from broker.store.db.models import Base
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


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_serve_refuses_a_schema_behind_its_migrations_and_runs_beside_one_ahead(empty_database_url, tmp_path):
    """On PostgreSQL `serve` does not migrate (the deploy files run `db upgrade` first); a schema left behind would
    lack what the code relies on, e.g. the trigger that wakes the scheduler for new jobs: one line, exit 2."""
    from cryptography.fernet import Fernet

    from tests.foundation.test_config_and_cli import run_cli

    engine = create_engine(empty_database_url)
    migrate.upgrade(engine, "0013_job_placement_spec")
    result = run_cli("serve", "--port", "1", cwd=tmp_path, ARCHIPELAGO_DATABASE_URL=empty_database_url,
                     ARCHIPELAGO_SECRET_KEY=Fernet.generate_key().decode())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("archipelago: the database schema is at 0013_job_placement_spec; this broker needs "
                    "0021_audit: run `archipelago db upgrade` first")
    migrate.upgrade(engine)
    migrate.require_head(engine)  # at head
    with engine.begin() as connection:  # a newer replica's migration, unknown to this code
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_from_a_newer_release'")
    migrate.require_head(engine)
    engine.dispose()
