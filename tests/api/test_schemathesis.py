"""Fuzz every operation of the OpenAPI document: no request may make the server answer 500."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from broker.store.db.models import Base
from tests.api.conftest import ADMIN
from tests.api.jobsets import jobset


@pytest.fixture
def backend() -> str:
    return "sqlite"


def test_no_request_makes_the_server_fail(app):
    with TestClient(app, headers=ADMIN) as admin:  # runs the lifespan; gives the fuzzer objects to find
        admin.post("/api/v1/tenants", json={"name": "research"})
        admin.post("/api/v1/queues", json={"name": "training", "tenant": "research"})
        admin.post("/api/v1/jobs", json=jobset("train"), params={"tenant": "research"})
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 20
        for operation in operations:
            @given(case=operation.as_strategy())
            @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def no_server_error(case):
                case.call_and_validate(headers=ADMIN, checks=[not_a_server_error])

            no_server_error()


def test_no_sequence_of_requests_makes_the_server_fail(app):
    """The stateful phase: links schemathesis infers (a queue or job created, then read, changed, deleted).
    Each sequence starts from the same database, so that hypothesis can replay and shrink one."""
    with TestClient(app, headers=ADMIN) as admin:
        machine = schemathesis.openapi.from_asgi("/openapi.json", app).as_state_machine()
        linked = [name for name in vars(machine) if "_GetJob_" in name or "_PatchQueue_" in name]
        assert len(linked) >= 6  # jobs and queues are chained, not only fuzzed one by one

        class Sequences(machine):
            def setup(self):
                with app.state.db.engine.begin() as connection:
                    for table in reversed(Base.metadata.sorted_tables):
                        connection.execute(table.delete())
                app.state.capacity.forget()
                admin.post("/api/v1/tenants", json={"name": "research"})
                admin.post("/api/v1/queues", json={"name": "training", "tenant": "research"})
                admin.post("/api/v1/jobs", json=jobset("train"), params={"tenant": "research"})

            def get_call_kwargs(self, case):
                return {"headers": ADMIN}

            def validate_response(self, response, case, additional_checks=(), **kwargs):
                case.validate_response(response, checks=[not_a_server_error])

        Sequences.run(settings=settings(max_examples=40, stateful_step_count=6, deadline=None,
                                        suppress_health_check=list(HealthCheck), database=None))
