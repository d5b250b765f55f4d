"""API fixtures: the app on a real database (both backends), an admin client, tenant clients."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from broker.store.db.models import Cluster, HyperNode, Node
from clusters.rules.quantity import to_milli

ADMIN = {"Authorization": "Bearer admin-test-token"}


@pytest.fixture
def app(settings, db):
    return create_app(settings, db, run_loops=False)


@pytest.fixture
def admin(app):
    with TestClient(app, headers=ADMIN) as client:
        yield client


def make_tenant(admin: TestClient, name: str, *, queues: dict[str, dict] | None = None) -> TestClient:
    """A tenant with its queues and a client holding its own token."""
    assert admin.post("/api/v1/tenants", json={"name": name}).status_code == 201
    for queue, fields in (queues or {f"{name}-default": {}}).items():
        answer = admin.post("/api/v1/queues", json={"name": queue, "tenant": name, **fields})
        assert answer.status_code == 201, answer.text
    token = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": name}).json()["token"]
    return TestClient(admin.app, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def research(admin):
    with make_tenant(admin, "research", queues={"training": {"weight": 2, "nominal_quota": {"nvidia.com/gpu": "64"}},
                                               "eval": {}}) as client:
        yield client


@pytest.fixture
def vision(admin):
    with make_tenant(admin, "vision") as client:
        yield client


def add_cluster_with_leaves(session, cipher, name: str, leaves: int, labels: dict) -> None:
    """A Ready cluster of `leaves` tier-1 HyperNodes of 4 eight-GPU nodes each, under one spine."""
    cluster = Cluster(name=name, api_server=f"https://{name}", kubeconfig_encrypted=cipher.encrypt("x"),
                      state="Ready", jobset_crd=True, labels=labels)
    allocatable = {"nvidia.com/gpu": 8000, "cpu": 64000, "memory": to_milli("512Gi")}
    nodes, hypernodes = [], []
    for leaf in range(leaves):
        members = [f"{name}-l{leaf}-n{i}" for i in range(4)]
        nodes += [Node(name=n, allocatable=allocatable, used={}) for n in members]
        hypernodes.append(HyperNode(name=f"leaf-{leaf}", tier=1, parent="spine-0", nodes=members))
    hypernodes.append(HyperNode(name="spine-0", tier=2, parent=None, nodes=[n.name for n in nodes]))
    cluster.nodes, cluster.hypernodes = nodes, hypernodes
    session.add(cluster)
