"""Member lanes: three replicas each hold about a third of the members' leases, never the same one; a dead
replica's members are taken by the others once its leases expire; a lane's commit after its member's lease was
taken is refused; each member's lane lag is exported by the replica that carries it. Time is moved by hand."""

from __future__ import annotations

import threading

import pytest

from broker.db.fencing import Fence, Fenced, fenced
from broker.db.models import Cluster
from broker.inventory import WriteResult
from broker.metrics import REGISTRY
from broker.services.lanes import MemberLeases, member_lease, member_lanes, members_of
from broker.services.loop import LoopService
from tests.services.test_lease import Clock

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]
MEMBERS = 9


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def members(db) -> list[int]:
    with db.write() as session:
        clusters = [Cluster(name=f"member-{i}", api_server=f"https://member-{i}", kubeconfig_encrypted=b"x")
                    for i in range(MEMBERS)]
        session.add_all(clusters)
    return sorted(c.id for c in clusters)


def claims(replicas: dict[str, MemberLeases], clock, settings) -> dict[str, frozenset[int]]:
    """Each replica steps in turn, every renew period, for a lease duration and a little more: a replica's surplus
    is left to expire (its lane services still run on it until it restarts them), then others take it."""
    for _ in range(int(settings.lease_duration / settings.lease_renew_period) + 2):
        held = {name: members_of(leases.claim()) for name, leases in replicas.items()}
        clock.advance(settings.lease_renew_period)
    return held


def test_replicas_share_the_members_and_take_over_a_dead_ones(db, settings, clock, members):
    replicas = {name: MemberLeases(db, settings, holder=name, now=clock.now) for name in "abc"}
    assert members_of(replicas["a"].claim()) == set(members)  # alone, it takes every member
    assert members_of(replicas["b"].claim()) == set()  # a's surplus is not free while a may still run on it
    held = claims(replicas, clock, settings)
    assert sorted(len(lane) for lane in held.values()) == [3, 3, 3]
    assert set().union(*held.values()) == set(members)  # every member in one lane, none in two
    del replicas["c"]  # killed: it renews nothing any more
    clock.advance(settings.lease_duration + 1)
    held = claims(replicas, clock, settings)
    assert sorted(len(lane) for lane in held.values()) == [4, 5]
    assert set().union(*held.values()) == set(members) and not held["a"] & held["b"]


def test_a_lanes_commit_after_its_member_was_taken_is_refused(db, settings, clock, members):
    first = MemberLeases(db, settings, holder="first", now=clock.now)
    lane = fenced(db, Fence(first.claim()))
    clock.advance(settings.lease_duration + 1)  # the first replica paused; the second takes every member
    assert members_of(MemberLeases(db, settings, holder="second", now=clock.now).claim()) == set(members)
    with pytest.raises(Fenced, match=member_lease(members[0])):
        with lane.write() as session:
            session.get(Cluster, members[0]).last_error = "written by a lane that lost the member"
    with db.sessions() as session:
        assert session.get(Cluster, members[0]).last_error is None


def test_a_replica_runs_lane_services_on_its_members_only(db, settings, clock, members):
    lanes_built: list[frozenset[int]] = []
    pod = f"{'a' * 63}/4242/0123abcd"  # a Kubernetes pod's longest hostname, its pid and nonce
    holder = member_lanes(MemberLeases(db, settings, holder=pod, now=clock.now),
                          lambda _database, lane: lanes_built.append(lane) or [], clock=clock.monotonic)
    try:
        assert holder.step() and lanes_built == [frozenset(members)]
        with db.write() as session:
            session.delete(session.get(Cluster, members[-1]))  # a member removed: the lanes start again without it
        clock.advance(settings.lease_renew_period)
        assert holder.step() and lanes_built[-1] == frozenset(members[:-1])
    finally:
        holder.stop()


class Pass(LoopService):
    """A lane service whose passes return a given outcome, the first one run by the lane's runner."""

    name = "inventory-sync"

    def __init__(self) -> None:
        super().__init__(3600)
        self.outcome: dict[str, object] = {}
        self.ran = threading.Event()

    def run_once(self) -> dict[str, object]:
        self.ran.set()
        return self.outcome


def lane_lags() -> dict[str, float]:
    return {sample.labels["cluster"]: sample.value for family in REGISTRY.collect()
            if family.name == "archipelago_member_lane_lag_seconds" for sample in family.samples}


def test_the_lane_lag_is_exported_for_the_members_carried_and_dropped_with_them(db, settings, clock, members):
    services: list[Pass] = []
    holder = member_lanes(MemberLeases(db, settings, holder="replica", now=clock.now),
                          lambda _database, _lane: services.append(Pass()) or services[-1:], clock=clock.monotonic)
    names = [f"member-{i}" for i in range(MEMBERS)]
    try:
        assert holder.step() and services[-1].ran.wait(10)  # its first pass, at the lane's start
        clock.advance(5)
        assert lane_lags() == dict.fromkeys(names, 5)
        services[-1].outcome = {"member-0": "sync: connection refused", "member-1": WriteResult()}
        services[-1].run_once()  # member-0's sync failed: it is not caught up, by this pass nor the next
        services[-1].outcome = {}
        clock.advance(2)
        services[-1].run_once()
        assert lane_lags() == {**dict.fromkeys(names, 0), "member-0": 7}
        with db.write() as session:
            session.delete(session.get(Cluster, members[-1]))  # a member removed: the lane starts again without it
        clock.advance(settings.lease_renew_period)
        assert holder.step() and services[-1].ran.wait(10)
        assert lane_lags() == dict.fromkeys(names[:-1], 0)
        clock.advance(settings.lease_duration + 1)  # paused; another replica takes every member
        MemberLeases(db, settings, holder="other", now=clock.now).claim()
        assert not holder.step() and lane_lags() == {}
    finally:
        holder.stop()
    assert lane_lags() == {}
