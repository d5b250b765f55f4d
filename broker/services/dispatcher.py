"""The dispatcher loop: committed placements become JobSets on their members, and go away again.

One pass (`run_once`):
1. In one transaction: cancelled jobs' placements to Deleting; fail-over of members NotReady for
   longer than ARCHIPELAGO_FAILOVER_TOLERATION, of Draining members' unstarted placements, of
   removed members' placements.
2. Deletions due, on every member that answers (a member still down keeps them for later).
3. A member seen for the first time by this process, or back from NotReady, is swept first: copies
   labelled by the broker that no placement owns any more are deleted before anything starts there.
4. Applies due, on members that are swept and whose deletions went through: each placement's step
   is committed (Decided → Applying) before the member is touched, and its result after.
Member calls run in a thread pool, each placement in one thread; a failing member backs off per
placement (retryable errors) or fails the placement with the member's message (permanent ones).
"""

from __future__ import annotations

import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Iterator

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker import events
from broker.db.models import Cluster, utcnow
from broker.db.runtime import Database
from broker.db.session import transaction
from broker.dispatch import (ACTIVE_STATES, Changes, Work, begin_write, due_work, fail_apply, fail_over,
                             finish_apply, finish_delete, kept_placements, placement_owner, request_deletions,
                             retry_later, start_apply)
from broker.metrics import MEMBER_ERRORS
from broker.services.inventory import WRITES, MemberClients, backoff
from broker.services.loop import LoopService
from broker.settings import Settings
from clusters import jobsets
from clusters.kubeconfig import KubeconfigError
from clusters.member import MemberClient, MemberError

log = logging.getLogger("archipelago.dispatcher")

# Test hook: the process kills itself (SIGKILL) right after this step, e.g. "applying" (committed,
# member untouched), "applied-on-member" (member has it, not committed), "applied", "deleting",
# "deleted-on-member", "deleted". Only the crash tests set it.
CRASH_AT_ENV = "ARCHIPELAGO_TEST_CRASH_AT"
RETRY_BASE = 1.0
RETRY_CAP = 60.0
UNAVAILABLE_STATES = ("NotReady", "Pending")  # members the dispatcher does not call


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == step:
        log.warning("test hook %s=%s: killing the process", CRASH_AT_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def writing(database: Database) -> Iterator[Session]:
    """One write transaction; on SQLite also this process's writers' lock (see broker.services.inventory)."""
    sqlite = database.engine.dialect.name == "sqlite"
    if sqlite:
        WRITES.acquire()
    try:
        with transaction(database.sessions) as session:
            begin_write(session)
            yield session
    finally:
        if sqlite:
            WRITES.release()


class DispatcherService(LoopService):
    name = "dispatcher"

    def __init__(self, database: Database, settings: Settings, clients: MemberClients, *,
                 now: Callable[[], datetime] = utcnow) -> None:
        super().__init__(settings.dispatch_interval)
        self.database, self.settings, self.clients, self.now = database, settings, clients, now
        self._pool = ThreadPoolExecutor(settings.member_workers, thread_name_prefix="dispatcher")
        self._namespaces: set[tuple[int, str]] = set()  # (cluster id, namespace) known to exist
        self._swept: set[int] = set()  # members swept since this process met them or they came back

    def run_once(self) -> Changes:
        now = self.now()
        with writing(self.database) as session:
            changes = request_deletions(session, now).add(
                fail_over(session, now, self.settings.failover_toleration))
        if changes.dispatch:
            crash_point("deleting")
        with self.database.sessions() as session:
            members = {row.id: row for row in session.execute(
                select(Cluster.id, Cluster.name, Cluster.state, Cluster.kubeconfig_encrypted, Cluster.context))}
            reachable = {i: row for i, row in members.items() if row.state not in UNAVAILABLE_STATES}
            work = due_work(session, now, reachable)
        self._swept &= set(reachable)  # a member that was away is swept again when it returns
        blocked: set[int] = set()
        deletions = [w for w in work if w.state == "Deleting"]
        for item, (done, more) in zip(deletions, self._pool.map(lambda w: self._delete(w, reachable), deletions)):
            changes.add(more)
            if not done:
                blocked.add(item.cluster_id)
        unswept = [i for i in reachable if i not in self._swept]
        for cluster_id, swept in zip(unswept, self._pool.map(lambda i: self._sweep(reachable[i]), unswept)):
            if swept:
                self._swept.add(cluster_id)
        applies = [w for w in work if w.state != "Deleting" and w.cluster_id in self._swept
                   and w.cluster_id not in blocked]
        for more in self._pool.map(lambda w: self._apply(w, reachable), applies):
            changes.add(more)
        if changes.requeued or changes.freed:
            self.wake("scheduler")
        if changes.dispatch:
            self.wake("dispatcher")
        return changes

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    # one placement ------------------------------------------------------------------------------
    def _client(self, row: Any) -> MemberClient:
        return self.clients.get(row.id, row.kubeconfig_encrypted, row.context)

    def _apply(self, work: Work, members: dict[int, Any]) -> Changes:
        if work.state == "Decided":
            with writing(self.database) as session:
                if not start_apply(session, work):
                    return Changes()
            crash_point("applying")
            work = replace(work, state="Applying")
        try:
            client = self._client(members[work.cluster_id])
            if (work.cluster_id, work.namespace) not in self._namespaces:
                jobsets.ensure_namespace(client, work.namespace)
                self._namespaces.add((work.cluster_id, work.namespace))
            existing = jobsets.get(client, work.namespace, work.name)
            adopted = existing is not None and jobsets.placement_id_of(existing) == str(work.placement_id)
            if existing is not None and not adopted and not self._clear_the_way(work, client, existing):
                return Changes()
            applied = jobsets.apply(client, work.jobset)
        except MemberError as exc:
            return self._member_error(work, exc)
        except (KubeconfigError, ValueError) as exc:  # a kubeconfig the broker can no longer use
            return self._retry(work, f"cannot connect: {exc}")
        crash_point("applied-on-member")
        with writing(self.database) as session:
            changes = finish_apply(session, work, applied, self.now(), adopted=adopted)
        crash_point("applied")
        return changes

    def _clear_the_way(self, work: Work, client: MemberClient, existing: dict) -> bool:
        """Another object holds the name: delete it if it is a stale copy of the broker's, else wait or fail."""
        owner = jobsets.placement_id_of(existing)
        what = f"{work.namespace}/{work.name}"
        if owner is None or not owner.isdigit():
            with writing(self.database) as session:
                fail_apply(session, work, f"a JobSet {what} that Archipelago did not create exists there", self.now())
            return False
        with self.database.sessions() as session:
            found = placement_owner(session, int(owner))
        if found is not None and found[1] in ACTIVE_STATES:
            self._retry(work, f"{what} is still held by placement {owner} of job {found[0]}")
            return False
        jobsets.delete(client, work.namespace, work.name, existing["metadata"]["uid"])
        if jobsets.get(client, work.namespace, work.name) is not None:
            self._retry(work, f"waiting for the stale copy {what} (placement {owner}) to be deleted")
            return False
        return True

    def _delete(self, work: Work, members: dict[int, Any]) -> tuple[bool, Changes]:
        """(whether the copy is gone, what changed)."""
        try:
            client = self._client(members[work.cluster_id])
            uid = work.member_uid
            if uid is None:  # applied, but killed before the broker recorded it: find it by its label
                found = jobsets.get(client, work.namespace, work.name)
                if found is not None and jobsets.placement_id_of(found) == str(work.placement_id):
                    uid = found["metadata"]["uid"]
            if uid is not None:
                jobsets.delete(client, work.namespace, work.name, uid)
                crash_point("deleted-on-member")
                found = jobsets.get(client, work.namespace, work.name)
                if found is not None and found["metadata"]["uid"] == uid:  # foreground: children go first
                    self._retry(work, "waiting for the member to finish deleting it", RETRY_BASE)
                    return False, Changes()
        except MemberError as exc:
            return False, self._member_error(work, exc)
        except (KubeconfigError, ValueError) as exc:
            return False, self._retry(work, f"cannot connect: {exc}")
        with writing(self.database) as session:
            changes = finish_delete(session, work, self.now())
        crash_point("deleted")
        return True, changes

    def _sweep(self, row: Any) -> bool:
        """Delete the broker's copies on a member that no placement owns any more; whether it worked."""
        try:
            client = self._client(row)
            items, _ = jobsets.list_owned(client)  # listed BEFORE reading what is owned: nothing new is missed
            with self.database.sessions() as session:
                kept = kept_placements(session, row.id)
            stale = [obj for obj in items if not (jobsets.placement_id_of(obj) or "").isdigit()
                     or int(jobsets.placement_id_of(obj)) not in kept]
            for obj in stale:
                meta = obj["metadata"]
                jobsets.delete(client, meta["namespace"], meta["name"], meta["uid"])
        except (MemberError, KubeconfigError, ValueError) as exc:
            log.info("dispatcher: sweep of %s failed: %s", row.name, exc)
            return False
        if stale:
            with writing(self.database) as session:
                for obj in stale:
                    meta = obj["metadata"]
                    events.record(session, "cluster", row.name, "StaleCopyDeleted",
                                  f"deleted {meta['namespace']}/{meta['name']} (placement "
                                  f"{jobsets.placement_id_of(obj)}), a copy the broker no longer owns",
                                  warning=True)
        return True

    # errors -------------------------------------------------------------------------------------
    def _member_error(self, work: Work, exc: MemberError) -> Changes:
        MEMBER_ERRORS.labels(work.cluster).inc()
        if exc.reason == "NotFound":
            self._namespaces.discard((work.cluster_id, work.namespace))  # the namespace may be gone
        if work.state != "Deleting" and jobsets.is_permanent(exc):
            with writing(self.database) as session:
                return fail_apply(session, work, str(exc), self.now())
        return self._retry(work, str(exc))

    def _retry(self, work: Work, error: str, delay: float | None = None) -> Changes:
        with writing(self.database) as session:
            retry_later(session, work, error, delay if delay is not None else
                        backoff(work.attempts + 1, RETRY_BASE, RETRY_CAP), self.now())
        return Changes()
