"""Member lanes: three replicas each hold about a third of the members' leases, never the same one; a dead
replica's members are taken by the others once its leases expire; a lane's commit after its member's lease was
taken is refused; each member's lane lag is exported by the replica that carries it. Time is moved by hand."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import pytest

from broker.process.metrics import REGISTRY
from broker.services import lane_services
from broker.services.lanes import MemberLeases, member_lease, member_lanes, members_of
from broker.services.loop import LoopService
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.fencing import Fence, Fenced, fenced
from broker.store.db.models import Cluster
from broker.store.inventory import WriteResult
from clusters.sim.testing import running_simulator
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


class Lane(LoopService):
    """A lane service that says which members it is on."""

    name = "lane"

    def __init__(self, lane: frozenset[int]) -> None:
        super().__init__(3600)
        self.lane = lane

    def run_once(self) -> None:
        pass

    def retarget(self, lane: frozenset[int]) -> list[threading.Thread]:
        self.lane = lane
        return []


def test_a_replica_runs_lane_services_on_its_members_only(db, settings, clock, members):
    built: list[Lane] = []
    pod = f"{'a' * 63}/4242/0123abcd"  # a Kubernetes pod's longest hostname, its pid and nonce
    holder = member_lanes(MemberLeases(db, settings, holder=pod, now=clock.now),
                          lambda _database, lane: built.append(Lane(lane)) or built[-1:], clock=clock.monotonic)
    try:
        assert holder.step() and [service.lane for service in built] == [frozenset(members)]
        with db.write() as session:
            session.delete(session.get(Cluster, members[-1]))  # a member removed: the lane carries on without it
        clock.advance(settings.lease_renew_period)
        assert holder.step() and [service.lane for service in built] == [frozenset(members[:-1])]
        assert holder.fence.tokens == holder.held and len(holder.held) == MEMBERS - 1
        for _ in range(2):  # paused while another replica took every member, and until that one died too
            clock.advance(settings.lease_duration + 1)
            MemberLeases(db, settings, holder="other", now=clock.now).claim()
        MemberLeases(db, settings, holder="other", now=clock.now).release()
        # the same members, under new tokens: what ran on them before is not carried over, the lane starts again
        assert holder.step() and [service.lane for service in built] == [frozenset(members[:-1])] * 2
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


SIMULATED = {"defaults": {"node": {"cpu": "8", "memory": "32Gi"}, "topology": {"leaf": 2, "spine": 1}},
             "clusters": [{"name": "lane-a"}, {"name": "lane-b"}]}


@pytest.fixture
def sim():
    with running_simulator(SIMULATED, speed=0) as handle:
        yield handle


@pytest.fixture
def simulated_members(db, settings, sim) -> list[int]:
    """The simulator's clusters registered as Ready push members (no first sync: the lane's services do it)."""
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.write() as session:
        clusters = [Cluster(name=name, api_server=sim.cluster_url(name), state="Ready",
                            kubeconfig_encrypted=cipher.encrypt(sim.kubeconfig(name))) for name in sim.cluster_names]
        session.add_all(clusters)
    return sorted(c.id for c in clusters)


def until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def watching(holder, sim) -> list[threading.Thread]:
    """Once the lane's watches are all open: per member JobSets (status), nodes, pods and HyperNodes (inventory)."""
    until(lambda: all(len(sim.app.streams[name]) == 4 for name in sim.cluster_names))
    watches = [t for t in threading.enumerate() if t.name.startswith(("status-lane-", "watch-lane-"))]
    assert len(watches) == 4 * len(sim.cluster_names)
    return watches


def ended(watches: list[threading.Thread]) -> list[str]:
    for watch in watches:
        watch.join(10)
    return [watch.name for watch in watches if watch.is_alive()]


@pytest.fixture
def quiet(caplog, monkeypatch) -> list:
    """The uncaught thread exceptions; and INFO records and above kept by caplog."""
    uncaught: list = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    caplog.set_level(logging.INFO)
    return uncaught


def test_a_lane_given_up_while_its_watches_run_ends_them_quietly(db, settings, clock, sim, simulated_members,
                                                                 caplog, quiet):
    """The fence refuses at once (the lease holder revokes it first), then waits for the passes under way before it
    stops the services: a watch whose stream breaks meanwhile meets `Fenced` on its next call. It ends, with no
    traceback and no uncaught thread exception; the lane's loss is said once, by the lease holder."""
    holder = member_lanes(MemberLeases(db, settings, holder="replica", now=clock.now),
                          lambda database, lane: lane_services(database, settings, lane), clock=clock.monotonic)
    try:
        assert holder.step()
        watches = watching(holder, sim)
        caplog.clear()
        holder.fence.revoke()  # as the lease holder's stop does first
        sim.app.close_streams()  # every watch calls its member again, or records what it has
        assert ended(watches) == []
        clock.advance(settings.lease_duration + 1)  # another replica takes every member
        MemberLeases(db, settings, holder="other", now=clock.now).claim()
        assert not holder.step()
    finally:
        holder.stop()
    assert quiet == []
    assert [(r.levelname, r.name) for r in caplog.records if r.levelno >= logging.INFO] == [
        ("WARNING", "archipelago.lease")]


def test_watches_ended_while_renewals_lapsed_start_again_once_renewed(db, settings, clock, sim, simulated_members,
                                                                      caplog, quiet):
    """Renewals that lapse (the database slow to answer) refuse the lane's member calls without stopping its
    services: the watches that meet the refusal end, and the next passes once renewed start them again."""
    settings = settings.model_copy(update={"cluster_sync_interval": 0.5, "status_poll_interval": 0.2})
    holder = member_lanes(MemberLeases(db, settings, holder="replica", now=clock.now),
                          lambda database, lane: lane_services(database, settings, lane), clock=clock.monotonic)
    try:
        assert holder.step()
        watches, runner = watching(holder, sim), holder.runner
        # unrenewed for this long, this replica no longer surely holds them (though no one else has taken them yet)
        clock.advance(settings.lease_duration - settings.lease_renew_period)
        sim.app.close_streams()
        assert ended(watches) == []
        assert holder.step() and holder.runner is runner  # renewed, the same leases: the services ran on
        watching(holder, sim)
    finally:
        holder.stop()
    assert quiet == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def lists(sim, name: str, *, watches: bool = False) -> int:
    """The lists (or the watches) of nodes, pods, HyperNodes and JobSets the member received."""
    return sum(1 for r in sim.requests(name) if r.method == "GET" and (r.query.get("watch") == "true") == watches
               and r.path.rsplit("/", 1)[-1] in ("nodes", "pods", "hypernodes", "jobsets"))


def test_a_lane_change_starts_and_stops_only_the_members_that_changed(db, settings, clock, sim, simulated_members,
                                                                       caplog, quiet):
    """A second replica joins: this one gives a member up and carries on with the other, whose watches run on and
    which is not listed again; the second dies: the member comes back, listed and watched again."""
    kept, left = sim.cluster_names  # the member of the lowest id is kept
    holder = member_lanes(MemberLeases(db, settings, holder="replica", now=clock.now),
                          lambda database, lane: lane_services(database, settings, lane), clock=clock.monotonic)
    try:
        assert holder.step()
        watches, runner = watching(holder, sim), holder.runner
        listed = lists(sim, kept)
        MemberLeases(db, settings, holder="other", now=clock.now).claim()  # two replicas: one member each
        clock.advance(settings.lease_renew_period)
        assert holder.step() and members_of(holder.held) == {simulated_members[0]} and holder.runner is runner
        assert ended([w for w in watches if left in w.name]) == []
        assert all(w.is_alive() for w in watches if kept in w.name) and len(sim.app.streams[kept]) == 4

        def passes(done) -> Callable[[], bool]:  # the lane's services run a pass now, again until done
            return lambda: [holder.wake(service) for service in runner.services] and done()

        clock.advance(1)
        until(passes(lambda: lane_lags() == {kept: 0}))  # every one has completed a pass over the kept member
        assert lists(sim, kept) == listed
        watched = lists(sim, left, watches=True)
        for _ in range(int(settings.lease_duration / settings.lease_renew_period) + 1):  # the other replica died:
            clock.advance(settings.lease_renew_period)  # this one renews its member until the other's expires
            assert holder.step() and holder.runner is runner
        assert members_of(holder.held) == set(simulated_members)
        until(passes(lambda: lists(sim, left, watches=True) == watched + 4))  # its four watches again
        assert lists(sim, kept) == listed and lists(sim, kept, watches=True) == 4
    finally:
        holder.stop()
    assert quiet == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING and r.name != "archipelago.lease"] == []
