"""A dry run names every cluster, even when the job is stopped before any cluster is looked at
(broker/placement/cycle.py `dry_run`)."""

from __future__ import annotations

from broker.placement import ClusterVerdict, dry_run
from tests.placement.fixtures import cluster, fabric, job, queue, snapshot


def test_a_job_over_its_quota_gets_a_verdict_for_every_cluster_and_a_reason():
    state = snapshot([cluster("b", fabric("b-", leaves=1)), cluster("a", fabric("a-", leaves=1))],
                     [queue("q", quota=8)])
    answer = dry_run(state, job(gpus=8, pods=2))
    assert answer.placements == () and answer.preemptions == ()
    assert answer.waiting.message.startswith("queue q is at its quota of 8 GPUs")
    assert answer.clusters == (ClusterVerdict("a", None, ""), ClusterVerdict("b", None, ""))  # by name


def test_a_job_that_fits_has_each_clusters_score():
    state = snapshot([cluster("a", fabric("a-", leaves=1)), cluster("b", fabric("b-", leaves=1), state="Cordoned")],
                     [queue("q")])
    answer = dry_run(state, job(gpus=8))
    assert [p.cluster for p in answer.placements] == ["a"] and answer.waiting is None
    [a, b] = answer.clusters
    assert (a.cluster, a.score > 0, a.reason) == ("a", True, "")
    assert b == ClusterVerdict("b", None, "cordoned")
