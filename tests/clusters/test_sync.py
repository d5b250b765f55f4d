"""The inventory matches what the members hold, over real HTTPS: nodes, resources, HyperNode trees,
and every change on a member reaches it (by resync, and by watch between resyncs)."""

from __future__ import annotations

import time

import yaml
from kubernetes import client, config
from sqlalchemy import event, select

from broker.services import inventory as inventory_service
from broker.services.inventory import InventorySyncService
from broker.store.db.models import Cluster, Event, HyperNode, Node
from broker.store.inventory import cluster_capacity
from clusters.rules.quantity import to_milli
from clusters.sim.scenario import LEAF, SPINE
from tests.clusters.conftest import LABEL_TIERS, expected_tree, register

ZONE_ONLY_TREE = {3: LABEL_TIERS[3]}


def _nodes(db, cluster: str) -> dict[str, Node]:
    with db.sessions() as session:
        return {n.name: n for n in session.scalars(select(Node).join(Cluster).where(Cluster.name == cluster))}


def _tree(db, cluster: str) -> dict[str, tuple[int, str | None, set[str]]]:
    with db.sessions() as session:
        return {h.name: (h.tier, h.parent, set(h.nodes))
                for h in session.scalars(select(HyperNode).join(Cluster).where(Cluster.name == cluster))}


def _run_pods(sim, cluster: str, count: int, cpu: str = "2", gpu: str = "1") -> None:
    with config.new_client_from_config_dict(yaml.safe_load(sim.kubeconfig(cluster))) as api:
        for i in range(count):
            client.CoreV1Api(api).create_namespaced_pod("default", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"work-{i}"},
                "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {
                    "requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"nvidia.com/gpu": gpu}}}]}})
    sim.settle()


def test_nodes_and_resources_match_the_member(api, sim, db):
    register(api, sim, "crd")
    nodes = _nodes(db, "crd")
    assert sorted(nodes) == sim.cluster("crd").node_names()
    node = nodes["node-00"]
    assert node.allocatable == {"cpu": 8000, "memory": to_milli("32Gi"), "nvidia.com/gpu": 4000,
                                "pods": 110_000, "ephemeral-storage": to_milli("500Gi")}
    assert node.labels[LEAF] == "leaf-0" and node.ready and not node.unschedulable and node.used == {}
    view = api.get("/api/v1/clusters/crd").json()
    assert view["nodes"] == 12 and view["state"] == "Ready" and view["kubernetes_version"] == "v1.31.4"
    assert view["capacity"]["nvidia.com/gpu"] == {"allocatable_milli": 48000, "used_milli": 0, "free_milli": 48000,
                                                  "allocatable": "48", "used": "0", "free": "48"}
    assert "kubeconfig" not in view and "kubeconfig_encrypted" not in view


def test_used_resources_are_the_members_own_accounting(api, sim, db, syncer):
    register(api, sim, "crd")
    _run_pods(sim, "crd", 5)
    syncer.run_once()
    used = {name: node.used for name, node in _nodes(db, "crd").items() if node.used}
    assert used == sim.cluster("crd").usage() and len(used) >= 1
    assert sum(u["nvidia.com/gpu"] for u in used.values()) == 5000
    with db.sessions() as session:
        capacity = {(c.kind, c.name): c for c in cluster_capacity(session)}
    busiest = max(used, key=lambda n: used[n]["cpu"])
    assert capacity[("node", busiest)].free["cpu"] == 8000 - used[busiest]["cpu"]
    assert capacity[("hypernode", "root")].free["nvidia.com/gpu"] == 48000 - 5000
    assert capacity[("hypernode", "root")].used["pods"] == 5000

    sim.cluster("crd").finish_pods("default")
    syncer.run_once()
    assert all(node.used == {} for node in _nodes(db, "crd").values())


def test_a_registrations_list_older_than_the_loops_sync_does_not_overwrite_it(api, sim, db, syncer, monkeypatch):
    """The API lists a new member and writes its first inventory before it answers; a loop's sync (here, or in the
    replica whose lane has the member) may list it meanwhile and write first. The registration's list, written
    last, would put back nodes emptier than they are until the next change or resync."""
    listed_by_the_loop = inventory_service.relist_all

    def list_then_let_the_loop_sync(client, mirror) -> None:
        listed_by_the_loop(client, mirror)
        monkeypatch.setattr(inventory_service, "relist_all", listed_by_the_loop)  # only the registration's list
        _run_pods(sim, "crd", 5)
        assert syncer.run_once()["crd"].changed
    monkeypatch.setattr(inventory_service, "relist_all", list_then_let_the_loop_sync)
    register(api, sim, "crd")
    used = {name: node.used for name, node in _nodes(db, "crd").items() if node.used}
    assert used == sim.cluster("crd").usage() and sum(u["nvidia.com/gpu"] for u in used.values()) == 5000


def test_crd_tree_resolves_exact_regex_and_label_members(api, sim, db):
    register(api, sim, "crd")
    kinds = {h["metadata"]["name"]: next(iter(h["spec"]["members"][0]["selector"]))
             for h in sim.cluster("crd").list(sim.cluster("crd").kinds["hypernodes.topology.volcano.sh"],
                                              None, None, None)[0]}
    assert {kinds["leaf-0"], kinds["leaf-1"], kinds["leaf-2"]} == {"exactMatch", "regexMatch", "labelMatch"}
    expected = expected_tree(sim, "crd", {1: LEAF, 2: SPINE})
    expected["root"] = (3, None, set(sim.cluster("crd").node_names()))
    expected = {name: (tier, parent or ("root" if tier == 2 else None), nodes)
                for name, (tier, parent, nodes) in expected.items()}
    assert _tree(db, "crd") == expected
    view = api.get("/api/v1/clusters/crd").json()
    assert view["hypernode_source"] == "crd" and view["warnings"] == []
    root = view["hypernodes"][0]
    assert (root["name"], root["nodes"], root["free"]["nvidia.com/gpu"]) == ("root", 12, "48")
    assert [s["name"] for s in root["children"]] == ["spine-0", "spine-1"]
    assert [leaf["nodes"] for leaf in root["children"][0]["children"]] == [4, 4]


def test_labels_tree_is_derived_from_node_labels(api, sim, db):
    register(api, sim, "labels")
    expected = expected_tree(sim, "labels", LABEL_TIERS)
    assert {name for name, (tier, _, _) in expected.items() if tier == 3} == {"z-a", "z-b"}
    assert _tree(db, "labels") == expected
    assert api.get("/api/v1/clusters/labels").json()["hypernode_source"] == "labels:archipelago"


def test_none_mode_has_only_zones_and_no_labels_means_no_tree(api, sim, db, settings, syncer):
    register(api, sim, "none")
    assert _tree(db, "none") == expected_tree(sim, "none", ZONE_ONLY_TREE) == {
        "none-a": (3, None, set(sim.cluster("none").node_names()))}

    syncer.settings = settings.model_copy(update={"topology_tier_labels": [[LEAF], [SPINE]]})
    syncer.run_once()
    assert _tree(db, "none") == {}
    assert api.get("/api/v1/clusters/none").json()["hypernode_source"] == "none"


def test_member_changes_reach_the_inventory_on_resync(api, sim, db, syncer):
    register(api, sim, "crd")
    register(api, sim, "labels")
    crd, labels = sim.cluster("crd"), sim.cluster("labels")
    crd.add_node("node-new", resources={"cpu": "16", "memory": "64Gi"}, labels={LEAF: "leaf-2", SPINE: "spine-1"})
    crd.cordon("node-01")
    crd.label_node("node-08", {LEAF: "leaf-0"})  # leaf-2 selects by label: node-08 leaves it
    labels.label_node("node-09", {LEAF: "leaf-0", SPINE: "spine-0", LABEL_TIERS[3]: "z-a"})
    labels.remove_node("node-00")
    syncer.run_once()

    nodes = _nodes(db, "crd")
    assert nodes["node-new"].allocatable["cpu"] == 16000 and nodes["node-01"].unschedulable
    assert nodes["node-08"].labels[LEAF] == "leaf-0"
    tree = _tree(db, "crd")
    assert "node-08" not in tree["leaf-2"][2] and "node-new" in tree["leaf-2"][2]
    assert "node-new" in tree["root"][2]
    assert _tree(db, "labels") == expected_tree(sim, "labels", LABEL_TIERS)
    assert "node-00" not in _nodes(db, "labels")
    with db.sessions() as session:
        crd_id = session.scalar(select(Cluster.id).where(Cluster.name == "crd"))
        capacity = {(c.kind, c.name): c for c in cluster_capacity(session, crd_id)}
    assert capacity[("node", "node-01")].free == {r: 0 for r in capacity[("node", "node-01")].allocatable}


def test_unchanged_members_cause_no_inventory_writes(api, sim, db, syncer):
    register(api, sim, "crd")
    register(api, sim, "labels")
    writes: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) and \
                any(t in statement for t in ("nodes", "hypernodes", "events")):
            writes.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        results = syncer.run_once()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    assert set(results) == {"crd", "labels"} and not any(r.changed for r in results.values())
    assert writes == []


def test_a_slow_member_times_out_without_holding_up_the_others(api, sim, db, syncer):
    register(api, sim, "crd")
    register(api, sim, "labels")
    sim.cluster("labels").cordon("node-03")
    sim.make_slow("crd", 30)
    try:
        results = syncer.run_once()
    finally:
        sim.heal("crd")
    assert "did not answer in time" in results["crd"]
    assert results["labels"].nodes_changed == 1 and _nodes(db, "labels")["node-03"].unschedulable
    assert syncer.members[next(i for i, m in syncer.members.items() if m.failures)].due > time.monotonic()
    with db.sessions() as session:
        crd = session.scalar(select(Cluster).where(Cluster.name == "crd"))
        assert "did not answer in time" in crd.last_error and crd.state == "Ready"
        assert session.scalar(select(Event).where(Event.reason == "SyncFailed")) is not None


def test_watches_bring_changes_between_resyncs(api, sim, db, settings, members):
    register(api, sim, "crd")
    service = InventorySyncService(db, settings.model_copy(update={"cluster_sync_interval": 3600.0}), members)
    try:
        service.run_once()
        assert {w.kind for w in service.members[1].watches} == {"nodes", "pods", "hypernodes"}
        sim.cluster("crd").cordon("node-02")
        _run_pods(sim, "crd", 2)
        _wait_for(lambda: _nodes(db, "crd")["node-02"].unschedulable and
                  {n: x.used for n, x in _nodes(db, "crd").items() if x.used} == sim.cluster("crd").usage())
        sim.cluster("crd").finish_pods("default")
        sim.cluster("crd").label_node("node-04", {LEAF: "elsewhere"})  # regexMatch keeps it in leaf-1
        sim.cluster("crd").label_node("node-09", {LEAF: "elsewhere"})  # labelMatch drops it from leaf-2
        _wait_for(lambda: all(not x.used for x in _nodes(db, "crd").values()) and
                  "node-09" not in _tree(db, "crd")["leaf-2"][2])
        assert "node-04" in _tree(db, "crd")["leaf-1"][2]
    finally:
        service.stop()


def test_a_resync_lists_nothing_while_every_watch_is_open(api, sim, db, settings, members):
    register(api, sim, "crd")
    service = InventorySyncService(db, settings, members)  # every member due on every pass
    try:
        service.run_once()
        watches = service.members[1].watches
        _wait_for(lambda: all(w.open for w in watches))
        start = time.monotonic()
        service.run_once()
        asked = [(r.path, r.query.get("watch")) for r in sim.requests("crd") if r.at >= start]
        assert [a for a in asked if a[1] != "true"] == [("/apis", None)]  # discovery, one request for every group
        watches[0].stop()
        watches[0].join(10)
        start = time.monotonic()
        service.run_once()  # a watch is down: relist, from the watch cache
        lists = {r.path: r.query.get("resourceVersion") for r in sim.requests("crd")
                 if r.at >= start and r.query.get("watch") != "true" and "limit" in r.query}
        assert lists == {"/api/v1/nodes": "0", "/api/v1/pods": "0", "/apis/topology.volcano.sh/v1alpha1/hypernodes": "0"}
    finally:
        service.stop()


def _wait_for(condition, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "the inventory did not catch up within the deadline"
        time.sleep(0.02)
