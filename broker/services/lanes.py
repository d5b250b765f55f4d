"""Member lanes: the per-member work (inventory sync and watches, status watches, dispatch to the member) shared
among the replicas that run loops, by one lease per member (the `member:<cluster id>` rows of `leases`).

Every renew period each replica heartbeats its own `replica:<nonce>` row, counts the live replicas, renews the
member leases it holds up to its share (members ÷ live replicas, rounded up), lets those above it expire (its lane
services on them stop at once; another replica takes them once expired, so never while they may still run here)
and takes free or expired ones up to its share. Its lane services run on the members it holds, every commit of theirs fenced
by those leases' tokens; when the set changes they carry on with the new set (`LoopService.retarget`): the work on
the members given up stops (watches stopped and waited for) before their tokens leave the fence, the members taken
are synced, watched and swept by the next passes, and the members kept are left alone (no relist, no new watch).
A dead replica's members are taken by the others once its leases expire (within a lease duration and a renew period).
`LaneProgress` tells, per member carried, how far behind its lane is (`archipelago_member_lane_lag_seconds`).
"""

from __future__ import annotations

import math
import threading
import time
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import postgresql

from broker.process.metrics import MEMBER_LANE_LAG, MEMBER_LANES_HELD
from broker.process.settings import Settings
from broker.services.lease import LeaseHolder, bound_waits, database_now
from broker.services.loop import LoopService
from broker.store.db.models import Cluster, Lease
from broker.store.db.runtime import Database

MEMBER, REPLICA = "member:", "replica:"
FORGET_REPLICAS_AFTER = timedelta(hours=1)  # heartbeat rows of replicas gone this long are deleted


def member_lease(cluster_id: int) -> str:
    return f"{MEMBER}{cluster_id}"


class MemberLeases:
    """One replica's claim on its share of the member leases, and their release."""

    def __init__(self, database: Database, settings: Settings, *, holder: str,
                 now: Callable[[], datetime] | None = None) -> None:
        self.database, self.settings, self.holder, self.now = database, settings, holder, now
        self.heartbeat = f"{REPLICA}{holder.rsplit('/', 1)[-1]}"  # the holder's nonce: a lease name is 63 at most
        self.inherited: set[str] = set()  # taken over, at the last claim, from holders that stopped renewing them

    def claim(self) -> dict[str, int]:
        """Heartbeat, count the live replicas, renew ours up to the share (the rest expire), take free ones up to it."""
        lease = Lease.__table__
        mine = (lease.c.holder == self.holder) & lease.c.name.startswith(MEMBER)
        with self.database.write() as session:
            bound_waits(session, self.settings.lease_renew_period)
            now = database_now(session, self.now)
            expires = now + timedelta(seconds=self.settings.lease_duration)
            session.execute(delete(lease).where(lease.c.name.startswith(REPLICA),
                                                lease.c.expires_at < now - FORGET_REPLICAS_AFTER))
            session.execute(postgresql.insert(lease).values(name=self.heartbeat, holder=self.holder,
                                                            token=0, expires_at=expires)
                            .on_conflict_do_update(index_elements=["name"], set_={"expires_at": expires}))
            members = {member_lease(i): i for i in session.scalars(select(Cluster.id))}
            if members:
                session.execute(postgresql.insert(lease).values([
                    {"name": name, "holder": None, "token": 0, "expires_at": now} for name in members])
                    .on_conflict_do_nothing())
            live = session.scalar(select(func.count()).select_from(lease).where(
                lease.c.name.startswith(REPLICA), lease.c.expires_at > now))
            share = math.ceil(len(members) / max(live, 1))
            # rows locked in name order, as the lanes' commits check them (broker.store.db.fencing): no deadlock between
            held = session.scalars(select(lease.c.name).where(mine, lease.c.expires_at > now)
                                   .order_by(lease.c.name).with_for_update()).all()
            kept = sorted((name for name in held if name in members), key=members.__getitem__)[:share]
            # Only the kept are renewed. The surplus is left to expire rather than given up now: this replica's lane
            # services still run on it until this step restarts them, so another replica must not start on it first.
            if kept:
                session.execute(update(lease).where(mine, lease.c.name.in_(kept)).values(expires_at=expires))
            free = lease.c.holder.is_(None) | (lease.c.expires_at <= now)
            self.inherited = set()
            if share > len(kept):
                found = session.execute(select(lease.c.name, lease.c.holder)
                                        .where(lease.c.name.in_(list(members)), free)
                                        .order_by(func.random()).limit(share - len(kept))).all()
                candidates = [name for name, _ in found]
                self.inherited = {name for name, before in found if before not in (None, self.holder)}
                if candidates:
                    session.execute(update(lease).where(lease.c.name.in_(candidates), free)
                                    .values(holder=self.holder, token=lease.c.token + 1, expires_at=expires))
            return dict(session.execute(select(lease.c.name, lease.c.token).where(mine, lease.c.expires_at == expires))
                        .all())

    def release(self) -> None:
        lease = Lease.__table__
        with self.database.write() as session:
            session.execute(update(lease).where(lease.c.holder == self.holder, lease.c.name.startswith(MEMBER))
                            .values(holder=None, expires_at=database_now(session, self.now)))
            session.execute(delete(lease).where(lease.c.name == self.heartbeat))


def members_of(held: dict[str, int]) -> frozenset[int]:
    """The cluster ids of the member leases held."""
    return frozenset(int(name.removeprefix(MEMBER)) for name in held)


class LaneProgress:
    """When each push member of the lane last had a completed pass of each lane service over it. A member's lag is
    the time since the oldest of those, so it grows when any of its services is stuck (a pass hung on a member
    call, a loop that no longer runs) and stays under the longest loop interval plus a pass while all move. A
    member a pass names with an error (an inventory sync or status list that failed) is not caught up by it, nor by
    the passes that skip it while it backs off, until one names it without an error. A member taken into the lane
    starts its count when taken; the lane starting again (services that cannot carry on) starts every member's."""

    def __init__(self, database: Database, clock: Callable[[], float]) -> None:
        self.database, self.clock = database, clock
        self._lock = threading.Lock()
        self._names: dict[int, str] = {}  # cluster id -> name, of the lane's push members
        self._began = 0.0
        self._passes: dict[str, dict[int, float]] = {}  # lane service -> cluster id -> when a pass caught it up
        self._failing: dict[str, set[str]] = {}  # lane service -> members its last pass over them failed

    def _push_members(self, lane: frozenset[int]) -> dict[int, str]:
        with self.database.read() as session:
            return dict(session.execute(select(Cluster.id, Cluster.name)
                                        .where(Cluster.id.in_(sorted(lane)), Cluster.mode == "push")).all())

    def move(self, lane: frozenset[int]) -> None:
        """The lane's services carried on to these members: the members kept keep their counts, those taken start
        theirs now."""
        names = self._push_members(lane)
        with self._lock:
            now = self.clock()
            self._names = names
            self._passes = {service: {i: passes.get(i, now) for i in names} for service, passes in self._passes.items()}
            for failing in self._failing.values():
                failing &= set(names.values())

    def follow(self, services: list[LoopService], lane: frozenset[int]) -> list[LoopService]:
        """The lane begins on these members: counts start now, and every pass of `services` that completes is
        recorded (the services run unchanged; only their `run_once` is wrapped)."""
        names = self._push_members(lane)
        with self._lock:
            self._names, self._began = names, self.clock()
            self._passes = {service.name: dict.fromkeys(names, self._began) for service in services}
            self._failing = {service.name: set() for service in services}
        for service in services:
            service.run_once = self._recorded(service.name, service.run_once)
        return services

    def _recorded(self, service: str, run_once: Callable[[], object]) -> Callable[[], object]:
        def run_and_record() -> object:
            outcome = run_once()
            self.completed(service, outcome)
            return outcome
        return run_and_record

    def completed(self, service: str, outcome: object) -> None:
        """A pass of `service` completed; `outcome` is what its run_once returned (per member, when a dict)."""
        now = self.clock()
        with self._lock:
            failing = self._failing[service]
            if isinstance(outcome, dict):
                failing |= {name for name, result in outcome.items() if isinstance(result, str)}
                failing -= {name for name, result in outcome.items() if not isinstance(result, str)}
            passes = self._passes[service]
            for cluster_id, name in self._names.items():
                if name not in failing:
                    passes[cluster_id] = now

    def lags(self, carried: frozenset[int]) -> dict[str, float]:
        """Seconds each carried member's lane is behind, by cluster name."""
        now = self.clock()
        with self._lock:
            return {name: now - min((passes[cluster_id] for passes in self._passes.values()), default=self._began)
                    for cluster_id, name in self._names.items() if cluster_id in carried}


def member_lanes(leases: MemberLeases, build: Callable[[Database, frozenset[int]], list[LoopService]], *,
                 wake: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> LeaseHolder:
    """The lane services of this replica, on the members whose leases it holds; their lag exported for the members
    held while they run (none once the leases are lost or given up)."""
    progress = LaneProgress(leases.database, clock)

    def lane(database: Database, held: dict[str, int]) -> list[LoopService]:
        return progress.follow(build(database, members_of(held)), members_of(held))

    def move(services: list[LoopService], held: dict[str, int]) -> bool:
        """Each service carried on to the members now held; the threads at work on the members left are waited
        for, a renew period at most (else the lane starts again, its fence revoked)."""
        lane = members_of(held)
        left = [service.retarget(lane) for service in services]
        if None in left:
            return False
        deadline = time.monotonic() + leases.settings.lease_renew_period
        for thread in (thread for threads in left for thread in threads):
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                return False
        progress.move(lane)
        return True

    holder = LeaseHolder("member lanes", leases.database, leases.settings, leases.claim, leases.release, lane,
                         holder=leases.holder, held_gauge=MEMBER_LANES_HELD, move=move, wake=wake, clock=clock,
                         inherited=lambda: leases.inherited)
    MEMBER_LANE_LAG.lags = lambda: progress.lags(members_of(holder.held))
    return holder
