"""Member lanes: the per-member work (inventory sync and watches, status watches, dispatch to the member) shared
among the replicas that run loops, by one lease per member (the `member:<cluster id>` rows of `leases`).

Every renew period each replica heartbeats its own `replica:<nonce>` row, counts the live replicas, renews the
member leases it holds up to its share (members ÷ live replicas, rounded up), lets those above it expire (its lane
services on them stop at once; another replica takes them once expired, so never while they may still run here)
and takes free or expired ones up to its share. Its lane services run on the members it holds, every commit of theirs fenced
by those leases' tokens; when the set changes they are stopped and started again on the new set. A dead replica's
members are taken by the others once its leases expire (within a lease duration and a renew period).
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import postgresql

from broker.db.models import Cluster, Lease
from broker.db.runtime import Database
from broker.metrics import MEMBER_LANES_HELD
from broker.services.dispatcher import writing
from broker.services.lease import LeaseHolder, bound_waits, database_now
from broker.services.loop import LoopService
from broker.settings import Settings

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

    def claim(self) -> dict[str, int]:
        """Heartbeat, count the live replicas, renew ours up to the share (the rest expire), take free ones up to it."""
        lease = Lease.__table__
        mine = (lease.c.holder == self.holder) & lease.c.name.startswith(MEMBER)
        with writing(self.database) as session:
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
            # rows locked in name order, as the lanes' commits check them (broker.db.fencing): no deadlock between
            held = session.scalars(select(lease.c.name).where(mine, lease.c.expires_at > now)
                                   .order_by(lease.c.name).with_for_update()).all()
            kept = sorted((name for name in held if name in members), key=members.__getitem__)[:share]
            # Only the kept are renewed. The surplus is left to expire rather than given up now: this replica's lane
            # services still run on it until this step restarts them, so another replica must not start on it first.
            if kept:
                session.execute(update(lease).where(mine, lease.c.name.in_(kept)).values(expires_at=expires))
            free = lease.c.holder.is_(None) | (lease.c.expires_at <= now)
            if share > len(kept):
                candidates = session.scalars(select(lease.c.name).where(lease.c.name.in_(list(members)), free)
                                             .order_by(func.random()).limit(share - len(kept))).all()
                if candidates:
                    session.execute(update(lease).where(lease.c.name.in_(candidates), free)
                                    .values(holder=self.holder, token=lease.c.token + 1, expires_at=expires))
            return dict(session.execute(select(lease.c.name, lease.c.token).where(mine, lease.c.expires_at == expires))
                        .all())

    def release(self) -> None:
        lease = Lease.__table__
        with writing(self.database) as session:
            session.execute(update(lease).where(lease.c.holder == self.holder, lease.c.name.startswith(MEMBER))
                            .values(holder=None, expires_at=database_now(session, self.now)))
            session.execute(delete(lease).where(lease.c.name == self.heartbeat))


def members_of(held: dict[str, int]) -> frozenset[int]:
    """The cluster ids of the member leases held."""
    return frozenset(int(name.removeprefix(MEMBER)) for name in held)


def member_lanes(leases: MemberLeases, build: Callable[[Database, frozenset[int]], list[LoopService]], *,
                 wake: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> LeaseHolder:
    """The lane services of this replica, on the members whose leases it holds."""
    return LeaseHolder("member lanes", leases.database, leases.settings, leases.claim, leases.release,
                       lambda database, held: build(database, members_of(held)), holder=leases.holder,
                       held_gauge=MEMBER_LANES_HELD, wake=wake, clock=clock)
