"""The control plane of a simulated cluster: JobSet controller, Job controller, scheduler and kubelet.

They are level-triggered like the real ones: store events mark objects dirty, `step()` reconciles
the dirty ones until nothing changes, and a timer heap ends pods when their simulated run is over.
Everything here runs under the cluster lock; writes go through the cluster so watches see them.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import heapq
import json
import random
import re
from collections import Counter
from typing import TYPE_CHECKING, Iterable

from clusters.quantity import to_milli
from clusters.sim.clock import rfc3339
from clusters.sim.fit import repelling_taint, selects
from clusters.sim.requests import pod_requests
from clusters.sim.resources import JOBS, JOBSETS, NAMESPACES, NODES, PODS, SERVICES
from clusters.sim.validation import JOBSET_CONTROLLER

if TYPE_CHECKING:
    from clusters.sim.cluster import SimCluster

# Labels and annotations of the real JobSet controller (sigs.k8s.io/jobset api/jobset/v1alpha2).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# Simulator knobs, on the JobSet or on a pod template.
DURATION = "sim.archipelago.io/duration"
FAIL = "sim.archipelago.io/fail"
FAIL_ATTEMPTS = "sim.archipelago.io/fail-attempts"

_TERMINAL = ("Succeeded", "Failed")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str | int | float) -> float:
    """Seconds in "90", "90s", "1h30m", "500ms"."""
    if isinstance(text, (int, float)):
        return float(text)
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(a) * scale[b] for a, b in parts)


def node_allocatable(node: dict) -> dict[str, int]:
    alloc = {k: to_milli(str(v)) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
    alloc.setdefault("pods", 110_000)
    return alloc


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or ())


def _condition(conditions: list[dict], type_: str) -> dict | None:
    return next((c for c in conditions or () if c.get("type") == type_), None)


def _is_true(obj: dict, type_: str) -> bool:
    cond = _condition(obj.get("status", {}).get("conditions"), type_)
    return bool(cond and cond.get("status") == "True")


def job_finished(job: dict) -> str:
    for cond in job.get("status", {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return ""


def _suffix() -> str:
    return "".join(random.choices(_NAME_CHARS, k=5))


class Controller:
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
        elif key == NAMESPACES.key and event.type != "DELETED" and meta.get("deletionTimestamp"):
            self.terminating.add(meta["name"])
        self.cluster.wake()

    @staticmethod
    def _consumes(pod: dict | None) -> bool:
        return bool(pod and pod.get("spec", {}).get("nodeName")
                    and pod.get("status", {}).get("phase") not in _TERMINAL)

    def _account(self, pod: dict | None, sign: int) -> None:
        if not self._consumes(pod):
            return
        if EXCLUSIVE in (pod["metadata"].get("annotations") or {}):
            self.exclusive_active += sign
        used = self.used.setdefault(pod["spec"]["nodeName"], Counter())
        for name, amount in pod_requests(pod["spec"]).items():
            used[name] += sign * amount

    def needs_step(self, now: float) -> bool:
        return bool(self.dirty_jobsets or self.dirty_jobs or self.schedule_needed or self.to_start
                    or self.terminating or self.cluster.rbac.needs_step() or (self.timers and self.timers[0][0] <= now))

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
            elif what == "ttl":
                js = self.store.get(JOBSETS.key, ns, name)
                if js and js["metadata"]["uid"] == uid:
                    self.cluster.delete_object(JOBSETS, ns, name, "Background")
        for _ in range(100):
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
            if not (self.dirty_jobsets or self.dirty_jobs or self.to_start or self.schedule_needed or self.terminating):
                break

    # kubelet -------------------------------------------------------------------------------------
    def _owner_jobset(self, pod: dict) -> dict | None:
        name = (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)
        return self.store.get(JOBSETS.key, pod["metadata"]["namespace"], name) if name else None

    def _knob(self, pod: dict, key: str) -> str | None:
        value = (pod["metadata"].get("annotations") or {}).get(key)
        if value is None:
            js = self._owner_jobset(pod)
            value = (js["metadata"].get("annotations") or {}).get(key) if js else None
        return value

    def _duration(self, pod: dict) -> float:
        value = self._knob(pod, DURATION)
        try:
            return parse_duration(value) if value is not None else self.cluster.default_duration
        except ValueError:
            return self.cluster.default_duration

    def _should_fail(self, pod: dict) -> bool:
        value = self._knob(pod, FAIL)
        if not value:
            return False
        labels = pod["metadata"].get("labels") or {}
        targets = {t.strip() for t in value.split(",")}
        if not ({"true", "*"} & targets or labels.get(RJOB_NAME) in targets):
            return False
        attempts = self._knob(pod, FAIL_ATTEMPTS)
        if attempts is not None and attempts.isdigit():
            return int(labels.get(RESTART_ATTEMPT, "0")) < int(attempts)
        return True

    def _start_pod(self, pod: dict, node: dict, now: float) -> None:
        ts = rfc3339(now)
        image = self._unpullable(pod)
        if image:
            self._pull_fails(pod, image, ts)
            return
        addresses = node.get("status", {}).get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
        self.cluster.pod_ip_seq += 1
        seq = self.cluster.pod_ip_seq
        pod_ip = f"10.{64 + (seq >> 16) % 64}.{(seq >> 8) % 256}.{seq % 256}"
        conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
        statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": True,
                     "started": True, "restartCount": 0, "containerID": f"sim://{pod['metadata']['uid'][:8]}-{i}",
                     "state": {"running": {"startedAt": ts}}, "lastState": {}}
                    for i, c in enumerate(pod["spec"].get("containers") or ())]
        status = {**pod.get("status", {}), "phase": "Running", "conditions": conds, "hostIP": host_ip,
                  "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": ts,
                  "containerStatuses": statuses}
        status.pop("reason", None)
        status.pop("message", None)
        started = self.cluster.write(PODS, {**pod, "status": status})
        self._timer(now + self._duration(pod), "pod", started)

    def _unpullable(self, pod: dict) -> str | None:
        spec = pod["spec"]
        return next((c.get("image", "") for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
                     if any(fnmatch.fnmatchcase(c.get("image", ""), p) for p in self.cluster.unpullable_images)), None)

    def _pull_fails(self, pod: dict, image: str, ts: str) -> None:
        """Bound to its node, holding its resources, and never started: the kubelet backs off pulling."""
        message = f'Back-off pulling image "{image}"'
        if any((s.get("state") or {}).get("waiting", {}).get("message") == message
               for s in pod.get("status", {}).get("containerStatuses") or ()):
            return
        conds = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
                 *({"type": t, "status": "False", "reason": "ContainersNotReady", "lastProbeTime": None,
                    "lastTransitionTime": ts} for t in ("Ready", "ContainersReady"))]
        statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": False,
                     "started": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": message}}}
                    for c in pod["spec"].get("containers") or ()]
        self.cluster.write(PODS, {**pod, "status": {**pod.get("status", {}), "phase": "Pending", "conditions": conds,
                                                    "containerStatuses": statuses, "startTime": ts}})

    def _finish_pod(self, pod: dict, succeeded: bool, now: float, reason: str = "", message: str = "") -> None:
        ts = rfc3339(now)
        status = dict(pod.get("status", {}))
        started = status.get("startTime", ts)
        status["phase"] = "Succeeded" if succeeded else "Failed"
        status["conditions"] = [
            {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": ts}
            if c.get("type") in ("Ready", "ContainersReady") else c for c in status.get("conditions") or ()]
        status["containerStatuses"] = [
            {**s, "ready": False, "started": False,
             "state": {"terminated": {"exitCode": 0 if succeeded else 1, "reason": "Completed" if succeeded else "Error",
                                      "startedAt": started, "finishedAt": ts,
                                      "containerID": s.get("containerID", "")}}}
            for s in status.get("containerStatuses") or ()]
        if reason:
            status["reason"], status["message"] = reason, message or reason
        self.cluster.write(PODS, {**pod, "status": status})

    def _fail_pods_on(self, node_name: str, reason: str, message: str) -> None:
        for pod in list(self.store.items(PODS.key)):
            if pod["spec"].get("nodeName") == node_name and pod.get("status", {}).get("phase") not in _TERMINAL:
                self._finish_pod(pod, False, self.cluster.clock.now(), reason, message)

    def finish_pods(self, pods: Iterable[dict], succeeded: bool) -> int:
        """End running pods now (a test's shortcut through time)."""
        count = 0
        for pod in pods:
            if pod.get("status", {}).get("phase") == "Running":
                self._finish_pod(pod, succeeded, self.cluster.clock.now())
                count += 1
        return count

    # scheduler -----------------------------------------------------------------------------------
    def schedule(self, now: float) -> None:
        if not self.unbound:
            return
        if self._usable is None:
            self._usable = sorted((n for n in self.store.items(NODES.key)
                                   if _ready(n) and not n["spec"].get("unschedulable")),
                                  key=lambda n: n["metadata"]["name"])
        nodes = self._usable
        total = len(self.alloc)
        topology: _Topology | None = None  # built only when exclusive placement is in play
        failed: dict[str, str] = {}
        for ident in list(self.unbound):
            pod = self.store.get(PODS.key, *ident)
            if pod is None or pod["spec"].get("nodeName") or pod.get("status", {}).get("phase") != "Pending" \
                    or pod["metadata"].get("deletionTimestamp"):
                self.unbound.pop(ident, None)
                continue
            if topology is None and (self.exclusive_active or EXCLUSIVE in (pod["metadata"].get("annotations") or {})):
                topology = _Topology(self.store)
            signature = None if topology is not None else _signature(pod)
            if signature is not None and signature in failed:
                self._unschedulable(pod, failed[signature], now)
                continue
            node, why = self._pick(pod, nodes, topology, total)
            if node is None:
                if signature is not None:
                    failed[signature] = why
                self._unschedulable(pod, why, now)
                continue
            self.unbound.pop(ident, None)
            if topology is not None:
                topology.place(pod, node)
            self._start_pod({**pod, "spec": {**pod["spec"], "nodeName": node["metadata"]["name"]}}, node, now)

    def _pick(self, pod: dict, nodes: list[dict], topology: "_Topology | None", total: int) -> tuple[dict | None, str]:
        spec = pod["spec"]
        requests = pod_requests(spec)
        tolerations = spec.get("tolerations") or ()
        reasons: Counter = Counter()
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            name = node["metadata"]["name"]
            if not selects(spec, node):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            taint = repelling_taint(node, tolerations)
            if taint is not None:
                reasons[f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"] += 1
                continue
            alloc, used = self.alloc.get(name) or node_allocatable(node), self.used.get(name) or {}
            short = [r for r, amount in requests.items() if used.get(r, 0) + amount > alloc.get(r, 0)]
            if short:
                for r in short:
                    reasons["Too many pods" if r == "pods" else f"Insufficient {r}"] += 1
                continue
            conflict = topology.conflict(pod, labels) if topology is not None else ""
            if conflict:
                reasons[conflict] += 1
                continue
            return node, ""
        unusable = total - len(nodes)
        if unusable > 0:
            reasons["node(s) were unschedulable or not ready"] += unusable
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        return None, f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."

    def _unschedulable(self, pod: dict, message: str, now: float) -> None:
        conds = pod.get("status", {}).get("conditions") or []
        current = _condition(conds, "PodScheduled")
        if current and current.get("message") == message:
            return
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}
        self.cluster.write(PODS, {**pod, "status": {**pod.get("status", {}), "conditions": [cond]}})

    # Job controller ------------------------------------------------------------------------------
    def _children(self, owner: dict, key: str) -> list[dict]:
        out = []
        for child_key, ns, name in self.store.owned.get(owner["metadata"]["uid"], ()):
            if child_key == key:
                obj = self.store.get(key, ns, name)
                if obj is not None:
                    out.append(obj)
        return out

    def _lagging(self, obj: dict, what: str, now: float) -> bool:
        """A busy controller gets to a new object only `controller_lag` seconds after it appeared."""
        lag, uid = self.cluster.controller_lag, obj["metadata"]["uid"]
        if not lag:
            return False
        if uid not in self.first_seen:
            self.first_seen[uid] = now
            self._timer(now + lag, what, obj)
        return now < self.first_seen[uid] + lag

    def reconcile_job(self, job: dict, now: float) -> None:
        if self._lagging(job, "job", now):
            return
        spec, status = job.get("spec", {}), job.get("status", {})
        pods = self._children(job, PODS.key)
        active = [p for p in pods if p.get("status", {}).get("phase") not in _TERMINAL
                  and not p["metadata"].get("deletionTimestamp")]
        finished = job_finished(job)
        if finished:
            for pod in active:
                self.cluster.delete_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], "Background")
            return
        ts = rfc3339(now)
        indexed = spec.get("completionMode") == "Indexed"
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        target = completions if completions is not None else parallelism
        backoff = spec.get("backoffLimit", 6)
        index_of = lambda p: int((p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", -1))
        succeeded_pods = [p for p in pods if p.get("status", {}).get("phase") == "Succeeded"]
        failed = sum(1 for p in pods if p.get("status", {}).get("phase") == "Failed")
        done_indexes = sorted({index_of(p) for p in succeeded_pods}) if indexed else []
        succeeded = len(done_indexes) if indexed else len(succeeded_pods)
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "Suspended"]
        new_status: dict = {"active": 0, "ready": 0, "succeeded": succeeded, "failed": failed, "terminating": 0,
                            "uncountedTerminatedPods": {}}
        if status.get("startTime"):
            new_status["startTime"] = status["startTime"]
        if indexed and done_indexes:
            new_status["completedIndexes"] = _ranges(done_indexes)
        if spec.get("suspend"):
            for pod in active:
                self.cluster.delete_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], "Background")
            old = _condition(status.get("conditions"), "Suspended")
            conditions.append(old if old and old["status"] == "True" else
                              {"type": "Suspended", "status": "True", "reason": "JobSuspended",
                               "message": "Job suspended", "lastProbeTime": ts, "lastTransitionTime": ts})
            new_status.pop("startTime", None)
        elif failed > backoff:
            for pod in active:
                self.cluster.delete_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], "Background")
            conditions += [{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastProbeTime": ts, "lastTransitionTime": ts},
                           {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit",
                            "lastProbeTime": ts, "lastTransitionTime": ts}]
        elif succeeded >= target:
            for pod in active:
                self.cluster.delete_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], "Background")
            conditions += [{"type": t, "status": "True", "reason": "CompletionsReached",
                            "message": "Reached expected number of succeeded pods",
                            "lastProbeTime": ts, "lastTransitionTime": ts} for t in ("SuccessCriteriaMet", "Complete")]
            new_status["completionTime"] = ts
        else:
            new_status.setdefault("startTime", ts)
            if indexed:
                busy = {index_of(p) for p in active} | set(done_indexes)
                for index in range(target):
                    if len(active) >= parallelism:
                        break
                    if index not in busy:
                        active.append(self._create_pod(job, index))
            else:
                for _ in range(min(parallelism, target - succeeded) - len(active)):
                    active.append(self._create_pod(job, None))
            new_status["active"] = len(active)
            new_status["ready"] = sum(1 for p in active if _is_true(p, "Ready"))
        if conditions:
            new_status["conditions"] = conditions
        if new_status != status:
            self.cluster.write(JOBS, {**job, "status": new_status})

    def _create_pod(self, job: dict, index: int | None) -> dict:
        meta, template = job["metadata"], job["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), "batch.kubernetes.io/controller-uid": meta["uid"],
                  "batch.kubernetes.io/job-name": meta["name"], "controller-uid": meta["uid"], "job-name": meta["name"]}
        annotations = dict(tmeta.get("annotations") or {})
        spec = copy.deepcopy(template.get("spec") or {})
        prefix = f"{meta['name']}-"
        if index is not None:
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
            prefix = f"{meta['name']}-{index}-"
            spec.setdefault("hostname", f"{meta['name']}-{index}")
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": prefix + _suffix(), "generateName": prefix, "namespace": meta["namespace"],
                            "labels": labels, "annotations": annotations,
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
               "spec": spec}
        return self.cluster.create_internal(PODS, pod)

    # JobSet controller ---------------------------------------------------------------------------
    def reconcile_jobset(self, js: dict, now: float) -> None:
        meta, spec = js["metadata"], js.get("spec", {})
        if meta.get("deletionTimestamp") or spec.get("managedBy", JOBSET_CONTROLLER) != JOBSET_CONTROLLER \
                or self._lagging(js, "jobset", now):
            return
        status = js.get("status") or {}
        new = dict(status)
        restarts = status.get("restarts", 0)
        jobs = self._children(js, JOBS.key)
        previous, active, succeeded, failed = [], [], [], []
        for job in jobs:
            attempt = int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0"))
            state = job_finished(job)
            (previous if attempt < restarts else failed if state == "Failed"
             else succeeded if state == "Complete" else active).append(job)
        new["replicatedJobsStatus"] = self._rjob_statuses(spec, active, succeeded, failed)
        conditions = [dict(c) for c in status.get("conditions") or ()]
        ns = meta["namespace"]
        if _finished_conditions(conditions):
            for job in active:
                self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
            self._save_status(js, new, conditions, now)
            return
        for job in previous:
            self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
        if failed:
            self._failure_policy(js, new, conditions, failed, now)
        elif succeeded and self._success(spec, succeeded):
            _set_condition(conditions, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", now)
            new["terminalState"] = "Completed"
        else:
            self._ensure_service(js)
            self._create_jobs(js, spec, new, conditions, jobs, previous, now)
            self._suspend_or_resume(js, spec, new, conditions, active, now)
        if _finished_conditions(conditions):
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None:
                self._timer(now + ttl, "ttl", js)
            for job in active:
                self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
        self._save_status(js, new, conditions, now)

    def _save_status(self, js: dict, status: dict, conditions: list[dict], now: float) -> None:
        if conditions:
            status["conditions"] = conditions
        if self.cluster.jobset_counts == "omitted":
            del status["replicatedJobsStatus"]
        elif self.cluster.jobset_counts == "lagging":
            self._lag_counts(js, status, now)
        if status != (js.get("status") or {}):
            self.cluster.write(JOBSETS, {**js, "status": status})

    def _lag_counts(self, js: dict, status: dict, now: float) -> None:
        """A new condition goes out with the counts shown before it; the counts follow a second later."""
        uid, before = js["metadata"]["uid"], js.get("status") or {}
        held = self.held_counts.get(uid)
        if held is None and status.get("conditions") != before.get("conditions"):
            held = self.held_counts[uid] = (now + 1, before.get("replicatedJobsStatus") or [])
            self._timer(held[0], "jobset", js)
        if held is not None and now < held[0]:
            status["replicatedJobsStatus"] = held[1]
        else:
            self.held_counts.pop(uid, None)

    @staticmethod
    def _rjob_statuses(spec: dict, active: list, succeeded: list, failed: list) -> list[dict]:
        counts = {r["name"]: {"name": r["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
                  for r in spec.get("replicatedJobs") or ()}
        for job in active:
            entry = counts.get((job["metadata"].get("labels") or {}).get(RJOB_NAME))
            if entry is None:
                continue
            jspec, jstatus = job.get("spec", {}), job.get("status", {})
            pods = jspec.get("parallelism", 1)
            if jspec.get("completions") is not None:
                pods = min(pods, jspec["completions"])
            if jstatus.get("succeeded", 0) + jstatus.get("ready", 0) >= pods:
                entry["ready"] += 1
            if jstatus.get("active", 0) > 0:
                entry["active"] += 1
            if jspec.get("suspend"):
                entry["suspended"] += 1
        for jobs, field in ((succeeded, "succeeded"), (failed, "failed")):
            for job in jobs:
                entry = counts.get((job["metadata"].get("labels") or {}).get(RJOB_NAME))
                if entry is not None:
                    entry[field] += 1
        return list(counts.values())

    @staticmethod
    def _success(spec: dict, succeeded: list[dict]) -> bool:
        policy = spec.get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or [r["name"] for r in spec.get("replicatedJobs") or ()]
        matching = sum(1 for j in succeeded if (j["metadata"].get("labels") or {}).get(RJOB_NAME) in targets)
        if policy.get("operator") == "Any":
            return matching >= 1
        expected = sum(r.get("replicas", 1) for r in spec.get("replicatedJobs") or () if r["name"] in targets)
        return matching >= expected

    def _failure_policy(self, js: dict, status: dict, conditions: list[dict], failed: list[dict], now: float) -> None:
        policy = js["spec"].get("failurePolicy")
        if policy is None:
            _set_condition(conditions, "Failed", "True", "FailedJobs", "jobset failed due to one or more job failures", now)
            status["terminalState"] = "Failed"
            return
        first = min(failed, key=lambda j: _failed_at(j))
        rjob = (first["metadata"].get("labels") or {}).get(RJOB_NAME)
        reason = (_condition(first.get("status", {}).get("conditions"), "Failed") or {}).get("reason", "")
        action = "RestartJobSet"
        for rule in policy.get("rules") or ():
            if rule.get("targetReplicatedJobs") and rjob not in rule["targetReplicatedJobs"]:
                continue
            if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
                continue
            action = rule["action"]
            break
        if action == "FailJobSet":
            _set_condition(conditions, "Failed", "True", "FailJobSetFailurePolicyAction",
                           "applying FailJobSet failure policy action", now)
            status["terminalState"] = "Failed"
            return
        counted = action in ("RestartJobSet", "RestartJob")
        if counted and status.get("restartsCountTowardsMax", 0) >= policy.get("maxRestarts", 0):
            _set_condition(conditions, "Failed", "True", "ReachedMaxRestarts",
                           "jobset failed due to reaching max number of restarts", now)
            status["terminalState"] = "Failed"
            return
        status["restarts"] = status.get("restarts", 0) + 1
        if counted:
            status["restartsCountTowardsMax"] = status.get("restartsCountTowardsMax", 0) + 1
        self.dirty_jobsets.add((js["metadata"]["namespace"], js["metadata"]["name"]))

    def _ensure_service(self, js: dict) -> None:
        network = js["spec"].get("network") or {}
        if not network.get("enableDNSHostnames"):
            return
        name = network.get("subdomain") or js["metadata"]["name"]
        ns = js["metadata"]["namespace"]
        if self.store.get(SERVICES.key, ns, name) is not None:
            return
        self.cluster.create_internal(SERVICES, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [_owner_ref(js)]},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "selector": {JOBSET_NAME: js["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
                     "type": "ClusterIP", "ports": []}})

    def _create_jobs(self, js: dict, spec: dict, status: dict, conditions: list[dict], jobs: list[dict],
                     previous: list[dict], now: float) -> None:
        strategy = (spec.get("failurePolicy") or {}).get("restartStrategy")
        if previous and strategy == "BlockingRecreate":
            return
        stale = {id(j) for j in previous}
        existing = {j["metadata"]["name"] for j in jobs if id(j) not in stale}
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" and not spec.get("suspend")
        rstatus = {s["name"]: s for s in status["replicatedJobsStatus"]}
        replicas = {r["name"]: r.get("replicas", 1) for r in spec.get("replicatedJobs") or ()}
        for global_base, rjob in _with_global_base(spec):
            current = rstatus.get(rjob["name"], {})
            if not all(_dependency_met(dep, replicas, rstatus) for dep in rjob.get("dependsOn") or ()):
                continue
            if in_order and current.get("ready", 0) == rjob.get("replicas", 1):
                continue
            for index in range(rjob.get("replicas", 1)):
                name = f"{js['metadata']['name']}-{rjob['name']}-{index}"
                if name not in existing:
                    self.cluster.create_internal(JOBS, self._construct_job(js, rjob, index, global_base + index))
            if in_order:
                _set_condition(conditions, "StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress",
                               "in order startup policy is in progress", now)
                return
        if in_order:
            _set_condition(conditions, "StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted",
                           "in order startup policy has completed", now)

    def _construct_job(self, js: dict, rjob: dict, index: int, global_index: int) -> dict:
        meta, spec = js["metadata"], js["spec"]
        name = f"{meta['name']}-{rjob['name']}-{index}"
        template = copy.deepcopy(rjob["template"])
        restarts = (js.get("status") or {}).get("restarts", 0)
        total = sum(r.get("replicas", 1) for r in spec["replicatedJobs"])
        tags = {JOBSET_NAME: meta["name"], RJOB_NAME: rjob["name"], RESTART_ATTEMPT: str(restarts),
                RJOB_REPLICAS: str(rjob.get("replicas", 1)), GLOBAL_REPLICAS: str(total), JOB_INDEX: str(index),
                JOB_KEY: hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
                JOB_GLOBAL_INDEX: str(global_index)}
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or meta["name"]
        coordinator = spec.get("coordinator")
        if coordinator:
            tags[COORDINATOR] = (f"{meta['name']}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
                                 f"{coordinator.get('podIndex', 0)}.{subdomain}")
        extra = {}
        for source in ((meta.get("annotations") or {}), (rjob["template"].get("metadata") or {}).get("annotations") or {}):
            if EXCLUSIVE in source:
                extra[EXCLUSIVE] = source[EXCLUSIVE]
        job_spec = template.get("spec") or {}
        pod = job_spec.setdefault("template", {})
        pmeta = pod.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **tags}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **tags, **extra}
        if network.get("enableDNSHostnames"):
            pod.setdefault("spec", {})["subdomain"] = subdomain
        job_spec["suspend"] = bool(spec.get("suspend"))
        tmeta = template.get("metadata") or {}
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "labels": {**(tmeta.get("labels") or {}), **tags},
                             "annotations": {**(tmeta.get("annotations") or {}), **tags, **extra},
                             "ownerReferences": [_owner_ref(js)]},
                "spec": job_spec}

    def _suspend_or_resume(self, js: dict, spec: dict, status: dict, conditions: list[dict], active: list[dict],
                           now: float) -> None:
        if spec.get("suspend"):
            for job in active:
                if not job["spec"].get("suspend"):
                    self.cluster.write(JOBS, {**job, "spec": {**job["spec"], "suspend": True}}, bump=True)
            _set_condition(conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
            return
        templates = {r["name"]: (r["template"]["spec"].get("template") or {}) for r in spec.get("replicatedJobs") or ()}
        for job in active:
            if not job["spec"].get("suspend"):
                continue
            source = templates.get((job["metadata"].get("labels") or {}).get(RJOB_NAME), {})
            pod = job["spec"].get("template") or {}
            pmeta, pspec = dict(pod.get("metadata") or {}), dict(pod.get("spec") or {})
            smeta, sspec = source.get("metadata") or {}, source.get("spec") or {}
            pmeta["labels"] = {**(pmeta.get("labels") or {}), **(smeta.get("labels") or {})}
            pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **(smeta.get("annotations") or {})}
            for field in ("nodeSelector",):
                if sspec.get(field):
                    pspec[field] = {**(pspec.get(field) or {}), **sspec[field]}
            for field in ("tolerations", "schedulingGates"):
                for item in sspec.get(field) or ():
                    pspec.setdefault(field, [])
                    if item not in pspec[field]:
                        pspec[field] = [*pspec[field], item]
            if sspec.get("affinity"):
                pspec["affinity"] = sspec["affinity"]
            job_status = {k: v for k, v in job.get("status", {}).items() if k != "startTime"}
            self.cluster.write(JOBS, {**job, "spec": {**job["spec"], "suspend": False,
                                                     "template": {**pod, "metadata": pmeta, "spec": pspec}},
                                      "status": job_status}, bump=True)
        if _condition(conditions, "Suspended"):
            _set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)


class _Topology:
    """Who holds which exclusive-topology domain, for the JobSet exclusive placement rule:
    a child Job's pods share one domain, and no other Job's pods may enter it (both directions,
    as the pod affinity/anti-affinity the JobSet webhook injects behave)."""

    def __init__(self, store) -> None:
        self.nodes = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in store.items(NODES.key)}
        self.exclusive: dict[str, dict[str, str]] = {}  # topology key -> domain -> job key
        self.job_domain: dict[tuple[str, str], str] = {}  # (topology key, job key) -> domain
        self.occupants: dict[tuple[str, str], set[str]] = {}  # (topology key, domain) -> job keys
        self.indexed: set[str] = set()
        self.pods = [p for p in store.items(PODS.key) if p["spec"].get("nodeName")
                     and p.get("status", {}).get("phase") not in _TERMINAL
                     and JOB_KEY in (p["metadata"].get("labels") or {})]
        for pod in self.pods:
            key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
            if key:
                self._claim(pod, key)

    def _index(self, key: str) -> None:
        if key in self.indexed:
            return
        self.indexed.add(key)
        for pod in self.pods:
            domain = self.nodes.get(pod["spec"]["nodeName"], {}).get(key)
            if domain is not None:
                self.occupants.setdefault((key, domain), set()).add(pod["metadata"]["labels"][JOB_KEY])

    def _claim(self, pod: dict, key: str) -> None:
        self._index(key)
        domain = self.nodes.get(pod["spec"]["nodeName"], {}).get(key)
        if domain is not None:
            job = pod["metadata"]["labels"][JOB_KEY]
            self.exclusive.setdefault(key, {})[domain] = job
            self.job_domain[(key, job)] = domain

    def conflict(self, pod: dict, labels: dict) -> str:
        job = (pod["metadata"].get("labels") or {}).get(JOB_KEY)
        key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
        if key:
            domain = labels.get(key)
            if domain is None:
                return f"node(s) didn't have the exclusive topology label {key}"
            mine = self.job_domain.get((key, job))
            if mine is not None and mine != domain:
                return "node(s) didn't match pod affinity rules"
            self._index(key)
            if self.occupants.get((key, domain), set()) - {job}:
                return "node(s) didn't match pod anti-affinity rules"
            return ""
        if job:
            for topo, domains in self.exclusive.items():
                owner = domains.get(labels.get(topo, "\0"))
                if owner is not None and owner != job:
                    return "node(s) didn't satisfy existing pods anti-affinity rules"
        return ""

    def place(self, pod: dict, node: dict) -> None:
        labels = pod["metadata"].get("labels") or {}
        if JOB_KEY not in labels:
            return
        pod = {**pod, "spec": {**pod["spec"], "nodeName": node["metadata"]["name"]}}
        self.pods.append(pod)
        node_labels = node["metadata"].get("labels") or {}
        for key in self.indexed:
            if key in node_labels:
                self.occupants.setdefault((key, node_labels[key]), set()).add(labels[JOB_KEY])
        key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
        if key:
            self._claim(pod, key)


def _signature(pod: dict) -> str:
    """Pods that ask for the same thing fit or fail alike: try each kind once per pass."""
    spec = pod["spec"]
    return json.dumps([sorted(pod_requests(spec).items()), spec.get("nodeSelector"), spec.get("affinity"),
                       spec.get("tolerations"), JOB_KEY in (pod["metadata"].get("labels") or {})],
                      sort_keys=True, default=str)


def _ranges(indexes: list[int]) -> str:
    parts, start = [], None
    for i, value in enumerate(indexes):
        if start is None:
            start = value
        if i + 1 == len(indexes) or indexes[i + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts)


def _owner_ref(js: dict) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": js["metadata"]["name"],
            "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _failed_at(job: dict) -> str:
    return (_condition(job.get("status", {}).get("conditions"), "Failed") or {}).get("lastTransitionTime", "")


def _finished_conditions(conditions: list[dict]) -> bool:
    return any(c.get("type") in ("Completed", "Failed") and c.get("status") == "True" for c in conditions)


def _set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str, now: float) -> None:
    """The real controller's rule: change on status flip, append only when True, and
    StartupPolicyInProgress/Completed exclude each other."""
    exclusive = {"StartupPolicyInProgress": "StartupPolicyCompleted", "StartupPolicyCompleted": "StartupPolicyInProgress"}
    found = False
    for i, cond in enumerate(conditions):
        if cond["type"] == type_:
            found = True
            if cond["status"] != status:
                conditions[i] = {"type": type_, "status": status, "reason": reason, "message": message,
                                 "lastTransitionTime": rfc3339(now)}
        elif exclusive.get(type_) == cond["type"] and cond["status"] == "True" and status == "True":
            conditions[i] = {**cond, "status": "False"}
    if not found and status == "True":
        conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": rfc3339(now)})


def _with_global_base(spec: dict):
    base = 0
    for rjob in spec.get("replicatedJobs") or ():
        yield base, rjob
        base += rjob.get("replicas", 1)


def _dependency_met(dep: dict, replicas: dict[str, int], statuses: dict[str, dict]) -> bool:
    status = statuses.get(dep["name"], {})
    wanted = replicas.get(dep["name"], 0)
    if dep.get("status") == "Complete":
        return status.get("succeeded", 0) >= wanted
    return status.get("ready", 0) + status.get("succeeded", 0) >= wanted
