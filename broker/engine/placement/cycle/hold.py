"""Anti-starvation holds: the nodes where a long-waiting job fits soonest, kept free of other jobs for the rest of
the cycle (Slurm's backfill reservation, one cycle long)."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping

from broker.engine.placement.decisions import Hold, Placement
from broker.engine.placement.explain import amount
from broker.engine.placement.model import PendingJob
from broker.engine.placement.plugins import HeldNodes
from broker.engine.placement.snapshot import ClusterIndex, HyperNodeState, fits
from clusters.rules.quantity import add_into


class Holding:
    """The cycle's holds; a part of `_Cycle`, whose `__init__` sets the state it reads."""

    def _hold(self, job: PendingJob) -> Hold | None:
        """Keep free of other jobs, for the rest of the cycle, the nodes where a long-waiting job fits soonest.

        Candidates, on each cluster that passes the filters that do not depend on capacity: the
        HyperNodes of tier ≤ the job's bound (any tier for soft topology; the whole cluster when no
        HyperNode could hold it) whose allocatable could hold the job and that contain no node held
        for another job. The lowest key wins:
        1. the soonest expected free (`_expected_free`; unknown after every known one): the reservation
           stays where it was, cycle after cycle, as jobs backfilled there end before it — ranked by
           work in use alone, it moved to whichever nodes backfill had left emptiest, and started later;
        2. the least running work to wait for (the job's primary resource in use on those nodes);
        3. the smallest (allocatable of that resource), so it holds no more than it needs;
        4. the lowest tier;
        5. tie-break: cluster name, then HyperNode name.
        Its eligible nodes must hold the job by allocatable, else the next candidate is tried.
        """
        request = self._whole(job)
        demand, bound, resource = request.demand, request.bound, request.primary
        candidates: list[tuple] = []
        for cluster in self.snapshot.clusters.values():
            blocked = self.blocked.get(cluster.name, ())
            held = cluster.name in self.held
            if held and len(blocked) == len(cluster.hypernodes):
                continue  # every node of it is held already
            if self._filter(request, cluster, self.static_filters):
                continue
            sets: list[tuple[HyperNodeState | None, Mapping[str, int], Mapping[str, int], float]] = [
                (h, h.allocatable, h.free, h.tier) for h in cluster.holding(demand, bound) if h.name not in blocked]
            if not sets and bound is None and not held and fits(cluster.allocatable_total, demand):
                sets = [(None, cluster.allocatable_total, cluster.free_total, math.inf)]  # after every tier
            if not sets:
                continue
            ends, counted = self._node_ends(cluster)
            for state, allocatable, free, tier in sets:
                total = allocatable.get(resource, 0)
                start = _free_by(cluster, state.nodes if state else range(len(cluster.nodes)), ends, counted,
                                 request.parts)
                candidates.append((math.inf if start is None else start, total - free.get(resource, 0), total, tier,
                                   cluster.name, state.name if state else "", cluster, state))
        for _, in_use, _, _, _, _, cluster, state in sorted(candidates, key=lambda c: c[:6]):
            positions = state.nodes if state else range(len(cluster.nodes))
            eligible = [cluster.eligible(p) for p in job.spec.parts]
            usable = [i for i in positions if any(e[i] for e in eligible)]
            if fits(_empty_capacity(cluster, usable), demand):
                return self._take(job, cluster, state, usable, amount(resource, in_use),
                                  self._expected_free(cluster, usable, request.parts))
        return None

    def _take(self, job: PendingJob, cluster: ClusterIndex, state: HyperNodeState | None, positions: list[int],
              waiting_for: str, start: float | None) -> Hold:
        """Hold the nodes: their free capacity leaves the snapshot and they take no pod of another job."""
        taken = {i: dict(cluster.free[i]) for i in positions}
        free: dict[str, int] = {}
        for amounts in taken.values():
            add_into(free, amounts)
        self._lock(cluster, taken, +1)
        self.taken[job.id] = (cluster, taken)
        hold = Hold(job.id, cluster.name, state.name if state else None, state.tier if state else None,
                    tuple(sorted(cluster.nodes[i].name for i in positions)), MappingProxyType(free), waiting_for, start)
        self.holds[job.id] = hold
        self.held.setdefault(cluster.name, HeldNodes()).add(hold)
        self.blocked.setdefault(cluster.name, set()).update(h.name for i in positions for h in cluster.node_hypernodes[i])
        return hold

    def _expected_free(self, cluster: ClusterIndex, positions: list[int], parts) -> float | None:
        """When the running work on these nodes is expected to end (`Hold.start`): the last expected end of the
        placements there. None when one does not say, or pods of copies being deleted are there (not in
        `Snapshot.running`), or the job would not fit beside the pods the broker did not place (they stay: daemon
        sets), or there is no work at all: nothing known to wait for."""
        start = _free_by(cluster, positions, *self._node_ends(cluster), parts)
        return None if start is None or start == -math.inf else start

    def _node_ends(self, cluster: ClusterIndex) -> tuple[list[float | None], list[int]]:
        """Per node of the cluster: the last expected end of the work there (-inf: none; None: some does not say), and
        its pods; read at the first hold of the cycle from `Snapshot.running` and the cycle's placements so far."""
        if not self.node_ends:
            for name, c in self.snapshot.clusters.items():
                self.node_ends[name] = ([-math.inf] * len(c.nodes), [0] * len(c.nodes))
            for placements in self.snapshot.running.values():
                for placement in placements:
                    self._count(placement.cluster, placement.node_pods, placement.expected_end, +1)
            for placement, job in self.placed:
                self._count(placement.cluster, placement.node_pods, self._end(job), +1)
        return self.node_ends[cluster.name]

    def _placed(self, placement: Placement, job: PendingJob, sign: int) -> None:
        """A placement made (or, sign -1, taken back) this cycle: its nodes' ends as `Snapshot.running` will say them
        next cycle. Taken back once the ends are read, its end stays counted: a later end only holds back."""
        if self.node_ends:
            self._count(placement.cluster, placement.node_pods, self._end(job), sign)
        elif sign > 0:
            self.placed.append((placement, job))
        elif (placement, job) in self.placed:  # (a preemption applies a split job whole and takes back its parts)
            self.placed.remove((placement, job))

    def _end(self, job: PendingJob) -> float | None:
        return None if job.runtime is None else self.snapshot.now + job.runtime

    def _count(self, cluster: str, node_pods: Mapping[str, int], end: float | None, sign: int) -> None:
        if cluster not in self.node_ends:
            return
        ends, counted = self.node_ends[cluster]
        where = self.snapshot.clusters[cluster].position
        for node, pods in node_pods.items():
            i = where.get(node)
            if i is None:
                continue
            counted[i] += sign * pods
            if sign > 0 and ends[i] is not None:
                ends[i] = None if end is None else max(ends[i], end)

    def _backfill_open(self, job: PendingJob) -> list[str]:
        """EASY backfill: unlock the holds of others that the job is expected to end before — their start known and
        no earlier than now plus its runtime — so that it may use their nodes (`_backfill_close` locks them again).
        A job that says nothing of its runtime backfills nowhere, nor one of a tenant whose declarations ran over."""
        if job.runtime is None or not self.holds or job.tenant in self.config.untrusted_tenants:
            return []
        end = self.snapshot.now + job.runtime
        opened = [holder for holder, hold in self.holds.items()
                  if holder != job.id and hold.start is not None and end <= hold.start]
        for holder in opened:
            cluster, taken = self.taken[holder]
            self._lock(cluster, taken, -1)
        return opened

    def _backfill_close(self, opened: list[str]) -> None:
        """Lock the opened holds again over what is free on their nodes now (the backfilled job took its part)."""
        for holder in opened:
            cluster, taken = self.taken[holder]
            again = {i: dict(cluster.free[i]) for i in taken}
            self._lock(cluster, again, +1)
            self.taken[holder] = (cluster, again)

    def release_holds(self) -> None:
        """Give the held nodes back to the snapshot: holds live for one cycle's decisions."""
        for cluster, taken in self.taken.values():
            self._lock(cluster, taken, -1)
        self.taken.clear()
        self.held.clear()
        self.blocked.clear()

    @staticmethod
    def _lock(cluster: ClusterIndex, taken: dict[int, dict[str, int]], sign: int) -> None:
        cluster.apply(taken, {}, (), sign)
        for i in taken:
            cluster.locks[i] += sign


def _free_by(cluster: ClusterIndex, positions, ends: list[float | None], counted: list[int], parts) -> float | None:
    """The last expected end of the broker's work on these nodes (`Holding._node_ends`); -inf: none there; None:
    unknown (see `_expected_free`). Pods the broker did not place are taken to stay (a daemon set's on every node):
    the job's pods must fit beside them, each node counted for as many of its largest pod as it has room for."""
    last = -math.inf
    others = False
    for i in positions:
        end = ends[i]
        if end is None or cluster.broker_pods[i] != counted[i]:
            return None
        if end > last:
            last = end
        others = others or bool(cluster.nodes[i].used)
    return None if others and not _fits_beside_others(cluster, positions, parts) else last


def _fits_beside_others(cluster: ClusterIndex, positions, parts) -> bool:
    largest: dict[str, int] = {}
    for part in parts:
        for resource, amount_ in part.pod_requests.items():
            largest[resource] = max(largest.get(resource, 0), amount_)
    wanted = sum(part.pods for part in parts)
    room = 0
    for i in positions:
        node = cluster.nodes[i]
        room += max(0, min(((node.allocatable.get(r, 0) - node.used.get(r, 0)) // q
                            for r, q in largest.items() if q > 0), default=wanted))
        if room >= wanted:
            return True
    return False


def _empty_capacity(cluster: ClusterIndex, positions: list[int]) -> dict[str, int]:
    """What these nodes could hold with nothing running."""
    total: dict[str, int] = {}
    for i in positions:
        add_into(total, cluster.nodes[i].allocatable)
    return total
