"""Named cases of the forecast (issue #46): each waiting job's expected start, where, and after which jobs' end."""

from __future__ import annotations

from broker.engine.forecast import Limits, forecast
from broker.engine.placement import Config

from tests.placement.fixtures import cluster, fabric, hard, job, queue, running, snapshot

SPLIT = {"archipelago.io/placement": "split"}
NOW = 1_000.0


EXACT = Limits(resolution_s=1.0, relative_resolution=0.0)  # each end a step of its own: the cases' ends are minutes apart


def play(clusters, queues, work, pending, ends, runtimes=None, limits=EXACT, now=NOW, config=Config()):
    """The forecast over a snapshot of its own, with every pending job running 3,600 s unless told otherwise."""
    runtimes = {j.id: 3600.0 for j in pending} | (runtimes or {})
    return forecast(snapshot(clusters, queues, running=work, now=now), pending, work, ends, runtimes, config, limits)


def test_on_an_empty_fleet_it_starts_now():
    pending = job("q", gpus=8, pods=2, submitted_at=NOW)
    [expected] = play([cluster("eu", fabric(leaves=1, nodes_per_leaf=4))], [queue("q")], [], [pending], {}).values()
    assert (expected.start, expected.cluster, expected.hypernode, expected.after) == (NOW, "eu", "leaf-0", ())


def test_a_queue_at_its_quota_starts_when_its_running_work_ends():
    """q (16 GPUs of quota) runs two 8-GPU jobs ending at +100 and +200; the cluster has room: the quota holds it."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=4))
    work = [running("r1", "eu", [eu.nodes[0].name]), running("r2", "eu", [eu.nodes[1].name])]
    pending = job("q", gpus=8, submitted_at=NOW)
    [expected] = play([eu], [queue("q", quota=16)], work, [pending], {"r1": NOW + 100, "r2": NOW + 200}).values()
    assert (expected.start, expected.cluster, expected.after) == (NOW + 100, "eu", ("r1",))


def test_a_gang_waits_for_a_hypernode_to_drain():
    """A gang of four 8-GPU pods within one leaf (tier 1); leaf-0's work ends at +300, leaf-1's at +100."""
    eu = cluster("eu", fabric(leaves=2, nodes_per_leaf=4))
    work = [running("on-leaf-0", "eu", [eu.nodes[0].name]), running("on-leaf-1", "eu", [eu.nodes[4].name])]
    gang = job("q", gpus=8, pods=4, annotations=hard(1), submitted_at=NOW)
    [expected] = play([eu], [queue("q")], work, [gang], {"on-leaf-0": NOW + 300, "on-leaf-1": NOW + 100}).values()
    assert (expected.start, expected.hypernode, expected.after) == (NOW + 100, "leaf-1", ("on-leaf-1",))


def test_a_split_job_starts_when_every_part_has_room():
    """Two one-node clusters, each busy: eu's work ends at +50, us's at +80. Part a fits eu at +50, but a gang
    starts whole: both parts at +80."""
    eu = cluster("eu", fabric("eu-", leaves=1, nodes_per_leaf=1))
    us = cluster("us", fabric("us-", leaves=1, nodes_per_leaf=1))
    work = [running("r-eu", "eu", [eu.nodes[0].name]), running("r-us", "us", [us.nodes[0].name])]
    split = job("q", parts=(("a", 1, 1, 8), ("b", 1, 1, 8)), annotations=SPLIT, submitted_at=NOW)
    [expected] = play([eu, us], [queue("q")], work, [split], {"r-eu": NOW + 50, "r-us": NOW + 80}).values()
    assert (expected.start, expected.after) == (NOW + 80, ("r-us",))
    assert {expected.cluster} <= {"eu", "us"}


def test_a_job_behind_a_starving_one_starts_after_it():
    """Four nodes; two run work ending at +100 and +200. A 4-node job has waited past starvation_after: it holds
    the nodes as they free, so the 1-node job behind it starts once it has run (not at +100)."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=4))
    work = [running("r1", "eu", [eu.nodes[0].name]), running("r2", "eu", [eu.nodes[1].name])]
    starving = job("big", gpus=8, pods=4, submitted_at=0.0)
    small = job("small", gpus=8, submitted_at=NOW)
    result = play([eu], [queue("big"), queue("small")], work, [starving, small], {"r1": NOW + 100, "r2": NOW + 200},
                  runtimes={starving.id: 500.0})
    assert result[starving.id].start == NOW + 200
    assert result[small.id].start == NOW + 700 and result[small.id].after == (starving.id,)


def test_a_job_no_cluster_can_take_never_starts():
    """A pod of 16 GPUs on nodes of 8: not even with every running job ended."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=2))
    work = [running("r1", "eu", [eu.nodes[0].name])]
    too_big = job("q", gpus=16, submitted_at=NOW)
    [expected] = play([eu], [queue("q")], work, [too_big], {"r1": NOW + 100}).values()
    assert expected.start is None and expected.never


def test_a_start_past_the_horizon_is_later_than_the_horizon():
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=1))
    work = [running("r1", "eu", [eu.nodes[0].name])]
    pending = job("q", gpus=8, submitted_at=NOW)
    [expected] = play([eu], [queue("q")], work, [pending], {"r1": NOW + 10 * 86400}).values()
    assert expected.start is None and not expected.never and expected.later_than == NOW + Limits().horizon_s


def test_jobs_beyond_the_window_are_not_forecast():
    """Three 1-node jobs on one free node, each running 100 s; the window holds two."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=1))
    jobs = [job("q", gpus=8, submitted_at=NOW + i) for i in range(3)]
    result = play([eu], [queue("q")], [], jobs, {}, runtimes={j.id: 100.0 for j in jobs},
                  limits=Limits(window=2, resolution_s=1.0, relative_resolution=0.0))
    assert [result[j.id].start for j in jobs[:2]] == [NOW, NOW + 100]
    assert jobs[2].id not in result


def test_a_job_failing_over_starts_once_the_copy_being_deleted_frees_its_node():
    """One node, held by the job's own copy being deleted (not charged, its member has not confirmed yet)."""
    from dataclasses import replace
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=1))
    pending = job("q", gpus=8, submitted_at=NOW)
    work = [replace(running(pending.id, "eu", [eu.nodes[0].name]), charged=False)]
    [expected] = play([eu], [queue("q")], work, [pending], {}).values()
    assert (expected.start, expected.after) == (NOW + Limits().deleting_s, (pending.id,))


def test_ends_close_together_are_one_step_at_the_last_of_them():
    """Two nodes; their work ends 60 s apart, within the resolution (300 s): a 1-node job is told the later end."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=2))
    work = [running("r1", "eu", [eu.nodes[0].name]), running("r2", "eu", [eu.nodes[1].name])]
    pending = job("q", gpus=8, submitted_at=NOW)
    [expected] = play([eu], [queue("q")], work, [pending], {"r1": NOW + 3600, "r2": NOW + 3660},
                      limits=Limits()).values()
    assert expected.start == NOW + 3660 and set(expected.after) <= {"r1", "r2"}


def test_out_of_time_the_jobs_not_started_are_later_than_the_step_reached():
    """One node, three 1-node jobs of 100 s: the caller's budget runs out after the second step."""
    eu = cluster("eu", fabric(leaves=1, nodes_per_leaf=1))
    jobs = [job("q", gpus=8, submitted_at=NOW + i) for i in range(3)]
    steps = iter([False, True])
    result = forecast(snapshot([eu], [queue("q")], now=NOW), jobs, [], {}, {j.id: 100.0 for j in jobs}, Config(),
                      EXACT, out_of_time=lambda: next(steps))
    assert [result[j.id].start for j in jobs[:2]] == [NOW, NOW + 100]
    assert result[jobs[2].id].start is None and result[jobs[2].id].later_than == NOW + 100
