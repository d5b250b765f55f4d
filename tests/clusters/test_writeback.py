"""Writing the discovered tree back to its member as HyperNode objects (issue #48), on simulated members over real
HTTPS: opt-in per cluster, created, updated and deleted as the tree changes, never touching a HyperNode the broker did
not make, and needing a role the member grants only where a cluster opts in."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import select

from broker.services.inventory import InventorySyncService
from broker.store.db.models import Cluster, Event
from clusters import access
from clusters.recipes import hypernode_name
from clusters.sim.scenario import CLIQUE
from clusters.sim.testing import SimHandle, running_simulator
from clusters.system import MANAGED_BY
from tests.clusters.conftest import TOKEN, register
from tests.clusters.test_recipes import tree

NODE = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 4, "spine": 2}, "token": TOKEN},
    "clusters": [
        {"name": "nvl", "nodes": 8, "hypernodes": "empty", "fabric": "nvlink"},  # Volcano, no tree yet
        {"name": "bare", "nodes": 4, "hypernodes": "labels", "fabric": "nvlink"},  # no HyperNode CRD at all
    ],
}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO) as handle:
        yield handle


@pytest.fixture
def watched(syncer) -> InventorySyncService:
    """The inventory loop stepped by hand: each `run_once()` relists every member, writes it and writes its tree
    back (the same write a watch event leads to), with no wall clock to wait on."""
    return syncer


def on_member(sim: SimHandle, cluster: str) -> dict[str, dict]:
    member = sim.cluster(cluster)
    return {h["metadata"]["name"]: h for h in member.list(member.kinds["hypernodes.topology.volcano.sh"],
                                                           None, None, None)[0]}


def cliques(sim: SimHandle, cluster: str) -> dict[str, str]:
    member = sim.cluster(cluster)
    return {name: member.node(name)["metadata"]["labels"][CLIQUE] for name in member.node_names()}


def test_the_discovered_tree_is_written_back_and_follows_the_nodes_and_only_the_brokers_objects_change(
        api, sim, db, watched):
    register(api, sim, "nvl", topology_write_back=True)
    watched.run_once()
    clique = cliques(sim, "nvl")
    first, second = hypernode_name("clique", clique["node-00"]), hypernode_name("clique", clique["node-04"])
    assert set(on_member(sim, "nvl")) == {first, second, "zone-nvl-a"}
    objects = on_member(sim, "nvl")
    assert objects[first]["metadata"]["labels"] == {**MANAGED_BY, "topology.archipelago.io/recipe": "nvlink"}
    assert objects[first]["spec"] == {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": f"node-0{i}"}}} for i in range(4)]}
    assert objects["zone-nvl-a"]["spec"] == {"tier": 2, "members": [
        {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}} for name in sorted((first, second))]}
    assert objects[first]["status"] == {"nodeCount": 4} and objects["zone-nvl-a"]["status"] == {"nodeCount": 8}
    # its own objects are not the member's: the tree still comes from the labels, by the recipe
    assert api.get("/api/v1/clusters/nvl").json()["hypernode_source"] == "labels:nvlink"

    nvl = sim.cluster("nvl")
    for node in ("node-00", "node-01", "node-02", "node-03"):  # the first rack's nodes move to the second
        nvl.label_node(node, {CLIQUE: clique["node-04"]})
    watched.run_once()
    assert set(on_member(sim, "nvl")) == {second, "zone-nvl-a"}
    assert on_member(sim, "nvl")[second].get("status") == {"nodeCount": 8}
    assert len(on_member(sim, "nvl")[second]["spec"]["members"]) == 8
    assert set(tree(db, "nvl")) == {second, "zone-nvl-a"}

    # a HyperNode the broker did not make: the member's own tree now, which wins; the broker's objects go, its stays
    theirs = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "rack-a"},
              "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "^node-"}}}]}}
    nvl.create(nvl.kinds["hypernodes.topology.volcano.sh"], "", theirs, "kubectl")
    watched.run_once()
    assert set(on_member(sim, "nvl")) == {"rack-a"}
    assert on_member(sim, "nvl")["rack-a"]["spec"] == theirs["spec"]
    assert api.get("/api/v1/clusters/nvl").json()["hypernode_source"] == "crd"


def test_removing_the_cluster_deletes_the_hypernodes_written_back_and_leaves_the_members_own(api, sim, db, watched):
    register(api, sim, "nvl", topology_write_back=True)
    watched.run_once()
    assert len(on_member(sim, "nvl")) == 3
    nvl = sim.cluster("nvl")
    theirs = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "rack-a"},
              "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "node-00"}}}]}}
    nvl.create(nvl.kinds["hypernodes.topology.volcano.sh"], "", theirs, "kubectl")
    removed = api.delete("/api/v1/clusters/nvl")
    assert removed.status_code in (200, 204), removed.text
    assert set(on_member(sim, "nvl")) == {"rack-a"}


def test_write_back_off_deletes_the_brokers_objects(api, sim, db, watched):
    register(api, sim, "nvl", topology_write_back=True)
    watched.run_once()
    assert len(on_member(sim, "nvl")) == 3
    answer = api.patch("/api/v1/clusters/nvl", json={"topology_write_back": False})
    assert answer.status_code == 200 and answer.json()["topology_write_back"] is False
    watched.run_once()
    assert on_member(sim, "nvl") == {}
    assert set(tree(db, "nvl")) == {hypernode_name("clique", c) for c in set(cliques(sim, "nvl").values())} | \
        {"zone-nvl-a"}  # the broker's own tree stays


def test_write_back_needs_the_hypernode_crd_and_its_own_role_on_the_member(api, sim, db):
    bare = api.post("/api/v1/clusters", json={"name": "bare", "kubeconfig": sim.kubeconfig("bare"),
                                              "topology_write_back": True})
    assert bare.status_code == 422 and "does not serve hypernodes.topology.volcano.sh" in bare.json()["detail"]
    narrow = sim.service_account("nvl", "broker", access.cluster_role_rules())  # without the topology role
    refused = api.post("/api/v1/clusters", json={"name": "nvl", "kubeconfig": narrow, "topology_write_back": True})
    assert refused.status_code == 422
    assert "create hypernodes.topology.volcano.sh; delete hypernodes.topology.volcano.sh; patch " \
           "hypernodes.topology.volcano.sh; patch hypernodes/status.topology.volcano.sh" in refused.json()["detail"]
    assert "deploy/member-topology-rbac.yaml" in refused.json()["detail"]
    rules = access.cluster_role_rules() + access.topology_objects()[0]["rules"]
    granted = sim.service_account("nvl", "writer", rules)
    answer = api.post("/api/v1/clusters", json={"name": "nvl", "kubeconfig": granted, "topology_write_back": True})
    assert answer.status_code == 201, answer.text
    assert len(on_member(sim, "nvl")) == 0  # written by the inventory loop, not by registration
    pull = api.post("/api/v1/clusters", json={"name": "edge", "mode": "pull", "topology_write_back": True})
    assert pull.status_code == 422 and pull.json()["detail"].startswith("topology_write_back: a pull member")


def test_a_member_that_forbids_the_write_says_so_on_the_cluster(api, sim, db, watched):
    granted = sim.service_account("nvl", "writer", access.cluster_role_rules())
    assert api.post("/api/v1/clusters", json={"name": "nvl", "kubeconfig": granted}).status_code == 201
    assert api.patch("/api/v1/clusters/nvl", json={"topology_write_back": True}).status_code == 200
    watched.run_once()
    for _ in range(2):  # each sync tries (or, within its retry time, does not): one event, the error kept
        watched.run_once()
    with db.sessions() as session:
        cluster = session.scalar(select(Cluster).where(Cluster.name == "nvl"))
        assert cluster.last_error.startswith("topology write-back: ") and "Forbidden" in cluster.last_error
        assert len(session.scalars(select(Event).where(Event.reason == "SyncFailed")).all()) == 1
    assert on_member(sim, "nvl") == {}


def test_the_member_rbac_for_write_back_is_its_own_file_and_role():
    rendered = Path(__file__).resolve().parents[2] / "deploy" / "member-topology-rbac.yaml"
    assert rendered.read_text() == access.member_topology_rbac_yaml()
    assert set(access.required(True, write_back=True)) - set(access.required(True)) == {
        access.Permission(verb, "topology.volcano.sh", resource) for verb, resource in
        (("create", "hypernodes"), ("delete", "hypernodes"), ("patch", "hypernodes"), ("patch", "hypernodes/status"))}


def test_a_hypernode_made_by_someone_else_meanwhile_is_never_taken_over(sim):
    """The plan was made from a mirror that had not seen the member's own `clique-x` yet: the create is refused
    (409) and the object stays the member's; a delete of an object no longer the one the broker saw is refused too."""
    from clusters.member import MemberClient
    from clusters.recipes import BUILT_IN, derive
    from clusters.topology_writeback import desired, plan, write_back

    nvl = sim.cluster("nvl")
    kind = nvl.kinds["hypernodes.topology.volcano.sh"]
    theirs = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "clique-x"},
              "spec": {"tier": 3, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "node-00"}}}]}}
    nvl.create(kind, "", theirs, "kubectl")
    topology = derive({"n1": {CLIQUE: "x"}}, BUILT_IN["nvlink"])
    stale = plan(desired(topology, "nvlink"), {})  # the mirror saw nothing yet
    assert [b["metadata"]["name"] for b in stale.create] == ["clique-x"]
    ours_once = {"metadata": {"name": "clique-x", "uid": "an-older-uid", "labels": dict(MANAGED_BY)}}
    stale.delete = [("clique-x", ours_once["metadata"]["uid"])]
    client = MemberClient.from_kubeconfig(sim.kubeconfig("nvl"))
    try:
        write_back(client, stale)
    finally:
        client.close()
    assert on_member(sim, "nvl")["clique-x"]["spec"] == theirs["spec"]
    assert "labels" not in on_member(sim, "nvl")["clique-x"]["metadata"]
