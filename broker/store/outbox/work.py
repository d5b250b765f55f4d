"""What the outbox works on: the states a placement moves through, one member action (`Work`), and what a step did
that other loops care about (`Changes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


ON_MEMBER_STATES = ("Starting", "Running")  # a copy the status watch follows
VERDICT_STATES = ("Succeeded", "Failed")  # the member judged the copy: it is never judged again
KEPT_STATES = ("Applying", *ON_MEMBER_STATES, *VERDICT_STATES)  # copies the broker still owns
WORK_STATES = ("Decided", "Applying", "Deleting")  # and a verdict whose `next_attempt_at` is set: its copy's deletion
DISPATCHING_JOB_STATES = ("Admitted", "Dispatching", "Starting")  # not Running yet
PLACED_JOB_STATES = (*DISPATCHING_JOB_STATES, "Running")


@dataclass(frozen=True)
class Work:
    """One placement's next member action, as a dispatcher pass read it."""

    placement_id: int
    job_id: int
    cluster_id: int
    cluster: str
    state: str  # Decided, Applying, Deleting, or a verdict (Succeeded, Failed): its copy to delete
    namespace: str
    name: str  # the JobSet's name on the member
    member_uid: str | None
    attempts: int
    jobset: dict[str, Any] | None  # what to apply; None for a deletion or a refusal
    overrides: tuple[str, ...] = ()  # the override rules that rewrote `jobset`, in order
    refused: str | None = None  # why an override rule makes the JobSet one the broker cannot send
    admission_key: str | None = None  # what the member's admission judges of it (clusters.jobsets.admission_key)
    # the namespace's labels on the member (clusters.jobsets.namespace_labels: its tenant's Pod Security level), and
    # whether an admin lets the broker use it there although it did not make it
    namespace_labels: dict[str, str] = field(default_factory=dict)
    adoptable: bool = False
    # the job's ResourceClaimTemplates as the member gets them (clusters.claim_templates): applied before `jobset`
    claim_templates: tuple[dict[str, Any], ...] = ()

    @property
    def deletes(self) -> bool:
        """Whether the action is the copy's deletion: a placement on its way out (Deleting), or one whose verdict is
        recorded and whose copy the tenant's `ttlSecondsAfterFinished` has run out on (its state stays the verdict)."""
        return self.state == "Deleting" or self.state in VERDICT_STATES


@dataclass
class Changes:
    """What a step did that other loops care about."""

    requeued: set[int] = field(default_factory=set)  # jobs back in their queue: wake the scheduler
    freed: bool = False  # capacity returned to the snapshot: wake the scheduler
    dispatch: bool = False  # new member work: wake the dispatcher
    # copies applied to a member removed meanwhile (their uids in `member_uid`): no placement names them any more, so
    # the dispatcher that made them deletes them
    orphans: list[Work] = field(default_factory=list)

    def add(self, other: Changes) -> Changes:
        self.requeued |= other.requeued
        self.freed |= other.freed
        self.dispatch |= other.dispatch
        self.orphans += other.orphans
        return self

    def wake(self, wake: Callable[[str], None]) -> None:
        """Run at once the loops these changes give work to."""
        if self.requeued or self.freed:
            wake("scheduler")
        if self.dispatch:
            wake("dispatcher")
