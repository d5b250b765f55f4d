"""Fixtures for the simulator tests: one TLS simulator per module, driven through the official client.

Time is frozen (speed 0) unless a test says otherwise: tests move it with `sim.advance()`, so
nothing depends on how fast this machine is.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.sim.testing import running_simulator

from .helpers import SCENARIO, api_client

@pytest.fixture(scope="module")
def sim(request):
    """The helpers' SCENARIO, or the test module's own."""
    with running_simulator(getattr(request.module, "SCENARIO", SCENARIO), speed=0, tls=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def api(request, sim):
    """A client of eu-west, or of the test module's MEMBER."""
    with api_client(sim, getattr(request.module, "MEMBER", "eu-west")) as api:
        yield api


@pytest.fixture
def namespace(sim, api):
    """A fresh namespace, deleted afterwards so that one test's pods never hold another's capacity."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)
    sim.settle()
