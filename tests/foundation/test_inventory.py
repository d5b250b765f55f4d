"""The inventory's constraints hold on both backends, and kubeconfigs never reach the disk in clear."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import Cluster, Event, HyperNode, Job, Node, Placement, Queue, Tenant

SECRET_TOKEN = "sha256~very-secret-bearer-token-0123456789"
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://10.0.0.1:6443"}}}}]
users: [{{name: u, user: {{token: "{SECRET_TOKEN}"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
"""


def _cluster(cipher: KubeconfigCipher, name: str = "eu-west") -> Cluster:
    return Cluster(name=name, api_server="https://10.0.0.1:6443", kubeconfig_encrypted=cipher.encrypt(KUBECONFIG))


def test_kubeconfig_is_encrypted_at_rest(db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.write() as session:
        session.add(_cluster(cipher))
    with db.engine.connect() as connection:
        raw = connection.execute(text("SELECT * FROM clusters")).one()
    stored = b"".join(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode() for v in raw)
    assert SECRET_TOKEN.encode() not in stored
    assert b"10.0.0.1:6443" not in bytes(raw.kubeconfig_encrypted)
    assert cipher.decrypt(raw.kubeconfig_encrypted) == KUBECONFIG


def test_a_changed_secret_key_says_what_happened(settings):
    from cryptography.fernet import Fernet

    blob = KubeconfigCipher(settings.fernet_key()).encrypt(KUBECONFIG)
    with pytest.raises(ValueError, match="ARCHIPELAGO_SECRET_KEY changed"):
        KubeconfigCipher(Fernet.generate_key()).decrypt(blob)


def test_names_are_unique(db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.write() as session:
        session.add(_cluster(cipher))
    with pytest.raises(IntegrityError):
        with db.write() as session:
            session.add(_cluster(cipher))


def test_states_are_checked(db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with pytest.raises(IntegrityError):
        with db.write() as session:
            cluster = _cluster(cipher)
            cluster.state = "Sleeping"
            session.add(cluster)


def test_removing_a_cluster_removes_its_topology_but_keeps_placement_history(db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.write() as session:
        cluster = _cluster(cipher)
        cluster.nodes = [Node(name="n1", allocatable={"nvidia.com/gpu": 8000})]
        cluster.hypernodes = [HyperNode(name="leaf-0", tier=1, nodes=["n1"])]
        tenant = Tenant(name="research", namespaces=["research"])
        job = Job(tenant=tenant, queue=Queue(name="training", tenant=tenant), name="train",
                  namespace="research", manifest={})
        session.add_all([cluster, job])
        session.flush()
        session.add(Placement(job_id=job.id, cluster_id=cluster.id, cluster_name=cluster.name, state="Succeeded"))
    with db.write() as session:
        session.delete(session.scalars(select(Cluster)).one())
    with db.sessions() as session:
        assert session.scalars(select(Node)).all() == []
        assert session.scalars(select(HyperNode)).all() == []
        placement = session.scalars(select(Placement)).one()
        assert (placement.cluster_id, placement.cluster_name) == (None, "eu-west")


def test_a_tenant_with_queues_cannot_be_deleted(db):
    with db.write() as session:
        session.add(Queue(name="training", tenant=Tenant(name="research")))
    with pytest.raises(IntegrityError):
        with db.engine.begin() as connection:
            connection.execute(text("DELETE FROM tenants"))


def test_events_are_kept_in_order(db):
    with db.write() as session:
        session.add_all([Event(kind="cluster", object_id="eu-west", reason=f"R{i}", message=f"m{i}")
                         for i in range(3)])
    with db.sessions() as session:
        assert [e.reason for e in session.scalars(select(Event).order_by(Event.id))] == ["R0", "R1", "R2"]
