"""What the scheduler's read hands its commit: one cycle's `Inventory` (the engine's snapshot and pending jobs, and
the ids the commit writes with), the pending jobs' stored reasons as digests, a commit's `CommitOutcome`, and the
engine's configuration from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping


from broker.engine.placement import DEFAULT_FILTERS, DEFAULT_SCORE_WEIGHTS, Config, RunningPlacement, Snapshot, Waiting
from broker.engine.placement.explain import another_tenants_job
from broker.engine.placement.model import Backlog
from broker.process.settings import ConfigError, Settings
from broker.store.db.models import PLACEMENT_ACTIVE_STATES, by_reason
from clusters.rules.quantity import add_into


# PostgreSQL advisory lock key held by a scheduler while it commits ("arch" in ASCII).
SCHEDULER_LOCK_KEY = 0x61726368
# Placements that may still be preempted; a Deleting one is already on its way out.
# A part whose newest placement is in one of these needs no new one.
HELD_STATES = (*PLACEMENT_ACTIVE_STATES, "Succeeded")


def engine_config(settings: Settings) -> Config:
    """The engine's plugin weights and switches from the settings; an unknown plugin name stops the start."""
    unknown = sorted(set(settings.placement_disabled_filters) - set(DEFAULT_FILTERS))
    if unknown:
        raise ConfigError(f"ARCHIPELAGO_PLACEMENT_DISABLED_FILTERS: unknown filters {unknown}; "
                          f"known: {list(DEFAULT_FILTERS)}")
    try:
        return Config(filters=tuple(f for f in DEFAULT_FILTERS if f not in settings.placement_disabled_filters),
                      score_weights=MappingProxyType({**DEFAULT_SCORE_WEIGHTS, **settings.placement_score_weights}),
                      starvation_after_s=settings.placement_starvation_after, max_holds=settings.placement_max_holds,
                      preemption=settings.placement_preemption)
    except ValueError as exc:
        raise ConfigError(f"ARCHIPELAGO_PLACEMENT_SCORE_WEIGHTS: {exc}") from None


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """What the commit needs to know of a pending job beyond the engine's view of it: its stored reasons, the
    per-cluster ones as a digest (kept for every pending job, they would weigh kilobytes each), and the causes
    (`Waiting.cause`) of the reasons this scheduler wrote since it read the row (None just after: a reason someone
    else wrote, a requeue's or another leader's, is compared by its words)."""

    tenant_id: int
    reason: str | None
    reasons_digest: int
    causes: frozenset[str] | None = field(default=None, compare=False)  # not stored: a full read makes it equal

    def news(self, waiting: Waiting) -> bool:
        """Is the new reason news (a `Waiting` event)? Not the same cause in other amounts, nor one the job was
        told already while it waits: a big job its queue's quota and the clusters' room both hold back is told each
        once, not again each time its queue's smaller jobs take or give back the quota, or the room comes and goes."""
        return waiting.cause not in self.causes if self.causes is not None else waiting.message != self.reason

    def told(self, waiting: Waiting, memo: dict[tuple, frozenset[str]]) -> frozenset[str]:
        """The causes the job was told once it has this reason: one set per causes before and cause (`memo`), for
        the many jobs of a cycle told alike."""
        key = (self.causes, waiting.cause)
        told = memo.get(key)
        if told is None:
            told = memo[key] = frozenset((*(self.causes or ()), waiting.cause))
        return told


def reasons_digest(reasons: Mapping[str, str], memo: dict[int, int] | None = None) -> int:
    """Equal per-cluster reasons, equal digests: whether a job's reasons changed, without keeping them; the digest of
    what is stored is `stored_reasons_digest`. With `memo`, once per mapping while they all live: a cycle's waiting
    jobs of one shape share theirs (a new leader's first cycle has 100,000 of them)."""
    if memo is None:
        return _grouped_digest(by_reason(reasons))
    digest = memo.get(id(reasons))
    if digest is None:
        digest = memo[id(reasons)] = _grouped_digest(by_reason(reasons))
    return digest


def stored_reasons_digest(stored: Mapping[str, Any] | None) -> int:
    """`reasons_digest` of reasons as `jobs.waiting_reasons` stores them, {reason: [clusters]} (a row written before
    that: {cluster: reason}), read without making them {cluster: reason} again: a full read of 100,000 waiting jobs
    spent a second doing that."""
    if stored and isinstance(next(iter(stored.values())), str):
        stored = by_reason(stored)
    return _grouped_digest(stored or {})


def _grouped_digest(grouped: Mapping[str, Iterable[str]]) -> int:
    return hash(frozenset((reason, frozenset(clusters)) for reason, clusters in grouped.items()))


@dataclass(slots=True)
class Inventory:
    """One cycle's read: the engine's snapshot and pending jobs, and the ids the commit writes with."""

    snapshot: Snapshot
    pending: Backlog
    records: Mapping[str, PendingRecord]  # pending job id -> its tenant id and stored reasons
    unplaceable: dict[str, Waiting]  # pending jobs whose manifest no longer parses
    cluster_ids: dict[str, int]
    generations: dict[tuple[str, str], int]  # (job id, part) -> highest generation placed so far
    tenant_ids: dict[str, int]  # running job id -> tenant id
    fence: int  # newest placement id at the read
    # what could make an inadmissible job fit: clusters, queues, tenants by name, live placements by id
    inputs: tuple[dict, dict, dict, dict[int, RunningPlacement]] = ({}, {}, {}, {})


@dataclass(slots=True)
class CommitOutcome:
    admitted: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)  # placed or cancelled by someone else meanwhile
    placements: int = 0
    preempted: int = 0  # placements marked Deleting
    changed: list[Waiting] = field(default_factory=list)  # the waiting jobs whose reasons were written
    stale: bool = False  # another scheduler committed since the read: the rest was not written
    fence: int = 0  # newest placement id once committed

    @property
    def reasons_written(self) -> int:
        return len(self.changed)

    def add(self, slice_: CommitOutcome) -> None:
        """What the next slice of the same cycle committed."""
        self.admitted = sorted((*self.admitted, *slice_.admitted))
        self.dropped = sorted((*self.dropped, *slice_.dropped))
        self.placements += slice_.placements
        self.preempted += slice_.preempted
        self.fence = slice_.fence


def victim_words(inventory: Inventory, job_id: str, rule: str) -> str:
    """A preempted job as its preemptor's tenant reads of it: "job 4" within its own queue or cohort; another
    tenant's (fair-share preemption) by its priority and size alone."""
    if rule != "FairSharing":
        return f"job {job_id}"
    running = inventory.snapshot.running.get(job_id, ())
    demand: dict[str, int] = {}
    for placement in running:
        for usage in placement.node_usage.values():
            add_into(demand, usage)
    return another_tenants_job(running[0].priority if running else 0, demand)
