"""A replica that may have lost its lease sends nothing more to the members: the fence is asked right before each
request goes out, not once before a series of them (an apply waiting for the request budget, a sweep's deletes)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from broker.services.members import MemberClients
from broker.store.db.fencing import Fence, Fenced, fenced
from broker.store.db.models import Cluster
from clusters.member import NODES


def test_a_revoked_fence_stops_the_next_request_before_it_leaves(federation, settings):
    fence = Fence({"leader": 1})
    database = fenced(federation.db, fence)
    members = MemberClients(settings, guard=database.ensure_leading)
    with federation.db.sessions() as session:
        row = session.execute(select(Cluster.id, Cluster.kubeconfig_encrypted, Cluster.context)
                              .where(Cluster.name == "eu-west")).one()
    client = members.get(row.id, row.kubeconfig_encrypted, row.context)
    nodes, _ = client.list(NODES)
    assert nodes  # while the lease is held, requests go out
    sent = len(federation.sim.requests("eu-west"))
    fence.revoke()
    with pytest.raises(Fenced):
        client.list(NODES)
    assert len(federation.sim.requests("eu-west")) == sent  # nothing reached the member
    members.retain(set())


def test_a_pass_that_aborts_cancels_the_member_calls_it_queued_and_waits_for_those_under_way(federation, settings):
    """The first apply is fenced (the replica lost its lease); the three others under way hold until the pass has
    cancelled what it queued behind them: when the pass has ended, none of its calls is left to run."""
    from broker.process.testing import jobset
    from broker.services.dispatcher import LANE_WIDTH, DispatcherService

    for i in range(3 * LANE_WIDTH):
        federation.submit(jobset(f"job-{i}", parts=(("workers", 1, 1, 1),),
                                 annotations={"archipelago.io/cluster-selector": "region=eu"}))
    federation.scheduler.run_once()
    asked, released = [], threading.Event()

    submitted = []

    def valid() -> bool:
        if not submitted:  # the sweep, the namespaces' lists: before the lanes
            return True
        asked.append(True)
        if len(asked) > 1:  # the calls under way beside the fenced one
            released.wait()
        return False

    database = fenced(federation.db, Fence({}, valid))
    dispatcher = DispatcherService(database, settings, MemberClients(settings, guard=database.ensure_leading),
                                   now=federation.now)
    lane = dispatcher._lane

    def recording(cluster_id):
        executor = lane(cluster_id)
        return SimpleNamespace(submit=lambda *args: submitted.append(executor.submit(*args)) or submitted[-1])

    dispatcher._lane = recording

    def release_once_cancelled() -> None:  # the state waited for: a queued call cancelled (no time limit)
        while not released.wait(0.01):
            if any(future.cancelled() for future in submitted):
                released.set()

    watcher = threading.Thread(target=release_once_cancelled, daemon=True)
    watcher.start()
    try:
        with pytest.raises(Fenced):
            dispatcher.run_once()
        assert len(submitted) == 3 * LANE_WIDTH
        assert all(future.done() for future in submitted)
        assert any(future.cancelled() for future in submitted)  # those queued behind the ones under way
    finally:
        released.set()
        watcher.join()
        dispatcher.stop()
