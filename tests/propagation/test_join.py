"""`archipelago clusters join` / `unjoin` through the CLI, against a broker served over HTTP and a simulated
member whose RBAC is enforced: the joined member runs a JobSet on the least-privilege identity the join
made, that identity is refused anything outside its ClusterRole, the admin credential never reaches the
broker, and unjoin takes everything away again."""

from __future__ import annotations

import json
from typing import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from sqlalchemy import select
from typer.testing import CliRunner

from api.app import create_app
from broker.cli.app import app as cli
from broker.process.settings import get_settings
from broker.process.testing import TENANTS, jobset
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import Cluster
from clusters import access
from clusters.sim.resources import CLUSTERROLEBINDINGS, CLUSTERROLES, NAMESPACES, SECRETS, SERVICEACCOUNTS
from tests.propagation.conftest import ADMIN, Federation
from tests.servers import serving


@pytest.fixture
def broker(settings, db, monkeypatch) -> Iterator[str]:
    """The broker's API over HTTP, for the CLI."""
    with serving(create_app(settings, db, run_loops=False)) as url:
        monkeypatch.setenv("ARCHIPELAGO_SERVER", url)
        monkeypatch.setenv("ARCHIPELAGO_TOKEN", "admin-test-token")
        monkeypatch.setenv("ARCHIPELAGO_CONFIG", "/nonexistent/config.yaml")
        get_settings.cache_clear()
        yield url
        get_settings.cache_clear()


@pytest.fixture
def admin_kubeconfig(sim, tmp_path):
    def write(name: str, text: str | None = None):
        path = tmp_path / f"{name}-admin.kubeconfig"
        path.write_text(text or sim.kubeconfig(name))
        return str(path)
    return write


def run(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def _objects(sim, name: str) -> dict[str, dict | None]:
    member = sim.cluster(name)
    with member.lock:
        return {kind.kind: member.store.get(kind.key, namespace, key) for kind, namespace, key in [
            (NAMESPACES, "", "archipelago-system"), (SERVICEACCOUNTS, "archipelago-system", "archipelago-broker"),
            (CLUSTERROLES, "", "archipelago-broker"), (CLUSTERROLEBINDINGS, "", "archipelago-broker"),
            (SECRETS, "archipelago-system", "archipelago-broker-token")]}


def _stored_kubeconfig(db, settings, name: str) -> str:
    with db.sessions() as session:
        blob = session.scalar(select(Cluster.kubeconfig_encrypted).where(Cluster.name == name))
    return KubeconfigCipher(settings.fernet_key()).decrypt(blob)


def test_a_joined_member_runs_a_jobset_on_a_least_privilege_identity(broker, admin_kubeconfig, sim, settings, db):
    joined = run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"), "--label", "region=eu",
                 "-o", "json")
    assert joined.exit_code == 0, joined.output
    assert yaml.safe_load(joined.output)["state"] == "Ready"
    objects = _objects(sim, "eu-west")
    assert objects["ClusterRole"]["rules"] == access.cluster_role_rules()
    assert objects["ClusterRoleBinding"]["subjects"][0]["name"] == "archipelago-broker"

    stored = _stored_kubeconfig(db, settings, "eu-west")
    admin_token = sim.cluster("eu-west").token
    assert admin_token not in stored  # the broker holds the ServiceAccount's token, never the admin's
    broker_config = yaml.safe_load(stored)
    assert broker_config["clusters"][0]["cluster"] == \
        yaml.safe_load(sim.kubeconfig("eu-west"))["clusters"][0]["cluster"]  # same server, same CA
    with config.new_client_from_config_dict(broker_config) as theirs:
        core = client.CoreV1Api(theirs)
        assert core.list_node().items
        with pytest.raises(ApiException) as raised:  # outside its ClusterRole
            core.list_secret_for_all_namespaces()
        assert raised.value.status == 403
        assert json.loads(raised.value.body)["message"] == (
            'secrets is forbidden: User "system:serviceaccount:archipelago-system:archipelago-broker" cannot list '
            'resource "secrets" in API group "" at the cluster scope')
        with pytest.raises(ApiException) as raised:
            client.RbacAuthorizationV1Api(theirs).delete_cluster_role("archipelago-broker")
        assert raised.value.status == 403

    with TestClient(create_app(settings, db, run_loops=False), headers=ADMIN) as api:
        for tenant, queue in TENANTS[:1]:
            assert api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).status_code == 201
            assert api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).status_code == 201
        federation = Federation(sim, api, db, settings)
        try:
            job = federation.submit(jobset("trained"))
            done = federation.until_state(job, "Succeeded", seconds=30)
            assert [p["cluster"] for p in done["placements"]] == ["eu-west"]
            assert [c["metadata"]["namespace"] for c in federation.copies(job)] == ["team-a"]
            # the least-privilege identity relabels the namespace it made when the tenant's level changes (RBAC: patch)
            assert api.patch("/api/v1/tenants/team-a", json={"pod_security": "restricted"}).status_code == 200
            federation.dispatcher.run_once()
            member = sim.cluster("eu-west")
            with member.lock:
                labels = member.get(NAMESPACES, "", "team-a")["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        finally:
            federation.close()

    again = run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"))
    assert again.exit_code == 0, again.output
    assert "joined already" in again.output
    assert _stored_kubeconfig(db, settings, "eu-west") == stored


def test_unjoin_removes_the_cluster_and_the_member_objects(broker, admin_kubeconfig, sim, settings, db):
    assert run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west")).exit_code == 0
    broker_config = yaml.safe_load(_stored_kubeconfig(db, settings, "eu-west"))
    unjoined = run("clusters", "unjoin", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"))
    assert unjoined.exit_code == 0, unjoined.output
    sim.settle()  # the namespace controller empties the terminating namespace
    assert _objects(sim, "eu-west") == dict.fromkeys(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret"])
    assert "eu-west" not in run("clusters", "list").output
    with config.new_client_from_config_dict(broker_config) as theirs, pytest.raises(ApiException) as raised:
        client.CoreV1Api(theirs).list_node()
    assert raised.value.status == 401  # its token died with its ServiceAccount
    assert run("clusters", "unjoin", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west")).exit_code == 0


def test_join_with_topology_write_back_grants_its_role_and_unjoin_takes_it_away(broker, admin_kubeconfig, sim, db):
    """Issue #48: the broker's ClusterRole grows only where a cluster opts in to write its tree back."""
    def topology_role():
        member = sim.cluster("eu-west")
        with member.lock:
            return (member.store.get(CLUSTERROLES.key, "", access.TOPOLOGY_NAME),
                    member.store.get(CLUSTERROLEBINDINGS.key, "", access.TOPOLOGY_NAME))

    joined = run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"), "--topology-write-back",
                 "-o", "json")
    assert joined.exit_code == 0, joined.output
    assert yaml.safe_load(joined.output)["topology_write_back"] is True  # registration checked the role is held
    role, binding = topology_role()
    assert role["rules"] == access.topology_objects()[0]["rules"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "archipelago-broker",
                                    "namespace": "archipelago-system"}]
    assert run("clusters", "unjoin", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west")).exit_code == 0
    assert topology_role() == (None, None)


def test_join_errors_are_one_line(broker, admin_kubeconfig, sim, db):
    def refused(*args: str) -> str:
        result = run("clusters", *args)
        assert result.exit_code == 1 and result.output.strip().count("\n") == 0, result.output
        return result.output.strip()

    unreachable = yaml.safe_load(sim.kubeconfig("eu-west"))
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9/x"
    assert refused("join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west", yaml.safe_dump(unreachable))) == \
        "archipelago: cannot reach https://127.0.0.1:9/x: Failed to establish a new connection: " \
        "[Errno 111] Connection refused"

    no_rbac = sim.service_account("eu-west", "no-rbac", [{"apiGroups": [""], "verbs": ["create", "patch", "get"],
                                                          "resources": ["namespaces", "serviceaccounts", "secrets"]}])
    not_allowed = refused("join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west", no_rbac))
    assert not_allowed.startswith("archipelago: the admin kubeconfig's identity may not create ClusterRole "
                                  "archipelago-broker: ")
    assert not_allowed.endswith('cannot patch resource "clusterroles" in API group "rbac.authorization.k8s.io" at '
                                "the cluster scope")

    outside = run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"), "--namespace", "default")
    assert outside.exit_code == 2  # unjoin deletes that namespace: it must be the broker's own
    assert outside.output.strip() == "archipelago: --namespace must start with 'archipelago-': unjoin deletes it, " \
                                     "so it must be the broker's own"

    assert run("clusters", "add", "us-east", "--kubeconfig", admin_kubeconfig("us-east")).exit_code == 0
    assert refused("join", "us-east", "--kubeconfig", admin_kubeconfig("eu-west")) == (
        f"archipelago: the name us-east is taken: the broker has it for {sim.cluster_url('us-east')}, not "
        f"{sim.cluster_url('eu-west')}; choose another name")
    assert _objects(sim, "eu-west")["ClusterRole"] is None  # refused before anything was made on the member


@pytest.mark.parametrize("scenario", [{
    "defaults": {"node": {"cpu": "64", "memory": "512Gi", "pods": "110"}, "topology": {"leaf": 2, "spine": 1},
                 "duration": "60s", "version": "v1.34.1"},
    "clusters": [{"name": "eu-west", "nodes": 1, "devices": {"driver": "gpu.nvidia.com", "count": 4}}]}])
def test_a_joined_member_runs_a_jobset_claiming_devices_on_its_least_privilege_identity(broker, admin_kubeconfig, sim,
                                                                                        settings, db):
    """A real member's RBAC: the broker's ClusterRole must let it make the claim templates as well as the JobSet."""
    from tests.propagation.test_devices import claiming, devices_of, exactly, submit, template
    from clusters.sim.resources import RESOURCECLAIMS

    joined = run("clusters", "join", "eu-west", "--kubeconfig", admin_kubeconfig("eu-west"), "-o", "json")
    assert joined.exit_code == 0, joined.output
    with TestClient(create_app(settings, db, run_loops=False), headers=ADMIN) as api:
        for tenant, queue in TENANTS[:1]:
            assert api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).status_code == 201
            assert api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).status_code == 201
        federation = Federation(sim, api, db, settings)
        try:
            job = submit(federation, claiming("claims", "gpus"), template("gpus", exactly("gpu", "gpu.nvidia.com", 2)))
            assert federation.until_state(job, "Running")["placements"][0]["cluster"] == "eu-west"
            member = sim.cluster("eu-west")
            with member.lock:
                claims = member.list(RESOURCECLAIMS, "team-a", None, None)[0]
            assert len(devices_of(claims)) == 2
        finally:
            federation.close()
