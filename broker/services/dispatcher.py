"""The dispatcher loop: committed placements become JobSets on their members, and go away again.

One pass (`run_once`):
1. In one transaction (if a read finds anything to do): cancelled jobs' placements to Deleting; fail-over of
   members NotReady for longer than ARCHIPELAGO_FAILOVER_TOLERATION, of Draining members' unstarted placements,
   of removed members' placements.
   Then placements whose pods are not all ready within their startup timeout: their member is asked why
   (its pods' scheduler and kubelet messages), and the gang is evicted, its job re-queued with back-off.
2. Deletions due, on every member that answers (a member still down keeps them for later).
3. A member seen for the first time by this process, or back from NotReady, is swept first: copies
   labelled by the broker that no placement owns any more are deleted before anything starts there.
4. Applies due, on members that are swept and whose deletions went through: a placement whose JobSet an
   override rule would make invalid fails (naming the rule) without a member call; the pass commits every
   step Decided → Applying (a slice per transaction) before any member is touched, lists each namespace it
   applies to once (created if missing: a name held by a stale copy is cleared, by a foreign object refused),
   then applies each JobSet.
Deletions and applies run in one lane per member (LANE_WIDTH calls in flight to a member, members side
by side: a slow member delays only its own work); their results are committed in batches as they come
(what finished while the last batch was committing), each batch one transaction, so the database work
overlaps the member calls. A failing member backs off per placement (retryable errors) or fails the
placement with the member's message (permanent ones).
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Iterator

from sqlalchemy import select

from broker.process.metrics import MEMBER_ERRORS
from broker.process.settings import Settings
from broker.services.loop import LoopService, in_lane
from broker.services.members import UNAVAILABLE_STATES, MemberClients
from broker.services.outcomes import RETRY_BASE, Outcome, crash_point, record_outcomes
from broker.store import events
from broker.store.db.models import PLACEMENT_ACTIVE_STATES, Cluster, utcnow
from broker.store.db.runtime import Database, write_in_slices
from broker.store.outbox import (Changes, StartupPolicy, Unready, Work, cancellations_or_fail_over_due, due_work,
                                 evict_all_unready, fail_over, kept_placements, overdue_startups, placement_owner,
                                 request_deletions, start_apply, tenant_namespace_labels)
from clusters import jobsets
from clusters.claim_templates import apply_templates
from clusters.kubeconfig import KubeconfigError
from clusters.member import MemberClient, MemberError
from clusters.rules.pods import why_not_ready

log = logging.getLogger("archipelago.dispatcher")
# What `_existing` found of a namespace on a member: its JobSets by name, or why the placements there cannot go now.
Existing = dict[str, dict] | MemberError | jobsets.NotOurs | str

# Placements moved Decided → Applying per transaction, at most: after a new leader's first cycle, 2,000 in one held
# SQLite's write lock 60-80 ms (bench/leader_api.py) while the submissions waited. Fewer where they take longer.
APPLIES_PER_TRANSACTION = 1_000
LANE_WIDTH = 4  # calls in flight to one member at once (its MemberClient pool keeps more connections)
# How long a member's answer to a dry run stands for the copies of the same admission key: its admission (webhooks,
# policies, quotas, namespace labels) may change, and a refusal may be lifted.
ADMISSION_TTL = 60.0


class DispatcherService(LoopService):
    name = "dispatcher"

    def __init__(self, database: Database, settings: Settings, clients: MemberClients, *,
                 now: Callable[[], datetime] = utcnow, lane: frozenset[int] | None = None,
                 fails_over: bool = True) -> None:
        """`lane`: the members whose work it does (None: all); `fails_over`: whether it also does step 1's
        cancellations and fail-overs (the leader's, when replicas share the members)."""
        super().__init__(settings.dispatch_interval)
        self.database, self.settings, self.clients, self.now = database, settings, clients, now
        self.lane, self.fails_over = lane, fails_over
        self._pool = ThreadPoolExecutor(settings.member_workers, thread_name_prefix="dispatcher")
        self._lanes: dict[int, ThreadPoolExecutor] = {}  # cluster id → that member's calls
        # (cluster id, namespace) known to be the broker's there → the labels it set (None: not known)
        self._namespaces: dict[tuple[int, str], dict[str, str] | None] = {}
        self._swept: set[int] = set()  # members swept since this process met them or they came back
        # (cluster id, admission key) -> (monotonic time, the member's refusal, or None: admitted), `_ask_admission`
        self._admission: dict[tuple[int, str | None], tuple[float, str | None]] = {}

    def run_once(self) -> Changes:
        now = self.now()
        changes = Changes()
        if self.fails_over:
            with self.database.read() as session:
                due = cancellations_or_fail_over_due(session, now, self.settings.failover_toleration)
            if due:  # else no write lock for this step (the read decided nothing: the write asks again)
                # one transaction each: each locks its jobs ids ascending, and two such runs in one transaction
                # are not one ascending run (a batch holding a job of the second could wait for one of the first)
                with self.database.write() as session:
                    changes.add(request_deletions(session, now))
                with self.database.write() as session:
                    changes.add(fail_over(session, now, self.settings.failover_toleration))
            changes.add(self._evict_on_pull_members(now))
        with self.database.read() as session:
            members = {row.id: row for row in session.execute(in_lane(
                select(Cluster.id, Cluster.name, Cluster.state, Cluster.kubeconfig_encrypted, Cluster.context)
                .where(Cluster.mode == "push"), self.lane))}
            reachable = {i: row for i, row in members.items() if row.state not in UNAVAILABLE_STATES}
            # on a member that is away, fail-over decides
            overdue = overdue_startups(session, now, self.settings.startup_timeout, reachable)
            wanted = tenant_namespace_labels(session) if self._namespaces else {}
        self._relabel(wanted, reachable)
        if overdue:
            changes.add(self._evict(overdue, reachable, now))
        with self.database.read() as session:
            work = due_work(session, now, reachable)
        self._swept &= set(reachable)  # a member that was away is swept again when it returns

        for gone in set(self._lanes) - set(members):
            self._lanes.pop(gone).shutdown(wait=False)

        deletions = [w for w in work if w.deletes]
        if deletions:
            crash_point("deleting")
        outcomes, recorded = self._in_lanes(deletions, lambda w: self._delete(w, reachable[w.cluster_id]), "deleted",
                                            reachable)
        changes.add(recorded)
        blocked = {o.work.cluster_id for o in outcomes if o.kind != "done"}

        unswept = [i for i in reachable if i not in self._swept]
        for cluster_id, swept in zip(unswept, self._pool.map(lambda i: self._sweep(reachable[i]), unswept)):
            if swept:
                self._swept.add(cluster_id)

        applies = [w for w in work if not w.deletes and w.cluster_id in self._swept
                   and w.cluster_id not in blocked]
        refused = [w for w in applies if w.refused is not None]  # an override rule would make it invalid
        if refused:
            changes.add(self._record([Outcome(w, "fail", w.refused) for w in refused]))
            applies = [w for w in applies if w.refused is None]
        groups: dict[tuple[int, str], Work] = {}  # one work of each namespace on each member speaks for them all
        for w in applies:
            groups.setdefault((w.cluster_id, w.namespace), w)
        found = dict(zip(groups, self._pool.map(lambda w: self._existing(reachable[w.cluster_id], w),
                                                groups.values())))
        decided = [w for w in applies if w.state == "Decided"]
        if decided:  # each member asked first whether it would admit them (a dry run): a refusal touches nothing
            asked = self._ask_admission(decided, reachable, found)
            if asked:
                changes.add(self._record(asked))
                held = {o.work.placement_id for o in asked}
                applies = [w for w in applies if w.placement_id not in held]
                decided = [w for w in decided if w.placement_id not in held]
        if decided:
            started: set[int] = set()  # committed before any member is touched, a slice per transaction
            write_in_slices(self.database, decided, most=APPLIES_PER_TRANSACTION,
                            write=lambda session, works: started.update(start_apply(session, works)))
            crash_point("applying")
            applies = [w if w.state == "Applying" else replace(w, state="Applying") for w in applies
                       if w.state == "Applying" or w.placement_id in started]
        changes.add(self._in_lanes(applies, lambda w: self._apply(w, reachable[w.cluster_id],
                                                                  found[(w.cluster_id, w.namespace)]), "applied",
                                   reachable)[1])

        changes.wake(self.wake)
        return changes

    def retarget(self, lane: frozenset[int]) -> list:
        """Its member calls run within passes: once the pass under way is over, none is at work on a member left
        (whose executor the next pass shuts down); a member that comes back to the lane is swept again first, and
        its namespaces looked up again."""
        with self._lock:
            self.lane = lane
            self._swept &= lane
            self._namespaces = {key: labels for key, labels in self._namespaces.items() if key[0] in lane}
        return []

    def stop(self) -> None:
        for executor in (self._pool, *self._lanes.values()):
            executor.shutdown(wait=True, cancel_futures=True)

    def _in_lanes(self, works: list[Work], call: Callable[[Work], Outcome], step: str,
                  members: dict[int, Any]) -> tuple[list[Outcome], Changes]:
        """`call` for each work in its member's lane, the outcomes recorded in batches as they come (and the copies
        their records found orphaned deleted at once). The test hook's steps: `<step>-on-member` before a batch with
        a call done is committed, `<step>` after."""
        pending: set[Future] = {self._lane(w.cluster_id).submit(call, w) for w in works}
        outcomes: list[Outcome] = []
        changes = Changes()
        with _abandoned_on_abort(pending):
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                batch = [future.result() for future in finished]
                done = any(o.kind == "done" for o in batch)
                if done:
                    crash_point(f"{step}-on-member")
                recorded = self._record(batch)
                if recorded.orphans:
                    self._delete_orphans(recorded.orphans, members)
                    recorded.orphans = []
                changes.add(recorded)
                if done:
                    crash_point(step)
                outcomes += batch
        return outcomes, changes

    def _lane(self, cluster_id: int) -> ThreadPoolExecutor:
        if cluster_id not in self._lanes:
            self._lanes[cluster_id] = ThreadPoolExecutor(LANE_WIDTH, thread_name_prefix=f"dispatcher-{cluster_id}")
        return self._lanes[cluster_id]

    def _record(self, outcomes: list[Outcome]) -> Changes:
        return record_outcomes(self.database, outcomes, self.now())

    def _evict(self, overdue: list[Unready], members: dict[int, Any], now: datetime) -> Changes:
        """Placements not ready in time go (their deletion is the next step of this pass); the member is asked
        first why their pods are not ready, so that the job's event says it."""
        return self._evict_saying(overdue, self._pool.map(lambda u: self._not_ready(members[u.cluster_id], u),
                                                          overdue), now)

    def _evict_on_pull_members(self, now: datetime) -> Changes:
        """The same startup timeout on pull members, which the broker cannot ask why: their agents delete the
        evicted copies when they next ask for their work. A member that is away is fail-over's to decide."""
        with self.database.read() as session:
            pulled = set(session.scalars(select(Cluster.id).where(Cluster.mode == "pull",
                                                                  Cluster.state.not_in(UNAVAILABLE_STATES))))
            overdue = overdue_startups(session, now, self.settings.startup_timeout, pulled)
        return self._evict_saying(overdue, ["its member is in pull mode: its agent does not say which pods are "
                                            "waiting"] * len(overdue), now) if overdue else Changes()

    def _evict_saying(self, overdue: list[Unready], why, now: datetime) -> Changes:
        policy = StartupPolicy(self.settings.startup_timeout, self.settings.startup_backoff,
                               self.settings.startup_avoid, self.settings.startup_eviction_limit)
        why = list(why)  # the members' answers, before the write lock: not while holding it
        with self.database.write() as session:
            return evict_all_unready(session, zip(overdue, why), now, policy)

    def _not_ready(self, member: Any, unready: Unready) -> str:
        try:
            return why_not_ready(jobsets.pods_of(self._client(member), unready.namespace, unready.placement_id))
        except (MemberError, KubeconfigError) as exc:
            return f"its member did not say which pods are waiting: {exc}"

    # one placement's member calls (no database writes: the pass records the outcomes) -----------------
    def _client(self, row: Any) -> MemberClient:
        return self.clients.get(row.id, row.kubeconfig_encrypted, row.context)

    def _existing(self, member: Any, work: Work) -> Existing:
        """The JobSets in the work's namespace on its member, by name: one list serves every placement there in this
        pass. The namespace is the broker's there, with its tenant's labels (created if missing, relabelled if they
        changed): else NotOurs, for each of them to be refused; or the error, for each of them to retry on."""
        key = (member.id, work.namespace)
        try:
            client = self._client(member)
            if key not in self._namespaces or self._namespaces[key] != work.namespace_labels:
                jobsets.ensure_namespace(client, work.namespace, work.namespace_labels, cluster=member.name,
                                         adoptable=work.adoptable or key in self._namespaces)
                self._namespaces[key] = work.namespace_labels
            return {obj["metadata"]["name"]: obj for obj in jobsets.list_in(client, work.namespace)}
        except (jobsets.NotOurs, MemberError) as exc:
            return exc
        except (KubeconfigError, ValueError) as exc:  # a kubeconfig the broker can no longer use
            return f"cannot connect: {exc}"

    def _apply(self, work: Work, member: Any, existing: Existing) -> Outcome:
        unusable = self._unusable(work, existing)
        if unusable is not None:
            return unusable
        self.database.ensure_leading()  # no token guards a member: an ex-leader stops here
        try:
            client = self._client(member)
            found = existing.get(work.name)
            adopted = found is not None and jobsets.placement_id_of(found) == str(work.placement_id)
            if found is not None and not adopted:
                blocked = self._clear_the_way(work, client, found)
                if blocked is not None:
                    return blocked
            apply_templates(client, work.claim_templates)  # before the JobSet: its first pods need them
            applied = jobsets.apply(client, work.jobset)
            apply_templates(client, work.claim_templates, owner=applied)  # then owned by it: they go when it goes
            return Outcome(work, "done", jobset=applied, adopted=adopted)
        except MemberError as exc:
            return self._member_error(work, exc)

    def _ask_admission(self, works: list[Work], members: dict[int, Any],
                       found: dict[tuple[int, str], Any]) -> list[Outcome]:
        """What the members' admission (validation, webhooks, Pod Security, quotas) says of the copies about to be
        applied for the first time, before anything is made there: the outcomes of those that cannot go now (refused,
        or their member not answering); the others are applied.

        A copy of what a member refused within ADMISSION_TTL seconds (the same admission key) is refused again without
        a request. The parts of a split JobSet are asked by a server-side dry run, one per admission key and member
        (it answers for the others for ADMISSION_TTL seconds): all or nothing, no part starts where another part
        would be refused. A whole JobSet is not asked apart: its apply asks the same, and makes nothing if refused."""
        now = time.monotonic()
        self._admission = {key: known for key, known in self._admission.items() if now - known[0] < ADMISSION_TTL}
        held, asking = [], {}
        for work in works:
            key = (work.cluster_id, work.admission_key)
            known = self._admission.get(key)
            existing = found[(work.cluster_id, work.namespace)]
            if known is not None:
                if known[1] is not None:
                    held.append(Outcome(work, "refuse", known[1]))
            # a name held already (a stale copy, another job's, someone else's object) is the apply's to sort out: a
            # dry run would be judged as a change to that object
            elif jobsets.PART_LABEL in work.jobset["metadata"]["labels"] and not (
                    isinstance(existing, dict) and work.name in existing):
                asking.setdefault(key, []).append(work)
        futures = {key: self._lane(key[0]).submit(self._dry_run, alike[0], members[key[0]],
                                                  found[(alike[0].cluster_id, alike[0].namespace)])
                   for key, alike in asking.items()}
        with _abandoned_on_abort(set(futures.values())):
            for key, future in futures.items():
                answer = future.result()
                if answer is None:
                    self._admission[key] = (now, None)
                else:
                    held += [replace(answer, work=work) for work in asking[key]]
        return held

    def _dry_run(self, work: Work, member: Any, existing: Existing) -> Outcome | None:
        """None: the member would admit the copy."""
        unusable = self._unusable(work, existing)
        if unusable is not None:
            return unusable
        self.database.ensure_leading()
        try:
            jobsets.apply(self._client(member), work.jobset, dry_run=True)
            return None
        except MemberError as exc:
            return self._member_error(work, exc)

    def _unusable(self, work: Work, existing: Existing) -> Outcome | None:
        """The outcome for a work whose namespace could not be listed (`_existing`); None if it was."""
        if isinstance(existing, MemberError):
            return self._member_error(work, existing)
        if isinstance(existing, jobsets.NotOurs):  # another member may take it
            return Outcome(work, "refuse", str(existing))
        if isinstance(existing, str):
            return Outcome(work, "retry", existing)
        return None

    def _relabel(self, wanted: dict[str, dict[str, str]], members: dict[int, Any]) -> None:
        """The broker's namespaces on reachable members whose tenant's labels changed (its Pod Security level) get
        the new ones; one that fails is tried again next pass."""
        stale = [key for key, labels in list(self._namespaces.items())
                 if key[0] in members and key[1] in wanted and labels != wanted[key[1]]]
        for key, labelled in zip(stale, self._pool.map(lambda k: self._label(members[k[0]], k[1], wanted[k[1]]),
                                                       stale)):
            if labelled:
                self._namespaces[key] = wanted[key[1]]

    def _label(self, member: Any, namespace: str, labels: dict[str, str]) -> bool:
        self.database.ensure_leading()
        try:
            jobsets.ensure_namespace(self._client(member), namespace, labels, adoptable=True, cluster=member.name)
            return True
        except (MemberError, KubeconfigError, ValueError, jobsets.NotOurs) as exc:
            log.info("dispatcher: labelling namespace %s on %s failed: %s", namespace, member.name, exc)
            return False

    def _clear_the_way(self, work: Work, client: MemberClient, existing: dict) -> Outcome | None:
        """Another object holds the name: delete it if it is a stale copy of the broker's (None: the way
        is clear), else wait or fail."""
        owner = jobsets.placement_id_of(existing)
        what = f"{work.namespace}/{work.name}"
        if owner is None or not owner.isdigit():
            return Outcome(work, "fail", f"a JobSet {what} that Archipelago did not create exists there")
        with self.database.read() as session:
            found = placement_owner(session, int(owner))
        if found is not None and found[1] in PLACEMENT_ACTIVE_STATES:
            return Outcome(work, "retry", f"{what} is still held by placement {owner} of job {found[0]}")
        jobsets.delete(client, work.namespace, work.name, existing["metadata"]["uid"])
        if jobsets.get(client, work.namespace, work.name) is not None:
            return Outcome(work, "retry", f"waiting for the stale copy {what} (placement {owner}) to be deleted")
        return None

    def _delete(self, work: Work, member: Any) -> Outcome:
        self.database.ensure_leading()
        try:
            client = self._client(member)
            if not jobsets.delete_copy(client, work.namespace, work.name, work.placement_id, work.member_uid):
                return Outcome(work, "retry", "waiting for the member to finish deleting it", RETRY_BASE)
            return Outcome(work, "done")
        except MemberError as exc:
            return self._member_error(work, exc)
        except (KubeconfigError, ValueError) as exc:
            return Outcome(work, "retry", f"cannot connect: {exc}")

    def _sweep(self, row: Any) -> bool:
        """Delete the broker's copies on a member that no placement owns any more; whether it worked."""
        self.database.ensure_leading()
        try:
            stale, kept = jobsets.delete_owned(self._client(row), self._kept)
        except (MemberError, KubeconfigError, ValueError) as exc:
            log.info("dispatcher: sweep of %s failed: %s", row.name, exc)
            return False
        for obj in kept:  # namespaces holding its copies are the broker's: their labels are kept up to date
            self._namespaces.setdefault((row.id, obj["metadata"]["namespace"]), None)
        if stale:
            with self.database.write() as session:
                for obj in stale:
                    meta = obj["metadata"]
                    events.record(session, "cluster", row.name, "StaleCopyDeleted",
                                  f"deleted {meta['namespace']}/{meta['name']} (placement "
                                  f"{jobsets.placement_id_of(obj)}), a copy the broker no longer owns",
                                  warning=True)
        return True

    def _delete_orphans(self, orphans: list[Work], members: dict[int, Any]) -> None:
        """Copies applied to members removed while the calls ran (the removal deleted what it found before them, and
        their records said so in an event): deleted now, through the client the pass still holds, or the event says
        what is left there."""
        said = list(self._pool.map(lambda w: self._delete_orphan(w, members[w.cluster_id]), orphans))
        with self.database.write() as session:
            for work, (reason, message) in zip(orphans, said):
                events.record(session, "cluster", work.cluster, reason, message, warning=True)

    def _delete_orphan(self, work: Work, member: Any) -> tuple[str, str]:
        what = f"{work.namespace}/{work.name} (placement {work.placement_id})"
        self.database.ensure_leading()
        try:
            jobsets.delete_copy(self._client(member), work.namespace, work.name, work.placement_id, work.member_uid)
        except (MemberError, KubeconfigError, ValueError) as exc:
            return "StaleCopyLeft", (f"{what} was applied as the member was being removed and could not be deleted "
                                     f"({exc}): delete it there")
        return "StaleCopyDeleted", f"deleted {what}, applied as the member was being removed"

    def _kept(self, placement_ids: set[int]) -> set[int]:
        with self.database.read() as session:
            return kept_placements(session, placement_ids)

    # errors -------------------------------------------------------------------------------------
    def _member_error(self, work: Work, exc: MemberError) -> Outcome:
        MEMBER_ERRORS.labels(work.cluster).inc()
        if exc.reason == "NotFound":
            self._namespaces.pop((work.cluster_id, work.namespace), None)  # the namespace may be gone
        if not work.deletes and jobsets.is_permanent(exc):  # the member will not take it: another member may
            self._admission[(work.cluster_id, work.admission_key)] = (time.monotonic(), str(exc))
            return Outcome(work, "refuse", str(exc))
        return Outcome(work, "retry", str(exc))


@contextlib.contextmanager
def _abandoned_on_abort(futures: set[Future]) -> Iterator[None]:
    """A pass that aborts (a member call fenced, a commit refused) leaves none of its member calls behind: those not
    started are cancelled, those under way waited for, before the error goes on."""
    try:
        yield
    except BaseException:
        for future in futures:
            future.cancel()
        wait(futures)
        raise
