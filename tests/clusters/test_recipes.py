"""Topology discovery by recipe (issue #48), on simulated members over real HTTPS: each built-in recipe finds the
tree its fabric's labels describe, `auto` chooses by the labels most nodes carry, an admin's recipe in Volcano's
shape, HyperNode objects win, a changed recipe rebuilds the tree at once, each watch event moves nodes in it, and a hard
tier-1 JobSet on a member described by NVLink cliques alone lands inside one clique."""

from __future__ import annotations

from typing import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from broker.services.inventory import flush
from broker.services.mirror import MemberMirror, relist_all
from broker.services.scheduler import SchedulerService
from broker.store.db.models import Cluster, HyperNode, Node, Placement
from clusters.member import NODES, MemberClient
from clusters.recipes import hypernode_name
from clusters.sim.scenario import AWS_LAYER, CLIQUE, GKE_BLOCK, GKE_SUBBLOCK, ZONE
from clusters.sim.testing import SimHandle, running_simulator
from tests.clusters.conftest import TOKEN, register

NODE = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 4, "spine": 2}, "token": TOKEN, "hypernodes": "labels"},
    "clusters": [
        {"name": "ec2", "nodes": 16, "fabric": "aws", "zones": ["us-east-1a", "us-east-1b"]},
        {"name": "gcp", "nodes": 16, "fabric": "gke", "zones": ["us-a", "us-b"]},
        {"name": "nvl", "nodes": 8, "fabric": "nvlink"},  # two racks of four
        {"name": "ultra", "nodes": 8, "fabric": ["aws", "nvlink"]},  # UltraServers: a clique under the layers
        {"name": "mixed", "pools": [{"name_prefix": "g", "nodes": 8, "fabric": "gke"},
                                                 {"name_prefix": "a", "nodes": 4, "fabric": "archipelago"}]},
        {"name": "volcano", "nodes": 8, "hypernodes": "crd", "fabric": ["archipelago", "aws"]},
    ],
}
AWS = [("layer3", f"{AWS_LAYER}3"), ("layer2", f"{AWS_LAYER}2"), ("layer1", f"{AWS_LAYER}1"), ("zone", ZONE)]
GKE = [("subblock", GKE_SUBBLOCK), ("block", GKE_BLOCK), ("zone", ZONE)]
NVLINK = [("clique", CLIQUE), ("zone", ZONE)]


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO) as handle:
        yield handle


def tree(db, cluster: str) -> dict[str, tuple[int, str | None, set[str]]]:
    with db.sessions() as session:
        return {h.name: (h.tier, h.parent, set(h.nodes))
                for h in session.scalars(select(HyperNode).join(Cluster).where(Cluster.name == cluster))}


def expected(sim: SimHandle, cluster: str, tiers: list[tuple[str, str]]) -> dict[str, tuple[int, str | None, set]]:
    """The tree the member's labels describe, by the recipe's tiers (prefix, label key), closest first: each domain
    named <prefix>-<value>, its parent the domain of the next tier the node carries."""
    out: dict[str, tuple[int, str | None, set]] = {}
    for node in sim.cluster(cluster).node_names():
        labels = sim.cluster(cluster).node(node)["metadata"]["labels"]
        chain = [(number, hypernode_name(prefix, labels[key]))
                 for number, (prefix, key) in enumerate(tiers, start=1) if key in labels]
        for i, (number, name) in enumerate(chain):
            out.setdefault(name, (number, chain[i + 1][1] if i + 1 < len(chain) else None, set()))[2].add(node)
    return out


def source(api: TestClient, cluster: str) -> str:
    return api.get(f"/api/v1/clusters/{cluster}").json()["hypernode_source"]


@pytest.mark.parametrize("cluster, recipe, tiers", [
    ("ec2", "aws", AWS), ("gcp", "gke", GKE), ("nvl", "nvlink", NVLINK), ("ultra", "aws", [("clique", CLIQUE), *AWS])])
def test_auto_finds_each_fabrics_tree_by_its_built_in_recipe(api, sim, db, cluster, recipe, tiers):
    register(api, sim, cluster)
    assert source(api, cluster) == f"labels:{recipe}"
    assert api.get(f"/api/v1/clusters/{cluster}").json()["warnings"] == []
    found = tree(db, cluster)
    assert found == expected(sim, cluster, tiers)
    assert {t for t, _, _ in found.values()} == set(range(1, len(tiers) + 1))
    if cluster == "ultra":  # the clique is the closest tier, where nodes carry it
        assert all(name.startswith("clique-") for name, (t, _, _) in found.items() if t == 1)


def test_auto_chooses_the_recipe_most_nodes_carry_and_says_which_nodes_only_partly_fit(api, sim, db):
    register(api, sim, "mixed")
    assert source(api, "mixed") == "labels:gke"
    found = tree(db, "mixed")
    assert sum(len(nodes) for t, _, nodes in found.values() if t == 1) == 8  # the gke pool's sub-blocks
    warnings = api.get("/api/v1/clusters/mixed").json()["warnings"]
    assert any(w.startswith("node a-08 has no cloud.google.com/gce-topology-subblock (tier 1), "
                            "cloud.google.com/gce-topology-block (tier 2) label of recipe gke") for w in warnings)


def test_hypernode_objects_win_over_any_recipe(api, sim, db):
    register(api, sim, "volcano", topology_recipe="aws")
    assert source(api, "volcano") == "crd"
    assert "root" in tree(db, "volcano")
    answer = api.patch("/api/v1/clusters/volcano", json={"topology_recipe": "gke"})
    assert answer.status_code == 200 and answer.json()["hypernode_source"] == "crd" and "root" in tree(db, "volcano")


def test_a_recipe_set_or_changed_by_an_admin_rebuilds_the_tree_at_once(api, sim, db):
    register(api, sim, "ec2", topology_recipe="nvlink")
    view = api.get("/api/v1/clusters/ec2").json()
    assert (view["topology_recipe"], view["hypernode_source"]) == ("nvlink", "labels:nvlink")
    assert {t for t, _, _ in tree(db, "ec2").values()} == {1}  # its zone alone
    assert any("no node carries a label of recipe nvlink" in w for w in view["warnings"])
    changed = api.patch("/api/v1/clusters/ec2", json={"topology_recipe": "aws"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["hypernode_source"] == "labels:aws" and changed.json()["warnings"] == []
    assert tree(db, "ec2") == expected(sim, "ec2", AWS)  # no sync ran in between
    wrong = api.patch("/api/v1/clusters/ec2", json={"topology_recipe": "azure"})
    assert wrong.status_code == 422
    assert wrong.json()["detail"] == "topology_recipe: no topology recipe 'azure'; one of auto, archipelago, aws, " \
                                     "gke, nvlink"
    assert register_refused(api, sim, "gcp", topology_recipe="azure").status_code == 422


def register_refused(api: TestClient, sim: SimHandle, name: str, **fields):
    return api.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name), **fields})


def test_an_admins_recipe_in_volcanos_shape(api, sim, db):
    levels = [{"nodeLabel": GKE_BLOCK}, {"nodeLabel": GKE_SUBBLOCK}, {"nodeLabel": "kubernetes.io/hostname"}]
    created = api.post("/api/v1/topology-recipes", json={"name": "blocks", "levels": levels})
    assert created.status_code == 201, created.text
    assert created.json() == {"name": "blocks", "tiers": [[GKE_SUBBLOCK], [GKE_BLOCK]]}
    register(api, sim, "gcp", topology_recipe="blocks")
    assert source(api, "gcp") == "labels:blocks"
    assert tree(db, "gcp") == expected(sim, "gcp", [("gce-topology-subblock", GKE_SUBBLOCK),
                                                    ("gce-topology-block", GKE_BLOCK)])
    listed = {r["name"]: r for r in api.get("/api/v1/topology-recipes").json()}
    assert listed["blocks"]["clusters"] == ["gcp"] and not listed["blocks"]["built_in"] and listed["aws"]["built_in"]
    assert api.delete("/api/v1/topology-recipes/blocks").status_code == 409  # gcp uses it
    assert api.post("/api/v1/topology-recipes", json={"name": "aws", "tiers": [["x"]]}).status_code == 422
    bad = api.post("/api/v1/topology-recipes", json={"name": "odd", "tiers": [["not a key!"]]})
    assert bad.status_code == 422 and "'not a key!' is not a label key" in bad.json()["detail"]
    back = api.patch("/api/v1/clusters/gcp", json={"topology_recipe": "auto"})
    assert back.json()["hypernode_source"] == "labels:gke"
    assert api.delete("/api/v1/topology-recipes/blocks").status_code == 204


class Watched:
    """nvl's mirror, kept by its real node watch, stepped: `step(n)` reads the next n node events of the member (they
    are in its watch history already) and writes the inventory, as the flusher would — no wall clock."""

    def __init__(self, sim: SimHandle, db, settings, cluster_id: int) -> None:
        self.db, self.settings, self.cluster_id = db, settings, cluster_id
        self.client = MemberClient.from_kubeconfig(sim.kubeconfig("nvl"))
        self.mirror = MemberMirror()
        relist_all(self.client, self.mirror)
        flush(db, settings, cluster_id, self.mirror)

    def step(self, events: int) -> None:
        stream = self.client.watch(NODES, self.mirror.resume["nodes"], timeout_seconds=60)
        try:
            for event in stream:
                if event.get("type") != "BOOKMARK":
                    self.mirror.apply("nodes", event)
                    events -= 1
                if not events:
                    break
        finally:
            stream.close()
        flush(self.db, self.settings, self.cluster_id, self.mirror)


@pytest.fixture
def racks(api, sim, db, settings) -> Iterator[tuple]:
    """nvl registered and watched: its two racks' cliques by node, and the tree's names for them."""
    register(api, sim, "nvl")
    nvl = sim.cluster("nvl")
    with db.sessions() as session:
        cluster_id = session.scalar(select(Cluster.id).where(Cluster.name == "nvl"))
    clique = {name: nvl.node(name)["metadata"]["labels"][CLIQUE] for name in nvl.node_names()}
    watched = Watched(sim, db, settings, cluster_id)
    yield nvl, clique, hypernode_name("clique", clique["node-00"]), hypernode_name("clique", clique["node-04"]), watched
    watched.client.close()


def members_of(db, name: str) -> set[str]:
    return tree(db, "nvl").get(name, (0, None, set()))[2]


def test_a_relabelled_node_moves_in_the_tree_at_the_next_watch_event(db, racks):
    nvl, clique, first, second, watched = racks
    nvl.label_node("node-03", {CLIQUE: clique["node-04"]})  # moved to the other rack
    watched.step(1)
    assert "node-03" in members_of(db, second)
    assert members_of(db, first) == {"node-00", "node-01", "node-02"}


def test_a_node_that_appears_joins_the_tree_and_one_that_vanishes_leaves_it(db, racks):
    nvl, clique, first, _, watched = racks
    nvl.add_node("node-new", resources=NODE, labels={CLIQUE: clique["node-00"], ZONE: "nvl-a"})
    watched.step(1)
    assert "node-new" in members_of(db, first)
    nvl.remove_node("node-01")
    watched.step(1)
    assert "node-01" not in members_of(db, "zone-nvl-a")
    assert members_of(db, first) == {"node-00", "node-02", "node-03", "node-new"}


def test_a_node_that_loses_a_label_joins_at_the_tiers_it_has_with_a_warning(api, db, racks):
    nvl, _, first, _, watched = racks
    nvl.label_node("node-02", {CLIQUE: None})
    watched.step(1)
    assert "node-02" not in members_of(db, first)
    assert "node-02" in members_of(db, "zone-nvl-a")
    assert any(w.startswith("node node-02 has no nvidia.com/gpu.clique (tier 1) label")
               for w in api.get("/api/v1/clusters/nvl").json()["warnings"])


def test_the_recipe_an_admin_sets_is_kept_by_the_watchs_next_write(api, db, racks):
    """Another recipe (its tree is the same here: a clique is every recipe's closest tier); the watch's next write,
    a cordon that changes no label, keeps it."""
    nvl, _, _, _, watched = racks
    found = tree(db, "nvl")
    assert api.patch("/api/v1/clusters/nvl", json={"topology_recipe": "aws"}).json()["hypernode_source"] == \
        "labels:aws"
    nvl.cordon("node-05")
    watched.step(1)
    assert _unschedulable(db, "node-05")
    assert source(api, "nvl") == "labels:aws" and tree(db, "nvl") == found


def _unschedulable(db, node: str) -> bool:
    with db.sessions() as session:
        return bool(session.scalar(select(Node.unschedulable).where(Node.name == node)))


def test_a_hard_tier_1_jobset_on_nvlink_cliques_alone_lands_inside_one_clique(api, sim, db, settings):
    """Two NVL racks of four 4-GPU nodes, described only by nvidia.com/gpu.clique (and a zone): a gang of four
    4-GPU pods within tier 1 fits one rack, and is placed on one, whole."""
    register(api, sim, "nvl")
    assert api.post("/api/v1/tenants", json={"name": "research"}).status_code == 201
    assert api.post("/api/v1/queues", json={"name": "training", "tenant": "research"}).status_code == 201
    container = {"name": "trainer", "image": "trainer:1", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "allreduce", "labels": {"kueue.x-k8s.io/queue-name": "training"},
        "annotations": {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "1"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": {"spec": {"restartPolicy": "Never",
                                                                      "containers": [container]}}}}}]}}
    submitted = api.post("/api/v1/jobs", json=jobset, params={"tenant": "research"})
    assert submitted.status_code == 201, submitted.text
    SchedulerService(db, settings).run_once()
    with db.sessions() as session:
        [placement] = session.scalars(select(Placement)).all()
        nodes = {a["node"] for a in placement.assignments}
    cliques = {name: (t, members) for name, (t, _, members) in tree(db, "nvl").items() if t == 1}
    assert placement.tier == 1 and placement.hypernode in cliques
    assert nodes == cliques[placement.hypernode][1] and len(nodes) == 4
