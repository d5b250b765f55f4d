"""Shared fixtures: a real database on each backend (SQLite file, PostgreSQL server).

PostgreSQL: the server at 127.0.0.1:5432 (user postgres, trust auth) or ARCHIPELAGO_TEST_POSTGRES_URL.
Each test session creates its own throw-away database there and drops it at the end.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from cryptography.fernet import Fernet
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from broker.process.settings import Settings
from broker.store.db import migrate
from broker.store.db.models import Base
from broker.store.db.runtime import Database, open_database

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
HOW_TO_START_POSTGRES = (
    "start one with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "(Debian) or `docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`, "
    "or point ARCHIPELAGO_TEST_POSTGRES_URL at a server where you may create databases")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

# bench/mutants.py runs the property tests against thousands of mutants: there a failure needs no shrinking.
hypothesis_settings.register_profile("mutants", phases=(Phase.explicit, Phase.reuse, Phase.generate))
hypothesis_settings.load_profile(os.environ.get("ARCHIPELAGO_HYPOTHESIS_PROFILE", "default"))


def postgres_server_url() -> str:
    url = make_url(os.environ.get("ARCHIPELAGO_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """An empty database of its own on the test server, dropped afterwards."""
    server = postgres_server_url()
    admin = create_engine(server, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = f"archipelago_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {make_url(server).render_as_string(hide_password=True)} does not answer "
                    f"({str(exc).splitlines()[0]}); {HOW_TO_START_POSTGRES}", pytrace=False)
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def migrated_postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        engine = create_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory) -> Path:
    """Migrate once; each test gets a copy of this file. `make mutants` migrates one for all its test sessions
    (ARCHIPELAGO_SQLITE_TEMPLATE): each mutant's tests are a session of their own and would migrate again."""
    if os.environ.get("ARCHIPELAGO_SQLITE_TEMPLATE"):
        return Path(os.environ["ARCHIPELAGO_SQLITE_TEMPLATE"])
    path = tmp_path_factory.mktemp("sqlite-template") / "archipelago.db"
    engine = create_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def settings(backend, request, tmp_path) -> Settings:
    """Settings for a migrated, empty database on the backend under test."""
    if backend == "sqlite":
        path = tmp_path / "archipelago.db"
        shutil.copy(request.getfixturevalue("migrated_sqlite_template"), path)
        url = f"sqlite:///{path}"
    else:
        url = request.getfixturevalue("migrated_postgres_url")
        engine = create_engine(url)
        with engine.begin() as connection:
            tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
            connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        engine.dispose()
    return Settings(database_url=url, secret_key=Fernet.generate_key().decode(), admin_token="admin-test-token",
                    _env_file=None)


@pytest.fixture
def db(settings) -> Iterator[Database]:
    database = open_database(settings, upgrade=False)
    yield database
    database.dispose()


# Debian's Chromium, one for the whole run (Playwright's sync API runs one per process): the dashboard's tests and the
# identity tests' sign-ins share it.
CHROMIUM = os.environ.get("ARCHIPELAGO_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium driven by Playwright; a missing browser fails the run and says how to install it."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"the browser tests need Chromium at {CHROMIUM}: install it with `apt-get install -y chromium` "
                    "(as root; `make test` does this) or point ARCHIPELAGO_TEST_CHROMIUM at a Chromium binary",
                    pytrace=False)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=10_000)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
