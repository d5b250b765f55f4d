"""The simulated Job controller: a Job's pods created up to its parallelism and completions, its counts and
conditions kept, its backoff limit enforced."""

from __future__ import annotations

import copy

from clusters.sim.clock import rfc3339
from clusters.sim.objects import TERMINAL, condition, job_finished, name_suffix
from clusters.sim.resources import JOBS, PODS
from clusters.sim.store import ApiError


class JobController:
    """A part of `Controller`, whose `__init__` sets the state it reads."""

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
        if job["metadata"].get("deletionTimestamp") or self._lagging(job, "job", now):
            return  # a Job being deleted makes no pods (its foreground deletion waits for them to go)
        spec, status = job.get("spec", {}), job.get("status", {})
        pods = self._children(job, PODS.key)
        active = [p for p in pods if p.get("status", {}).get("phase") not in TERMINAL
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
            old = condition(status.get("conditions"), "Suspended")
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
                        active += self._create_pod(job, index)
            else:
                for _ in range(min(parallelism, target - succeeded) - len(active)):
                    active += self._create_pod(job, None)
            new_status["active"] = len(active)
            new_status["ready"] = sum(1 for p in active if _is_true(p, "Ready"))
        if conditions:
            new_status["conditions"] = conditions
        if new_status != status:
            self.cluster.write(JOBS, {**job, "status": new_status})

    def _create_pod(self, job: dict, index: int | None) -> list[dict]:
        """The pod made, or none where admission (the namespace's Pod Security level) refused it: the Job waits
        and tries again, as a real Job controller does after its FailedCreate event."""
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
               "metadata": {"name": prefix + name_suffix(), "generateName": prefix, "namespace": meta["namespace"],
                            "labels": labels, "annotations": annotations,
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
               "spec": spec}
        try:
            return [self.cluster.create_internal(PODS, pod)]
        except ApiError:
            return []


def _is_true(obj: dict, type_: str) -> bool:
    cond = condition(obj.get("status", {}).get("conditions"), type_)
    return bool(cond and cond.get("status") == "True")


def _ranges(indexes: list[int]) -> str:
    parts, start = [], None
    for i, value in enumerate(indexes):
        if start is None:
            start = value
        if i + 1 == len(indexes) or indexes[i + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts)
