"""Fixtures for member-cluster tests: the simulator over real HTTPS, the API, and the loop services."""

from __future__ import annotations

from typing import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from broker.services.inventory import ClusterHealthService, InventorySyncService
from broker.services.members import MemberClients
from clusters.sim.scenario import LEAF, SPINE, ZONE
from clusters.sim.testing import SimHandle, running_simulator

ADMIN = {"Authorization": "Bearer admin-test-token"}
TOKEN = "sim-bearer-token-that-must-never-leak-0123456789"
NODE = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 4, "spine": 2}, "token": TOKEN},
    "clusters": [
        {"name": "crd", "nodes": 12, "hypernodes": "crd", "labels": {"region": "eu"}},
        {"name": "labels", "nodes": 10, "hypernodes": "labels", "zones": ["z-a", "z-b"]},
        {"name": "none", "nodes": 3, "hypernodes": "none"},
        {"name": "nojobset", "nodes": 1, "jobset": False},
    ],
}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    """A fresh simulator per test: tests change the members underneath."""
    with running_simulator(SCENARIO) as handle:
        yield handle


@pytest.fixture
def settings(settings):
    """Every member due at each resync; short member timeouts."""
    return settings.model_copy(update={"cluster_sync_interval": 0.0, "member_timeout": 2.0, "member_workers": 4})


@pytest.fixture
def api(settings, db) -> Iterator[TestClient]:
    with TestClient(create_app(settings, db, run_loops=False), headers=ADMIN) as client:
        yield client


@pytest.fixture
def members(settings) -> Iterator[MemberClients]:
    clients = MemberClients(settings)
    yield clients
    clients.close()


@pytest.fixture
def syncer(db, settings, members) -> Iterator[InventorySyncService]:
    service = InventorySyncService(db, settings, members, watch=False)
    yield service
    service.stop()


@pytest.fixture
def health(db, settings, members) -> Iterator[ClusterHealthService]:
    service = ClusterHealthService(db, settings, members)
    yield service
    service.stop()


def register(api: TestClient, sim: SimHandle, name: str, **fields) -> dict:
    answer = api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name), **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()


def expected_tree(sim: SimHandle, cluster: str, tiers: dict[int, str]) -> dict[str, tuple[int, str | None, set[str]]]:
    """The tree the member's node labels describe: name -> (tier, parent, nodes); `tiers` maps a
    tier to the node label whose values are its domains."""
    tree: dict[str, tuple[int, str | None, set[str]]] = {}
    for name in sim.cluster(cluster).node_names():
        labels = sim.cluster(cluster).node(name)["metadata"]["labels"]
        chain = [(tier, labels[key]) for tier, key in sorted(tiers.items()) if key in labels]
        for i, (tier, value) in enumerate(chain):
            parent = chain[i + 1][1] if i + 1 < len(chain) else None
            tree.setdefault(value, (tier, parent, set()))[2].add(name)
    return tree


LABEL_TIERS = {1: LEAF, 2: SPINE, 3: ZONE}
