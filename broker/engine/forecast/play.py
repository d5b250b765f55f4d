"""The forecast: when each waiting job is expected to start, where, and after what — the fleet played forward.

From one snapshot, running work ends at its expected end (`ends`), and at each end the scheduler's own cycle
(`schedule`: the same queue order, fair share, quotas, filters, topology search, gangs and holds — not a second
model) runs over the jobs still waiting; those it places start then, and end a runtime later (`runtimes`). What
the forecast does not foresee: preemption (a job that could preempt now is placed by this cycle already), jobs
not submitted yet, members lost, and work that ends before or after it is expected to.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from broker.engine.placement import Backlog, Config, PendingJob, RunningPlacement, Snapshot, schedule, shape_of


@dataclass(frozen=True, slots=True)
class Expected:
    """A waiting job's expected start (on the snapshot's clock), or None: not before `later_than`, or never."""

    job_id: str
    start: float | None
    cluster: str | None = None
    hypernode: str | None = None
    after: tuple[str, ...] = ()  # the running jobs whose end lets it start (on its cluster, else anywhere)
    later_than: float | None = None  # not started by then: the horizon, or as far as the forecast went
    never: bool = False  # it waits though every running job ended: as the fleet is now, nothing it waits for ends


@dataclass(frozen=True, slots=True)
class Limits:
    horizon_s: float = 7 * 86400.0  # a start further than this is "later than" now + horizon
    steps: int = 200  # ends played forward at most (a cycle each): the forecast's time bound
    window: int = 2000  # the waiting jobs forecast, first in their queues' order; the others are "later"
    deleting_s: float = 60.0  # a copy being deleted frees its nodes once its member confirms: soon
    # ends this close together are played as one step, at the last of them — within resolution_s, or this share of
    # how far ahead they are, if more: a start is told to within that, late rather than early (an hour off in a
    # two-day wait is no news), and a fleet of thousands of running jobs is played in a hundred cycles or so
    resolution_s: float = 300.0
    relative_resolution: float = 0.05


def forecast(snapshot: Snapshot, pending: Iterable[PendingJob], running: Iterable[RunningPlacement],
             ends: Mapping[str, float], runtimes: Mapping[str, float], config: Config = Config(),
             limits: Limits = Limits(), out_of_time: Callable[[], bool] = lambda: False) -> dict[str, Expected]:
    """The `Expected` of each pending job in the window (`Limits.window`: those behind are not forecast).

    `running`: every placement that holds capacity in the snapshot (as it was built with); `ends`: a running job's expected end (a job not in it ends past the horizon), a copy being deleted
    (not charged) ends `Limits.deleting_s` from now; `runtimes`: a pending job's expected runtime. The snapshot is
    played forward: give this function one of its own. `out_of_time`, asked after each step: the caller's time
    budget — the jobs not started by then are "later than" the step it reached."""
    now = snapshot.now
    config = replace(config, preemption=False)
    waiting = _window(pending, limits.window)
    result: dict[str, Expected] = {}
    groups: list[list[RunningPlacement]] = []  # what ends together: a job's live parts, or one copy being deleted
    events: list[tuple[float, int]] = []  # (end, group)
    live: dict[str, list[RunningPlacement]] = {}
    for placement in running:
        if placement.charged:
            live.setdefault(placement.job_id, []).append(placement)
        else:
            events.append((now + limits.deleting_s, len(groups)))
            groups.append([placement])
    for job_id, parts in live.items():
        if job_id in ends:
            events.append((max(ends[job_id], now), len(groups)))
            groups.append(parts)
    heapq.heapify(events)
    ended: tuple[RunningPlacement, ...] = ()
    for _ in range(limits.steps):
        # every waiting job decided again at each step, as by a fresh scheduler: the parking's reasoning (only a change
        # it saw can make a parked job fit) is the scheduler's between its own cycles, not a play forward's
        cycle = schedule(snapshot, Backlog.of(waiting), config)
        started = _started(cycle.placements)
        jobs = {job.id: job for job in waiting}
        for job_id, placements in started.items():
            first = placements[0]
            result[job_id] = Expected(job_id, snapshot.now, first.cluster, first.hypernode, _after(first.cluster, ended))
            end = snapshot.now + runtimes.get(job_id, limits.horizon_s)
            parts = [p.as_running(tenant=jobs[job_id].tenant, queue=jobs[job_id].queue,
                                  priority=jobs[job_id].priority, started_at=snapshot.now,
                                  exclusive_topology=next((s.exclusive_topology for s in jobs[job_id].spec.parts
                                                           if s.exclusive_topology), None),
                                  expected_end=end if jobs[job_id].runtime is not None else None)
                     for p in placements]
            heapq.heappush(events, (end, len(groups)))
            groups.append(parts)
            # running from now on, as the next cycle's snapshot would list it: holds read its end (`Hold.start`)
            snapshot.running.setdefault(job_id, []).extend(parts)
        waiting = [job for job in waiting if job.id not in started]
        if not waiting or not events or events[0][0] > now + limits.horizon_s or out_of_time():
            break
        ahead = events[0][0] - now
        snapshot.now, gone = _pop_until(events, events[0][0] + max(limits.resolution_s,
                                                                   limits.relative_resolution * ahead))
        ended = tuple(part for group in gone for part in groups[group])
        for part in ended:
            _release(snapshot, part)
    later = now + limits.horizon_s if events and events[0][0] > now + limits.horizon_s else snapshot.now
    for job in waiting:  # not started: with every running job ended (never), or not by the horizon or the last step
        result[job.id] = Expected(job.id, None, never=True) if not events else Expected(job.id, None, later_than=later)
    return result


def _window(pending: Iterable[PendingJob], size: int) -> list[PendingJob]:
    """The first `size` jobs across the queues, each queue's head first, round robin: what can be played forward in
    bounded time; each with its shape (`shape_of`: a cycle's memos work per shape, and every step is a cycle)."""
    queues = list(Backlog.of(pending).queues.values())
    taken: list[PendingJob] = []
    depth = 0
    while len(taken) < size and any(depth < len(jobs) for jobs in queues):
        taken += [jobs[depth] for jobs in queues if depth < len(jobs)][:size - len(taken)]
        depth += 1
    return [job if job.shape is not None else replace(job, shape=shape_of(job.spec)) for job in taken]


def _started(placements) -> dict[str, list]:
    started: dict[str, list] = {}
    for placement in placements:
        started.setdefault(placement.job_id, []).append(placement)
    return started


def _pop_until(events: list[tuple[float, int]], until: float) -> tuple[float, list[int]]:
    """The groups that end by `until`, and the last of their ends: the step's time."""
    gone, last = [], 0.0
    while events and events[0][0] <= until:
        last, group = heapq.heappop(events)
        gone.append(group)
    return last, gone


def _after(cluster: str, ended: tuple[RunningPlacement, ...]) -> tuple[str, ...]:
    """The jobs that just ended whose end it waited for: those on its cluster, else every one (its quota)."""
    here = [p.job_id for p in ended if p.cluster == cluster]
    return tuple(dict.fromkeys(here or [p.job_id for p in ended]))


def _release(snapshot: Snapshot, part: RunningPlacement) -> None:
    """The part ended: its nodes, HyperNodes and its queue's quota are free again."""
    snapshot.occupy(part.cluster, part.queue if part.charged else None, part.node_usage, part.node_pods,
                    part.exclusive_topology, -1)
    parts = snapshot.running.get(part.job_id)
    if parts is not None and part in parts:
        parts.remove(part)
        if not parts:
            del snapshot.running[part.job_id]
