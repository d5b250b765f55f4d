"""Nodes as the kube-scheduler sees them (issue 11, cases 4-6): cordoned and NotReady nodes are free
nowhere, the pod's own required node affinity and the node's pod limit decide where its pods may go,
and a job no cluster could ever run is told so by placement's own filters over empty clusters."""

from dataclasses import replace

from broker.engine.jobset import parse_jobset
from broker.engine.placement import Config, dry_run, schedule
from broker.engine.placement.feasibility import empty, never_fits

from .fixtures import GPU, cluster, fabric, hard, job, manifest, node, queue, snapshot

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def eighteen_leaves(change):
    """18 leaves of 4 nodes; `change(node)` for every node outside leaf-9 (which sorts last by name)."""
    nodes, hypernodes = fabric(leaves=18, nodes_per_leaf=4, leaves_per_spine=18)
    return tuple(n if n.name.startswith("leaf-9-") else change(n) for n in nodes), hypernodes


def only(result):
    (placement,) = result.placements
    return placement


# -- case 4: unschedulable nodes are free nowhere ------------------------------------------------------

def test_a_hard_gang_finds_the_one_leaf_left_when_the_other_17_are_cordoned():
    s = snapshot([cluster("eu", eighteen_leaves(lambda n: replace(n, unschedulable=True)))], [queue("q")])
    placement = only(schedule(s, [job(pods=4, annotations=hard(1))]))
    assert placement.hypernode == "leaf-9"


def test_cordoned_nodes_count_in_no_free_total():
    s = snapshot([cluster("eu", eighteen_leaves(lambda n: replace(n, unschedulable=True)))], [queue("q")])
    index = s.clusters["eu"]
    assert index.free_total[GPU] == 4 * 8_000
    assert index.hypernodes["leaf-0"].free.get(GPU, 0) == 0 and index.hypernodes["leaf-9"].free[GPU] == 32_000
    assert index.hypernodes["spine-0"].free[GPU] == 32_000 and index.largest_free(GPU, 2) == 32_000
    answer = dry_run(s, job(pods=5))
    assert answer.waiting.clusters["eu"] == "needs 40 GPUs; 32 GPUs free"


def test_leaves_whose_nodes_the_pods_may_not_use_do_not_use_up_the_tier():
    """17 leaves of nodes tainted for maintenance sort before the clean one; the search skips them uncounted."""
    s = snapshot([cluster("eu", eighteen_leaves(lambda n: replace(n, taints=(TAINT,))))], [queue("q")])
    placement = only(schedule(s, [job(pods=4, annotations=hard(1))], Config(max_candidates_per_tier=2)))
    assert placement.hypernode == "leaf-9"


def test_every_node_cordoned_is_said_in_words():
    s = snapshot([cluster("eu", (tuple(replace(n, unschedulable=True) for n in fabric()[0]), fabric()[1]))],
                 [queue("q")])
    (waiting,) = schedule(s, [job()]).waiting.values()
    assert waiting.clusters["eu"] == "no node can take a pod of workers: 32 of 32 nodes cordoned or not ready"


# -- case 5: the pod's required node affinity and the node's pod limit ---------------------------------

def with_affinity(terms, **kwargs):
    body = manifest(**kwargs)
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return body


def pending(body):
    from broker.engine.placement import PendingJob
    return PendingJob(body["metadata"]["name"], "t", "q", 0, 0.0, parse_jobset(body))


def test_required_node_affinity_terms_are_ored_and_each_is_an_and_of_labels_and_fields():
    labels = lambda leaf, i: {"rack": str(i), "gen": "h100" if i % 2 else "a100"}  # noqa: E731
    s = snapshot([cluster("eu", fabric(leaves=2, nodes_per_leaf=8, node_labels=labels))], [queue("q")])
    terms = [{"matchExpressions": [{"key": "gen", "operator": "In", "values": ["h100"]},
                                   {"key": "rack", "operator": "Gt", "values": ["4"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["leaf-1-n0"]}]}]
    placement = only(schedule(s, [pending(with_affinity(terms, parts=(("workers", 1, 5, 8),)))]))
    assert set(placement.node_names()) == {"leaf-0-n5", "leaf-0-n7", "leaf-1-n5", "leaf-1-n7", "leaf-1-n0"}


def test_no_node_matching_the_affinity_is_said_in_words():
    s = snapshot([cluster("eu")], [queue("q")])
    terms = [{"matchExpressions": [{"key": "gen", "operator": "Exists"}]}]
    (waiting,) = schedule(s, [pending(with_affinity(terms))]).waiting.values()
    assert waiting.clusters["eu"] == ("no node can take a pod of workers: 32 of 32 nodes do not match its "
                                      "node selector or required node affinity")


def test_a_node_takes_no_more_pods_than_its_pod_limit_counting_those_already_there():
    small = {"cpu": 64_000, "memory": 512 * 2**30 * 1000, GPU: 8_000, "pods": 3_000}
    nodes = (node("a", used_gpus=0), node("b"))
    nodes = (replace(nodes[0], allocatable=small, used={"pods": 2_000}), replace(nodes[1], allocatable=small))
    s = snapshot([cluster("eu", (nodes, ()))], [queue("q")])
    placement = only(schedule(s, [job(pods=4, gpus=1)]))
    assert placement.node_pods == {"a": 1, "b": 3}
    assert placement.node_usage["a"]["pods"] == 1_000
    (waiting,) = schedule(s, [job(pods=1, gpus=1)]).waiting.values()
    assert waiting.clusters["eu"] == "needs 1 pods; 0 pods free"


def test_an_affinity_the_api_server_would_refuse_is_refused_with_its_path():
    import pytest
    from broker.engine.jobset import JobSetError
    two_names = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]
    with pytest.raises(JobSetError) as refused:
        parse_jobset(with_affinity(two_names))
    assert refused.value.path.endswith("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                                       ".matchFields[0]")
    assert "exactly one value" in refused.value.message


# -- case 6: what no cluster could ever run ------------------------------------------------------------

def test_never_fits_uses_the_selector_taints_and_the_hard_bound():
    clusters = [empty(cluster("ap", labels={"region": "ap"})),
                empty(cluster("eu", labels={"region": "eu"}, taints=[TAINT]))]
    selector = {"archipelago.io/cluster-selector": "region=us"}
    assert never_fits(clusters, parse_jobset(manifest(annotations=selector))) == {
        "ap": "labels do not match the cluster selector region=us",
        "eu": "labels do not match the cluster selector region=us"}
    reasons = never_fits(clusters, parse_jobset(manifest(annotations={"archipelago.io/cluster-selector": "region=eu"})))
    assert reasons["eu"] == "has taint maintenance=true:NoSchedule that workers does not tolerate"
    assert never_fits(clusters[:1], parse_jobset(manifest(parts=(("workers", 1, 9, 8),), annotations=hard(1)))) == {
        "ap": "needs 72 GPUs in one tier-1 HyperNode; the largest free one has 64"}
    assert never_fits(clusters[:1], parse_jobset(manifest(parts=(("workers", 1, 8, 8),), annotations=hard(1)))) == {}


def test_what_is_down_or_cordoned_now_may_come_back_so_it_is_not_never():
    nodes, hypernodes = fabric()
    cordoned = tuple(replace(n, unschedulable=True, used={GPU: 8_000},
                             taints=({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},))
                     for n in nodes)
    clusters = [empty(cluster("eu", (cordoned, hypernodes), state="NotReady", jobset_crd=False))]
    assert never_fits(clusters, parse_jobset(manifest(parts=(("workers", 1, 32, 8),)))) == {}


def test_a_split_job_is_never_only_when_one_part_fits_no_cluster():
    clusters = [empty(cluster("a", fabric(leaves=1))), empty(cluster("b", fabric(leaves=1)))]
    split = {"archipelago.io/placement": "split"}
    two_halves = parse_jobset(manifest(parts=(("x", 1, 8, 8), ("y", 1, 8, 8)), annotations=split))
    assert never_fits(clusters, two_halves) == {}
    too_big = parse_jobset(manifest(parts=(("x", 1, 8, 8), ("y", 1, 9, 8)), annotations=split))
    assert never_fits(clusters, too_big) == {"a": "y: needs 72 GPUs; 64 GPUs free", "b": "y: needs 72 GPUs; 64 GPUs free"}


def test_a_cluster_whose_nodes_were_never_read_gets_the_benefit_of_the_doubt():
    assert never_fits([empty(cluster("new", ((), ())))], parse_jobset(manifest(parts=(("w", 1, 99, 8),)))) == {}
