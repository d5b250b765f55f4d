"""Queue history over a recent window, derived from the jobs' and placements' own timestamps.

No sampler and no extra table: a job was pending from `submitted_at` until it was admitted or finished,
running from `started_at` until `finished_at`, and a placement held its resources from `created_at`
until `finished_at` (or until now while it is live). So the history survives restarts, is the same in
every broker process, and its newest sample agrees with `tenancy.queue_stats`. A job preempted back to
Queued is counted as pending only from its first submission to its first admission (the timestamps
keep no earlier episodes).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from broker.engine.placement.fairness import dominant_share
from broker.store.db.models import PLACEMENT_LIVE_STATES, Job, Placement, as_utc


@dataclass(frozen=True)
class QueueHistory:
    pending: list[int]
    running: list[int]
    dominant_share: list[float]


def sample_times(until: datetime, window: timedelta, step: timedelta) -> list[datetime]:
    count = max(1, int(window / step))
    return [until - step * (count - k) for k in range(count + 1)]


def _spans(times: list[datetime], start: datetime | None, end: datetime | None) -> tuple[int, int] | None:
    """The sample indexes [first, last) that fall inside [start, end)."""
    if start is None:
        return None
    first = bisect.bisect_left(times, as_utc(start))
    last = len(times) if end is None else bisect.bisect_left(times, as_utc(end))
    return (first, last) if first < last else None


def _accumulate(series: list[float], span: tuple[int, int] | None, amount: float) -> None:
    if span:
        series[span[0]] += amount
        if span[1] < len(series):
            series[span[1]] -= amount


def _prefix_sums(deltas: list[float]) -> list[float]:
    total, out = 0.0, []
    for delta in deltas:
        total += delta
        out.append(total)
    return out


def queue_history(session: Session, queue_ids: Iterable[int], totals: Mapping[str, int],
                  times: list[datetime]) -> dict[int, QueueHistory]:
    """Pending depth, running jobs and dominant share (usage over `totals`) of each queue at each time."""
    queue_ids = list(queue_ids)
    since, until = times[0], times[-1]
    size = len(times)
    pending = {q: [0.0] * size for q in queue_ids}
    running = {q: [0.0] * size for q in queue_ids}
    usage = {q: {r: [0.0] * size for r in totals} for q in queue_ids}
    if queue_ids:
        jobs = session.execute(select(Job.queue_id, Job.submitted_at, Job.admitted_at, Job.started_at,
                                      Job.finished_at)
                               .where(Job.queue_id.in_(queue_ids), Job.submitted_at <= until,
                                      or_(Job.finished_at.is_(None), Job.finished_at > since)))
        for queue_id, submitted, admitted, started, finished in jobs:
            left_queue = min((as_utc(t) for t in (admitted, finished) if t is not None), default=None)
            _accumulate(pending[queue_id], _spans(times, submitted, left_queue), 1)
            _accumulate(running[queue_id], _spans(times, started, finished), 1)
        placements = session.execute(
            select(Job.queue_id, Placement.resources, Placement.created_at, Placement.finished_at)
            .join(Job, Job.id == Placement.job_id)
            .where(Job.queue_id.in_(queue_ids), Placement.created_at <= until,
                   or_(Placement.finished_at > since,
                       Placement.finished_at.is_(None) & Placement.state.in_(PLACEMENT_LIVE_STATES))))
        for queue_id, resources, created, finished in placements:
            span = _spans(times, created, finished)
            for resource, amount in (resources or {}).items():
                if resource in usage[queue_id]:
                    _accumulate(usage[queue_id][resource], span, amount)
    history = {}
    for queue_id in queue_ids:
        used = {r: _prefix_sums(deltas) for r, deltas in usage[queue_id].items()}
        shares = [dominant_share({r: sums[k] for r, sums in used.items()}, totals) for k in range(size)]
        history[queue_id] = QueueHistory(pending=[round(v) for v in _prefix_sums(pending[queue_id])],
                                         running=[round(v) for v in _prefix_sums(running[queue_id])],
                                         dominant_share=[round(s, 4) for s in shares])
    return history
