"""The leader lease: acquired, renewed, lost and taken over on the replicas' clocks (moved by hand, no sleeping);
a fenced ex-leader's commit is refused and changes nothing."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from broker.process.metrics import REGISTRY
from broker.services.lease import LeaseHolder, LeaseRecord, leader, replica_name
from broker.services.loop import LoopService
from broker.store.db.fencing import Fence, Fenced, fenced
from broker.store.db.models import LEADER, Cluster, Lease
from broker.store.db.runtime import Database, open_database
from broker.store.db.session import make_engine, make_sessionmaker


UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:9/nowhere"  # the discard port: refused at once


class Clock:
    """Wall clock (for expiry) and monotonic clock (for the holder's own deadline), moved together."""

    def __init__(self) -> None:
        self.wall, self.mono = datetime(2026, 12, 1, tzinfo=timezone.utc), 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def record(db, clock, holder: str) -> LeaseRecord:
    return LeaseRecord(db, holder=holder, duration=10.0, now=clock.now)


def test_the_lease_is_renewed_by_its_holder_and_taken_over_only_once_it_expired(db, clock):
    a, b = record(db, clock, "a"), record(db, clock, "b")
    assert a.hold() == 1
    assert b.hold() is None
    for _ in range(5):  # renewed every 4 s: never free for b, though 20 s went by
        clock.advance(4)
        assert a.hold() == 1
        assert b.hold() is None
    clock.advance(10)  # a died after its last renewal
    assert b.hold() == 2
    assert a.hold() is None and a.token is None  # a learns it lost it; its token is no good any more
    with db.sessions() as session:
        assert session.execute(select(Lease.holder, Lease.token).where(Lease.name == LEADER)).one() == ("b", 2)


def test_a_released_lease_is_taken_at_once(db, clock):
    a, b = record(db, clock, "a"), record(db, clock, "b")
    assert a.hold() == 1
    a.release()
    assert b.hold() == 2


def _write_cluster(database, name: str) -> None:
    with database.write() as session:
        session.add(Cluster(name=name, kubeconfig_encrypted=b"x", api_server="https://member.example"))


def _clusters(db) -> list[str]:
    with db.sessions() as session:
        return list(session.scalars(select(Cluster.name)))


def test_a_fenced_ex_leaders_commit_is_refused_and_changes_nothing(db, clock):
    a, b = record(db, clock, "a"), record(db, clock, "b")
    loops = fenced(db, Fence({LEADER: a.hold()}))
    _write_cluster(loops, "while-leading")  # the holder's commits go through
    clock.advance(11)  # a paused: its lease expires and b takes it
    assert b.hold() == 2
    with pytest.raises(Fenced, match="taken over"):
        _write_cluster(loops, "after-takeover")
    with pytest.raises(Fenced):  # and from then on without asking the database
        loops.ensure_leading()
    assert _clusters(db) == ["while-leading"]


def test_a_commit_that_outlasted_the_renewals_goes_through_while_the_lease_row_carries_its_token(db, clock):
    """A long write (the scheduler's first commit over a 100,000 backlog) holds SQLite's write lock, for which this
    process's own renewal waits: no one could take the lease meanwhile, and the token in the transaction says so.
    Refusing it lost every such cycle, again and again. Member calls, which no token guards, stay refused."""
    a = record(db, clock, "a")
    surely_until = clock.monotonic() + 8
    loops = fenced(db, Fence({LEADER: a.hold()}, lambda: clock.monotonic() < surely_until))
    with loops.write() as session:
        session.add(Cluster(name="long-write", kubeconfig_encrypted=b"x", api_server="https://member.example"))
        session.flush()
        clock.advance(30)  # no renewal while it wrote
    assert _clusters(db) == ["long-write"]
    with pytest.raises(Fenced):
        loops.ensure_leading()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_takeover_in_the_middle_of_an_ex_leaders_transaction_fences_its_commit(db, clock, settings):
    """The ex-leader wrote before the takeover and commits after it: the commit's token check refuses it."""
    a = record(db, clock, "a")
    loops = fenced(db, Fence({LEADER: a.hold()}))
    other = open_database(settings, upgrade=False)  # the other replica, on connections of its own
    try:
        with pytest.raises(Fenced):
            with loops.write() as session:
                session.add(Cluster(name="written-before-the-takeover", kubeconfig_encrypted=b"x", api_server="https://member.example"))
                session.flush()
                clock.advance(11)
                assert record(other, clock, "b").hold() == 2  # not blocked: the ex-leader holds no lock on it
    finally:
        other.dispose()
    assert _clusters(db) == []


class Counting(LoopService):
    name = "counting"

    def __init__(self) -> None:
        super().__init__(interval=3600)
        self.passes = threading.Event()

    def run_once(self) -> None:
        self.passes.set()


def replica(db, settings, clock) -> tuple[LeaseHolder, LeaseRecord, list[Counting]]:
    built: list[Counting] = []

    def build(_database, _held):
        built.append(Counting())
        return built[-1:]

    lease = LeaseRecord(db, holder=replica_name(), duration=settings.lease_duration, now=clock.now)
    return leader(lease, settings, build, clock=clock.monotonic), lease, built


def test_a_replica_runs_its_loops_while_it_holds_the_lease_and_stops_them_when_it_is_taken_over(db, settings, clock):
    first, _, first_loops = replica(db, settings, clock)
    second, _, second_loops = replica(db, settings, clock)
    try:
        assert first.step() and first.running and REGISTRY.get_sample_value("archipelago_leader_lease_held") == 1
        assert first_loops[0].passes.wait(30)  # its loops run
        assert not second.step() and second_loops == []
        clock.advance(settings.lease_duration + 1)  # the first replica was paused: no renewal
        assert second.step() and second.running
        assert second_loops[0].passes.wait(30)
        fence = first.fence
        assert not first.step() and not first.running  # it learns it lost the lease and stops its loops
        with pytest.raises(Fenced):  # what its loops were started under refuses every commit now
            _write_cluster(fenced(db, fence), "x")
        assert not first.step()  # and stays out while the second renews
    finally:
        second.stop()
        first.stop()
    assert _clusters(db) == []


def test_a_holder_whose_renewals_fail_stops_its_loops_before_another_may_take_over(db, settings, clock):
    holder, lease, _ = replica(db, settings, clock)
    try:
        assert holder.step()
        fence = holder.fence
        lease.database = Database(unreachable := make_engine(UNREACHABLE), make_sessionmaker(unreachable))
        clock.advance(settings.lease_renew_period)
        assert holder.step()  # one failed renewal: the lease is still surely ours
        clock.advance(settings.lease_duration - 2 * settings.lease_renew_period)
        assert not holder.step()  # a renewal period before another replica may take it: stopped
        with pytest.raises(Fenced):
            fence.ensure_valid()
    finally:
        holder.stop()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_replica_whose_clock_runs_an_hour_ahead_takes_no_lease_early(db, monkeypatch):
    """Expiry is set and read by PostgreSQL's clock: a replica's own clock, however skewed, moves nothing."""
    a = LeaseRecord(db, holder="a", duration=10.0)
    assert a.hold() == 1
    ahead = datetime.now(timezone.utc) + timedelta(hours=1)
    monkeypatch.setattr("broker.services.lease.utcnow", lambda: ahead)
    monkeypatch.setattr("broker.store.db.models.utcnow", lambda: ahead)
    b = LeaseRecord(db, holder="b", duration=10.0)
    assert b.hold() is None  # on b's clock a's lease expired 59 minutes ago; on the database's it did not
    with db.sessions() as session:
        expires = session.scalar(select(Lease.expires_at).where(Lease.name == LEADER))
    assert expires < ahead - timedelta(minutes=50)


def test_member_calls_stop_a_member_timeout_before_expiry_and_a_new_owner_waits_that_long(db, settings, clock):
    """An apply sent at 9.9 s of a 10 s lease could land after the next owner's sweep: the holder stops calling
    members a member timeout before its lease can expire, and an owner that took the lease over from a replica that
    stopped renewing it holds its first member call off as long. A lease given up cleanly is taken without a wait."""
    settings = settings.model_copy(update={"lease_duration": 10.0, "lease_renew_period": 2.0, "member_timeout": 5.0})
    slept: list[float] = []
    renewing: list[LeaseHolder] = []

    def sleep(seconds: float) -> None:  # the holder's renewals go on meanwhile, one per renew period
        slept.append(seconds)
        for _ in range(int(seconds // settings.lease_renew_period)):
            clock.advance(settings.lease_renew_period)
            renewing[-1].step()
        clock.advance(seconds % settings.lease_renew_period)

    def holder(name: str) -> LeaseHolder:
        lease = LeaseRecord(db, holder=name, duration=settings.lease_duration, now=clock.now)
        return leader(lease, settings, lambda _database, _held: [Counting()], clock=clock.monotonic, sleep=sleep)

    first = holder("a")
    try:
        assert first.step()
        clock.advance(4.9)
        first.fence.ensure_valid()  # 4.9 s of 10: a call now ends before the lease can expire
        clock.advance(0.2)
        with pytest.raises(Fenced):
            first.fence.ensure_valid()
        assert slept == []
        clock.advance(5.0)  # never renewed: expired
        second = holder("b")
        renewing.append(second)
        assert second.step()
        second.fence.ensure_valid()
        assert slept == [5.0]  # taken over: the first call waited a member timeout
        second.stop()  # a clean shutdown gives the lease up
        third = holder("c")
        assert third.step()
        third.fence.ensure_valid()
        assert slept == [5.0]
        third.stop()
    finally:
        first.stop()


def test_settings_keep_a_member_timeout_and_two_renewals_within_the_lease(settings):
    from broker.process.settings import Settings

    with pytest.raises(ValueError, match="ARCHIPELAGO_MEMBER_TIMEOUT"):
        Settings(database_url=settings.database_url, lease_duration=10, lease_renew_period=2, member_timeout=7,
                 _env_file=None)
