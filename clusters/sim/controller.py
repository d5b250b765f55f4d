"""The control plane of a simulated cluster: JobSet controller, Job controller, scheduler and kubelet.

They are level-triggered like the real ones: store events mark objects dirty, `step()` reconciles
the dirty ones until nothing changes, and a timer heap ends pods when their simulated run is over.
Everything here runs under the cluster lock; writes go through the cluster so watches see them.

`Controller` is one object per cluster; its parts are written in modules of their own (`kubelet`, `scheduler`,
`job_controller`, `jobset_controller`) and share the state set in its `__init__`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import TYPE_CHECKING

from clusters.sim.job_controller import JobController
from clusters.sim.jobset_controller import JobSetController
from clusters.sim.kubelet import Kubelet
from clusters.sim.objects import EXCLUSIVE, TERMINAL, node_allocatable
from clusters.sim.requests import pod_requests
from clusters.sim.claims import release_claims
from clusters.sim.resources import DRA_KINDS, JOBS, JOBSETS, NAMESPACES, NODES, PODS
from clusters.sim.scheduler import Scheduler

if TYPE_CHECKING:
    from clusters.sim.cluster import SimCluster


DRA_KEYS = frozenset(kind.key for kind in DRA_KINDS)


class Controller(Kubelet, Scheduler, JobController, JobSetController):
    def __init__(self, cluster: "SimCluster") -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.timers: list[tuple[float, int, str, str, str, str]] = []  # (due, seq, what, ns, name, uid)
        self._seq = 0
        self.dirty_jobsets: set[tuple[str, str]] = set()
        self.dirty_jobs: set[tuple[str, str]] = set()
        self.unbound: dict[tuple[str, str], None] = {}  # pending pods, in arrival order
        self.to_start: set[tuple[str, str]] = set()
        self.terminating: set[str] = set()
        self.schedule_needed = False
        self.used: dict[str, Counter] = {}
        self.alloc: dict[str, dict[str, int]] = {}
        self.exclusive_active = 0  # running pods that hold an exclusive topology domain
        self._usable: list[dict] | None = None  # ready, schedulable nodes in name order
        self.held_counts: dict[str, tuple[float, list]] = {}  # JobSet uid -> (until, counts it shows)
        self.first_seen: dict[str, float] = {}  # JobSet and Job uid -> when the controller first met it (lag)
        self.ended_with_claims: dict[str, dict] = {}  # pod uid -> the pod that ended holding claims (to give back)
        self.store.listeners.append(self.on_event)

    # bookkeeping from store events -----------------------------------------------------------
    def on_event(self, key: str, event) -> None:
        obj, prev = event.obj, event.prev
        meta = obj["metadata"]
        ident = (meta.get("namespace") or "", meta["name"])
        if key == PODS.key:
            self._account(prev, -1)
            if event.type != "DELETED":
                self._account(obj, +1)
                spec, phase = obj.get("spec", {}), obj.get("status", {}).get("phase", "Pending")
                if phase == "Pending" and not meta.get("deletionTimestamp"):
                    if spec.get("nodeName"):
                        self.to_start.add(ident)
                    else:
                        self.unbound[ident] = None
                        self.schedule_needed = True
            if prev is not None and self._consumes(prev) and not (event.type != "DELETED" and self._consumes(obj)):
                self.schedule_needed = True
            for ref in meta.get("ownerReferences") or ():
                if ref.get("kind") == "Job":
                    self.dirty_jobs.add((ident[0], ref["name"]))
            if event.type != "DELETED" and obj.get("spec", {}).get("resourceClaims") and \
                    obj.get("status", {}).get("phase") in TERMINAL:
                self.ended_with_claims[meta["uid"]] = obj
        elif key == JOBS.key:
            if event.type != "DELETED":
                self.dirty_jobs.add(ident)
            else:
                self.first_seen.pop(meta["uid"], None)
            for ref in meta.get("ownerReferences") or ():
                if ref.get("kind") == "JobSet":
                    self.dirty_jobsets.add((ident[0], ref["name"]))
        elif key == JOBSETS.key:
            if event.type != "DELETED":
                self.dirty_jobsets.add(ident)
            else:
                self.held_counts.pop(meta["uid"], None)
                self.first_seen.pop(meta["uid"], None)
        elif key == NODES.key:
            self.schedule_needed = True
            self._usable = None
            if event.type == "DELETED":
                self.alloc.pop(meta["name"], None)
                self._fail_pods_on(meta["name"], "NodeLost", "node was deleted")
            else:
                self.alloc[meta["name"]] = node_allocatable(obj)
        elif key in DRA_KEYS:  # a template made, a claim given back, devices published: pods may fit now
            self.schedule_needed = True
        elif key == NAMESPACES.key and event.type != "DELETED" and meta.get("deletionTimestamp"):
            self.terminating.add(meta["name"])
        self.cluster.wake()

    @staticmethod
    def _consumes(pod: dict | None) -> bool:
        return bool(pod and pod.get("spec", {}).get("nodeName")
                    and pod.get("status", {}).get("phase") not in TERMINAL)

    def _account(self, pod: dict | None, sign: int) -> None:
        if not self._consumes(pod):
            return
        if EXCLUSIVE in (pod["metadata"].get("annotations") or {}):
            self.exclusive_active += sign
        used = self.used.setdefault(pod["spec"]["nodeName"], Counter())
        for name, amount in pod_requests(pod["spec"]).items():
            used[name] += sign * amount

    def needs_step(self, now: float) -> bool:
        return bool(self.dirty_jobsets or self.dirty_jobs or self.schedule_needed or self.to_start or self.ended_with_claims
                    or self.terminating or self.cluster.foreground or self.cluster.rbac.needs_step()
                    or (self.timers and self.timers[0][0] <= now))

    def next_due(self) -> float | None:
        return self.timers[0][0] if self.timers else None

    def _timer(self, due: float, what: str, obj: dict) -> None:
        self._seq += 1
        meta = obj["metadata"]
        heapq.heappush(self.timers, (due, self._seq, what, meta.get("namespace") or "", meta["name"], meta["uid"]))

    # the loop ------------------------------------------------------------------------------------
    def step(self, now: float) -> None:
        self.cluster.rbac.step()
        while self.timers and self.timers[0][0] <= now:
            _, _, what, ns, name, uid = heapq.heappop(self.timers)
            if what == "pod":
                pod = self.store.get(PODS.key, ns, name)
                if pod and pod["metadata"]["uid"] == uid and pod["status"].get("phase") == "Running":
                    self._finish_pod(pod, not self._should_fail(pod), now)
            elif what == "jobset":
                self.dirty_jobsets.add((ns, name))
            elif what == "job":
                self.dirty_jobs.add((ns, name))
            elif what == "terminated":
                pod = self.store.get(PODS.key, ns, name)
                if pod and pod["metadata"]["uid"] == uid:
                    self.cluster.remove_terminated(pod)
            elif what == "ttl":
                js = self.store.get(JOBSETS.key, ns, name)
                if js and js["metadata"]["uid"] == uid:
                    self.cluster.delete_object(JOBSETS, ns, name, "Background")
        for _ in range(100):
            self.cluster.collect_garbage()
            if self.terminating:
                for ns in sorted(self.terminating):
                    self.cluster.purge_namespace(ns)
                self.terminating.clear()
            jobsets, self.dirty_jobsets = self.dirty_jobsets, set()
            for ns, name in sorted(jobsets):
                js = self.store.get(JOBSETS.key, ns, name)
                if js is not None:
                    self.reconcile_jobset(js, now)
            jobs, self.dirty_jobs = self.dirty_jobs, set()
            for ns, name in sorted(jobs):
                job = self.store.get(JOBS.key, ns, name)
                if job is not None:
                    self.reconcile_job(job, now)
            ended, self.ended_with_claims = self.ended_with_claims, {}
            for pod in ended.values():
                release_claims(self.cluster, self.store, pod)
            starting, self.to_start = self.to_start, set()
            for ns, name in sorted(starting):
                pod = self.store.get(PODS.key, ns, name)
                if pod and pod["status"].get("phase", "Pending") == "Pending" and pod["spec"].get("nodeName"):
                    node = self.store.get(NODES.key, "", pod["spec"]["nodeName"])
                    if node is None:
                        self._finish_pod(pod, False, now, reason="NodeLost")
                    else:
                        self._start_pod(pod, node, now)
            if self.schedule_needed:
                self.schedule_needed = False
                self.schedule(now)
            if not (self.dirty_jobsets or self.dirty_jobs or self.to_start or self.schedule_needed or self.terminating
                    or self.ended_with_claims):
                self.cluster.collect_garbage()  # what this pass's deletions left to finish
                break
