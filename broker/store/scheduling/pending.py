"""The pending half of the scheduler's snapshot, kept between cycles (after Kueue's in-memory queues): the pending
jobs' rows and parsed placement specs, each queue in its order, read again only where they changed."""

from __future__ import annotations

import sys
from bisect import bisect_left, insort
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping

from sqlalchemy import String, cast, func, literal_column, select
from sqlalchemy.orm import Session

from broker.engine.jobset import JobSetError, PartSpec, PlacementSpec, from_placement_record, parse_jobset
from broker.engine.placement import CycleResult, Parked, PendingJob, Waiting, shape_of
from broker.engine.placement.cycle import JOBS_BETWEEN_PAUSES
from broker.engine.placement.model import QUEUE_ORDER, Backlog, no_pause
from broker.store.db.models import (Job, Placement as PlacementRow, Queue as QueueRow, SharedJson, Tenant as TenantRow,
                                    as_utc, json_text)
from broker.store.db.session import in_chunks
from broker.store.scheduling.records import (HELD_STATES, CommitOutcome, Inventory, PendingRecord, reasons_digest,
                                             stored_reasons_digest)


# as `ix_jobs_pending` says it, the state a literal: a partial index serves only a query that names its condition
PENDING = (Job.state == literal_column("'Queued'"), Job.cancel_requested_at.is_(None))

# every pending id from `ix_jobs_pending` alone: with no bound on the id, SQLite's planner takes ix_jobs_state_id and
# reads each row's cancel_requested_at from the table (three times slower at 100,000 pending)
_EVERY_PENDING = (*PENDING, Job.id > 0)


@dataclass(frozen=True, slots=True)
class _PendingRow:
    """A pending job's row as kept between cycles: what the engine sees of it, and its stored reasons."""

    job: PendingJob | None  # None: its manifest no longer parses (`unplaceable`)
    unplaceable: Waiting | None
    record: PendingRecord
    requeue_at: datetime | None
    avoid: Mapping[str, str] | None
    refused: Mapping[str, str] | None = None  # the members whose admission refused it, and their words


class PendingJobs:
    """The pending jobs' rows, kept by the scheduler between cycles (after Kueue's in-memory queues), so
    that a cycle reads only whether the pending ids are the kept ones and those above the highest (a digest of
    them, from an index: `_new_ids`), the rows of the new ones, and the earlier placements of those and of the
    jobs placed before.

    Why nothing is missed: a row the scheduler reads changes only by leaving the pending set (admitted,
    cancelled, finished) and coming back to it (requeued with a new reason, back-off and avoided
    clusters); coming back needs an admission first, and only a scheduler admits, inserting placements
    under its commit lock. So while the newest placement id is the one this scheduler's last commit
    left (`fence`), every pending id it knows stands for the row it read; a job that came back since is
    one it admitted itself and forgot (`committed`), and shows in the digest of the pending ids (`_IdDigest`).
    Any doubt — another scheduler placed meanwhile, a cycle dropped or failed (`forget`), `resync_interval`
    seconds passed — makes the next read a full one.
    The stored reasons kept are those this scheduler wrote: only the leader writes them (lease fencing).
    """

    def __init__(self, resync_interval: float = 0.0, pause: Callable[[], None] = no_pause) -> None:
        self.resync_interval = resync_interval
        self.pause = pause  # between rows read (`broker.process.courtesy`): a manifest parsed holds the interpreter ~0.5 ms
        self.rows: dict[str, _PendingRow] = {}
        self.ids: set[int] = set()  # the rows' job ids, as the pending index gives them
        self.digest = _IdDigest()  # of `ids`
        # the rows' jobs a cycle passes on as they are (`plain`; by queue, each in its order: `queued`), and the
        # others, looked at one by one each cycle: backing off, avoiding clusters, placed before (`single_out`), or no
        # longer parsing
        self.plain: dict[str, PendingJob] = {}
        self.queued: dict[str, list[PendingJob]] = {}
        self.others: set[str] = set()
        self.fence: int | None = None  # None: the next read is a full one
        self.full_read_at = float("-inf")  # snapshot clock of the last full read
        self.full_reads = 0
        self.parked: frozenset[str] = frozenset()  # the last cycle's inadmissible jobs
        self.inputs: tuple | None = None  # `Inventory.inputs` of the cycle that found them inadmissible
        self.held: dict[str, frozenset[str]] = {}  # cluster -> the nodes that cycle held
        self.parts: dict[str, tuple[PartSpec, ...]] = {}  # shape -> the parts its pending jobs share

    def forget(self) -> None:
        """In doubt: read every pending row next time, and decide every job."""
        self.fence, self.parked, self.inputs = None, frozenset(), None

    def reads_all(self, now: float) -> bool:
        """Will the next read (at `now`, snapshot clock) be a full one, as far as this scheduler knows? (Another
        scheduler's commit since makes it one too.)"""
        return self.fence is None or now - self.full_read_at >= self.resync_interval

    def still_parked(self, inventory: Inventory) -> Parked:
        """The last cycle's inadmissible jobs, and what changed since that could make one fit: clusters that changed
        or where a live placement ended or changed (capacity back), the tenants of those placements (quota back),
        and the nodes that cycle held (where they are not held again, capacity is back).
        (New running work is no reason: it takes what was free, and preempting it gives back no more than that.)
        Any queue or tenant edit: every job is decided again."""
        before, now = self.inputs, inventory.inputs
        if before is None or before[1:3] != now[1:3]:
            return Parked()
        clusters = {name for name in before[0].keys() | now[0].keys() if before[0].get(name) != now[0].get(name)}
        tenants = set()
        for placement_id, placement in before[3].items():
            if now[3].get(placement_id) != placement:
                clusters.add(placement.cluster)
                tenants.add(placement.tenant)
        return Parked(self.parked, frozenset(clusters), frozenset(tenants), self.held)

    def committed(self, inventory: Inventory, result: CycleResult, outcome: CommitOutcome) -> None:
        """Bring the rows in line with what a commit wrote: admitted (or lost) jobs leave, reasons are the new ones.
        A placement decided but not committed (its job cancelled meanwhile) leaves capacity the cycle counted taken."""
        if outcome.stale:
            self.forget()
            return
        self.parked = frozenset() if outcome.dropped else result.inadmissible
        self.inputs = inventory.inputs
        self.held = {}
        for hold in result.holds.values():
            self.held[hold.cluster] = self.held.get(hold.cluster, frozenset()) | frozenset(hold.nodes)
        for job_id in (*outcome.admitted, *outcome.dropped):
            self._drop(str(job_id))
        # only the reasons that changed: a new row for each of 100,000 waiting jobs every cycle was garbage the
        # collector's full collections walked, pausing the API in the same process (bench/leader_api.py)
        # (built field by field: `dataclasses.replace` twice a row took 0.5 s of a new leader's first cycle)
        digests: dict[int, int] = {}
        causes: dict[tuple, frozenset[str]] = {}
        for count, waiting in enumerate(outcome.changed):
            if not count % JOBS_BETWEEN_PAUSES:
                self.pause()
            row = self.rows.get(waiting.job_id)
            if row is not None:
                record = PendingRecord(tenant_id=row.record.tenant_id, reason=waiting.message,
                                       reasons_digest=reasons_digest(waiting.clusters, digests),
                                       causes=row.record.told(waiting, causes))
                self.rows[waiting.job_id] = _PendingRow(job=row.job, unplaceable=row.unplaceable, record=record,
                                                        requeue_at=row.requeue_at, avoid=row.avoid,
                                                        refused=row.refused)
        self.fence = outcome.fence

    def _read(self, session: Session, fence: int, now: float) -> list[int] | None:
        """Refresh the rows: all of them in doubt, else the new ones only (and drop those no longer pending).
        A manifest never changes after submission: those parsed already are kept through a full read.
        Rows are read a slice at a time, so that no more than a slice's manifests and reasons are in memory at once (and
        the distinct JSON texts decoded: jobs of one shape share theirs).
        Returns the jobs whose earlier placements to read: those just read and those placed before (None: all)."""
        columns = select(Job.id, Job.tenant_id, Job.priority, Job.submitted_at, Job.reason,
                         json_text(Job.waiting_reasons), QueueRow.name, TenantRow.name, json_text(Job.avoid),
                         Job.requeue_at, json_text(Job.refused), Job.declared_runtime, Job.runtime_bound) \
            .join(QueueRow, QueueRow.id == Job.queue_id).join(TenantRow, TenantRow.id == Job.tenant_id)
        kept = self.rows
        full = self.fence != fence or self.reads_all(now)
        if full:
            wanted = sorted(_pending_ids(session))
            self.rows, self.ids, self.plain, self.queued, self.others = {}, set(), {}, {}, set()
            self.digest, self.parked, self.parts = _IdDigest(), frozenset(), {}
            self.full_read_at, self.full_reads = now, self.full_reads + 1
        else:
            wanted = self._new_ids(session)
        self.fence = fence
        recorded: dict[str | None, tuple[PlacementSpec, str] | None] = {None: None}  # `_recorded`'s memo
        digests, texts = SharedJson(stored_reasons_digest), SharedJson()  # jobs of one shape: the same reasons
        for chunk in in_chunks(wanted):
            rows = session.execute(columns.where(Job.id.in_(chunk))).all()
            new = [row.id for row in rows if str(row.id) not in kept]  # a kept row's spec is kept with it
            records = dict(session.execute(select(Job.id, Job.placement_spec).where(Job.id.in_(new))).all()) \
                if new else {}
            missing = [job_id for job_id, text in records.items() if _recorded(text, recorded, self.parts) is None]
            manifests = dict(session.execute(select(Job.id, Job.manifest).where(Job.id.in_(missing))).all()) \
                if missing else {}
            for row in rows:
                self.pause()
                record = PendingRecord(row.tenant_id, row.reason, digests(row.waiting_reasons))
                self._keep(row.id, _pending_row(row, record, texts(row.avoid), texts(row.refused),
                                                kept.get(str(row.id)), recorded[records.get(row.id)],
                                                manifests.get(row.id), self.parts), in_order=not full)
        if full:  # each queue sorted once, rather than each job put in its place
            self.queued = Backlog.of(self.plain.values()).queues
        return None if full else sorted({*wanted, *map(int, self.others)})

    def _new_ids(self, session: Session) -> list[int]:
        """The ids pending now and not kept, once those no longer pending are dropped. Most cycles, the database's
        digest of the pending ids (`_IdDigest`) is that of the kept ones and those above the highest kept: no more
        to read. Else (a job cancelled, requeued, or committed out of id order) every pending id is read."""
        above = max(self.ids, default=0)
        new = set(session.scalars(select(Job.id).where(*PENDING, Job.id > above))) - self.ids
        digest = session.execute(select(*_IdDigest.of_column(Job.id)).where(*_EVERY_PENDING)).one()
        if self.digest.with_(new) == tuple(map(int, digest)):
            return sorted(new)
        ids = _pending_ids(session)
        for gone in self.ids - ids:
            self._drop(str(gone))
        return sorted(ids - self.ids)

    def _keep(self, job_id: int, row: _PendingRow, in_order: bool = True) -> None:
        """Keep the row; a plain job also in its queue's order, unless `in_order` is False (the caller sorts)."""
        key = str(job_id)
        self.rows[key] = row
        if job_id not in self.ids:
            self.ids.add(job_id)
            self.digest.add(job_id)
        self._unplain(key)
        if row.job is not None and row.requeue_at is None and not row.avoid and not row.refused:
            self.plain[key] = row.job
            self.others.discard(key)
            if in_order:
                insort(self.queued.setdefault(row.job.queue, []), row.job, key=QUEUE_ORDER)
        else:
            self.others.add(key)

    def _drop(self, job_id: str) -> None:
        self.rows.pop(job_id, None)
        if int(job_id) in self.ids:
            self.ids.remove(int(job_id))
            self.digest.add(int(job_id), -1)
        self._unplain(job_id)
        self.others.discard(job_id)

    def _unplain(self, job_id: str) -> bool:
        """Take the job out of the plain ones (and its queue's order), if it is one; was it?"""
        job = self.plain.pop(job_id, None)
        if job is None:
            return False
        listed = self.queued[job.queue]
        index = bisect_left(listed, job.queue_order, key=QUEUE_ORDER)
        if index == len(listed) or listed[index] is not job:
            raise RuntimeError(f"job {job_id} is not where its queue's order puts it: the kept queues are out of step")
        del listed[index]
        return True

    def single_out(self, job_ids: Iterable[str]) -> None:
        """These jobs were placed before: from now on a cycle reads their previous clusters and held parts."""
        for job_id in job_ids:
            if self._unplain(job_id):
                self.others.add(job_id)


_PRIME = 1_000_003  # `_IdDigest`'s powers are taken modulo it


@dataclass(slots=True)
class _IdDigest:
    """How many ids a set holds, and the sums of the ids, their squares and their cubes (the powers modulo a prime,
    so that the database's integers do not overflow). Sets with one digest are the same unless at least four ids
    went out and four came in at once, chosen to match (as 1, 5, 8, 12 and 2, 3, 10, 11 do): the next full read
    repairs that, and meanwhile a cancelled job is only refused at the commit, a requeued one waits."""

    count: int = 0
    total: int = 0
    squares: int = 0
    cubes: int = 0

    @staticmethod
    def of_column(column) -> tuple:
        residue = column % _PRIME
        square = residue * residue % _PRIME
        return (func.count(column), func.coalesce(func.sum(column), 0), func.coalesce(func.sum(square), 0),
                func.coalesce(func.sum(square * residue % _PRIME), 0))

    def add(self, job_id: int, sign: int = 1) -> None:
        residue = job_id % _PRIME
        square = residue * residue % _PRIME
        self.count, self.total = self.count + sign, self.total + sign * job_id
        self.squares, self.cubes = self.squares + sign * square, self.cubes + sign * (square * residue % _PRIME)

    def with_(self, ids: Iterable[int]) -> tuple[int, int, int, int]:
        more = _IdDigest(self.count, self.total, self.squares, self.cubes)
        for job_id in ids:
            more.add(job_id)
        return more.count, more.total, more.squares, more.cubes


def _pending_ids(session: Session) -> set[int]:
    """Which jobs are pending, in one row: SQLite's driver lets go of the GIL for each row it steps through, and while
    the API's threads were busy it waited to get it back each time — 100,000 ids as rows took 0.8 s of a cycle (50 ms
    in a quiet process), as one string 50 ms either way."""
    listed = session.scalar(select(func.aggregate_strings(cast(Job.id, String), ",")).where(*_EVERY_PENDING))
    return set(map(int, listed.split(","))) if listed else set()


def _recorded(text: str | None, memo: dict[str | None, tuple[PlacementSpec, str] | None],
              parts: dict[str, tuple[PartSpec, ...]]) -> tuple[PlacementSpec, str] | None:
    """The spec and shape a job's `placement_spec` record holds, once per text (the jobs of one template share one;
    its parts are those of its shape, `parts`); None without a record this version reads (submitted before records
    were written): its manifest is parsed."""
    if text not in memo:
        try:
            spec = from_placement_record(text)
        except (ValueError, KeyError, TypeError):
            memo[text] = None
        else:
            shape = sys.intern(shape_of(spec))
            shared = parts.setdefault(shape, spec.parts)
            memo[text] = (spec if shared is spec.parts else replace(spec, parts=shared)), shape
    return memo[text]


def _pending_row(row: Any, record: PendingRecord, avoid: Mapping[str, str] | None, refused: Mapping[str, str] | None,
                 kept: _PendingRow | None, recorded: tuple[PlacementSpec, str] | None, manifest: dict | None,
                 parts: dict[str, tuple[PartSpec, ...]]) -> _PendingRow:
    """The row as read, with its placement spec: kept from an earlier read, else its record's (`_recorded`), else
    its manifest parsed. Jobs of one shape share one copy of their parts (`parts`, by shape): at 100,000 pending
    jobs that is a hundred megabytes less."""
    job_id = str(row.id)
    requeue_at = row.requeue_at and as_utc(row.requeue_at)
    if kept is not None and kept.unplaceable is not None:
        return replace(kept, record=record, requeue_at=requeue_at)
    if kept is not None:
        spec, shape = kept.job.spec, kept.job.shape
        parts.setdefault(shape, spec.parts)
    elif recorded is not None:
        spec, shape = recorded
    else:
        try:
            spec = parse_jobset(manifest)
        except JobSetError as exc:
            return _PendingRow(None, Waiting(job_id, f"its manifest cannot be placed: {exc}",
                                                  cause="manifest"), record, requeue_at, None)
        shape = sys.intern(shape_of(spec))  # one string per shape, however many jobs have it
        shared = parts.setdefault(shape, spec.parts)
        if shared is not spec.parts:
            spec = replace(spec, parts=shared)
    job = PendingJob(job_id, row[7], row[6], row.priority, as_utc(row.submitted_at).timestamp(), spec, shape=shape,
                     runtime=row.declared_runtime or row.runtime_bound)  # backfill trusts what the job says
    return _PendingRow(job, None, record, requeue_at, avoid or None, refused or None)


def read_pending(session: Session, inventory: Inventory, pending: PendingJobs) -> None:
    placed_before = pending._read(session, inventory.fence, inventory.snapshot.now)
    now = datetime.fromtimestamp(inventory.snapshot.now, timezone.utc)
    previous: dict[str, set[str]] = {}
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    # Their earlier placements: every pending job's on a full read; else those of the rows just read and of the jobs
    # placed before (`single_out`), as the others have none — a job gets placements only by leaving the pending set.
    columns = select(PlacementRow.job_id, PlacementRow.part, PlacementRow.cluster_name, PlacementRow.generation,
                     PlacementRow.state)
    if placed_before is None:
        rows = session.execute(columns.join(Job, Job.id == PlacementRow.job_id).where(*PENDING)).all()
    else:
        rows = [row for chunk in in_chunks(placed_before)
                for row in session.execute(columns.where(PlacementRow.job_id.in_(chunk)))]
    for job_id, part, cluster, generation, state in rows:
        key = (str(job_id), part)
        inventory.generations[key] = max(generation, inventory.generations.get(key, 0))
        newest[key] = max(newest.get(key, (0, "")), (generation, state))
        previous.setdefault(str(job_id), set()).add(cluster)
    # A split job back in its queue with some parts still held (running elsewhere, or done) has only
    # the others placed again: a failed part is re-placed alone.
    held: dict[str, set[str]] = {}
    for (job_id, part), (_, state) in newest.items():
        if part and state in HELD_STATES:
            held.setdefault(job_id, set()).add(part)
    pending.single_out(previous.keys() & pending.plain.keys())
    inventory.records = _Records(pending.rows)
    others: dict[str, list[PendingJob]] = {}
    for job_id in sorted(pending.others):
        row = pending.rows[job_id]
        if row.requeue_at is not None and row.requeue_at > now:
            continue  # backing off
        if row.unplaceable is not None:
            inventory.unplaceable[job_id] = row.unplaceable
            continue
        job = row.job
        if held.get(job_id):  # the parts left are another shape: the engine shares answers by shape
            spec = replace(job.spec, parts=tuple(p for p in job.spec.parts if p.name not in held[job_id]))
            job = replace(job, spec=spec, shape=sys.intern(shape_of(spec)))
        if job_id in previous or row.avoid or row.refused:
            job = replace(job, previous_clusters=tuple(sorted(previous.get(job_id, ()))),
                          avoided=_avoided(row.avoid, now), refused=MappingProxyType(dict(row.refused or {})))
        if job.spec.parts:
            others.setdefault(job.queue, []).append(job)
    queues = dict(pending.queued)  # the kept lists (the commit changes them after the cycle), merged where others go
    for name, jobs in others.items():
        queues[name] = _merged(queues.get(name, []), jobs)
    inventory.pending = Backlog(queues)


# Up to this many jobs are put into a queue's kept order one by one (a search and a move each); more, and the queue
# is sorted once with them (a key and a comparison per job: 10,000 requeued jobs put one by one into a queue of
# 100,000 took 0.2 s, sorted with it 25 ms).
MERGED_ONE_BY_ONE = 64


def _merged(kept: list[PendingJob], more: list[PendingJob]) -> list[PendingJob]:
    """A new list of the kept queue's jobs and `more`, in queue order; `kept` is left as it was."""
    if len(more) > MERGED_ONE_BY_ONE:
        return sorted(kept + more, key=QUEUE_ORDER)
    merged = list(kept)
    for job in more:
        insort(merged, job, key=QUEUE_ORDER)
    return merged


class _Records(Mapping[str, PendingRecord]):
    """The kept pending rows' records as the commit looks them up, with no copy of 100,000 of them each cycle."""

    __slots__ = ("rows",)

    def __init__(self, rows: Mapping[str, _PendingRow]) -> None:
        self.rows = rows

    def __getitem__(self, job_id: str) -> PendingRecord:
        return self.rows[job_id].record

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _avoided(avoid: Mapping[str, str] | None, now: datetime) -> Mapping[str, str]:
    """The clusters a job still avoids after startup evictions, with until when (`04:42:10 UTC`)."""
    until = {cluster: datetime.fromisoformat(moment) for cluster, moment in (avoid or {}).items()}
    return MappingProxyType({cluster: f"{moment:%H:%M:%S} UTC" for cluster, moment in until.items() if moment > now})
