"""A page of jobs reads the rows it shows: every listing's filter has an index already in id order.

Without one, SQLite finds every match and sorts them before it can return 50 (a tenant's page of a 100,000
backlog took 400 ms); the plan says so with a temporary B-tree for the ORDER BY.
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, event

from broker.store.db import migrate
from broker.store.db.session import make_sessionmaker
from broker.store.jobs import JobFilter, list_jobs
from broker.store.tenancy import Principal

TENANT, ADMIN = Principal("tenant", 1, "research"), Principal("admin")

LISTINGS = {
    "a tenant's jobs": (TENANT, JobFilter()),
    "a tenant's jobs in one state": (TENANT, JobFilter(states=["Queued"])),
    "every job in one state": (ADMIN, JobFilter(states=["Running"])),
    "every job": (ADMIN, JobFilter()),
    "a queue's jobs": (ADMIN, JobFilter(queue="training")),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.mark.parametrize("listing", LISTINGS)
def test_a_listing_walks_an_index_in_id_order(engine, listing):
    principal, filters = LISTINGS[listing]
    statements = []

    def capture(_connection, _cursor, statement, parameters, _context, _many):
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with make_sessionmaker(engine)() as session:
            list_jobs(session, principal, filters, limit=50, cursor=1000)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    (statement, parameters), = statements
    with engine.connect() as connection:
        plan = [row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    assert not any("TEMP B-TREE" in step for step in plan), plan
    assert any(step.startswith("SEARCH jobs USING") for step in plan), plan
