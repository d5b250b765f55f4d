"""Propagation, status and recovery in the database: the placement outbox and the job it serves.

Functions take a session in a write transaction (`Database.write`) and leave the commit to the
caller, which commits each step BEFORE it acts on a member. A placement moves

    Decided ─▶ Applying ─▶ Starting ─▶ Running ─▶ Succeeded | Failed
       └──────────┴───────────┴──────────┴──▶ Deleting ─▶ Deleted

Decided is the scheduler's; Applying is committed before the member is touched, so a broker killed
at any instant re-applies (server-side apply is idempotent and adopts the copy labelled with the
placement id); Deleting is committed before the delete, and deleting again is harmless. The job
follows its placements (`settle_job`): Admitted ─▶ Dispatching ─▶ Running ─▶ Succeeded | Failed,
Cancelled once every copy is gone, and back to Queued when its placements were preempted, its
member failed over, or a failed part of a split JobSet is to be re-placed.

`work` names the states and a step's work; `locks` how a transaction locks its rows; `apply` the member calls
and their outcomes; `follow` the members' status; `settle` the job from its placements; `recovery` fail-over and
startup evictions. The rest of the broker imports them from here.
"""

from broker.store.outbox.apply import (due_work, fail_apply, finish_apply, finish_delete, kept_placements,
                                       refuse_apply, request_deletions, retry_later, start_apply,
                                       tenant_namespace_labels)
from broker.store.outbox.follow import lock_reported, record_list, record_status, record_statuses
from broker.store.outbox.locks import lock_job_rows, lock_jobs, placement_owner
from broker.store.outbox.recovery import (StartupPolicy, Unready, cancellations_or_fail_over_due, evict_all_unready,
                                          evict_unready, fail_over, overdue_startups)
from broker.store.outbox.settle import settle_job
from broker.store.outbox.work import KEPT_STATES, VERDICT_STATES, Changes, Work

__all__ = ["KEPT_STATES", "VERDICT_STATES", "Changes", "StartupPolicy", "Unready", "Work",
           "cancellations_or_fail_over_due", "due_work", "evict_all_unready", "evict_unready", "fail_apply",
           "fail_over", "finish_apply", "finish_delete", "kept_placements", "lock_job_rows", "lock_jobs",
           "lock_reported", "overdue_startups", "placement_owner", "record_list", "record_status", "record_statuses",
           "refuse_apply", "request_deletions", "retry_later", "settle_job", "start_apply", "tenant_namespace_labels"]
