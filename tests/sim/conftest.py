"""Fixtures for the simulator tests: one TLS simulator per module, driven through the official client.

Time is frozen (speed 0) unless a test says otherwise: tests move it with `sim.advance()`, so
nothing depends on how fast this machine is.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from clusters.sim.testing import running_simulator

from .helpers import SCENARIO, api_client

@pytest.fixture(scope="module")
def sim():
    with running_simulator(SCENARIO, speed=0, tls=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def api(sim):
    with api_client(sim, "eu-west") as api:
        yield api


@pytest.fixture
def namespace(api):
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name
